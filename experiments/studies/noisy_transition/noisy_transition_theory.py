"""Noisy transformers: the phase transition of the uniform state in any dimension (Mun and Rosenzweig,
arXiv 2606.05140, and arXiv 2604.16288 for d = 2; the noisy Kuramoto case β → 0 is arXiv 2512.01868 §7).

The model. USA with Q = K = V = I on S^{d−1} ([GLPR] time, ``USA(β)``) with independent Brownian motion
on every token (``Noisy(USA(β), σ)``, config key ``noise``):

    dX_i = P_{X_i}( (1/n) Σ_j e^{β⟨X_i,X_j⟩} X_j ) dt + σ P_{X_i} ∘ dW_i.

The drift is the gradient of E = (1/2βn) Σ_ij e^{β⟨x_i,x_j⟩}, so the particles' law is the Gibbs measure
∝ exp(2E/σ²) and, as n → ∞, the density solves ∂_t ρ = (σ²/2) Δρ − div(ρ ∇Φ[ρ]/β), Φ[ρ] = ∫ e^{β⟨·,y⟩} ρ(dy):
the Wasserstein gradient flow of the McKean–Vlasov free energy (σ²/2) ∫ ρ log ρ − (1/2β) ∬ e^{β⟨x,y⟩} ρρ.

Linear stability of the uniform density. A spherical harmonic of degree ℓ is an eigenfunction of both
−Δ (eigenvalue ℓ(ℓ+d−2)) and of the attention kernel (Funk–Hecke: Φ[Y_ℓ] = μ_ℓ Y_ℓ with, against the
normalized surface measure, μ_ℓ = Γ(d/2)(2/β)^{d/2−1} I_{ℓ+d/2−1}(β)), so it grows at

    λ_ℓ(σ) = ℓ(ℓ+d−2) ( μ_ℓ/β − σ²/2 ) = ``mode_growth_rates(β, d, model="usa")`` − (σ²/2) ℓ(ℓ+d−2).

μ_ℓ decreases in ℓ, so degree 1 loses stability first, at σ_#² = 2μ_1/β = 2 λ_1(0)/(d − 1):

    σ_#(β, d)² = 2^{d/2} Γ(d/2) I_{d/2}(β) / β^{d/2}.

The paper's linear-stability threshold K_#^{(d)}(β) = β^{d/2} / (2^{d/2} Γ(d/2) I_{d/2}(β)) is exactly
1/σ_#²: the paper's K is the coupling strength, an inverse temperature (large K: little noise), and the
map to attnflow's noise is

    σ² = 1/K,     κ = 2/σ² = 2K     (κ: ``Noisy.kappa``, the inverse temperature of arXiv 2512.01868 §7).

Two checks of the map: the paper's formula is our λ_1(σ) = 0 identically in β (``critical_noise``, tests),
and as β → 0 K_# → d/2, i.e. κ → d: the noisy Kuramoto threshold κ = 2 on the circle (arXiv 2512.01868 §7,
``particles/noise.py``). The formula is the USA model's, in the [GLPR] clock: with ``USA(β, time="rescaled")``
(velocities × e^{−β}) σ_#² is e^{−β}/K_#, and SA's threshold, 2 I_{d/2}(β)/(β I_{d/2−1}(β)), is another
(``critical_noise(β, d, model)`` computes all three from ``mode_growth_rates``). The time convention does
not matter to K itself: stationary states, hence K_c and K_#, are those of the free energy, whatever clock.

The order of the transition. For β ≤ β*^{(d)}, the unique root of I_{d/2+1}(β)/I_{d/2}(β) = 1/d
(``critical_beta``: 2.4469 for d = 2, 1.8162 for d = 3, 1.5753 for d = 4, 1.2666 for d = 8), the uniform
density is the global minimizer up to K_#: the transition is continuous (a supercritical pitchfork, the
order parameter ‖∫ x ρ‖ grows from 0 past K_#). For β > β*, K_c < K_#: the transition is discontinuous,
an ordered state coexists with the (still linearly stable) uniform one below K_#, and sweeping the noise
shows hysteresis: down from high noise the uniform state holds until σ_#, up from an ordered state the
order holds past σ_#.

The uniform phase at finite n. The degree-1 part of 2E/σ² is (d μ_1/(βσ²)) n ‖m‖² with m = (1/n) Σ x_i,
and m is Gaussian with covariance I/(nd) for independent uniform tokens, so for σ > σ_#

    n E‖m‖² = 1 / (1 − σ_#²/σ²) = 1 / (1 − K/K_#)       (``uniform_susceptibility``),

which diverges at the threshold: a measurement of K_# from the disordered side alone.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ....particles.checks import check_choice, check_int
from ....particles.fields import KERNEL_MODELS
from ....particles.modes import mode_growth_rates

__all__ = [
    "critical_beta",
    "bessel_ratio",
    "threshold_coupling",
    "critical_noise",
    "coupling_to_noise",
    "noise_to_coupling",
    "degree_one_rate",
    "uniform_susceptibility",
    "pitchfork_closed_form",
]


def _betas(beta) -> np.ndarray:
    arr = np.asarray(beta, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"beta must be finite and > 0, got {np.asarray(beta).tolist()}")
    return arr


def _rates(beta: np.ndarray, d: int, model: str, kmax: int) -> np.ndarray:
    """The noiseless growth rates λ_ℓ(β), ℓ = 1 … kmax, shape beta.shape + (kmax,), float64."""
    _, rates = mode_growth_rates(beta, d, model=model, kmax=kmax)
    return np.asarray(rates, dtype=np.float64)


def bessel_ratio(beta, d: int) -> np.ndarray:
    """I_{d/2+1}(β) / I_{d/2}(β), from the SA growth rates of degrees 1 and 2 (no overflow at any β):
    λ_1 = (d−1)/β · I_{d/2}/I_{d/2−1} and λ_2 = 2d/β · I_{d/2+1}/I_{d/2−1}."""
    beta = _betas(beta)
    d = check_int("d", d, 2)
    rates = _rates(beta, d, "sa", 2)
    return (rates[..., 1] / (2.0 * d)) / (rates[..., 0] / (d - 1.0))


@functools.lru_cache(maxsize=64)
def _critical_beta(d: int) -> float:
    target = 1.0 / d
    # the ratio increases from 0 (β → 0, ≈ β/(d + 2)) to 1 (β → ∞): bracket the root, then bisect
    lo, hi = 1e-3, 1.0
    while bessel_ratio(hi, d) < target:
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if bessel_ratio(mid, d) < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def critical_beta(d: int) -> float:
    """β*^{(d)}: the root of I_{d/2+1}(β)/I_{d/2}(β) = 1/d (float64 bisection to the last bit). For β ≤ β*
    the noisy USA transition is continuous at K_#, for β > β* discontinuous (module docstring)."""
    return _critical_beta(check_int("d", d, 2))


def threshold_coupling(beta, d: int) -> np.ndarray:
    """The paper's K_#^{(d)}(β) = β^{d/2} / (2^{d/2} Γ(d/2) I_{d/2}(β)) = (d − 1) / (2 λ_1(β)), λ_1 the USA
    degree-1 growth rate without noise; float64, no overflow for β up to ≈ 700 (I_{d/2}(β) ~ e^β)."""
    beta = _betas(beta)
    d = check_int("d", d, 2)
    return (d - 1.0) / (2.0 * _rates(beta, d, "usa", 1)[..., 0])


def critical_noise(beta, d: int, model: str = "usa") -> np.ndarray:
    """σ_#(β, d): the noise at which the degree-1 growth rate of the uniform density vanishes,
    σ_#² = 2 λ_1(β)/(d − 1). For model "usa" σ_# = 1/√K_#; "usa-rescaled" is √(e^{−β}/K_#); "sa" has its own."""
    beta = _betas(beta)
    d = check_int("d", d, 2)
    model = check_choice("model", model, KERNEL_MODELS)
    return np.sqrt(2.0 * _rates(beta, d, model, 1)[..., 0] / (d - 1.0))


def coupling_to_noise(K) -> np.ndarray:
    """attnflow's σ of the paper's coupling K (USA, [GLPR] time): σ = 1/√K."""
    K = np.asarray(K, dtype=float)
    if np.any(~(K > 0)):
        raise ValueError(f"the coupling K must be > 0, got {K.tolist()}")
    return 1.0 / np.sqrt(K)


def noise_to_coupling(sigma) -> np.ndarray:
    """The paper's coupling K of attnflow's noise σ > 0: K = 1/σ² (= κ/2)."""
    sigma = np.asarray(sigma, dtype=float)
    if np.any(~(sigma > 0)):
        raise ValueError(f"the noise sigma must be > 0, got {sigma.tolist()}")
    return 1.0 / sigma**2


def degree_one_rate(beta, d: int, sigma, model: str = "usa") -> np.ndarray:
    """λ_1(σ) = λ_1(0) − (σ²/2)(d − 1): the growth rate of a degree-1 perturbation of the uniform density
    under noise σ (β and σ broadcast); zero at σ = ``critical_noise(β, d, model)``."""
    beta = _betas(beta)
    d = check_int("d", d, 2)
    model = check_choice("model", model, KERNEL_MODELS)
    sigma = np.asarray(sigma, dtype=float)
    return _rates(beta, d, model, 1)[..., 0] - 0.5 * sigma**2 * (d - 1.0)


def uniform_susceptibility(sigma, beta, d: int, model: str = "usa") -> np.ndarray:
    """n E‖(1/n) Σ x_i‖² in the uniform phase, 1/(1 − σ_#²/σ²) = 1/(1 − K/K_#) for σ > σ_# (inf at and
    below σ_#, where the uniform state is unstable). The linear response of the Gibbs measure (module docstring)."""
    s2 = critical_noise(beta, d, model) ** 2
    sigma = np.asarray(sigma, dtype=float)
    with np.errstate(divide="ignore"):
        gap = 1.0 - s2 / sigma**2
        return np.where(gap > 0, 1.0 / np.where(gap > 0, gap, 1.0), math.inf)


def pitchfork_closed_form(beta, d: int) -> np.ndarray:
    """dK/dm_1² at the degree-1 branch point of the zonal stationary densities (USA), from the Gegenbauer expansion
    of the Gibbs fixed point to third order (docs/model.md §13.6): K_# d (1 − dρ) / ((d + 2)(1 − ρ)),
    ρ = I_{d/2+1}(β)/I_{d/2}(β) (``bessel_ratio``); the circle's K_#(1 − 2ρ)/(2(1 − ρ)) at d = 2 (c_1 = m_1). Its
    sign changes at ρ = 1/d, β = ``critical_beta(d)``."""
    rho = bessel_ratio(beta, d)
    return threshold_coupling(beta, d) * d * (1.0 - d * rho) / ((d + 2.0) * (1.0 - rho))
