"""Progress of long integrations, printed to stderr.

The time loops run in calls of about a second and report between them (``loop.segments``, ``loop.bounded``), calling
the module-level ``report``; a loop that runs in one call (on several devices, or under the caller's trace) calls it,
or ``report_fraction``, from inside through ``jax.debug.callback``. It forwards to whichever ``Progress`` is active.
Keeping the callback a fixed function (rather than a bound method of a fresh object) means turning progress on
never triggers a recompilation beyond the first.
"""

from __future__ import annotations

import sys
import time

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

_active: Progress | None = None


class Progress:
    """Context manager that prints simulated time against t1, at most every ``interval`` seconds."""

    def __init__(
        self, t0: float, t1: float, members: int, *, label: str = "simulate", interval: float = 0.5, stream=None
    ):
        self.t0, self.t1 = float(t0), float(t1)
        self.label = label
        self.interval = interval
        self.stream = sys.stderr if stream is None else stream
        self.latest = np.full(max(members, 1), self.t0)
        self.start = 0.0
        self.last_print = 0.0
        self.printed = False

    def __enter__(self):
        global _active
        self.start = self.last_print = time.perf_counter()
        _active = self
        return self

    def __exit__(self, *exc):
        global _active
        _active = None
        if self.printed or exc[0] is None:
            self._print(final=exc[0] is None)
            self.stream.write("\n")
            self.stream.flush()
        return False

    def update_fraction(self, fraction: float) -> None:
        self.update(-1, self.t0 + fraction * (self.t1 - self.t0))

    def update(self, member: int, t: float) -> None:
        if member < 0:
            self.latest[:] = t
        else:
            self.latest[member] = t
        now = time.perf_counter()
        if now - self.last_print >= self.interval:
            self.last_print = now
            self._print()

    def _print(self, final: bool = False) -> None:
        t = self.t1 if final else float(np.min(self.latest))
        span = self.t1 - self.t0
        frac = 1.0 if span <= 0 else min(max((t - self.t0) / span, 0.0), 1.0)
        bar = "#" * int(round(24 * frac))
        elapsed = time.perf_counter() - self.start
        self.stream.write(
            f"\r{self.label}: [{bar:<24}] t = {t:.4g} / {self.t1:.4g} ({100 * frac:3.0f}%)  {elapsed:6.1f} s"
        )
        self.stream.flush()
        self.printed = True


class Counter:
    """Progress counted in units done between compiled calls (chunks of an ensemble), printed to stderr.

    Unlike ``Progress``, nothing calls back from inside a compiled loop, so the programs stay
    cacheable (a program holding a host callback never enters the persistent compilation cache).
    """

    def __init__(self, total: int, *, label: str = "simulate", unit: str = "members", stream=None):
        self.total, self.label, self.unit = max(int(total), 1), label, unit
        self.stream = sys.stderr if stream is None else stream
        self.done = 0
        self.start = 0.0

    def __enter__(self):
        self.start = time.perf_counter()
        self._print()
        return self

    def __exit__(self, *exc):
        self.stream.write("\n")
        self.stream.flush()
        return False

    def advance(self, count: int, label: str | None = None) -> None:
        self.done = min(self.done + int(count), self.total)
        if label is not None:
            self.label = label
        self._print()

    def _print(self) -> None:
        frac = self.done / self.total
        bar = "#" * int(round(24 * frac))
        elapsed = time.perf_counter() - self.start
        eta = f", {elapsed / frac - elapsed:5.0f} s left" if 0 < frac < 1 else ""
        self.stream.write(
            f"\r{self.label}: [{bar:<24}] {self.done} / {self.total} {self.unit} ({100 * frac:3.0f}%)  "
            f"{elapsed:6.1f} s{eta}   "
        )
        self.stream.flush()


def report(member, t) -> None:
    """Callback target: record that ``member`` (−1 for all) reached time ``t``."""
    if _active is not None:
        _active.update(int(member), float(t))


def report_fraction(fraction) -> None:
    """Callback target: record that every member reached ``fraction`` of the way from t0 to t1."""
    if _active is not None:
        _active.update_fraction(float(fraction))


def _over_members(reduce):
    """The identity on one member; under vmap, ``reduce`` over the batch axis (unbatched output), so
    the host hears one value per step, not one per member."""

    @custom_vmap
    def collapse(value):
        return value

    @collapse.def_vmap
    def _(axis_size, in_batched, value):
        return collapse(reduce(value, axis=0) if in_batched[0] else value), False

    return collapse


_slowest = _over_members(jnp.min)  # the slowest member's fraction of the run
_everywhere = _over_members(jnp.all)  # whether every member is due a report


class StderrMeter(diffrax.AbstractProgressMeter):
    """diffrax progress meter that feeds the active ``Progress`` instead of printing to stdout.

    Its state is the fraction of [t0, t1] last reported. A step reports (one host callback for the
    whole vmapped batch, with the slowest member's fraction) only once every member has advanced
    by ``minimum_increase`` since the last report or finished, so it costs nothing noticeable
    inside vmapped adaptive solves.
    """

    minimum_increase: float = 0.02

    def init(self):
        return jnp.array(0.0)

    def step(self, state, progress):
        progress = jnp.asarray(lax.stop_gradient(progress), jnp.result_type(state))
        due = _everywhere((progress - state > self.minimum_increase) | (progress == 1))

        def tell(_):
            jax.debug.callback(report_fraction, _slowest(progress))
            return progress

        return lax.cond(due, tell, lambda last: last, state)

    def close(self, state) -> None:
        del state
