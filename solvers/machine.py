"""The machine a run is on: its memory, read once per question, and the refusal of what cannot fit in it.

``device_memory`` is an accelerator's memory (total and free, as JAX's allocator reports it, so that JAX's own
``XLA_PYTHON_CLIENT_MEM_FRACTION`` and the like are honoured), for sizing the compiled calls that run there
(``experiments/run/plan.py``); on CPUs the device's memory is the machine's.

``machine_bytes`` is the physical memory (or a smaller container limit), not the memory free at the
moment: a run is refused when it can never fit, not because other programs happen to be running. The
experiments' estimates (``experiments/run/memory.py``) and the solvers that allocate by their arguments
(the mean-field grids and tables) ask it before they allocate.

``check_parts`` is the one preflight of the commands and functions whose arrays grow with their arguments
(the pairwise n×n arrays of ``probe`` and ``hist``, the d×d weights of ``fit``, the (n·d)² Jacobian of
``equilibrium`` and ``continuation``): given the bytes of each part, it refuses in one line naming the
largest part, before anything is allocated.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from ..particles.errors import InputError

__all__ = ["machine_bytes", "device_memory", "accelerated", "format_bytes", "check_memory", "check_parts"]


def _meminfo_bytes(field: str) -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


def machine_bytes() -> int | None:
    """The memory of this machine in bytes (its physical memory, or a smaller container limit); None if unknown.

    Physical memory, not the memory free at the moment: a run is refused when it can never fit,
    not because other programs happen to be running.
    """
    total = _meminfo_bytes("MemTotal")
    if total is None:
        try:
            total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            total = None
    limit = _cgroup_limit()
    if limit is not None:
        total = limit if total is None else min(total, limit)
    return total if total and total > 0 else None


def accelerated() -> bool:
    """Whether JAX's default backend is an accelerator (a GPU or TPU), whose memory is its own."""
    import jax

    return jax.default_backend() != "cpu"


def device_memory() -> tuple[int, int] | None:
    """(total, free) bytes of the default accelerator's memory, as its allocator reports them (``bytes_limit``
    and what is not ``bytes_in_use``); None on CPUs or where the backend reports no memory statistics."""
    import jax

    if not accelerated():
        return None
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # a backend without memory statistics: sized as on a CPU
        return None
    total = stats.get("bytes_limit")
    if not total:
        return None
    return int(total), max(0, int(total) - int(stats.get("bytes_in_use", 0)))


def format_bytes(nbytes: int) -> str:
    """Bytes in GiB, TiB or PiB, for messages."""
    unit, scale = next(
        (u, s) for u, s in (("GiB", 2**30), ("TiB", 2**40), ("PiB", 2**50)) if nbytes < 1024 * s or u == "PiB"
    )
    value = nbytes / scale
    return f"{value:.1f} {unit}" if value < 1e6 else f"{value:.2g} {unit}"


def check_memory(need: int, who: str, remedy: str) -> None:
    """Raise one InputError line when ``need`` bytes exceed :func:`machine_bytes` (nothing when it is unknown)."""
    have = machine_bytes()
    if have is not None and need > have:
        raise InputError(
            f"{who} needs about {format_bytes(need)} of memory, more than this machine's {format_bytes(have)}: {remedy}"
        )


def check_parts(
    parts: Mapping[str, int], who: str, remedy: str | Mapping[str, str], *, on_device: Iterable[str] = ()
) -> None:
    """Refuse, in one InputError line, arrays that cannot fit: ``parts`` maps what holds them (``"the pairwise
    n×n arrays [2000 tokens]"``) to their bytes, estimated from the arguments before anything is allocated.

    The message gives the total, the largest part and its size, the machine's memory and ``remedy`` (what
    shrinks it, "try ..."; a mapping gives the remedy of each part, that of the largest is named). The parts
    named in ``on_device`` are JAX's arrays: on an accelerator they are checked against its memory
    (:func:`device_memory`), the others against the host's. Nothing is refused where the memory cannot be read.
    """
    parts = {what: max(0, int(size)) for what, size in parts.items()}
    device = set(on_device) & set(parts)
    memory = device_memory() if device else None
    groups = [(parts, machine_bytes(), "this machine's")]
    if memory is not None:
        groups = [
            ({k: v for k, v in parts.items() if k in device}, memory[0], "the accelerator's"),
            ({k: v for k, v in parts.items() if k not in device}, machine_bytes(), "this machine's"),
        ]
    for held, have, whose in groups:
        need = sum(held.values())
        if have is None or not held or need <= have:
            continue
        largest = max(held, key=lambda part: held[part])
        advice = remedy if isinstance(remedy, str) else remedy[largest]
        raise InputError(
            f"{who} needs about {format_bytes(need)} of memory (mostly {largest}, {format_bytes(held[largest])}), "
            f"more than {whose} {format_bytes(have)}; try {advice}"
        )
