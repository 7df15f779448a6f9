"""Error-controlled Runge–Kutta methods from diffrax, projected back onto the sphere."""

from __future__ import annotations

import diffrax
import optimistix as optx

from ..particles.sphere import normalize


class OnSphere(diffrax.AbstractAdaptiveSolver, diffrax.AbstractWrappedSolver):
    """Wrap a diffrax solver so that every step's end point is renormalized row by row.

    An embedded Runge–Kutta step leaves the sphere by O(h^{p+1}), the size of its local error;
    the projection removes that drift without changing the order, so particles stay on the
    sphere to rounding error over arbitrarily long runs. The error estimate is the wrapped
    solver's, so step-size control is unchanged.
    """

    solver: diffrax.AbstractAdaptiveSolver

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
        return normalize(y1), y_error, dense_info, solver_state, result

    def func(self, terms, t0, y0, args):
        return self.solver.func(terms, t0, y0, args)


ADAPTIVE_METHODS = {
    "tsit5": diffrax.Tsit5,
    "dopri5": diffrax.Dopri5,
    "dopri8": diffrax.Dopri8,
    # implicit (L-stable ESDIRK): for metastable runs, where tight clusters contract at rate O(1)
    # while merges take times like e^β, and explicit methods are held to O(1) steps by stability
    "kvaerno5": diffrax.Kvaerno5,
}


def make_method(name: str, rtol: float, atol: float):
    """A diffrax solver by name; implicit ones get their Newton tolerances from rtol/atol."""
    cls = ADAPTIVE_METHODS[name]
    if issubclass(cls, diffrax.AbstractImplicitSolver):
        # full Newton (a fresh Jacobian every iteration), solved 100× tighter than the step tolerance:
        # through the stiff contraction of tight clusters (rates ~ e^β under USA) a chord iteration
        # with a frozen Jacobian fails to converge, and each failure halves the step; with Newton,
        # USA at β = 9 takes about as many steps as SA. Explicit tolerances keep the wrapper
        # transparent to diffeqsolve.
        return cls(root_finder=optx.Newton(rtol=1e-2 * rtol, atol=1e-2 * atol, norm=optx.rms_norm))
    return cls()
