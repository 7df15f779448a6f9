"""Lost in the middle: the soft-accuracy profile of position-decayed causal attention (arXiv 2605.09213).

N tokens on the circle, i.i.d. uniform at t = 0, move by the position-normalized causal dynamics

    θ̇_i = −β Σ_{j<i} w_ij sin(θ_i − θ_j) e^{β cos(θ_i − θ_j)},   w_ij = e^{−(λ/N)(i−j)} / Σ_{k<i} e^{−(λ/N)(i−k)}

(``fields.USA(β, V=βI, mask="causal", positional="decay", alibi_slope=λ/N)`` in d = 2). The density stays
uniform; what the last token retains of the token at relative position s = j/N is a correlation of
order 1/N. With M classes read off the circle (a wrapped Gaussian of width π/M), the soft accuracy

    S_t(s) = lim_N  N · E[ Σ_{n≥1} ω_n cos n(θ_N(t) − θ_{sN}(0)) ],    ω_n = e^{−π² n² / (2M²)},

is, truncated at n ≤ 20 as in the paper,

    S_t(s) = Σ_n ω_n [λ e^{λs} / (e^λ − 1)] ψ_{a_n t}(Y_λ(s)),      a_n = n² I_n(β),
    Y_λ(s) = log((e^λ − 1) / (e^{λs} − 1)),   ψ_c(y) = Σ_k c^{k+1} y^k / (k!(k+1)!) = √(c/y) I_1(2√(cy)).

Where it comes from (our reading; the paper states the profile, this derivation gives it): the mode-n
correlation of the last token with source j propagates along chains N > m_1 > … > m_k > j, each link
multiplying by a_n (the Fourier coefficient of −β sin Δ e^{β cos Δ} against e^{inΔ}, the circle's
linear rate k² I_k(β)/β of ``modes.py`` times β) and by the weight w; in the continuum the weights'
chain integral is the simplex volume Y^k/k!, and k + 1 time orderings give t^{k+1}/(k+1)!. At finite
N the same sum is a row of the matrix exponential e^{a_n t W} − I (``discrete_profile``): the linear
response of the particles, which the continuum profile approaches as N grows.

The profile is U-shaped: primacy (Y → ∞ as s → 0), recency (the weight λe^{λs}/(e^λ − 1)). Its slope
at s = 1 changes sign at t_crit = 2(1 − e^{−λ}) Σ ω_n a_n / Σ ω_n a_n² (2.457489 at β = 1, λ = 1, M = 8):
before, the minimum is inside; after, at the end.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Float

from ....particles.checks import check_int
from ....particles.modes import mode_growth_rates

__all__ = [
    "N_MODES",
    "mode_rates",
    "mode_weights",
    "position_weight",
    "chain_length",
    "psi",
    "profile",
    "critical_time",
    "decay_weights",
    "discrete_profile",
    "soft_accuracy",
    "cluster_start",
]

N_MODES = 20
"""Fourier modes n ≤ 20 of the paper's truncated profile S_t^{[20]}."""


def mode_rates(beta: float, n_modes: int = N_MODES) -> np.ndarray:
    """a_n = n² I_n(β) for n = 1 … n_modes (β > 0): β times the circle's USA rates of ``modes.py``."""
    _, rates = mode_growth_rates(float(beta), 2, model="usa", kmax=check_int("n_modes", n_modes, 1))
    return float(beta) * np.asarray(rates, dtype=float)


def mode_weights(classes: float, n_modes: int = N_MODES) -> np.ndarray:
    """ω_n = exp(−π² n² / (2M²)) for M = ``classes``: the Fourier weights of a wrapped Gaussian of width π/M."""
    if not classes > 0:
        raise ValueError(f"classes M must be > 0, got {classes!r}")
    n = np.arange(1, check_int("n_modes", n_modes, 1) + 1)
    return np.exp(-0.5 * (math.pi * n / classes) ** 2)


def position_weight(s, lam: float) -> np.ndarray:
    """λ e^{λs} / (e^λ − 1): the weight with which the last token sees relative position s (1 at λ = 0)."""
    s = np.asarray(s, dtype=float)
    if lam == 0.0:
        return np.ones_like(s)
    return lam * np.exp(lam * s) / math.expm1(lam)


def chain_length(s, lam: float) -> np.ndarray:
    """Y_λ(s) = log((e^λ − 1)/(e^{λs} − 1)) (log 1/s at λ = 0): the length of the chains from s to the end."""
    s = np.asarray(s, dtype=float)
    if np.any((s <= 0) | (s > 1)):
        raise ValueError("relative positions s must lie in (0, 1]")
    if lam == 0.0:
        return -np.log(s)
    return np.maximum(np.log(math.expm1(lam) / np.expm1(lam * s)), 0.0)  # exactly 0 at s = 1, not −1e-17


def psi(c, y) -> np.ndarray:
    """ψ_c(y) = Σ_k c^{k+1} y^k / (k!(k+1)!) = √(c/y) I_1(2√(cy)) (c at y = 0), for c, y ≥ 0."""
    c, y = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(y, dtype=float))
    z = 2.0 * np.sqrt(c * y)
    safe = np.where(z > 0, z, 1.0)
    x64 = jnp.result_type(float) == jnp.float64  # JAX's float64 is on (attnflow turns it on)
    bessel = np.asarray(jax.scipy.special.i1e(jnp.asarray(safe, dtype=jnp.float64) if x64 else safe), dtype=float)
    closed = np.sqrt(np.where(y > 0, c / np.where(y > 0, y, 1.0), 0.0)) * bessel * np.exp(safe)
    # small arguments: the series to second order (relative error ≤ (cy)²/144)
    series = c * (1.0 + c * y / 2.0 + (c * y) ** 2 / 12.0)
    return np.where(z > 1e-3, closed, series)


def profile(s, t: float, beta: float, lam: float = 1.0, classes: float = 8.0, n_modes: int = N_MODES) -> np.ndarray:
    """S_t(s) = Σ_{n ≤ n_modes} ω_n [λe^{λs}/(e^λ − 1)] ψ_{a_n t}(Y_λ(s)) at relative positions s ∈ (0, 1]."""
    s = np.asarray(s, dtype=float)
    a, w = mode_rates(beta, n_modes), mode_weights(classes, n_modes)
    y = chain_length(s, lam)[..., None]
    return position_weight(s, lam) * np.sum(w * psi(a * t, y), axis=-1)


def critical_time(beta: float, lam: float = 1.0, classes: float = 8.0, n_modes: int = N_MODES) -> float:
    """t_crit = 2(1 − e^{−λ}) Σ ω_n a_n / Σ ω_n a_n², where ∂_s S_t(1) changes sign (the minimum reaches s = 1).

    With P = λe^λ/(e^λ − 1) the weight at s = 1, ψ_c(0) = c, ∂_y ψ_c(0) = c²/2 and ∂_s Y_λ(1) = −P:
    ∂_s S_t(1) = P t (λ Σ ω_n a_n − P t Σ ω_n a_n² / 2), positive before t_crit (the end rises: the
    minimum is inside) and negative after (the minimum is at the end).
    """
    a, w = mode_rates(beta, n_modes), mode_weights(classes, n_modes)
    return float(2.0 * (-math.expm1(-lam)) * np.sum(w * a) / np.sum(w * a * a))


def decay_weights(n: int, lam: float) -> np.ndarray:
    """The n × n position weights w_ij of the dynamics (rows sum to one; row 0, the first token, is zero)."""
    n = check_int("n", n, 2)
    i = np.arange(n)
    gap = i[:, None] - i[None, :]
    w = np.where(gap > 0, np.exp(-(lam / n) * np.maximum(gap, 0)), 0.0)
    total = w.sum(axis=1, keepdims=True)
    return np.divide(w, total, out=np.zeros_like(w), where=total > 0)


def discrete_profile(
    n: int, t: float, beta: float, lam: float = 1.0, classes: float = 8.0, n_modes: int = N_MODES
) -> np.ndarray:
    """The linear response at finite n: N Σ_n ω_n [e^{a_n t W} − I]_{N, j} for the sources j = 1 … N − 1.

    The chain sum of the module docstring with the exact weights W of n tokens (W is strictly lower
    triangular, so the exponential is a finite sum); it tends to ``profile`` at s = j/N as n grows.
    """
    W = decay_weights(n, lam)
    a, w = mode_rates(beta, n_modes), mode_weights(classes, n_modes)
    total = np.zeros(n)
    for a_n, w_n in zip(a, w):  # ≤ 20 modes; each a matrix exponential of n × n
        total += w_n * np.asarray(jax.scipy.linalg.expm(jnp.asarray(a_n * t * W)))[-1]
    return n * total[:-1]


def soft_accuracy(
    theta_t: Float[ArrayLike, "... r n"],
    theta_0: Float[ArrayLike, "... r n"],
    classes: float = 8.0,
    n_modes: int = N_MODES,
) -> tuple[np.ndarray, np.ndarray]:
    """The particle estimate of the profile and its standard error, for the sources j = 1 … N − 1.

    ``theta_t``, ``theta_0``: angles at time t and at 0 of r independent runs (axis −2) of N tokens. Each
    run gives N Σ_n ω_n [cos n(θ_N(t) − θ_j(0)) − cos n(θ_N(0) − θ_j(0))]; the second term has mean zero
    for i.i.d. uniform starts (j ≠ N) and takes out most of the variance of the first (a control variate).
    Returns the mean over runs and its standard error (sample standard deviation / √r).
    """
    theta_t, theta_0 = np.asarray(theta_t, dtype=float), np.asarray(theta_0, dtype=float)
    n = theta_t.shape[-1]
    w = mode_weights(classes, n_modes)
    k = np.arange(1, n_modes + 1)
    now = theta_t[..., -1:, None] - theta_0[..., :-1, None]
    then = theta_0[..., -1:, None] - theta_0[..., :-1, None]
    sample = n * np.sum(w * (np.cos(k * now) - np.cos(k * then)), axis=-1)
    r = sample.shape[-2]
    return sample.mean(axis=-2), sample.std(axis=-2, ddof=1) / math.sqrt(r)


def cluster_start(n: int, seed: int, clusters: int = 4, spread: float = 0.075) -> tuple[np.ndarray, np.ndarray]:
    """The paper's reference start: ``clusters`` groups of consecutive tokens around the angles
    linspace(0.1, 1.9, clusters)·π, each angle perturbed by a normal of standard deviation ``spread``.
    Returns the angles in [0, 2π) (n,) and each token's group (n,)."""
    n = check_int("n", n, 1)
    labels = np.repeat(np.arange(clusters), -(-n // clusters))[:n]
    centres = np.linspace(0.1, 1.9, clusters) * math.pi
    theta = centres[labels] + np.random.default_rng(seed).normal(0.0, spread, size=n)
    return np.mod(theta, 2.0 * math.pi), labels
