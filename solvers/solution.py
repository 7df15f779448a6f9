"""What ``simulate`` returns: the ``Solution``, and the ``NonFiniteError`` of a run whose members blew up."""

from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int


class Solution(eqx.Module):
    """What ``simulate`` returns. Arrays carry a leading batch axis when the run was an ensemble.

    ts       (T,)             save times
    xs       (..., T, n, d)   states at the save times (None when ``save`` was given)
    stats    PyTree           ``save(t, x)`` at the save times, each leaf (..., T, ...) (None otherwise)
    x_final  (..., n, d)      state at t1 (or where the clustering event stopped the member)
    steps    (...,)           accepted steps taken
    t_event  (...,)           time the member was found clustered when ``stop_when_clustered``
                              was given (inf if never, or if no event was asked for)
    solver                    the integration method
    precision                 the matrix products' precision: "float32", "tf32" or "bf16"
                              (``simulate``'s ``precision``), "float64" for a float64 run
    """

    ts: Float[Array, " T"]
    xs: Float[Array, "... T n d"] | None
    stats: Any
    x_final: Float[Array, "... n d"]
    steps: Int[Array, ...]
    t_event: Float[Array, ...]
    solver: str = eqx.field(static=True)
    precision: str = eqx.field(static=True, default="float32")


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


def finish(solution: Solution, batched: bool, states: bool) -> Solution:
    """The Solution as returned: the batch axis dropped for an unbatched run, saves as xs or stats."""
    saved, x_final, steps, t_event = solution.xs, solution.x_final, solution.steps, solution.t_event
    if not batched:
        saved, x_final, steps, t_event = jax.tree_util.tree_map(lambda a: a[0], (saved, x_final, steps, t_event))
    return Solution(
        ts=solution.ts,
        xs=saved if states else None,
        stats=None if states else saved,
        x_final=x_final,
        steps=steps,
        t_event=t_event,
        solver=solution.solver,
        precision=solution.precision,
    )


def non_finite_error(
    solution: Solution, t_fail: np.ndarray, field, batched: bool, states: bool, constant: bool, dt, dtype
) -> NonFiniteError:
    """The NonFiniteError of a run whose members ``t_fail < inf`` became non-finite after those times."""
    bad = np.flatnonzero(np.isfinite(t_fail))
    ts = np.asarray(solution.ts)
    late = ts[None, :] > t_fail[:, None]  # (members, T): saves after the member's last finite state

    def blank(a):
        a = np.array(a, dtype=np.result_type(a.dtype, np.float32))
        a[np.broadcast_to(late.reshape(late.shape + (1,) * (a.ndim - 2)), a.shape)] = np.nan
        return jnp.asarray(a)

    blanked = Solution(
        ts=solution.ts,
        xs=jax.tree_util.tree_map(blank, solution.xs),
        stats=None,
        x_final=solution.x_final,
        steps=solution.steps,
        t_event=solution.t_event,
        solver=solution.solver,
        precision=solution.precision,
    )
    partial = finish(blanked, batched, states)
    first, t = int(bad[0]), float(t_fail[bad[0]])
    members = t_fail.shape[0]
    others = f" (and {len(bad) - 1} other member{'s' if len(bad) > 2 else ''})" if len(bad) > 1 else ""
    cause = _likely_cause(field, first, constant, dt, dtype)
    message = (
        f"simulate: member {first} of {members}{others} became non-finite after t = {t:.6g} (its last "
        f"finite state); {cause}"
    )
    return NonFiniteError(
        message,
        member=first,
        t=t,
        members=[int(m) for m in bad],
        times=[float(t_fail[m]) for m in bad],
        cause=cause,
        solution=partial,
    )


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
