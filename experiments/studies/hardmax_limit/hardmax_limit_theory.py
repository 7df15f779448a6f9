"""Attention in the convex hull of the tokens and its hardmax limit as Frank–Wolfe (arXiv 2508.09628).

Tokens x_i ∈ R^d without layer norm, with self-attention, and the bilinear form B = QᵀK:

    ẋ_i = Σ_j softmax_j(β⟨B x_i, x_j⟩) x_j − x_i            (``HullAttention``, β < ∞)
    ẋ_i = x_{j*(i)} − x_i,   j*(i) = argmax_j ⟨B x_i, x_j⟩     (``HullHardmax``, β = ∞)

Each velocity points into the convex hull K of the tokens, so K never grows. The hardmax step
x_i + h (x_{j*} − x_i) is a Frank–Wolfe step for f(x) = −½⟨Bx, x⟩ over K: its linear minimization
oracle argmin_{s∈K} ⟨∇f(x_i), s⟩ = argmax_j ⟨B x_i, x_j⟩ is attained at a token (docs/model.md §14).

* B ⪯ 0: f is convex; with the open-loop steps h_k = 2/(k + 2) (``frank_wolfe_steps``) the Frank–Wolfe
  gap G = max_i max_j ⟨∇f(x_i), x_i − x_j⟩ ≥ f(x_i) − min_K f decays at least like O(1/k).
* B ⪰ 0 with tokens of equal B-norm at the hull's vertices: ⟨B v, v⟩ > ⟨B v, y⟩ for every other y ∈ K,
  so vertices are stationary; an interior token's target is the vertex of its dominance cell
  C(v) = {z ∈ K : ⟨Bz, v⟩ ≥ ⟨Bz, y⟩ ∀ y ∈ K} and it moves on the straight line
  x(t) = v + (x(0) − v) e^{−t} (``hardmax_paths``), never leaving the cell.
* finite β: the vertices are trapped: the token at v feels the one at v' with weight ≈ e^{−βΔ(v, v')},
  Δ(v, v') = ⟨Bv, v − v'⟩, and leaves its vertex after a time growing like e^{cβ}, c = min Δ
  (``trapping_exponent``).
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from jax.nn import softmax
from jaxtyping import Array, Float, Int

from ....particles.checks import as_beta, as_matrix, as_parameter
from ....particles.fields import Field

__all__ = [
    "HullAttention",
    "HullHardmax",
    "hull_tokens",
    "dominance_cells",
    "hardmax_paths",
    "frank_wolfe_gap",
    "frank_wolfe_steps",
    "trapping_exponent",
    "concentration_offset",
    "SELF_WEIGHT",
    "limit_rate",
]


def _bilinear(B, x):
    """(B x_i)_i in the configuration's precision (B None: the identity)."""
    return x if B is None else x @ B.T.astype(x.dtype)


class HullAttention(Field):
    """Attention in the tokens' convex hull (arXiv 2508.09628): ẋ_i = Σ_j softmax_j(β⟨Bx_i, x_j⟩) x_j − x_i.

    Tokens in R^d (geometry "euclidean", nothing normalized), self-attention included, the logits
    β⟨B x_i, x_j⟩ with B = QᵀK (d × d, None: the identity). β of shape (m,) makes an ensemble.
    The softmax subtracts each row's maximum, so any β ≥ 0 is finite. ``rate`` multiplies the velocity: the
    same paths in the time rate·t (a metastable run in units of its slow time scale, e^{cβ}); one per member
    with a leading axis, as β.
    """

    beta: Float[Array, ""]
    B: Float[Array, "d d"] | None = None
    rate: Float[Array, ""] | None = None
    geometry: ClassVar[str] = "euclidean"
    event_ndim: ClassVar[dict[str, int]] = {"beta": 0, "B": 2, "rate": 0}

    def __init__(self, beta, B=None, rate=None):
        self.beta = as_beta(beta, field="HullAttention")
        self.B = as_matrix("B", B)
        self.rate = None if rate is None else as_parameter("rate", rate, "time scale")

    def kernel_logits(self, x):
        return self.beta * _bilinear(self.B, x) @ x.T

    @property
    def has_attention(self) -> bool:
        return True

    def attention_matrix(self, t, x):
        """The row-stochastic softmax_j(β⟨Bx_i, x_j⟩)."""
        return softmax(self.kernel_logits(x), axis=-1)

    def drift(self, t, x):
        v = self.attention_matrix(t, x) @ x - x
        return v if self.rate is None else self.rate.astype(x.dtype) * v

    def check(self, n: int, d: int, dtype) -> None:
        if self.B is not None and self.B.shape[-2:] != (d, d):
            raise ValueError(f"B must be a (d, d) = ({d}, {d}) matrix, got shape {self.B.shape[-2:]}")


class HullHardmax(Field):
    """The β → ∞ limit of ``HullAttention``: ẋ_i = x_{j*(i)} − x_i, j*(i) = argmax_j ⟨Bx_i, x_j⟩.

    Self-attention is included (a vertex of equal B-norm targets itself and stays put); ties go to the
    smallest index (one Filippov selection: the field is discontinuous where the argmax changes).
    """

    B: Float[Array, "d d"] | None = None
    geometry: ClassVar[str] = "euclidean"
    event_ndim: ClassVar[dict[str, int]] = {"B": 2}

    def __init__(self, B=None):
        self.B = as_matrix("B", B)

    def targets(self, x: Float[Array, "n d"]) -> Int[Array, " n"]:
        """j*(i), the token each token moves to (the first one at ties)."""
        return jnp.argmax(_bilinear(self.B, x) @ x.T, axis=-1)

    @property
    def has_attention(self) -> bool:
        return True

    def attention_matrix(self, t, x):
        """The 0/1 matrix A_ij = [j = j*(i)]."""
        n = x.shape[0]
        return (self.targets(x)[:, None] == jnp.arange(n)[None, :]).astype(x.dtype)

    def drift(self, t, x):
        return x[self.targets(x)] - x

    def check(self, n: int, d: int, dtype) -> None:
        if self.B is not None and self.B.shape[-2:] != (d, d):
            raise ValueError(f"B must be a (d, d) = ({d}, {d}) matrix, got shape {self.B.shape[-2:]}")


def hull_tokens(vertices: int, interior: int, seed: int = 0, jitter: float = 0.5) -> np.ndarray:
    """``vertices`` unit vectors of the plane at angles 2πj/k + jitter·U(−π/k, π/k) (the hull's vertices,
    sorted by angle), then ``interior`` points drawn uniformly in their convex hull: (k + m, 2) float64."""
    if vertices < 3:
        raise ValueError(f"the hull needs at least 3 vertices, got {vertices}")
    rng = np.random.default_rng(seed)
    k = int(vertices)
    theta = np.sort(2 * np.pi * np.arange(k) / k + jitter * rng.uniform(-np.pi / k, np.pi / k, k))
    v = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    # uniform in the polygon: pick a fan triangle (0, j, j + 1) by area, then a uniform point in it
    a, b = v[1:-1] - v[0], v[2:] - v[0]
    area = 0.5 * np.abs(a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0])
    tri = rng.choice(area.size, size=interior, p=area / area.sum())
    r1, r2 = rng.uniform(size=(2, interior))
    flip = r1 + r2 > 1
    r1, r2 = np.where(flip, 1 - r1, r1), np.where(flip, 1 - r2, r2)
    inner = v[0] + r1[:, None] * a[tri] + r2[:, None] * b[tri]
    return np.concatenate([v, inner])


def dominance_cells(points, vertices, B=None) -> np.ndarray:
    """The index of the vertex v maximizing ⟨B z, v⟩ for each point z (its dominance cell, first at ties)."""
    z = np.asarray(points, dtype=np.float64)
    Bz = z if B is None else z @ np.asarray(B, dtype=np.float64).T
    return np.argmax(Bz @ np.asarray(vertices, dtype=np.float64).T, axis=-1)


def hardmax_paths(x0, vertices: int, ts) -> np.ndarray:
    """The hardmax flow (B = I) of ``hull_tokens`` in closed form: the first ``vertices`` rows stay, every
    other token goes straight to its cell's vertex, x(t) = v + (x(0) − v) e^{−t}: (len(ts), n, d)."""
    x0 = np.asarray(x0, dtype=np.float64)
    v = x0[:vertices]
    target = v[dominance_cells(x0, v)]
    decay = np.exp(-np.asarray(ts, dtype=np.float64))[:, None, None]
    return target[None] + (x0 - target)[None] * decay


def frank_wolfe_gap(x, B) -> float:
    """G = max_i max_j ⟨∇f(x_i), x_i − x_j⟩ for f(x) = −½⟨Bx, x⟩ (∇f = −Bx, B symmetric): the Frank–Wolfe
    gap of the worst token, an upper bound of f(x_i) − min_K f when B ⪯ 0."""
    x = np.asarray(x, dtype=np.float64)
    g = -x @ np.asarray(B, dtype=np.float64).T
    return float(np.max(np.sum(g * x, axis=1)[:, None] - g @ x.T))


def frank_wolfe_steps(x0, B, steps: int) -> np.ndarray:
    """The hardmax iteration x_i ← x_i + h_k (x_{j*(i)} − x_i) with the open-loop steps h_k = 2/(k + 2), all
    tokens at once: the Frank–Wolfe gaps G_0, …, G_steps (float64)."""
    x = np.asarray(x0, dtype=np.float64).copy()
    B = np.asarray(B, dtype=np.float64)
    gaps = np.empty(steps + 1)
    for k in range(steps + 1):
        gaps[k] = frank_wolfe_gap(x, B)
        target = x[np.argmax(x @ B.T @ x.T, axis=1)]
        x = x + 2.0 / (k + 2.0) * (target - x)
    return gaps


def trapping_exponent(vertices, B=None) -> tuple[float, int, int]:
    """c = min over vertices v ≠ v' of Δ(v, v') = ⟨Bv, v − v'⟩, and the pair (v, v') attaining it: the token
    at v feels v' with weight ≈ e^{−βΔ}, so the first one to leave its vertex does so after ~ e^{cβ}."""
    v = np.asarray(vertices, dtype=np.float64)
    Bv = v if B is None else v @ np.asarray(B, dtype=np.float64).T
    gap = np.sum(Bv * v, axis=1)[:, None] - Bv @ v.T
    np.fill_diagonal(gap, np.inf)
    i, j = np.unravel_index(np.argmin(gap), gap.shape)
    return float(gap[i, j]), int(i), int(j)


SELF_WEIGHT = 2.0 / 3.0
"""Concentration: the first time a vertex token's attention on itself drops below this weight."""


def concentration_offset(x0, vertices: int) -> float:
    """u* such that concentration happens at t_c(β) ≈ log β − log u* (B = I, docs/model.md §14).

    Along the hardmax flow an interior token of the cell of v has ⟨v, v − x(t)⟩ = a e^{−t}, a = ⟨v, v − x(0)⟩;
    at β the vertex token's weight on itself is 1/(1 + Σ_cell e^{−β a e^{−t}}) (other vertices: e^{−β Δ}).
    It drops to ``SELF_WEIGHT`` = 2/3 when Σ_cell e^{−u a} = ½ with u = β e^{−t}; the first vertex to get
    there has the largest u*. The cell's tokens also attend to each other once u = O(1), which shifts
    t_c by O(1) but not its slope 1 in log β.
    """
    target = (1.0 - SELF_WEIGHT) / SELF_WEIGHT
    x0 = np.asarray(x0, dtype=np.float64)
    v = x0[:vertices]
    inner = x0[vertices:]
    cells = dominance_cells(inner, v)
    best = 0.0
    for c in range(vertices):
        a = np.sum(v[c] * (v[c] - inner[cells == c]), axis=1)
        if a.size == 0:
            continue
        lo, hi = 0.0, 1.0
        while np.sum(np.exp(-hi * a)) > target:
            hi *= 2.0
        for _ in range(200):  # Σ e^{−u a} decreases in u: bisect to rounding
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if np.sum(np.exp(-mid * a)) > target else (lo, mid)
        best = max(best, 0.5 * (lo + hi))
    if best == 0.0:
        raise ValueError("no interior token: concentration needs tokens inside the hull")
    return best


def limit_rate(beta) -> np.ndarray:
    """√(log(β + 1)/β), the rate at which the SA flow tends to the hardmax flow at fixed t (arXiv 2605.10931)."""
    beta = np.asarray(beta, dtype=np.float64)
    return np.sqrt(np.log1p(beta) / beta)
