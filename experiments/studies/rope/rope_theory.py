"""Closed forms of SA with rotary positions (``positional="rope"``, Q = K = V = I): twisted states, their
spectra by Bessel aliasing, and the contraction bound of non-obtuse data (docs/model.md, "Rotary positions").

Twisted states. n tokens on one rotation plane p, x_k = cos(kα) e_{2p} + sin(kα) e_{2p+1}, α = 2πq/n. The
logit of i attending to j = i + m is β⟨x_i, R_m x_j⟩ = β cos(mψ), ψ = α + θ_p, and token i turns at
ω_i = Σ_{m=−i}^{n−1−i} e^{β cos(mψ)} sin(mα) / Z_i. The ring is a rest point for every β exactly when the
positions are resonant, nθ_p ∈ 2πZ (θ_p = 2πs/n): the weights are then n-periodic in m, every row sums a full
period, and the sum of an even weight times an odd sine vanishes. (Off resonance ω_{i+1} − ω_i ≠ 0 unless
q ∈ {0, n/2}.) With ψ = 2πr/n, r = q + s, and I_k the modified Bessel functions, e^{β cos x} = Σ_k I_k(β) e^{ikx}
aliases onto the n-th roots of unity:

    S(ℓ) = Σ_{k ∈ Z, kr ≡ ℓ (mod n)} I_k(β),    T(ℓ) = Σ_{k ∈ Z, kr ≡ ℓ (mod n)} k I_k(β),

(zero unless gcd(r, n) divides ℓ: the non-coprime case). The tangent Jacobian is circulant in each block:

    in the plane (phases):      μ_ℓ = [S(q+ℓ) + S(q−ℓ) − T(q+ℓ) − T(q−ℓ) − 2S(q) + 2T(q)] / (2 S(0)),
    each of the d − 2 other coordinates:   ν_ℓ = (S(ℓ) − S(q)) / S(0),        ℓ = 0, …, n − 1.

μ_0 = 0 is the rotation of the plane (a symmetry); ν_{±q} = 0 are rotations of the plane towards another
coordinate, which do not commute with R but move no weight at first order (neutral, not symmetries).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ring",
    "resonant_theta",
    "aliased_bessel",
    "twisted_spectrum",
    "ring_velocity",
    "floor_weight",
    "contraction_bound",
    "spectral_abscissa",
]

BESSEL_TERMS = 200
"""|k| ≤ this many Bessel orders in the aliased sums (I_k(β) < 1e-300 I_0(β) beyond it for β ≤ 50)."""


def ring(n: int, q: int, d: int = 2, plane: int = 0) -> np.ndarray:
    """The twisted state x_k = cos(2πqk/n) e_{2p} + sin(2πqk/n) e_{2p+1} in R^d (p = ``plane``)."""
    phi = 2.0 * np.pi * q * np.arange(n) / n
    x = np.zeros((n, d))
    x[:, 2 * plane], x[:, 2 * plane + 1] = np.cos(phi), np.sin(phi)
    return x


def resonant_theta(n: int, s: int) -> float:
    """θ = 2πs/n: the frequency at which rings of n tokens are rest points."""
    return 2.0 * np.pi * s / n


def ring_velocity(beta: float, n: int, q: int, theta: float) -> np.ndarray:
    """ω_i = Σ_j A_ij sin((j − i)α) of the ring (the turning rates of its tokens), by the direct sum."""
    alpha = 2.0 * np.pi * q / n
    m = np.arange(n)[None, :] - np.arange(n)[:, None]
    logits = beta * np.cos(m * (alpha + theta))
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return np.sum(w * np.sin(m * alpha), axis=1) / np.sum(w, axis=1)


def aliased_bessel(beta: float, n: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """(S(ℓ), T(ℓ)) for ℓ = 0, …, n − 1, each scaled by e^{−β} (the scale cancels in the spectra)."""
    from scipy.special import ive  # here, not at the top: an experiment's registration never loads SciPy

    k = np.arange(-BESSEL_TERMS, BESSEL_TERMS + 1)
    weights = ive(np.abs(k), beta)
    residue = np.mod(k * r, n)
    S = np.bincount(residue, weights=weights, minlength=n)
    T = np.bincount(residue, weights=k * weights, minlength=n)
    return S, T


def twisted_spectrum(beta: float, n: int, q: int, s: int, d: int = 2) -> np.ndarray:
    """The n(d − 1) eigenvalues of the tangent Jacobian at the ring (n, q) with θ_p = 2πs/n, largest first:
    the n phase modes μ_ℓ and (d − 2) copies of the n transverse modes ν_ℓ (module docstring)."""
    S, T = aliased_bessel(beta, n, q + s)
    ell = np.arange(n)
    plus, minus = np.mod(q + ell, n), np.mod(q - ell, n)
    mu = (S[plus] + S[minus] - T[plus] - T[minus] - 2.0 * S[q % n] + 2.0 * T[q % n]) / (2.0 * S[0])
    nu = (S - S[q % n]) / S[0]
    return np.sort(np.concatenate([mu] + [nu] * (d - 2)))[::-1]


def spectral_abscissa(beta: float, n: int, q: int, s: int) -> float:
    """The largest phase eigenvalue μ_ℓ, ℓ ≠ 0 (the rotation's zero left out): < 0 for a stable ring on the circle."""
    values = twisted_spectrum(beta, n, q, s, d=2)
    return float(np.sort(values)[::-1][1]) if abs(values[0]) < 1e-13 else float(values[0])


def floor_weight(beta: float, n: int) -> float:
    """The least weight A_ij (j ≠ i) of SA with rotary positions and Q = K = I: logits lie in [−β, β], the
    diagonal's is β (R_0 = I), so A_ij ≥ e^{−β} / (e^{−β} + (n − 1) e^{β}) = 1 / (1 + (n − 1) e^{2β})."""
    return 1.0 / (1.0 + (n - 1) * np.exp(2.0 * beta))


def contraction_bound(beta: float, n: int, m0: float, t) -> np.ndarray:
    """The lower bound tanh(2a t + artanh m₀) on m(t) = min_{i≠j} ⟨x_i, x_j⟩ of data with m₀ ≥ 0, a the floor
    weight: at the minimizing pair ṁ ≥ (A_ij + A_ji)(1 − m²) (every other term is ≥ 0 when m ≥ 0)."""
    a = floor_weight(beta, n)
    return np.tanh(2.0 * a * np.asarray(t) + np.arctanh(min(m0, 1.0 - 1e-16)))
