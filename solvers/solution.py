"""What ``simulate`` returns: the ``Solution`` with each member's status, and the errors of a run whose
members stopped short (``NonFiniteError``: a state became non-finite; ``MaxStepsError``: an adaptive
solve reached ``max_steps``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Bool, Float, Int

from ..particles.errors import ConvergenceError
from .loop import Status
from .methods import names, spoken

__all__ = [
    "Solution",
    "Status",
    "NonFiniteError",
    "MaxStepsError",
    "StoppedShortError",
    "ON_FAILURE",
    "finish",
    "stopped_short",
    "failure",
    "returned",
]

ON_FAILURE = ("raise", "keep")
"""``simulate``'s choices for members that stop short: raise (with the solution attached), or keep them."""


class Solution(eqx.Module):
    """What ``simulate`` returns. Arrays carry a leading batch axis when the run was an ensemble.

    ts       (T,)             save times
    xs       (..., T, n, d)   states at the save times (None when ``save`` was given)
    stats    PyTree           ``save(t, x)`` at the save times, each leaf (..., T, ...) (None otherwise)
    x_final  (..., n, d)      state at t1 (or where the clustering event stopped the member, or
                              where it stopped short: its last finite state, or the state it reached)
    steps    (...,)           accepted steps taken
    t_event  (...,)           time the member was found clustered when ``stop_when_clustered``
                              was given (inf if never, or if no event was asked for)
    status   (...,)           how each member's solve ended, a ``Status`` (int8): 0 DONE (reached t1
                              or its event), 1 MAX_STEPS (an adaptive solve took ``max_steps`` steps
                              before t1), 2 FAILED (its step size underflowed), 3 NON_FINITE (its
                              state became NaN or infinite: frozen at its last finite state)
    t_stop   (...,)           where a member that stopped short stopped: the time of its last finite
                              state (NON_FINITE) or the time it reached (MAX_STEPS, FAILED); inf for
                              DONE members
    solver                    the integration method
    precision                 the matrix products' precision: "float32", "tf32" or "bf16"
                              (``simulate``'s ``precision``), "float64" for a float64 run

    A member that stopped short holds its saves up to ``t_stop`` and NaN after it (statistics as
    floats); the other members' results are those of a run without it. ``ok`` is the mask of the
    DONE members.
    """

    ts: Float[Array, " T"]
    xs: Float[Array, "... T n d"] | None
    stats: Any
    x_final: Float[Array, "... n d"]
    steps: Int[Array, ...]
    t_event: Float[Array, ...]
    status: Int[Array, ...]
    t_stop: Float[Array, ...]
    solver: str = eqx.field(static=True)
    precision: str = eqx.field(static=True, default="float32")

    @property
    def ok(self) -> Bool[Array, ...]:
        """Per member, whether its solve reached its end (``status == Status.DONE``)."""
        return jnp.asarray(self.status) == Status.DONE


class StoppedShortError(ConvergenceError):
    """Members of a ``simulate`` run stopped before their end: ``member`` (the first), ``t`` (where it stopped),
    ``members`` and ``times`` (all of them), ``cause`` (the remedy), ``solution`` (the whole run's ``Solution``) and
    ``result`` (the runner's partial ``RunResult``); ``NonFiniteError`` and ``MaxStepsError`` say why."""

    def __init__(
        self, message: str, *, member, t: float, members=(), times=(), cause: str = "", solution=None, result=None
    ):
        super().__init__(message)
        self.member = member
        self.t = t
        self.members = tuple(members) or (member,)
        self.times = tuple(times) or (t,)
        self.cause = cause
        self.solution = solution
        self.result = result


class NonFiniteError(StoppedShortError, FloatingPointError):
    """A member's state became NaN or infinite during ``simulate``; what was computed before is kept.

    A ``ConvergenceError`` and, as it always was, a ``FloatingPointError``.

    member    index of the first failing member (0 for an unbatched run); from ``experiments.run``,
              its coordinates (d, β, seed)
    t         the time of that member's last finite state
    members   every failing member, as ``member``; times: their last finite times
    cause     the likely cause and its remedy, as the message ends
    solution  the ``Solution`` of the whole run: each failing member holds its saves up to its
              last finite time, NaN after it (statistics as floats), its last finite state as
              ``x_final`` and its steps until then; the other members are complete (``status``
              says which is which: members that reached ``max_steps`` in the same run are
              MAX_STEPS there)
    result    from ``experiments.run``: the partial ``RunResult`` (statistics NaN after each
              failing member's last finite time); None from ``simulate``
    """


class MaxStepsError(StoppedShortError):
    """Members' adaptive solves stopped before t1 during ``simulate``: they took ``max_steps`` steps (or
    their step size underflowed); what every member computed is kept.

    member    index of the first such member (0 for an unbatched run); from ``experiments.run``,
              its coordinates (d, β, seed)
    t         the time that member reached
    members   every such member, as ``member``; times: the times they reached
    cause     the remedy, as the message ends
    solution  the ``Solution`` of the whole run: each such member holds its saves up to the time it
              reached, NaN after it, and its status MAX_STEPS (or FAILED); the other members are
              complete, as in a run without them
    result    from ``experiments.run``: the partial ``RunResult``; None from ``simulate``
    """


def finish(solution: Solution, batched: bool, states: bool) -> Solution:
    """The Solution as returned: the batch axis dropped for an unbatched run, saves as xs or stats."""
    per_member = (solution.xs, solution.x_final, solution.steps, solution.t_event, solution.status, solution.t_stop)
    if not batched:
        per_member = jax.tree_util.tree_map(lambda a: a[0], per_member)
    saved, x_final, steps, t_event, status, t_stop = per_member
    return Solution(
        ts=solution.ts,
        xs=saved if states else None,
        stats=None if states else saved,
        x_final=x_final,
        steps=steps,
        t_event=t_event,
        status=status,
        t_stop=t_stop,
        solver=solution.solver,
        precision=solution.precision,
    )


def stopped_short(solution: Solution) -> Solution:
    """``solution`` (members on the leading axis, saves in ``xs``) with NaN at the saves after each
    member's ``t_stop`` (statistics as floats): a member that stopped short keeps what it computed."""
    t_stop = np.asarray(solution.t_stop)
    ts = np.asarray(solution.ts)
    late = ts[None, :] > t_stop[:, None]  # (members, T): saves after the member stopped

    def blank(a):
        a = np.array(a, dtype=np.result_type(a.dtype, np.float32))
        a[np.broadcast_to(late.reshape(late.shape + (1,) * (a.ndim - 2)), a.shape)] = np.nan
        return jnp.asarray(a)

    return dataclasses.replace(solution, xs=jax.tree_util.tree_map(blank, solution.xs))


def _who(bad: np.ndarray, members: int) -> str:
    """'member 2 of 4', 'member 1 of 3 (and 1 other member)'."""
    others = f" (and {len(bad) - 1} other member{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
    return f"member {int(bad[0])} of {members}{others}"


def failure(
    solution: Solution, field, batched: bool, states: bool, constant: bool, dt, dtype, max_steps: int, t1: float
) -> tuple[Solution, ConvergenceError | None]:
    """(the Solution as returned, the error of its members that stopped short, None if none did).

    ``solution`` holds every member on the leading axis. Members that stopped short keep their saves
    up to their ``t_stop`` (NaN after it). The error is a ``NonFiniteError`` when a member became
    non-finite (its message also counts members that reached ``max_steps``), else a ``MaxStepsError``.
    """
    status = np.asarray(solution.status)
    if np.all(status == Status.DONE):
        return finish(solution, batched, states), None
    partial = finish(stopped_short(solution), batched, states)
    t_stop, members = np.asarray(solution.t_stop), status.size
    short = np.flatnonzero((status == Status.MAX_STEPS) | (status == Status.FAILED))
    if short.size:
        reached = float(t_stop[short[0]])
        limit = "reached max_steps" if np.any(status[short] == Status.MAX_STEPS) else "failed (step size underflow)"
        steps = f" = {max_steps}" if limit == "reached max_steps" else ""
        remedy = f"raise max_steps, loosen rtol/atol, or use solver={spoken(names(implicit=True))} for stiff runs"
        stalled = f"{_who(short, members)} {limit}{steps} at t = {reached:.6g} before t1 = {t1:g}"
    bad = np.flatnonzero(status == Status.NON_FINITE)
    if bad.size:
        first, t = int(bad[0]), float(t_stop[bad[0]])
        cause = _likely_cause(field, first, constant, dt, dtype)
        also = f"; the adaptive solve of {stalled}" if short.size else ""
        message = (
            f"simulate: {_who(bad, members)} became non-finite after t = {t:.6g} (its last finite state); {cause}{also}"
        )
        error: ConvergenceError = NonFiniteError(
            message,
            member=first,
            t=t,
            members=[int(m) for m in bad],
            times=[float(t_stop[m]) for m in bad],
            cause=cause,
            solution=partial,
        )
    else:
        error = MaxStepsError(
            f"simulate: the adaptive solve of {stalled}; {remedy}",
            member=int(short[0]),
            t=float(t_stop[short[0]]),
            members=[int(m) for m in short],
            times=[float(t_stop[m]) for m in short],
            cause=remedy,
            solution=partial,
        )
    return partial, error


def returned(solution: Solution, p, on_failure: str) -> Solution:
    """What ``simulate`` returns for the run ``p`` (a ``problem.Problem``) whose loop gave ``solution``
    (members on the leading axis): the Solution, or, with ``on_failure="raise"`` and members that stopped
    short, their error (``failure``). Under the caller's trace nothing is raised: the statuses tell."""
    if isinstance(solution.status, jax.core.Tracer):
        return finish(solution, p.batched, p.states)
    constant = p.fixed or not p.adaptive
    kept, error = failure(
        solution, p.field, p.batched, p.states, constant, p.dt, p.dtype, int(p.max_steps), float(p.t1)
    )
    if error is not None and on_failure == "raise":
        raise error
    return kept


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
            remedy = (
                'use dtype=float64 (or time="rescaled" for USA)'
                if jnp.dtype(dtype).itemsize < 8
                else 'use time="rescaled" for USA, whose velocities stay of order one'
            )
            return f"β = {beta:g} is too large for {jnp.dtype(dtype).name} (USA velocities grow like e^β): {remedy}"
    if constant:
        return f"the step dt = {dt:g} is likely too large{at_beta}: lower dt or use an adaptive solver"
    return f"the field is non-finite there{at_beta}, whatever the step: check its parameters and the initial condition"
