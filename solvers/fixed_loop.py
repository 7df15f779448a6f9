"""The fixed-step loop: steps of a one-step method (``fixed.py``) between consecutive save times.

The run integrates t0 → ts[0], then between consecutive knots [ts..., t1] with equal substeps
≤ dt, saving at each knot. Layer switches (``Field.jump_times``) become knots too, saved and then
dropped, so no step straddles one, and each step's field sees its own layer (``Clamped``). Noisy
fields step by the Strang splitting of ``stochastic.py``, with a Brownian key per member and step
(``stochastic.member_keys``).
The members' bookkeeping (frozen when non-finite, stopped at consensus) is ``loop.py``'s.
"""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles import coalesce as _coalesce
from . import fused_rk4, loop
from .compiler import jit_with_options, loop_options
from .methods import METHODS
from .problem import Problem, check_steps
from .stochastic import Strang, member_keys


def knots(t0: float, t1: float, ts: np.ndarray, jumps: np.ndarray, dt: float):
    """(knots, keep, substeps) of a fixed-step run: it integrates t0 → ts[0] first, then between
    consecutive knots with equal substeps ≤ dt, the last interval ending at t1.

    Layer switches become knots too (saved, then dropped: ``keep`` indexes the save times among
    the knots), so no step straddles one. ``substeps`` are floats, inf where span/dt overflows,
    so that their sum can be checked before any is made an integer.
    """
    internal = np.union1d(ts, jumps) if len(jumps) else ts
    keep = np.searchsorted(internal, ts)
    points = np.concatenate([[t0], internal, [t1]])
    with np.errstate(over="ignore"):
        substeps = np.ceil(np.diff(points) / dt - 1e-9)  # as dense.steps_to_cover
    return points, keep, substeps


def prepare(p: Problem, plan=None) -> tuple[Any, dict]:
    """(the loop, its arguments) for ``p`` (one layout for every ``plan``); refuses a run of more than ``max_steps`` steps first."""
    points, keep, substeps = knots(p.t0, p.t1, p.ts, p.jumps, p.fixed_dt)
    check_steps(f"solver {p.solver!r}", p.t0, p.t1, p.fixed_dt, float(np.sum(substeps)), p.max_steps, p.dtype)
    method = METHODS[p.solver].make()
    args = dict(
        method=method,
        fused=fused_rk4.check(p),  # refuses what SA(kernel="pallas") cannot take
        knots=jnp.asarray(points, p.dtype),
        substeps=jnp.asarray(substeps.astype(np.int64)),
        clamp=bool(len(p.jumps)),
        keep=keep if len(p.jumps) else None,
    )
    if loop.fixed_trips(p.traced):  # loops of static length: for reverse mode, and on accelerators
        args.update(max_substeps=int(substeps.max()), select=not p.traced)
    if p.noisy:
        keys = member_keys(p.key, p.members)
        if plan is not None and plan.members > p.members:  # the padding members (``sharding.place``) repeat the last
            keys = keys[np.minimum(np.arange(plan.members), p.members - 1)]
        args.update(method=Strang(method), keys=keys)
    # outside the caller's trace, on one device: calls of bounded wall time (``loop.segments``)
    args["segmented"] = not p.traced and plan is None
    return run, args


def run(*, keep=None, progress=False, segmented=False, **kwargs):
    """The fixed-step run: ``run_fixed`` in one call (under the caller's trace, or spread over several devices),
    else its save intervals in calls of bounded wall time (``segment_fixed``, ``loop.segments``), with progress
    reported, and an interrupt honoured, between them. Either way the layer switches' knots are dropped from the
    saves."""
    # compiler options apply to a top-level jit only: none under the caller's trace (loops of static length whose
    # skipped steps are branched, not selected)
    traced = kwargs.get("max_substeps") is not None and not kwargs.get("select")
    options = None if traced else loop_options(kwargs["x0"].shape[-1])
    if segmented:
        saved, *rest = _in_segments(kwargs, options, progress)
    else:
        saved, *rest = run_fixed(**kwargs, compiler_options=options)
    if keep is not None:
        saved = jax.tree_util.tree_map(lambda a: a[:, keep], saved)
    return (saved, *rest)


def _in_segments(kwargs: dict, options, progress: bool):
    """``run_fixed``'s results from calls of ``segment_fixed`` over [k0, k1) of about ``loop.SEGMENT_S`` each."""
    knots_ = np.asarray(kwargs["knots"])
    x0, field = kwargs["x0"], kwargs["field"]
    n_saves = len(knots_) - 2
    one = eqx.filter_eval_shape(lambda f, x: loop.saves(kwargs["save_fn"], kwargs["axes"])(f, knots_[0], x), field, x0)
    state = (np.zeros(x0.shape, x0.dtype), loop.members_like(x0), np.zeros((), np.uint32))
    carry = (state, loop.buffer(one, n_saves))
    # the work of interval k: its steps, or the iterations of its loop of static length
    most = kwargs.get("max_substeps")
    per = np.full(n_saves + 1, most) if most is not None else np.asarray(kwargs["substeps"])
    key = (
        "fixed",
        type(field).__qualname__,
        type(kwargs["method"]).__qualname__,
        tuple(x0.shape),
        str(x0.dtype),
        getattr(kwargs["save_fn"], "__qualname__", None),
        most is not None,
        bool(kwargs.get("fused")),
    )

    def call(carry, k0, k1):
        return segment_fixed(carry=carry, k0=k0, k1=k1, **kwargs, compiler_options=options)

    # intervals 0..T-1 end at the save times, interval T at t1
    ((x, ms, _), saved), status = loop.segments(
        call, carry, np.cumsum(per), key=key, at=lambda k: float(knots_[k]), progress=progress
    )
    return saved, x, ms.steps, ms.t_event, ms.t_fail, status


class Clamped(eqx.Module):
    """A field whose time argument is kept strictly inside (lo, hi).

    Piecewise-constant weights (``LayerWise``) switch at interval ends; a Runge–Kutta stage
    evaluated exactly at an end would see the next layer, so stages are clamped to the interval
    the step belongs to.
    """

    field: Any
    lo: Any
    hi: Any

    @property
    def geometry(self):
        return self.field.geometry

    @property
    def noise_sigma(self):
        """σ of the field (its noise does not depend on t)."""
        return self.field.noise_sigma

    def deterministic(self):
        """The field without its noise, clamped to the same interval."""
        return Clamped(self.field.deterministic(), self.lo, self.hi)

    def summands(self):
        """The field's terms, each clamped to the same interval."""
        return tuple(Clamped(f, self.lo, self.hi) for f in self.field.summands())

    def _t(self, t):
        return jnp.clip(t, jnp.nextafter(self.lo, self.hi), jnp.nextafter(self.hi, self.lo))

    def __call__(self, t, x):
        return self.field(self._t(t), x)

    def drift(self, t, x):
        return self.field.drift(self._t(t), x)


def _machine(
    *,
    field,
    axes,
    x0,
    save_fn,
    delta,
    method,
    knots,
    substeps,
    keys=None,
    clamp=False,
    max_substeps=None,
    select=False,
    fused=False,
):
    """(start, advance) of the fixed-step loop: ``start()``, the carry (states, members, step count) at t0, and
    ``advance(carry, k)``, the steps of interval k (knots[k] → knots[k + 1]) and the saves at its end."""
    stochastic = keys is not None
    step_axes = Clamped(axes, None, None) if clamp else axes
    if stochastic:
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))
        step_all = jax.vmap(method.step, in_axes=(step_axes, None, 0, None, 0))
    elif fused:  # SA is autonomous and has no layer switches: the kernel needs neither t nor a clamp
        kernel = fused_rk4.fused(field, *x0.shape, x0.dtype)
        step_all = lambda f, t, x, h: kernel.step(x, h, after=False)  # noqa: E731
    else:
        step_all = jax.vmap(method.step, in_axes=(step_axes, None, 0, None))
    save_all = loop.saves(save_fn, axes)
    finite = jax.vmap(lambda a: jnp.all(jnp.isfinite(a)))
    settle = _coalesce.settler(field)
    test = None if delta is None else loop.consensus(axes, delta)
    clustered = None if delta is None else (lambda x: test(field, x))

    def advance(carry, k):
        x, members_, count = carry
        ta, tb, m = knots[k], knots[k + 1], substeps[k]
        h = (tb - ta) / jnp.maximum(m, 1)
        f = Clamped(field, ta, tb) if clamp else field

        def body(c):
            j, x, ms, count = c
            t = ta + j * h
            if stochastic:
                x_new = step_all(f, t, x, h, step_keys(keys, count))
            else:
                x_new = step_all(f, t, x, h)
            x_new = settle(x_new)
            ms, x_new = loop.step_taken(ms, t, t + h, finite(x_new), x_new, x, clustered)
            return j + 1, x_new, ms, count + 1

        def running(c):
            return (c[0] < m) & jnp.any(c[2].active)

        _, x, members_, count = loop.steps_while(running, body, (0, x, members_, count), max_substeps, select)
        return (x, members_, count), save_all(field, tb, x)

    def start():
        return (x0, loop.start(field, axes, x0, delta, knots[0]), jnp.zeros((), jnp.uint32))

    return start, advance


@jit_with_options
def run_fixed(*, field, axes, x0, save_fn, delta, **parts):
    """Fixed steps between consecutive knots [t0, ts..., t1], the ensemble vmapped inside one time loop, in one
    program (under the caller's trace, on several devices); elsewhere ``run`` cuts the same intervals into calls of
    ``segment_fixed``, with the same numbers.

    Between knots the steps are a while loop that ends early once no member runs; with ``max_substeps``
    (static: under the caller's trace and on accelerators, ``loop.fixed_trips``) they are a loop of that fixed
    length whose extra steps are skipped, which reverse-mode differentiation (``jax.grad``) can go through and
    an accelerator runs without reading a predicate back at every step (with ``select``: ``loop.steps_while``).

    Returns (saves, final states, steps, event times, last finite times, statuses). A member whose step
    produces a non-finite state is frozen at its last finite state, like a member stopped at
    consensus, and its last finite time recorded (inf for members that stay finite); the loop
    ends when no member is left running. With ``keys`` (noisy fields: one Brownian key per member,
    ``stochastic.member_keys``) member m's step k draws from fold_in(keys[m], k), so no path is stored. With
    ``fused`` (SA with kernel="pallas", ``fused_rk4.check``) each RK4 step is one Pallas kernel over blocks of
    members (``fused_rk4.py``), the same numbers to rounding.
    """
    start, advance = _machine(field=field, axes=axes, x0=x0, save_fn=save_fn, delta=delta, **parts)
    # knots = [t0, ts..., t1]: intervals 0..T-1 end at the save times, interval T at t1
    n_saves = parts["knots"].shape[0] - 2
    carry, saved = jax.lax.scan(advance, start(), jnp.arange(n_saves))
    (x, ms, _), _ = advance(carry, n_saves)
    saved = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), saved)  # (members, T, ...)
    return saved, x, ms.steps, ms.t_event, ms.t_fail, loop.status_of(ms)


@jit_with_options
def segment_fixed(*, field, axes, x0, save_fn, delta, carry, k0, k1, **parts):
    """The intervals k0 ≤ k < k1 of the fixed-step run (knots[k] → knots[k + 1], the saves of k < T written into
    the buffer ``carry[1]``, (members, T, ...)) from the state ``carry[0]``, which the call with k0 = 0 replaces
    by the run's start at x0. k0 and k1 are data: one program for every segment and for the start, and the
    steps, the noise keys' step counter and the members' bookkeeping go on as in one call (the same bits).
    Returns (the carry, the members' statuses)."""
    state, saved = carry
    start, advance = _machine(field=field, axes=axes, x0=x0, save_fn=save_fn, delta=delta, **parts)
    state = loop.started(k0, start, state)
    state, saved = loop.intervals(advance, state, saved, k0, k1)
    return (state, saved), loop.status_of(state[1])
