"""RK4 on a uniform time grid with dense output: save times need not be steps.

A fixed-step run that must save at many times (the phase diagram's 200 checkpoints) normally
shortens its steps to land on each of them. Here the steps stay on the uniform grid t0 + k·h,
and the state at a save time t inside [t_k, t_k+1] is the cubic Hermite interpolant of the two
step ends and their velocities, mapped back to the sphere:

    x(t_k + θh) ≈ h00(θ) x_k + h10(θ) h f_k + h01(θ) x_k+1 + h11(θ) h f_k+1,

whose error O(h⁴) matches the step's. f_k+1 is the next step's first stage, so the interpolant
costs no extra evaluation: four field evaluations per step, exactly as plain RK4. The grid is
shared by all members, so the batched loop has no divergence; a member that stops at consensus
(``stop_when_clustered``) is frozen at the end of the step where it clustered, and a member whose
step gives a non-finite state or velocity is frozen at the start of that step (its last finite
state). Once no member is left running the loop stops stepping.

``method="ab4"`` takes the same grid with the four-step Adams–Bashforth method

    x_k+1 = x_k + h/24 (55 f_k − 59 f_k−1 + 37 f_k−2 − 9 f_k−3),

one field evaluation per step (f_k+1, which the interpolant needs anyway), after three RK4
steps that supply the first velocities. Order 4 like RK4 for a quarter of the evaluations, with
a smaller stability interval: h λ ∈ (−0.3, 0] on the negative real axis, against RK4's
(−2.78, 0]. SA's Jacobian has its spectrum in [−1, 1.6] (the contraction inside a cluster
at rate 1, the growth of modes of a uniform start, β ≤ 50; ``docs/numerics.md``), so h = 0.25
is stable there: on the phase diagram's setting it needs 20% fewer evaluations than RK4 at
h = 0.75 and its clustered fractions are 2–6× closer to the exact ones. Stiff fields (USA in
[GLPR]'s time) need an adaptive solver with either method. On the sphere the combination is
taken in R^d and renormalized, as RK4's is.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles import coalesce as _coalesce
from ..particles.sphere import normalize
from . import fused_rk4, loop, machine
from .compiler import jit_with_options, loop_options
from .fusion import materialized
from .methods import names, spoken
from .problem import GRID_ONLY, Problem, check_steps


def _hermite(x0, f0, x1, f1, theta, h):
    """Cubic Hermite interpolant at θ ∈ [0, 1] of a step of size h."""
    t2, t3 = theta * theta, theta * theta * theta
    h00 = 2.0 * t3 - 3.0 * t2 + 1.0
    h10 = t3 - 2.0 * t2 + theta
    h01 = -2.0 * t3 + 3.0 * t2
    h11 = t3 - t2
    return h00 * x0 + (h10 * h) * f0 + h01 * x1 + (h11 * h) * f1


GRID_METHODS = names(dense=True)
"""The methods ``run_dense`` steps on the uniform grid (``methods.Method.dense``): RK4, and Adams–Bashforth 4
started by RK4."""

AB4_START = 3
"""RK4 steps that start AB4: they give f_0 … f_3, the history of its first step."""


def steps_to_cover(span: float, dt: float) -> int | float:
    """Steps of size ≤ dt that cover ``span`` ≥ 0: ⌈span/dt − 1e-9⌉ (the 1e-9 forgives a span that is
    a multiple of dt up to rounding), in Python arithmetic: an int, or inf when span/dt overflows."""
    ratio = float(span) / float(dt)  # a Python float division: inf on overflow, never an exception
    return math.ceil(ratio - 1e-9) if math.isfinite(ratio) else math.inf


def grid_steps(t0: float, t1: float, dt: float) -> int | float:
    """Steps N of the uniform grid of [t0, t1] with h = (t1 − t0)/N ≤ dt (at least one; inf when they overflow)."""
    return max(1, steps_to_cover(t1 - t0, dt))


def grid(t0: float, t1: float, dt: float, ts: np.ndarray) -> tuple[int, float, np.ndarray, np.ndarray]:
    """Steps N of the uniform grid (h = (t1 − t0)/N ≤ dt), and for each save time its step and θ.

    ``simulate`` refuses grids beyond ``max_steps`` before it gets here; N beyond int64 is refused too.
    """
    n_steps = grid_steps(t0, t1, dt)
    if not (isinstance(n_steps, int) and n_steps <= np.iinfo(np.int64).max):  # inf: span/dt overflowed
        raise ValueError(
            f"dt = {dt:g} over [{t0:g}, {t1:g}] needs {float(n_steps):.3g} steps, more than a grid can count"
        )
    h = (t1 - t0) / n_steps
    pos = (np.asarray(ts, dtype=float) - t0) / h if h > 0 else np.zeros(len(ts))
    index = np.clip(np.floor(pos).astype(np.int64), 0, n_steps - 1)
    theta = np.clip(pos - index, 0.0, 1.0)
    return n_steps, h, index, theta


def prepare(p: Problem, plan=None):
    """(the loop, its arguments) for ``p`` (one layout for every ``plan``); refuses a grid of more than ``max_steps`` steps first, and
    what it cannot interpolate."""
    label = f"solver {p.solver!r}" + (" (dense)" if p.solver not in GRID_ONLY else "")
    check_steps(label, p.t0, p.t1, p.fixed_dt, grid_steps(p.t0, p.t1, p.fixed_dt), p.max_steps, p.dtype)
    if p.solver not in GRID_METHODS:
        raise ValueError(
            f"dense=True interpolates {spoken([m.upper() for m in GRID_METHODS], quote='')} steps: use "
            f"solver={spoken(GRID_METHODS)} (or an adaptive solver), got solver={p.solver!r}"
        )
    if p.noisy or len(p.jumps):
        raise ValueError(
            f"dense=True and solver={spoken(GRID_ONLY)} need a smooth deterministic path: they do "
            f"not apply to noisy fields or to layer-wise weights that switch during the run "
            f"(solver={p.solver!r})"
        )
    fused = fused_rk4.check(p)  # refuses what SA(kernel="pallas") cannot take
    n_steps, h, index, theta = grid(p.t0, p.t1, p.fixed_dt, p.ts)
    return run, dict(
        # outside the caller's trace, on one device: calls of bounded wall time (``loop.segments``)
        segmented=not p.traced and plan is None,
        method=p.solver,
        fused=fused,
        t0=jnp.asarray(p.t0, p.dtype),
        h=jnp.asarray(h, p.dtype),
        n_steps=jnp.asarray(n_steps),
        index=jnp.asarray(index),
        theta=jnp.asarray(theta, p.dtype),
        times=jnp.asarray(p.ts, p.dtype),
        # compiler options apply to a top-level jit only: none under the caller's trace
        hold_saves=not p.save_reads_time,
        compiler_options=None if p.traced else loop_options(p.x0.shape[-1]),
        # loops of static length under the caller's trace (jax.grad among others: reverse mode needs them) and on
        # accelerators (no predicate read back per step; their skipped steps selected, not branched)
        bounds=(int(np.max(np.diff(index, prepend=-1))) + 1, int(n_steps)) if loop.fixed_trips(p.traced) else None,
        select=loop.fixed_trips(p.traced) and not p.traced,
    )


def stage_loop(field) -> bool:
    """Whether the grid's RK4 step evaluates its three stages in a loop (the field's evaluation once in the
    program) instead of written out (three times): for fields on angles, whose sums over the particles are written
    out term by term (``Circle``: the program is mostly those terms; the d = 2 row of Fig. 3 compiles in a third
    of the time, 4.1 s against 13.0 s on a loaded 2-core Xeon, and runs as fast, with the same bits), and on
    accelerators, where compiling is most of a figure's cost. On CPUs the other fields keep the written-out
    stages: their products are handed to YNNPACK as fusions across the stages (``compiler.PRODUCTS_ON_CPU``),
    which a loop breaks (the d = 32 row ran 2.8× slower)."""
    return bool(field.in_angles) or machine.accelerated()


def run(*, segmented=False, progress=False, **kwargs):
    """The grid run: ``run_dense`` in one call (under the caller's trace, or spread over several devices), else its
    saves in calls of bounded wall time (``segment_dense``, ``loop.segments``), with progress reported, and an
    interrupt honoured, between them."""
    if not segmented:
        return run_dense(**kwargs)
    x0, field, index = kwargs["x0"], kwargs["field"], np.asarray(kwargs["index"])
    n_saves, n_steps, bounds = len(index), int(kwargs["n_steps"]), kwargs.get("bounds")
    times, t0, h = np.asarray(kwargs["times"]), float(kwargs["t0"]), float(kwargs["h"])
    j = np.zeros((), index.dtype)
    one = eqx.filter_eval_shape(lambda f, x: loop.saves(kwargs["save_fn"], kwargs["axes"])(f, times[0], x), field, x0)
    last = jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), one)
    xs = np.zeros(x0.shape, x0.dtype)  # (xa, fa, xb, fb) and AB4's history: the start's shapes
    state = (j, xs, xs, xs, xs, (xs, xs, xs) if kwargs.get("method") == "ab4" else (), loop.members_like(x0))
    carry = ((state, last, (j, np.zeros((), x0.dtype))), loop.buffer(one, n_saves))
    # the grid steps each interval ends at: the save times' steps, then the stretch to the grid's end (in pieces of
    # the bounded loops' length when the loops are of static length)
    ends = list(index.astype(np.int64))
    tail = n_steps - 1 - int(index[-1])
    if bounds is not None:
        ends += [min(n_steps - 1, int(index[-1]) + bounds[0] * (i + 1)) for i in range(max(1, -(-tail // bounds[0])))]
        work = bounds[0] * np.arange(1, len(ends) + 1)  # every loop runs its static length
    else:
        ends.append(n_steps - 1)
        work = np.asarray(ends) + 1
    reach = [float(times[k]) for k in range(n_saves)] + [
        min(t0 + h * (e + 1), t0 + h * n_steps) for e in ends[n_saves:]
    ]
    key = (
        "dense",
        type(field).__qualname__,
        kwargs.get("method"),
        tuple(x0.shape),
        str(x0.dtype),
        getattr(kwargs["save_fn"], "__qualname__", None),
        bounds is not None,
        bool(kwargs.get("fused")),
        bool(kwargs.get("hold_saves")),
    )

    def call(carry, k0, k1):
        return segment_dense(carry=carry, k0=k0, k1=k1, ends=np.asarray(ends, index.dtype), **kwargs)

    ((state, _, _), saved), status = loop.segments(
        call, carry, work, key=key, at=lambda k: reach[k - 1], progress=progress
    )
    members = state[6]
    return saved, state[3], members.steps, members.t_event, members.t_fail, status


def _machine(
    *,
    field,
    axes,
    x0,
    save_fn,
    delta,
    t0,
    h,
    n_steps,
    index,
    theta,
    times,
    method="rk4",
    hold_saves=False,
    bounds=None,
    select=False,
    fused=False,
):
    """The grid loop's parts: ``start()`` (the state after the first step, the hold-saves carry, its mark),
    ``save(carry, k, target, most)`` (the steps to interval ``target``, then save k's values) and ``steps_until``."""
    sphere = field.geometry == "sphere"
    finish = normalize if sphere else (lambda y: y)
    vfield = jax.vmap(lambda f, t, x: f(t, x), in_axes=(axes, None, 0))
    kernel = fused_rk4.fused(field, *x0.shape, x0.dtype) if fused else None
    if kernel is not None:  # SA is autonomous: its velocity does not read t
        vfield = lambda f, t, x: kernel.velocity(x)  # noqa: E731
    save_all = loop.saves(save_fn, axes)
    test = None if delta is None else loop.consensus(axes, delta)
    clustered = None if delta is None else (lambda kept: test(field, kept[0]))
    finite = jax.vmap(lambda a, b: jnp.all(jnp.isfinite(a)) & jnp.all(jnp.isfinite(b)))
    dtype = x0.dtype
    h = jnp.asarray(h, dtype)
    settle = _coalesce.settler(field)

    # RK4's three stages written out, or as one loop in which the field appears once (``stage_loop``)
    staged = stage_loop(field)

    def rk4(t, xb, fb, history):
        if not staged:
            k2 = vfield(field, t + 0.5 * h, xb + (0.5 * h) * fb)
            k3 = vfield(field, t + 0.5 * h, xb + (0.5 * h) * k2)
            k4 = vfield(field, t + h, xb + h * k3)
            return xb + (h / 6.0) * (fb + 2.0 * k2 + 2.0 * k3 + k4)
        # the same arithmetic in the same order as written out: the same bits
        nodes = jnp.asarray([0.5, 0.5, 1.0], dtype)

        def stage(s, carry):
            k, ks = carry
            a = nodes[s] * h
            k = vfield(field, t + a, xb + a * k)
            return k, ks.at[s].set(k)

        _, ks = jax.lax.fori_loop(0, 3, stage, (fb, jnp.zeros((3,) + fb.shape, fb.dtype)))
        k2, k3, k4 = ks[0], ks[1], ks[2]
        return xb + (h / 6.0) * (fb + 2.0 * k2 + 2.0 * k3 + k4)

    def ab4(t, xb, fb, history):
        f1, f2, f3 = history
        return xb + (h / 24.0) * (55.0 * fb - 59.0 * f1 + 37.0 * f2 - 9.0 * f3)

    def advance(j, t, xb, fb, history):
        if method == "rk4":
            return rk4(t, xb, fb, history)
        # the step index is shared by all members: one branch runs, not both
        return jax.lax.cond(j + 1 < AB4_START, rk4, ab4, t, xb, fb, history)

    def step(state):
        """One step from (x_b, f_b) at the end of the current interval; returns the shifted state."""
        j, xa, fa, xb, fb, history, members = state
        t = t0 + (j + 1) * h
        if kernel is not None:
            xn, fn = kernel.step(xb, h, fb)
        else:
            # the update written before it is normalized: fused, the two ran 3× slower (``fusion``)
            xn = settle(finish(materialized(t, advance(j, t, xb, fb, history))))
            fn = vfield(field, t + h, xn)
        # the velocity counts too: the interpolant at the new step end uses it; a stopped member
        # holds its state: zero velocity makes the interpolant constant
        zero = jnp.zeros_like(fn)
        members, (xn, fn, fb) = loop.step_taken(
            members, t, t + h, finite(xn, fn), (xn, fn, fb), (xb, zero, zero), clustered
        )
        # AB4's velocities f_k−1, f_k−2, f_k−3 for the next step (RK4 carries none)
        history = (fb,) + history[:2] if method == "ab4" else ()
        return j + 1, xb, fb, xn, fn, history, members

    def running(state):
        return jnp.any(state[6].active)

    def steps_until(state, target, most):
        """Steps while the current interval is before ``target`` and a member runs (at most ``most`` when bounded)."""

        def go(s):
            return (s[0] < target) & running(s)

        return loop.steps_while(go, step, state, most, select)

    def start():
        # start as if at the end of an interval ending at t0 (j = −1); one step gives [t0, t0 + h]
        fa0 = vfield(field, t0, x0)
        history0 = (fa0, fa0, fa0) if method == "ab4" else ()
        state = step((jnp.asarray(-1), x0, fa0, x0, fa0, history0, loop.start(field, axes, x0, delta, t0)))
        blank = jax.tree_util.tree_map(
            lambda a: jnp.zeros(a.shape, a.dtype), jax.eval_shape(values, state, jnp.asarray(1.0, dtype), 0)
        )
        return (state, blank, (state[0], jnp.asarray(-1.0, dtype)))

    def values(state, at, k):
        _, xa, fa, xb, fb = state[:5]
        return save_all(field, times[k], finish(materialized(at, _hermite(xa, fa, xb, fb, at, h))))

    def save(carry, k, target, most):
        state, last, mark = carry
        # advance until the current interval is ``target`` (the save time's: all members share the grid), or
        # until no member is left running: each then holds its final state at the interval's end
        state = steps_until(state, target, most)
        at = jnp.where(state[0] < target, 1.0, theta[k]).astype(dtype)
        if hold_saves:
            # the predicate is shared by the members: one branch runs
            moved = (k == 0) | running(state) | (state[0] != mark[0]) | (at != mark[1])
            out = loop.where_moved(moved, values, last, state, at, k, select=select)
        else:
            out = values(state, at, k)
        return (state, out, (state[0], at)), out

    return start, save, steps_until


@jit_with_options
def run_dense(*, progress=False, **parts):
    """Steps of ``method`` ("rk4" or "ab4") of size h from t0, saves at ``times`` (step ``index``,
    fraction ``theta``), vmapped, in one program (under the caller's trace, on several devices); elsewhere ``run``
    cuts the same saves into calls of ``segment_dense``, with the same numbers. With ``hold_saves`` (``save_fn``
    does not read t), a save of states that have not moved since the last one (no member running, the same
    interval and θ) repeats its values: the saves after every member has stopped cost nothing.

    The steps between saves are while loops that end once no member runs; with ``bounds`` (static: the
    most steps before a save and in all; ``loop.fixed_trips``) loops of those fixed lengths whose extra steps
    are skipped, which reverse-mode differentiation (``jax.grad``) can go through and an accelerator runs
    without reading a predicate back at every step (with ``select``: ``loop.steps_while``).

    With ``fused`` (SA with kernel="pallas", ``fused_rk4.check``) each RK4 step and the velocity at its end
    are one Pallas kernel over blocks of members (``fused_rk4.py``): the same numbers to rounding.

    Returns (saves, final states, steps, event times, last finite times: inf for members that stay finite,
    statuses: ``loop.status_of``).
    """
    del progress  # reported between a segmented run's calls, never from inside a program
    start, save, steps_until = _machine(**parts)
    index, bounds = parts["index"], parts.get("bounds")
    most = None if bounds is None else bounds[0]
    (state, _, _), saved = jax.lax.scan(lambda c, k: save(c, k, index[k], most), start(), jnp.arange(index.shape[0]))
    state = steps_until(state, parts["n_steps"] - 1, None if bounds is None else bounds[1])
    x_end, members = state[3], state[6]
    saved = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), saved)  # (members, T, ...)
    return saved, x_end, members.steps, members.t_event, members.t_fail, loop.status_of(members)


@jit_with_options
def segment_dense(*, carry, k0, k1, ends, **parts):
    """Save intervals k0 ≤ k < k1 of the grid run from the carry (the grid state, the hold-saves carry; the saves'
    buffer (members, T, ...)), which the call with k0 = 0 replaces by the run's start: for k < T the steps to save
    k's grid interval and its values, then the steps to ``ends[k]`` (the stretch to the grid's end). k0 and k1 are
    data: one program for every segment and for the start, the same steps and bits as one call. Returns (the
    carry, the members' statuses)."""
    loop_carry, saved = carry
    start, save, _ = _machine(**parts)
    loop_carry = loop.started(k0, start, loop_carry)
    n_saves = parts["index"].shape[0]
    bounds = parts.get("bounds")
    most = None if bounds is None else bounds[0]

    def advance(c, k):
        last = k < n_saves
        kk = jnp.minimum(k, n_saves - 1)
        new, out = save(c, kk, ends[k], most)
        # past the last save only the steps count: the hold-saves carry keeps the last save's
        kept = jax.tree_util.tree_map(lambda a, b: jnp.where(last, a, b), new[1:], c[1:])
        return (new[0],) + kept, out

    loop_carry, saved = loop.intervals(advance, loop_carry, saved, k0, k1)
    return (loop_carry, saved), loop.status_of(loop_carry[0][6])
