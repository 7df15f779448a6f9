"""Linear stability of the uniform density: which Fourier mode (spherical harmonic) grows fastest.

Linearizing the mean-field equation (docs/model.md §1.4) at the uniform density on S^{d−1}, a
perturbation by a spherical harmonic of degree ℓ (on the circle, cos kθ with k = ℓ) grows at the rate

    SA:   ℓ(ℓ+d−2)/β · I_{ℓ+ν}(β) / I_ν(β),                        ν = d/2 − 1
    USA:  ℓ(ℓ+d−2)/β · Γ(d/2) (2/β)^ν I_{ℓ+ν}(β)                   ([GLPR] time; × e^{−β} rescaled)

(I: modified Bessel functions; on the circle k² I_k(β)/(β I_0(β)) and k² I_k(β)/β, docs/model.md §3).
Γ(d/2)(2/β)^ν I_{ℓ+ν}(β) is the Funk–Hecke eigenvalue of the kernel e^{β⟨x,y⟩} divided by the
area of the sphere, and ℓ(ℓ+d−2) the eigenvalue of −Δ. The fastest degree ℓ*(β) = argmax_ℓ
ℓ(ℓ+d−2) I_{ℓ+ν}(β) is the same for SA and USA; since I_{ℓ+ν}(β) ≈ e^{β − ℓ²/(2β)}/√(2πβ) for
1 ≪ ℓ ≪ β, ℓ* ≈ √(2β) for large β. On the circle ℓ* = k*(β) predicts the number of clusters of
the first metastable state (arXiv 2410.23228).

Everything is computed from the ratios r_μ = I_μ(β)/I_{μ−1}(β) by the downward recurrence
r_μ = 1/(2μ/β + r_{μ+1}) (stable: errors shrink by r_μ² < 1 per step) and from the scaled
I_0(β)e^{−β} (``jax.scipy.special.i0e``) or I_{1/2}(β)e^{−β} = (1 − e^{−2β})/√(2πβ), so nothing
overflows for any β (1e4 and beyond). β must be concrete (the number of recurrence steps
depends on it).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .checks import check_choice, check_int
from .errors import InputError
from .fields import KERNEL_MODELS

__all__ = ["mode_growth_rates", "fastest_mode", "fastest_rate", "BETA_MAX"]

BETA_MAX = 1e8
"""The largest β of the growth rates: the recurrence takes about √(40β) + 2√(2β) steps (10⁵ at 10⁸, a second),
and past it would run for ever (10¹⁵⁴ steps at β = 10³⁰⁸) or overflow."""


def _betas(beta) -> np.ndarray:
    if isinstance(beta, jax.core.Tracer):
        raise ValueError("beta must be concrete here (the number of recurrence steps depends on it), not traced")
    arr = np.asarray(beta, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"beta must be finite and > 0, got {np.asarray(beta).tolist()}")
    if np.any(arr > BETA_MAX):
        raise InputError(
            f"beta must be ≤ {BETA_MAX:g} for the growth rates of the uniform density (their Bessel recurrence "
            f"takes √(40β) steps), got {float(arr.max())!r}"
        )
    return arr


def _default_kmax(beta_max: float) -> int:
    # ℓ* ≤ √(2β) + 1; past 2√(2β) the rates are smaller than the peak by e^{−3} and more
    return int(math.ceil(2.0 * math.sqrt(2.0 * beta_max))) + 8


def _log_ratios(beta: np.ndarray, nu0: float, kmax: int) -> np.ndarray:
    """log r_μ = log I_μ(β)/I_{μ−1}(β) for μ = ν0 + 1 … ν0 + kmax, by the downward recurrence (float64)."""
    top = nu0 + kmax
    # the error of the start value is damped by Π r_μ² ≈ e^{−(N² − top²)/β} below the top N
    steps = kmax + int(math.ceil(math.sqrt(top * top + 40.0 * float(beta.max())) - top)) + 10
    start = nu0 + steps + 1
    # Amos' bound for I_μ/I_{μ−1}, accurate to O(1/μ²), as the start value
    r = beta / (start - 0.5 + np.sqrt((start + 0.5) ** 2 + beta * beta))
    out = np.empty(beta.shape + (kmax,))
    # a NumPy loop over ≤ a few thousand μ, vectorized over β: microseconds per step, nothing to compile
    for mu in range(steps, 0, -1):
        r = 1.0 / (2.0 * (nu0 + mu) / beta + r)
        if mu <= kmax:
            out[..., mu - 1] = r
    return np.log(out)


def _log_scaled_base(beta: np.ndarray, nu0: float) -> Float[Array, ...]:
    """log(I_{ν0}(β) e^{−β}) for ν0 = d/2 − 1, from I_0 or I_{1/2} and the ratios above them."""
    dtype = jnp.result_type(float)
    b = jnp.asarray(beta, dtype=dtype)
    if nu0 == int(nu0):
        base, start = jnp.log(jax.scipy.special.i0e(b)), 0.0
    else:
        base, start = jnp.log1p(-jnp.exp(-2.0 * b)) - 0.5 * jnp.log(2.0 * math.pi * b), 0.5
    steps = int(round(nu0 - start))
    if steps:
        base = base + np.sum(_log_ratios(beta, start, steps), axis=-1)
    return base


def mode_growth_rates(
    beta, d: int = 2, *, model: str = "sa", kmax: int | None = None
) -> tuple[Int[Array, " kmax"], Float[Array, "... kmax"]]:
    """Growth rates of the degrees ℓ = 1 … kmax at the uniform density (see the module docstring).

    Returns (ℓ, rates) with rates of shape beta.shape + (kmax,). ``model``: "sa", "usa" ([GLPR]
    time; rates of order e^β, which overflow to inf past β ≈ 700 in float64) or "usa-rescaled"
    (arXiv 2410.06833's time, × e^{−β}). On the circle (d = 2), ℓ = k is the Fourier mode cos kθ.
    kmax defaults to 2√(2β_max) + 8, past the fastest mode.
    """
    beta = _betas(beta)
    d = check_int("d", d, 2)
    model = check_choice("model", model, KERNEL_MODELS)
    kmax = _default_kmax(float(beta.max())) if kmax is None else check_int("kmax", kmax, 1)
    nu0 = d / 2.0 - 1.0
    dtype = jnp.result_type(float)
    ell = jnp.arange(1, kmax + 1)
    b = jnp.asarray(beta, dtype=dtype)[..., None]
    # log of ℓ(ℓ+d−2)/β · I_{ℓ+ν0}/I_{ν0}
    log_rate = jnp.log(ell * (ell + d - 2.0)) - jnp.log(b) + np.cumsum(_log_ratios(beta, nu0, kmax), axis=-1)
    if model != "sa":
        # Γ(d/2)(2/β)^ν0 I_{ν0}(β) e^{−β}: the mean of e^{β(⟨x,y⟩−1)} over the sphere
        log_mean = (math.lgamma(d / 2.0) + nu0 * jnp.log(2.0 / b[..., 0]) + _log_scaled_base(beta, nu0))[..., None]
        log_rate = log_rate + log_mean + (b if model == "usa" else 0.0)
    return ell, jnp.exp(log_rate)


def fastest_mode(beta, d: int = 2) -> Int[Array, ...]:
    """ℓ*(β) = argmax_ℓ ℓ(ℓ+d−2) I_{ℓ+d/2−1}(β), the fastest-growing degree at the uniform density.

    On the circle k*(β) = argmax_k k² I_k(β), the predicted number of clusters of the first
    metastable state; ≈ √(2β) for large β. Same shape as beta; stable for any β > 0 (the
    scaled Bessel ratios never overflow).
    """
    beta = _betas(beta)
    d = check_int("d", d, 2)
    kmax = _default_kmax(float(beta.max()))
    ell = np.arange(1, kmax + 1)
    score = np.log(ell * (ell + d - 2.0)) + np.cumsum(_log_ratios(beta, d / 2.0 - 1.0, kmax), axis=-1)
    return jnp.asarray(np.argmax(score, axis=-1) + 1, dtype=jnp.int32)


def fastest_rate(beta, d: int = 2, *, model: str = "sa") -> float:
    """The largest growth rate over every degree at the uniform density (``mode_growth_rates``), over every β
    given: the e-folding time 1/rate is the fastest time scale of the mean field leaving the uniform state."""
    _, rates = mode_growth_rates(beta, d, model=model)
    return float(np.max(np.asarray(rates)))
