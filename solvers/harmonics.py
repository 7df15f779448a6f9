"""Spherical harmonics on a Gauss–Legendre grid: the transforms of the mean-field solver on S².

A real function on S² of degree ≤ L is f = Σ_{ℓ ≤ L} Σ_{|m| ≤ ℓ} c_ℓm Y_ℓm with the orthonormal
Y_ℓm(θ, φ) = P̄_ℓm(cos θ) e^{imφ} (θ the colatitude); since f is real, c_{ℓ,−m} Y_{ℓ,−m} is the conjugate
of c_ℓm Y_ℓm and only m ≥ 0 is stored: c has shape (L + 1, L + 1), indexed [ℓ, m], zero for m > ℓ.

The grid: n_θ Gauss–Legendre nodes in cos θ (no poles, so 1/sin θ is finite) times n_φ equispaced
longitudes. Synthesis is a contraction over ℓ with the table P̄_ℓm(cos θ_j) and an inverse real FFT
over m; analysis is the FFT and the contraction with the quadrature weights. The quadrature is exact
for polynomials of degree ≤ 2n_θ − 1 in cos θ times trigonometric polynomials of degree < n_φ/2, so
with n_θ ≥ (3L + 3)/2 and n_φ ≥ 3L + 3 the weak divergence ∫ (ρX)·∇Y_ℓm of a flux ρX that is a
product of degree-L fields is computed without aliasing (Orszag's 3/2 rule, as on the circle).

Why our own transform rather than a library (s2fft, shtns): the solver needs degrees L ≤ ~128,
where the tables take (n_θ L²) floats (≈ 25 MB at L = 128) and a transform is one batched matrix
product that XLA fuses, differentiates and vmaps over ensemble members; compile time and memory
against L are measured in ``benchmarks/meanfield_sphere.py``. The recurrences for P̄_ℓm are the
standard stable ones (Holmes–Featherstone), in float64 NumPy, once per grid.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

__all__ = [
    "SphereGrid",
    "sphere_grid",
    "legendre",
    "legendre_derivative",
    "synthesis",
    "analysis",
    "gradient",
    "divergence",
    "evaluate",
    "degrees",
]


def legendre(L: int, x) -> np.ndarray:
    """P̄_ℓm(x) for ℓ, m ≤ L at the points x = cos θ (shape (len(x), L + 1, L + 1), zero for m > ℓ),
    normalized so that P̄_ℓm(cos θ) e^{imφ} is orthonormal on S² (with the Condon–Shortley phase)."""
    x = np.asarray(x, dtype=float).ravel()
    s = np.sqrt(np.maximum(1.0 - x * x, 0.0))
    P = np.zeros((x.size, L + 1, L + 1))
    diag = np.full(x.size, 1.0 / math.sqrt(4.0 * math.pi))
    for m in range(L + 1):
        if m > 0:
            diag = -math.sqrt((2 * m + 1) / (2 * m)) * s * diag
        P[:, m, m] = diag
        if m + 1 <= L:
            P[:, m + 1, m] = math.sqrt(2 * m + 3) * x * diag
        for ell in range(m + 2, L + 1):
            a = math.sqrt((4 * ell * ell - 1) / (ell * ell - m * m))
            b = math.sqrt(((ell - 1) ** 2 - m * m) / (4 * (ell - 1) ** 2 - 1))
            P[:, ell, m] = a * (x * P[:, ell - 1, m] - b * P[:, ell - 2, m])
    return P


def legendre_derivative(L: int, x) -> np.ndarray:
    """dP̄_ℓm(cos θ)/dθ at the points x = cos θ (|x| < 1), same shape as ``legendre``.

    sin θ dP̄_ℓm/dθ = ℓ cos θ P̄_ℓm − √((2ℓ + 1)(ℓ² − m²)/(2ℓ − 1)) P̄_{ℓ−1,m}."""
    x = np.asarray(x, dtype=float).ravel()
    P = legendre(L, x)
    ell = np.arange(L + 1)[:, None]
    m = np.arange(L + 1)[None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        coef = np.where(m <= ell - 1, np.sqrt((2 * ell + 1) * np.maximum(ell * ell - m * m, 0) / (2 * ell - 1.0)), 0.0)
    below = np.concatenate([np.zeros((x.size, 1, L + 1)), P[:, :-1, :]], axis=1)
    s = np.sqrt(1.0 - x * x)[:, None, None]
    return (ell * x[:, None, None] * P - coef * below) / s


def degrees(L: int) -> np.ndarray:
    """ℓ for every entry of a coefficient array (L + 1, L + 1) (broadcast over m)."""
    return np.broadcast_to(np.arange(L + 1)[:, None], (L + 1, L + 1))


@dataclass(frozen=True, eq=False)
class SphereGrid:
    """The Gauss–Legendre grid of degree L and its tables (see the module docstring)."""

    L: int
    theta: np.ndarray  # (n_θ,) colatitudes
    phi: np.ndarray  # (n_φ,) longitudes
    weights: np.ndarray  # (n_θ,) Gauss–Legendre weights in cos θ
    P: jnp.ndarray  # (n_θ, L + 1, L + 1) P̄_ℓm(cos θ_j)
    dP: jnp.ndarray  # (n_θ, L + 1, L + 1) dP̄_ℓm/dθ
    mP_sin: jnp.ndarray  # (n_θ, L + 1, L + 1) m P̄_ℓm / sin θ_j

    @property
    def shape(self) -> tuple[int, int]:
        return self.theta.size, self.phi.size

    @property
    def area_weights(self) -> np.ndarray:
        """(n_θ, n_φ) weights of ∫_{S²} f ≈ Σ w f on the grid (exact for degree ≤ 2n_θ − 1)."""
        return np.outer(self.weights, np.full(self.phi.size, 2.0 * math.pi / self.phi.size))

    def points(self) -> np.ndarray:
        """(n_θ, n_φ, 3) unit vectors of the grid."""
        st, ct = np.sin(self.theta)[:, None], np.cos(self.theta)[:, None]
        return np.stack(
            [st * np.cos(self.phi), st * np.sin(self.phi), np.broadcast_to(ct, (self.theta.size, self.phi.size))], -1
        )


@functools.lru_cache(maxsize=16)
def sphere_grid(L: int, dealias: bool = True) -> SphereGrid:
    """The grid for degree L: n_θ = ⌈(3L + 3)/2⌉ nodes, n_φ = 3L + 3 rounded up to even (``dealias``), or the
    smallest exact grid for degree-L analysis, n_θ = L + 1, n_φ = 2L + 2."""
    if not isinstance(L, (int, np.integer)) or L < 1:
        raise ValueError(f"the degree L must be an integer ≥ 1, got {L!r}")
    L = int(L)
    n_theta = (3 * L + 4) // 2 if dealias else L + 1
    n_phi = 3 * L + 3 if dealias else 2 * L + 2
    n_phi += n_phi % 2
    x, w = np.polynomial.legendre.leggauss(n_theta)
    x, w = x[::-1], w[::-1]  # θ increasing from the north pole
    theta = np.arccos(x)
    P = legendre(L, x)
    m = np.arange(L + 1)[None, None, :]
    return SphereGrid(
        L=L,
        theta=theta,
        phi=2.0 * math.pi * np.arange(n_phi) / n_phi,
        weights=w,
        P=jnp.asarray(P),
        dP=jnp.asarray(legendre_derivative(L, x)),
        mP_sin=jnp.asarray(m * P / np.sqrt(1.0 - x * x)[:, None, None]),
    )


def _to_longitudes(grid: SphereGrid, F):
    """Σ_m F_m e^{imφ} (+ conjugates) on the longitudes, from F (..., n_θ, L + 1)."""
    n_phi = grid.phi.size
    pad = n_phi // 2 + 1 - F.shape[-1]
    return jnp.fft.irfft(jnp.pad(F, [(0, 0)] * (F.ndim - 1) + [(0, pad)]), n=n_phi, axis=-1) * n_phi


def _from_longitudes(grid: SphereGrid, f):
    """∫ f e^{−imφ} dφ for m ≤ L, (..., n_θ, L + 1)."""
    return jnp.fft.rfft(f, axis=-1)[..., : grid.L + 1] * (2.0 * math.pi / grid.phi.size)


def synthesis(grid: SphereGrid, c):
    """f on the grid (..., n_θ, n_φ) from its coefficients c (..., L + 1, L + 1)."""
    return _to_longitudes(grid, jnp.einsum("jlm,...lm->...jm", grid.P.astype(c.dtype), c))


def analysis(grid: SphereGrid, f):
    """The coefficients c (..., L + 1, L + 1) of f on the grid (..., n_θ, n_φ) (exact for degree ≤ L)."""
    G = _from_longitudes(grid, f)
    return jnp.einsum("j,jlm,...jm->...lm", jnp.asarray(grid.weights), grid.P.astype(G.dtype), G)


def gradient(grid: SphereGrid, c):
    """(∂_θ f, (1/sin θ) ∂_φ f) on the grid, each (..., n_θ, n_φ): the surface gradient's components."""
    d_theta = _to_longitudes(grid, jnp.einsum("jlm,...lm->...jm", grid.dP.astype(c.dtype), c))
    d_phi = _to_longitudes(grid, 1j * jnp.einsum("jlm,...lm->...jm", grid.mP_sin.astype(c.dtype), c))
    return d_theta, d_phi


def divergence(grid: SphereGrid, F_theta, F_phi):
    """The coefficients of div F for a tangent field with components (F_θ, F_φ) on the grid, in weak form:
    (div F)_ℓm = −∫ F · ∇Ȳ_ℓm, so the degree 0 is exactly zero (the mass of ∂_t ρ = −div(ρX) is conserved)."""
    Gt = _from_longitudes(grid, F_theta)
    Gp = _from_longitudes(grid, F_phi)
    w = jnp.asarray(grid.weights)
    return -(
        jnp.einsum("j,jlm,...jm->...lm", w, grid.dP.astype(Gt.dtype), Gt)
        - 1j * jnp.einsum("j,jlm,...jm->...lm", w, grid.mP_sin.astype(Gp.dtype), Gp)
    )


def evaluate(c, points) -> np.ndarray:
    """f at arbitrary unit vectors ``points`` (..., 3) from its coefficients c (L + 1, L + 1) (NumPy)."""
    c = np.asarray(c)
    L = c.shape[-1] - 1
    p = np.asarray(points, dtype=float)
    flat = p.reshape(-1, 3)
    P = legendre(L, np.clip(flat[:, 2], -1.0, 1.0))
    phi = np.arctan2(flat[:, 1], flat[:, 0])
    F = np.einsum("plm,lm->pm", P, c)
    m = np.arange(L + 1)
    e = np.exp(1j * m[None, :] * phi[:, None])
    values = F[:, 0].real + 2.0 * np.sum((F[:, 1:] * e[:, 1:]).real, axis=-1)
    return values.reshape(p.shape[:-1])
