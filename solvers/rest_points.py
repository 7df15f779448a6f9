"""Rest points of a family of particle fields as a continuation system (``continuation``, solvers/continuation.py).

``RestPoints(family, x, p)`` follows the rest points of the fields family(p) (a function of one number: β,
a weight scale, the noise, a mask's slope) from the rest point near x at p. The unknowns are tangent
coordinates u at the start x_0 (x(u)_i = (x_{0,i} + B_i u_i)/‖·‖, the frames B_i of ``tangent_frames``), valid
while every token stays in the open hemisphere around its start, together with one multiplier μ_k per
symmetry generator g_k of the field (``symmetry_algebra`` at the start, taken for the whole family):

    F(u, μ, p) = ( Bᵀ f_p(t, x(u)) + Σ_k μ_k g_k ,  ⟨g_k, u⟩ )

The second block is a phase condition: it picks one member of each family of rotated rest points, so the
system is regular where the rest point is isolated up to symmetry; μ vanishes at every solution (the
velocity has no component along the generators' directions there) when the field is a gradient flow, but not
in general: a field that commutes with the rotations without descending an energy (SA on the circle with
V = I + wJ, J the rotation by π/2) has solutions with μ ≠ 0, relative equilibria that rotate rigidly. So a
solution counts as a rest point only where the true velocity vanishes, max_i ‖f(t, x)_i‖ ≤ ``REST_TOL`` × max|J|
(Newton's own test in ``equilibrium`` is 1e-11 × max|J|); ``motion`` says how fast any other solution still
turns, and ``continuation`` ends a branch there. Stability at each point is that of ``equilibrium``: the tangent
Jacobian's spectrum without the zero modes.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.fields import Field
from .equilibrium import Linearization, analyze, chart, check_field, coordinates, generator_vectors, symmetry_algebra

__all__ = ["RestPoints", "REST_TOL"]

REST_TOL = 1e-8
"""A solution is a rest point when its largest tangent velocity is at most this fraction of max|J|."""


class RestPoints(eqx.Module):
    """The rest points of ``family(p)`` (a function p ↦ field, traceable by JAX in p) near the configuration x,
    at time t, as a continuation system; ``measure`` (default: the mean inner product ‖(1/n) Σ x_i‖²) is the number
    a branch is plotted by, a function of a configuration. See the module docstring."""

    x0: jax.Array
    frames: jax.Array
    G: jax.Array
    symmetries: _Frozen = eqx.field(static=True)
    family: Callable[[float], Field] = eqx.field(static=True)
    t: float = eqx.field(static=True)
    sphere: bool = eqx.field(static=True)
    n: int = eqx.field(static=True)
    d: int = eqx.field(static=True)
    seed: int = eqx.field(static=True)
    measure_of: Callable[[np.ndarray], float] | None = eqx.field(static=True)

    def __init__(self, family, x, p: float, *, t: float = 0.0, measure=None, seed: int = 0):
        if not callable(family):
            raise ValueError("family must be a function p ↦ field, e.g. lambda beta: af.USA(beta)")
        field = family(float(p))
        if not isinstance(field, Field):
            raise ValueError(f"family(p) must return an attnflow field, got {type(field).__name__}")
        field, x, sphere = check_field(field, x)
        self.family, self.t, self.sphere = family, float(t), sphere
        self.n, self.d = x.shape
        self.x0 = jnp.asarray(x)
        frames = Linearization(field, t, self.n, self.d, sphere).frames(x)
        self.frames = jnp.asarray(frames)
        symmetries = symmetry_algebra(field, self.n, self.d, self.t, seed=seed)
        self.symmetries = _Frozen(symmetries)
        self.G = jnp.asarray(generator_vectors(x, symmetries, np.asarray(frames), sphere, field.in_angles))
        self.seed = seed
        self.measure_of = measure

    @property
    def N(self) -> int:
        """The number of tangent coordinates."""
        return self.n * (self.d - 1 if self.sphere else self.d)

    def configuration(self, u) -> np.ndarray:
        """The configuration x(u) of the unknowns (multipliers ignored)."""
        return np.asarray(chart(self.x0, self.frames, jnp.asarray(u[: self.N]), self.sphere))

    # -- the continuation system ------------------------------------------------------------------------
    def residual(self, u, p):
        x = chart(self.x0, self.frames, u[: self.N], self.sphere)
        field = self.family(p).deterministic()
        F = coordinates(field(self.t, x), self.frames, self.sphere) + self.G @ u[self.N :]
        return jnp.concatenate([F, self.G.T @ u[: self.N]])

    def start(self, guess, p: float) -> np.ndarray:
        y = np.asarray(guess, dtype=np.float64)
        if y.shape != (self.n, self.d):
            raise ValueError(f"the guess must have shape {(self.n, self.d)}, got {y.shape}")
        if self.sphere:
            y = y / np.linalg.norm(y, axis=-1, keepdims=True)
            cos = np.sum(y * np.asarray(self.x0), axis=-1, keepdims=True)
            if np.any(cos <= 0):
                raise ValueError("every token of the guess must lie within 90° of the chart's centre x")
            u = np.einsum("nij,ni->nj", np.asarray(self.frames), y / cos).reshape(-1)
        else:
            u = (y - np.asarray(self.x0)).reshape(-1)
        return np.concatenate([u, np.zeros(self.G.shape[1])])

    def stability(self, u, p: float):
        field = self.family(float(p)).deterministic()
        x = self.configuration(u)
        lin = Linearization(field, self.t, self.n, self.d, self.sphere)
        frames, _, J = lin(x)
        info = analyze(lin, x, frames, J, self.symmetries.array, self.seed)
        return info["eigenvalues"], info["unstable"], info["zero_modes"]

    def motion(self, u, p: float) -> tuple[float, str] | None:
        """None at a rest point (largest tangent velocity ≤ ``REST_TOL`` × max|J|); else (the rotation rate, in
        words): a solution with μ ≠ 0 moves along the symmetries, and its velocity is fitted by a rotation
        x ↦ Ωx of the field's symmetry algebra (a shift θ ↦ θ + ωt in angles), whose rate is ‖Ω‖₂, the largest
        angular speed."""
        field = self.family(float(p)).deterministic()
        x = self.configuration(u)
        lin = Linearization(field, self.t, self.n, self.d, self.sphere)
        _, F, J = lin(x)
        speed = float(np.max(np.linalg.norm(F.reshape(self.n, -1), axis=-1)))
        scale = float(np.max(np.abs(J))) if J.size else 0.0
        if speed <= REST_TOL * scale or speed == 0.0:
            return None
        v = lin.velocity(x)
        algebra = self.symmetries.array
        if algebra.shape[0] == 0:
            return speed, f"not a rest point: the largest token speed is {speed:.3g}"
        if field.in_angles:
            rate = abs(float(np.mean(v)))
            fitted = np.full_like(v, float(np.mean(v)))
        else:
            moved = np.stack([(x @ A.T).reshape(-1) for A in algebra], axis=1)
            omega = np.linalg.lstsq(moved, v.reshape(-1), rcond=None)[0]
            rate = float(np.linalg.norm(np.einsum("k,kij->ij", omega, algebra), 2))
            fitted = (moved @ omega).reshape(v.shape)
        rigid = np.linalg.norm(v - fitted) <= 1e-6 * np.linalg.norm(v)
        how = "a relative equilibrium, rotating rigidly" if rigid else "moving along the symmetries, nearly rotating"
        return rate, (
            f"not a rest point but {how} at rate ω = {rate:.3g} (largest token speed {speed:.3g}; a rest point "
            f"has at most {REST_TOL:g} × max|J| = {REST_TOL * scale:.3g})"
        )

    def state(self, u, p: float) -> np.ndarray:
        return self.configuration(u)

    def measure(self, u, p: float) -> float:
        x = self.configuration(u)
        if self.measure_of is not None:
            return float(self.measure_of(x))
        return float(np.sum(np.mean(x, axis=0) ** 2))

    def valid(self, u, p: float) -> bool:
        if not np.all(np.isfinite(u)):
            return False
        if not self.sphere:
            return True
        return bool(np.all(np.sum(self.configuration(u) * np.asarray(self.x0), axis=-1) > 0.05))


class _Frozen:
    """A NumPy array held as a static field: hashed and compared by identity (it never changes)."""

    def __init__(self, array):
        self.array = array.array if isinstance(array, _Frozen) else np.asarray(array)
