"""Error-controlled Runge–Kutta methods from diffrax, projected back onto the sphere."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax.numpy as jnp
import optimistix as optx

from ..particles.circle import from_angles
from ..particles.coalesce import representatives
from ..particles.sphere import normalize


class OnSphere(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """Wrap a diffrax solver so that every step's end point is renormalized row by row.

    An embedded Runge–Kutta step leaves the sphere by O(h^{p+1}), the size of its local error;
    the projection removes that drift without changing the order, so particles stay on the
    sphere to rounding error over arbitrarily long runs. The error estimate is the wrapped
    solver's, so step-size control is unchanged. With ``coalesce`` = ε (the field is
    ``Coalesced``), the end point's merged tokens are also placed at their representatives, so
    merges are kept from step to step. ``sphere=False``: the states are ``Circle``'s angles,
    which are neither normalized nor compared as vectors (their points are).
    """

    # diffrax declares ``solver`` an eqx.AbstractVar, which it spells ClassVar for type checkers; a field implements it
    solver: diffrax.AbstractAdaptiveSolver  # type: ignore[misc]
    coalesce: float | None = eqx.field(static=True, default=None)
    sphere: bool = eqx.field(static=True, default=True)

    @property
    def term_structure(self):
        return self.solver.term_structure

    @property
    def interpolation_cls(self):  # pyright: ignore
        return self.solver.interpolation_cls

    @property
    def term_compatible_contr_kwargs(self):
        return self.solver.term_compatible_contr_kwargs

    @property
    def root_finder(self):  # read by diffeqsolve for implicit methods
        return self.solver.root_finder

    def order(self, terms):
        return self.solver.order(terms)

    def strong_order(self, terms):
        return self.solver.strong_order(terms)

    def error_order(self, terms):
        return self.solver.error_order(terms)

    def init(self, terms, t0, t1, y0, args):
        return self.solver.init(terms, t0, t1, y0, args)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        y1, y_error, dense_info, solver_state, result = self.solver.step(
            terms, t0, t1, y0, args, solver_state, made_jump
        )
        if self.sphere:
            y1 = normalize(y1)
        if self.coalesce is not None:
            y1 = y1[representatives(y1 if self.sphere else from_angles(y1), self.coalesce)]
        return y1, y_error, dense_info, solver_state, result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


NON_FINITE = diffrax.RESULTS.max_steps_rejected
"""The result ``FiniteSteps`` ends a solve with: too many rejected steps. Only a
``ClipStepSizeController`` that stores rejected steps also reports it, and attnflow builds none."""


class FiniteSteps(diffrax.AbstractStepSizeController):
    """Wrap a step size controller so that a solve whose state turns non-finite stops there.

    A step whose candidate end point holds NaN or inf is rejected, and the next step starts again
    from its start. An adaptive controller then retries with smaller steps, as for any large error
    (a step too long for the field's scale); the solve ends with ``NON_FINITE`` once no step helps:
    ``give_up`` consecutive non-finite candidates (the step then shrank by 0.2^give_up), or a
    non-finite candidate of a step within a few ulps of its start time. A constant step size
    controller ends the solve at the first one. Either way the solve's last state and time are
    the last finite ones. The wrapped controller sees every step as before, so runs that stay
    finite are unchanged.
    """

    controller: diffrax.AbstractStepSizeController
    adaptive: bool = eqx.field(static=True)
    give_up: int = eqx.field(static=True, default=40)

    def wrap(self, direction):
        return FiniteSteps(self.controller.wrap(direction), self.adaptive, self.give_up)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        return tnext, (state, jnp.zeros((), jnp.int32))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, bad_run = controller_state
        keep, next_t0, next_t1, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        bad = ~jnp.all(jnp.isfinite(y1_candidate))
        bad_run = jnp.where(bad, bad_run + 1, 0)
        if self.adaptive:
            scale = jnp.maximum(jnp.abs(t0), jnp.abs(t1))
            tiny = (t1 - t0) <= 8 * jnp.finfo(jnp.result_type(t1)).eps * scale
            stop = bad & ((bad_run >= self.give_up) | tiny)
        else:
            stop = bad
        # an adaptive controller already rejects such a step (its error estimate is infinite);
        # never let one be kept, and then retry from its start with a fifth of its length
        next_t0 = jnp.where(bad, t0, next_t0)
        next_t1 = jnp.where(bad & keep, t0 + 0.2 * (t1 - t0), next_t1)
        keep = keep & ~bad
        result = diffrax.RESULTS.where(stop, NON_FINITE, result)
        return keep, next_t0, next_t1, made_jump, (state, bad_run), result


def make_method(cls: type[diffrax.AbstractAdaptiveSolver], rtol: float | None, atol: float | None):
    """An instance of the diffrax solver ``cls``; implicit ones get their Newton tolerances from rtol/atol."""
    if issubclass(cls, diffrax.AbstractImplicitSolver):
        if rtol is None or atol is None:
            raise ValueError(f"the implicit solver {cls.__name__} needs rtol and atol for its Newton iterations")
        # full Newton (a fresh Jacobian every iteration), solved 100× tighter than the step tolerance:
        # through the stiff contraction of tight clusters (rates ~ e^β under USA) a chord iteration
        # with a frozen Jacobian fails to converge, and each failure halves the step; with Newton,
        # USA at β = 9 takes about as many steps as SA. Explicit tolerances keep the wrapper
        # transparent to diffeqsolve.
        return cls(root_finder=optx.Newton(rtol=1e-2 * rtol, atol=1e-2 * atol, norm=optx.rms_norm))
    return cls()
