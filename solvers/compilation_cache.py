"""JAX's persistent compilation cache, for processes that compile the same programs again.

A run spends most of its start-up compiling its integration loop; with the cache on, a later
process of the same shapes (and solver, statistics, dtype) loads the compiled program from disk
instead, and the loop's traced program too (``programs.py``, in ``programs/`` of the same directory),
so that it is not traced again. The cache is on by default, in ``default_cache_dir()``, for the
command line and for Python alike: ``attnflow run``, ``sweep`` and ``validate`` turn it on before they
compile (``--no-cache`` keeps it off); in Python attnflow turns it on at its first compiled program
(``enable_by_default``, from ``programs.Program``), unless the process has chosen already
(``enable_compilation_cache(path)``, ``disable_compilation_cache()``, or JAX's own
``jax_compilation_cache_dir``, whose directory is then used). ATTNFLOW_CACHE_DIR=off turns it off for
both. $ATTNFLOW_PROGRAMS_MAX_SIZE caps ``programs/`` (default 1 GiB; its least recently used entries
are evicted beyond it); JAX's own ``jax_compilation_cache_max_size`` caps the compiled programs.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

ENV_VAR = "ATTNFLOW_CACHE_DIR"
PROGRAMS_SIZE_VAR = "ATTNFLOW_PROGRAMS_MAX_SIZE"
PROGRAMS_SIZE_DEFAULT = 1 << 30
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}
_OFF = ("off", "0", "false", "no", "none")
_warned = False
_chosen = False  # whether this process has chosen the cache's place or that it is off (then no default applies)


def default_cache_dir() -> Path | None:
    """Where compiled programs go: $ATTNFLOW_CACHE_DIR, else $XDG_CACHE_HOME/attnflow/jax, else
    ~/.cache/attnflow/jax. None when ATTNFLOW_CACHE_DIR is "off" (or 0, false, no, none)."""
    value = os.environ.get(ENV_VAR, "").strip()
    if value.lower() in _OFF:
        return None
    if value:
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "attnflow" / "jax"


def programs_size_cap() -> int:
    """The most bytes the stored programs (``programs/``) may hold: $ATTNFLOW_PROGRAMS_MAX_SIZE, in bytes
    (``1000000``) or with a binary unit (``512MiB``, ``2GiB``; KiB, MiB, GiB, TiB); default 1 GiB.
    ValueError for anything else."""
    value = os.environ.get(PROGRAMS_SIZE_VAR, "").strip()
    if not value:
        return PROGRAMS_SIZE_DEFAULT
    match = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([A-Za-z]*)", value)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{PROGRAMS_SIZE_VAR}={value!r} is not a size: give bytes (1073741824) or a number with a unit "
            "of KiB, MiB, GiB or TiB (1GiB, 512MiB)"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path | None:
    """Keep compiled programs on disk so that later processes of the same shapes skip compilation.

    path   the cache directory (created if missing); default ``default_cache_dir()``, i.e.
           $ATTNFLOW_CACHE_DIR, else $XDG_CACHE_HOME/attnflow/jax, else ~/.cache/attnflow/jax.
           With no path and ATTNFLOW_CACHE_DIR=off the cache stays off.

    attnflow calls it with no path at its first compiled program unless the process has chosen already
    (``enable_by_default``): call it only to put the cache elsewhere.

    Returns the directory in use, or None when the cache stays off. A directory that cannot be
    created or written is reported once (a RuntimeWarning) and leaves the cache off: nothing
    else changes. Every compilation is cached, however short (JAX's default keeps only those
    over a second). Programs compiled before the call are not
    cached, nor taken from the cache. It sets JAX's global options
    ``jax_compilation_cache_dir``, ``jax_persistent_cache_min_compile_time_secs`` and
    ``jax_persistent_cache_min_entry_size_bytes``. Delete the directory to clear the cache. The traced
    programs kept in its ``programs/`` are capped by $ATTNFLOW_PROGRAMS_MAX_SIZE (``programs_size_cap``;
    a value that is not a size raises ValueError before anything changes).

    JAX does not cache programs that call back into Python: progress bars (``progress=True``)
    and the runtime checks equinox compiles into diffrax's adaptive solves (diffrax's checks of the
    save times), unless the environment sets ``EQX_ON_ERROR=nan`` before equinox is imported, as
    ``import attnflow`` does while the cache is not off, and the ``attnflow`` program. ``simulate`` clips
    its save times into [t0, t1] and checks each member's solver status itself, so attnflow's results do
    not rely on those checks.
    """
    global _chosen
    import jax

    programs_size_cap()  # a bad cap is refused before anything changes
    _chosen = True
    target = Path(path).expanduser() if path is not None else default_cache_dir()
    if target is None:
        return None
    target = target.absolute()
    try:
        target.mkdir(parents=True, exist_ok=True)
        if not os.access(target, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as err:
        _warn_once(f"attnflow: compilation cache off: cannot use {str(target)!r} ({err.strerror or err})")
        return None
    current = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # options are set at run time
    if current is not None and current != str(target):
        from jax.experimental.compilation_cache import compilation_cache

        compilation_cache.reset_cache()  # the cache object is bound to the old directory
    jax.config.update("jax_compilation_cache_dir", str(target))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return target


def disable_compilation_cache() -> None:
    """Keep compiled programs off the disk for this process (the command line's ``--no-cache``): attnflow's
    default no longer turns the cache on, a cache turned on before is turned off (JAX's
    ``jax_compilation_cache_dir`` unset), and ATTNFLOW_CACHE_DIR is set to ``off`` so that the processes this
    one starts (a sweep's local Dask workers) keep it off too."""
    global _chosen
    import jax

    _chosen = True
    os.environ[ENV_VAR] = "off"
    if jax.config.jax_compilation_cache_dir is not None:  # type: ignore[attr-defined]  # options set at run time
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", None)
        compilation_cache.reset_cache()


def enable_by_default() -> Path | None:
    """attnflow's default, asked before each compiled program (``programs.Program``), acting once: the cache
    turned on in ``default_cache_dir()`` (what ``enable_compilation_cache()`` does, ATTNFLOW_CACHE_DIR=off
    included) unless this process has chosen already: ``enable_compilation_cache`` or
    ``disable_compilation_cache`` called (the command line calls one before it compiles), or JAX's own
    ``jax_compilation_cache_dir`` set, which is then kept (the stored programs go in its ``programs/``).
    Returns the directory in use, or None while the cache is off."""
    global _chosen
    import jax

    current = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # options are set at run time
    if _chosen or current is not None:
        _chosen = True
        return None if current is None else Path(current)
    return enable_compilation_cache()


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(message, RuntimeWarning, stacklevel=3)
