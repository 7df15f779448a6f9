"""Rest points of a family of particle fields as a continuation system (``continuation``, solvers/continuation.py).

``RestPoints(family, x, p)`` follows the rest points of the fields family(p) (a function of one number: β,
a weight scale, the noise, a mask's slope) from the rest point near x at p. The unknowns are tangent
coordinates u at the start x_0 (x(u)_i = (x_{0,i} + B_i u_i)/‖·‖, the frames B_i of ``tangent_frames``), valid
while every token stays in the open hemisphere around its start, together with one multiplier μ_k per
symmetry generator g_k of the field (``symmetry_algebra`` at the start, taken for the whole family):

    F(u, μ, p) = ( Bᵀ f_p(t, x(u)) + Σ_k μ_k g_k ,  ⟨g_k, u⟩ )

The second block is a phase condition: it picks one member of each family of rotated rest points, so the
system is regular where the rest point is isolated up to symmetry; μ vanishes at every solution (the
velocity has no component along the generators' directions there). Stability at each point is that of
``equilibrium``: the tangent Jacobian's spectrum without the zero modes.
"""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.fields import Field
from .equilibrium import Linearization, analyze, chart, check_field, coordinates, generator_vectors, symmetry_algebra

__all__ = ["RestPoints"]


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
