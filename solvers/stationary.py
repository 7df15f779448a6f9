"""Stationary densities of the noisy mean field on the circle: the Gibbs fixed point, its stability, its branches.

The noisy mean field of SA or USA on the circle (``meanfield_circle(..., noise=σ)``, solvers/circle_meanfield.py)
moves a density ρ(θ) by ∂_t ρ = −∂_θ(ρ X[ρ]) + (σ²/2) ∂²_θ ρ with, for Φ[ρ](θ) = ∫ e^{β cos(θ−φ)} ρ(φ) dφ,

    USA ([GLPR] time):  X = Φ'/β          "usa-rescaled":  X = e^{−β} Φ'/β          SA:  X = Φ'/(βΦ) = (log Φ)'/β

(the derivative of e^{β cos(θ−φ)} in θ is −β sin(θ−φ) e^{β cos(θ−φ)}). A stationary density has a constant
flux ρX − (σ²/2)ρ' = −J on the circle; X being the derivative of a periodic function, ρ e^{−V} with
V = 2∫X/σ² has derivative −(2J/σ²) e^{−V}, whose integral over a period vanishes only for J = 0. So every
stationary density is the Gibbs density of its own potential (docs/model.md §13.3), with K = 1/σ² (the
coupling of arXiv 2606.05140):

    USA:  ρ ∝ exp(2KΦ/β)        "usa-rescaled":  ρ ∝ exp(2K e^{−β} Φ/β)        SA:  ρ ∝ Φ^{2K/β}

In Fourier coefficients c_k = ∫ ρ e^{−ikθ} (c_0 = 1) Φ = Σ_k I_k(β) c_k e^{ikθ}, so the fixed point is a
problem in the coefficients alone. Rotations move solutions along families; the unknowns are the coefficients
a_j = c_{js} of an even density (ρ(−θ) = ρ(θ), every c real) invariant under the rotation by 2π/s
(``symmetry`` s): ρ = (1 + 2 Σ_j a_j cos(jsθ))/2π, and the residual is a − G(a) with G(a)_j = ∫ cos(jsθ) ρ_a dθ,
ρ_a the Gibbs density of a's potential, evaluated on a grid of 4·``modes`` points.

Linearizing at the uniform density, G's Jacobian is diagonal, 2K I_k/β (USA): the mode k branches off where
2K I_k(β)/β = 1, σ² = 2I_k(β)/β, exactly where the growth rate k² I_k/β − σ²k²/2 of ``growth_rates`` vanishes.

Stability is that of the time-dependent equation: its right-hand side in the coefficients c_1 … c_{modes−1}
(real and imaginary parts, sine perturbations included), formed with the products dealiased on the grid, is
differentiated by JAX at the stationary density; the rotation's generator (δc_k = −ik c_k) is a zero mode of
every non-uniform state and is left out of the count (``rest_point_spectrum``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_choice, check_int
from ..particles.errors import ConvergenceError, InputError
from ..particles.fields import KERNEL_MODELS
from ..particles.modes import BETA_MAX
from .circle_meanfield import growth_rates, scaled_bessel, theta_grid
from .equilibrium import rest_point_spectrum

__all__ = ["StationaryCircle", "StationaryDensity", "stationary_circle", "branch_threshold", "pitchfork_coefficient"]

PARAMETERS = ("noise", "coupling")
PITCHFORK_STEPS = 60
"""Newton steps at most for each amplitude of a pitchfork coefficient; ConvergenceError beyond."""


USA_BETA_MAX = 700.0
"""The largest β of model 'usa' ([GLPR] time): its rates and potential carry e^β, past e^709 the largest float64."""


def check_beta(beta, model: str) -> float:
    """β of a stationary density as a float: finite, > 0, ≤ ``BETA_MAX`` (the growth rates of the stability take
    √(40β) steps) and ≤ ``USA_BETA_MAX`` with model 'usa'; InputError naming it otherwise."""
    beta = float(beta)
    if not (np.isfinite(beta) and beta > 0):
        raise InputError(f"beta must be a finite number > 0, got {beta!r}")
    if beta > BETA_MAX:
        raise InputError(f"beta must be ≤ {BETA_MAX:g} for the stationary densities, got {beta!r}")
    if model == "usa" and beta > USA_BETA_MAX:
        raise InputError(
            f"beta must be ≤ {USA_BETA_MAX:g} with model 'usa' (its rates carry e^β, which overflows float64), "
            f"got {beta!r}; model 'usa-rescaled' takes any β"
        )
    return beta


def check_sigma(sigma) -> float:
    """σ > 0 and finite, as a float."""
    sigma = float(sigma)
    if not (np.isfinite(sigma) and sigma > 0):
        raise InputError(f"sigma must be a finite number > 0, got {sigma!r}")
    return sigma


class GibbsFixedPoint(eqx.Module):
    """A stationary density as the fixed point u = G(u) of a Gibbs map (the circle's Fourier coefficients, the
    sphere's zonal moments): what both continuation systems share. A subclass has the static field ``parameter``
    ("noise": σ, "coupling": K = 1/σ²) and the method ``gibbs(u, K)``."""

    def coupling(self, p):
        """K = 1/σ² of the parameter."""
        return 1.0 / (p * p) if self.parameter == "noise" else p

    def residual(self, u, p):
        return u - self.gibbs(u, self.coupling(p))

    def motion(self, u, p: float) -> None:
        """None: every solution is at rest, a stationary density with zero flux (the module docstring)."""
        return None


def resolved(u, weight, tail) -> bool:
    """Unknowns ``u`` that the modes resolve: finite, |u| < 1, the ``tail`` (last quarter of the modes) below 1e-6
    and its share of the potential ``weight`` below 1e-13 of the largest of the others."""
    u, weight = np.asarray(u), np.asarray(weight)
    if not (np.all(np.isfinite(u)) and np.all(np.abs(u) < 1.0)):
        return False
    if not tail.any():
        return True
    return bool(
        np.max(np.abs(u[tail])) <= 1e-6
        and np.max(weight[tail]) <= 1e-13 * max(float(np.max(weight[~tail], initial=0.0)), 1e-300)
    )


def newton_fixed_point(
    system, u, sigma: float, *, tol: float, max_iter: int, name: str
) -> tuple[np.ndarray, float, int]:
    """Newton's method on the residual u − G(u) at the noise σ from ``u``: (u, the residual max|u − G(u)|, the
    iterations). ConvergenceError, under ``name``, where the map is not finite or Newton does not reach ``tol``."""
    residual = float("inf")
    for iteration in range(max_iter + 1):
        F, J = (np.asarray(v) for v in newton_parts(system, jnp.asarray(u), jnp.asarray(sigma)))
        if not (np.all(np.isfinite(F)) and np.all(np.isfinite(J))):
            raise ConvergenceError(
                f"{name}: the Gibbs map is not finite at beta = {float(system.beta)!r}, sigma = {sigma!r} "
                f"(it overflows float64 at this β and σ)"
            )
        residual = float(np.max(np.abs(F))) if F.size else 0.0
        if residual <= tol:
            break
        if iteration == max_iter:
            raise ConvergenceError(
                f"{name}: Newton did not converge in {max_iter} iterations (residual {residual:.3g}); "
                "try another guess, more modes, or continuation"
            )
        u = u + np.linalg.lstsq(J, -F, rcond=None)[0]
    return u, residual, iteration


def pitchfork_from_amplitudes(system, K0: float, amplitude: float, unknowns: int, failure) -> float:
    """dK/du_1² at a branch point K0 of ``system`` (a ``parameter="coupling"`` system with ``unknowns`` unknowns):
    the branch solved by Newton with its first unknown held at ε = ``amplitude`` and 2ε, Richardson-extrapolated.
    ``failure(eps, step, residual)`` words the ConvergenceError where Newton does not converge in
    ``PITCHFORK_STEPS`` steps."""

    def solve(eps: float) -> float:
        z = np.append(np.zeros(unknowns - 1), K0)
        residual = float("inf")
        for step in range(PITCHFORK_STEPS + 1):
            r, J = (np.asarray(v) for v in amplitude_parts(system, jnp.asarray(z), jnp.asarray(eps)))
            residual = float(np.max(np.abs(r))) if r.size else 0.0
            if residual <= 1e-15:
                return float(z[-1])
            if step == PITCHFORK_STEPS or not np.isfinite(residual):
                break
            try:
                z = z + np.linalg.solve(J, -r)
            except np.linalg.LinAlgError:
                break  # a singular Jacobian: no Newton step from here
        raise ConvergenceError(failure(eps, step, residual))

    f1 = (solve(amplitude) - K0) / amplitude**2
    f2 = (solve(2.0 * amplitude) - K0) / (2.0 * amplitude) ** 2
    return (4.0 * f1 - f2) / 3.0


@functools.lru_cache(maxsize=64)
def _bessel(beta: float, modes: int) -> np.ndarray:
    return np.asarray(scaled_bessel(beta, modes), dtype=np.float64)


class StationaryCircle(GibbsFixedPoint):
    """The stationary densities of the noisy mean field on the circle (module docstring) as a continuation
    system in the noise σ (``parameter="noise"``) or the coupling K = 1/σ² (``"coupling"``).

    beta      inverse temperature > 0; model: "usa" ([GLPR] time), "usa-rescaled" or "sa"
    modes     Fourier modes |k| < modes of the density (the grid of ``state`` has 2·modes points)
    symmetry  s ≥ 1: the densities are even and invariant under rotation by 2π/s; unknowns a_j = c_{js},
              1 ≤ js < modes

    A PyTree (β and the tables are leaves): the compiled residual and Jacobians serve every β alike.
    """

    beta: jax.Array
    ive: jax.Array
    cosines: jax.Array
    model: str = eqx.field(static=True)
    modes: int = eqx.field(static=True)
    symmetry: int = eqx.field(static=True)
    parameter: str = eqx.field(static=True)

    def __init__(
        self, beta: float, model: str = "usa", *, modes: int = 48, symmetry: int = 1, parameter: str = "noise"
    ):
        self.model = check_choice("model", model, KERNEL_MODELS)
        beta = check_beta(beta, self.model)
        self.modes = check_int("modes", modes, 4, 4096)
        self.symmetry = check_int("symmetry", symmetry, 1, self.modes - 1)
        self.parameter = check_choice("parameter", parameter, PARAMETERS)
        self.beta = jnp.asarray(beta, dtype=jnp.float64)
        self.ive = jnp.asarray(_bessel(beta, self.modes))  # e^{−β} I_k(β), k < modes
        theta = 2 * np.pi * np.arange(self.L) / self.L
        self.cosines = jnp.asarray(np.cos(np.outer(self.ks, theta)))  # (M, L)

    @property
    def ks(self) -> np.ndarray:
        """The modes of the unknowns: symmetry, 2·symmetry, … below ``modes``."""
        return np.arange(self.symmetry, self.modes, self.symmetry)

    @property
    def L(self) -> int:
        """Points of the grid on which the Gibbs density and the products are formed."""
        return 4 * self.modes

    # -- the Gibbs map (coupling, residual and motion: ``GibbsFixedPoint``) --------------------------------
    def potential(self, a, K):
        """The exponent of the Gibbs density (up to a constant) for coefficients a (of the symmetric modes)."""
        wave = 2.0 * self.ive[self.ks] * a @ self.cosines  # 2 Σ e^{−β}I_k a_k cos kθ
        if self.model == "sa":
            return (2.0 * K / self.beta) * jnp.log(self.ive[0] + wave)
        scale = jnp.exp(self.beta) if self.model == "usa" else 1.0
        return (2.0 * K * scale / self.beta) * wave

    def gibbs(self, a, K):
        """G(a): the cosine coefficients ∫ cos(kθ) ρ of the Gibbs density of a's potential."""
        U = self.potential(a, K)
        w = jnp.exp(U - jnp.max(U))
        return (self.cosines @ w) / jnp.sum(w)

    # -- the continuation system -------------------------------------------------------------------------
    def start(self, guess, p: float) -> np.ndarray:
        """Unknowns of a guess: None or "uniform" (a = 0), the symmetric coefficients a (M,), or a density
        sampled on ``theta_grid(modes)`` (2·modes points), whose even part is kept."""
        if guess is None or (isinstance(guess, str) and guess == "uniform"):
            return np.zeros(self.ks.size)
        g = np.asarray(guess, dtype=np.float64)
        if g.shape == (self.ks.size,):
            return g
        if g.shape == (2 * self.modes,):
            c = np.fft.rfft(g)[: self.modes] * (2 * np.pi / g.size)
            return (c[self.ks] / c[0]).real
        raise ValueError(
            f"the guess must be 'uniform', {self.ks.size} coefficients or a density on "
            f"{2 * self.modes} grid points, got shape {g.shape}"
        )

    def coefficients(self, a) -> np.ndarray:
        """c_0 … c_{modes−1} of the density with unknowns a (real: an even density)."""
        c = np.zeros(self.modes)
        c[0] = 1.0
        c[self.ks] = np.asarray(a)[: self.ks.size]
        return c

    def state(self, a, p: float) -> np.ndarray:
        """The density on the grid θ_j = 2πj/(2·modes) (``meanfield.theta_grid``)."""
        c = self.coefficients(a)
        theta = theta_grid(self.modes)
        k = np.arange(1, self.modes)
        return (1.0 + 2.0 * np.cos(np.outer(theta, k)) @ c[1:]) / (2 * np.pi)

    def measure(self, a, p: float) -> float:
        """The amplitude max_k |c_k| (k ≥ 1): r = |c_1| for the mode-1 branch, |c_k| for the mode-k branch."""
        return float(np.max(np.abs(np.asarray(a)))) if np.size(a) else 0.0

    def valid(self, a, p: float) -> bool:
        """A density the modes resolve: |c_k| < 1, the last quarter of the modes below 1e-6 (the linearized equation
        is formed on them), and their share of the potential, e^{−β}I_k(β)|c_k|, below 1e-13 of the first mode's."""
        a = np.asarray(a)
        weight = np.asarray(self.ive)[self.ks] * np.abs(a)
        return p > 0 and resolved(a, weight, self.ks >= 0.75 * self.modes)

    def stability(self, a, p: float):
        """(eigenvalues of the linearized equation, unstable, zero modes) at the density of a."""
        J, G = self.linearization(a, p)
        if not np.all(np.isfinite(np.asarray(J))):
            raise ConvergenceError(
                f"the linearized mean field is not finite at beta = {float(self.beta)!r}, {self.parameter} = "
                f"{float(p)!r} (it overflows float64 at this β)"
            )
        # the diffusion of the high modes makes the spectrum stiff: zero is judged against the first mode's rates
        sigma2 = 1.0 / self.coupling(float(p))
        slow = 0.5 * sigma2 + float(growth_rates(1, float(self.beta), self.model))
        values, unstable, _, _ = rest_point_spectrum(J, G, scale=slow)
        return values, unstable, G.shape[1]

    # -- the time-dependent equation ---------------------------------------------------------------------
    def velocity(self, v, sigma):
        """∂_t of the coefficients c_1 … c_{modes−1}, as real parts then imaginary parts (v of length
        2(modes − 1)), for the noise σ: −ik (ρX)^_k − (σ²/2)k² c_k, products formed on 4·modes points."""
        K = self.modes
        k = jnp.arange(1, K)
        c = jnp.concatenate([jnp.ones(1, jnp.complex128), v[: K - 1] + 1j * v[K - 1 :]])
        kk = jnp.arange(K)

        def grid(coef):
            full = jnp.zeros(self.L // 2 + 1, jnp.complex128).at[:K].set(coef)
            return jnp.fft.irfft(full, n=self.L) * self.L

        ive = jnp.asarray(self.ive)
        rho = grid(c) / (2 * jnp.pi)
        dphi = grid(1j * kk * ive * c)  # e^{−β} Φ'
        if self.model == "sa":
            X = dphi / (self.beta * grid(ive * c))
        else:
            X = dphi * (jnp.exp(self.beta) if self.model == "usa" else 1.0) / self.beta
        flux = jnp.fft.rfft(rho * X)[1:K] * (2 * jnp.pi / self.L)
        dc = -1j * k * flux - 0.5 * sigma**2 * k**2 * c[1:]
        return jnp.concatenate([dc.real, dc.imag])

    def linearization(self, a, p: float) -> tuple[np.ndarray, np.ndarray]:
        """(J, G): the Jacobian of ``velocity`` at the density of a, and the rotation's unit generator (none at
        the uniform density)."""
        c = self.coefficients(a)
        v = np.concatenate([c[1:], np.zeros(self.modes - 1)])
        sigma = 1.0 / np.sqrt(self.coupling(float(p)))
        J = np.asarray(_jacobian(self, jnp.asarray(v), jnp.asarray(sigma)))
        k = np.arange(1, self.modes)
        g = np.concatenate([np.zeros(self.modes - 1), -k * c[1:]])  # δc_k = −ik c_k (c real)
        norm = np.linalg.norm(g)
        G = (g / norm)[:, None] if norm > 1e-12 else np.zeros((g.size, 0))
        return J, G


@eqx.filter_jit
def _jacobian(system, v, sigma):
    return jax.jacfwd(lambda w: system.velocity(w, sigma))(v)


@eqx.filter_jit
def newton_parts(system, u, p):
    """The residual u − G(u) of a ``GibbsFixedPoint`` at parameter p and its Jacobian in u."""
    F = lambda x: system.residual(x, p)  # noqa: E731
    return F(u), jax.jacfwd(F)(u)


@eqx.filter_jit
def amplitude_parts(system, z, eps):
    """The residual with the first unknown held at ε and (the other unknowns, K) free, and its Jacobian."""

    def F(w):
        return system.residual(jnp.concatenate([eps[None], w[:-1]]), w[-1])

    return F(z), jax.jacfwd(F)(z)


# -- one stationary density ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StationaryDensity:
    """A stationary density of the noisy mean field on the circle (``stationary_circle``).

    theta, rho     the grid (2·modes points) and the density there; coefficients: c_0 … c_{modes−1} (real)
    amplitude      max_k |c_k|; order: |c_1|, the order parameter r = |∫ e^{iθ} ρ|
    sigma, coupling  the noise σ and K = 1/σ²;  residual: max|a − G(a)|;  iterations: Newton's
    eigenvalues    of the linearized equation (real parts largest first), the rotation's zero mode an exact zero
    unstable       eigenvalues with real part above 1e-9 × (σ²/2 + mode 1's growth rate) (zero mode excluded)
    """

    theta: np.ndarray
    rho: np.ndarray
    coefficients: np.ndarray
    amplitude: float
    order: float
    sigma: float
    coupling: float
    residual: float
    iterations: int
    eigenvalues: np.ndarray
    unstable: int

    @property
    def stable(self) -> bool:
        return self.unstable == 0


def stationary_circle(
    beta: float,
    sigma: float,
    guess=None,
    *,
    model: str = "usa",
    modes: int = 48,
    symmetry: int = 1,
    tol: float = 1e-13,
    max_iter: int = 60,
) -> StationaryDensity:
    """The stationary density of the noisy mean field on the circle nearest the guess, by Newton's method on
    the Gibbs fixed point (``StationaryCircle``), with its stability.

    beta, sigma  β > 0 and the noise σ > 0 (``meanfield_circle``'s ``noise``, ``Noisy``'s σ on the circle)
    guess        None (the uniform density), a density sampled on ``theta_grid(modes)``, or the coefficients
                 of the symmetric modes; model, modes, symmetry: as ``StationaryCircle``
    tol, max_iter  Newton stops when max|a − G(a)| ≤ tol; ConvergenceError when it does not within max_iter
    """
    sigma = check_sigma(sigma)
    system = StationaryCircle(beta, model, modes=modes, symmetry=symmetry)
    a, residual, iteration = newton_fixed_point(
        system, system.start(guess, sigma), sigma, tol=tol, max_iter=max_iter, name="stationary_circle"
    )
    values, unstable, _ = system.stability(a, sigma)
    c = system.coefficients(a)
    return StationaryDensity(
        theta_grid(system.modes),
        system.state(a, sigma),
        c,
        system.measure(a, sigma),
        float(abs(c[1])),
        sigma,
        1.0 / sigma**2,
        residual,
        iteration,
        values,
        unstable,
    )


# -- closed forms at the uniform density -------------------------------------------------------------------


def branch_threshold(beta, k: int = 1, model: str = "usa") -> np.ndarray:
    """σ_k: the noise at which the branch of mode k leaves the uniform density, where its growth rate
    (``growth_rates``) k² I_k/β − σ²k²/2 (USA) vanishes: σ_k² = 2 rate_k / k² (2I_k/β for USA)."""
    k = check_int("k", k, 1)
    rate = growth_rates(k, beta, model)
    return np.sqrt(2.0 * np.asarray(rate) / k**2)


def pitchfork_coefficient(
    beta: float, model: str = "usa", k: int = 1, *, modes: int = 48, amplitude: float = 1e-3
) -> float:
    """dK/d(c_k²) at the branch point of mode k: K(c_k) = K_k + coefficient·c_k² + O(c_k⁴) along the branch
    (K = 1/σ²), from the branch solved at c_k = ε and 2ε (ε = ``amplitude``; Richardson). Positive: the branch
    exists for K > K_k, a supercritical pitchfork (continuous transition); negative: subcritical (docs/model.md
    §13.3). beta > 0; model, modes: as ``StationaryCircle``; k: the mode. ConvergenceError, naming the steps and the
    residual, where Newton does not converge in ``PITCHFORK_STEPS`` steps at either amplitude."""
    system = StationaryCircle(beta, model, modes=modes, symmetry=k, parameter="coupling")
    K0 = float(1.0 / branch_threshold(beta, k, model) ** 2)

    def failure(eps, step, residual):
        return (
            f"pitchfork_coefficient: Newton did not converge on the branch of mode {k} at c_{k} = {eps:g} "
            f"(β = {beta:g}, model {model!r}) in {step} of {PITCHFORK_STEPS} steps: residual max|a − G(a)| = "
            f"{residual:.3g}, tolerance 1e-15; a smaller amplitude (|c_k| < 1 for a density, 2·amplitude is "
            "solved too) or more modes"
        )

    return pitchfork_from_amplitudes(system, K0, amplitude, system.ks.size, failure)
