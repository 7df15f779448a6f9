"""Zonal stationary densities of the noisy mean field on S^{d−1}, d ≥ 3: the Gibbs fixed point in Gegenbauer moments,
its stability in the zonal sector, its branch from the uniform density and that branch's pitchfork coefficient.

The noisy mean field of USA on S^{d−1} (``meanfield_sphere`` for d = 3) moves a density ρ by
∂_t ρ = −div(ρ X[ρ]) + (σ²/2) Δρ, X = ∇Φ/β ([GLPR] time; × e^{−β} "usa-rescaled"; ∇Φ/(βΦ) SA), with
Φ[ρ](x) = ∫ e^{β⟨x,y⟩} ρ(dy). X is a gradient on a compact manifold, so a stationary density has zero flux,
ρX = (σ²/2)∇ρ, and is the Gibbs density of its own potential, K = 1/σ²:

    USA:  ρ ∝ exp(2KΦ/β)        "usa-rescaled":  ρ ∝ exp(2K e^{−β} Φ/β)        SA:  ρ ∝ Φ^{2K/β}

Zonal densities, functions of t = ⟨x, e⟩ alone. With λ = (d − 2)/2, P_k = C_k^λ / C_k^λ(1) the Gegenbauer
polynomials normalized to P_k(1) = 1 (P_{k+1} = (2(k+λ) t P_k − k P_{k−1})/(k + 2λ)), N_k = 1/⟨P_k²⟩ the
dimension of the degree-k harmonics, and the moments m_k = ∫ P_k(⟨x, e⟩) ρ(dx) (m_0 = 1, m_1 the order
parameter ‖∫ x ρ‖), the addition theorem and Funk–Hecke give

    e^{β⟨x,y⟩} = Σ_k μ_k N_k P_k(⟨x,y⟩),   Φ[ρ](x) = Σ_k μ_k N_k m_k P_k(t),   μ_k = Γ(d/2)(2/β)^λ I_{k+λ}(β),

so the fixed point is a problem in the moments alone: m = G(m), G(m)_j = ⟨P_j e^U⟩/⟨e^U⟩ with U the exponent above
and ⟨·⟩ the uniform average, ∫_{−1}^{1} · (1 − t²)^{(d−3)/2} dt normalized, taken by Gauss–Jacobi quadrature on
4·``modes`` nodes. At the uniform density G's Jacobian is diag(2Kμ_k/β) (USA): degree k branches off at
K_k = β/(2μ_k), σ_k² = 2μ_k/β, where its growth rate k(k+d−2)(μ_k/β − σ²/2) vanishes; K_1 is the paper's K_#^{(d)}.

Stability in the zonal sector. G's Jacobian is C·D, C the covariance of the P_j under ρ and D = diag(2Kμ_jN_j/β)
(USA, rescaled), similar to the symmetric D^{1/2}CD^{1/2}: its eigenvalues are real, and the free energy
(σ²/2)∫ρ log ρ − (1/2β)∬ e^{β⟨x,y⟩}ρρ, whose Wasserstein gradient flow the equation is, has a positive Hessian
at the fixed point along zonal perturbations exactly when every eigenvalue of C·D is below 1. ``stability``
reports the eigenvalues of C·D − I (positive: a zonal perturbation grows); perturbations that are not zonal
(the rotations of the axis e, zero modes, and higher non-zonal harmonics) are not computed.

The side of the pitchfork (docs/model.md §13.6). Expanding G to third order in m_1 (m_2 = O(m_1²), the
other moments of higher order) along the degree-1 branch gives

    K / K_# = 1 + m_1² d (1 − dρ_d) / ((d + 2)(1 − ρ_d)) + O(m_1⁴),     ρ_d = I_{d/2+1}(β) / I_{d/2}(β),

the circle's 1 + (c_1²/2)(1 − 2ρ)/(1 − ρ) at d = 2: supercritical for ρ_d < 1/d, subcritical beyond.
``sphere_pitchfork_coefficient`` computes dK/dm_1² from the nonlinear fixed point instead (no expansion), and
``sphere_critical_beta`` the β where it changes sign.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_choice, check_int
from ..particles.errors import ConvergenceError, InputError
from ..particles.fields import KERNEL_MODELS
from .stationary import (
    PARAMETERS,
    PITCHFORK_STEPS,
    GibbsFixedPoint,
    check_beta,
    check_sigma,
    newton_fixed_point,
    newton_parts,
    pitchfork_from_amplitudes,
    resolved,
)

__all__ = [
    "StationarySphere",
    "ZonalDensity",
    "stationary_sphere",
    "zonal_polynomials",
    "sphere_branch_threshold",
    "sphere_pitchfork_coefficient",
    "sphere_critical_beta",
]

D_MAX = 64
"""The largest dimension of the ambient space taken (the quadrature's weight (1 − t²)^{(d−3)/2} stays resolved)."""


def zonal_polynomials(d: int, modes: int, t) -> np.ndarray:
    """P_k(t) = C_k^{(d−2)/2}(t) / C_k^{(d−2)/2}(1), k = 0 … modes − 1, shape (modes,) + t.shape, by the three-term
    recurrence P_{k+1} = (2(k + λ) t P_k − k P_{k−1}) / (k + 2λ), λ = (d − 2)/2 (Chebyshev T_k at d = 2, Legendre
    at d = 3, U_k/(k + 1) at d = 4)."""
    d = check_int("d", d, 2)
    modes = check_int("modes", modes, 1)
    t = np.asarray(t, dtype=np.float64)
    lam = (d - 2) / 2.0
    out = np.empty((modes,) + t.shape)
    out[0] = 1.0
    if modes > 1:
        out[1] = t
    for k in range(1, modes - 1):
        out[k + 1] = (2.0 * (k + lam) * t * out[k] - k * out[k - 1]) / (k + 2.0 * lam)
    return out


@functools.lru_cache(maxsize=32)
def _quadrature(d: int, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Jacobi nodes in t and weights of the uniform measure's t-marginal ∝ (1 − t²)^{(d−3)/2} (sum 1)."""
    from scipy.special import roots_jacobi  # here: scipy costs a third of a second to import

    alpha = (d - 3) / 2.0
    t, w = roots_jacobi(nodes, alpha, alpha)
    return np.asarray(t), np.asarray(w) / np.sum(w)


@functools.lru_cache(maxsize=64)
def _scaled_kernel(beta: float, d: int, modes: int) -> np.ndarray:
    """e^{−β} μ_k = Γ(d/2)(2/β)^λ e^{−β} I_{k+λ}(β), k = 0 … modes − 1: the Funk–Hecke eigenvalues of e^{β(⟨x,y⟩−1)}."""
    from scipy.special import ive

    lam = (d - 2) / 2.0
    k = np.arange(modes)
    return np.exp(math.lgamma(d / 2.0) + lam * math.log(2.0 / beta)) * ive(k + lam, beta)


class StationarySphere(GibbsFixedPoint):
    """The zonal stationary densities of the noisy mean field on S^{d−1} (module docstring) as a continuation
    system in the noise σ (``parameter="noise"``) or the coupling K = 1/σ² (``"coupling"``).

    beta   inverse temperature > 0;  d: the dimension of the ambient space, 3 ≤ d ≤ 64 (S² is d = 3; the circle
           is ``StationaryCircle``);  model: "usa" ([GLPR] time), "usa-rescaled" or "sa"
    modes  the moments m_1 … m_{modes−1} are the unknowns (the Gibbs density is formed on 4·modes nodes)

    A PyTree (β and the tables are leaves): the compiled residual and Jacobians serve every β of one (d, modes).
    """

    beta: jax.Array
    kernel: jax.Array
    polys: jax.Array
    weights: jax.Array
    dims: jax.Array
    d: int = eqx.field(static=True)
    model: str = eqx.field(static=True)
    modes: int = eqx.field(static=True)
    parameter: str = eqx.field(static=True)

    def __init__(self, beta: float, d: int = 3, model: str = "usa", *, modes: int = 32, parameter: str = "noise"):
        self.d = check_int("d", d, 3, D_MAX)
        self.model = check_choice("model", model, KERNEL_MODELS)
        beta = check_beta(beta, self.model)
        self.modes = check_int("modes", modes, 4, 1024)
        self.parameter = check_choice("parameter", parameter, PARAMETERS)
        t, w = _quadrature(self.d, self.L)
        P = zonal_polynomials(self.d, self.modes, t)
        self.beta = jnp.asarray(beta, dtype=jnp.float64)
        self.kernel = jnp.asarray(_scaled_kernel(beta, self.d, self.modes))
        self.polys = jnp.asarray(P)  # (modes, L)
        self.weights = jnp.asarray(w)
        self.dims = jnp.asarray(1.0 / (P**2 @ w))  # N_k, exact: the quadrature integrates degree < 2L − 1

    @property
    def L(self) -> int:
        """Quadrature nodes in t on which the Gibbs density is formed."""
        return 4 * self.modes

    @property
    def nodes(self) -> np.ndarray:
        """The nodes t_i = ⟨x, e⟩ of the quadrature (increasing)."""
        return _quadrature(self.d, self.L)[0]

    # -- the Gibbs map (coupling, residual and motion: ``GibbsFixedPoint``) --------------------------------
    def potential(self, m, K):
        """The exponent of the Gibbs density at the nodes (up to a constant) for the moments m_1 … m_{modes−1}."""
        wave = (self.kernel[1:] * self.dims[1:] * m) @ self.polys[1:]  # e^{−β}(Φ − μ_0)
        if self.model == "sa":
            return (2.0 * K / self.beta) * jnp.log(self.kernel[0] + wave)
        scale = jnp.exp(self.beta) if self.model == "usa" else 1.0
        return (2.0 * K * scale / self.beta) * wave

    def gibbs(self, m, K):
        """G(m): the moments ⟨P_k e^U⟩/⟨e^U⟩, k ≥ 1, of the Gibbs density of m's potential."""
        U = self.potential(m, K)
        w = self.weights * jnp.exp(U - jnp.max(U))
        return (self.polys[1:] @ w) / jnp.sum(w)

    # -- the continuation system -------------------------------------------------------------------------
    def start(self, guess, p: float) -> np.ndarray:
        """Unknowns of a guess: None or "uniform" (m = 0), the moments m_1 … m_{modes−1}, or a zonal density (any
        positive scale) sampled at ``nodes``, whose moments are taken."""
        if guess is None or (isinstance(guess, str) and guess == "uniform"):
            return np.zeros(self.modes - 1)
        g = np.asarray(guess, dtype=np.float64)
        if g.shape == (self.modes - 1,):
            return g
        if g.shape == (self.L,):
            w = np.asarray(self.weights) * g
            return np.asarray(self.polys)[1:] @ w / np.sum(w)
        raise InputError(
            f"the guess must be 'uniform', {self.modes - 1} moments or a zonal density at the {self.L} nodes, "
            f"got shape {g.shape}"
        )

    def state(self, m, p: float) -> np.ndarray:
        """The Gibbs density of m's potential at ``nodes``, against the area of S^{d−1} (∫ρ = 1)."""
        U = np.asarray(self.potential(jnp.asarray(m), self.coupling(float(p))))
        w = np.exp(U - U.max())
        area = 2.0 * math.pi ** (self.d / 2.0) / math.gamma(self.d / 2.0)
        return w / (np.sum(np.asarray(self.weights) * w) * area)

    def measure(self, m, p: float) -> float:
        """The order parameter |m_1| = ‖∫ x ρ‖."""
        return float(abs(np.asarray(m)[0]))

    def valid(self, m, p: float) -> bool:
        """Moments the modes resolve: |m_k| < 1, the last quarter of them below 1e-6 and their share of the
        potential, e^{−β}μ_k N_k |m_k|, below 1e-13 of the largest."""
        m = np.asarray(m)
        weight = np.asarray(self.kernel)[1:] * np.asarray(self.dims)[1:] * np.abs(m)
        return p > 0 and resolved(m, weight, np.arange(1, self.modes) >= 0.75 * self.modes)

    def stability(self, m, p: float):
        """(eigenvalues of G's Jacobian C·D minus one, largest first; how many are positive (beyond 1e-9);
        0 zero modes): the zonal sector's stability (module docstring)."""
        _, J = newton_parts(self, jnp.asarray(m), jnp.asarray(float(p)))
        DG = np.eye(self.modes - 1) - np.asarray(J)
        if not np.all(np.isfinite(DG)):
            raise ConvergenceError(
                f"the Gibbs map's Jacobian is not finite at beta = {float(self.beta)!r}, {self.parameter} = "
                f"{float(p)!r} (it overflows float64 at this β)"
            )
        values = np.sort(np.linalg.eigvals(DG).real)[::-1] - 1.0
        return values, int(np.sum(values > 1e-9)), 0


# -- one stationary density ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ZonalDensity:
    """A zonal stationary density of the noisy mean field on S^{d−1} (``stationary_sphere``).

    t, rho       the quadrature nodes t = ⟨x, e⟩ and the density there (against the area, ∫ρ = 1)
    moments      m_0 … m_{modes−1} (m_0 = 1);  order: m_1 = ‖∫ x ρ‖ (signed: the density leans to t > 0 when > 0)
    sigma, coupling  the noise σ and K = 1/σ²;  residual: max|m − G(m)|;  iterations: Newton's
    eigenvalues  of G's Jacobian minus one (zonal sector, largest first);  unstable: how many are > 1e-9
    """

    t: np.ndarray
    rho: np.ndarray
    moments: np.ndarray
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


def stationary_sphere(
    beta: float,
    d: int,
    sigma: float,
    guess=None,
    *,
    model: str = "usa",
    modes: int = 32,
    tol: float = 1e-13,
    max_iter: int = 60,
) -> ZonalDensity:
    """The zonal stationary density of the noisy mean field on S^{d−1} nearest the guess, by Newton's method on the
    Gibbs fixed point in Gegenbauer moments (``StationarySphere``), with its zonal stability.

    beta, d, sigma  β > 0, the ambient dimension 3 ≤ d ≤ 64 and the noise σ > 0 (``Noisy``'s σ)
    guess           None (the uniform density), the moments m_1 … m_{modes−1}, or a zonal density at the nodes
    tol, max_iter   Newton stops when max|m − G(m)| ≤ tol; ConvergenceError when it does not within max_iter
    """
    sigma = check_sigma(sigma)
    system = StationarySphere(beta, d, model, modes=modes)
    m, residual, iteration = newton_fixed_point(
        system, system.start(guess, sigma), sigma, tol=tol, max_iter=max_iter, name="stationary_sphere"
    )
    values, unstable, _ = system.stability(m, sigma)
    return ZonalDensity(
        system.nodes,
        system.state(m, sigma),
        np.concatenate([[1.0], m]),
        float(m[0]),
        sigma,
        1.0 / sigma**2,
        residual,
        iteration,
        values,
        unstable,
    )


# -- the branch point and the side of the pitchfork ------------------------------------------------------------


def sphere_branch_threshold(beta: float, d: int, k: int = 1, model: str = "usa") -> float:
    """σ_k: the noise at which degree k's branch of zonal densities leaves the uniform density, where G's Jacobian
    there, 2Kμ_k/β (USA; 2K e^{−β}μ_k/β rescaled; 2Kμ_k/(βμ_0) SA), reaches 1 (module docstring)."""
    system = StationarySphere(beta, d, model, modes=max(4, check_int("k", k, 1) + 1))
    kern = np.asarray(system.kernel)
    scale = {"usa": math.exp(float(beta)), "usa-rescaled": 1.0, "sa": 1.0 / kern[0]}[system.model]
    return math.sqrt(2.0 * kern[k] * scale / float(beta))


def sphere_pitchfork_coefficient(
    beta: float, d: int, model: str = "usa", *, modes: int = 32, amplitude: float = 5e-3
) -> float:
    """dK/dm_1² at the branch point of degree 1: K(m_1) = K_# + coefficient·m_1² + O(m_1⁴) along the branch, from
    the nonlinear fixed point solved by Newton with m_1 = ε and 2ε held (ε = ``amplitude``; Richardson). Positive:
    supercritical (a continuous transition); negative: subcritical. ConvergenceError, naming the residual, where
    Newton does not converge in ``PITCHFORK_STEPS`` steps."""
    system = StationarySphere(beta, d, model, modes=modes, parameter="coupling")
    K0 = 1.0 / sphere_branch_threshold(beta, d, 1, model) ** 2

    def failure(eps, step, residual):
        return (
            f"sphere_pitchfork_coefficient: Newton did not converge on the degree-1 branch at m_1 = {eps:g} "
            f"(β = {beta:g}, d = {d}, model {model!r}) in {step} of {PITCHFORK_STEPS} steps: residual "
            f"{residual:.3g}, tolerance 1e-15; a smaller amplitude or more modes"
        )

    return pitchfork_from_amplitudes(system, K0, amplitude, system.modes - 1, failure)


def sphere_critical_beta(
    d: int, model: str = "usa", *, modes: int = 32, bracket: tuple[float, float] = (0.5, 8.0), xtol: float = 1e-12
) -> float:
    """β_*^{(d)}: the β where ``sphere_pitchfork_coefficient`` changes sign (Brent's method on ``bracket``, which it
    must straddle: supercritical at its lower end, subcritical at its upper; InputError otherwise)."""
    from scipy.optimize import brentq

    lo, hi = (float(b) for b in bracket)

    def f(beta):
        return sphere_pitchfork_coefficient(beta, d, model, modes=modes)

    f_lo, f_hi = f(lo), f(hi)
    if not (f_lo > 0 > f_hi):
        raise InputError(
            f"sphere_critical_beta: the bracket {bracket} must hold the sign change of the pitchfork coefficient "
            f"(> 0 at its lower end, < 0 at its upper), got {f_lo:+.3g} and {f_hi:+.3g}"
        )
    return float(brentq(f, lo, hi, xtol=xtol))
