"""Geometry of the unit sphere S^{d-1} and of configurations of n points on it.

A configuration is an array ``x`` of shape (..., n, d) whose rows are unit vectors.
All functions are pure JAX and broadcast over leading batch axes.
"""

from __future__ import annotations

import jax.numpy as jnp
from jaxtyping import Array, Float

SMALL_D = 8
"""Widths up to which row sums are written out coordinate by coordinate (``row_dot``)."""


def row_dot(x: Float[Array, "... d"], y: Float[Array, "... d"]) -> Float[Array, "... 1"]:
    """⟨x, y⟩ of every row, keeping the last axis (of length 1).

    For d ≤ ``SMALL_D`` the sum is written out as d − 1 additions of slices: XLA's CPU backend
    runs a reduction over a short minor axis as a reduction kernel of its own, about 3× slower
    than the normalization or projection it belongs to written elementwise (and it stays out of
    the surrounding loop fusion).
    """
    d = x.shape[-1]
    if d > SMALL_D:
        return jnp.sum(x * y, axis=-1, keepdims=True)
    acc = x[..., 0:1] * y[..., 0:1]
    for k in range(1, d):
        acc = acc + x[..., k : k + 1] * y[..., k : k + 1]
    return acc


def row_norm(x: Float[Array, "... d"]) -> Float[Array, "... 1"]:
    """‖x‖ of every row, keeping the last axis (of length 1)."""
    return jnp.sqrt(row_dot(x, x))


def normalize(x: Float[Array, "... d"]) -> Float[Array, "... d"]:
    """Scale every row to unit Euclidean norm: x / ‖x‖."""
    return x / row_norm(x)


def project(x: Float[Array, "... d"], y: Float[Array, "... d"]) -> Float[Array, "... d"]:
    """Tangent projection P_x y = y − ⟨x,y⟩x / ⟨x,x⟩, row by row.

    On the sphere this is the P_x of [GLPR] (2.3). Dividing by ⟨x,x⟩ keeps P_x y orthogonal
    to x also at the slightly off-sphere stage points of Runge–Kutta methods, so the flow
    they approximate preserves every norm exactly.
    """
    return y - (row_dot(x, y) / row_dot(x, x)) * x


def _sinc(u):
    # sin(u)/u, smooth (and differentiable) at u = 0
    return jnp.sinc(u / jnp.pi)


def expmap(x: Float[Array, "... d"], v: Float[Array, "... d"]) -> Float[Array, "... d"]:
    """Exponential map exp_x(v) = cos‖v‖ x + sin‖v‖ v/‖v‖ for v tangent at x."""
    s = row_norm(v)
    return jnp.cos(s) * x + _sinc(s) * v


def rotate(y: Float[Array, "... d"], f: Float[Array, "... d"], x: Float[Array, "... d"], h) -> Float[Array, "... d"]:
    """Apply exp(h A) to x, where A = f yᵀ − y fᵀ is the frozen rotation generator at y.

    For unit y and f tangent at y, A is the rank-two skew matrix that rotates y towards f
    with angular speed ‖f‖ (A y = f), so exp(hA) y = exp_y(h f). exp(hA) is applied in closed
    form (rotation in the plane span{y, f}), costing O(d) per particle; the result is an
    exact rotation of x, so norms are preserved to rounding error. This is the building
    block of the Crouch–Grossman methods.
    """
    s = row_norm(f)
    yx = row_dot(y, x)
    fx = row_dot(f, x)
    # exp(hA) = I + sin(hs) J − (1 − cos hs) P with J, P the rotation and projection of the
    # plane span{y, f/s}; (cos hs − 1)/s² and sin(hs)/s are written so that s = 0 is harmless
    c = jnp.cos(h * s) - 1.0
    c_over_s2 = -0.5 * (h * _sinc(0.5 * h * s)) ** 2
    sin_over_s = h * _sinc(h * s)
    return x + c * y * yx + c_over_s2 * f * fx + sin_over_s * (f * yx - y * fx)


def inner_products(x: Float[Array, "... n d"]) -> Float[Array, "... n n"]:
    """Gram matrix G_ij = ⟨x_i, x_j⟩."""
    return jnp.einsum("...id,...jd->...ij", x, x)


def pairwise_gaps(x: Float[Array, "... n d"]) -> Float[Array, "... n n"]:
    """1 − ⟨x_i, x_j⟩ computed as ½‖x_i − x_j‖², accurate near clustering.

    Forming 1 − G from the Gram matrix loses all digits once ⟨x_i,x_j⟩ is within machine
    epsilon of 1; the squared distance keeps full relative precision. Memory is O(n² d) before
    fusion; XLA fuses the difference into the reduction.
    """
    diff = x[..., :, None, :] - x[..., None, :, :]
    return 0.5 * jnp.sum(diff * diff, axis=-1)


def small_d_gaps(x: Float[Array, "... n d"]) -> Float[Array, "... n n"]:
    """``pairwise_gaps``, summed coordinate by coordinate when d ≤ ``SMALL_D``: each term is a broadcast
    difference that XLA vectorizes along j, instead of an (n, n, d) array reduced over its last axis."""
    if x.shape[-1] > SMALL_D:
        return pairwise_gaps(x)
    acc: Array | float = 0.0
    for k in range(x.shape[-1]):
        c = x[..., k]
        diff = c[..., :, None] - c[..., None, :]
        acc = acc + diff * diff
    return 0.5 * jnp.asarray(acc)


def within(x: Float[Array, "n d"], delta) -> Array:
    """Whether every pair of directions x_i/‖x_i‖ has ⟨x_i, x_j⟩ ≥ 1 − δ (one cluster at threshold δ).

    From the Gram matrix: one matrix product, accurate to rounding for δ ≫ machine epsilon (formed at
    full precision whatever ``jax.default_matmul_precision`` says). It is the stopping test of
    ``simulate(stop_when_clustered=δ)``.
    """
    x = normalize(x)
    return jnp.min(jnp.matmul(x, x.T, precision="highest")) >= 1.0 - delta


def geodesic_distance(x: Float[Array, "... d"], y: Float[Array, "... d"]) -> Float[Array, ...]:
    """Great-circle distance arccos⟨x,y⟩, computed as 2 arcsin(‖x − y‖/2) for accuracy."""
    chord = jnp.linalg.norm(x - y, axis=-1)
    return 2.0 * jnp.arcsin(jnp.clip(0.5 * chord, 0.0, 1.0))


def norm_error(x: Float[Array, "... d"]) -> Float[Array, ""]:
    """max |‖x_i‖ − 1| over all rows: how far a configuration is from the sphere."""
    return jnp.max(jnp.abs(jnp.linalg.norm(x, axis=-1) - 1.0))
