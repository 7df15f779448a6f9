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

__all__ = [
    "kernel_energy",
    "rectangle",
    "rectangle_ratio",
    "pair_energies",
    "candidate",
    "CANDIDATES",
    "PAIR_STATES",
    "AUTHORS_RATIO",
    "AUTHORS_PAIRS",
]


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


CANDIDATES = ("rectangle", "cluster on e2", "cluster on e1", "pair on e1", "pair on e2", "cross")
"""The four-token rest points tried for each τ (D = diag(1, τ))."""
AUTHORS_RATIO = {  # tanh(x_1²)/tanh(τ x_2²) at the end of the authors' flow, exps/results/tanh_min<step>.csv
    5e-4: {
        0.5: 0.5,
        1.0: 1.0,
        2.0: 1.999610185623168945,
        3.0: 2.999534368515014648,
        4.0: 3.999484777450561523,
        5.0: 4.999407768249511719,
        6.0: 5.999267101287841797,
        7.0: 7.000351905822753906,
        8.0: 7.999470710754394531,
        9.0: 8.999323844909667969,
        10.0: 9.999484062194824219,
    },
    5e-2: {
        1.0: 1.0,
        2.0: 1.999998092651367188,
        3.0: 2.999999761581420898,
        4.0: 4.000003337860107422,
        5.0: 5.000008106231689453,
        6.0: 0.0,
        7.0: 0.0,
        8.0: 0.0,
        9.0: 0.0,
        10.0: 0.0,
    },
}
"""The authors' numbers (TimRoith/TransformerDynamics at c13c461, float32), keyed by their explicit step size."""
AUTHORS_PAIRS = (  # τ, then E_D of: one cluster at e_2, the pair ±e_1, the pair ±e_2 (exps/results/maxid.csv)
    (-1.0, 0.3678794503211975098, 1.543080568313598633, 1.543080568313598633),
    (-0.4949495196342468262, 0.6096016764640808105, 1.543080568313598633, 1.125008583068847656),
    (-0.01010102033615112305, 0.9899498224258422852, 1.543080568313598633, 1.000051021575927734),
    (0.5151515007019042969, 1.673892021179199219, 1.543080568313598633, 1.135651111602783203),
    (1.0, 2.718281745910644531, 1.543080568313598633, 1.543080568313598633),
)
PAIR_STATES = ("single cluster", "pair on e1", "pair on e2")
"""The rest points of ``pair_energies``, in its order."""


def candidate(name: str, tau: float) -> np.ndarray:
    """The four-token guess ``name`` (CANDIDATES) for D = diag(1, τ)."""
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    return {
        "rectangle": lambda: rectangle(tau),
        "cluster on e2": lambda: np.stack([e2] * 4),
        "cluster on e1": lambda: np.stack([e1] * 4),
        "pair on e1": lambda: np.stack([e1, e1, -e1, -e1]),
        "pair on e2": lambda: np.stack([e2, e2, -e2, -e2]),
        "cross": lambda: np.stack([e1, e2, -e1, -e2]),
    }[name]()
