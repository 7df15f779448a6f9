"""Two tokens under common noise: the diffusion of R = ⟨x₁, x₂⟩, its Lyapunov exponents, the antipodal threshold.

For n = 2, QᵀK = I, V̄ = 0, the SDE of ``particles/random_depth.CommonNoise`` (docs/model.md §1.12) moves
R = ⟨x₁, x₂⟩ as a one-dimensional Itô diffusion dR = μ(R) dt + √Σ(R) dB, with c² = σ²/d, a = A₁₁ = A₂₂ =
1/(1 + e^{β(R − 1)}), s = |y_i|² = a² + (1 − a)² + 2a(1 − a)R and p = ⟨y₁, y₂⟩ = 2a(1 − a) + (a² + (1 − a)²)R:

    μ(R) = −σ² (d − 1)/d · s R + c² p (d − 2 + R²),        Σ(R) = 2c² (1 − R²)(s − R p).

Both vanish at R = ±1; linearizing log(1 − R) and log(1 + R) there gives the exponents

    λ_aligned   = −σ² (d − 1)/d                                   (every β: aligned pairs attract)
    λ_antipodal = 2σ² (d − 2 − cosh 2β) / (d (1 + cosh 2β)),

so antipodal pairs attract (λ_antipodal < 0) iff cosh 2β > d − 2: β > β*(d) = ½ arccosh(d − 2) for d ≥ 3
(every β > 0 for d = 3).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg


def _weights(r, beta):
    a = 1.0 / (1.0 + np.exp(beta * (r - 1.0)))
    s = a**2 + (1 - a) ** 2 + 2 * a * (1 - a) * r
    p = 2 * a * (1 - a) + (a**2 + (1 - a) ** 2) * r
    return s, p


def pair_drift(r, beta: float, d: int, sigma: float = 1.0):
    """μ(R), the Itô drift of R = ⟨x₁, x₂⟩ (module docstring)."""
    r = np.asarray(r, dtype=float)
    s, p = _weights(r, beta)
    return -(sigma**2) * (d - 1) / d * s * r + sigma**2 / d * p * (d - 2 + r**2)


def pair_variance(r, beta: float, d: int, sigma: float = 1.0):
    """Σ(R), the quadratic variation rate of R (module docstring)."""
    r = np.asarray(r, dtype=float)
    s, p = _weights(r, beta)
    return 2 * sigma**2 / d * (1 - r**2) * (s - r * p)


def aligned_exponent(d, sigma: float = 1.0):
    """λ at R = 1: lim (1/t) log(1 − R(t)) = −σ² (d − 1)/d."""
    return -(sigma**2) * (np.asarray(d, dtype=float) - 1) / np.asarray(d, dtype=float)


def antipodal_exponent(beta, d, sigma: float = 1.0):
    """λ at R = −1: lim (1/t) log(1 + R(t)) = 2σ² (d − 2 − cosh 2β)/(d (1 + cosh 2β))."""
    c = np.cosh(2 * np.asarray(beta, dtype=float))
    d = np.asarray(d, dtype=float)
    return 2 * sigma**2 * (d - 2 - c) / (d * (1 + c))


def antipodal_threshold(d):
    """β*(d) = ½ arccosh(d − 2) (0 for d ≤ 3): antipodal pairs attract for β > β*."""
    d = np.asarray(d, dtype=float)
    return 0.5 * np.arccosh(np.maximum(d - 2.0, 1.0))


def pair_expectation(f, r0: float, t: float, beta: float, d: int, sigma: float = 1.0, points: int = 801) -> float:
    """E f(R_t) from R_0 = r0: the backward Kolmogorov equation u_t = μ u' + ½ Σ u'' on a uniform grid of [−1, 1]
    (central differences, second order; both coefficients vanish at ±1, so no boundary condition), u = e^{tG} f."""
    r = np.linspace(-1.0, 1.0, points)
    h = r[1] - r[0]
    mu, var = pair_drift(r, beta, d, sigma), pair_variance(r, beta, d, sigma)
    g = np.zeros((points, points))
    i = np.arange(1, points - 1)
    g[i, i - 1] = -mu[i] / (2 * h) + var[i] / (2 * h**2)
    g[i, i + 1] = mu[i] / (2 * h) + var[i] / (2 * h**2)
    g[i, i] = -var[i] / h**2
    u = scipy.linalg.expm(t * g) @ f(r)
    return float(np.interp(r0, r, u))
