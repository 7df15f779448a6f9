"""Configurations in the span of their tokens: coordinates y ∈ R^{n×r} in an orthonormal frame U (d × r).

With V = λI the attention velocities are combinations of the tokens, so the particles never leave
the span of x_1(0), …, x_n(0) (``Field.in_span``). Writing x = y Uᵀ with U ∈ R^{d×r} orthonormal
columns spanning it, inner products are those of the coordinates, ⟨x_i, x_j⟩ = ⟨y_i, y_j⟩, so a run
with d > n can move y ∈ (S^{r−1})^n (r ≤ n) instead of x and map states back only where they are saved.

Uniform initial conditions directly in reduced form, exactly in law (``uniform``). Let G be an n × d
matrix of independent N(0, 1) entries, d ≥ n, so that x_i = g_i / ‖g_i‖ are n independent uniform
points of S^{d−1}. Its Gram matrix G Gᵀ is Wishart(d, I_n), and by the Bartlett decomposition
(M. S. Bartlett, Proc. Roy. Soc. Edinburgh 53 (1933) 260–283; R. J. Muirhead, *Aspects of
Multivariate Statistical Theory*, Wiley 1982, §3.2) its Cholesky factor L (G Gᵀ = L Lᵀ, L lower
triangular with a positive diagonal) has independent entries

    L_ii² ~ χ²_{d−i+1}  (i = 1 … n),     L_ij ~ N(0, 1)  (i > j),     L_ij = 0  (i < j).

Then W = Gᵀ L^{−T} (d × n) has orthonormal columns and G = L Wᵀ, so x_i = (L_i / ‖L_i‖) Wᵀ: the rows
y_i = L_i / ‖L_i‖ are the coordinates of the x_i in the frame W. Drawing L costs O(n²) per member,
whatever d. W is Haar-distributed on the Stiefel manifold and independent of L (for any orthogonal
O, G O has the law of G and Cholesky factor L, with frame Oᵀ W), so x = y Uᵀ with U drawn by
``haar_frame`` independently of y has exactly the law of n independent uniform points: that is how
states of such a run are written in R^d, and how random Q, K enter its reduced field (K' = UᵀQᵀK U).
Note that y_1 = e_1 always: the law of y is not rotation-invariant in R^n, only the joint law of
(y Uᵀ) is that of the uniform sample, and so is that of every inner product.

Any other configuration (orthogonal, equiangular, cap, clusters, a file) is reduced by a QR
factorization of xᵀ (``span_basis``).

The attention weights of a field acting on span coordinates (``span_weights``, ``span_kernel``): with V = λI
(``identity_scale`` proves it exactly) the logits become ⟨y_i, M y_j⟩ with M = UᵀQᵀK U, and V becomes λI_r.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from .checks import check_int
from .init import as_key, float_dtype
from .sphere import normalize

__all__ = [
    "uniform",
    "bartlett_rows",
    "haar_frame",
    "span_basis",
    "to_ambient",
    "identity_scale",
    "span_rank",
    "span_kernel",
    "span_weights",
]


def bartlett_rows(key, n: int, d) -> Float[Array, "n n"]:
    """L_i / ‖L_i‖ for the Bartlett factor L of a Wishart(d, I_n) matrix (module docstring): the coordinates
    of ``uniform``, in the default float dtype.

    ``d`` may be a traced integer (a program argument): d enters only as the χ² degrees of freedom, so one
    compiled program draws the reduced configurations of every d ≥ n (the runner's span rows share it).
    ``n`` is a shape and stays static. No checks: ``uniform`` is the checked entry point.
    """
    k_diag, k_low = jax.random.split(key)
    f = jnp.result_type(float)
    df = (jnp.asarray(d).astype(f) - jnp.arange(n, dtype=f)).astype(f)  # d − i + 1 for i = 1 … n
    diagonal = jnp.sqrt(jax.random.chisquare(k_diag, df, shape=(n,), dtype=f))
    below = jnp.tril(jax.random.normal(k_low, (n, n), f), -1)
    return normalize(below + jnp.diag(diagonal))


def _haar(key, d: int, r: int):
    """r orthonormal columns of R^d, Haar-distributed: QR of a Gaussian d × r matrix, signs fixed by R's diagonal."""
    q, rr = jnp.linalg.qr(jax.random.normal(key, (d, r), jnp.result_type(float)))
    return q * jnp.sign(jnp.diagonal(rr))


@functools.partial(jax.jit, static_argnames=("sample", "batch", "dtype", "shape"))
def _draw(key, *, sample, batch, dtype, shape):
    if batch is None:
        return sample(key, *shape).astype(dtype)
    return jax.vmap(lambda k: sample(k, *shape))(jax.random.split(key, batch)).astype(dtype)


def _keys_or_key(key, batch):
    if batch is not None:
        batch = check_int("batch", batch, 1)
    return as_key(key), batch


def uniform(key, n: int, d: int, *, batch: int | None = None, dtype=None) -> Float[Array, "... n n"]:
    """Coordinates y (n × n) of n independent uniform points of S^{d−1} (d ≥ n) in a frame of their span.

    Exactly in law: x = y Uᵀ, with U a ``haar_frame(key', d, n)`` independent of y, has the law of
    ``init.uniform(key, n, d)`` (Bartlett decomposition, module docstring); the inner products
    ⟨y_i, y_j⟩ have the law of the ⟨x_i, x_j⟩ without U. O(n²) per draw, independent of d. The same
    key does not give the same points as ``init.uniform``, only the same distribution. ``batch``:
    independent draws from ``batch`` keys split off ``key``, shape (batch, n, n).
    """
    n, d = check_int("n", n, 1), check_int("d", d, 2)
    if d < n:
        raise ValueError(
            f"uniform in the span needs d ≥ n (the span of n points of R^d has dimension n), got n = {n}, d = {d}"
        )
    key, batch = _keys_or_key(key, batch)
    return _draw(key, sample=bartlett_rows, batch=batch, dtype=float_dtype(dtype), shape=(n, d))


def haar_frame(key, d: int, r: int, *, batch: int | None = None, dtype=None) -> Float[Array, "... d r"]:
    """A Haar-distributed orthonormal frame U (d × r, UᵀU = I_r) of R^d; (batch, d, r) with ``batch``."""
    d, r = check_int("d", d, 1), check_int("r", r, 1)
    if r > d:
        raise ValueError(f"a frame of r orthonormal vectors in R^d needs r ≤ d, got r = {r}, d = {d}")
    key, batch = _keys_or_key(key, batch)
    return _draw(key, sample=_haar, batch=batch, dtype=float_dtype(dtype), shape=(d, r))


@jax.jit
def span_basis(x: Float[Array, "... n d"]) -> tuple[Float[Array, "... d r"], Float[Array, "... n r"]]:
    """(U, y): an orthonormal frame U of a span holding the rows of x, and their coordinates y = x U.

    QR of xᵀ = U R (reduced), r = min(n, d) columns; x = y Uᵀ to rounding, whatever the rank of x
    (U's span contains the rows; for x of rank < r it is larger than their span). Batched over
    leading axes: x (B, n, d) gives U (B, d, r) and y (B, n, r).
    """
    x = jnp.asarray(x)
    U, _ = jnp.linalg.qr(jnp.swapaxes(x, -1, -2))
    return U, x @ U


def to_ambient(y: Float[ArrayLike, "... n r"], U: Float[ArrayLike, "... d r"]) -> Float[Array, "... n d"]:
    """x = y Uᵀ: coordinates back in R^d.

    U's leading (member) axes are those of y; axes of y between them and (n, r), such as the save
    times of a trajectory (B, T, n, r) with U (B, d, r), share their member's frame.
    """
    y, U = jnp.asarray(y), jnp.asarray(U)
    extra = y.ndim - U.ndim
    if extra < 0:
        raise ValueError(f"y of shape {y.shape} has fewer axes than the frame U of shape {U.shape}")
    if U.ndim > 2:
        U = U.reshape(U.shape[:-2] + (1,) * extra + U.shape[-2:])
    return y @ jnp.swapaxes(U, -1, -2)


# -- the weights of a field acting on span coordinates ------------------------------------------------


def identity_scale(V) -> Array | None:
    """λ with V = λI (shape V.shape[:-2]: one per member), 1.0 for V None (the identity), None otherwise.

    None also where nothing can be proven: V traced (inside jit), or equal to λI only to rounding.
    The comparison is exact, so −I, 2I or I/H (stored as such) qualify.
    """
    if V is None:
        return jnp.asarray(1.0)
    if isinstance(V, jax.core.Tracer):
        return None
    arr = np.asarray(V)
    diagonal = np.diagonal(arr, axis1=-2, axis2=-1)
    lam = diagonal[..., 0]
    # a constant diagonal and nothing off it (counted, so a stack of large V needs no copy)
    if not np.all(diagonal == lam[..., None]) or np.count_nonzero(arr) != np.count_nonzero(diagonal):
        return None
    return jnp.asarray(lam)


def span_rank(U) -> int:
    """r, the dimension of the span a frame U (..., d, r) stands for; an int U is r itself."""
    return int(U) if isinstance(U, (int, np.integer)) else int(np.shape(U)[-1])


def span_kernel(Q, K, U, inner_axes: int = 0) -> Array | None:
    """The r × r kernel M = UᵀQᵀK U with ⟨Q x_i, K x_j⟩ = ⟨y_i, M y_j⟩ for x = y Uᵀ; None when Q, K are identities.

    Q, K (..., k, d) or None, U (..., d, r); ``inner_axes`` axes of Q, K between the member axis and
    the matrix (heads, layers) are broadcast against U. M is formed as (QU)ᵀ(KU), O(k d r).
    """
    if Q is None and K is None:
        return None
    U = jnp.asarray(U)
    U = U.reshape(U.shape[:-2] + (1,) * inner_axes + U.shape[-2:]) if U.ndim > 2 else U
    qu = U if Q is None else Q @ U
    ku = U if K is None else K @ U
    return jnp.swapaxes(qu, -1, -2) @ ku


def span_weights(Q, K, V, U) -> tuple[None, Array | None, Array | None] | None:
    """Q', K', V' of an attention acting on span coordinates y = x U, or None where the span is not invariant.

    With V = λI every value V x_j = λ x_j lies in the span of the tokens; the logits become
    ⟨y_i, M y_j⟩ with M = UᵀQᵀK U (Q' = None, K' = M), and V' = λI_r. ``U`` is an orthonormal frame
    (d, r) or one per member (B, d, r), or the int r when the frame is left unspecified: then only
    Q = K = identity (a rotation-equivariant field, the same for every frame) reduces.
    """
    scale = identity_scale(V)
    if scale is None:
        return None
    r = span_rank(U)
    if Q is not None or K is not None:
        if isinstance(U, (int, np.integer)):
            return None
        d = (Q if Q is not None else K).shape[-1]
        if np.shape(U)[-2] != d:
            raise ValueError(
                f"the frame U has shape {np.shape(U)} but the weights act on d = {d}: expected (..., {d}, r)"
            )
    Vr = None if V is None else scale[..., None, None] * jnp.eye(r, dtype=V.dtype)
    return None, span_kernel(Q, K, U), Vr
