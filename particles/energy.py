"""Interaction energy of a configuration, [GLPR] (3.5)–(3.16)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .sphere import pairwise_gaps


def _check(x, beta, positive: bool) -> None:
    """x of shape (..., n, d); with ``positive``, a concrete β must be > 0 (a traced one passes, and so
    does NaN, the β of fields without a temperature)."""
    if jnp.ndim(x) < 2:
        raise ValueError(f"x must be a configuration of shape (..., n, d), got shape {jnp.shape(x)}")
    if positive and not isinstance(beta, jax.core.Tracer) and np.any(np.asarray(beta) <= 0):
        raise ValueError(f"beta must be > 0 for the energy E_β (it divides by β), got {np.asarray(beta).tolist()}")


def normalized_energy(x: Float[Array, "... n d"], beta) -> Float[Array, "..."]:
    """(1/n²) Σ_i Σ_j e^{β(⟨x_i,x_j⟩ − 1)} = 2β e^{−β} E_β, a number in (0, 1].

    Never overflows (every exponent is ≤ 0). For well-separated tight clusters of sizes
    m_1..m_k it is ≈ Σ_q m_q²/n², so it reads off the cluster structure ([GLPR] §3.3,
    arXiv 2410.06833).
    """
    _check(x, beta, positive=False)
    beta = jnp.asarray(beta)[..., None, None]
    return jnp.mean(jnp.exp(-beta * pairwise_gaps(x)), axis=(-2, -1))


def energy(x: Float[Array, "... n d"], beta) -> Float[Array, "..."]:
    """E_β(x) = (1/(2β n²)) Σ_i Σ_j e^{β⟨x_i,x_j⟩}, [GLPR] (3.5), for β > 0.

    Computed as e^β · normalized_energy / (2β): exact up to rounding, but the value itself
    exceeds the floating-point range once β ≳ 88 (float32) or ≳ 709 (float64); use
    ``normalized_energy`` or ``log_energy`` there. USA (Q = K = V = I) is the gradient ascent
    flow of n E_β, so E_β increases along it; so does it along SA.
    """
    _check(x, beta, positive=True)
    beta_arr = jnp.asarray(beta)
    return jnp.exp(beta_arr) * normalized_energy(x, beta) / (2.0 * beta_arr)


def log_energy(x: Float[Array, "... n d"], beta) -> Float[Array, "..."]:
    """log E_β(x), finite for every β > 0."""
    _check(x, beta, positive=True)
    beta_arr = jnp.asarray(beta)
    return beta_arr + jnp.log(normalized_energy(x, beta)) - jnp.log(2.0 * beta_arr)
