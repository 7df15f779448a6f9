"""One attention layer over a long context with β = γ log n (Chen, Lin, Polyanskiy, Rigollet, arXiv 2510.05554;
Rigollet, arXiv 2512.01868 §6).

The layer of their simplified model: tokens are normalized (Pre-LN), y_i = x_i/‖x_i‖, and mapped to

    x'_i = Σ_j softmax_j(β⟨y_i, y_j⟩) y_j + α x_i            (α: the residual weight; 0 in the headline result)

(``attention_layer``: SA's drift, blocked for long contexts). For n unit tokens with every ⟨y_i, y_j⟩ = ρ
(equiangular), token i keeps the weight p = e^β/Z on itself and q = e^{βρ}/Z on each other token,
Z = e^β + (n − 1)e^{βρ}, so x'_i = c y_i + q S with c = p − q + α and S = Σ_j y_j. With ⟨y_i, S⟩ = s =
1 + (n − 1)ρ and ‖S‖² = n s, two outputs meet at the cosine

    ⟨x'_i, x'_k⟩ / ‖x'_i‖² = (c²ρ + 2cqs + q²ns) / (c² + 2cqs + q²ns)        (``equiangular_layer``, exact for every n).

With β = γ log n, the others' total weight relative to the token's own, (n − 1)e^{−β(1−ρ)} ≈ n^{1 − γ(1−ρ)},
vanishes for γ > 1/(1 − ρ) and diverges below: as n → ∞ the cosine tends to ρ above the critical
γ_c = 1/(1 − ρ) (the layer is the identity), to 1 below (every token becomes the mean: collapse), and
at γ_c, where p → 1/2 and nq → 1/2, to 4ρ/(1 + 3ρ) for α = 0 (``layer_limit``; 0.8 at ρ = 1/2, γ = 2).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ....particles.checks import check_real
from ....particles.fields import SA
from ....particles.sphere import normalize

__all__ = ["critical_gamma", "equiangular_layer", "layer_limit", "attention_layer", "equiangular_tokens"]


def critical_gamma(rho: float) -> float:
    """γ_c = 1/(1 − ρ): β = γ log n collapses the tokens below it and leaves them alone above it."""
    rho = check_real("rho", rho, -1.0, 1.0)
    if rho >= 1.0:
        raise ValueError("rho must be < 1: tokens with ρ = 1 are already one point")
    return 1.0 / (1.0 - rho)


def _weights(rho, beta, n):
    """(p, q): the weight of a token on itself and on each other token, from logs (no overflow at any β)."""
    log_others = np.log(n - 1.0) - beta * (1.0 - rho) if n > 1 else -np.inf  # log((n − 1) q/p)
    p = 1.0 / (1.0 + np.exp(log_others))
    q = np.exp(-beta * (1.0 - rho)) * p
    return p, q


def equiangular_layer(rho: float, beta, n: int, residual: float = 0.0) -> np.ndarray:
    """The cosine between two outputs of one layer (module docstring) for n ≥ 2 equiangular unit tokens
    of inner product ρ; β may be an array. Exact (float64) for every n and β."""
    rho = check_real("rho", rho, -1.0 / (n - 1) if n > 1 else -1.0, 1.0)
    beta = np.asarray(beta, dtype=float)
    p, q = _weights(rho, beta, float(n))
    c = p - q + residual
    s = 1.0 + (n - 1) * rho
    cross = 2.0 * c * q * s + q * q * n * s
    return (c * c * rho + cross) / (c * c + cross)


def layer_limit(rho: float, gamma, residual: float = 0.0) -> np.ndarray:
    """lim_{n→∞} of ``equiangular_layer`` with β = γ log n: 1-like collapse below γ_c, ρ above, and at γ_c
    ρ(c + 1/2)²/(c² + cρ + ρ/4) with c = 1/2 + α (4ρ/(1 + 3ρ) for α = 0). Below γ_c, with α > 0, the
    outputs are α y_i + mean: ρ(1 + α)²/(α² + 2αρ + ρ)."""
    gamma = np.asarray(gamma, dtype=float)
    gc = critical_gamma(rho)
    a = residual
    below = rho * (1 + a) ** 2 / (a * a + 2 * a * rho + rho)
    c = 0.5 + a
    at = rho * (c + 0.5) ** 2 / (c * c + c * rho + rho / 4.0)
    return np.where(np.isclose(gamma, gc, rtol=1e-12, atol=0.0), at, np.where(gamma < gc, below, rho))


def equiangular_tokens(n: int, rho: float, dtype="float64") -> Float[Array, "n n+1"]:
    """n unit tokens of R^{n+1} with every ⟨y_i, y_j⟩ = ρ ≥ 0: y_i = √ρ e_0 + √(1 − ρ) e_{i+1}."""
    rho = check_real("rho", rho, 0.0, 1.0)
    y = np.zeros((n, n + 1), dtype=dtype)
    y[:, 0] = math.sqrt(rho)
    y[np.arange(n), np.arange(1, n + 1)] = math.sqrt(1.0 - rho)
    return jnp.asarray(y)


def attention_layer(x: Float[Array, "n d"], beta, residual: float = 0.0, *, block="auto") -> Float[Array, "n d"]:
    """One layer of the simplified model: Σ_j softmax_j(β⟨y_i, y_j⟩) y_j + α x_i with y = x/‖x‖, the attention
    evaluated by SA's drift (blocked for long contexts, ``block``: as ``SA``)."""
    x = jnp.asarray(x)
    y = normalize(x)
    return SA(beta, block=block).drift(0.0, y) + residual * x
