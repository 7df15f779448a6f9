"""The integration methods ``simulate`` runs, declared once: every list of solver names derives from here.

Each method is a :class:`Method`: its name, order of convergence, kind (fixed step or adaptive), what
it can do (rotate on the sphere, step angles on the circle, step on the uniform grid with dense output,
run in the adaptive queue), the state-sized arrays one step holds, and the class that builds it. :data:`METHODS` holds
them in the order the solver choices are listed; :func:`names` selects among them by kind and flags.
Adding an integrator is its class (a ``fixed.FixedStep`` or a diffrax solver) and one line here.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import diffrax

from .adaptive import make_method
from .fixed import CG3, RK4, Euler, FixedStep, LieEuler, LieTrotter, RenormalizedEuler

__all__ = ["METHODS", "Method", "names", "spoken"]


@dataclasses.dataclass(frozen=True)
class Method:
    """One integration method and what it declares.

    name          the ``solver`` argument of ``simulate`` and the config
    order         order of convergence of the global error (the measured slope of log error vs log dt)
    kind          "fixed" (a constant step ``dt``) or "adaptive" (error control with ``rtol``/``atol``)
    build         the ``FixedStep`` subclass or the diffrax solver class; None for a method that only
                  the uniform-grid loop steps (``dense.run_dense``)
    state_copies  state-sized arrays one step holds per member: stages, start and end points, error
                  estimate, dense-output coefficients (``experiments.run.memory``)
    rotating      moves particles by rotations of the sphere only (no motion in R^d or in angles)
    angles        steps ``Circle``'s angle states θ (the ODE θ̇ = ω(θ)); False where that would be another
                  scheme than the one the method names (rotations need points; ``renormalized_euler`` the
                  radial part of the velocity, which angles drop): ``simulate`` refuses angles for it and
                  ``circle = 'auto'`` keeps points
    grid_only     always steps on the uniform grid and interpolates its saves (``solvers/dense.py``)
    dense         can step on the uniform grid with interpolated saves (``dense=True``)
    queue         the adaptive queue (``solvers/queue.py``) runs it: an explicit FSAL pair
    """

    name: str
    order: int
    kind: Literal["fixed", "adaptive"]
    build: type | None
    state_copies: int
    rotating: bool = False
    angles: bool = True
    grid_only: bool = False
    dense: bool = False
    queue: bool = False

    @property
    def implicit(self) -> bool:
        """Whether each step solves a nonlinear system (a diffrax implicit solver: Newton, a Jacobian)."""
        return isinstance(self.build, type) and issubclass(self.build, diffrax.AbstractImplicitSolver)

    def make(self, rtol: float | None = None, atol: float | None = None):
        """The solver instance: a ``FixedStep``, or a diffrax solver (implicit ones need ``rtol``/``atol``)."""
        if self.build is None:
            raise ValueError(f"solver {self.name!r} is stepped by the uniform-grid loop and has no step object")
        if self.kind == "fixed":
            return self.build()
        return make_method(self.build, rtol, atol)


def _fixed(cls: type[FixedStep], state_copies: int, **flags) -> Method:
    """A fixed-step method from its ``FixedStep`` class, which names it and states its order."""
    return Method(cls.name, cls.order, "fixed", cls, state_copies, **flags)


METHODS: dict[str, Method] = {
    m.name: m
    for m in (
        _fixed(Euler, 3),
        # the authors' scripts: the unprojected velocity, renormalized (docs/numerics.md)
        _fixed(RenormalizedEuler, 3, angles=False),
        _fixed(RK4, 7, dense=True),
        _fixed(LieEuler, 4, rotating=True, angles=False),
        _fixed(CG3, 7, rotating=True, angles=False),
        _fixed(LieTrotter, 7),
        # Adams–Bashforth 4 started by RK4: one evaluation per step, on the uniform grid only
        Method("ab4", 4, "fixed", None, 8, grid_only=True, dense=True),
        Method("tsit5", 5, "adaptive", diffrax.Tsit5, 12, queue=True),
        Method("dopri5", 5, "adaptive", diffrax.Dopri5, 12, queue=True),
        Method("dopri8", 8, "adaptive", diffrax.Dopri8, 18),
        # implicit (L-stable ESDIRK): for metastable runs, where tight clusters contract at rate O(1)
        # while merges take times like e^β, and explicit methods are held to O(1) steps by stability
        Method("kvaerno5", 5, "adaptive", diffrax.Kvaerno5, 14),
    )
}
"""Every integration method by name, in the order the solver choices are listed."""


def names(kind: str | None = None, **flags: bool) -> tuple[str, ...]:
    """Names of the methods of ``kind`` ("fixed", "adaptive" or None for all) whose flags have the given values.

    ``flags`` are attributes of :class:`Method` (``rotating``, ``angles``, ``grid_only``, ``dense``, ``queue``,
    ``implicit``), e.g. ``names("fixed", grid_only=False)``: the one-step fixed methods.
    """
    if kind not in (None, "fixed", "adaptive"):
        raise ValueError(f"kind must be 'fixed', 'adaptive' or None, got {kind!r}")
    unknown = [
        f
        for f in flags
        if not isinstance(getattr(Method, f, None), property)
        and f not in {field.name for field in dataclasses.fields(Method)}
    ]
    if unknown:
        raise ValueError(f"unknown Method flags: {', '.join(unknown)}")
    return tuple(
        m.name
        for m in METHODS.values()
        if (kind is None or m.kind == kind) and all(getattr(m, f) == v for f, v in flags.items())
    )


def spoken(choices, quote: str = "'") -> str:
    """``choices`` as a phrase for a message: 'a', 'a or b', 'a, b or c'."""
    quoted = [f"{quote}{c}{quote}" for c in choices]
    return " or ".join(quoted) if len(quoted) < 3 else ", ".join(quoted[:-1]) + " or " + quoted[-1]
