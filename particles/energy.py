"""Interaction energy of a configuration, [GLPR] (3.5)–(3.16)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .observables import finite_members
from .sphere import pairwise_gaps


def _check(x, beta, positive: bool) -> Array:
    """x of shape (..., n, d), as a JAX array; with ``positive``, a concrete β must be > 0 (a traced one
    passes, and so does NaN, the β of fields without a temperature)."""
    if jnp.ndim(x) < 2:
        raise ValueError(f"x must be a configuration of shape (..., n, d), got shape {jnp.shape(x)}")
    if positive and not isinstance(beta, jax.core.Tracer) and np.any(np.asarray(beta) <= 0):
        raise ValueError(f"beta must be > 0 for the energy E_β (it divides by β), got {np.asarray(beta).tolist()}")
    # a NumPy x would otherwise be differenced by NumPy, on the host, pair by pair
    return jnp.asarray(x)


def _normalized(x, beta):
    beta = jnp.asarray(beta)[..., None, None]
    return jnp.mean(jnp.exp(-beta * pairwise_gaps(x)), axis=(-2, -1))


def _nan_unless(ok, value):
    """``value`` where the configuration is finite, NaN elsewhere (broadcast as x's batch axes against β's)."""
    return jnp.where(ok, value, jnp.asarray(jnp.nan, jnp.result_type(value)))


def normalized_energy(x: Float[Array, "... n d"], beta) -> Float[Array, ...]:
    """(1/n²) Σ_i Σ_j e^{β(⟨x_i,x_j⟩ − 1)} = 2β e^{−β} E_β, a number in (0, 1].

    Never overflows (every exponent is ≤ 0). For well-separated tight clusters of sizes
    m_1..m_k it is ≈ Σ_q m_q²/n², so it reads off the cluster structure ([GLPR] §3.3,
    arXiv 2410.06833). NaN for a configuration with a NaN or inf entry (a RuntimeWarning
    when eager).
    """
    x = _check(x, beta, positive=False)
    ok = finite_members(x, "normalized_energy", "normalized energy is NaN")
    return _nan_unless(ok, _normalized(x, beta))


def energy(x: Float[Array, "... n d"], beta) -> Float[Array, ...]:
    """E_β(x) = (1/(2β n²)) Σ_i Σ_j e^{β⟨x_i,x_j⟩}, [GLPR] (3.5), for β > 0.

    Computed as e^β · normalized_energy / (2β): exact up to rounding, but the value itself
    exceeds the floating-point range once β ≳ 88 (float32) or ≳ 709 (float64); use
    ``normalized_energy`` or ``log_energy`` there. USA (Q = K = V = I) is the gradient ascent
    flow of n E_β, so E_β increases along it; so does it along SA. NaN for a configuration
    with a NaN or inf entry (a RuntimeWarning when eager).
    """
    x = _check(x, beta, positive=True)
    ok = finite_members(x, "energy", "energy is NaN")
    beta_arr = jnp.asarray(beta)
    return _nan_unless(ok, jnp.exp(beta_arr) * _normalized(x, beta) / (2.0 * beta_arr))


def log_energy(x: Float[Array, "... n d"], beta) -> Float[Array, ...]:
    """log E_β(x), finite for every β > 0 and finite configuration; NaN for one with a NaN or inf entry."""
    x = _check(x, beta, positive=True)
    ok = finite_members(x, "log_energy", "log-energy is NaN")
    beta_arr = jnp.asarray(beta)
    return _nan_unless(ok, beta_arr + jnp.log(_normalized(x, beta)) - jnp.log(2.0 * beta_arr))
