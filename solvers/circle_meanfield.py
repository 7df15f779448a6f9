"""The mean-field limit on the circle: a spectral solver for ∂_t ρ + ∂_θ(ρ X[ρ]) = (σ²/2) ∂²_θ ρ (docs/model.md §1.4, §1.6).

As n → ∞ the empirical measure (1/n) Σ_i δ_{θ_i} of SA or USA on the circle becomes a probability
density ρ(t, θ) (∫ρ dθ = 1) transported by the velocity the particles feel, with the sum over
particles replaced by an integral against ρ:

    USA:  X[ρ](θ) = −∫ e^{β cos(θ−φ)} sin(θ−φ) ρ(φ) dφ                       ([GLPR] time)
    SA:   X[ρ](θ) = −∫ e^{β cos(θ−φ)} sin(θ−φ) ρ(φ) dφ / ∫ e^{β cos(θ−φ)} ρ(φ) dφ

and "usa-rescaled" is USA times e^{−β} (arXiv 2410.06833), exactly as ``Circle(β, model)`` moves
particles, so particle runs and this solver share one clock.

Space. ρ is a trigonometric polynomial, stored as c_k = ∫ ρ e^{−ikθ} dθ for 0 ≤ k < ``modes``
(c_0 is the mass) and sampled on the grid θ_j = 2πj/N, N = 2·modes. Both integrals are convolutions
with e^{β cos θ} = Σ_k I_k(β) e^{ikθ}, so X has the coefficients (ik I_k(β)/β) c_k (numerator) and
I_k(β) c_k (denominator): exact, with the scaled Bessel functions e^{−β} I_k(β) computed once per
β as the Fourier coefficients of e^{β(cos θ − 1)} ≤ 1 (trapezoidal rule on a fine grid, exact to
rounding for a periodic entire function, never overflowing; the SA ratio cancels the scale, USA
multiplies it back). The flux ρ·X is formed on a grid of 3N/2 points (Orszag's 3/2 padding), so
the product of two polynomials of degree < N/2 is dealiased, and ∂_t c_k = −ik (ρX)^_k. The k = 0
derivative is exactly zero, so the mass is conserved to rounding (it is never updated).

Noise. Independent Brownian motion of strength σ on every token (``Noisy``: dθ_i = X dt + σ dW_i on
the circle, the generator (σ²/2)∂²_θ) adds the diffusion (σ²/2)∂²_θ ρ: the diagonal linear term
−(σ²/2)k² c_k, which the steps integrate exactly (integrating factor), so a large σ costs no step size.
σ = 0 (the default) leaves the solver exactly as without noise.

Time. An adaptive embedded Runge–Kutta method (Dormand–Prince 5(4), ``solvers/spectral_steps.py``, shared
with the sphere) on the coefficients, its
error measured on the grid against atol + rtol·max ρ. A step is also rejected, and the next
halved, when the new density dips below −positivity_tol·max ρ: an explicit step that overshoots
near zero is retried smaller instead of letting negative mass seed spurious growth. A density
that clusters concentrates exponentially fast (peak widths ~ e^{−t}); once a peak is narrower
than a few grid spacings the truncated series rings below zero at every step size, the steps
shrink to nothing and the solver stops there with a ``MeanFieldError`` naming the time reached:
positivity doubles as the resolution check. Use more modes (or an earlier t1) then.

Checks (tests/solvers/test_meanfield.py): the Fourier mode k of a small perturbation of the uniform
density grows at rate k² I_k(β)/β (USA) and k² I_k(β)/(β I_0(β)) (SA) (docs/model.md §3), minus (σ²/2)k²
with noise (tests/particles/test_noisy_transition.py); the energy
E[ρ] = (1/2β) ∬ e^{β cos(θ−φ)} ρ(θ)ρ(φ) dθdφ, the n → ∞ limit of ``energy`` of particles, never
decreases along USA (a Wasserstein gradient flow) nor along SA; particle runs converge to the
density in W1 at rate ≈ n^{−1/2}.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_int, check_real, real_array
from ..particles.errors import ConvergenceError
from ..particles.fields import KERNEL_MODELS
from ..particles.modes import fastest_rate, mode_growth_rates
from .machine import check_memory
from .spectral_steps import check_horizon, raise_failures, solve_adaptive

__all__ = [
    "MeanFieldError",
    "MeanFieldSolution",
    "meanfield_circle",
    "growth_rates",
    "scaled_bessel",
    "perturbed_uniform",
    "density_coefficients",
    "density_energy",
    "density_clusters",
    "sample_density",
    "w1_circle",
    "theta_grid",
]


class MeanFieldError(ConvergenceError):
    """``meanfield_circle`` could not reach every save time; ``solution`` holds the saves it reached
    (NaN after), ``member``/``t`` the first failing member and its last time. A ``ConvergenceError``
    (so a RuntimeError)."""

    def __init__(self, message: str, *, solution, member: int, t: float):
        super().__init__(message)
        self.solution = solution
        self.member = member
        self.t = t


def _fine_size(modes: int) -> int:
    """Points of the trapezoidal rule for the Bessel coefficients: the aliases I_{k+L} are below
    rounding for k < modes while β ≲ 10⁴ (I_k(β)/I_0(β) ≈ e^{−k²/2β})."""
    return 1 << int(math.ceil(math.log2(2 * modes + 4096)))


def scaled_bessel(beta, modes: int) -> jax.Array:
    """e^{−β} I_k(β) for k = 0 … modes−1: the Fourier coefficients of e^{β(cos θ − 1)}, jit-able in β.

    Never overflows (every sample is ≤ 1); absolute error ~1e-16 (relative to e^{−β}I_0(β)).
    """
    L = _fine_size(modes)
    theta = 2 * jnp.pi * jnp.arange(L) / L
    beta = jnp.asarray(beta, dtype=jnp.float64)
    samples = jnp.exp(beta[..., None] * (jnp.cos(theta) - 1.0))
    return jnp.fft.rfft(samples, axis=-1).real[..., :modes] / L


def growth_rates(k, beta, model: str = "sa", noise=0.0) -> np.ndarray:
    """Linear growth rates at the uniform density of the Fourier modes k (docs/model.md §3):
    k² I_k(β)/β (USA), k² I_k(β)/(β I_0(β)) (SA), k² e^{−β} I_k(β)/β ("usa-rescaled"), minus (σ²/2)k²
    with noise σ (``noise``).

    k, β and σ broadcast against each other; the circle's case of ``particles.modes.mode_growth_rates``.
    """
    _check_model(model)
    k, beta, noise = np.broadcast_arrays(
        np.asarray(k, dtype=int), np.asarray(beta, dtype=float), np.asarray(noise, dtype=float)
    )
    _, positive = mode_growth_rates(beta.ravel(), 2, model=model, kmax=max(int(k.max()), 1))
    rates = np.concatenate([np.zeros((k.size, 1)), np.asarray(positive)], axis=1)  # the mass (k = 0) does not grow
    return rates[np.arange(k.size), k.ravel()].reshape(k.shape) - 0.5 * noise**2 * k**2


def _check_model(model: str) -> None:
    if model not in KERNEL_MODELS:
        raise ValueError(f"model must be one of {', '.join(repr(m) for m in KERNEL_MODELS)}, got {model!r}")


# -- densities ------------------------------------------------------------------------------------


def theta_grid(modes: int) -> np.ndarray:
    """The grid θ_j = 2πj/N, N = 2·modes, on which densities are sampled."""
    return 2 * np.pi * np.arange(2 * modes) / (2 * modes)


def density_coefficients(rho) -> np.ndarray:
    """c_k = ∫ ρ e^{−ikθ} dθ (0 ≤ k < N/2) of densities sampled on the grid of N points (last axis)."""
    rho = np.asarray(rho, dtype=float)
    N = rho.shape[-1]
    return np.fft.rfft(rho, axis=-1)[..., : N // 2] * (2 * np.pi / N)


def solve_bytes(points: int, members: int, times: int) -> int:
    """Bytes ``meanfield_circle`` holds on a grid of ``points`` angles: the members' densities at every save time
    and the stages of the adaptive steps (grid and coefficients)."""
    return 8 * members * points * (times + 24)


def perturbed_uniform(seed: int, modes: int, eps: float, k_max: int = 16) -> np.ndarray:
    """ρ0(θ) = (1 + ε Σ_{k=1}^{k_max} cos(kθ + φ_k)) / 2π with phases φ_k uniform from ``seed``,
    on the grid of 2·modes points: every mode equally excited, so the fastest-growing one wins."""
    if not 0 <= eps * k_max < 1:
        raise ValueError(f"perturbed_uniform needs 0 ≤ eps·k_max < 1 (a positive density), got {eps}·{k_max}")
    if k_max >= modes:
        raise ValueError(f"k_max = {k_max} must be < modes = {modes}")
    check_memory(8 * 3 * 2 * modes * k_max, f"perturbed_uniform with {modes} modes", "fewer modes")
    phases = np.random.default_rng(seed).uniform(0, 2 * np.pi, k_max)
    theta = theta_grid(modes)
    k = np.arange(1, k_max + 1)
    return (1 + eps * np.cos(np.outer(theta, k) + phases).sum(axis=1)) / (2 * np.pi)


def density_energy(rho, beta, *, normalized: bool = False) -> np.ndarray:
    """E[ρ] = (1/2β) ∬ e^{β cos(θ−φ)} ρ(θ)ρ(φ) dθdφ = (1/2β) Σ_k I_k(β)|c_k|² of densities on the grid
    (last axis), the n → ∞ limit of ``energy`` of particles; ``normalized``: 2β e^{−β} E ∈ (0, 1]."""
    c = density_coefficients(rho)
    beta = np.asarray(beta, dtype=float)
    ive = np.asarray(scaled_bessel(beta, c.shape[-1]))
    ive = ive.reshape(beta.shape + (1,) * (c.ndim - 1 - beta.ndim) + (c.shape[-1],))
    weights = np.where(np.arange(c.shape[-1]) == 0, 1.0, 2.0)
    norm = np.sum(weights * ive * np.abs(c) ** 2, axis=-1)
    if normalized:
        return norm
    b = beta.reshape(beta.shape + (1,) * (norm.ndim - beta.ndim))
    with np.errstate(over="ignore"):
        return np.exp(b) * norm / (2 * b)


def density_clusters(rho, level: float | None = None) -> np.ndarray:
    """Clusters of densities on the grid (last axis): arcs of the circle where ρ > ``level``
    (default 2/(2π), twice the uniform density)."""
    rho = np.asarray(rho, dtype=float)
    above = rho > (2 / (2 * np.pi) if level is None else level)
    starts = above & ~np.roll(above, 1, axis=-1)
    return np.where(above.all(axis=-1), 1, starts.sum(axis=-1))


def _cdf_grid(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """F(θ) = ∫_0^θ ρ of the density with coefficients c (1-D), exactly on a fine grid of [0, 2π]
    (16 points per mode, at least 8192): the linear part c_0 θ/2π plus a trigonometric polynomial."""
    K = c.shape[0]
    L = max(16 * K, 8192)
    k = np.arange(1, K)
    a = np.zeros(L // 2 + 1, dtype=complex)
    a[1:K] = c[1:] / (2j * np.pi * k)
    periodic = np.fft.irfft(a, n=L) * L
    theta = 2 * np.pi * np.arange(L + 1) / L
    F = c[0].real * theta / (2 * np.pi) + np.append(periodic, periodic[0]) - periodic[0]
    return theta, F


def sample_density(seed, rho, n: int) -> np.ndarray:
    """n i.i.d. angles in [0, 2π) from the density ρ on the grid (inverse transform on a fine grid)."""
    fine, F = _cdf_grid(density_coefficients(rho))
    F = np.maximum.accumulate(F)
    F /= F[-1]
    u = np.random.default_rng(seed).uniform(size=n)
    return np.interp(u, F, fine) % (2 * np.pi)


def w1_circle(angles, rho) -> float:
    """W1 distance on the circle between the empirical measure of ``angles`` (n,) and the density ρ
    on the grid: min over c of ∫_0^{2π} |F_μ(θ) − F_ρ(θ) − c| dθ (c a weighted median).

    The integral is split at the particles and at a fine grid (16 points per mode) on which F_ρ is
    exact; F_μ is constant on each piece and F_ρ is interpolated linearly, so the midpoint rule is
    accurate to O(h²) per piece of width h.
    """
    angles = np.sort(np.mod(np.asarray(angles, dtype=float).ravel(), 2 * np.pi))
    c = density_coefficients(rho)
    fine, F = _cdf_grid(c / c[0].real)
    cuts = np.union1d(fine, angles)
    width = np.diff(cuts)
    mid = 0.5 * (cuts[1:] + cuts[:-1])
    diff = np.searchsorted(angles, mid, side="right") / angles.size - np.interp(mid, fine, F)
    order = np.argsort(diff)
    cum = np.cumsum(width[order])
    median = diff[order][np.searchsorted(cum, 0.5 * cum[-1])]
    return float(np.sum(width * np.abs(diff - median)))


# -- the solver ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeanFieldSolution:
    """What ``meanfield_circle`` returns; a leading member axis when β or ρ0 was batched.

    ts      (T,)           save times ((..., T) when given per member)
    theta   (N,)           the grid θ_j = 2πj/N
    rho     (..., T, N)    densities at the save times (NaN after a failure)
    beta    (...,)         inverse temperatures;  model: "sa", "usa" or "usa-rescaled"
    steps, rejected (...,) accepted and rejected steps;  t_final (...,): the time reached
    noise   (...,) or σ    the noise σ of each member (0: none)
    """

    ts: np.ndarray
    theta: np.ndarray
    rho: np.ndarray
    beta: np.ndarray
    model: str
    steps: np.ndarray
    rejected: np.ndarray
    t_final: np.ndarray
    noise: np.ndarray | float = 0.0

    @property
    def modes(self) -> int:
        return self.theta.shape[0] // 2

    @property
    def coefficients(self) -> np.ndarray:
        """c_k(t) = ∫ ρ e^{−ikθ} dθ, (..., T, modes)."""
        return density_coefficients(self.rho)

    @property
    def mass(self) -> np.ndarray:
        """∫ ρ dθ at the save times (..., T)."""
        return self.rho.sum(axis=-1) * (2 * np.pi / self.rho.shape[-1])

    def energy(self, normalized: bool = False) -> np.ndarray:
        """E[ρ(t)] (or 2βe^{−β}E) at the save times (..., T); see ``density_energy``."""
        return density_energy(self.rho, self.beta, normalized=normalized)

    def clusters(self, level: float | None = None) -> np.ndarray:
        """Number of arcs where ρ > level at the save times (..., T); see ``density_clusters``."""
        return density_clusters(self.rho, level)


def _rhs(c, ive, beta, model: str, M: int):
    """∂_t c_k = −ik (ρX)^_k with ρ·X formed on M ≥ 3N/2 points (dealiased)."""
    K = c.shape[-1]
    k = jnp.arange(K)
    pad = M // 2 + 1 - K

    def grid(a):
        return jnp.fft.irfft(jnp.pad(a, (0, pad)), n=M) * M

    rho = grid(c) / (2 * jnp.pi)
    pull = grid(1j * k * ive * c) / beta  # e^{−β} × (−∫ e^{β cos} sin ρ)
    if model == "sa":
        # the denominator is ≥ e^{−2β} × mass for a density; only rounding can take it near 0
        velocity = pull / jnp.maximum(grid(ive * c), jnp.finfo(c.real.dtype).tiny)
    elif model == "usa":
        velocity = pull * jnp.exp(beta)
    else:
        velocity = pull
    flux = jnp.fft.rfft(rho * velocity)[:K] * (2 * jnp.pi / M)
    return jnp.where(k == 0, 0.0, -1j * k * flux)


def _density(c, N: int):
    return jnp.fft.irfft(c, n=N) * N / (2 * jnp.pi)


def _solve(c0, beta, noise, ts, rtol, atol, positivity_tol, *, model: str, max_steps: int, noisy: bool):
    """One member: the adaptive, positivity-aware steps of ``spectral_steps.solve_adaptive``, the diffusion
    −(σ²/2)k² c_k (when ``noisy``) integrated exactly."""
    K = c0.shape[-1]
    M = 3 * K + (3 * K) % 2  # ≥ 3N/2 points: the products of degree < N are dealiased below N/2
    f = functools.partial(_rhs, ive=scaled_bessel(beta, K), beta=beta, model=model, M=M)
    linear = -0.5 * noise**2 * jnp.arange(K, dtype=noise.dtype) ** 2 if noisy else None
    return solve_adaptive(
        f,
        functools.partial(_density, N=2 * K),
        c0,
        ts,
        linear=linear,
        rtol=rtol,
        atol=atol,
        positivity_tol=positivity_tol,
        max_steps=max_steps,
    )


@functools.partial(jax.jit, static_argnames=("model", "max_steps", "noisy"))
def _solve_batch(c0, beta, noise, ts, rtol, atol, positivity_tol, *, model: str, max_steps: int, noisy: bool):
    """Members (c0 (B, K), β (B,), σ (B,), ts (B, T)) in one compiled, vmapped call."""
    one = functools.partial(
        _solve, rtol=rtol, atol=atol, positivity_tol=positivity_tol, model=model, max_steps=max_steps, noisy=noisy
    )
    return jax.vmap(one)(c0, beta, noise, ts)


def meanfield_circle(
    rho0,
    beta,
    t1: float,
    *,
    model: str = "sa",
    ts=None,
    modes: int = 256,
    noise=0.0,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    positivity_tol: float = 1e-6,
    max_steps: int = 200_000,
) -> MeanFieldSolution:
    """Solve ∂_t ρ + ∂_θ(ρ X[ρ]) = (σ²/2) ∂²_θ ρ on the circle for SA or USA from ρ(0) = ρ0 up to t1.

    rho0       a function θ ↦ ρ0(θ) (sampled on the grid of 2·modes points), or its samples on the
               grid θ_j = 2πj/N (last axis N = 2·modes, even; a leading axis: one member each). It
               is projected onto the modes |k| < N/2 and scaled to mass 1.
    beta       inverse temperature, or a 1-D array of them (one member each, broadcast with ρ0).
    model      "sa", "usa" ([GLPR] time, velocities ~ e^β) or "usa-rescaled" (× e^{−β}): the
               clocks of ``Circle(β, model)``, ``SA(β)``, ``USA(β)``, ``USA(β, time="rescaled")``.
    ts         increasing save times in [0, t1] (default: 0 and t1); (members, T): each member its own.
    modes      Fourier modes kept when rho0 is a function (grid of 2·modes points).
    noise      σ ≥ 0 of independent Brownian motion on every token (``Noisy(field, σ)``): adds (σ²/2) ∂²_θ ρ;
               a number or a 1-D array (one member each, broadcast with β and ρ0).
    rtol, atol error tolerances of the adaptive steps, against atol + rtol·max ρ on the grid.
    positivity_tol  a step is rejected when min ρ < −positivity_tol·max ρ.

    Raises MeanFieldError (with the partial solution) when a member cannot reach t1: its density
    became too narrow for the grid. Returns a ``MeanFieldSolution``.
    """
    _check_model(model)
    rtol = check_real("rtol", rtol, 0.0, strict_min=True)
    atol = check_real("atol", atol, 0.0)
    positivity_tol = check_real("positivity_tol", positivity_tol, 0.0)
    max_steps = check_int("max_steps", max_steps, 1)
    if callable(rho0):
        modes = check_int("modes", modes, 2)
        check_memory(
            solve_bytes(2 * modes, np.size(beta), 2 if ts is None else np.size(ts)),
            f"meanfield_circle with {modes} modes",
            "fewer modes",
        )
        rho0 = np.asarray(rho0(theta_grid(modes)), dtype=float)
    rho0 = real_array("rho0", rho0, " of samples on the grid").astype(float)
    if rho0.ndim not in (1, 2) or rho0.shape[-1] < 4 or rho0.shape[-1] % 2:
        raise ValueError(
            f"rho0 must be samples on a grid of an even number N ≥ 4 of points, shape (N,) or "
            f"(members, N); got shape {rho0.shape}"
        )
    if not np.all(np.isfinite(rho0)):
        raise ValueError("rho0 must be finite")
    beta_arr = np.asarray(beta, dtype=float)
    if beta_arr.ndim > 1 or not np.all(np.isfinite(beta_arr)) or np.any(beta_arr <= 0):
        raise ValueError(f"beta must be a positive number or a 1-D array of them, got {beta_arr.tolist()}")
    if model == "usa" and np.max(beta_arr) > math.log(np.finfo(np.float64).max) - 10:
        raise ValueError(
            f"model='usa' at beta={np.max(beta_arr):g} has velocities of order e^beta, which overflow "
            "float64; use model='usa-rescaled' (time t -> e^-beta t)"
        )
    noise_arr = np.asarray(noise, dtype=float)
    if noise_arr.ndim > 1 or not np.all(np.isfinite(noise_arr)) or np.any(noise_arr < 0):
        raise ValueError(f"noise must be a number ≥ 0 or a 1-D array of them, got {noise_arr.tolist()}")
    t1 = float(t1)
    if not (math.isfinite(t1) and t1 > 0):
        raise ValueError(f"t1 must be a finite number > 0, got {t1}")
    check_horizon(t1, fastest_rate(beta_arr, 2, model=model), "meanfield_circle")
    ts = np.array([0.0, t1]) if ts is None else np.asarray(ts, dtype=float)
    if (
        ts.ndim not in (1, 2)
        or ts.shape[-1] == 0
        or np.any(np.diff(ts, axis=-1) <= 0)
        or np.any(ts < 0)
        or np.any(ts > t1 * (1 + 1e-12))
        or not np.all(np.isfinite(ts))
    ):
        raise ValueError("ts must be strictly increasing save times in [0, t1], shape (T,) or (members, T)")
    batched = rho0.ndim == 2 or beta_arr.ndim == 1 or ts.ndim == 2 or noise_arr.ndim == 1
    try:
        members = np.broadcast_shapes(rho0.shape[:-1], beta_arr.shape, ts.shape[:-1], noise_arr.shape)
    except ValueError:
        raise ValueError(
            f"the members of rho0 {rho0.shape[:-1]}, beta {beta_arr.shape}, ts {ts.shape[:-1]} and "
            f"noise {noise_arr.shape} do not broadcast"
        ) from None
    check_memory(
        solve_bytes(rho0.shape[-1], int(np.prod(members)), ts.shape[-1]),
        f"meanfield_circle on {rho0.shape[-1]} grid points",
        "fewer modes, save times or members",
    )
    c0 = density_coefficients(rho0)
    mass = c0[..., 0].real
    if np.any(mass <= 0):
        raise ValueError("rho0 must have positive mass ∫ρ0 dθ")
    c0 = c0 / mass[..., None]
    c0 = np.broadcast_to(c0, members + c0.shape[-1:]).reshape((-1, c0.shape[-1]))
    betas = np.broadcast_to(beta_arr, members).reshape(-1)
    noises = np.broadcast_to(noise_arr, members).reshape(-1)
    ts_members = np.broadcast_to(ts, members + ts.shape[-1:]).reshape((-1, ts.shape[-1]))
    saves, steps, rejected, t_final, status = _solve_batch(
        jnp.asarray(c0),
        jnp.asarray(betas),
        jnp.asarray(noises),
        jnp.asarray(ts_members),
        rtol,
        atol,
        positivity_tol,
        model=model,
        max_steps=int(max_steps),
        noisy=bool(np.any(noises > 0)),
    )
    saves, status = np.asarray(saves), np.asarray(status)
    unbatch = (lambda a: a) if batched else (lambda a: a[0])
    sol = MeanFieldSolution(
        ts=ts,
        theta=theta_grid(c0.shape[-1]),
        rho=unbatch(saves),
        beta=unbatch(betas),
        model=model,
        steps=unbatch(np.asarray(steps)),
        rejected=unbatch(np.asarray(rejected)),
        t_final=unbatch(np.asarray(t_final)),
        noise=unbatch(noises),
    )
    raise_failures("meanfield_circle", status, t_final, betas, ts_members[:, -1], sol, MeanFieldError)
    return sol
