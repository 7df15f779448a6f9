"""Fixed-step integration of noisy fields (Stratonovich SDEs on the sphere) by Strang splitting.

A noisy field (``particles.noise.Noisy``) asks for

    dX_i = P_{X_i}(drift_i(X)) dt + σ P_{X_i} ∘ dW_i       (arXiv 2512.01868 §7),

whose generator is L = L_drift + (σ²/2) Σ_i Δ_i, with Δ_i the Laplace–Beltrami operator of
S^{d−1} acting on particle i (Stratonovich calculus obeys the ordinary chain rule, so the
projected noise P_x ∘ dW is exactly Brownian motion on the sphere). One step of size h is

    x ← B(h/2) ∘ D(h) ∘ B(h/2) x,

where D(h) is one step of any deterministic one-step method (euler, renormalized_euler, rk4,
lie_euler, cg3, lie_trotter) and B(τ) moves every particle independently along a great circle,

    B(τ): x_i ← exp_{x_i}( σ √τ P_{x_i} ξ_i ),   ξ_i ~ N(0, I_d),

the geodesic random walk. Why this scheme rather than stochastic Heun on the ambient SDE:

* It has no Itô/Stratonovich pitfall. The noise is per particle, so the noise sub-flow is n
  independent Brownian motions on S^{d−1}, an intrinsic object; the geodesic random walk has
  E[x'|x] = E[cos‖v‖] x = (1 − (d−1)σ²τ/2 + O(τ²)) x, i.e. it produces the curvature drift
  −(d−1)σ²/2 · x (the Itô correction) by itself. On the circle (d = 2) it is exact: a rotation
  by a N(0, σ²τ) angle is Brownian motion on S¹ at time τ.
* Particles stay on the sphere to rounding error: B is an exact rotation of each particle and
  every deterministic method renormalizes.
* It reuses the deterministic methods unchanged, so σ = 0 reproduces the deterministic run
  (B(τ) is then the identity) and small noise costs no accuracy in the drift.

Orders: strong 1/2 (the noise is multiplicative and non-commutative for d ≥ 3); weak 1 for
d ≥ 3 (the geodesic walk's local weak error is O(τ²): E⟨x', x⟩ = E cos‖v‖ = e^{−(d−1)σ²τ/2}
(1 + O(σ⁴τ²))); weak min(2, p) for d = 2 with a drift method of order p, as Strang splitting of
two exact flows is weak order 2.

Brownian increments come from ``jax.random`` inside the compiled loop (no stored paths). Each member
has a key of its own, and its k-th step (counted from t0 over the whole run) draws from
``fold_in(member_key, k)``. The member keys are given (one per member: a caller that cuts an ensemble
into several calls keys each member by what it is, never by its place in a call, so that the paths do
not depend on the cut) or made from one key: member m of the ensemble then has ``fold_in(key, m)``. A
run is reproducible given its keys, and members with distinct keys are independent.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.init import check_seed
from ..particles.noise import deterministic, noise_sigma
from ..particles.sphere import expmap, project
from .fixed import FixedStep


def brownian_step(x, dw):
    """Geodesic random walk x ← exp_x(P_x dw): Brownian motion on S^{d−1} for one small step.

    With dw ~ N(0, σ²τ I_d) this samples Brownian motion (generator (σ²/2)Δ) at time τ exactly
    for d = 2 and to weak order 1 for d ≥ 3. dw = 0 leaves x bit-for-bit unchanged.
    """
    return expmap(x, project(x, dw))


class Strang(eqx.Module):
    """Strang splitting B(h/2) ∘ D(h) ∘ B(h/2) of a noisy field (see the module docstring).

    ``method`` is the deterministic fixed-step method D, applied to the field without its noise
    (``deterministic``); B is the geodesic random walk with the field's σ (``noise_sigma``).
    ``step`` draws its increments from ``key``.
    """

    method: FixedStep

    def step(self, field, t, x, h, key):
        sigma = noise_sigma(field)
        xi = jax.random.normal(key, (2,) + x.shape, x.dtype)
        scale = sigma.astype(x.dtype) * jnp.sqrt(0.5 * h)
        x = brownian_step(x, scale * xi[0])
        x = self.method.step(deterministic(field), t, x, h)
        return brownian_step(x, scale * xi[1])


def member_keys(key, members: int) -> jax.Array:
    """The Brownian keys of ``members`` members, a typed key array of shape (members,).

    ``key`` is one key for the ensemble (None: key 0; an int seed in [0, 2**63 − 1], a typed key or a raw
    uint32 key (PRNGKey)), member m then keyed by ``fold_in(key, m)``; or one key per member: a typed key
    array of shape (members,) or raw uint32 keys of shape (members, 2), taken as they are.
    """
    if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape == ():
            return _folded(key, members)
        if key.shape == (members,):
            return key
        raise ValueError(_shape_message(key.shape, members))
    if key is None or (isinstance(key, (int, np.integer)) and not isinstance(key, bool)):
        return _folded(jax.random.key(0 if key is None else check_seed(key)), members)
    arr = key if isinstance(key, jax.Array) else np.asarray(key) if isinstance(key, (np.ndarray, list, tuple)) else None
    if arr is not None and arr.dtype == np.uint32 and arr.ndim in (1, 2) and arr.shape[-1] == 2:
        if arr.ndim == 1:
            return _folded(jax.random.wrap_key_data(jnp.asarray(arr)), members)
        if arr.shape[0] == members:
            return jax.vmap(jax.random.wrap_key_data)(jnp.asarray(arr))
        raise ValueError(_shape_message(arr.shape[:1], members))
    raise ValueError(
        f"key must be an int seed, a jax.random key, or one key per member (a key array of shape ({members},)), "
        f"got {key!r}"
    )


def _folded(key, members: int) -> jax.Array:
    """Member m's key ``fold_in(key, m)`` for m < ``members``."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(members, dtype=jnp.uint32))


def _shape_message(shape, members: int) -> str:
    return (
        f"key holds {shape[0]} keys (shape {tuple(shape)}) but the run has {members} member"
        f"{'s' if members != 1 else ''}: give one key for the ensemble, or one per member"
    )
