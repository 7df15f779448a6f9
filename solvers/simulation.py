"""``simulate``: integrate a field from a configuration (or an ensemble of them) on the sphere."""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float, Int

from ..particles.checks import check_choice, check_int, check_real
from ..particles import coalesce as _coalesce
from ..particles.init import from_array
from ..particles.sphere import normalize, within
from . import dense as _dense
from . import progress as _progress
from . import queue as _queue
from . import sharding as _sharding
from ..particles.fields import Field, ensemble_axes
from .adaptive import NON_FINITE, FiniteSteps, OnSphere
from .compiler import jit_with_options, loop_options
from .methods import METHODS, names, spoken
from .stochastic import Strang, as_key

GRID_ONLY = names(grid_only=True)
"""Fixed-step methods that always step on the uniform grid and interpolate their saves (``solvers/dense.py``)."""

ONE_STEP = names("fixed", grid_only=False)
"""Fixed-step methods that take one step at a time (``fixed.FixedStep``): what a stochastic field's splitting wraps."""

SOLVERS = names()

MAX_COUNTED_STEPS = 2**31 - 1
"""The most steps a fixed-step run takes per member, whatever ``max_steps``: its step counters are int32."""


class Solution(eqx.Module):
    """What ``simulate`` returns. Arrays carry a leading batch axis when the run was an ensemble.

    ts       (T,)             save times
    xs       (..., T, n, d)   states at the save times (None when ``save`` was given)
    stats    PyTree           ``save(t, x)`` at the save times, each leaf (..., T, ...) (None otherwise)
    x_final  (..., n, d)      state at t1 (or where the clustering event stopped the member)
    steps    (...,)           accepted steps taken
    t_event  (...,)           time the member was found clustered when ``stop_when_clustered``
                              was given (inf if never, or if no event was asked for)
    """

    ts: Float[Array, " T"]
    xs: Float[Array, "... T n d"] | None
    stats: Any
    x_final: Float[Array, "... n d"]
    steps: Int[Array, "..."]
    t_event: Float[Array, "..."]
    solver: str = eqx.field(static=True)


class NonFiniteError(FloatingPointError):
    """A member's state became NaN or infinite during ``simulate``; what was computed before is kept.

    member    index of the first failing member (0 for an unbatched run); from ``experiments.run``,
              its coordinates (d, β, seed)
    t         the time of that member's last finite state
    members   every failing member, as ``member``; times: their last finite times
    cause     the likely cause and its remedy, as the message ends
    solution  the ``Solution`` of the whole run: each failing member holds its saves up to its
              last finite time, NaN after it (statistics as floats), its last finite state as
              ``x_final`` and its steps until then; the other members are complete
    result    from ``experiments.run``: the partial ``RunResult`` (statistics NaN after each
              failing member's last finite time); None from ``simulate``
    """

    def __init__(self, message: str, *, member, t: float, members=(), times=(), cause: str = "", solution=None,
                 result=None):
        super().__init__(message)
        self.member = member
        self.t = t
        self.members = tuple(members) or (member,)
        self.times = tuple(times) or (t,)
        self.cause = cause
        self.solution = solution
        self.result = result


def simulate(
    field,
    x0,
    t1: float,
    *,
    ts=None,
    t0: float = 0.0,
    solver: str = "tsit5",
    dt: float | None = None,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    save: Callable | None = None,
    adaptive: bool = True,
    stop_when_clustered: float | None = None,
    max_steps: int = 1_000_000,
    group_size: int | None = None,
    progress: bool | str = False,
    dtype=None,
    key=None,
    dense: bool = False,
    shard: bool | None = None,
    save_reads_time: bool = True,
) -> Solution:
    """Integrate ẋ = field(t, x) on (S^{d-1})^n from x(t0) = x0 to t1.

    field      an attnflow field (``SA``, ``USA``, ...). Its β may be a 1-D array: one member
               per temperature.
    x0         (n, d) or (batch, n, d). For fields on the sphere, rows are normalized to unit
               length (any nonzero vectors are accepted); zero or non-finite rows are errors. An unbatched x0 with
               a batched β is shared by all members.
    ts         increasing save times in [t0, t1] (default: t0 and t1).
    solver     "euler", "rk4", "lie_euler", "cg3", "ab4" (fixed step ``dt``, required) or "tsit5",
               "dopri5", "dopri8" (adaptive, PID step control with ``rtol``/``atol``; ``dt``,
               if given, is the first step), or "kvaerno5" (adaptive and implicit, for stiff
               metastable runs). All keep particles on the sphere to rounding error.
               "ab4" is Adams–Bashforth 4 (one evaluation per step, started by three RK4
               steps) on the uniform grid with interpolated saves, as ``dense`` below: for
               smooth non-stiff runs with many saves, stable for h|λ| < 0.3 (SA: dt ≤ 0.25).
    adaptive   False runs "tsit5"/"dopri5"/"dopri8" at the constant step ``dt`` (to measure
               their order, or to compare with the fixed-step methods at equal cost).
    save       optional function (t, x) -> PyTree of arrays, or (t, x, field) -> PyTree when it
               needs the member's field (its β, say), computed per member at the save times
               instead of storing states, so a long run never holds its trajectory (adaptive
               solves whose saved states fit in ``STATES_AFTER_LOOP_BYTES`` keep them and apply
               ``save`` after the loop, all members at once: the same values, faster).
    save_reads_time
               False promises that ``save`` gives the same value for the same state at every
               time: a dense run (``dense`` or "ab4") whose members have all stopped then repeats
               its last saves instead of computing them again.
    stop_when_clustered
               δ: a member stops once every pair has ⟨x_i, x_j⟩ ≥ 1 − δ; its later saves hold
               the state where it stopped and ``t_event`` records when (located by root
               finding with adaptive solvers, to the step with fixed ones). The run ends when
               all members have stopped.
    group_size adaptive ensembles: solve the members in groups of this many, one group after the
               other, so that a stiff member holds back only its own group (a vmapped solve runs
               until its slowest member is done). Members are sorted by a stiffness estimate (a
               finite-difference Lipschitz constant of the field at x0, two evaluations)
               before grouping; results come back in the original order, each member's the same
               as ungrouped (steps equal; states to rounding, up to the tolerance for members
               so stiff that rounding changes their step sizes). None (default): on one CPU
               device, ensembles of more than 64 members with tsit5 or dopri5 (and no layer
               switches) run as a queue instead (``solvers/queue.py``: 64 slots refilled as
               members finish, hardest first; results within the tolerance of the grouped
               solve); otherwise automatic, one group up to 64 members or on GPUs, else groups
               of about 32, 64 or 128 where the estimates predict saving at least 30% of the
               work. 0 or ≥ the number of members: one group. Progress then advances group by
               group (queue: member by member). Fixed-step solvers ignore it.
    max_steps  the most steps per member. Adaptive solvers stop there (an error naming the members);
               fixed-step runs (the fixed-step solvers, ``dense``, "ab4", noisy fields, and
               ``adaptive=False``), whose step count is known in advance, are refused before anything
               runs when they need more, as are runs whose step dt vanishes against t0 or t1 in
               ``dtype`` (t + dt == t).
    progress   True (or a label to print) shows simulated time against t1 on stderr.
    dtype      "float32" or "float64"; default: x0's dtype (float64 for attnflow's samplers).
    key        noisy fields (``particles.noise.Noisy``) only: the jax.random key (or int seed;
               default 0) of the Brownian increments; member m draws from fold_in(key, m).
               Noisy fields need a fixed-step solver and ``dt``: each step is the Strang
               splitting noise(dt/2) ∘ solver(dt) ∘ noise(dt/2) of ``solvers/stochastic.py``.
    dense      with "rk4": keep the steps on the uniform grid t0 + k·h (h ≤ dt) and obtain the
               saves by cubic Hermite interpolation between step ends (error O(h⁴), no extra
               field evaluation; ``solvers/dense.py``), instead of shortening steps to land on
               every save time. Many saves then cost no extra steps. Adaptive solvers always
               save from their dense output, so for them it changes nothing; "ab4" always
               runs this way; the other fixed-step methods have no interpolant and refuse it.
    shard      spread the run over ``jax.local_devices()`` (``solvers/sharding.py``): None
               (default) does so when there is more than one, False never, True whenever it
               can. An ensemble is split along its members (padded to a multiple of the device
               count by repeating the last member; the padding is cut off the outputs); a run
               with fewer members than devices whose attention is evaluated blocked (large n)
               is split along its particles, each device taking the attention of its rows.
               Results equal the one-device ones to rounding. With one device it does nothing.

    The whole ensemble runs in one compiled, vmapped call; β is traced, so new temperatures
    never recompile.

    A member whose state becomes NaN or infinite stops there (the others go on), and the run
    then raises ``NonFiniteError`` naming the member, the time of its last finite state and the
    likely cause; the error's ``solution`` holds everything computed (see ``NonFiniteError``).
    Under an outer ``jax.jit`` nothing can be raised: the failing member's later saves then hold
    its last finite state.
    """
    check_choice("solver", solver, SOLVERS)
    t0 = check_real("t0", t0)
    t1 = check_real("t1", t1, 0.0)
    if t1 <= t0:
        raise ValueError(f"t1 must be > t0 = {t0:g}, got {t1:g}")
    rtol = check_real("rtol", rtol, 0.0, strict_min=True)
    atol = check_real("atol", atol, 0.0, strict_min=True)
    if not isinstance(field, Field):
        raise ValueError(f"field must be an attnflow vector field such as af.SA(beta), got {type(field).__name__}")
    fixed = METHODS[solver].kind == "fixed"
    noisy = field.noise_sigma is not None
    if noisy and solver in GRID_ONLY:
        raise ValueError(f"{type(field).__name__} is a stochastic field: solver {solver!r} interpolates a smooth "
                         f"path; integrate it with one of {', '.join(map(repr, ONE_STEP))} and dt")
    if noisy and not fixed:
        raise ValueError(f"{type(field).__name__} is a stochastic field: integrate it with a fixed-step solver "
                         f"({', '.join(map(repr, ONE_STEP))}) and dt, got solver={solver!r}")
    if dt is None and fixed:
        raise ValueError(f"dt is required for the fixed-step solver {solver!r} (e.g. dt=0.01)")
    if dt is None and not adaptive:
        raise ValueError(f"dt is required to run {solver!r} with adaptive=False")
    if dt is not None:
        dt = check_real("dt", dt, 0.0, strict_min=True)
    if stop_when_clustered is not None:
        stop_when_clustered = check_real("stop_when_clustered", stop_when_clustered, 0.0, 2.0, strict_min=True)

    x0_dtype = getattr(x0, "dtype", None)
    if dtype is None:
        dtype = x0_dtype if x0_dtype is not None and jnp.issubdtype(x0_dtype, jnp.floating) else jnp.result_type(float)
    dtype = jnp.dtype(dtype)
    if dtype not in (jnp.dtype("float32"), jnp.dtype("float64")):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype.name}")
    sphere = field.geometry == "sphere"
    if not sphere and METHODS[solver].rotating:
        raise ValueError(f"solver {solver!r} moves particles by rotations of the sphere; the field "
                         f"{type(field).__name__} lives in R^d: use {spoken(names(rotating=False), quote='')}")
    x0 = from_array(x0, dtype=dtype, unit=sphere)
    n, d = x0.shape[-2:]

    axes, batch_f = ensemble_axes(field)
    batch_x = x0.shape[0] if x0.ndim == 3 else None
    if batch_x is not None and batch_f is not None and batch_x != batch_f:
        raise ValueError(f"x0 has a batch of {batch_x} configurations but the field has {batch_f} members "
                         "(e.g. beta values); they must match")
    batched = batch_x is not None or batch_f is not None
    members = batch_x or batch_f or 1
    field.check(n, d, dtype)

    if ts is None:
        ts = np.array([t0, t1])
    ts = np.asarray(ts, dtype=float)
    if ts.ndim != 1 or ts.size < 1 or not np.all(np.isfinite(ts)):
        raise ValueError(f"ts must be a non-empty 1-D array of finite times, got shape {ts.shape}")
    if np.any(np.diff(ts) <= 0):
        raise ValueError("ts must be strictly increasing")
    if ts[0] < t0 - 1e-12 * max(1.0, abs(t0)) or ts[-1] > t1 + 1e-12 * max(1.0, abs(t1)):
        raise ValueError(f"ts must lie in [t0, t1] = [{t0:g}, {t1:g}], got [{ts[0]:g}, {ts[-1]:g}]")

    jumps = _jump_times(field, t0, t1)
    # step counts known in advance are checked before anything is compiled: a step that overflows
    # or vanishes would otherwise run for ever, or not at all and save the start as the result
    max_steps = check_int("max_steps", max_steps, 1)
    dense = (bool(dense) and fixed) or solver in GRID_ONLY  # adaptive solvers save from their dense output anyway
    if fixed and not dense:
        knots, keep, substeps = _fixed_knots(t0, t1, ts, jumps, dt)
        check_steps(f"solver {solver!r}", t0, t1, dt, float(np.sum(substeps)), max_steps, dtype)
    elif fixed:
        check_steps(f"solver {solver!r}" + (" (dense)" if solver not in GRID_ONLY else ""), t0, t1, dt,
                    _dense.grid_steps(t0, t1, dt), max_steps, dtype)
    elif not adaptive:
        # diffrax's constant steps, plus one more at each layer switch it steps to
        check_steps(f"solver {solver!r} (adaptive=False)", t0, t1, dt,
                    _dense.steps_to_cover(t1 - t0, dt) + len(jumps), max_steps, dtype)
    field = jax.tree_util.tree_map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, field)
    x0_b = jnp.broadcast_to(x0, (members, n, d))
    save_fn = _identity if save is None else _with_field(save)

    if dense:
        if solver not in _dense.GRID_METHODS:
            raise ValueError(f"dense=True interpolates {spoken([m.upper() for m in _dense.GRID_METHODS], quote='')} steps: use "
                             f"solver={spoken(_dense.GRID_METHODS)} (or an adaptive solver), got solver={solver!r}")
        if noisy or len(jumps):
            raise ValueError(f"dense=True and solver={spoken(GRID_ONLY)} need a smooth deterministic path: they do "
                             "not apply to noisy fields or to layer-wise weights that switch during the run "
                             f"(solver={solver!r})")
        n_steps, h, index, theta = _dense.grid(t0, t1, dt, ts)
        runner = _dense.run_dense
        args = dict(method=solver, t0=jnp.asarray(t0, dtype), h=jnp.asarray(h, dtype), n_steps=jnp.asarray(n_steps),
                    index=jnp.asarray(index), theta=jnp.asarray(theta, dtype), times=jnp.asarray(ts, dtype),
                    hold_saves=not save_reads_time,
                    compiler_options=loop_options(d))
    elif fixed:
        substeps = substeps.astype(np.int64)  # their sum is at most max_steps (check_steps above)
        runner = _run_fixed
        args = dict(method=METHODS[solver].make(), knots=jnp.asarray(knots, dtype),
                    substeps=jnp.asarray(substeps), clamp=bool(len(jumps)), compiler_options=loop_options(d))
        if noisy:
            args.update(method=Strang(args["method"]), key=as_key(key))
    else:
        slots = _queue_slots(solver, adaptive, jumps, group_size, members, shard)
        if slots:
            group, order = None, jnp.asarray(np.argsort(-np.asarray(_hardness(field, axes, x0_b, t0)), kind="stable"))
        else:
            group, order = _grouping(group_size, field, axes, x0_b, t0)
        runner = _solve_adaptive
        # save times a rounding error outside [t0, t1] are clipped: diffrax's own check of them is
        # compiled without a callback when the command line runs (solvers/compilation_cache.py)
        ts_in = jnp.asarray(np.clip(ts, t0, t1), dtype)
        args = dict(method=METHODS[solver].make(rtol, atol), t0=t0, t1=t1, ts=ts_in, dt0=dt,
                    rtol=rtol, atol=atol, max_steps=int(max_steps), adaptive=bool(adaptive),
                    jumps=jnp.asarray(jumps, dtype) if len(jumps) else None,
                    group_size=group, order=order, slots=slots)

    # under an outer trace the caller's jit decides the layout
    traced = any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves((field, x0_b)))
    plan = None if traced else _sharding.plan(shard, field, n, members, dtype)
    field_run, x0_run = field, x0_b
    if plan is not None:
        x0_run, field_run = _sharding.place(plan, x0_b, field, axes)
        if not fixed:
            args.update(group_size=_sharding.group_size(plan, args["group_size"]),
                        order=_sharding.pad_order(plan, args["order"], members))

    label = progress if isinstance(progress, str) else "simulate"
    with _progress.Progress(t0, t1, members, label=label) if progress else _nullcontext():
        with jax.set_mesh(plan.mesh) if plan is not None else _nullcontext():
            out = runner(
                field=field_run, axes=axes, x0=x0_run, save_fn=save_fn, delta=stop_when_clustered,
                progress=bool(progress), **args,
            )
    if plan is not None:
        out = _sharding.cut(plan, out, members)
    saved, x_final, steps, t_event, t_fail = out

    if fixed and not dense and len(jumps):
        saved = jax.tree_util.tree_map(lambda a: a[:, keep], saved)
    solution = Solution(
        ts=jnp.asarray(ts, dtype), xs=saved, stats=None, x_final=x_final, steps=steps, t_event=t_event,
        solver=solver,
    )
    if not isinstance(t_fail, jax.core.Tracer) and not np.all(np.isinf(np.asarray(t_fail))):
        raise _non_finite(solution, np.asarray(t_fail), field, batched, save is None, fixed or not adaptive, dt, dtype)
    return _finish(solution, batched, save is None)


def _fixed_knots(t0: float, t1: float, ts: np.ndarray, jumps: np.ndarray, dt: float):
    """(knots, keep, substeps) of a fixed-step run: it integrates t0 → ts[0] first, then between
    consecutive knots with equal substeps ≤ dt, the last interval ending at t1.

    Layer switches become knots too (saved, then dropped: ``keep`` indexes the save times among
    the knots), so no step straddles one. ``substeps`` are floats, inf where span/dt overflows,
    so that their sum can be checked before any is made an integer.
    """
    internal = np.union1d(ts, jumps) if len(jumps) else ts
    keep = np.searchsorted(internal, ts)
    knots = np.concatenate([[t0], internal, [t1]])
    with np.errstate(over="ignore"):
        substeps = np.ceil(np.diff(knots) / dt - 1e-9)  # as dense.steps_to_cover
    return knots, keep, substeps


def check_steps(label: str, t0: float, t1: float, dt: float, steps, max_steps: int, dtype, *,
                at_least: bool = False) -> None:
    """Refuse, in one ValueError line, a run of constant step ``dt`` over [t0, t1] whose step vanishes
    against t0 or t1 in ``dtype`` (t + dt == t), or which needs more than ``max_steps`` steps per member.

    steps     the steps per member (an int or float, inf when they overflow); with ``at_least``, a
              lower bound (the command line's preflight, before the save times that split steps exist)
    label     names the method in the message, e.g. "solver 'rk4'"
    """
    real, name = np.dtype(dtype).type, np.dtype(dtype).name
    h = min(float(dt), t1 - t0)  # a run shorter than dt takes one step of its length
    for t in (t0, t1):
        with np.errstate(over="ignore"):
            if not np.isfinite(real(t)):
                raise ValueError(f"t = {t:g} is beyond the range of {name}: use dtype float64")
        if real(t) + real(h) == real(t):
            what = f"dt = {dt:g}" if h == dt else f"the step t1 − t0 = {h:g}"
            remedy = "raise dt" if h == dt else "integrate over a longer interval"
            if name != "float64":
                remedy += " or use dtype float64"
            raise ValueError(f"{what} is below the resolution of {name} at t = {t:g} (added to t, it leaves t "
                             f"unchanged; the spacing of {name} there is {float(np.spacing(real(t))):.3g}): "
                             f"{remedy}")
    limit = min(max_steps, MAX_COUNTED_STEPS)
    if steps <= limit:
        return
    count = (f"{int(steps)}" if steps <= 10 * limit
             else f"{float(steps):.3g}" if math.isfinite(steps) else "more than 1.8e+308")
    span = f"{label} with dt = {dt:g} over [{t0:g}, {t1:g}] needs {'at least ' if at_least else ''}{count} steps"
    if max_steps <= MAX_COUNTED_STEPS:
        raise ValueError(f"{span}, more than max_steps = {max_steps}: raise dt, or pass a larger max_steps")
    raise ValueError(f"{span}, more than the {MAX_COUNTED_STEPS} steps a fixed-step run can count: raise dt")


def _finish(solution: Solution, batched: bool, states: bool) -> Solution:
    """The Solution as returned: the batch axis dropped for an unbatched run, saves as xs or stats."""
    saved, x_final, steps, t_event = solution.xs, solution.x_final, solution.steps, solution.t_event
    if not batched:
        saved, x_final, steps, t_event = jax.tree_util.tree_map(lambda a: a[0], (saved, x_final, steps, t_event))
    return Solution(ts=solution.ts, xs=saved if states else None, stats=None if states else saved,
                    x_final=x_final, steps=steps, t_event=t_event, solver=solution.solver)


def _non_finite(solution: Solution, t_fail: np.ndarray, field, batched: bool, states: bool, constant: bool,
                dt, dtype) -> NonFiniteError:
    """The NonFiniteError of a run whose members ``t_fail < inf`` became non-finite after those times."""
    bad = np.flatnonzero(np.isfinite(t_fail))
    ts = np.asarray(solution.ts)
    late = ts[None, :] > t_fail[:, None]  # (members, T): saves after the member's last finite state

    def blank(a):
        a = np.array(a, dtype=np.result_type(a.dtype, np.float32))
        a[np.broadcast_to(late.reshape(late.shape + (1,) * (a.ndim - 2)), a.shape)] = np.nan
        return jnp.asarray(a)

    blanked = Solution(ts=solution.ts, xs=jax.tree_util.tree_map(blank, solution.xs), stats=None,
                       x_final=solution.x_final, steps=solution.steps, t_event=solution.t_event, solver=solution.solver)
    partial = _finish(blanked, batched, states)
    first, t = int(bad[0]), float(t_fail[bad[0]])
    members = t_fail.shape[0]
    others = f" (and {len(bad) - 1} other member{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
    cause = _likely_cause(field, first, constant, dt, dtype)
    message = (f"simulate: member {first} of {members}{others} became non-finite after t = {t:.6g} (its last "
               f"finite state); {cause}")
    return NonFiniteError(message, member=first, t=t, members=[int(m) for m in bad],
                          times=[float(t_fail[m]) for m in bad], cause=cause, solution=partial)


def _member_beta(field, member: int) -> float | None:
    """β of ``member`` (``Field.temperature``: the field's own or its first attention term's), None if it has none."""
    beta = field.temperature
    if beta is None:
        return None
    try:
        beta = np.asarray(beta, dtype=float)
    except (TypeError, ValueError):
        return None
    return float(beta[min(member, beta.size - 1)] if beta.ndim else beta)


def _likely_cause(field, member: int, constant: bool, dt, dtype) -> str:
    """The likely reason a member became non-finite, with the remedy, as a clause."""
    beta = _member_beta(field, member)
    at_beta = "" if beta is None else f" for β = {beta:g}"
    growth = None if beta is None else field.growth_norm()
    if growth is not None:
        # velocities of order e^{β‖QᵀK‖}: once their square no longer fits, a step off the sphere overflows
        scale = beta * growth
        if scale > 0.5 * np.log(float(jnp.finfo(dtype).max)):
            remedy = ('use dtype=float64 (or time="rescaled" for USA)' if jnp.dtype(dtype).itemsize < 8
                      else 'use time="rescaled" for USA, whose velocities stay of order one')
            return (f"β = {beta:g} is too large for {jnp.dtype(dtype).name} (USA velocities grow like e^β): "
                    f"{remedy}")
    if constant:
        return f"the step dt = {dt:g} is likely too large{at_beta}: lower dt or use an adaptive solver"
    return (f"the field is non-finite there{at_beta}, whatever the step: check its parameters and the "
            "initial condition")


class _nullcontext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _identity(t, x, field):
    return x


def _identity_state(x):
    return x


_WRAPPED: dict = {}


def _with_field(save):
    """The user's save function as f(t, x, field); cached so repeated runs reuse compilations."""
    try:
        return _WRAPPED[save]
    except (KeyError, TypeError):
        pass
    try:
        params = [p for p in inspect.signature(save).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        takes_field = len(params) >= 3
    except (TypeError, ValueError):
        takes_field = False
    wrapped = save if takes_field else _TwoArgs(save)
    try:
        _WRAPPED[save] = wrapped
    except TypeError:
        pass
    return wrapped


class _TwoArgs:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, t, x, field):
        return self.fn(t, x)

    def __hash__(self):
        return hash(self.fn)

    def __eq__(self, other):
        return isinstance(other, _TwoArgs) and other.fn == self.fn


def _as_float(a):
    a = jnp.asarray(a)
    return a if jnp.issubdtype(a.dtype, jnp.inexact) else a.astype(jnp.result_type(float))


class _Clamped(eqx.Module):
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
        return _Clamped(self.field.deterministic(), self.lo, self.hi)

    def summands(self):
        """The field's terms, each clamped to the same interval."""
        return tuple(_Clamped(f, self.lo, self.hi) for f in self.field.summands())

    def _t(self, t):
        return jnp.clip(t, jnp.nextafter(self.lo, self.hi), jnp.nextafter(self.hi, self.lo))

    def __call__(self, t, x):
        return self.field(self._t(t), x)

    def drift(self, t, x):
        return self.field.drift(self._t(t), x)


@jit_with_options
def _run_fixed(*, field, axes, x0, save_fn, delta, progress, method, knots, substeps, key=None, clamp=False):
    """Fixed steps between consecutive knots [t0, ts..., t1], the ensemble vmapped inside one time loop.

    Returns (saves, final states, steps, event times, last finite times). A member whose step
    produces a non-finite state is frozen at its last finite state, like a member stopped at
    consensus, and its last finite time recorded (inf for members that stay finite); the loop
    ends when no member is left running. With ``key`` (noisy fields) each step also gets its
    Brownian key: member m, step k draws from fold_in(fold_in(key, m), k), so no path is stored.
    """
    members = x0.shape[0]
    stochastic = key is not None
    step_axes = _Clamped(axes, None, None) if clamp else axes
    if stochastic:
        member_keys = jax.vmap(lambda m: jax.random.fold_in(key, m))(jnp.arange(members))
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))
        step_all = jax.vmap(method.step, in_axes=(step_axes, None, 0, None, 0))
    else:
        step_all = jax.vmap(method.step, in_axes=(step_axes, None, 0, None))
    save_all = jax.vmap(lambda f, t, x: save_fn(t, x, f), in_axes=(axes, None, 0))
    finite = jax.vmap(lambda a: jnp.all(jnp.isfinite(a)))
    settle = _coalesce.settler(field)
    stop = delta is not None
    t_start = knots[0]
    # on the tokens' directions: a field may move other coordinates (``Circle``: angles)
    clustered = jax.vmap(lambda f, x: within(f.directions(x), delta), in_axes=(axes, 0))
    if stop:
        active0 = ~clustered(field, x0)
        t_event0 = jnp.where(active0, jnp.inf, t_start)
    else:
        active0 = jnp.ones(members, bool)
        t_event0 = jnp.full(members, jnp.inf, x0.dtype)

    def advance(carry, k):
        x, active, t_event, t_fail, steps, count = carry
        ta, tb, m = knots[k], knots[k + 1], substeps[k]
        h = (tb - ta) / jnp.maximum(m, 1)
        f = _Clamped(field, ta, tb) if clamp else field

        def body(c):
            j, x, active, t_event, t_fail, steps, count = c
            t = ta + j * h
            if stochastic:
                x_new = step_all(f, t, x, h, step_keys(member_keys, count))
            else:
                x_new = step_all(f, t, x, h)
            x_new = settle(x_new)
            ok = finite(x_new)
            t_fail = jnp.where(active & ~ok, t, t_fail)
            active = active & ok
            x_new = jnp.where(active[:, None, None], x_new, x)
            steps = steps + active
            if stop:
                hit = active & clustered(field, x_new)
                t_event = jnp.where(hit, t + h, t_event)
                active = active & ~hit
            return j + 1, x_new, active, t_event, t_fail, steps, count + 1

        def cond(c):
            return (c[0] < m) & jnp.any(c[2])

        _, x, active, t_event, t_fail, steps, count = jax.lax.while_loop(
            cond, body, (0, x, active, t_event, t_fail, steps, count))
        if progress:
            jax.debug.callback(_progress.report, -1, tb)
        return (x, active, t_event, t_fail, steps, count), save_all(field, tb, x)

    carry0 = (x0, active0, t_event0, jnp.full(members, jnp.inf, x0.dtype), jnp.zeros(members, jnp.int32),
              jnp.zeros((), jnp.uint32))
    # knots = [t0, ts..., t1]: intervals 0..T-1 end at the save times, interval T at t1
    n_saves = knots.shape[0] - 2
    carry, saved = jax.lax.scan(advance, carry0, jnp.arange(n_saves))
    (x, _, t_event, t_fail, steps, _), _ = advance(carry, n_saves)
    saved = jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), saved)  # (members, T, ...)
    return saved, x, steps, t_event, t_fail


def _jump_times(field, t0: float, t1: float) -> np.ndarray:
    """Times in (t0, t1) where a part of the field switches (layer-wise weights), sorted (``Field.jump_times``)."""
    found = np.asarray(field.jump_times(t1, t0), dtype=float).ravel()
    return np.unique(found[(found > t0) & (found < t1)])


STATES_AFTER_LOOP_BYTES = 64 * 2**20
"""Adaptive solves whose states at all save times take at most this many bytes keep them and
compute the statistics afterwards, vectorized over members and times."""

_AUTO_GROUP = 64  # group_size=None never groups this many members or fewer
# cost of one iteration of a vmapped solve's loop beyond its members' arithmetic, in members
# (measured on CPU: 0.36 ms against 7.9 µs per member for n = 32, d = 2)
_LOOP_OVERHEAD = 32


def _grouping(group_size, field, axes, x0, t0) -> tuple[int | None, Any]:
    """(members per group, member order hardest first) for an adaptive ensemble; (None, None): one group.

    group_size=None groups ensembles of more than 64 members on CPU, in groups of about 32, 64 or
    128, when the stiffness estimates predict saving at least 30% of the work: a vmapped loop
    runs as many iterations as its slowest member, so the work is Σ_groups (overhead + size) ·
    max steps in the group. Steps are predicted as hardness^0.7 (tsit5 on USA at rtol 1e-6 takes
    about that many more steps as its Lipschitz constant grows; SA's steps hardly depend on β,
    and its estimates hardly spread). On GPUs a batch costs little more than one member: one group.
    """
    members = x0.shape[0]
    if group_size is not None and (isinstance(group_size, (bool, np.bool_))
                                   or not isinstance(group_size, (int, np.integer)) or group_size < 0):
        raise ValueError(f"group_size must be None (automatic), 0 (one group) or a positive integer, "
                         f"got {group_size!r}")
    if group_size is None:
        if members <= _AUTO_GROUP or jax.default_backend() != "cpu":
            return None, None
    elif group_size == 0 or group_size >= members:
        return None, None
    hardness = np.asarray(_hardness(field, axes, x0, t0), dtype=float)
    order = np.argsort(-hardness, kind="stable")
    if group_size is not None:
        return int(group_size), jnp.asarray(order)

    steps = np.maximum(hardness[order], 1e-300) ** 0.7

    def work(size):
        padded = np.concatenate([steps, np.repeat(steps[-1:], -members % size)])
        return np.sum((_LOOP_OVERHEAD + size) * padded.reshape(-1, size).max(axis=1))

    # sizes as even as possible (little padding in the last group)
    sizes = {-(-members // -(-members // target)) for target in (32, 64, 128) if target < members}
    size = min(sorted(sizes), key=work)
    if not work(size) < 0.7 * (_LOOP_OVERHEAD + members) * steps.max():
        return None, None
    return size, jnp.asarray(order)


def _queue_slots(solver, adaptive, jumps, group_size, members, shard) -> int | None:
    """Slots of the queue (``solvers/queue.py``) for an adaptive ensemble, None where it does not run.

    It runs ensembles of more than 64 members on one CPU device with an FSAL method (tsit5,
    dopri5), without layer switches, unless ``group_size`` asks for diffrax's grouped solve.
    """
    if (group_size is None and adaptive and solver in _queue.QUEUE_METHODS and not len(jumps)
            and members > _AUTO_GROUP and jax.default_backend() == "cpu"
            and (shard is False or len(jax.local_devices()) == 1)):
        return _queue.SLOTS
    return None


def _solve_adaptive(*, max_steps, t1, slots=None, **kwargs):
    """``_run_adaptive`` (or the queue, with ``slots``), with members whose solve failed other than by
    non-finite values reported as an error.

    The solves do not raise from inside the compiled loop (that would need a host callback, and
    JAX never writes programs with host callbacks to its persistent compilation cache); they
    return a status per member, checked here.
    """
    if slots:
        kwargs.pop("adaptive"), kwargs.pop("jumps"), kwargs.pop("group_size")
        saved, x_final, steps, t_event, t_fail, status = _run_queue(max_steps=max_steps, t1=t1, slots=slots,
                                                                    **kwargs)
    else:
        saved, x_final, steps, t_event, t_fail, status = _run_adaptive(max_steps=max_steps, t1=t1, **kwargs)
    if not isinstance(status, jax.core.Tracer):
        status = np.asarray(status)
        # members that became non-finite (status 3) are reported by simulate, with the partial solution
        if np.any((status == 1) | (status == 2)):
            bad = np.flatnonzero((status == 1) | (status == 2))
            who = (f"member{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad[:8]))}"
                   f"{', ...' if len(bad) > 8 else ''} of {status.size}")
            if np.any(status[bad] == 1):
                why = (f"reached max_steps = {max_steps} before t1 = {t1:g}; raise max_steps, loosen rtol/atol, "
                       f"or use solver={spoken(names(implicit=True))} for stiff runs")
            else:
                why = "failed (step size underflow)"
            raise RuntimeError(f"simulate: the adaptive solve of {who} {why}")
    return saved, x_final, steps, t_event, t_fail


@eqx.filter_jit
def _hardness(field, axes, x0, t0):
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


def _in_groups(solve, field, axes, x0, size, order, report=None):
    """``solve(field, x0)`` (vmapped over members) run as groups of ``size`` members, one after the other.

    Members are taken in ``order`` (hardest first), so each group's while loop runs about as long
    as its members need; the last group is padded with copies of its last member, so every group
    runs the one compiled body; outputs come back in the original member order.
    """
    members = x0.shape[0]
    groups = -(-members // size)
    idx = jnp.concatenate([order, jnp.broadcast_to(order[-1:], (groups * size - members,))])
    leaves, treedef = jax.tree_util.tree_flatten(field)
    batched = [a == 0 for a in treedef.flatten_up_to(axes)]

    def split(a):
        return _sharding.constrain_members(a[idx].reshape((groups, size) + a.shape[1:]))

    def group(xs):
        parts, x_g, g = xs
        f = treedef.unflatten([p if b else leaf for leaf, p, b in zip(leaves, parts, batched)])
        out = solve(f, x_g)
        if report is not None:
            t0, t1 = report
            jax.debug.callback(_group_done, t0 + (g + 1) * (t1 - t0) / groups, out[2])
        return out

    parts = [split(leaf) if b else None for leaf, b in zip(leaves, batched)]
    out = jax.lax.map(group, (parts, split(x0), jnp.arange(groups)))
    position = jnp.argsort(order)  # where each member sits in the sorted order
    return jax.tree_util.tree_map(lambda a: a.reshape((groups * size,) + a.shape[2:])[position], out)


@eqx.filter_jit
def _run_adaptive(*, field, axes, x0, save_fn, delta, progress, method, t0, t1, ts, dt0, rtol, atol, max_steps,
                  adaptive, jumps=None, group_size=None, order=None):
    """Adaptive solves of every member: (saves, final states, steps, event times, last finite times, status).

    status per member: 0 done, 1 max_steps reached, 2 other failure, 3 the state became
    non-finite (``FiniteSteps``: the solve stopped at its last finite state, whose time is
    returned; inf for the other members). With ``group_size`` the members run in groups of that
    size, taken in ``order`` (``_in_groups``); progress then advances per group.
    """
    grouped = group_size is not None
    controller = diffrax.PIDController(rtol=rtol, atol=atol) if adaptive else diffrax.ConstantStepSize()
    if jumps is not None:
        # step exactly to each layer switch and restart there, instead of smearing it over a step
        controller = diffrax.ClipStepSizeController(controller, jump_ts=jumps)
    controller = FiniteSteps(controller, adaptive=bool(adaptive))

    sphere = field.geometry == "sphere"
    merge = field.coalesce_eps
    solver = OnSphere(method, coalesce=merge, sphere=sphere) if sphere or merge is not None else method
    finish = normalize if sphere else _identity_state
    # small runs save their states and compute the statistics after the loop, all saves of all
    # members at once: inside diffrax's loop each save is an iteration of its own
    after_loop = x0.size * len(ts) * x0.dtype.itemsize <= STATES_AFTER_LOOP_BYTES

    def one(f, x0_m):
        term = diffrax.ODETerm(lambda t, y, args: f(t, y))

        # diffrax fills saves past the end with inf, so integer statistics travel as floats
        def save_at(t, y, args):
            if after_loop:
                return finish(y)
            return jax.tree_util.tree_map(_as_float, save_fn(t, finish(y), f))

        out_types = jax.eval_shape(lambda y: save_fn(t0, y, f), x0_m)

        saveat = diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts, fn=save_at), diffrax.SubSaveAt(t1=True)])
        event = None
        if delta is not None:
            # a continuous condition lets diffrax locate the crossing inside the step by root finding
            def gap(t, y, args, **kw):
                y = normalize(f.directions(y))  # clustering is about directions, also off the sphere
                # in the default float dtype: diffrax's root find pairs it with a Python 0.0 (float64 under x64)
                return (jnp.min(y @ y.T) - (1.0 - delta)).astype(jnp.result_type(float))

            # the crossing to ~100 ulps of the state's precision (float32 times cannot do 1e-10)
            tol = 100.0 * float(jnp.finfo(x0_m.dtype).eps)
            event = diffrax.Event(gap, root_finder=optx.Newton(rtol=max(tol, 1e-10), atol=max(tol, 1e-12)))
        sol = diffrax.diffeqsolve(
            term, solver, t0, t1, dt0, x0_m, saveat=saveat, stepsize_controller=controller,
            max_steps=max_steps, event=event, throw=False,
            progress_meter=(_progress.StderrMeter(minimum_increase=0.01) if progress and not grouped
                            else diffrax.NoProgressMeter()),
        )
        done = (sol.result == diffrax.RESULTS.successful) | (sol.result == diffrax.RESULTS.event_occurred)
        status = jnp.where(done, 0, jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, 1,
                                              jnp.where(sol.result == NON_FINITE, 3, 2)))
        saved, (x_end,) = sol.ys[0], sol.ys[1]
        if not after_loop:
            saved = jax.tree_util.tree_map(lambda a, spec: a.astype(spec.dtype), saved, out_types)
        x_end = finish(x_end)
        t_end = sol.ts[1][0]
        if delta is not None:
            stopped = sol.event_mask if sol.event_mask is not None else False
            already = within(f.directions(x0_m), delta)
            t_event = jnp.where(already, t0, jnp.where(stopped, t_end, jnp.inf))
            # saves after the event hold the state where the member stopped
            held = x_end if after_loop else save_fn(t_end, x_end, f)
            after = ts > t_end
            saved = jax.tree_util.tree_map(
                lambda s, h: jnp.where(after.reshape((-1,) + (1,) * h.ndim), h[None], s), saved, held
            )
        else:
            t_event = jnp.asarray(jnp.inf, x0_m.dtype)
        t_fail = jnp.where(status == 3, t_end, jnp.inf).astype(x0_m.dtype)
        return saved, x_end, sol.stats["num_accepted_steps"], t_event, t_fail, status.astype(jnp.int8)

    solve = jax.vmap(one, in_axes=(axes, 0))
    if not grouped:
        out = solve(field, x0)
    else:
        out = _in_groups(solve, field, axes, x0, group_size, order, report=(t0, t1) if progress else None)
    if not after_loop:
        return out
    return (_statistics_of(field, axes, save_fn, ts, out[0]),) + tuple(out[1:])


def _statistics_of(field, axes, save_fn, ts, states):
    """``save_fn`` at every save of every member, from the saved states (members, T, n, d)."""

    def statistics(f, t, x):
        values = save_fn(t, x, f)
        # saves past the end of a failed solve hold inf, as diffrax leaves them
        ok = jnp.all(jnp.isfinite(x))
        return jax.tree_util.tree_map(lambda a: jnp.where(ok, _as_float(a), jnp.inf).astype(a.dtype), values)

    # one save time of all members per iteration: batches of the size of the members' (cache-sized) arrays
    by_time = jax.lax.map(lambda k: jax.vmap(statistics, in_axes=(axes, None, 0))(field, ts[k], states[:, k]),
                          jnp.arange(len(ts)))
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), by_time)


@eqx.filter_jit
def _run_queue(*, field, axes, x0, save_fn, ts, **kwargs):
    """The queue's solves (``solvers/queue.py``), with the statistics from saved states where they fit."""
    after_loop = x0.size * len(ts) * x0.dtype.itemsize <= STATES_AFTER_LOOP_BYTES
    out = _queue.run_queue(field=field, axes=axes, x0=x0, save_fn=save_fn, ts=ts, after_loop=after_loop, **kwargs)
    if not after_loop:
        return out
    return (_statistics_of(field, axes, save_fn, ts, out[0]),) + tuple(out[1:])
