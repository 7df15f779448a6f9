"""``simulate``: integrate a field from a configuration (or an ensemble of them) on the sphere.

``simulate`` checks its arguments into a ``Problem`` (``problem.py``), picks the time loop that runs
it (``LOOPS``: fixed steps, the dense grid, adaptive solves; each builds its own compiled call from
the problem), lays the ensemble out over the devices (``sharding.py``), runs it, and wraps the
result as a ``Solution`` (``solution.py``) with each member's status; with ``on_failure="raise"`` it
raises ``NonFiniteError`` or ``MaxStepsError``, with the partial result, when a member stopped short.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import jax
import jax.numpy as jnp

from ..particles.checks import check_choice
from . import adaptive_loop, dense, fixed_loop, loop
from . import progress as _progress
from . import sharding as _sharding
from .problem import (
    GRID_ONLY,
    MAX_COUNTED_STEPS,
    ONE_STEP,
    PRECISIONS,
    SOLVERS,
    Problem,
    check_steps,
    describe,
    products,
)
from .solution import ON_FAILURE, MaxStepsError, NonFiniteError, Solution, Status, returned

__all__ = [
    "simulate",
    "Solution",
    "NonFiniteError",
    "MaxStepsError",
    "Status",
    "ON_FAILURE",
    "SOLVERS",
    "LOOPS",
    "loop_for",
    "check_steps",
    "MAX_COUNTED_STEPS",
    "GRID_ONLY",
    "ONE_STEP",
    "PRECISIONS",
]

LOOPS = {"dense": dense.prepare, "fixed": fixed_loop.prepare, "adaptive": adaptive_loop.prepare}
"""The time loops by name: each maps a ``Problem`` (and a sharding plan) to (its compiled call, arguments)."""


def loop_for(p: Problem) -> str:
    """The loop that runs ``p``: the dense grid, fixed steps, or adaptive solves."""
    return "dense" if p.dense else "fixed" if p.fixed else "adaptive"


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
    precision: str = "float32",
    ensemble: int | None = None,
    on_failure: str = "raise",
) -> Solution:
    """Integrate ẋ = field(t, x) on (S^{d-1})^n from x(t0) = x0 to t1.

    field      an attnflow field (``SA``, ``USA``, ...). Its β may be a 1-D array: one member
               per temperature.
    x0         (n, d) or (batch, n, d). For fields on the sphere, rows are normalized to unit
               length (any nonzero vectors are accepted); zero or non-finite rows are errors. An unbatched x0 with
               a batched β is shared by all members.
    ts         increasing save times in [t0, t1] (default: t0 and t1).
    solver     "euler", "renormalized_euler", "rk4", "lie_euler", "cg3", "lie_trotter", "ab4" (fixed
               step ``dt``, required) or "tsit5", "dopri5", "dopri8" (adaptive, PID step control with
               ``rtol``/``atol``; ``dt``, if given, is the first step), or "kvaerno5" (adaptive and
               implicit, for stiff metastable runs). All keep particles on the sphere to rounding error.
               "euler" steps with the projected velocity; "renormalized_euler" with the unprojected
               one, the authors' scheme (docs/numerics.md), refused for angles (``Circle``).
               "ab4" is Adams–Bashforth 4 (one evaluation per step, started by three RK4
               steps) on the uniform grid with interpolated saves, as ``dense`` below: for
               smooth non-stiff runs with many saves, stable for h|λ| < 0.3 (SA: dt ≤ 0.25).
    adaptive   False runs "tsit5"/"dopri5"/"dopri8" at the constant step ``dt`` (to measure
               their order, or to compare with the fixed-step methods at equal cost).
    save       optional function (t, x) -> PyTree of arrays, or (t, x, field) -> PyTree when it
               needs the member's field (its β, say), computed per member at the save times
               instead of storing states, so a long run never holds its trajectory (adaptive
               solves whose saved states fit in ``loop.STATES_AFTER_LOOP_BYTES`` keep them and apply
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
    max_steps  the most steps per member. An adaptive solve stops there: the member's status is
               ``Status.MAX_STEPS`` and the others go on (see ``on_failure``); fixed-step runs (the
               fixed-step solvers, ``dense``, "ab4", noisy fields, and ``adaptive=False``), whose
               step count is known in advance, are refused before anything runs when they need
               more, as are runs whose step dt vanishes against t0 or t1 in ``dtype`` (t + dt == t).
    progress   True (or a label to print) shows simulated time against t1 on stderr.
    dtype      "float32" or "float64"; default: x0's dtype (float64 for attnflow's samplers).
    key        noisy fields (``particles.noise.Noisy``) only: the keys of the Brownian increments.
               One jax.random key (or int seed; default 0) for the ensemble: member m draws from
               fold_in(key, m). Or one key per member, a key array of shape (members,) (such as
               ``jax.random.split(key, members)``): member m draws from key[m], whatever the other
               members, so a caller that cuts an ensemble into calls keys each member by what it
               is (attnflow's runner: by its seed) and gets the same paths for every cut. Member
               m's step k draws from fold_in(its key, k). Noisy fields need a fixed-step solver and ``dt``: each step is the Strang
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
    precision  the matrix products of the field (``PRECISIONS``): "float32" (default) full float32
               products (``jax.lax.Precision.HIGHEST``), which recent NVIDIA GPUs would otherwise
               run as TF32, whose unit roundoff 2⁻¹¹ ≈ 4.9e-4 is as large as a clustering
               threshold δ = 1e-3; "tf32" TensorFloat-32 products (2⁻¹¹) and "bf16" bfloat16
               operands summed in float32 (2⁻⁸), faster on accelerators (XLA's CPU forms every
               float32 product in full precision). float64 runs take only "float32". The save
               function and the consensus test keep full precision. The time loops are traced
               under it, so each precision has its own compiled (and stored) program;
               ``Solution.precision`` states it ("float64" for a float64 run).
    ensemble   the members of the whole ensemble this call is one part of (default: its own), for a
               caller that cuts an ensemble into several calls: the time loop is chosen as for
               that many members, so that every part runs the algorithm of the whole. It decides
               between the queue and diffrax's vmapped solve for adaptive ensembles (``group_size``
               above: the queue runs an ensemble of more than 64 members even in parts of fewer);
               groups, which change no member's steps, are chosen per call.

    on_failure what to do when members stop short (status other than DONE: non-finite, ``max_steps``
               reached, step size underflow): "raise" (default) raises ``NonFiniteError`` if a member
               became non-finite, else ``MaxStepsError``, naming the members and the times they
               reached, with the whole run's ``Solution`` as the error's ``solution``; "keep"
               returns that ``Solution``. Either way each member's ``status`` and ``t_stop`` say how
               it ended (``ok``: the members that reached their end), a member that stopped short
               holds its saves up to ``t_stop`` and NaN after it, and the other members' results
               are those of a run without it.

    The whole ensemble runs in one compiled, vmapped call; β is traced, so new temperatures
    never recompile.

    Differentiable: ``jax.grad`` of a loss of the saves with respect to the field's leaves (β, Q, K,
    V, ...) and x0 goes through every method. Under the caller's trace the fixed-step and grid
    loops run with static lengths (skipping the steps they do not need) and the adaptive ensembles
    as one vmapped diffrax solve with its checkpointed adjoint (the queue and the groups, which
    order members eagerly, are not used; an explicit ``group_size`` is refused). The gradient is
    that of the discrete solution (``tests/solvers/test_gradients.py``: central differences to 1e-5).

    A member whose state becomes NaN or infinite stops there (the others go on), and the run
    then raises ``NonFiniteError`` naming the member, the time of its last finite state and the
    likely cause; the error's ``solution`` holds everything computed (see ``NonFiniteError``).
    Under an outer ``jax.jit`` nothing can be raised: ``status`` then tells the members apart, and
    the failing member's later saves hold its last finite state (adaptive solves: inf).
    """
    check_choice("on_failure", on_failure, ON_FAILURE)
    p = describe(
        field,
        x0,
        t1,
        ts=ts,
        t0=t0,
        solver=solver,
        dt=dt,
        rtol=rtol,
        atol=atol,
        save=save,
        adaptive=adaptive,
        stop_when_clustered=stop_when_clustered,
        max_steps=max_steps,
        group_size=group_size,
        dtype=dtype,
        key=key,
        dense=dense,
        shard=shard,
        save_reads_time=save_reads_time,
        precision=precision,
        ensemble=ensemble,
    )
    # under an outer trace the caller's jit decides the layout
    plan = None if p.traced else _sharding.plan(p.shard, p.field, p.x0.shape[1], p.members, p.dtype)
    label = progress if isinstance(progress, str) else "simulate"
    # the loops are traced under the run's precision: it is part of what keys their compiled programs
    # (JAX's trace context) and their stored ones (``programs.settings``)
    with jax.default_matmul_precision(p.matmul_precision):
        run, args = LOOPS[loop_for(p)](p, plan)
        x0_run, field_run = (p.x0, p.field) if plan is None else _sharding.place(plan, p.x0, p.field, p.axes)
        with (
            _progress.Progress(p.t0, p.t1, p.members, label=label) if progress else contextlib.nullcontext(),
            jax.set_mesh(plan.mesh) if plan is not None else contextlib.nullcontext(),
        ):
            out = run(
                field=field_run,
                axes=p.axes,
                x0=x0_run,
                save_fn=p.save_fn,
                delta=p.delta,
                progress=bool(progress),
                **args,
            )
    if not p.traced:  # an interrupt is raised while the call runs, not after it
        out = loop.wait(out)
    if plan is not None:
        out = _sharding.cut(plan, out, p.members)
    saved, x_final, steps, t_event, t_stop, status = out
    solution = Solution(
        ts=jnp.asarray(p.ts, p.dtype),
        xs=saved,
        stats=None,
        x_final=x_final,
        steps=steps,
        t_event=t_event,
        status=status,
        t_stop=t_stop,
        solver=solver,
        precision=products(p.precision, p.dtype),
    )
    return returned(solution, p, on_failure)
