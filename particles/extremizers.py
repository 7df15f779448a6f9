"""Energy extremizers of a few tokens for an anisotropic kernel (Burger, Kabri, Korolev, Roith, Weigand,
arXiv 2501.03096, with the authors' package TimRoith/TransformerDynamics).

The energy of n tokens on the circle for a symmetric matrix D (the paper's QᵀK; β = 1),

    E_D(x) = (1/n²) Σ_i Σ_j e^{⟨x_i, D x_j⟩},

is lowered by USA with K = D and V = −D (``USA(1.0, K=D, V=-D)``: ẋ_i = −(1/n) P_{x_i} Σ_j e^{⟨x_i,Dx_j⟩} D x_j, the
gradient descent of (n/2)E_D) and raised by V = D. The paper's four-token experiment (its Figure 4) takes
D = diag(1, τ). Four tokens at the corners (±a, ±b) of a rectangle, a² + b² = 1, have

    E_D = (1/16)·4 Σ_{±,±} e^{±a² ± τ b²} = cosh(a²) cosh(τ b²),

so among rectangles the energy is stationary where d/ds [log cosh s + log cosh(τ(1 − s))] = 0, s = a²:

    tanh(a²) = τ tanh(τ b²),    i.e.   tanh(D_11 x_1²) / tanh(D_22 x_2²) = τ  at every token,

the ratio the authors' script reports (``tanh_min*.csv``). The left side increases and the right decreases in s,
so there is one such rectangle for every τ ≠ 0, the same for τ and −τ (cosh is even). Whether it is a minimizer
of E_D among all configurations is what ``equilibrium``'s Morse index tells.

For the paper's Figure 7 (two tokens, D = diag(−1, τ), −1 ≤ τ ≤ 1) the candidate maximizers have closed-form
energies: one cluster at ±e_2, e^τ; the pair ±e_1, cosh 1; the pair ±e_2, cosh τ (``pair_energies``).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["kernel_energy", "rectangle", "rectangle_ratio", "pair_energies"]


def kernel_energy(x, D) -> float:
    """E_D(x) = (1/n²) Σ_ij e^{⟨x_i, D x_j⟩} of a configuration x (n, d) (float64)."""
    x = np.asarray(x, dtype=np.float64)
    D = np.asarray(D, dtype=np.float64)
    return float(np.mean(np.exp(x @ D @ x.T)))


def rectangle(tau: float) -> np.ndarray:
    """(4, 2) the rectangle (±a, ±b) with tanh(a²) = τ tanh(τ b²), a² + b² = 1 (τ ≠ 0), by bisection on s = a²."""
    tau = float(tau)
    if tau == 0.0 or not math.isfinite(tau):
        raise ValueError(f"tau must be a finite nonzero number, got {tau!r}")
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if math.tanh(mid) - tau * math.tanh(tau * (1.0 - mid)) < 0:
            lo = mid
        else:
            hi = mid
    a, b = math.sqrt(0.5 * (lo + hi)), math.sqrt(1.0 - 0.5 * (lo + hi))
    return np.array([[a, b], [-a, b], [-a, -b], [a, -b]])


def rectangle_ratio(x, tau: float) -> float:
    """The mean over tokens of tanh(x_1²)/tanh(τ x_2²) (D = diag(1, τ)): τ at the stationary rectangle; the number
    the authors' script saves. NaN where a token sits on the first axis (x_2 = 0)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.mean(np.tanh(x[:, 0] ** 2) / np.tanh(float(tau) * x[:, 1] ** 2)))


def pair_energies(tau) -> dict[str, np.ndarray]:
    """The energies E_D of two tokens for D = diag(−1, τ): one cluster at e_2 (e^τ), the pair ±e_1 (cosh 1), the pair
    ±e_2 (cosh τ), the three states of the paper's Figure 7."""
    tau = np.asarray(tau, dtype=np.float64)
    return {"single cluster": np.exp(tau), "pair on e1": np.full_like(tau, math.cosh(1.0)), "pair on e2": np.cosh(tau)}
