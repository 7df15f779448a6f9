"""Closed forms for self-attention with a symmetric value matrix that is also its key matrix (arXiv 2604.26085,
2511.11553), derived in docs/model.md ("Spectral selection"):

    ẋ_i = P⊥_{x_i} Σ_j softmax_j(β⟨x_i, V x_j⟩) V x_j,   V = Vᵀ = Σ_p λ_p e_p e_pᵀ,

which is ``SA(β, K=V, V=V)`` (Q = I, so QᵀK = V). Every formula here is checked against the tangent Jacobian of
``solvers.equilibrium`` in tests/studies/spectral_selection/.

Pure-mode states x_i = s_i e_p (n₊ signs +, n₋ signs −) are rest points. Their tangent Jacobian splits over the
other eigendirections e_k (k ≠ p) into n × n blocks λ_k A − λ_p diag(s_i Σ_j A_ij s_j), A the attention at the rest
point; with the two sign groups g = ±, B_gh = n_h e^{βλ_p s_g s_h} / Σ_h' n_h' e^{βλ_p s_g s_h'} and
μ_g = Σ_h B_gh s_g s_h, each block has the eigenvalues −λ_p μ_g (n_g − 1 times: the groups' internal modes) and
those of the group matrix λ_k B − λ_p diag(μ) (real: it is similar to a symmetric matrix). With c = e^{2βλ_p} and
r = n₊/n₋, det(λ_k B − λ_p diag μ) = λ_p² det B (t − 1)(t − σ(c, r)), t = λ_k/λ_p, σ = (c − r)(cr − 1)/(r(c² − 1)).

Mixed three-group states in the plane of two eigenvectors u = e_1, v = e_2 (eigenvalues a, b): m tokens at u and k
at each of q u ± s v, s = √(1 − q²), are rest points exactly when q ∈ (−1, 1) solves

    g(q) = a (m/k) e^{βa q(1 − q)} + 2q [a cosh(βb s²) − b sinh(βb s²)] = 0

(the tangent velocity of the group at q u + s v divided by −s k e^{βaq²}; the group at u and the mirror group move
with it by the reflection v → −v, which commutes with V).
"""

from __future__ import annotations

import numpy as np

from ....particles.fields import SA

__all__ = [
    "symmetric_field",
    "pure_state",
    "group_matrix",
    "pure_spectrum",
    "pure_unstable",
    "homogeneous_stable",
    "bipolar_threshold",
    "split_threshold",
    "split_stable",
    "mixed_equation",
    "mixed_roots",
    "mixed_state",
    "MIXED_GRID",
]

MIXED_GRID = 4001
"""Points of (−1, 1) on which ``mixed_roots`` looks for sign changes of g before refining each by Brent's method."""


def symmetric_field(eigenvalues, beta: float, basis=None) -> SA:
    """``SA(β, K=V, V=V)`` with V = U diag(eigenvalues) Uᵀ (U = ``basis``, the identity by default): logits
    β⟨x_i, V x_j⟩ and values V x_j."""
    lam = np.asarray(eigenvalues, dtype=float)
    U = np.eye(lam.size) if basis is None else np.asarray(basis, dtype=float)
    V = (U * lam) @ U.T
    return SA(float(beta), K=V, V=V)


def pure_state(d: int, p: int, n_plus: int, n_minus: int = 0) -> np.ndarray:
    """n₊ tokens at e_p, then n₋ at −e_p, in R^d."""
    x = np.zeros((n_plus + n_minus, d))
    x[:n_plus, p], x[n_plus:, p] = 1.0, -1.0
    return x


def group_matrix(lam_p: float, beta: float, n_plus: int, n_minus: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sizes, B, μ) of the nonempty sign groups of a pure-mode state on e_p (module docstring): B_gh the attention
    a token of group g pays to group h, μ_g = Σ_h B_gh s_g s_h."""
    sizes = np.array([n for n in (n_plus, n_minus) if n > 0], dtype=float)
    signs = np.array([s for s, n in ((1.0, n_plus), (-1.0, n_minus)) if n > 0])
    logits = beta * lam_p * np.outer(signs, signs)
    w = sizes[None, :] * np.exp(logits - logits.max(axis=1, keepdims=True))
    B = w / w.sum(axis=1, keepdims=True)
    return sizes, B, (B * np.outer(signs, signs)).sum(axis=1)


def pure_spectrum(eigenvalues, p: int, n_plus: int, n_minus: int, beta: float) -> np.ndarray:
    """The n(d − 1) eigenvalues of the tangent Jacobian at the pure-mode state (n₊ at e_p, n₋ at −e_p), largest
    first: per k ≠ p, −λ_p μ_g (n_g − 1 times each) and the eigenvalues of λ_k B − λ_p diag(μ)."""
    lam = np.asarray(eigenvalues, dtype=float)
    sizes, B, mu = group_matrix(float(lam[p]), beta, n_plus, n_minus)
    out = []
    for k in range(lam.size):
        if k == p:
            continue
        for n_g, mu_g in zip(sizes, mu):
            out += [-lam[p] * mu_g] * (int(n_g) - 1)
        out += list(np.linalg.eigvals(lam[k] * B - lam[p] * np.diag(mu)).real)
    return np.sort(np.asarray(out))[::-1]


def pure_unstable(eigenvalues, p: int, n_plus: int, n_minus: int, beta: float, tol: float = 1e-9) -> int:
    """How many eigenvalues of ``pure_spectrum`` exceed ``tol`` × its largest magnitude."""
    values = pure_spectrum(eigenvalues, p, n_plus, n_minus, beta)
    return int(np.sum(values > tol * max(float(np.max(np.abs(values))), 1e-300)))


def homogeneous_stable(eigenvalues, p: int) -> bool:
    """All n ≥ 2 tokens at e_p (any β): the spectrum is λ_k − λ_p and −λ_p (n − 1 times) per k ≠ p, so the state
    is stable iff λ_p > 0 and λ_k < λ_p for every k ≠ p."""
    lam = np.asarray(eigenvalues, dtype=float)
    return bool(lam[p] > 0 and np.all(np.delete(lam, p) < lam[p]))


def bipolar_threshold(lam_top: float, beta: float) -> float:
    """λ₊ tanh(βλ₊): the balanced bipolar state on the top eigenvector is stable iff every other λ_k lies below it
    (σ(c, 1) = (c − 1)/(c + 1) = tanh(βλ₊))."""
    return float(lam_top * np.tanh(beta * lam_top))


def split_threshold(c: float, r: float) -> float:
    """σ(c, r) = (c − r)(cr − 1)/(r(c² − 1)), c = e^{2βλ_p}, r = n₊/n₋ (c ≠ 1): the ratio λ_k/λ_p at which the group
    matrix λ_k B − λ_p diag(μ) of a split pure-mode state is singular (besides λ_k = λ_p, the rotation)."""
    return float((c - r) * (c * r - 1.0) / (r * (c * c - 1.0)))


def split_stable(eigenvalues, p: int, n_plus: int, n_minus: int, beta: float) -> bool:
    """The split state (n₊, n₋ ≥ 1) on e_p for β > 0 and λ_p > 0: stable iff each group of two or more tokens holds
    together (μ_g > 0: r c > 1 where n₊ ≥ 2, c > r where n₋ ≥ 2; both mean λ_p > |log r|/(2β)) and every other
    eigenvalue satisfies λ_k < σ(c, r) λ_p."""
    lam = np.asarray(eigenvalues, dtype=float)
    if not (beta > 0 and lam[p] > 0 and n_plus >= 1 and n_minus >= 1):
        raise ValueError(f"split_stable takes β > 0, λ_p > 0 and n₊, n₋ ≥ 1; got β = {beta}, λ_p = {lam[p]}")
    c, r = float(np.exp(2 * beta * lam[p])), n_plus / n_minus
    held = (n_plus < 2 or r * c > 1) and (n_minus < 2 or c > r)
    return bool(held and np.all(np.delete(lam, p) < split_threshold(c, r) * lam[p]))


def mixed_equation(q, a: float, b: float, beta: float, m: int, k: int):
    """g(q) of the module docstring, whose zeros in (−1, 1) are the mixed three-group rest points."""
    q = np.asarray(q, dtype=float)
    s2 = 1.0 - q * q
    return a * (m / k) * np.exp(beta * a * q * (1 - q)) + 2 * q * (
        a * np.cosh(beta * b * s2) - b * np.sinh(beta * b * s2)
    )


def mixed_roots(a: float, b: float, beta: float, m: int, k: int) -> np.ndarray:
    """The zeros of g in (−1, 1), increasing: its sign changes on ``MIXED_GRID`` points, refined by Brent's
    method to machine precision (a zero where g only touches 0 is missed)."""
    from scipy import optimize  # here, not at the top: an experiment's registration never loads SciPy

    grid = np.linspace(-1.0, 1.0, MIXED_GRID)[1:-1]
    g = mixed_equation(grid, a, b, beta, m, k)
    roots = list(grid[g == 0.0])
    for lo, hi, glo, ghi in zip(grid[:-1], grid[1:], g[:-1], g[1:]):
        if glo * ghi < 0:
            roots.append(optimize.brentq(mixed_equation, lo, hi, args=(a, b, beta, m, k), xtol=1e-15, rtol=1e-15))
    return np.sort(np.asarray(roots, dtype=float))


def mixed_state(q: float, m: int, k: int, d: int = 2) -> np.ndarray:
    """m tokens at e_1, k at q e_1 + s e_2 and k at q e_1 − s e_2 (s = √(1 − q²)), in R^d."""
    s = np.sqrt(max(1.0 - q * q, 0.0))
    x = np.zeros((m + 2 * k, d))
    x[:m, 0] = 1.0
    x[m : m + k, :2] = (q, s)
    x[m + k :, :2] = (q, -s)
    return x
