"""Every compilation of the process, by program: a debug log line each, and counts and seconds for a run.

XLA compiles a program the first time a shape, dtype or static argument is seen; the persistent compilation
cache (``compilation_cache.py``) and the stored programs (``programs.py``) turn later processes' compilations into
loads. What a figure costs before its members run is the sum of these, so attnflow counts them: each compilation
is logged on the ``attnflow`` logger at debug level ("compiled jit(run_dense) in 0.734 s", or "loaded … from the
compilation cache"), and ``record()`` collects those of a stretch of code, which the runner does for every run
(``summary.json``'s ``compilations``).

The durations come from JAX's public monitoring events: the backend compilation of a program
(``COMPILE_EVENT``, with the program's name as metadata; it also times a load from the persistent cache) and the
cache's hit (``CACHE_HIT_EVENT``), recorded while the same program compiles. Tracing and lowering are not
included: they are JAX's, the same on every backend, and a stored program skips them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import jax

__all__ = ["COMPILE_EVENT", "CACHE_HIT_EVENT", "Compilation", "Compilations", "record"]

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
"""JAX's monitoring event for one program's backend compilation (or its load from the persistent cache)."""

CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
"""JAX's monitoring event for a program found in the persistent compilation cache."""

log = logging.getLogger("attnflow")


@dataclass(frozen=True)
class Compilation:
    """One program compiled: its name as JAX gives it (``jit(run_dense)``), the seconds, and whether the
    executable came from the persistent compilation cache instead of the compiler."""

    name: str
    seconds: float
    cached: bool


@dataclass
class Compilations:
    """The compilations of a stretch of code (``record``), in order."""

    items: list[Compilation] = field(default_factory=list)

    @property
    def compiled(self) -> list[Compilation]:
        """Those the compiler made (not loaded from the persistent cache)."""
        return [c for c in self.items if not c.cached]

    @property
    def seconds(self) -> float:
        """Seconds spent by the compiler (loads from the cache not counted)."""
        return float(sum(c.seconds for c in self.compiled))

    def by_program(self) -> dict[str, dict[str, float | int]]:
        """Program name → its compilations (count), the compiler's seconds, and its loads from the cache."""
        out: dict[str, dict[str, float | int]] = {}
        for c in self.items:
            row = out.setdefault(c.name, {"compiled": 0, "seconds": 0.0, "cached": 0})
            if c.cached:
                row["cached"] = int(row["cached"]) + 1
            else:
                row["compiled"] = int(row["compiled"]) + 1
                row["seconds"] = float(row["seconds"]) + c.seconds
        return out

    def summary(self) -> dict:
        """What ``summary.json`` records: counts, the compiler's seconds, and the table by program."""
        return {
            "compiled": len(self.compiled),
            "cached": len(self.items) - len(self.compiled),
            "seconds": round(self.seconds, 3),
            "by_program": {
                name: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}
                for name, row in self.by_program().items()
            },
        }


class _Listener:
    """The process's one listener on JAX's events, handing each compilation to the open recorders."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open: list[Compilations] = []
        self.hit = threading.local()
        jax.monitoring.register_event_listener(self.on_event)
        jax.monitoring.register_event_duration_secs_listener(self.on_duration)

    def on_event(self, event: str, **kwargs: str | int) -> None:
        if event == CACHE_HIT_EVENT:
            self.hit.value = True

    def on_duration(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event != COMPILE_EVENT:
            return
        cached = bool(getattr(self.hit, "value", False))
        self.hit.value = False
        name = str(kwargs.get("fun_name", "?"))
        if cached:
            log.debug("loaded %s from the compilation cache in %.3f s", name, duration_secs)
        else:
            log.debug("compiled %s in %.3f s", name, duration_secs)
        with self.lock:
            for recorder in self.open:
                recorder.items.append(Compilation(name, float(duration_secs), cached))


_LISTENER: list[_Listener] = []
_LISTENER_LOCK = threading.Lock()


def _listener() -> _Listener:
    with _LISTENER_LOCK:
        if not _LISTENER:
            _LISTENER.append(_Listener())
        return _LISTENER[0]


def listen() -> None:
    """Log every compilation of the process from now on (``record`` does this too)."""
    _listener()


@contextlib.contextmanager
def record() -> Iterator[Compilations]:
    """The compilations made inside the ``with`` block (nested blocks each see theirs)."""
    listener = _listener()
    out = Compilations()
    with listener.lock:
        listener.open.append(out)
    try:
        yield out
    finally:
        with listener.lock:  # by identity: two blocks' records may be equal (both empty) while they are open
            listener.open[:] = [other for other in listener.open if other is not out]
