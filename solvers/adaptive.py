"""Error-controlled Runge–Kutta methods from diffrax, projected back onto the sphere."""

from __future__ import annotations

import diffrax
import equinox as eqx
import jax
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


CUT = diffrax.RESULTS.dt_min_reached
"""The result ``Budgeted`` ends a call of a solve with once it has taken its budget of steps. attnflow's
controllers set no minimum step size, so diffrax never reports it otherwise."""


def clip_floor(t1):
    """t1 less 100 ulps: diffrax ends a step proposed to end beyond it at t1 (its loop's clip to the end)."""
    return jax.lax.fori_loop(0, 100, lambda _, t: jnp.nextafter(t, jnp.asarray(-jnp.inf, t.dtype)), t1)


def reaching(t, target):
    """A step dt0 > 0 with t + dt0 == ``target`` in their dtype (diffrax starts a solve with its first step ending at
    t0 + dt0): target − t, or a neighbour of it where that difference rounds."""
    d = target - t
    up, down = jnp.nextafter(d, jnp.asarray(jnp.inf, d.dtype)), jnp.nextafter(d, jnp.asarray(-jnp.inf, d.dtype))
    return jnp.where(t + d == target, d, jnp.where(t + up == target, up, down))


class Budgeted(diffrax.AbstractStepSizeController):
    """Wrap a step size controller so that a solve can be cut after a step and resumed with the same steps.

    Its state is (the wrapped controller's state, the step attempts so far, the attempt after which the solve ends,
    the end of the next step, the time and state the solve is at, whether it still runs). Every step, accepted or
    rejected, counts, as diffrax counts them against ``max_steps``; the solve ends with ``CUT`` after ``limit``
    attempts (the whole solve's ``max_steps``), and after the first attempt at or after its stop where every
    running member of the batch (the members the solve is vmapped over, along the axis ``axis``) can be resumed:
    its step was accepted and the next one starts where it ended. Not after a step to a layer switch, then, which
    the next starts just after: the save times at the switch are saved by that next step. The members stop at one
    iteration of their vmapped loop, as in the uncut solve: their iterations stay aligned, which diffrax's
    methods need for the same bits (an FSAL method evaluates its first stage anew for the whole batch where one
    member made a jump).

    The next step's end is kept as diffrax's loop takes it (the proposal, clipped to t1 within 100 ulps of it, or
    halfway there for a rejected step), and the time and state because diffeqsolve's final ones are, in a batch
    where some member's event occurred, interpolated at the end of each member's last step. A solve started from
    that time and state, the solver's state, ``made_jump`` and this state, with dt0 = ``reaching(t, end)``, takes
    the steps the uncut solve would have taken. ``t1``: the whole solve's end (``floor``: ``clip_floor(t1)``, which
    ``Budgeted.until`` computes). The wrapped controller sees every step as before, so an uncut solve is unchanged.
    """

    controller: diffrax.AbstractStepSizeController
    t1: jax.Array
    floor: jax.Array
    limit: int = eqx.field(static=True)
    axis: str = eqx.field(static=True)

    @classmethod
    def until(cls, controller, t1, limit: int, axis: str) -> Budgeted:
        """``controller`` budgeted in a solve that ends at ``t1`` (an array in the solve's time dtype) after at most
        ``limit`` step attempts, vmapped along ``axis``."""
        return cls(controller, t1, clip_floor(t1), int(limit), axis)

    def wrap(self, direction):
        return Budgeted(self.controller.wrap(direction), self.t1, self.floor, self.limit, self.axis)

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        tnext, state = self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)
        tnext = jnp.minimum(tnext, t1)
        zero = jnp.zeros((), jnp.int32)
        return tnext, (state, zero, zero, tnext, t0, y0, jnp.asarray(t0 < t1))

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        state, attempts, stop, _, _, _, running = controller_state
        keep, next_t0, next_t1, made_jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, state
        )
        attempts = attempts + 1
        start = jnp.minimum(next_t0, self.t1)
        close = next_t1 > self.floor
        end = jnp.where(close, jnp.where(keep, self.t1, start + 0.5 * (self.t1 - start)), next_t1)
        ok = result == diffrax.RESULTS.successful
        # a member that ended (or whose loop is over and only repeats its last step) holds no one up
        held = running & ~(keep & (next_t0 == t1))
        blocked = jax.lax.pmax(held.astype(jnp.int32), self.axis) > 0
        cut = (attempts >= self.limit) | ((attempts >= stop) & ~blocked)
        result = diffrax.RESULTS.where(cut & ok, CUT, result)
        y = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), y1_candidate, y0)
        running = running & ok & (start < self.t1)
        state = (state, attempts, stop, end.astype(jnp.result_type(next_t1)), start, y, running)
        return keep, next_t0, next_t1, made_jump, state, result


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
