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


# -- the random quadratic form (arXiv 2603.06187, 2608.16664) ---------------------------------------------------
#
# dx = P_x ∘ dQ x + γ P_x ∘ dw, Q = (B + Bᵀ)/√2, w common to the tokens (particles/random_depth.QuadraticForm).
# E⟨a, dQ b⟩⟨c, dQ e⟩ = (⟨a, c⟩⟨b, e⟩ + ⟨a, e⟩⟨b, c⟩) dt, so one point's noise has covariance (1 + γ²)P_x: it is a
# Brownian motion on the sphere with generator ½(1 + γ²)Δ. Two points: R = ⟨x₁, x₂⟩ is the diffusion
#
#     dR = [−2R(1 − R²) + γ²(1 − R)(d − 2 − R)] dt + √(4(1 − R²)² + 2γ²(1 − R)²(1 + R)) dB,
#
# docs/model.md §17. At γ = 0 both R = ±1 attract with exponent −4 and θ = arcsin R is a martingale
# (dθ = 2 cos θ dB): P(aligned) = ½ + arcsin(R₀)/π. For γ > 0, R = −1 is no longer a rest point (the drift there
# is 2γ²(d − 1)) and R = 1 attracts with exponent −4 − γ²(d − 1).


def quadratic_rate(d, gamma: float = 0.0):
    """c of E⟨x₀, x_t⟩ = e^{−ct} for one point: Δ⟨x₀, ·⟩ = −(d − 1)⟨x₀, ·⟩, so c = (1 + γ²)(d − 1)/2."""
    return (1.0 + gamma**2) * (np.asarray(d, dtype=float) - 1.0) / 2.0


def quadratic_pair_drift(r, d: int, gamma: float = 0.0):
    """μ(R) of the two-point motion of the random quadratic form (comment above)."""
    r = np.asarray(r, dtype=float)
    return -2.0 * r * (1.0 - r**2) + gamma**2 * (1.0 - r) * (d - 2.0 - r)


def quadratic_pair_variance(r, d: int, gamma: float = 0.0):
    """Σ(R), the quadratic variation rate of R (comment above)."""
    r = np.asarray(r, dtype=float)
    return 4.0 * (1.0 - r**2) ** 2 + 2.0 * gamma**2 * (1.0 - r) ** 2 * (1.0 + r)


def quadratic_exponents(d: int, gamma: float = 0.0) -> tuple[float, float]:
    """(λ_aligned, λ_antipodal): −4 − γ²(d − 1), and −4 at γ = 0 (for γ > 0 the antipodal state is no rest point:
    nan)."""
    return -4.0 - gamma**2 * (d - 1.0), (-4.0 if gamma == 0 else float("nan"))


def aligned_probability(r0):
    """At γ = 0, the probability that a pair from R₀ ends aligned: ½ + arcsin(R₀)/π (θ = arcsin R a martingale)."""
    return 0.5 + np.arcsin(np.asarray(r0, dtype=float)) / np.pi


def antipodal_occupation(r0: float, level: float, d: int, gamma: float, span: float = 30.0, points: int = 400_001):
    """E ∫₀^∞ 1{R_t < level} dt from R₀ = r0 > level, γ > 0: the time the pair spends near the antipodal state.

    With the scale s (s' = exp(−∫ 2μ/Σ)) and speed density m = 2/(Σ s'), R = −1 not attained and R → 1, the
    occupation is (s(1) − s(r0)) ∫_{−1}^{level} m. The integrals are taken in u = artanh R (dR = (1 − R²) du), where
    with z = 1 − R, w = 1 + R: 2μ dR/Σ = 2(γ²(d − 2 − R) − 2Rw)/(4w + 2γ²) du, m dR = du/(z(2w + γ²) s'),
    s' dR = s' z w du, all bounded on u ∈ [−span, span]."""
    if not gamma > 0:
        raise ValueError(f"the antipodal occupation is finite for gamma > 0 only, got {gamma!r}")
    if not -1.0 < level < r0 < 1.0:
        raise ValueError(f"need −1 < level < r0 < 1, got level = {level!r}, r0 = {r0!r}")
    u = np.linspace(-span, span, points)
    z, w = 2.0 / (1.0 + np.exp(2.0 * u)), 2.0 / (1.0 + np.exp(-2.0 * u))
    r = np.tanh(u)
    g2 = gamma**2
    slope = 2.0 * (g2 * (d - 2.0 - r) - 2.0 * r * w) / (4.0 * w + 2.0 * g2)
    du = u[1] - u[0]
    log_s = -np.concatenate([[0.0], np.cumsum(0.5 * (slope[1:] + slope[:-1]) * du)])
    log_s -= np.interp(np.arctanh(r0), u, log_s)  # s'(r0) = 1: the scale's reference
    ds = np.exp(log_s) * z * w
    speed = np.exp(-log_s) / (z * (2.0 * w + g2))
    ur0, ulevel = np.arctanh(r0), np.arctanh(level)
    upper = np.trapezoid(np.where(u >= ur0, ds, 0.0), u)
    lower = np.trapezoid(np.where(u <= ulevel, speed, 0.0), u)
    return float(upper * lower)
