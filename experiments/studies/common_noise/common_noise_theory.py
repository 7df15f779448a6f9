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
    """E f(R_t) from R_0 = r0 under the random-weights pair diffusion (``pair_drift``, ``pair_variance``)."""
    return kolmogorov_expectation(
        f, r0, t, lambda r: pair_drift(r, beta, d, sigma), lambda r: pair_variance(r, beta, d, sigma), points
    )


def kolmogorov_expectation(f, r0: float, t: float, drift, variance, points: int = 801) -> float:
    """E f(R_t) from R_0 = r0 for the diffusion dR = drift(R) dt + √variance(R) dB on [−1, 1], the variance
    vanishing at ±1: the backward Kolmogorov equation u_t = μ u' + ½ Σ u'' by ``kolmogorov_path``."""
    return float(kolmogorov_path(f, r0, t, 1, drift, variance, points)[-1])


def kolmogorov_path(f, r0: float, step: float, count: int, drift, variance, points: int = 801) -> np.ndarray:
    """E f(R_{k·step}) for k = 0, …, count from R_0 = r0: u = e^{kΔG} f, G the generator μ ∂ + ½ Σ ∂² by
    differences on ``points`` uniform points of [−1, 1] (central, second order, where the diffusion dominates the
    drift on the cell's scale, else the drift upwind), one matrix exponential applied k times. The diffusion
    vanishes at ±1; where the drift does not, the end point is left inwards (upwind), else it is absorbing."""
    r = np.linspace(-1.0, 1.0, points)
    mu, var = drift(r), variance(r)
    lo, hi = r[1:-1] - r[:-2], r[2:] - r[1:-1]  # h₋, h₊ at each interior point
    i = np.arange(1, r.size - 1)
    m, v = mu[i], var[i]
    # the drift by central differences where diffusion dominates on the cell scale, upwind where it does not (a
    # monotone scheme there: no oscillation, no negative E of a positive f, as near R = −1 where Σ vanishes first)
    central = np.abs(m) * np.maximum(lo, hi) <= v
    below = np.where(central, -m * hi / (lo * (lo + hi)), np.where(m < 0, m / lo, 0.0))
    above = np.where(central, m * lo / (hi * (lo + hi)), np.where(m > 0, m / hi, 0.0))
    g = np.zeros((r.size, r.size))
    g[i, i - 1] = below + v / (lo * (lo + hi))
    g[i, i + 1] = above + v / (hi * (lo + hi))
    g[i, i] = -(below + above) - v / (lo * hi)
    # an end point the drift leaves (the diffusion vanishes there): its mass moves inwards, upwind
    if mu[0] > 0:
        g[0, 0], g[0, 1] = -mu[0] / (r[1] - r[0]), mu[0] / (r[1] - r[0])
    if mu[-1] < 0:
        g[-1, -1], g[-1, -2] = mu[-1] / (r[-1] - r[-2]), -mu[-1] / (r[-1] - r[-2])
    import scipy.linalg  # here, not at the top: an experiment's registration never loads SciPy

    propagate = scipy.linalg.expm(step * g)
    u, out = np.asarray(f(r), dtype=float), []
    for _ in range(count + 1):
        out.append(np.interp(r0, r, u))
        u = propagate @ u
    return np.asarray(out)


# -- coercive common noise (arXiv 2604.26898, as summarized) --------------------------------------------------
#
# dx_i = P_{x_i} y_i dt + γ P_{x_i} ∘ dw, w in R^d common to the tokens (particles/random_depth.CommonBrownian).


def noise_contraction_rate(d, gamma):
    """γ²(d − 3): the least rate at which the common Brownian noise alone contracts every pair on average,
    d E(1 − R) ≤ −γ²(d − 3) E(1 − R) dt (docs/model.md §17.3); coercive for d ≥ 4."""
    return np.asarray(gamma, dtype=float) ** 2 * (np.asarray(d, dtype=float) - 3.0)


def brownian_pair_drift(r, beta: float, d: int, gamma: float):
    """μ(R) for two tokens under SA (QᵀK = V = I) and the common noise: 2(1 − a)(1 − R²) + γ²(1 − R)(d − 2 − R),
    a = 1/(1 + e^{β(R − 1)}) each token's weight on itself."""
    r = np.asarray(r, dtype=float)
    a = 1.0 / (1.0 + np.exp(beta * (r - 1.0)))
    return 2 * (1 - a) * (1 - r**2) + gamma**2 * (1 - r) * (d - 2 - r)


def brownian_pair_variance(r, gamma: float):
    """Σ(R) = 2γ²(1 − R)²(1 + R): the martingale part of R is γ(1 − R)⟨x₁ + x₂, dw⟩, |x₁ + x₂|² = 2(1 + R)."""
    r = np.asarray(r, dtype=float)
    return 2 * gamma**2 * (1 - r) ** 2 * (1 + r)


def energy_generator(x, attention_drift, gamma):
    """(L E)(x) for the interaction energy E = (1/n²) Σ_ij (1 − ⟨x_i, x_j⟩) = 1 − |m|², m the tokens' mean, one
    value per member of ``x`` (B, n, d): −2⟨m, mean_i v_i⟩ − γ²((d − 3)E + (1/n²) Σ_ij (1 − ⟨x_i, x_j⟩)²), v_i
    the tangent drift ``attention_drift`` (B, n, d) at x, γ a number or one per member; Dynkin's formula makes
    E E(t) − E E(0) its integral."""
    x, v, gamma = np.asarray(x, dtype=float), np.asarray(attention_drift, dtype=float), np.asarray(gamma, dtype=float)
    d = x.shape[-1]
    m = x.mean(axis=1)
    u = 1.0 - np.einsum("bid,bjd->bij", x, x)
    energy = u.mean(axis=(1, 2))
    return -2 * np.sum(m * v.mean(axis=1), axis=-1) - gamma**2 * ((d - 3) * energy + (u**2).mean(axis=(1, 2)))


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


def quadratic_rate(d, gamma=0.0):
    """c of E⟨x₀, x_t⟩ = e^{−ct} for one point: Δ⟨x₀, ·⟩ = −(d − 1)⟨x₀, ·⟩, so c = (1 + γ²)(d − 1)/2."""
    return (1.0 + np.asarray(gamma, dtype=float) ** 2) * (np.asarray(d, dtype=float) - 1.0) / 2.0


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


# -- the homogenized flow (arXiv 2604.01978) and its finite-d corrections --------------------------------------
#
# Under the common-noise SDE with QᵀK = I, V̄ = 0 the Gram matrix G = (⟨x_i, x_j⟩) is itself a diffusion (the
# noise's law is rotation invariant). With Π = softmax_row(βG) and Y = Π G Πᵀ (the Gram matrix of the attention
# means y_i), for i ≠ j (docs/model.md §17.2)
#
#     drift_ij = σ² [Y_ij − ½(Y_ii + Y_jj) G_ij] + (σ²/d) [½(Y_ii + Y_jj) G_ij + Y_ij (G_ij² − 2)],
#     d · cov(dG_ij, dG_kl)/dt = σ² Σ ⟨P_a x_b, P_c x_e⟩ Y_ac over (a, b) ∈ {(i, j), (j, i)}, (c, e) ∈ {(k, l), (l, k)},
#
# ⟨P_a x_b, P_c x_e⟩ = G_be − G_ce G_bc − G_ab G_ae + G_ab G_ce G_ac. As d → ∞ equiangular data G = γ11ᵀ + (1 − γ)I
# stay equiangular and γ̇ = σ² b(γ), b(γ) = γ + (1 − γ) g − γ(γ + (1 − γ) f), f = Σ_k π_ik², g = Σ_k π_ik π_jk. At
# finite d, E G = Γ + δ/d + O(d⁻²) with δ from the linear noise approximation (``homogenized_bias``).


def equiangular_weights(gamma, beta: float, n: int):
    """(f, g) = (Σ_k π_ik², Σ_k π_ik π_jk) of softmax attention with QᵀK = I on equiangular data of overlap γ."""
    gamma = np.asarray(gamma, dtype=float)
    a = 1.0 / (1.0 + (n - 1) * np.exp(-beta * (1.0 - gamma)))  # π_ii
    c = (1.0 - a) / (n - 1)  # π_ij, j ≠ i
    return a**2 + (n - 1) * c**2, 2 * a * c + (n - 2) * c**2


def homogenized_drift(gamma, beta: float, n: int, sigma: float = 1.0, weights=None):
    """σ² b(γ) = σ² [γ + (1 − γ) g − γ(γ + (1 − γ) f)], with (f, g) = ``weights`` (default: the fixed attention's,
    ``equiangular_weights``; a Monte Carlo expectation over random weights may be given instead)."""
    gamma = np.asarray(gamma, dtype=float)
    f, g = equiangular_weights(gamma, beta, n) if weights is None else weights
    return sigma**2 * (gamma + (1 - gamma) * g - gamma * (gamma + (1 - gamma) * f))


def _pairs(n: int):
    i, j = np.triu_indices(n, 1)
    return i, j


def _gram(v, n: int) -> np.ndarray:
    i, j = _pairs(n)
    g = np.eye(n)
    g[i, j] = g[j, i] = v
    return g


def gram_coefficients(v, beta: float, n: int, sigma: float = 1.0):
    """The Gram diffusion's coefficients at the off-diagonal entries ``v`` (i < j, row-major): the drift's d⁰ part
    M₀, its 1/d part M₁, and S₀ = d · the covariance rate (module comment)."""
    g = _gram(np.asarray(v, dtype=float), n)
    z = beta * g
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    y = p @ g @ p.T
    i, j = _pairs(n)
    yd = 0.5 * (np.diag(y)[i] + np.diag(y)[j])
    m0 = sigma**2 * (y[i, j] - yd * g[i, j])
    m1 = sigma**2 * (yd * g[i, j] + y[i, j] * (g[i, j] ** 2 - 2.0))

    def inner(a, b, c, e):  # ⟨P_a x_b, P_c x_e⟩, broadcast over index arrays
        return g[b, e] - g[c, e] * g[b, c] - g[a, b] * g[a, e] + g[a, b] * g[c, e] * g[a, c]

    ii, jj = i[:, None], j[:, None]
    kk, ll = i[None, :], j[None, :]
    s0 = np.zeros((i.size, i.size))
    for a, b in ((ii, jj), (jj, ii)):
        for c, e in ((kk, ll), (ll, kk)):
            s0 = s0 + inner(a, b, c, e) * y[a, c]
    return m0, m1, sigma**2 * s0


def homogenized_bias(gamma0: float, beta: float, n: int, ts, sigma: float = 1.0, steps_per_unit: int = 50):
    """(γ(t), δ(t), C(t)) at the times ``ts`` from equiangular data of overlap γ0: γ the homogenized flow
    (γ̇ = σ² b(γ), the d⁰ Gram drift), δ the O(1/d) bias of the mean off-diagonal Gram entry (E G_ij = γ + δ/d),
    C = d · the variance of one entry, by the linear noise approximation

        δ̇ = J δ + M₁ + ½ D²M₀ : C,   Ċ = J C + C Jᵀ + S₀,   J = DM₀,   δ(0) = C(0) = 0,

    on the n(n − 1)/2 entries (RK4, ``steps_per_unit`` steps per unit time; J by central differences, D²M₀ : C
    by second differences along C's eigenvectors); δ and C averaged over the pairs."""
    ts = np.asarray(ts, dtype=float)
    m = n * (n - 1) // 2
    eye, h = np.eye(m), 1e-4

    def m0(v):
        return gram_coefficients(v, beta, n, sigma)[0]

    def rhs(state):
        v, delta, cov = state
        base, m1, s0 = gram_coefficients(v, beta, n, sigma)
        jac = np.stack([(m0(v + h * e) - m0(v - h * e)) / (2 * h) for e in eye], axis=1)
        lam, vec = np.linalg.eigh(0.5 * (cov + cov.T))
        curv = sum(lk * (m0(v + h * uk) - 2 * base + m0(v - h * uk)) / h**2 for lk, uk in zip(lam, vec.T, strict=True))
        return base, jac @ delta + m1 + 0.5 * curv, jac @ cov + cov @ jac.T + s0

    def rk4(state, dt):
        def add(k, c):
            return tuple(a + c * b for a, b in zip(state, k, strict=True))

        k1 = rhs(state)
        k2 = rhs(add(k1, dt / 2))
        k3 = rhs(add(k2, dt / 2))
        k4 = rhs(add(k3, dt))
        return tuple(s + dt / 6 * (a + 2 * b + 2 * c + e) for s, a, b, c, e in zip(state, k1, k2, k3, k4, strict=True))

    state = (np.full(m, float(gamma0)), np.zeros(m), np.zeros((m, m)))
    out, now = [], 0.0
    for t in ts:
        count = max(int(np.ceil((t - now) * steps_per_unit - 1e-9)), 1)
        for _ in range(count):
            state = rk4(state, (t - now) / count)
        now = t
        v, delta, cov = state
        out.append((float(v.mean()), float(delta.mean()), float(np.diag(cov).mean())))
    gam, delta, var = (np.array(a) for a in zip(*out, strict=True))
    return gam, delta, var


# -- two clusters and the persistence of antipodal groups (arXiv 2601.21942) ----------------------------------
#
# n tokens in two clusters p, q (masses w and 1 − w, QᵀK = I, V̄ = 0): the attention sees only the masses, so
# R = ⟨p, q⟩ is again a one-dimensional diffusion. With a_p = w e^β/(w e^β + (1 − w) e^{βR}), a_q likewise with
# 1 − w, y_p = a_p p + (1 − a_p) q, y_q = (1 − a_q) p + a_q q and Y their Gram matrix, the Gram drift of §17.2 and
# ⟨P_p q, P_q p⟩ = −R(1 − R²) give (docs/model.md §17, "Antipodal groups")
#
#     μ_w(R) = σ²[Y_pq − ½(Y_pp + Y_qq)R] + (σ²/d)[½(Y_pp + Y_qq)R + Y_pq(R² − 2)],
#     Σ_w(R) = (σ²/d)(1 − R²)(Y_pp + Y_qq − 2R Y_pq).
#
# w = ½ is the pair diffusion (pair_drift, pair_variance). At R = −1, μ_w = σ²(d − 1)(α_p − α_q)²/(2d) with
# α = 2a − 1: only the balanced antipodal state (w = ½) is a rest point; an unbalanced one is pushed off it.


def _two_cluster_gram(r, beta: float, mass: float):
    r = np.asarray(r, dtype=float)
    ap = mass * np.exp(beta) / (mass * np.exp(beta) + (1 - mass) * np.exp(beta * r))
    aq = (1 - mass) * np.exp(beta) / ((1 - mass) * np.exp(beta) + mass * np.exp(beta * r))
    ypp = ap**2 + (1 - ap) ** 2 + 2 * ap * (1 - ap) * r
    yqq = aq**2 + (1 - aq) ** 2 + 2 * aq * (1 - aq) * r
    ypq = ap * (1 - aq) + (1 - ap) * aq + (ap * aq + (1 - ap) * (1 - aq)) * r
    return r, ypp, yqq, ypq


def two_cluster_drift(r, beta: float, d: int, mass: float = 0.5, sigma: float = 1.0):
    """μ_w(R): the Itô drift of R = ⟨p, q⟩ for two clusters of masses w = ``mass`` and 1 − w (comment above)."""
    r, ypp, yqq, ypq = _two_cluster_gram(r, beta, mass)
    mean = 0.5 * (ypp + yqq)
    return sigma**2 * (ypq - mean * r) + sigma**2 / d * (mean * r + ypq * (r**2 - 2.0))


def two_cluster_variance(r, beta: float, d: int, mass: float = 0.5, sigma: float = 1.0):
    """Σ_w(R): the quadratic variation rate of R for two clusters of masses w and 1 − w (comment above)."""
    r, ypp, yqq, ypq = _two_cluster_gram(r, beta, mass)
    return sigma**2 / d * (1 - r**2) * (ypp + yqq - 2 * r * ypq)


def antipodal_push(beta, d, mass, sigma: float = 1.0):
    """μ_w(−1) = σ²(d − 1)(α_p − α_q)²/(2d), α_p = 2a_p − 1 with a_p = 1/(1 + ((1 − w)/w) e^{−2β}) (α_q: w ↔ 1 − w):
    the drift that pushes two antipodal groups of masses w ≠ ½ off R = −1 (0 at w = ½)."""
    beta, d, w = (np.asarray(v, dtype=float) for v in (beta, d, mass))
    ap = 1.0 / (1.0 + (1 - w) / w * np.exp(-2 * beta))
    aq = 1.0 / (1.0 + w / (1 - w) * np.exp(-2 * beta))
    return sigma**2 * (d - 1) * (2 * ap - 2 * aq) ** 2 / (2 * d)


def split_exponent(beta, d, sigma: float = 1.0):
    """The exponent of 1 − ⟨x_i, x_j⟩ for two tokens of one group of the balanced antipodal state:
    −σ²(d − 1)/d · tanh²β (each token's attention mean is tanh β times its own position; docs/model.md §17)."""
    return -(sigma**2) * (np.asarray(d, dtype=float) - 1) / np.asarray(d, dtype=float) * np.tanh(beta) ** 2


def antipodal_log_variance(beta, d, sigma: float = 1.0):
    """v = lim Σ(R)/(1 + R)² at R = −1 = 8σ² cosh 2β/(d(1 + cosh 2β)): the variance rate of log(1 + R) there."""
    c = np.cosh(2 * np.asarray(beta, dtype=float))
    return 8 * sigma**2 * c / (np.asarray(d, dtype=float) * (1 + c))


def antipodal_persistence(ts, gap0: float, level: float, beta: float, d: int, sigma: float = 1.0):
    """P(1 + R_t < level) for a balanced two-group state started at 1 + R = gap0 ≪ level: near R = −1,
    log(1 + R) is a Brownian motion with drift λ_antipodal and variance rate v (``antipodal_log_variance``), so
    the probability is Φ((log level − log gap0 − λt)/√(vt)) (1 at t = 0)."""
    from scipy.stats import norm  # here: the registration never loads SciPy

    ts = np.asarray(ts, dtype=float)
    lam, v = antipodal_exponent(beta, d, sigma), antipodal_log_variance(beta, d, sigma)
    spread = np.sqrt(v * np.maximum(ts, 1e-300))
    return np.where(ts > 0, norm.cdf((np.log(level) - np.log(gap0) - lam * ts) / spread), 1.0)


# -- the homogenized drift under random attention weights (arXiv 2604.01978) ----------------------------------
#
# With Q_ℓ, K_ℓ drawn afresh per layer (RandomDepth(random_attention=True): i.i.d. N(0, d^{−1/2}) entries), the
# layer's value noise is independent of its attention, so the depth limit's coefficients are those of §17.2
# averaged over Q, K: on equiangular data the d⁰ drift is σ² b(γ) with f = E Σ_k π_ik², g = E Σ_k π_ik π_jk. For
# tokens x_i = X_i (X the n × (n + 1) equiangular rows), the logits are β X M Xᵀ with M = Z_Qᵀ Z_K/√d, Z_Q and
# Z_K d × (n + 1) standard normal: covariance β² G_ij G_kl at every d, and M an (n + 1) × (n + 1) standard
# normal matrix as d → ∞ (docs/model.md §17.2).


def equiangular_rows(gamma: float, n: int) -> np.ndarray:
    """X, n × (n + 1): X_i = √γ e₀ + √(1 − γ) e_{i+1}, so X Xᵀ = γ 11ᵀ + (1 − γ) I."""
    x = np.zeros((n, n + 1))
    x[:, 0] = np.sqrt(gamma)
    x[np.arange(n), np.arange(1, n + 1)] = np.sqrt(1.0 - gamma)
    return x


def logit_matrices(n: int, samples: int, *, d: int | None = None, seed: int = 0) -> np.ndarray:
    """(samples, n + 1, n + 1) draws of M = Z_Qᵀ Z_K/√d (d given) or of its d → ∞ limit, a standard normal matrix."""
    rng = np.random.default_rng(seed)
    if d is None:
        return rng.standard_normal((samples, n + 1, n + 1))
    zq, zk = rng.standard_normal((2, samples, d, n + 1))
    return np.einsum("sda,sdb->sab", zq, zk) / np.sqrt(d)


def equiangular_drift_samples(gamma: float, beta: float, n: int, matrices) -> np.ndarray:
    """b(γ) of each draw: γ + (1 − γ) ḡ − γ(γ + (1 − γ) f̄), f̄ and ḡ the row and pair means of Σ_k π_ik² and
    Σ_k π_ik π_jk with π = softmax_row(β X M Xᵀ); ``matrices`` None is the fixed attention QᵀK = I (M = I)."""
    x = equiangular_rows(gamma, n)
    m = np.eye(n + 1)[None] if matrices is None else np.asarray(matrices)
    z = beta * np.einsum("ia,sab,kb->sik", x, m, x)
    p = np.exp(z - z.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    h = np.einsum("sik,sjk->sij", p, p)
    f = np.einsum("sii->s", h) / n
    g = (h.sum(axis=(1, 2)) - n * f) / (n * (n - 1))
    return gamma + (1 - gamma) * g - gamma * (gamma + (1 - gamma) * f)


def random_attention_drift(gammas, beta: float, n: int, samples: int, *, d: int | None = None, seed: int = 0):
    """(b, s.e.) at each γ of ``gammas``: the Monte Carlo mean of ``equiangular_drift_samples`` over ``samples``
    draws of M (the same draws at every γ, so that b is smooth in γ) and its standard error."""
    m = logit_matrices(n, samples, d=d, seed=seed)
    draws = np.stack([equiangular_drift_samples(float(g), beta, n, m) for g in np.atleast_1d(gammas)])
    return draws.mean(axis=1), draws.std(axis=1, ddof=1) / np.sqrt(samples)


def small_beta_weights(gamma, beta: float, n: int):
    """(f, g) to O(β⁴) under random attention: 1/n + β²(n − 1)(1 − γ)/n² and 1/n + β²γ(n − 1)(1 − γ)/n² (the
    logits' covariance β² G_ij G_kl, exact at every d; the odd orders vanish, ℓ and −ℓ being equally likely)."""
    gamma = np.asarray(gamma, dtype=float)
    c = beta**2 * (n - 1) * (1 - gamma) / n**2
    return 1.0 / n + c, 1.0 / n + gamma * c


DRIFT_GRID = np.linspace(0.0, 0.995, 60)
"""The γ at which ``random_homogenized_flow`` evaluates b by Monte Carlo (linear interpolation between)."""


def random_homogenized_flow(
    gamma0: float,
    beta: float,
    n: int,
    ts,
    sigma: float = 1.0,
    *,
    samples: int = 20_000,
    d: int | None = None,
    seed: int = 0,
    batches: int = 10,
    steps_per_unit: int = 100,
):
    """(γ(t), s.e.) at the times ``ts``: γ̇ = σ² b(γ) with b by Monte Carlo over the random attention on
    ``DRIFT_GRID`` (RK4); the standard error from ``batches`` independent batches of the draws, each solved alone."""
    ts = np.asarray(ts, dtype=float)
    m = logit_matrices(n, samples, d=d, seed=seed)
    draws = np.stack([equiangular_drift_samples(float(g), beta, n, m) for g in DRIFT_GRID])  # (grid, samples)

    def solve(b):
        def rhs(y):
            return sigma**2 * np.interp(y, DRIFT_GRID, b)

        out, y, now = [], float(gamma0), 0.0
        for t in ts:
            count = max(int(np.ceil((t - now) * steps_per_unit - 1e-9)), 1)
            h = (t - now) / count
            for _ in range(count):
                k1 = rhs(y)
                k2 = rhs(y + h / 2 * k1)
                k3 = rhs(y + h / 2 * k2)
                k4 = rhs(y + h * k3)
                y += h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            now = t
            out.append(y)
        return np.asarray(out)

    whole = solve(draws.mean(axis=1))
    parts = np.stack([solve(part.mean(axis=1)) for part in np.array_split(draws, batches, axis=1)])
    return whole, parts.std(axis=0, ddof=1) / np.sqrt(batches)
