"""The adaptive loops: diffrax's error-controlled solve vmapped over the members, in groups, or the queue.

``prepare`` picks the queue (``queue.py``: slots refilled as members finish) for large ensembles of an
FSAL method on one CPU device (large as a whole: a call running part of one, ``simulate(ensemble=...)``,
runs the queue as the whole would), else diffrax's ``diffeqsolve`` vmapped over the members, in groups of members
of like stiffness where that saves work (``grouping``): on one device, outside the caller's trace, in calls of about
a second, each resumed from the state the last one ended in (``run_adaptive_calls``, ``adaptive.Budgeted``: the
bits of one call), else in one call (``run_adaptive``). Both are made of a member's pieces (``_Member``).
Neither raises inside the compiled loop: each member returns a status (``loop.Status``), which
``simulate`` reads.
"""

from __future__ import annotations

from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from ..particles.sphere import normalize, within
from . import loop, programs
from . import progress as _progress
from . import queue as _queue
from . import sharding as _sharding
from .adaptive import CUT, NON_FINITE, Budgeted, FiniteSteps, OnSphere, reaching
from .dense import steps_to_cover
from .methods import METHODS
from .problem import Problem, check_steps

FIRST_STEP = 0.01
"""The first step of an adaptive solve without ``dt``: the one diffrax's solve takes (its initial step selection
applies to bare ODE terms, and ``diffeqsolve`` hands its controller wrapped ones), given explicitly so that a solve
resumed from call to call (``run_adaptive_calls``) starts as the one-call solve does."""
_AUTO_GROUP = 64  # group_size=None never groups this many members or fewer
# cost of one iteration of a vmapped solve's loop beyond its members' arithmetic, in members
# (measured on CPU: 0.36 ms against 7.9 µs per member for n = 32, d = 2)
_LOOP_OVERHEAD = 32


def grouping(group_size, field, axes, x0, t0) -> tuple[int | None, Any]:
    """(members per group, member order hardest first) for an adaptive ensemble; (None, None): one group.

    group_size=None groups ensembles of more than 64 members on CPU, in groups of about 32, 64 or
    128, when the stiffness estimates predict saving at least 30% of the work: a vmapped loop
    runs as many iterations as its slowest member, so the work is Σ_groups (overhead + size) ·
    max steps in the group. Steps are predicted as hardness^0.7 (tsit5 on USA at rtol 1e-6 takes
    about that many more steps as its Lipschitz constant grows; SA's steps hardly depend on β,
    and its estimates hardly spread). On GPUs a batch costs little more than one member: one group.
    """
    members = x0.shape[0]
    if group_size is not None and (
        isinstance(group_size, (bool, np.bool_)) or not isinstance(group_size, (int, np.integer)) or group_size < 0
    ):
        raise ValueError(
            f"group_size must be None (automatic), 0 (one group) or a positive integer, got {group_size!r}"
        )
    if group_size is None:
        if members <= _AUTO_GROUP or jax.default_backend() != "cpu":
            return None, None
    elif group_size == 0 or group_size >= members:
        return None, None
    estimates = np.asarray(hardness(field, axes, x0, t0), dtype=float)
    order = np.argsort(-estimates, kind="stable")
    if group_size is not None:
        return int(group_size), jnp.asarray(order)

    steps = np.maximum(estimates[order], 1e-300) ** 0.7

    def work(size):
        padded = np.concatenate([steps, np.repeat(steps[-1:], -members % size)])
        return np.sum((_LOOP_OVERHEAD + size) * padded.reshape(-1, size).max(axis=1))

    # sizes as even as possible (little padding in the last group)
    sizes = {-(-members // -(-members // target)) for target in (32, 64, 128) if target < members}
    size = min(sorted(sizes), key=work)
    if not work(size) < 0.7 * (_LOOP_OVERHEAD + members) * steps.max():
        return None, None
    return size, jnp.asarray(order)


def queue_slots(solver, adaptive, jumps, group_size, members, shard) -> int | None:
    """Slots of the queue (``solvers/queue.py``) for an adaptive ensemble, None where it does not run.

    It runs ensembles of more than 64 members on one CPU device with an FSAL method (tsit5,
    dopri5), without layer switches, unless ``group_size`` asks for diffrax's grouped solve.
    ``members`` counts the whole ensemble (``Problem.ensemble``), also for a call that runs a part of it.
    """
    if (
        group_size is None
        and adaptive
        and solver in _queue.QUEUE_METHODS
        and not len(jumps)
        and members > _AUTO_GROUP
        and jax.default_backend() == "cpu"
        and (shard is False or len(jax.local_devices()) == 1)
    ):
        return _queue.SLOTS
    return None


@programs.jit
def hardness(field, axes, x0, t0):
    """Per member: ‖f(t0, x0)‖ plus a finite-difference Lipschitz constant of f at x0.

    Step counts of explicit adaptive methods grow with the field's Lipschitz constant (β for
    attention, e^β β for USA in [GLPR]'s time), so ordering by it makes groups homogeneous.
    Two field evaluations per member.
    """

    def one(f, x):
        w = jnp.cos(2.4 * jnp.arange(x.size, dtype=x.dtype)).reshape(x.shape)  # a fixed direction
        eps = jnp.sqrt(jnp.finfo(x.dtype).eps) * (1.0 + jnp.sqrt(jnp.mean(x * x)))
        v = f(t0, x)
        lipschitz = jnp.linalg.norm(f(t0, x + eps * w) - v) / (eps * jnp.linalg.norm(w))
        key = jnp.linalg.norm(v) + lipschitz
        return jnp.where(jnp.isnan(key), jnp.inf, key)

    return jax.vmap(one, in_axes=(axes, 0))(field, x0)


def _group_done(t, steps):
    _progress.report(-1, t)


def in_groups(solve, field, axes, x0, size, order, report=None):
    """``solve(field, x0)`` (vmapped over members) run as groups of ``size`` members, one after the other
    (``x0``: a pytree of (members, ...) arrays).

    Members are taken in ``order`` (hardest first), so each group's while loop runs about as long
    as its members need; the last group is padded with copies of its last member, so every group
    runs the one compiled body; outputs come back in the original member order.
    """
    members = jax.tree_util.tree_leaves(x0)[0].shape[0]
    groups = -(-members // size)
    idx = jnp.concatenate([order, jnp.broadcast_to(order[-1:], (groups * size - members,))])
    per_member = loop.MemberParts(field, axes)

    def split(a):
        return _sharding.constrain_members(a[idx].reshape((groups, size) + a.shape[1:]))

    def group(xs):
        parts, x_g, g = xs
        out = solve(per_member.field(parts), x_g)
        if report is not None:
            t0, t1 = report
            jax.debug.callback(_group_done, t0 + (g + 1) * (t1 - t0) / groups, out[2])
        return out

    out = jax.lax.map(group, (per_member.take(split), jax.tree_util.tree_map(split, x0), jnp.arange(groups)))
    position = jnp.argsort(order)  # where each member sits in the sorted order
    return jax.tree_util.tree_map(lambda a: a.reshape((groups * size,) + a.shape[2:])[position], out)


class _Member:
    """What a member's diffrax solve is made of, shared by the one-call solve and the bounded calls: its term,
    solver, step size controller, save function, event and results (``ended``)."""

    def __init__(self, f, *, x0_m, save_fn, delta, method, t0, rtol, atol, adaptive, after_loop, jumps):
        self.f, self.save_fn, self.delta, self.after_loop, self.t0 = f, save_fn, delta, after_loop, t0
        self.term = diffrax.ODETerm(lambda t, y, args: f(t, y))
        controller: diffrax.AbstractStepSizeController = (
            diffrax.PIDController(rtol=rtol, atol=atol) if adaptive else diffrax.ConstantStepSize()
        )
        if jumps is not None:
            # step exactly to each layer switch and restart there, instead of smearing it over a step
            controller = diffrax.ClipStepSizeController(controller, jump_ts=jumps)
        self.controller = FiniteSteps(controller, adaptive=bool(adaptive))
        sphere = f.geometry == "sphere"
        merge = f.coalesce_eps
        self.solver = OnSphere(method, coalesce=merge, sphere=sphere) if sphere or merge is not None else method
        self.finish = normalize if sphere else (lambda y: y)
        self.out_types = jax.eval_shape(lambda y: save_fn(t0, y, f), x0_m)
        self.event = None
        if delta is not None:
            # a continuous condition lets diffrax locate the crossing inside the step by root finding
            def gap(t, y, args, **kw):
                y = normalize(f.directions(y))  # clustering is about directions, also off the sphere
                # in the default float dtype: diffrax's root find pairs it with a Python 0.0 (float64 under x64)
                # at full precision, as ``within``, whatever the run's precision
                gram = jnp.matmul(y, y.T, precision="highest")
                return (jnp.min(gram) - (1.0 - delta)).astype(jnp.result_type(float))

            # the crossing to ~100 ulps of the state's precision (float32 times cannot do 1e-10)
            tol = 100.0 * float(jnp.finfo(x0_m.dtype).eps)
            self.event = diffrax.Event(gap, root_finder=optx.Newton(rtol=max(tol, 1e-10), atol=max(tol, 1e-12)))

    def save_at(self, t, y, args):
        # small runs (``after_loop``, a static choice: ``loop.keeps_states``) save their states and compute the
        # statistics after the loop, all saves of all members at once: inside diffrax's loop each save is an
        # iteration of its own; diffrax fills saves past the end with inf, so integer statistics travel as floats
        if self.after_loop:
            return self.finish(y)
        return jax.tree_util.tree_map(loop.as_float, self.save_fn(t, self.finish(y), self.f))

    def status(self, result):
        """The ``loop.Status`` of a solve that ended with diffrax's ``result``."""
        done = (result == diffrax.RESULTS.successful) | (result == diffrax.RESULTS.event_occurred)
        return jnp.where(
            done,
            loop.Status.DONE,
            jnp.where(
                result == diffrax.RESULTS.max_steps_reached,
                loop.Status.MAX_STEPS,
                jnp.where(result == NON_FINITE, loop.Status.NON_FINITE, loop.Status.FAILED),
            ),
        ).astype(jnp.int8)

    def ended(self, x0_m, ts, saved, y_end, t_end, steps, stopped, status):
        """(saves, final state, steps, event time, stop time, status) of a solve that ended at ``t_end`` in ``y_end``
        with ``status``, having saved ``saved`` (inf past its end) and stopped at its event where ``stopped``."""
        if not self.after_loop:
            saved = jax.tree_util.tree_map(lambda a, spec: a.astype(spec.dtype), saved, self.out_types)
        x_end = self.finish(y_end)
        if self.delta is not None:
            already = within(self.f.directions(x0_m), self.delta)
            t_event = jnp.where(already, self.t0, jnp.where(stopped, t_end, jnp.inf))
            # saves after the event hold the state where the member stopped
            saved = loop.hold_after(ts, t_end, saved, x_end if self.after_loop else self.save_fn(t_end, x_end, self.f))
        else:
            t_event = jnp.asarray(jnp.inf, x0_m.dtype)
        t_fail = jnp.where(status == loop.Status.DONE, jnp.inf, t_end).astype(x0_m.dtype)
        return saved, x_end, steps, t_event, t_fail, status


@programs.jit
def run_adaptive(
    *,
    field,
    axes,
    x0,
    save_fn,
    delta,
    progress,
    method,
    t0,
    t1,
    ts,
    dt0,
    rtol,
    atol,
    max_steps,
    adaptive,
    after_loop: bool,
    jumps=None,
    group_size=None,
    order=None,
):
    """Adaptive solves of every member: (saves, final states, steps, event times, stop times, status).

    status per member: a ``loop.Status``; the stop time is where a member that did not reach its end
    stopped (NON_FINITE: ``FiniteSteps`` stopped the solve at its last finite state; MAX_STEPS,
    FAILED: the time the solve reached), inf for the DONE members. With ``group_size`` the members run in groups of that
    size, taken in ``order`` (``in_groups``); progress then advances per group.
    """
    grouped = group_size is not None
    settings = dict(
        save_fn=save_fn,
        delta=delta,
        method=method,
        t0=t0,
        rtol=rtol,
        atol=atol,
        adaptive=adaptive,
        after_loop=after_loop,
        jumps=jumps,
    )

    def one(f, x0_m):
        m = _Member(f, x0_m=x0_m, **settings)
        saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts, fn=m.save_at), diffrax.SubSaveAt(t1=True)])
        sol = diffrax.diffeqsolve(
            m.term,
            m.solver,
            t0,
            t1,
            dt0,
            x0_m,
            saveat=saveat,
            stepsize_controller=m.controller,
            max_steps=max_steps,
            event=m.event,
            throw=False,
            progress_meter=(
                _progress.StderrMeter(minimum_increase=0.01) if progress and not grouped else diffrax.NoProgressMeter()
            ),
        )
        stopped = sol.event_mask if sol.event_mask is not None else False
        (y_end,) = sol.ys[1]
        return m.ended(
            x0_m, ts, sol.ys[0], y_end, sol.ts[1][0], sol.stats["num_accepted_steps"], stopped, m.status(sol.result)
        )

    solve = jax.vmap(one, in_axes=(axes, 0))
    if not grouped:
        out = solve(field, x0)
    else:
        out = in_groups(solve, field, axes, x0, group_size, order, report=(t0, t1) if progress else None)
    if not after_loop:
        return out
    return (loop.statistics_of(field, axes, save_fn, ts, out[0]),) + tuple(out[1:])


RUNNING = -1
"""The status of a member in the carry of ``run_adaptive_calls`` that has not ended yet (else its ``loop.Status``)."""
MEMBERS = "members"
"""The axis name of the members in ``run_adaptive_calls``' vmapped solves, along which ``Budgeted`` cuts them together."""


def _start(m: _Member, x0_m, t0, t1, dt0, ts, max_steps: int, jumps: bool):
    """A member's carry at t0 for ``run_adaptive_calls``: what diffeqsolve itself starts from (its controller's and
    solver's initial states, the first step's end), its saves empty (inf, as diffrax leaves saves not reached)."""
    controller = Budgeted.until(m.controller, t1, max_steps, MEMBERS).wrap(1)
    t_next, state = controller.init(m.term, t0, t1, x0_m, dt0, None, m.solver.func, m.solver.error_order(m.term))
    one = jax.eval_shape(m.save_at, t0, x0_m, None)
    carry = dict(
        y=x0_m,
        solver=m.solver.init(m.term, t0, t_next, x0_m, None),
        controller=state,
        t=t0,
        steps=jnp.zeros((), jnp.int32),
        saves_done=jnp.zeros((), jnp.int32),
        status=jnp.asarray(RUNNING, jnp.int8),
        stopped=jnp.zeros((), bool),
        saved=jax.tree_util.tree_map(lambda a: jnp.full((len(ts),) + a.shape, jnp.inf, a.dtype), one),
    )
    if jumps:
        carry["jump"] = jnp.zeros((), bool)
    return carry


def _advance(m: _Member, c, t1, ts, budget, max_steps, jumps: bool):
    """A member's carry after at most ``budget`` more step attempts of its solve (none once it has ended)."""
    running = c["status"] == RUNNING
    t_start = jnp.where(running, c["t"], t1)
    inner, attempts, _, t_next, t_at, y_at, live = c["controller"]
    dt = jnp.where(running, reaching(t_start, t_next), jnp.ones_like(t_start))
    stop = attempts + jnp.minimum(budget, max_steps - attempts)
    saveat = diffrax.SaveAt(
        # save times already passed are clipped to the start, saved again and dropped below
        subs=[diffrax.SubSaveAt(ts=jnp.maximum(ts, t_start), fn=m.save_at), diffrax.SubSaveAt(t1=True)],
        solver_state=True,
        controller_state=True,
        made_jump=jumps,
    )
    sol = diffrax.diffeqsolve(
        m.term,
        m.solver,
        t_start,
        t1,
        dt,
        c["y"],
        saveat=saveat,
        stepsize_controller=Budgeted.until(m.controller, t1, max_steps, MEMBERS),
        max_steps=max_steps,
        event=m.event,
        throw=False,
        solver_state=c["solver"],
        controller_state=(inner, attempts, stop, t_next, t_at, y_at, live & running),
        made_jump=c["jump"] if jumps else None,
    )
    stopped = sol.event_mask if sol.event_mask is not None else c["stopped"]
    # where it stopped at its event, the solve's end; else where it is (``Budgeted``)
    _, attempts, _, _, t_at, y_at, _ = sol.controller_state
    (y_event,) = sol.ys[1]
    t_end = jnp.where(stopped, sol.ts[1][0], t_at)
    y_end = jnp.where(stopped, y_event, y_at)
    status = jnp.where(
        sol.result == CUT,
        jnp.where(t_end >= t1, loop.Status.DONE, jnp.where(attempts >= max_steps, loop.Status.MAX_STEPS, RUNNING)),
        m.status(sol.result),
    ).astype(jnp.int8)
    # a step saves the save times up to its end as it is taken: those after the last call's end are this call's
    saves_done = jnp.sum(ts <= t_end).astype(jnp.int32)
    index = jnp.arange(len(ts))
    fresh = (index >= c["saves_done"]) & (index < saves_done)

    def merged(new, old):
        return jnp.where(fresh.reshape(fresh.shape + (1,) * (old.ndim - 1)), new.astype(old.dtype), old)

    new = dict(
        y=y_end,
        solver=sol.solver_state,
        controller=sol.controller_state,
        t=t_end,
        steps=c["steps"] + sol.stats["num_accepted_steps"],
        saves_done=saves_done,
        status=status,
        stopped=stopped,
        saved=jax.tree_util.tree_map(merged, sol.ys[0], c["saved"]),
    )
    if jumps:
        new["jump"] = sol.made_jump
    new = loop.like(new, c)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(running, a, b), new, c)


class _Calls:
    """What ``run_adaptive_calls`` and its placeholder read of their arguments (``parts``, ``run_adaptive``'s): each
    member's pieces, the times in the save times' dtype, the step bound, whether the field has layer switches."""

    MEMBER = ("save_fn", "delta", "method", "t0", "rtol", "atol", "adaptive", "after_loop", "jumps")

    def __init__(self, parts: dict):
        self.settings = {k: parts.get(k) for k in self.MEMBER}
        self.ts = ts = parts["ts"]
        self.t0, self.t1 = jnp.asarray(parts["t0"], ts.dtype), jnp.asarray(parts["t1"], ts.dtype)
        self.dt0 = None if parts["dt0"] is None else jnp.asarray(parts["dt0"], ts.dtype)
        self.max_steps = parts["max_steps"]
        self.jumps = parts.get("jumps") is not None

    def member(self, f, x0_m) -> _Member:
        return _Member(f, x0_m=x0_m, **self.settings)

    def start(self, m: _Member, x0_m):
        return _start(m, x0_m, self.t0, self.t1, self.dt0, self.ts, self.max_steps, self.jumps)


@programs.jit
def run_adaptive_calls(*, carry, first, budget, field, axes, x0, group_size=None, order=None, **parts):
    """At most ``budget`` more step attempts of every member's diffrax solve from ``carry`` (replaced by the start
    when ``first``): (the carry, (whether members are left, the loop's iterations, the earliest time a running
    member is at), the results), the results as ``run_adaptive`` returns them, formed by the call that ends the
    last member (zeros before it). ``parts``: the rest of ``run_adaptive``'s arguments.

    Each call resumes every member's solve from its own state (``Budgeted``), so the steps, and the saves, are those
    of one call: the same bits however the run is cut. ``first`` and ``budget`` are data: one compiled program runs
    every call of a run. With ``group_size`` the members run in groups (``in_groups``), each group's loop in turn.
    """
    calls = _Calls(parts)
    ts, t1 = calls.ts, calls.t1

    def one(f, x0_c):
        x0_m, c = x0_c
        m = calls.member(f, x0_m)
        c = jax.lax.cond(first, lambda c: loop.like(calls.start(m, x0_m), c), lambda c: c, c)
        c_in = c
        c = _advance(m, c, t1, ts, budget, calls.max_steps, calls.jumps)
        return c, c["controller"][1] - c_in["controller"][1]  # the step attempts of this call

    solve = jax.vmap(one, in_axes=(axes, 0), axis_name=MEMBERS)
    if group_size is None:
        carry, attempts = solve(field, (x0, carry))
        iterations = jnp.max(attempts)
    else:
        carry, attempts = in_groups(solve, field, axes, (x0, carry), group_size, order)
        iterations = jnp.max(attempts) * (-(-x0.shape[0] // group_size))
    running = carry["status"] == RUNNING
    more = jnp.any(running)

    def results(c):
        def ended(f, x0_m, c_m):
            m = calls.member(f, x0_m)
            return m.ended(x0_m, ts, c_m["saved"], c_m["y"], c_m["t"], c_m["steps"], c_m["stopped"], c_m["status"])

        out = jax.vmap(ended, in_axes=(axes, 0, 0))(field, x0, c)
        if not parts["after_loop"]:
            return out
        return (loop.statistics_of(field, axes, parts["save_fn"], ts, out[0]),) + tuple(out[1:])

    shapes = jax.eval_shape(results, carry)
    out = jax.lax.cond(
        more, lambda c: jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes), results, carry
    )
    return carry, (more, iterations, jnp.min(jnp.where(running, carry["t"], t1))), out


def adaptive_start_like(*, field, axes, x0, **parts):
    """Host zeros of ``run_adaptive_calls``'s carry for its arguments (but the carry): the first call's placeholder,
    replaced by the start inside it."""

    def starts():
        calls = _Calls(parts)
        return jax.vmap(lambda f, x0_m: calls.start(calls.member(f, x0_m), x0_m), in_axes=(axes, 0))(field, x0)

    return jax.tree_util.tree_map(lambda a: np.zeros(a.shape, a.dtype), jax.eval_shape(starts))


def prepare(p: Problem, plan) -> tuple[Any, dict]:
    """(the loop, its arguments) for ``p`` laid out by the sharding ``plan`` (None: one device)."""
    if not p.adaptive:
        # diffrax's constant steps, plus one more at each layer switch it steps to
        check_steps(
            f"solver {p.solver!r} (adaptive=False)",
            p.t0,
            p.t1,
            p.fixed_dt,
            steps_to_cover(p.t1 - p.t0, p.fixed_dt) + len(p.jumps),
            p.max_steps,
            p.dtype,
        )
    args = dict(
        method=METHODS[p.solver].make(p.rtol, p.atol),
        t0=p.t0,
        t1=p.t1,
        # decided here, not while tracing: a compiled call is cached with its choice
        after_loop=loop.keeps_states(p.x0, p.ts),
        # save times a rounding error outside [t0, t1] are clipped: diffrax's own check of them
        # is compiled without a callback when the command line runs (solvers/compilation_cache.py)
        ts=jnp.asarray(np.clip(p.ts, p.t0, p.t1), p.dtype),
        dt0=p.dt if p.dt is not None else FIRST_STEP,
        rtol=p.rtol,
        atol=p.atol,
        max_steps=int(p.max_steps),
    )
    if p.traced:
        # under the caller's trace (jax.grad, jit, vmap): one vmapped diffrax solve, which diffrax
        # differentiates (its checkpointed adjoint); the queue and the groups order members eagerly
        if p.group_size not in (None, 0):
            raise ValueError(
                f"group_size={p.group_size} orders the members by a stiffness estimate computed before "
                "the solve, which cannot run under jax.grad, jax.jit or jax.vmap: leave group_size=None "
                "there (one vmapped adaptive solve, differentiable), or use a fixed-step solver"
            )
        return solve_diffrax, dict(
            args,
            adaptive=p.adaptive,
            group_size=None,
            order=None,
            jumps=jnp.asarray(p.jumps, p.dtype) if len(p.jumps) else None,
        )
    # chosen for the whole ensemble: a part of it runs the queue as the whole does
    slots = queue_slots(p.solver, p.adaptive, p.jumps, p.group_size, p.ensemble, p.shard)
    if slots:
        order = jnp.asarray(np.argsort(-np.asarray(hardness(p.field, p.axes, p.x0, p.t0)), kind="stable"))
        return solve_queue, dict(
            args, order=_sharding.pad_order(plan, order, p.members) if plan else order, slots=slots
        )
    group, order = grouping(p.group_size, p.field, p.axes, p.x0, p.t0)
    if plan is not None:
        group, order = _sharding.group_size(plan, group), _sharding.pad_order(plan, order, p.members)
    return solve_diffrax, dict(
        args,
        adaptive=p.adaptive,
        group_size=group,
        order=order,
        jumps=jnp.asarray(p.jumps, p.dtype) if len(p.jumps) else None,
        # in calls of bounded wall time on one device; on several, one call (the sharding decides the program)
        bounded=plan is None,
    )


def _rate_key(kind: str, kwargs: dict, *names: str) -> tuple:
    """The key of a bounded loop's rate (``loop.RATES``): its kind, the field's and method's types, the states' shape
    and dtype, the save function, where the statistics are computed, and the arguments ``names``."""
    x0 = kwargs["x0"]
    return (
        kind,
        type(kwargs["field"]).__qualname__,
        type(kwargs["method"]).__qualname__,
        tuple(x0.shape),
        str(x0.dtype),
        getattr(kwargs["save_fn"], "__qualname__", None),
        kwargs["after_loop"],
    ) + tuple(kwargs[name] for name in names)


def solve_diffrax(*, bounded=False, progress=False, **kwargs):
    """Every member's results with its status (``simulate`` reports those that stopped short): ``run_adaptive`` in
    one call, or with ``bounded`` its solves in calls of about ``loop.SEGMENT_S`` (``run_adaptive_calls``), with
    progress reported, and an interrupt honoured, between them, the same bits as one call."""
    if not bounded:
        return run_adaptive(progress=progress, **kwargs)
    t0, t1 = float(kwargs["t0"]), float(kwargs["t1"])
    key = _rate_key("diffrax", kwargs, "adaptive", "group_size") + (kwargs["delta"] is None, kwargs["jumps"] is None)

    def call(carry, first, budget):
        return run_adaptive_calls(carry=carry, first=first, budget=budget, **kwargs)

    def report(t):
        if progress:
            _progress.report(-1, min(max(float(t), t0), t1))

    return loop.bounded(call, adaptive_start_like(**kwargs), key=key, report=report)


def solve_queue(*, progress=False, **kwargs):
    """The queue's solves (``queue.py``) in calls of bounded wall time (about ``loop.SEGMENT_S``), with progress
    reported, and an interrupt honoured, between them: every member's results with its status, the same bits as
    one call.

    The solves do not raise from inside the compiled loop (that would need a host callback, and
    JAX never writes programs with host callbacks to its persistent compilation cache)."""
    x0 = kwargs["x0"]
    members = x0.shape[0]
    t0, t1 = float(kwargs["t0"]), float(kwargs["t1"])
    key = _rate_key("queue", kwargs)

    def call(carry, first, budget):
        return _run_queue(carry=carry, first=first, budget=budget, **kwargs)

    def report(finished):
        if progress:
            _progress.report(-1, t0 + (t1 - t0) * int(finished) / members)

    return loop.bounded(call, _queue.start_like(**kwargs), key=key, report=report)


@programs.jit
def _run_queue(**kwargs):
    return _queue.run_queue(**kwargs)
