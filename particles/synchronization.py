"""Synchronization on the circle for either sign of β (Polyanskiy, Rigollet, Yao, arXiv 2507.22857).

On the circle, USA with Q = K = V = I moves angles by θ̇_i = (1/n) Σ_j h(θ_j − θ_i) with
h(φ) = e^{β cos φ} sin φ, the gradient ascent of the interaction energy Σ_ij e^{β cos(θ_i − θ_j)}/(2βn²).
Global synchronization (almost every start ends in one point) holds for every n when β ≥ −0.16
(``SYNC_BETA``; earlier known for 0 ≤ β ≤ 1), and fails below −2/3 (``NO_SYNC_BETA``).

Where −2/3 comes from (our derivation, which gives the paper's number): n = 3 tokens at the vertices of
an equilateral triangle are an equilibrium for every β. Perturbing θ_i by ε_i gives
ε̇_i = (1/n) Σ_j h'(θ_j − θ_i)(ε_j − ε_i), a circulant matrix whose Fourier modes k = 1, 2 have the
eigenvalue

    μ(β) = (1/3) · 2 h'(2π/3) · (cos(2π/3) − 1) = e^{−β/2} (1/2 + 3β/4),     h'(φ) = e^{β cos φ}(cos φ − β sin² φ)

(k = 0 is the common rotation, eigenvalue 0). So the triangle is linearly stable exactly when β < −2/3,
and from a set of starts of positive measure three tokens never synchronize. SA, whose weights divide
by the row sums Z = e^β + 2 e^{−β/2}, has the eigenvalue 3μ/Z: the same sign, the same threshold.
"""

from __future__ import annotations

import numpy as np

from .checks import check_choice

__all__ = ["SYNC_BETA", "NO_SYNC_BETA", "triangle_rate"]

SYNC_BETA = -0.16
"""Every start synchronizes for β ≥ this, for every n (arXiv 2507.22857, Thm on self-attention dynamics)."""

NO_SYNC_BETA = -2.0 / 3.0
"""Below it global synchronization fails (arXiv 2507.22857): the equilateral triangle of n = 3 is stable."""


def triangle_rate(beta, model: str = "usa") -> np.ndarray:
    """The double nonzero eigenvalue of the angles' linearization at the equilateral triangle (n = 3).

    USA ([GLPR] time): e^{−β/2}(1/2 + 3β/4); SA: 3 e^{−β/2}(1/2 + 3β/4) / (e^β + 2e^{−β/2}). Negative
    (the triangle attracts) exactly for β < −2/3. β: a number or an array, of either sign.
    """
    check_choice("model", model, ("sa", "usa"))
    beta = np.asarray(beta, dtype=float)
    rate = np.exp(-beta / 2.0) * (0.5 + 0.75 * beta)
    if model == "sa":
        rate = 3.0 * rate / (np.exp(beta) + 2.0 * np.exp(-beta / 2.0))
    return rate
