"""The mean-field limit on S²: a spectral solver for ∂_t ρ + div(ρ X[ρ]) = (σ²/2) Δρ (docs/model.md §1.4).

As n → ∞ the empirical measure of SA or USA particles on S² becomes a density ρ (∫ρ = 1 against the
area) transported by the velocity the particles feel. With Φ[ρ](x) = ∫ e^{β⟨x,y⟩} ρ(y) dy, and since
∇_x e^{β⟨x,y⟩} = β e^{β⟨x,y⟩} P_x y on the sphere,

    USA:  X[ρ] = ∇Φ / β                 ([GLPR] time; "usa-rescaled": × e^{−β}, arXiv 2410.06833)
    SA:   X[ρ] = ∇Φ / (β Φ) = ∇ log Φ / β

the clocks of ``USA(β)``, ``USA(β, time="rescaled")`` and ``SA(β)`` in d = 3. The kernel is zonal, so by
Funk–Hecke Φ is diagonal in spherical harmonics: Φ_ℓm = 4π i_ℓ(β) ρ_ℓm with i_ℓ the modified spherical
Bessel function, computed scaled (e^{−β} i_ℓ(β), never overflowing) from ``particles.modes``.

Space: ρ is a sum of spherical harmonics of degree ≤ L (``solvers/harmonics.py``), sampled on a
Gauss–Legendre grid fine enough that the flux ρX of two degree-L fields is integrated against ∇Y_ℓm
without aliasing. ∂_t ρ_ℓm = ∫ ρX·∇Ȳ_ℓm (the weak form of −div), so the degree-0 coefficient, the mass,
never changes. Noise σ (independent Brownian motion on every token, ``Noisy``) adds (σ²/2) Δ:
−(σ²/2) ℓ(ℓ+1) on each coefficient, integrated exactly.

Time: the adaptive, positivity-aware steps of ``solvers/spectral_steps.py`` (the circle solver's).

Linearized at the uniform density 1/4π, degree ℓ grows at ℓ(ℓ+1) i_ℓ(β)/β (USA) and ℓ(ℓ+1) i_ℓ(β)/(β i_0(β))
(SA) minus (σ²/2) ℓ(ℓ+1): ``particles.modes.mode_growth_rates(β, d=3)``; the fastest degree is
``fastest_mode(β, d=3)``. The USA energy E = (1/2β) ∬ e^{β⟨x,y⟩} ρρ = (2π/β) Σ i_ℓ(β) |ρ_ℓm|² never
decreases without noise.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import deque
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..particles.errors import ConvergenceError
from ..particles.fields import KERNEL_MODELS
from ..particles.modes import fastest_rate, mode_growth_rates
from . import harmonics
from .machine import check_memory
from .spectral_steps import check_horizon, raise_failures, solve_adaptive

__all__ = [
    "SphereMeanFieldError",
    "SphereMeanField",
    "meanfield_sphere",
    "transport",
    "scaled_kernel",
    "sphere_growth_rates",
    "perturbed_uniform_sphere",
    "sphere_density_energy",
    "sphere_density_peaks",
    "sphere_density_maxima",
    "sample_sphere_density",
    "empirical_coefficients",
    "sobolev_distance",
]


class SphereMeanFieldError(ConvergenceError):
    """``meanfield_sphere`` could not reach every save time; ``solution`` holds the saves it reached (NaN
    after), ``member``/``t`` the first failing member and its last time. A ``ConvergenceError`` (so a
    RuntimeError)."""

    def __init__(self, message: str, *, solution, member: int, t: float):
        super().__init__(message)
        self.solution = solution
        self.member = member
        self.t = t


def scaled_kernel(beta, L: int) -> np.ndarray:
    """e^{−β} · 4π i_ℓ(β) for ℓ = 0 … L (shape β.shape + (L + 1,)): the Funk–Hecke eigenvalues of e^{β(⟨x,y⟩ − 1)}."""
    beta = np.asarray(beta, dtype=float)
    _, rates = mode_growth_rates(beta.ravel(), 3, model="usa-rescaled", kmax=L)
    ell = np.arange(1, L + 1)
    b = beta.ravel()[:, None]
    scaled = np.asarray(rates) * b / (ell * (ell + 1.0))  # e^{−β} i_ℓ(β), ℓ ≥ 1
    zero = -np.expm1(-2.0 * b) / (2.0 * b)  # e^{−β} i_0(β) = (1 − e^{−2β})/2β
    return (4.0 * math.pi * np.concatenate([zero, scaled], axis=1)).reshape(beta.shape + (L + 1,))


def sphere_growth_rates(ell, beta, model: str = "sa", noise: float = 0.0) -> np.ndarray:
    """Growth rates of degree ℓ at the uniform density: ``mode_growth_rates(β, d=3)`` − (σ²/2) ℓ(ℓ+1)."""
    _check_model(model)
    ell, beta = np.broadcast_arrays(np.asarray(ell, dtype=int), np.asarray(beta, dtype=float))
    _, positive = mode_growth_rates(beta.ravel(), 3, model=model, kmax=max(int(ell.max()), 1))
    rates = np.concatenate([np.zeros((ell.size, 1)), np.asarray(positive)], axis=1)
    out = rates[np.arange(ell.size), ell.ravel()].reshape(ell.shape)
    return out - 0.5 * noise**2 * ell * (ell + 1.0)


def _check_model(model: str) -> None:
    if model not in KERNEL_MODELS:
        raise ValueError(f"model must be one of {', '.join(repr(m) for m in KERNEL_MODELS)}, got {model!r}")


# -- densities ------------------------------------------------------------------------------------


def solve_bytes(L: int, members: int, times: int) -> int:
    """Bytes ``meanfield_sphere`` holds at degree L: the transform's tables (three (L + 1)² × n_θ arrays),
    the members' grids and coefficients at every save time, and the stages of the adaptive steps."""
    n_theta, n_phi = (3 * L + 4) // 2, 3 * L + 4
    coefficients = 2 * (L + 1) ** 2
    return 8 * (
        3 * (L + 1) ** 2 * n_theta
        + members * (times * (n_theta * n_phi + coefficients) + 12 * (coefficients + n_theta * n_phi))
    )


def perturbed_uniform_sphere(seed: int, L: int, eps: float, ell_max: int = 12) -> np.ndarray:
    """Coefficients (L + 1, L + 1) of ρ0 = (1 + ε Σ_{1 ≤ ℓ ≤ ell_max} Σ_m z_ℓm √(4π/(2ℓ+1)) Y_ℓm)/4π, z standard
    normal from ``seed``: every degree carries the same variance ε²/(4π)², so the fastest-growing one wins."""
    if not 1 <= ell_max <= L:
        raise ValueError(f"ell_max must be in 1 … L = {L}, got {ell_max}")
    if not 0 <= eps * math.sqrt(ell_max) < 0.3:
        raise ValueError(
            f"perturbed_uniform_sphere needs 0 ≤ eps·√ell_max < 0.3 (a positive density), got {eps}·√{ell_max}"
        )
    check_memory(16 * (L + 1) ** 2, f"perturbed_uniform_sphere at L = {L}", "a smaller L")
    rng = np.random.default_rng(seed)
    c = np.zeros((L + 1, L + 1), dtype=complex)
    c[0, 0] = 1.0 / math.sqrt(4.0 * math.pi)  # Y_00 = 1/√(4π): mass 1
    for ell in range(1, ell_max + 1):
        scale = eps / (4.0 * math.pi) * math.sqrt(4.0 * math.pi / (2 * ell + 1))
        c[ell, 0] = scale * rng.normal()
        # m > 0 stands for ±m: a real field with Re, Im of variance 1/2 each has Σ_{|m|=m} of variance 1
        c[ell, 1 : ell + 1] = scale * (rng.normal(size=ell) + 1j * rng.normal(size=ell)) / math.sqrt(2.0)
    return c


def sphere_density_energy(c, beta, *, normalized: bool = False) -> np.ndarray:
    """E[ρ] = (1/2β) ∬ e^{β⟨x,y⟩} ρ(x)ρ(y) = (1/2β) Σ_ℓm 4π i_ℓ(β) |ρ_ℓm|² from coefficients c (..., L+1, L+1),
    the n → ∞ limit of ``energy`` of USA particles; ``normalized``: 2β e^{−β} E."""
    c = np.asarray(c)
    beta = np.asarray(beta, dtype=float)
    kern = scaled_kernel(beta, c.shape[-1] - 1)
    kern = kern.reshape(beta.shape + (1,) * (c.ndim - 2 - beta.ndim) + (c.shape[-1], 1))
    weights = np.where(np.arange(c.shape[-1]) == 0, 1.0, 2.0)  # m > 0 stands for ±m
    norm = np.sum(weights * kern * np.abs(c) ** 2, axis=(-2, -1))
    if normalized:
        return norm
    b = beta.reshape(beta.shape + (1,) * (norm.ndim - beta.ndim))
    with np.errstate(over="ignore"):
        return np.exp(b) * norm / (2.0 * b)


def sphere_density_peaks(rho, level: float | None = None) -> np.ndarray:
    """Clusters of densities on a Gauss–Legendre grid (..., n_θ, n_φ): connected regions where ρ > ``level``
    (default twice the uniform density, 2/4π); regions are joined across φ = 0 and around each pole."""
    rho = np.asarray(rho, dtype=float)
    level = 2.0 / (4.0 * math.pi) if level is None else level
    flat = rho.reshape((-1,) + rho.shape[-2:])
    out = np.array([_count_regions(r > level) for r in flat])
    return out.reshape(rho.shape[:-2])


def sphere_density_maxima(rho, level: float | None = None) -> np.ndarray:
    """Local maxima above ``level`` (default the uniform density 1/4π) of densities on a Gauss–Legendre grid
    (..., n_θ, n_φ): points at least as large as their eight neighbours (longitudes wrap; a point of the first
    or last ring is also compared with its whole ring, the neighbours across the pole)."""
    r = np.asarray(rho, dtype=float)
    level = 1.0 / (4.0 * math.pi) if level is None else level
    floor = np.full_like(r[..., :1, :], -np.inf)
    above = np.concatenate([floor, r[..., :-1, :]], axis=-2)
    below = np.concatenate([r[..., 1:, :], floor], axis=-2)
    near = np.max(
        [np.roll(a, k, axis=-1) for a in (above, r, below) for k in (-1, 0, 1) if not (a is r and k == 0)], axis=0
    )
    is_max = (r > level) & (r >= near)
    ring = r >= r.max(axis=-1, keepdims=True)
    is_max[..., 0, :] &= ring[..., 0, :]
    is_max[..., -1, :] &= ring[..., -1, :]
    return is_max.sum(axis=(-2, -1))


def _count_regions(above: np.ndarray) -> int:
    n_theta, n_phi = above.shape
    seen = np.zeros_like(above)
    count = 0
    for start in zip(*np.nonzero(above)):
        if seen[start]:
            continue
        count += 1
        seen[start] = True
        todo = deque([start])
        while todo:
            i, j = todo.popleft()
            near = [(i, (j + 1) % n_phi), (i, (j - 1) % n_phi)]
            near += [(i + 1, j)] if i + 1 < n_theta else [(i, k) for k in range(n_phi)]  # the south pole
            near += [(i - 1, j)] if i > 0 else [(i, k) for k in range(n_phi)]  # the north pole
            for a in near:
                if above[a] and not seen[a]:
                    seen[a] = True
                    todo.append(a)
    return count


def sample_sphere_density(seed: int, c, n: int) -> np.ndarray:
    """n i.i.d. points (n, 3) from the density with coefficients c (rejection from the uniform law)."""
    c = np.asarray(c)
    grid = harmonics.sphere_grid(c.shape[-1] - 1)
    bound = 1.2 * float(np.max(np.asarray(harmonics.synthesis(grid, jnp.asarray(c)))))
    rng = np.random.default_rng(seed)
    out = []
    have = 0
    while have < n:
        x = rng.normal(size=(2 * n, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        keep = x[rng.uniform(0.0, bound, 2 * n) < harmonics.evaluate(c, x)]
        out.append(keep)
        have += keep.shape[0]
    return np.concatenate(out)[:n]


def empirical_coefficients(x, L: int) -> np.ndarray:
    """The coefficients (L + 1, L + 1) of the empirical measure (1/n) Σ δ_{x_i}: (1/n) Σ_i conj(Y_ℓm(x_i))."""
    x = np.asarray(x, dtype=float).reshape(-1, 3)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    P = harmonics.legendre(L, np.clip(x[:, 2], -1.0, 1.0))
    phi = np.arctan2(x[:, 1], x[:, 0])
    e = np.exp(-1j * np.arange(L + 1)[None, :] * phi[:, None])
    return np.mean(P * e[:, None, :], axis=0)


def sobolev_distance(x, c, s: float = 2.0) -> float:
    """‖μ_n − ρ‖ in H^{−s}(S²): √(Σ_{ℓ ≥ 1} (1 + ℓ(ℓ+1))^{−s} Σ_m |μ̂_ℓm − ρ_ℓm|²) over the degrees of c, between
    the empirical measure of the points x and the density with coefficients c. For n i.i.d. points of ρ
    its mean is of order n^{−1/2}."""
    c = np.asarray(c)
    L = c.shape[-1] - 1
    diff = empirical_coefficients(x, L) - c
    ell = harmonics.degrees(L)
    weights = np.where(np.arange(L + 1)[None, :] == 0, 1.0, 2.0) * (1.0 + ell * (ell + 1.0)) ** -s
    weights[0, 0] = 0.0
    return float(np.sqrt(np.sum(weights * np.abs(diff) ** 2)))


# -- the solver ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SphereMeanField:
    """What ``meanfield_sphere`` returns; a leading member axis when β or the start was batched.

    ts      (T,)                save times
    theta, phi                  the grid's colatitudes (n_θ,) and longitudes (n_φ,)
    rho     (..., T, n_θ, n_φ)  densities at the save times on the grid (NaN after a failure)
    beta    (...,)              inverse temperatures; model: "sa", "usa" or "usa-rescaled"; noise: σ
    L                           the degree; steps, rejected, t_final (...,) as for the circle
    """

    ts: np.ndarray
    theta: np.ndarray
    phi: np.ndarray
    rho: np.ndarray
    beta: np.ndarray
    model: str
    noise: float
    L: int
    steps: np.ndarray
    rejected: np.ndarray
    t_final: np.ndarray

    @property
    def grid(self) -> harmonics.SphereGrid:
        return harmonics.sphere_grid(self.L)

    @property
    def coefficients(self) -> np.ndarray:
        """ρ_ℓm(t), (..., T, L + 1, L + 1)."""
        return np.asarray(harmonics.analysis(self.grid, jnp.asarray(self.rho)))

    @property
    def mass(self) -> np.ndarray:
        """∫ ρ at the save times (..., T)."""
        return np.sum(self.rho * self.grid.area_weights, axis=(-2, -1))

    def energy(self, normalized: bool = False) -> np.ndarray:
        """E[ρ(t)] (or 2βe^{−β}E) at the save times (..., T); see ``sphere_density_energy``."""
        b = np.asarray(self.beta)[..., None] if np.ndim(self.beta) else self.beta
        return sphere_density_energy(self.coefficients, b, normalized=normalized)

    def clusters(self, level: float | None = None) -> np.ndarray:
        """Regions where ρ > level at the save times (..., T); see ``sphere_density_peaks``."""
        return sphere_density_peaks(self.rho, level)


def transport(c, kern, beta, grid: harmonics.SphereGrid, model: str):
    """∂_t ρ_ℓm = ∫ ρX·∇Ȳ_ℓm (the transport, without noise) with X from the scaled potential e^{−β}Φ_ℓm =
    kern_ℓ ρ_ℓm (``scaled_kernel``); c (L + 1, L + 1) on ``grid`` (jit-able, one member)."""
    rho = harmonics.synthesis(grid, c)
    potential = kern[:, None] * c
    d_theta, d_phi = harmonics.gradient(grid, potential)
    if model == "sa":
        # Φ ≥ e^{−2β} × mass for a density; only rounding can take it near 0
        scale = 1.0 / (beta * jnp.maximum(harmonics.synthesis(grid, potential), jnp.finfo(rho.dtype).tiny))
    elif model == "usa":
        scale = jnp.exp(beta) / beta
    else:
        scale = 1.0 / beta
    return -harmonics.divergence(grid, rho * d_theta * scale, rho * d_phi * scale)


def _solve(c0, kern, beta, ts, P, dP, mP_sin, *, grid, model, linear, rtol, atol, positivity_tol, max_steps):
    g = dataclasses.replace(grid, P=P, dP=dP, mP_sin=mP_sin)  # the tables as arguments, not constants
    return solve_adaptive(
        functools.partial(transport, kern=kern, beta=beta, grid=g, model=model),
        functools.partial(harmonics.synthesis, g),
        c0,
        ts,
        linear=linear,
        rtol=rtol,
        atol=atol,
        positivity_tol=positivity_tol,
        max_steps=max_steps,
    )


@functools.partial(jax.jit, static_argnames=("grid", "model", "max_steps"))
def _solve_batch(c0, kern, beta, ts, linear, P, dP, mP_sin, rtol, atol, positivity_tol, *, grid, model, max_steps):
    one = functools.partial(
        _solve,
        P=P,
        dP=dP,
        mP_sin=mP_sin,
        grid=grid,
        model=model,
        linear=linear,
        rtol=rtol,
        atol=atol,
        positivity_tol=positivity_tol,
        max_steps=max_steps,
    )
    return jax.vmap(one)(c0, kern, beta, ts)


def meanfield_sphere(
    rho0,
    beta,
    t1: float,
    *,
    model: str = "sa",
    ts=None,
    L: int = 32,
    noise: float = 0.0,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    positivity_tol: float = 1e-6,
    max_steps: int = 100_000,
) -> SphereMeanField:
    """Solve ∂_t ρ + div(ρ X[ρ]) = (σ²/2)Δρ on S² for SA or USA from ρ(0) = ρ0 up to t1.

    rho0       coefficients (L' + 1, L' + 1) or (members, L' + 1, L' + 1) (``perturbed_uniform_sphere``), or
               a function of unit vectors (..., 3) ↦ ρ0, projected onto the degrees ≤ L; scaled to mass 1.
    beta       inverse temperature, or a 1-D array of them (one member each, broadcast with ρ0).
    model      "sa", "usa" ([GLPR] time) or "usa-rescaled": the clocks of SA(β), USA(β), USA(β, time="rescaled").
    ts         increasing save times in [0, t1] (default 0 and t1).
    L          the largest degree kept (coefficients of a larger degree in rho0 are dropped).
    noise      σ of independent Brownian motion on every token (``Noisy``): adds (σ²/2)Δρ.
    rtol, atol, positivity_tol, max_steps: the adaptive steps (``solvers/spectral_steps.py``).

    Raises SphereMeanFieldError (with the partial solution) when a member cannot reach t1: its density
    became too narrow for degree L. Returns a ``SphereMeanField``.
    """
    _check_model(model)
    if not isinstance(L, (int, np.integer)) or L < 2:
        raise ValueError(f"L must be an integer ≥ 2, got {L!r}")
    check_memory(
        solve_bytes(
            int(L), max(np.size(beta), np.shape(rho0)[0] if np.ndim(rho0) == 3 else 1), 2 if ts is None else np.size(ts)
        ),
        f"meanfield_sphere at L = {L}",
        "a smaller L",
    )
    grid = harmonics.sphere_grid(int(L))
    if callable(rho0):
        c0 = np.asarray(harmonics.analysis(grid, jnp.asarray(np.asarray(rho0(grid.points()), dtype=float))))
    else:
        c0 = np.asarray(rho0)
        if c0.ndim not in (2, 3) or c0.shape[-1] != c0.shape[-2] or c0.shape[-1] < 2:
            raise ValueError(
                f"rho0 must be coefficients of shape (L + 1, L + 1) or (members, L + 1, L + 1), or a "
                f"function of unit vectors; got shape {c0.shape}"
            )
        c0 = c0.astype(complex)
        have = c0.shape[-1]
        if have > L + 1:
            c0 = c0[..., : L + 1, : L + 1]
        elif have < L + 1:
            c0 = np.pad(c0, [(0, 0)] * (c0.ndim - 2) + [(0, L + 1 - have)] * 2)
    if not np.all(np.isfinite(c0)):
        raise ValueError("rho0 must be finite")
    beta_arr = np.asarray(beta, dtype=float)
    if beta_arr.ndim > 1 or not np.all(np.isfinite(beta_arr)) or np.any(beta_arr <= 0):
        raise ValueError(f"beta must be a positive number or a 1-D array of them, got {beta_arr.tolist()}")
    if model == "usa" and np.max(beta_arr) > math.log(np.finfo(np.float64).max) - 10:
        raise ValueError(
            f"model='usa' at beta={np.max(beta_arr):g} has velocities of order e^beta, which overflow "
            "float64; use model='usa-rescaled' (time t -> e^-beta t)"
        )
    if not (math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise must be a finite number ≥ 0, got {noise!r}")
    t1 = float(t1)
    if not (math.isfinite(t1) and t1 > 0):
        raise ValueError(f"t1 must be a finite number > 0, got {t1}")
    check_horizon(t1, fastest_rate(beta_arr, 3, model=model), "meanfield_sphere")
    ts = np.array([0.0, t1]) if ts is None else np.asarray(ts, dtype=float)
    if (
        ts.ndim != 1
        or ts.size == 0
        or np.any(np.diff(ts) <= 0)
        or np.any(ts < 0)
        or np.any(ts > t1 * (1 + 1e-12))
        or not np.all(np.isfinite(ts))
    ):
        raise ValueError("ts must be strictly increasing save times in [0, t1]")
    mass = c0[..., 0, 0].real * math.sqrt(4.0 * math.pi)
    if np.any(mass <= 0):
        raise ValueError("rho0 must have positive mass ∫ρ0")
    c0 = c0 / mass[..., None, None]
    c0 = c0 * np.tril(np.ones((L + 1, L + 1)))  # m ≤ ℓ
    batched = c0.ndim == 3 or beta_arr.ndim == 1
    members = np.broadcast_shapes(c0.shape[:-2], beta_arr.shape)
    c0 = np.broadcast_to(c0, members + c0.shape[-2:]).reshape((-1,) + c0.shape[-2:])
    betas = np.broadcast_to(beta_arr, members).reshape(-1)
    ell = harmonics.degrees(L)
    linear = jnp.asarray(-0.5 * noise**2 * ell * (ell + 1.0)) if noise > 0 else None
    ts_members = np.broadcast_to(ts, (betas.size, ts.size))
    saves, steps, rejected, t_final, status = _solve_batch(
        jnp.asarray(c0),
        jnp.asarray(scaled_kernel(betas, L)),
        jnp.asarray(betas),
        jnp.asarray(ts_members),
        linear,
        grid.P,
        grid.dP,
        grid.mP_sin,
        rtol,
        atol,
        positivity_tol,
        grid=grid,
        model=model,
        max_steps=int(max_steps),
    )
    saves, status = np.asarray(saves), np.asarray(status)
    unbatch = (lambda a: a) if batched else (lambda a: a[0])
    sol = SphereMeanField(
        ts=ts,
        theta=grid.theta,
        phi=grid.phi,
        rho=unbatch(saves),
        beta=unbatch(betas),
        model=model,
        noise=float(noise),
        L=int(L),
        steps=unbatch(np.asarray(steps)),
        rejected=unbatch(np.asarray(rejected)),
        t_final=unbatch(np.asarray(t_final)),
    )
    raise_failures("meanfield_sphere", status, t_final, betas, np.full(betas.size, ts[-1]), sol, SphereMeanFieldError)
    return sol
