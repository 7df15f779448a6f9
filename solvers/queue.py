"""Adaptive ensembles as a queue: members step in slots that are refilled as they finish.

A vmapped adaptive solve (diffrax under ``jax.vmap``) is one while loop over the whole batch:
every iteration steps every member, masked once it is done, so the batch takes as many
iterations as its slowest member, and every iteration carries diffrax's per-step machinery
(save buffers, controller, event and progress state) for every member. Here a fixed number of
slots step together, each holding one member with its own time, step size and error control;
a slot whose member reaches t1 (or stops at consensus, or fails) takes the next member of the
queue. An ensemble then costs about Σ_m steps_m / slots iterations instead of max_m steps_m,
whatever the spread of stiffness, and an iteration is the method's field evaluations plus a
few elementwise operations per slot.

The method is an explicit embedded Runge–Kutta pair whose last stage is the next step's first
(FSAL: tsit5, dopri5; diffrax's Butcher tableaus):

* error control: the RMS over all coordinates of err / (atol + rtol·max(|y0|, |y1|)), a step
  accepted when it is ≤ 1, the next step h·clip(0.9·err^(−1/p), 0.2, 10) (p: the method's order);
* on the sphere the end point is renormalized row by row, as ``adaptive.OnSphere`` does; with a
  ``Coalesced`` field merged tokens are placed at their representatives after every step
  (``particles/coalesce.py``). Every step then starts from a settled state, so the inner field
  is evaluated directly: tokens that are equal stay equal through the stages;
* saves: the method's own continuous extension (diffrax's ``interpolation_cls``: for tsit5 a
  fourth-order polynomial in the step fraction, linear in the stages), at every save time the step
  passes, up to 4 per pass; its coefficients are formed once per step (``_interpolant``), so a save
  is a Horner evaluation;
* stopping at consensus (``stop_when_clustered``): after a step that ends clustered, the
  crossing is located on the interpolant by 16 iterations of regula falsi (Illinois); the test
  reads the largest pair gap, for ``Circle``'s angles in O(n) from their range (``circle.spread``); the
  member's later saves hold its state there;
* a candidate end point that is not finite is rejected and the step cut to a fifth; after 40
  such steps in a row, or one within a few ulps of its start, the member stops at its last
  finite state (``loop.Status.NON_FINITE``, as ``adaptive.FiniteSteps``); ``MAX_STEPS``: ``max_steps``
  attempts before t1; ``FAILED``: the step size underflowed.

A fresh member enters its slot with a step of length zero: its stages are all f(t0, x0), so the
next step finds its first stage in place, and the first real step is 1% of |x0| / |f(t0, x0)|
in the error norm (or ``dt0``). Members are taken hardest first (the order given), so the queue
ends on quick ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..particles import coalesce as _coalesce
from ..particles.circle import spread
from ..particles.fields import Field
from ..particles.sphere import normalize, small_d_gaps
from . import loop
from .methods import METHODS

__all__ = ["QUEUE_METHODS", "SLOTS", "run_queue"]

QUEUE_METHODS = {m.name: (m.build, m.order) for m in METHODS.values() if m.queue}
"""The FSAL pairs the queue runs (``methods.Method.queue``): solver name → (diffrax class, order)."""

SLOTS = 64
"""Members stepping together on CPU (n = 32, d = 2: 64 slots ≈ 128 and 256 per member-step, and the
queue's last iterations, when members run out, are shorter)."""

_GIVE_UP = 40  # consecutive non-finite candidates before a member stops (adaptive.FiniteSteps)
_REFINEMENTS = 16  # regula falsi iterations locating a consensus inside a step
_PER_PASS = 4  # saves written per pass of the saves' loop


def _tableau(method):
    """(a, b, b_error, c, order) of a diffrax solver instance of ``QUEUE_METHODS``."""
    ((cls, order),) = [v for v in QUEUE_METHODS.values() if type(method) is v[0]]
    tab = cls.tableau
    a = [[float(v) for v in row] for row in tab.a_lower]
    b = [float(v) for v in tab.b_sol]
    e = [float(v) for v in tab.b_error]
    c = [0.0] + [float(v) for v in tab.c]
    return a, b, e, c, order


def _written(t, tree):
    """``tree`` written to memory before whatever reads it (``fusion.materialized``, for any pytree;
    ``t`` must be traced, or the conditional folds away)."""
    return jax.lax.cond(
        jnp.isfinite(t), lambda v: v, lambda v: jax.tree_util.tree_map(lambda a: a * jnp.ones((), a.dtype), v), tree
    )


_INTERPOLANTS: dict[tuple[type, int], np.ndarray] = {}
"""``_interpolant_of`` by (method class, stages): formed once per process (it evaluates diffrax's interpolant)."""


def _interpolant(method, stages: int) -> np.ndarray:
    """``_interpolant_of`` the method's class, formed once per process."""
    key = (type(method), stages)
    if key not in _INTERPOLANTS:
        _INTERPOLANTS[key] = _interpolant_of(*key)
    return _INTERPOLANTS[key]


def _interpolant_of(cls, stages: int) -> np.ndarray:
    """P (powers, stages): the method's continuous extension over a step as
    y(θ) = y0 + Σ_m θ^m Σ_i P[m−1, i] k_i (k_i = h·f_i, diffrax's increments).

    Read off diffrax's own ``interpolation_cls`` (for tsit5 a polynomial of degree 4 in θ, linear in
    the stages) at six fractions, so that a save costs a Horner evaluation of coefficients formed
    once per step instead of a product of the stages with their weights at every save time (a
    small batched dot, slow on XLA's CPU backend).
    """
    with jax.ensure_compile_time_eval():
        a, b, e, c, p = _tableau(cls())
        k = jnp.eye(stages, dtype=jnp.float64)  # attnflow enables float64 on import
        poly = cls.interpolation_cls(t0=0.0, t1=1.0, y0=jnp.zeros(stages, k.dtype), y1=jnp.asarray(b, k.dtype), k=k)
        theta = np.linspace(0.0, 1.0, 6)
        weights = np.stack([np.asarray(poly.evaluate(float(u))) for u in theta])  # (6, stages)
    vander = np.vander(theta, 6, increasing=True)
    coeffs = np.linalg.solve(vander, weights)  # (6 powers, stages)
    if np.max(np.abs(coeffs[0])) > 1e-6:
        raise AssertionError(f"{cls.__name__}'s interpolant does not start at y0")
    coeffs[np.abs(coeffs) < 1e-9] = 0.0  # the fit's rounding where diffrax's weight has no such term
    last = max(m for m in range(1, 6) if np.max(np.abs(coeffs[m])) > 0.0)
    out = coeffs[1 : last + 1]
    out.flags.writeable = False  # shared by every later call
    return out


def _combine(y, h, coefficients, ks):
    acc = None
    for w, k in zip(coefficients, ks):
        if w != 0.0:
            acc = w * k if acc is None else acc + w * k
    return y if acc is None else y + h * acc


@dataclasses.dataclass(frozen=True)
class _Queue:
    """What every iteration of one queue reads and does not change: the members, the method, the field's
    vmapped evaluations and the save function."""

    members: int
    slots: int
    method: tuple  # (a, b, e, c, order) of the FSAL pair
    dense_rows: list  # the continuous extension's coefficients per power of θ (``_interpolant``)
    ts: jax.Array
    t0: jax.Array
    t1: jax.Array
    tiny: jax.Array
    rtol: float
    atol: float
    dt0: float | None
    max_steps: int
    delta: float | None
    fast_spread: bool
    finish: Callable
    vfield: Callable
    directions: Callable
    saves: Callable
    after_loop: bool
    field: Field
    eps_merge: float | None


class _Step(NamedTuple):
    """One step tried from every slot: its end point, last stage, stages, interpolant and scaled error."""

    y1: jax.Array
    f1: jax.Array
    ks: list
    coefficients: list
    error: jax.Array
    finite: jax.Array


def _rms(v):
    return jnp.sqrt(jnp.mean(jnp.reshape(v * v, (v.shape[0], -1)), axis=-1))


def _try_step(q: _Queue, s: dict, field, h) -> _Step:
    """The stages of a step of length h from every slot (the first reused from the last step: FSAL), its end
    point on the sphere, its continuous extension's coefficients, its error in the tolerance's units, and
    whether it is finite. With a ``Coalesced`` field, merged tokens are placed at their representatives."""
    a, b, e, c, _ = q.method
    t, y, k1 = s["t"], s["y"], s["k1"]
    hb = h[:, None, None]
    fe = field.settled_field()
    ks = [k1]
    for i in range(1, len(b)):
        # each stage written to memory: its elementwise sums were fused into all its readers
        # (the later stages, the end point, the error), recomputing the field in each (2× slower)
        ks.append(_written(t[0], q.vfield(fe, t + c[i] * h, _combine(y, hb, a[i - 1], ks))))
    # FSAL: the last stage was evaluated at the end point y + h Σ b_j k_j
    y1 = _combine(y, hb, b, ks)
    # the continuous extension y + Σ_m θ^m C_m, its coefficients formed once per step (read by
    # every save and by the consensus search)
    coefficients = _written(t[0], [_combine(jnp.zeros_like(y), hb, row, ks) for row in q.dense_rows])
    err = _combine(jnp.zeros_like(y), hb, e, ks)
    f1 = ks[-1]
    y1 = q.finish(y1)
    scale = q.atol + q.rtol * jnp.maximum(jnp.abs(y), jnp.abs(y1))
    error = _rms(err / scale)
    finite = jnp.all(jnp.isfinite(y1), axis=(1, 2)) & jnp.all(jnp.isfinite(f1), axis=(1, 2)) & jnp.isfinite(error)
    if q.eps_merge is not None:
        # written to memory first: fused into the gathers below (and into the saves' interpolant,
        # read in a loop) the n² search ran once per element, 20× slower in angles
        rep = _written(t[0], jax.vmap(lambda x: _coalesce.representatives(q.field.directions(x), q.eps_merge))(y1))
        y1, f1 = _written(
            t[0], (jnp.take_along_axis(y1, rep[..., None], axis=1), jnp.take_along_axis(f1, rep[..., None], axis=1))
        )
    return _Step(y1, f1, ks, coefficients, error, finite)


def _dense(q: _Queue, y, coefficients, theta):
    """The step's continuous extension at fractions θ (slots, K) of it, on the sphere."""
    u = theta.reshape(theta.shape + (1,) * (y.ndim - 1))
    acc = coefficients[-1][:, None]
    for cm in coefficients[-2::-1]:
        acc = cm[:, None] + u * acc
    return q.finish(y[:, None] + u * acc)


def _control(q: _Queue, s: dict, step: _Step, h, live):
    """Accept or reject each slot's step; the next step, grown or cut by the error (a fresh member's first
    from its velocity); and why a member stops: reached t1, gave up on non-finite candidates, step size
    underflow, or max_steps attempts."""
    t, y, fresh = s["t"], s["y"], s["fresh"]
    ok = live & step.finite & (step.error <= 1.0)
    reach = ok & (s["h"] >= q.t1 - t) & ~fresh
    t_new = jnp.where(reach, q.t1, jnp.where(ok, t + h, t))
    tries = s["tries"] + (live & ~fresh)
    steps = s["steps"] + (ok & ~fresh)
    factor = jnp.clip(0.9 * jnp.maximum(step.error, 1e-10) ** (-1.0 / q.method[4]), 0.2, 10.0)
    if q.dt0 is None:
        scale0 = q.atol + q.rtol * jnp.abs(y)
        d0, d1 = _rms(y / scale0), _rms(step.f1 / scale0)
        first = jnp.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / jnp.maximum(d1, 1e-300))
    else:
        first = jnp.full((q.slots,), q.dt0, y.dtype)
    first = jnp.minimum(first, q.t1 - q.t0)
    h_next = jnp.where(fresh, first, jnp.where(step.finite, h * factor, 0.2 * h))
    bad = jnp.where(live & ~step.finite, s["bad"] + 1, 0)
    span = jnp.maximum(jnp.abs(t), jnp.abs(q.t1))
    gave_up = live & ~step.finite & ((bad >= _GIVE_UP) | (h <= q.tiny * span) | fresh)
    underflow = live & step.finite & ~ok & (h_next <= q.tiny * span)
    exhausted = live & ~reach & ~gave_up & ~underflow & (tries >= q.max_steps)
    return dict(
        ok=ok,
        reach=reach,
        t_new=t_new,
        tries=tries,
        steps=steps,
        h_next=h_next,
        bad=bad,
        gave_up=gave_up,
        underflow=underflow,
        exhausted=exhausted,
    )


def _consensus(q: _Queue, s: dict, step: _Step, h, ok, t_new):
    """Where inside the step each slot's tokens first form one cluster at δ (regula falsi on the
    interpolant): (hit, t_hit, x_hit); without ``stop_when_clustered`` no slot hits."""
    t, y, fresh = s["t"], s["y"], s["fresh"]
    if q.delta is None:
        return jnp.zeros_like(ok), t_new, step.y1
    delta = q.delta

    def gap(x):  # ≥ 0 when every pair has ⟨u_i, u_j⟩ ≥ 1 − δ, i.e. ½‖u_i − u_j‖² ≤ δ
        if q.fast_spread:
            return delta - spread(x)  # exact below 1, in O(n)
        return delta - jnp.max(small_d_gaps(normalize(q.directions(x))), axis=(1, 2))

    hit = ok & (gap(step.y1) >= 0.0)

    def locate(_):
        # regula falsi, Illinois variant: the bracket [lo, hi] with gap(lo) < 0 ≤ gap(hi) shrinks
        # superlinearly; the end on the clustered side is returned
        def at(theta):
            return gap(_dense(q, y, step.coefficients, theta[:, None])[:, 0])

        def refine(_, state):
            lo, hi, g_lo, g_hi, side = state
            theta = jnp.clip((lo * g_hi - hi * g_lo) / jnp.where(g_hi > g_lo, g_hi - g_lo, 1.0), lo, hi)
            theta = jnp.where((theta <= lo) | (theta >= hi), 0.5 * (lo + hi), theta)
            g = at(theta)
            inside = g >= 0.0
            g_lo = jnp.where(~inside, g, jnp.where(side > 0, 0.5 * g_lo, g_lo))
            g_hi = jnp.where(inside, g, jnp.where(side < 0, 0.5 * g_hi, g_hi))
            return (
                jnp.where(inside, lo, theta),
                jnp.where(inside, theta, hi),
                g_lo,
                g_hi,
                jnp.where(inside, 1, -1).astype(side.dtype),
            )

        zero, one = jnp.zeros_like(t), jnp.ones_like(t)
        g0 = at(zero)
        _, hi, _, _, _ = jax.lax.fori_loop(
            0, _REFINEMENTS, refine, (zero, one, jnp.minimum(g0, -1e-300), gap(step.y1), jnp.zeros_like(s["ids"]))
        )
        return jnp.where(fresh | (h <= 0), 0.0, hi)

    frac = jax.lax.cond(jnp.any(hit), locate, lambda _: jnp.ones_like(t), None)
    return hit, t + frac * h, _dense(q, y, step.coefficients, frac[:, None])[:, 0]


def _save_passed(q: _Queue, s: dict, field, step: _Step, h, t_lim, live):
    """The saves the step passes, up to t_lim, from its interpolant, _PER_PASS at a time (the saves after a
    member stops are filled after the loop): (each slot's next save index, the saves)."""
    t, y, ids = s["t"], s["y"], s["ids"]
    n_save = q.ts.shape[0]
    lanes = jnp.arange(_PER_PASS, dtype=jnp.int32)

    def pending(ks_):
        return live & (ks_ < n_save) & (q.ts[jnp.minimum(ks_, n_save - 1)] <= t_lim)

    def save_more(state):
        ks_, out = state
        cols = ks_[:, None] + lanes
        at = q.ts[jnp.minimum(cols, n_save - 1)]
        want = live[:, None] & (cols < n_save) & (at <= t_lim[:, None])
        theta = jnp.clip(
            jnp.where(h[:, None] > 0, (at - t[:, None]) / jnp.where(h > 0, h, 1.0)[:, None], 1.0), 0.0, 1.0
        )
        value = _dense(q, y, step.coefficients, theta)
        rows = jnp.where(want, ids[:, None], q.members)
        cols = jnp.minimum(cols, n_save - 1)
        if q.after_loop:
            out = out.at[rows, cols].set(value, mode="drop")
        else:
            out = jax.tree_util.tree_map(
                lambda o, v: o.at[rows, cols].set(v.astype(o.dtype), mode="drop"), out, q.saves(field, at, value)
            )
        return ks_ + jnp.sum(want, axis=1, dtype=jnp.int32), out

    return jax.lax.while_loop(lambda st: jnp.any(pending(st[0])), save_more, (s["ks"], s["saves"]))


def _retire(q: _Queue, s: dict, done, x_end, t_end, steps, hit, t_hit, stop) -> dict:
    """The results of the members that finished, written to their rows (their status from ``stop``)."""
    row = jnp.where(done, s["ids"], q.members)
    status = jnp.where(
        stop["gave_up"],
        loop.Status.NON_FINITE,
        jnp.where(
            stop["exhausted"], loop.Status.MAX_STEPS, jnp.where(stop["underflow"], loop.Status.FAILED, loop.Status.DONE)
        ),
    ).astype(jnp.int8)
    return dict(
        x_final=s["x_final"].at[row].set(x_end, mode="drop"),
        t_end=s["t_end"].at[row].set(t_end, mode="drop"),
        n_steps=s["n_steps"].at[row].set(steps, mode="drop"),
        t_event=s["t_event"].at[row].set(jnp.where(hit, t_hit, jnp.inf), mode="drop"),
        # where a member stopped short: its last finite state, or the time it reached
        t_fail=s["t_fail"]
        .at[row]
        .set(
            jnp.where(stop["gave_up"], s["t"], jnp.where(stop["exhausted"] | stop["underflow"], t_end, jnp.inf)),
            mode="drop",
        ),
        status=s["status"].at[row].set(status, mode="drop"),
    )


def run_queue(*, carry, first, budget, **parts):
    """At most ``budget`` iterations of the queue from ``carry`` (replaced by the queue's start when ``first``):
    (the carry, (whether members are left, the iterations done, the members finished), the results).

    The results, (saves, final states, steps, event times, stop times, status) in the members' own order as
    ``adaptive_loop.run_adaptive`` returns them, are formed by the call that finishes the last member (zeros
    before it). ``first`` and ``budget`` are data, so one compiled program runs every call of a run, and the
    iterations go on from the carry as in one call: the same bits however the run is cut
    (``adaptive_loop.solve_queue`` cuts it into calls of about ``loop.SEGMENT_S``).
    """
    start, running, body, finish = _machine(**parts)
    state = loop.started(jnp.where(first, 0, 1), start, carry)

    def go(c):
        return running(c[0]) & (c[1] < budget)

    state, done = jax.lax.while_loop(go, lambda c: (body(c[0]), c[1] + 1), (state, jnp.zeros((), jnp.int32)))
    more = running(state)
    shapes = jax.eval_shape(finish, state)
    out = jax.lax.cond(
        more, lambda s: jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes), finish, state
    )
    return state, (more, done, state["finished"]), out


def start_like(*, field, axes, x0, save_fn, ts, slots, after_loop, **_):
    """Host zeros of the queue's carry for ``run_queue``'s arguments (but the carry): the first call's placeholder,
    replaced by the start inside it. Built from the shapes alone (only the save function is traced), so that a
    stored program runs without tracing the queue."""
    members, n, d = x0.shape
    dtype = np.dtype(x0.dtype)
    slots = min(int(slots), members)
    per_member = loop.MemberParts(field, axes)
    parts = per_member.take(lambda leaf: np.zeros((slots,) + tuple(leaf.shape[1:]), leaf.dtype))
    buffer = _buffer(
        np, _slot_saves(save_fn, axes), per_member.field(parts), slots, members, len(ts), n, d, dtype, after_loop
    )
    y = np.zeros((slots, n, d), dtype)
    return _carry(np, slots, members, dtype, np.zeros((), dtype), np.zeros((), dtype), y, parts, buffer)


def _slot_saves(save_fn, axes):
    """``save_fn`` for (slots, k) save times and states."""
    return jax.vmap(lambda f, t, x: jax.vmap(lambda tk, xk: save_fn(tk, xk, f))(t, x), in_axes=(axes, 0, 0))


def _buffer(xp, saves, slot_field, slots, members, n_save, n, d, dtype, after_loop):
    """Zeros for every member's saves in the array module ``xp``: its states (``after_loop``), else the values of
    ``saves`` (``_slot_saves``) for a field of the slots' members ``slot_field``."""
    if after_loop:
        return xp.zeros((members, n_save, n, d), dtype)
    spec = jax.eval_shape(saves, slot_field, jnp.zeros((slots, 1), dtype), jnp.zeros((slots, 1, n, d), dtype))
    return jax.tree_util.tree_map(lambda s: xp.zeros((members, n_save) + s.shape[2:], s.dtype), spec)


def _carry(xp, slots, members, dtype, t0, t1, y, parts, buffer):
    """The queue's carry at t0 in the array module ``xp`` (jax.numpy in the program, NumPy for ``start_like``'s
    placeholder): every slot fresh with its member's state ``y`` and field ``parts``, every member's results empty
    (``buffer``: its saves)."""
    return dict(
        ids=xp.arange(slots, dtype=np.int32),
        t=xp.full((slots,), t0, dtype),
        h=xp.zeros((slots,), dtype),
        fresh=xp.ones((slots,), bool),
        y=y,
        k1=xp.zeros(y.shape, dtype),
        parts=parts,
        steps=xp.zeros((slots,), np.int32),
        tries=xp.zeros((slots,), np.int32),
        bad=xp.zeros((slots,), np.int32),
        ks=xp.zeros((slots,), np.int32),
        next=xp.asarray(slots, np.int32),
        finished=xp.asarray(0, np.int32),
        saves=buffer,
        x_final=xp.zeros((members,) + y.shape[1:], dtype),
        t_end=xp.full((members,), t1, dtype),
        n_steps=xp.zeros((members,), np.int32),
        t_event=xp.full((members,), np.inf, dtype),
        t_fail=xp.full((members,), np.inf, dtype),
        status=xp.zeros((members,), np.int8),
    )


def _machine(
    *,
    field,
    axes,
    x0,
    save_fn,
    delta,
    method,
    t0,
    t1,
    ts,
    dt0,
    rtol,
    atol,
    max_steps,
    order,
    slots,
    after_loop,
):
    """(start, running, body, finish) of the adaptive solves of every member through ``slots`` slots: ``start()``,
    the carry at t0; ``running(carry)``, whether members are left; ``body(carry)``, one iteration; ``finish(carry)``,
    the results once none is left.

    ``order``: the members in the order they enter the queue (hardest first). ``after_loop``: save
    the states and compute the statistics from them at the end (``loop.statistics_of``); else ``save_fn`` is
    applied in the loop. Each iteration tries a step from every slot (``_try_step``), accepts or rejects it (``_control``), locates
    a consensus inside it (``_consensus``), writes the saves it passes (``_save_passed``), retires the
    members that finished (``_retire``) and refills their slots from the queue.
    """
    members, n, d = x0.shape
    dtype = x0.dtype
    slots = min(int(slots), members)
    tableau = _tableau(method)
    sphere = field.geometry == "sphere"
    settle = _coalesce.settler(field)
    # every step starts settled, so a Coalesced field's own work (representatives per evaluation) is not needed
    inner_axes = axes.settled_field()
    saves = _slot_saves(save_fn, axes)
    ts = jnp.asarray(ts, dtype)
    n_save = ts.shape[0]
    t0 = jnp.asarray(t0, dtype)
    t1 = jnp.asarray(t1, dtype)
    q = _Queue(
        members=members,
        slots=slots,
        method=tableau,
        dense_rows=[tuple(float(v) for v in row) for row in _interpolant(method, len(tableau[1]))],
        ts=ts,
        t0=t0,
        t1=t1,
        tiny=8.0 * jnp.finfo(dtype).eps,
        rtol=rtol,
        atol=atol,
        dt0=dt0,
        max_steps=max_steps,
        delta=delta,
        # consensus of angles from their range (``circle.spread``), exact for thresholds δ < 1
        fast_spread=field.in_angles and isinstance(delta, (int, float)) and delta < 1.0,
        finish=normalize if sphere else (lambda y: y),
        vfield=jax.vmap(lambda f, t, x: f(t, x), in_axes=(inner_axes, 0, 0)),
        directions=jax.vmap(lambda x: field.directions(x)),
        saves=saves,
        after_loop=after_loop,
        field=field,
        eps_merge=field.coalesce_eps,
    )
    order = jnp.asarray(order, jnp.int32)

    # the field's per-member leaves, in the queue's order
    per_member = loop.MemberParts(field, axes)
    queued = per_member.take(lambda leaf: leaf[order])
    x_queue = x0[order]
    slot_field = per_member.field

    def take(queue, ids):  # rows of the queue for slots (empty slots repeat its last member)
        return queue[jnp.minimum(ids, members - 1)]

    ids0 = jnp.arange(slots, dtype=jnp.int32)
    parts0 = [take(p, ids0) if p is not None else None for p in queued]
    buffer = _buffer(jnp, saves, slot_field(parts0), slots, members, n_save, n, d, dtype, after_loop)
    carry = _carry(jnp, slots, members, dtype, t0, t1, settle(take(x_queue, ids0)), parts0, buffer)

    def body(s):
        ids, t, y, fresh = s["ids"], s["t"], s["y"], s["fresh"]
        live = ids < members
        f = slot_field(s["parts"])
        h = jnp.where(fresh, 0.0, jnp.minimum(s["h"], t1 - t))
        step = _try_step(q, s, f, h)
        stop = _control(q, s, step, h, live)
        ok, t_new = stop["ok"], stop["t_new"]
        hit, t_hit, x_hit = _consensus(q, s, step, h, ok, t_new)
        done = stop["reach"] | hit | stop["gave_up"] | stop["underflow"] | stop["exhausted"]
        x_end = jnp.where(hit[:, None, None], x_hit, jnp.where(ok[:, None, None], step.y1, y))
        t_end = jnp.where(hit, t_hit, jnp.where(ok, t_new, t))
        t_lim = jnp.where(hit, t_hit, jnp.where(ok, t_new, -jnp.inf))
        ks_new, out = _save_passed(q, s, f, step, h, t_lim, live)
        results = _retire(q, s, done, x_end, t_end, stop["steps"], hit, t_hit, stop)

        # the next members of the queue into the finished members' slots
        rank = jnp.cumsum(done, dtype=jnp.int32) - 1
        new_ids = jnp.where(done, jnp.minimum(s["next"] + rank, members), ids)
        new_ids = jnp.where(new_ids >= members, members, new_ids)
        count = jnp.sum(done, dtype=jnp.int32)
        sel = done[:, None, None]
        y_next = jnp.where(ok[:, None, None], step.y1, y)

        def refill(operands):
            y_, parts_ = operands
            y_ = jnp.where(sel, settle(take(x_queue, new_ids)), y_)
            return y_, [
                jnp.where(done.reshape((-1,) + (1,) * (p.ndim - 1)), take(p, new_ids), old) if p is not None else None
                for p, old in zip(queued, parts_)
            ]

        # most iterations finish no member
        y_next, parts = jax.lax.cond(count > 0, refill, lambda operands: operands, (y_next, s["parts"]))
        finished = s["finished"] + count
        return dict(
            ids=new_ids,
            t=jnp.where(done, t0, t_new),
            h=jnp.where(done, 0.0, stop["h_next"]),
            fresh=done,
            y=y_next,
            k1=jnp.where(sel, 0.0, jnp.where(ok[:, None, None], step.f1, s["k1"])),
            parts=parts,
            steps=jnp.where(done, 0, stop["steps"]),
            tries=jnp.where(done, 0, stop["tries"]),
            bad=jnp.where(done, 0, stop["bad"]),
            ks=jnp.where(done, 0, ks_new),
            next=s["next"] + count,
            finished=finished,
            saves=out,
            **results,
        )

    def running(s):
        return jnp.any(s["ids"] < members)

    def finish(s):
        # saves after a member stopped (at consensus, or failing) hold its last state
        if after_loop:
            held = s["x_final"]
        else:
            held = jax.vmap(lambda f, t, x: save_fn(t, x, f), in_axes=(axes, 0, 0))(
                slot_field(queued), s["t_end"], s["x_final"]
            )
        saved = loop.hold_after(ts, s["t_end"], s["saves"], held)
        # back to the members' own order
        position = jnp.argsort(order)
        out = [saved] + [s[k] for k in ("x_final", "n_steps", "t_event", "t_fail", "status")]
        out = [jax.tree_util.tree_map(lambda v: v[position], v) for v in out]
        if after_loop:
            out[0] = loop.statistics_of(field, axes, save_fn, ts, out[0])
        return tuple(out)

    return (lambda: carry), running, body, finish
