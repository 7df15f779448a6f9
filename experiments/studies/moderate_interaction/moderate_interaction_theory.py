"""The moderate-interaction regime β = c·n: observables of its three phases and their closed forms.

With β of the order of the number of tokens the attention of a token reaches only its neighbours
(width 1/√β), and the dynamics from i.i.d. uniform tokens separates into three phases
(arXiv 2509.25040; docs/model.md §16):

1. collapse: with V = diag(1, …, 1, λ) (λ < 1) on S^{d−1}, the attention of a token concentrates on
   the token itself as β → ∞ (Laplace), so ẋ = P_x V x: the flow of ẏ = V y projected on the sphere,
   which pushes every token onto the great circle of V's top eigenspace at the rate a = 1 − λ,
   in a time of order one (SA) whatever β. Observed by the smallest eigenvalue of the empirical
   second moment M = (1/n) Σ x_i x_iᵀ, 1/d at the uniform start and 0 on the great circle.
2. clusters: on the circle the uniform state is unstable; its fastest Fourier mode k* ≈ √(2β)
   grows at the rate λ* = max_k k² I_k(β)/(β I_0(β)) → 2/e (``modes.fastest_rate``) from the
   n^{−1/2} fluctuations of i.i.d. tokens, so the clusters form at t ≈ log(n/c)/(4λ*) + O(1).
   Observed by the power of the unstable band Σ_k |ρ̂_k|² (the modes growing at least half as fast as
   the fastest, angles taken in the plane of M's two top eigenvectors), whose mean the linear theory
   gives as Σ_k e^{2λ_k t}/n; the angular kinetic energy mean θ̇_i² peaks as they form.
3. merging: the ≈ k* clusters merge one by one at times that grow with the gaps between them.
   Observed by the number of clusters: the gaps between consecutive angles wider than 2/√β.

USA (in the rescaled time of arXiv 2410.06833) runs the same phases slowed down by the mean of its
kernel e^{β(⟨x, y⟩ − 1)} over the tokens it sees: ``usa_time_unit``.
"""

from __future__ import annotations

import math

import numpy as np

from ....particles.modes import mode_growth_rates

__all__ = [
    "second_moment_spectrum",
    "plane_angles",
    "angular_speeds",
    "cluster_count",
    "unstable_band",
    "band_power",
    "band_growth",
    "cluster_gap",
    "collapse_moment",
    "collapse_time",
    "sphere_resultant",
    "COLLAPSE_LEVEL",
    "usa_time_unit",
    "first_crossing",
    "growth_window",
    "line_fit",
]

COLLAPSE_LEVEL = math.exp(-2.0)
"""The collapse time is when the smallest eigenvalue of M has fallen to e^{−2} of its uniform value 1/d."""


def second_moment_spectrum(x: np.ndarray) -> np.ndarray:
    """Eigenvalues (ascending, summing to one) of M = (1/n) Σ x_i x_iᵀ for states (..., n, d)."""
    x = np.asarray(x, dtype=np.float64)
    m = np.einsum("...ni,...nj->...ij", x, x) / x.shape[-2]
    return np.linalg.eigvalsh(m)


def _top_plane(x: np.ndarray) -> np.ndarray:
    m = x.T @ x / x.shape[0]
    _, u = np.linalg.eigh(m)
    return u[:, -2:]


def plane_angles(x: np.ndarray) -> np.ndarray:
    """Angles of the tokens (n, d) in the plane of M's two top eigenvectors (on the circle: their angles)."""
    x = np.asarray(x, dtype=np.float64)
    p = x @ _top_plane(x)
    return np.arctan2(p[:, 1], p[:, 0])


def angular_speeds(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """θ̇_i of the tokens (n, d) moving at velocities v (n, d), their angles taken in M's top plane."""
    x, v = np.asarray(x, dtype=np.float64), np.asarray(v, dtype=np.float64)
    u = _top_plane(x)
    p, w = x @ u, v @ u
    r2 = np.maximum(np.sum(p * p, axis=1), 1e-300)
    return (p[:, 0] * w[:, 1] - p[:, 1] * w[:, 0]) / r2


def unstable_band(beta: float, model: str = "sa") -> tuple[np.ndarray, np.ndarray]:
    """The Fourier modes k of the circle growing at least half as fast as the fastest, and their rates λ_k
    (``modes.mode_growth_rates``; "sa" or "usa-rescaled")."""
    modes, growth = mode_growth_rates(beta, 2, model=model)
    k, rates = np.asarray(modes), np.asarray(growth, dtype=np.float64)
    keep = rates >= 0.5 * rates.max()
    return k[keep], rates[keep]


def band_power(theta: np.ndarray, modes: np.ndarray) -> float:
    """Σ_k |ρ̂_k|² over ``modes``, ρ̂_k = (1/n) Σ_j e^{−ikθ_j}: the power of the empirical measure in those modes,
    of mean (number of modes)/n for i.i.d. uniform angles, 1 per mode for one cluster."""
    theta = np.asarray(theta, dtype=np.float64)
    f = np.exp(-1j * np.outer(np.asarray(modes, dtype=np.float64), theta)).mean(axis=1)
    return float(np.sum(np.abs(f) ** 2))


def band_growth(t, rates, n: int) -> np.ndarray:
    """The linear theory's mean band power at time t from i.i.d. uniform tokens: Σ_k e^{2λ_k t}/n."""
    t = np.asarray(t, dtype=np.float64)
    exponent = np.minimum(2.0 * np.multiply.outer(t, np.asarray(rates, dtype=np.float64)), 700.0)
    return np.exp(exponent).sum(axis=-1) / n


def cluster_gap(beta: float) -> float:
    """Two consecutive angles farther apart than 2/√β (the attention's width is 1/√β; the clusters of the
    fastest mode k* ≈ √(2β) are ≈ 4.4/√β apart) belong to different clusters."""
    return 2.0 / math.sqrt(beta)


def cluster_count(theta: np.ndarray, gap: float) -> int:
    """The number of clusters of angles on the circle: the gaps between consecutive angles wider than ``gap``
    (one cluster if none is)."""
    t = np.sort(np.asarray(theta, dtype=np.float64) % (2 * math.pi))
    gaps = np.diff(np.concatenate([t, [t[0] + 2 * math.pi]]))
    return max(1, int(np.sum(gaps > gap)))


def collapse_moment(t, rate: float = 1.0, d: int = 3):
    """E z² at time t for the Laplace limit ẋ = P_x V x, V = diag(1, …, 1, 1 − rate), from uniform tokens.

    z = x_d obeys ż = −a z (1 − z²), so z²/(1 − z²) = e^{−2at} z₀²/(1 − z₀²). For d = 3 (S²) z₀ is
    uniform on [−1, 1] (Archimedes) and, with q = e^{−2at}, b = 1 − q,

        E z²(t) = ∫₀¹ q u² / (1 − b u²) du = (q/b)(artanh(√b)/√b − 1),

    which is 1/3 at t = 0 and ≈ q(log(4/q)/2 − 1) once q ≪ 1.
    """
    if d != 3:
        raise ValueError(f"collapse_moment is the closed form on S² (d = 3), got d = {d}")
    t = np.asarray(t, dtype=np.float64)
    q = np.exp(-2.0 * rate * t)
    b = 1.0 - q
    small = b < 1e-6
    sb = np.sqrt(np.where(small, 0.5, b))
    exact = (q / np.where(small, 0.5, b)) * (np.arctanh(np.minimum(sb, 1 - 1e-16)) / sb - 1.0)
    series = (1.0 / 3.0 + b / 5.0) * q  # 1/3 + b/5 + O(b²), times q
    return np.where(small, series, exact)


def sphere_resultant(beta: float) -> float:
    """coth β − 1/β: the mean of ⟨x, y⟩ for y drawn from e^{β⟨x, y⟩} on S², so that SA at the uniform density on S²
    moves by exactly this times P_x V x (the Laplace limit's rate a becomes a(coth β − 1/β) = a(1 − 1/β + …))."""
    if beta < 1e-4:
        return beta / 3.0
    return 1.0 / math.tanh(beta) - 1.0 / beta


def collapse_time(rate: float = 1.0, level: float = COLLAPSE_LEVEL) -> float:
    """The time at which ``collapse_moment`` falls to ``level`` × 1/3 (S², Laplace limit)."""
    from scipy.optimize import brentq  # here: scipy costs a third of a second to import

    return float(brentq(lambda t: float(collapse_moment(t, rate)) - level / 3.0, 0.0, 200.0 / rate))


def usa_time_unit(beta: float, d: int) -> float:
    """1 / the mean of USA's kernel e^{β(⟨x, y⟩ − 1)} over uniform tokens on S^{d−1} (d = 2, 3): in this unit of
    time USA at the uniform density moves as SA does. Circle: 1/(I_0(β)e^{−β}) ≈ √(2πβ); S²: 2β/(1 − e^{−2β})."""
    if d == 2:
        from scipy.special import i0e

        return 1.0 / float(i0e(beta))
    if d == 3:
        return 2.0 * beta / -math.expm1(-2.0 * beta)
    raise ValueError(f"usa_time_unit is written for d = 2 or 3, got d = {d}")


def first_crossing(ts, series, level: float, *, start: int = 0) -> float:
    """The first time at or after ``ts[start]`` at which ``series`` falls to ``level`` (log-linear interpolation
    between saves); NaN if it never does."""
    ts, s = np.asarray(ts, dtype=float), np.asarray(series, dtype=float)
    if start < len(ts) and s[start] <= level:
        return float(ts[start])
    for k in range(max(start, 1), len(ts)):
        if s[k] <= level < s[k - 1]:
            if s[k] <= 0 or s[k - 1] <= 0:
                return float(ts[k])
            w = (math.log(s[k - 1]) - math.log(level)) / (math.log(s[k - 1]) - math.log(s[k]))
            return float(ts[k - 1] + w * (ts[k] - ts[k - 1]))
    return math.nan


def growth_window(ts, energy, *, start: int = 0, top: float = 0.1, span: float = 1e-2) -> tuple[int, int, int]:
    """Where the kinetic energy grows exponentially: (first, last, peak) save indices. The peak is the largest
    energy from ``start`` on; the window runs back from where the energy first reaches ``top`` × the peak to where
    it is ``span`` × that (or to its minimum before the peak)."""
    e = np.asarray(energy, dtype=float)
    peak = start + int(np.argmax(e[start:]))
    below = np.nonzero(e[start : peak + 1] >= top * e[peak])[0]
    last = start + int(below[0]) if below.size else peak
    lowest = start + int(np.argmin(e[start : last + 1]))
    first = last
    while first > lowest and e[first - 1] >= span * e[last]:
        first -= 1
    return first, last, peak


def line_fit(x, y) -> tuple[float, float, float]:
    """Least-squares y ≈ a + b x: (b, its standard error, a); the error is NaN with fewer than three points."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.size < 2:
        return math.nan, math.nan, math.nan
    A = np.column_stack([np.ones_like(x), x])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    if x.size < 3:
        return float(coef[1]), math.nan, float(coef[0])
    resid = y - A @ coef
    s2 = float(resid @ resid) / (x.size - 2)
    cov = s2 * np.linalg.inv(A.T @ A)
    return float(coef[1]), float(math.sqrt(max(cov[1, 1], 0.0))), float(coef[0])
