"""Pseudo-arclength continuation of rest points in one parameter, with folds, branch points and branch switching.

A *system* is a family of equations F(u, p) = 0 for unknowns u ∈ R^N and one parameter p ∈ R, a PyTree (an
``equinox.Module``: its arrays are traced, so one compilation serves every system of a kind); it declares

    residual(u, p)   F, a JAX function of (u, p) (its Jacobian [F_u F_p] is taken by ``jax.jacfwd``)
    start(guess, p)  the unknowns of a guess given in the system's own terms (a configuration, a density)
    stability(u, p)  (eigenvalues, unstable, zero_modes) of the physical linearization at the solution
    state(u, p)      the solution in the system's own terms, and ``measure(u, p)``, a number to plot it by
    motion(u, p)     None where the solution is at rest; else (its rate, in words): a solution of F = 0 that still
                     moves, such as a relative equilibrium of a field that commutes with rotations without
                     descending an energy (``RestPoints.motion``)

``RestPoints`` (rest points of a particle field, solvers/rest_points.py) and ``StationaryCircle`` (stationary
densities of the noisy mean field on the circle, solvers/stationary.py) are the two systems of attnflow.

The method (Keller's pseudo-arclength, as in AUTO or MATCONT). From a solution z = (u, p) with unit tangent t
(the null vector of [F_u F_p]), the predictor is z + ds·t and the corrector solves F = 0 together with
tᵀ(z − z − ds·t) = 0 by Newton, so the branch is followed through folds where p turns back. After each point
the tangent is the solution of [F_u F_p; tᵀ] t' = (0, 1), normalized (it keeps the orientation). The step ds
grows by 1.3 after an easy correction (≤ 3 Newton steps), halves after a failed one, and the branch ends when
ds falls below ``ds_min``, p leaves ``p_range``, the system says a solution is outside its domain, or after
``max_points``. A point is accepted only where the system says it is at rest (``motion``): where the branch turns
into relative equilibria it ends, saying so with their rotation rate (``Branch.ended``, ``Branch.rotation_rate``).

Special points, each located on the branch by the Illinois variant of regula falsi on the arclength from the
last point, to ``locate_tol``:
* a fold, where the tangent's p-component t_p changes sign (p turns back);
* a branch point, where a real eigenvalue of F_u crosses zero without a fold: the number of eigenvalues of F_u
  with positive real part changes, by the crossing's multiplicity. Located on the real eigenvalue of F_u
  nearest zero (exact to rounding where the system's branch point is the linear threshold of a mode). A step
  across which several eigenvalues cross is halved until they cross one at a time, or until it is 10⁻⁴ of the
  first step, where the crossings count as one branch point of that multiplicity (the triangle's double one).
* the physical stability (``stability``) is recorded at every point; a change that is neither at a fold nor at
  a branch point of F (a complex pair crossing the imaginary axis, or a real eigenvalue of a direction the
  system's unknowns leave out, such as a density that stops being even) is listed in ``stability_changes``
  (kind "hopf" or "real", at the point after it, not located).
At a simple branch point the null space of [F_u F_p] is two-dimensional: ``continuation`` started from a
``SpecialPoint`` follows the other branch, whose tangent is the null vector orthogonal to the first branch's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_int, check_real, real_array
from ..particles.errors import ConvergenceError, InputError
from . import machine

__all__ = ["SpecialPoint", "Branch", "continuation", "ContinuationError", "check_memory"]


class System(Protocol):
    """What ``continuation`` asks of a system: the methods of the module docstring, u the unknowns, p the parameter."""

    def residual(self, u, p, /) -> Any: ...
    def start(self, guess, p: float, /) -> np.ndarray: ...
    def stability(self, u, p: float, /) -> tuple[Any, int, int]: ...
    def state(self, u, p: float, /) -> Any: ...
    def measure(self, u, p: float, /) -> float: ...
    def valid(self, u, p: float, /) -> bool: ...
    def motion(self, u, p: float, /) -> tuple[float, str] | None: ...


class ContinuationError(ConvergenceError):
    """A branch could not start: the guess did not converge to a solution, or a branch point cannot be switched."""


@dataclass(frozen=True)
class SpecialPoint:
    """A special point of a branch: kind ("fold", "branch", "hopf"/"real" for other stability changes, or "relative"
    for the solution that is not at rest where a branch ends), p, u, its
    index among the branch's points (folds and branch points are inserted there), the multiplicity of the crossing
    (branch points), the branch's tangent there and the measure (the system's number for plots)."""

    kind: str
    p: float
    u: np.ndarray
    index: int
    multiplicity: int
    tangent: np.ndarray
    measure: float


@dataclass(frozen=True)
class Branch:
    """A continued branch: its points (p (M,), u (M, N), ``measure`` (M,)), their physical stability
    (``unstable`` (M,) counts, ``eigenvalues``: a list of arrays, largest real part first), the special points
    (``folds``, ``branch_points``, ``stability_changes``), and why it ``ended``. Where it ended because its next
    solution was not at rest (``motion``: a relative equilibrium), ``relative_equilibrium`` is that solution (a
    ``SpecialPoint`` of kind "relative", not among the points) and ``rotation_rate`` the rate at which it moves."""

    system: System
    p: np.ndarray
    u: np.ndarray
    measure: np.ndarray
    unstable: np.ndarray
    eigenvalues: list
    folds: list = field(default_factory=list)
    branch_points: list = field(default_factory=list)
    stability_changes: list = field(default_factory=list)
    ended: str = ""
    relative_equilibrium: SpecialPoint | None = None
    rotation_rate: float | None = None

    @property
    def stable(self) -> np.ndarray:
        """(M,) whether each point is linearly stable (no unstable eigenvalue)."""
        return self.unstable == 0

    def state(self, i: int):
        """The i-th point in the system's own terms (a configuration, a density)."""
        return self.system.state(self.u[i], float(self.p[i]))


# -- linear algebra of the augmented system --------------------------------------------------------------


@eqx.filter_jit
def _residual_and_jacobian(system, z):
    """F and [F_u F_p] at z = (u, p), compiled once per kind of system (systems are PyTrees)."""

    def full(w):
        return system.residual(w[:-1], w[-1])

    return full(z), jax.jacfwd(full)(z)


def _evaluate(system, u, p):
    F, A = _residual_and_jacobian(system, jnp.asarray(np.append(u, p)))
    return np.asarray(F), np.asarray(A)


def _tangent(A: np.ndarray, previous: np.ndarray) -> np.ndarray | None:
    """The unit null vector of A = [F_u F_p] with positive component along ``previous``."""
    B = np.vstack([A, previous[None]])
    rhs = np.zeros(B.shape[0])
    rhs[-1] = 1.0
    try:
        t = np.linalg.solve(B, rhs)
    except np.linalg.LinAlgError:
        return None
    norm = np.linalg.norm(t)
    return t / norm if np.isfinite(norm) and norm > 0 else None


def _correct(system, z_pred: np.ndarray, t: np.ndarray | None, tol: float, max_newton: int):
    """Newton on F = 0 (with the arclength condition tᵀ(z − z_pred) = 0 when t is given, else at fixed p):
    (z, A = [F_u F_p] there, Newton steps) or None."""
    z = z_pred.copy()
    for k in range(max_newton + 1):
        F, A = _evaluate(system, z[:-1], z[-1])
        if not (np.all(np.isfinite(F)) and np.all(np.isfinite(A))):
            return None
        scale = max(float(np.max(np.abs(A[:, :-1]))), 1e-300)
        if np.max(np.abs(F)) <= tol * scale:
            return z, A, k
        if k == max_newton:
            return None
        if t is None:
            try:
                du = np.linalg.solve(A[:, :-1], -F)
            except np.linalg.LinAlgError:
                return None
            step = np.append(du, 0.0)
        else:
            B = np.vstack([A, t[None]])
            rhs = np.append(-F, -float(t @ (z - z_pred)))
            try:
                step = np.linalg.solve(B, rhs)
            except np.linalg.LinAlgError:
                return None
        if not np.all(np.isfinite(step)):
            return None
        z = z + step
        settled = np.max(np.abs(step)) <= 1e-15 * max(1.0, float(np.max(np.abs(z))))
        if settled and np.max(np.abs(F)) <= 1e3 * tol * scale:
            F, A = _evaluate(system, z[:-1], z[-1])
            return z, A, k + 1
    return None


def _jacobian_count(A: np.ndarray) -> tuple[int, float]:
    """(eigenvalues of F_u with positive real part, the real eigenvalue of F_u nearest zero)."""
    values = np.linalg.eigvals(A[:, :-1])
    scale = max(float(np.max(np.abs(values))), 1e-300)
    real = values[np.abs(values.imag) <= 1e-9 * scale].real
    nearest = float(real[np.argmin(np.abs(real))]) if real.size else float("nan")
    return int(np.sum(values.real > 0)), nearest


# -- locating special points -------------------------------------------------------------------------------


def _locate(test, s_hi: float, f_lo: float, f_hi: float, tol: float):
    """The arclength s ∈ (0, s_hi) where test(s) changes sign (Illinois regula falsi): (s, point) or None."""
    a, b, fa, fb = 0.0, s_hi, f_lo, f_hi
    point, side = None, 0
    for _ in range(80):
        s = b - fb * (b - a) / (fb - fa) if fb != fa else 0.5 * (a + b)
        if not (min(a, b) < s < max(a, b)):
            s = 0.5 * (a + b)
        value, point = test(s)
        if value is None:
            return None
        if value == 0.0 or abs(b - a) <= tol:
            return s, point
        if np.sign(value) == np.sign(fb):
            b, fb = s, value
            if side == -1:
                fa *= 0.5
            side = -1
        else:
            a, fa = s, value
            if side == 1:
                fb *= 0.5
            side = 1
        if abs(b - a) <= tol:
            return s, point
    return s, point


def _special(system, kind: str, z0, t0, s_hi, f_lo, f_hi, index, multiplicity, tol, locate_tol, max_newton):
    def test(s):
        got = _correct(system, z0 + s * t0, t0, tol, max_newton)
        if got is None:
            return None, None
        z, A, _ = got
        if kind == "fold":
            t = _tangent(A, t0)
            return (None, None) if t is None else (float(t[-1]), (z, t))
        # at the branch point itself [F_u F_p; tᵀ] is singular: the branch's tangent there is t0's limit
        t = _tangent(A, t0)
        return _jacobian_count(A)[1], (z, t0 if t is None or not np.all(np.isfinite(t)) else t)

    found = _locate(test, s_hi, f_lo, f_hi, locate_tol)
    if found is None or found[1] is None:
        return None
    z, t = found[1]
    u, p = z[:-1], float(z[-1])
    return SpecialPoint(kind, p, u, index, multiplicity, t, float(system.measure(u, p)))


def _switch(system, point: SpecialPoint, tol: float, max_newton: int):
    """(z, A, tangent) leaving a branch point along the other branch."""
    if point.kind != "branch":
        raise ContinuationError(f"continuation switches branches at a branch point, not at a {point.kind}")
    _, A = _evaluate(system, point.u, point.p)
    _, sv, vt = np.linalg.svd(A)
    null = vt[-2:] if vt.shape[0] >= 2 else vt
    if sv.size < A.shape[1] and sv.size >= 1:
        sv = np.append(sv, 0.0)
    old = point.tangent / np.linalg.norm(point.tangent)
    basis = null - np.outer(null @ old, old)
    k = int(np.argmax(np.linalg.norm(basis, axis=1)))
    t = basis[k] / np.linalg.norm(basis[k])
    if point.multiplicity > 1:
        raise ContinuationError(
            f"the branch point at p = {point.p:.12g} has multiplicity {point.multiplicity}: "
            "the branches leaving it are not determined by the null space alone"
        )
    return np.append(point.u, point.p), A, t


# -- the driver ------------------------------------------------------------------------------------------


CONTINUATION_COPIES = 8
"""(N + 1)² arrays a step holds (N unknowns and the parameter): the extended Jacobian, its factorization and
null space for the tangent, the tests' determinants and the stability's eigenvalue work arrays."""


def _steps(ds_min, ds, ds_max):
    return (("ds_min", ds_min), ("ds", ds), ("ds_max", ds_max))


def check_memory(unknowns: int) -> None:
    """Refuse (one InputError line, ``machine.check_parts``) a continuation whose Jacobians, (N + 1)² for
    ``unknowns`` = N + 1, cannot fit in the memory, before they are allocated."""
    machine.check_parts(
        {f"the extended Jacobians [(N + 1)² with N + 1 = {unknowns}]": 8 * CONTINUATION_COPIES * unknowns**2},
        f"continuation of {unknowns - 1} unknowns",
        "a smaller system (fewer tokens or dimensions, fewer modes)",
    )


def continuation(
    system,
    start,
    p0: float | None = None,
    *,
    p_range: tuple[float, float],
    direction: int = 1,
    ds: float = 0.02,
    ds_min: float = 1e-7,
    ds_max: float = 0.2,
    max_points: int = 400,
    tol: float = 1e-11,
    locate_tol: float = 1e-12,
    max_newton: int = 8,
) -> Branch:
    """Follow the branch of solutions of a ``system`` (``RestPoints``, ``StationaryCircle``) by pseudo-arclength
    continuation in its parameter p (module docstring).

    start       a guess in the system's own terms at p = p0 (a configuration (n, d), a density), corrected by
                Newton at fixed p0; or a branch point (``SpecialPoint`` of another branch's ``branch_points``),
                from which the other branch is followed (p0 is then unused)
    p_range     (p_min, p_max): the branch ends where p leaves it
    direction   +1 or −1: the sign of dp/ds at the start (at a branch point: the side of the new branch)
    ds, ds_min, ds_max   initial, smallest and largest arclength steps (in the norm of (u, p))
    max_points  the most points (≥ 2); max_newton: Newton's iterations per point (≥ 1); tol: Newton's tolerance
                (max|F| ≤ tol × max|F_u|, > 0)
    locate_tol  arclength accuracy of the located folds and branch points

    Returns a ``Branch``; ``ContinuationError`` when the start does not converge. Bad arguments (counts and
    tolerances out of range, a complex start) and a system whose Jacobians cannot fit in the memory are an
    ``InputError`` naming them, before any work.
    """
    if direction not in (1, -1) or isinstance(direction, bool):
        raise InputError(f"direction must be +1 or -1, got {direction!r}")
    if not isinstance(p_range, (tuple, list, np.ndarray)) or len(p_range) != 2:
        raise InputError(f"p_range must be (p_min, p_max), got {p_range!r}")
    lo, hi = check_real("p_range[0]", p_range[0]), check_real("p_range[1]", p_range[1])
    if not lo < hi:
        raise InputError(f"p_range must be (p_min, p_max) with p_min < p_max, got {p_range!r}")
    ds_min, ds, ds_max = (check_real(name, v, 0.0, strict_min=True) for name, v in _steps(ds_min, ds, ds_max))
    if not ds_min <= ds <= ds_max:
        raise InputError(f"need 0 < ds_min ≤ ds ≤ ds_max, got ds_min = {ds_min}, ds = {ds}, ds_max = {ds_max}")
    max_points = check_int("max_points", max_points, 2)
    max_newton = check_int("max_newton", max_newton, 1)
    tol = check_real("tol", tol, 0.0, strict_min=True)
    locate_tol = check_real("locate_tol", locate_tol, 0.0, strict_min=True)
    if isinstance(start, SpecialPoint):
        check_memory(np.asarray(start.u).size + 1)
        z, A, t = _switch(system, start, tol, max_newton)
        t = t * direction
    else:
        if p0 is None:
            raise InputError("continuation from a guess needs its parameter p0")
        p0 = check_real("p0", p0)
        if not (start is None or isinstance(start, str)):  # None and names: the system's own guesses
            start = real_array("start", start)
        u0 = np.asarray(system.start(start, float(p0)), dtype=np.float64)
        check_memory(u0.size + 1)
        got = _correct(system, np.append(u0, float(p0)), None, tol, max(max_newton, 30))
        if got is None:
            raise ContinuationError(f"the guess does not converge to a solution at p = {p0:g}")
        z, A, _ = got
        moving = system.motion(z[:-1], float(z[-1]))
        if moving is not None:
            raise ContinuationError(
                f"the guess at p = {p0:g} converges to a solution that is {moving[1]}: continuation follows rest points"
            )
        seed = np.zeros(z.size)
        seed[-1] = float(direction)
        t = _tangent(A, seed)
        if t is None:
            raise ContinuationError(f"no tangent at p = {p0:g}: the start is a singular point; start beside it")
    points, tangents, counts = [z], [t], [_jacobian_count(A)[0]]
    folds, branch_points, changes = [], [], []
    eigenvalues, unstable = [], []

    def record(zz):
        values, n_unstable, _ = system.stability(zz[:-1], float(zz[-1]))
        eigenvalues.append(np.asarray(values))
        unstable.append(int(n_unstable))

    record(z)
    ended = f"max_points = {max_points} reached"
    rotation_rate, relative = None, None
    step = ds
    while len(points) < max_points:
        got = _correct(system, z + step * t, t, tol, max_newton)
        if got is None or not system.valid(got[0][:-1], float(got[0][-1])):
            step *= 0.5
            if step < ds_min:
                ended = (
                    f"the step fell below ds_min = {ds_min:g} at p = {z[-1]:.6g}"
                    if got is None
                    else f"the branch left the system's domain at p = {z[-1]:.6g}"
                )
                break
            continue
        z_new, A_new, iterations = got
        moving = system.motion(z_new[:-1], float(z_new[-1]))
        if moving is not None:
            rotation_rate = float(moving[0])
            u_new, p_new = z_new[:-1], float(z_new[-1])
            relative = SpecialPoint("relative", p_new, u_new, len(points), 1, t, float(system.measure(u_new, p_new)))
            ended = (
                f"the branch turns into relative equilibria after p = {z[-1]:.6g}: at p = {z_new[-1]:.6g} the solution "
                f"is {moving[1]}"
            )
            break
        t_new = _tangent(A_new, t)
        if t_new is None:
            step *= 0.5
            if step < ds_min:
                ended = f"no tangent at p = {z_new[-1]:.6g}"
                break
            continue
        count_new = _jacobian_count(A_new)[0]
        if abs(count_new - counts[-1]) > 1 and step > 1e-4 * ds and np.sign(t_new[-1]) == np.sign(t[-1]):
            step *= 0.5  # several eigenvalues crossed in one step: shorter steps take the crossings one at a time
            continue
        found = None
        if np.sign(t_new[-1]) != np.sign(t[-1]) and t[-1] != 0:
            found = _special(
                system, "fold", z, t, step, float(t[-1]), float(t_new[-1]), len(points), 1, tol, locate_tol, max_newton
            )
            if found is not None:
                folds.append(found)
        elif count_new != counts[-1]:
            before, after = _jacobian_count(_evaluate(system, z[:-1], z[-1])[1])[1], _jacobian_count(A_new)[1]
            if np.isfinite(before) and np.isfinite(after) and np.sign(before) != np.sign(after):
                found = _special(
                    system,
                    "branch",
                    z,
                    t,
                    step,
                    before,
                    after,
                    len(points),
                    abs(count_new - counts[-1]),
                    tol,
                    locate_tol,
                    max_newton,
                )
                if found is not None:
                    branch_points.append(found)
        if found is not None:  # the special point joins the branch's points, between the last one and the new one
            points.append(np.append(found.u, found.p))
            tangents.append(found.tangent)
            counts.append(count_new)
            record(points[-1])
        z, t = z_new, t_new
        points.append(z)
        tangents.append(t)
        counts.append(count_new)
        record(z)
        if found is None and unstable[-1] != unstable[-2]:
            u, p = z[:-1], float(z[-1])
            kind = "hopf" if _complex_crossing(eigenvalues[-2], eigenvalues[-1]) else "real"
            changes.append(
                SpecialPoint(
                    kind, p, u, len(points) - 1, abs(unstable[-1] - unstable[-2]), t, float(system.measure(u, p))
                )
            )
        if not lo <= z[-1] <= hi:
            ended = f"p left p_range at p = {z[-1]:.6g}"
            break
        if iterations <= 3:
            step = min(step * 1.3, ds_max)
    P = np.array([pt[-1] for pt in points])
    U = np.array([pt[:-1] for pt in points])
    measure = np.array([float(system.measure(u, float(p))) for u, p in zip(U, P)])
    return Branch(
        system,
        P,
        U,
        measure,
        np.array(unstable),
        eigenvalues,
        folds,
        branch_points,
        changes,
        ended,
        relative,
        rotation_rate,
    )


def _complex_crossing(before: np.ndarray, after: np.ndarray) -> bool:
    """Whether the eigenvalue nearest the imaginary axis, on either side of a stability change, is complex."""
    for values in (before, after):
        values = values[values != 0]  # the zero modes, exact zeros
        if values.size:
            v = values[np.argmin(np.abs(values.real))]
            if abs(v.imag) > 1e-9 * max(float(np.max(np.abs(values))), 1e-300):
                return True
    return False
