"""Regular configurations that are rest points of SA and USA, and the regular simplex's spectrum in closed form.

Every configuration here is the vertex set of a regular polytope (or a regular polygon) centred at the origin:
its symmetry group acts transitively on the vertices and fixes, at each vertex x_i, only the line of x_i, so
Σ_j g(⟨x_i, x_j⟩) x_j is parallel to x_i for every g and the tangent velocity of SA and USA (Q = K = V = I, any
β) vanishes: each is a rest point for every β (docs/model.md §13).

The regular simplex (n tokens with ⟨x_i, x_j⟩ = −1/(n − 1), spanning n − 1 dimensions of R^d, d ≥ n − 1).
Linearizing USA ([GLPR] time) there (docs/model.md §13.2 derives it), the n(d − 1) eigenvalues are, with
e = e^{−β/(n−1)},

    μ_1 = e ((n − 2)/(n − 1) + nβ/(n − 1)²)      multiplicity n − 1          (the standard representation of S_n)
    μ_2 = 2βe/(n − 1)                             multiplicity n(n − 3)/2     (symmetric, zero row sums)
    μ_3 = e                                       multiplicity d − n + 1      (all tokens towards one direction
                                                                              outside their span)
    0                                             multiplicity (n−1)(n−2)/2 + (n−1)(d−n+1)   (rotations)

SA's are n/(e^β + (n − 1)e) times these, USA in the rescaled time e^{−β} times, V = λI multiplies them by λ.
For n = 3, μ_1 is the triangle's μ(β) = e^{−β/2}(1/2 + 3β/4) of arXiv 2507.22857 (``synchronization``). With
d = n − 1 the simplex is linearly stable exactly when μ_1 < 0 and μ_2 < 0, i.e. β < −(n − 1)(n − 2)/n
(``simplex_threshold``: −2/3 for the triangle); with d ≥ n, μ_3 > 0 always: never stable.
"""

from __future__ import annotations

import itertools

import numpy as np

from .checks import check_choice, check_int

__all__ = ["simplex", "cross_polytope", "hypercube", "regular_polygon", "antipodal_pair", "simplex_spectrum",
           "simplex_threshold", "POLYTOPES"]


def simplex(n: int, d: int | None = None) -> np.ndarray:
    """(n, d) the regular simplex: n unit vectors with ⟨x_i, x_j⟩ = −1/(n − 1), in the first n − 1 coordinates
    of R^d (d ≥ n − 1, default n − 1; n ≥ 2)."""
    n = check_int("n", n, 2)
    d = n - 1 if d is None else check_int("d", d, max(n - 1, 2))
    centred = np.eye(n) - 1.0 / n
    basis = np.linalg.qr(centred)[0][:, : n - 1]  # an orthonormal basis of 1^⊥ in R^n
    points = centred @ basis
    out = np.zeros((n, max(d, 2)))
    out[:, : n - 1] = points / np.linalg.norm(points, axis=1, keepdims=True)
    return out


def cross_polytope(d: int) -> np.ndarray:
    """(2d, d) the cross-polytope ±e_1, …, ±e_d: d antipodal pairs along orthogonal axes (d ≥ 2)."""
    d = check_int("d", d, 2)
    return np.concatenate([np.eye(d), -np.eye(d)])


def hypercube(d: int) -> np.ndarray:
    """(2^d, d) the vertices (±1, …, ±1)/√d of the hypercube (2 ≤ d ≤ 12)."""
    d = check_int("d", d, 2, 12)
    return np.array(list(itertools.product((1.0, -1.0), repeat=d))) / np.sqrt(d)


def regular_polygon(n: int, d: int = 2) -> np.ndarray:
    """(n, d) n equally spaced points of the unit circle in the first two coordinates of R^d (n ≥ 2)."""
    n = check_int("n", n, 2)
    d = check_int("d", d, 2)
    theta = 2.0 * np.pi * np.arange(n) / n
    out = np.zeros((n, d))
    out[:, 0], out[:, 1] = np.cos(theta), np.sin(theta)
    return out


def antipodal_pair(d: int) -> np.ndarray:
    """(2, d) the pair ±e_1 (d ≥ 2): the simplex of two tokens."""
    return simplex(2, check_int("d", d, 2))


POLYTOPES = {"simplex": simplex, "cross-polytope": cross_polytope, "hypercube": hypercube,
             "polygon": regular_polygon}
"""The configurations by name."""


def simplex_spectrum(beta, n: int, d: int | None = None, model: str = "usa") -> tuple[np.ndarray, np.ndarray]:
    """(eigenvalues, multiplicities) of the linearized flow at the regular simplex of n tokens in R^d (module
    docstring), Q = K = V = I: μ_1, μ_2, μ_3 and 0, in that order, multiplicities summing to n(d − 1).

    beta: a number of either sign; n ≥ 3 (for n = 2, the antipodal pair, only μ_3 and 0 remain: use
    multiplicities as returned); d ≥ n − 1 (default n − 1); model "usa" ([GLPR] time), "usa-rescaled" or "sa".
    """
    n = check_int("n", n, 2)
    d = n - 1 if d is None else check_int("d", d, max(n - 1, 2))
    d = max(d, 2)
    check_choice("model", model, ("usa", "usa-rescaled", "sa"))
    beta = float(beta)
    e = np.exp(-beta / (n - 1))
    values = np.array([e * ((n - 2) / (n - 1) + n * beta / (n - 1) ** 2), 2.0 * beta * e / (n - 1), e, 0.0])
    if n == 2:
        mult = np.array([0, 0, d - 1, d - 1])
    else:
        mult = np.array([n - 1, n * (n - 3) // 2, d - n + 1, (n - 1) * (n - 2) // 2 + (n - 1) * (d - n + 1)])
    if model == "sa":
        values = values * n / (np.exp(beta) + (n - 1) * e)
    elif model == "usa-rescaled":
        values = values * np.exp(-beta)
    return values, mult


def simplex_threshold(n: int) -> float:
    """β_n = −(n − 1)(n − 2)/n: the regular simplex of n ≥ 3 tokens spanning R^{n−1} is linearly stable (SA, USA)
    exactly for β < β_n, where μ_1 turns negative (μ_2 already is); −2/3 for the triangle."""
    n = check_int("n", n, 3)
    return -(n - 1) * (n - 2) / n
