"""Sinkformers: self-attention with a doubly stochastic (Sinkhorn) normalization, arXiv 2110.11773.

The softmax of SA makes the kernel K_ij = e^{β⟨Qx_i,Kx_j⟩} row-stochastic. Sinkhorn's algorithm
instead scales it on both sides, S = diag(e^f) K diag(e^g), until every row and every column
sums to 1. For a symmetric kernel (QᵀK symmetric) the scaling is symmetric, S = Sᵀ, and with
V = QᵀK the dynamics becomes a gradient flow (Sander, Ablin, Blondel, Peyré, AISTATS 2022:
a Wasserstein gradient flow in the mean-field limit, which SA is not):

    ẋ_i = P_{x_i}(Σ_j S_ij V x_j) = grad_{x_i} J(X)     (round metric on (S^{d−1})^n),
    J(X) = −(1/(2β)) (Σ_i f_i + Σ_j g_j)
         = (1/(2β)) (min_{f,g} [Σ_ij e^{f_i + g_j + β⟨Qx_i,Kx_j⟩} − Σ_i f_i − Σ_j g_j] − n),

so J increases along the flow with dJ/dt = Σ_i ‖ẋ_i‖² (``Sinkhorn.energy``). The identity follows
from the envelope theorem on the dual problem: at the optimal potentials ∂J/∂x_i = Σ_j S_ij QᵀK x_j.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .checks import check_int, check_real
from .fields import Attention


def sinkhorn_potentials(logits: Float[Array, "n n"], tol: float, max_iter: int, symmetric: bool = False):
    """Log-domain Sinkhorn scaling of the kernel e^{logits}: potentials (f, g), error, sweeps.

    S_ij = e^{f_i + L_ij + g_j} is doubly stochastic once the loop stops: it runs in a
    ``lax.while_loop`` until the marginal error max_i |Σ_j S_ij − 1| < tol or ``max_iter`` sweeps.
    logsumexp subtracts maxima, so no β overflows; a tol below what the dtype resolves is raised
    to 8 √n eps.

    General kernels: alternate f_i ← −logsumexp_j(L_ij + g_j) (rows sum to 1) and
    g_j ← −logsumexp_i(L_ij + f_i) (columns sum to 1); after a sweep the columns are exact up to
    rounding, so the row error is the marginal error. This converges linearly, slowly once the
    particles cluster: S is then nearly block diagonal, with a second eigenvalue close to 1.

    ``symmetric=True`` (L = Lᵀ): S = diag(e^a) e^L diag(e^a) is the unique doubly stochastic
    scaling, and the averaged update a ← (a − logsumexp_j(L_ij + a_j))/2 reaches it much
    faster: its linearization is (I − S)/2, with spectral radius < 1/2 when e^L is positive
    definite (Q = K: e^{β⟨Qx_i,Qx_j⟩} is by the Schur product theorem), clusters or not.
    """
    n = logits.shape[-1]
    tol = max(tol, 8.0 * n**0.5 * float(jnp.finfo(logits.dtype).eps))

    if symmetric:

        def sweep(f, g):
            a = 0.5 * (f - jax.nn.logsumexp(logits + f[None, :], axis=1))
            return a, a
    else:

        def sweep(f, g):
            f = -jax.nn.logsumexp(logits + g[None, :], axis=1)
            return f, -jax.nn.logsumexp(logits + f[:, None], axis=0)

    def row_error(f, g):
        return jnp.max(jnp.abs(jnp.sum(jnp.exp(logits + f[:, None] + g[None, :]), axis=1) - 1.0))

    def cond(c):
        _, _, err, it = c
        return (err >= tol) & (it < max_iter)

    def body(c):
        f, g, _, it = c
        f, g = sweep(f, g)
        return f, g, row_error(f, g), it + 1

    zero = jnp.zeros(n, logits.dtype)
    f, g = sweep(zero, zero)
    return jax.lax.while_loop(cond, body, (f, g, row_error(f, g), jnp.asarray(1, jnp.int32)))


class Sinkhorn(Attention):
    """Sinkformer attention, arXiv 2110.11773 (Sinkhorn in place of the softmax of [GLPR] (2.4)):

        ẋ_i = P_{x_i}( Σ_j S_ij V x_j ),   S = diag(e^f) K diag(e^g),   K_ij = e^{β⟨Qx_i,Kx_j⟩},

    with f, g such that S is doubly stochastic (rows and columns sum to 1) to ``tol``, computed
    in the log domain within ``max_iter`` Sinkhorn sweeps. β = 0 gives S = 11ᵀ/n. A causal mask
    is refused: a lower-triangular doubly stochastic matrix is the identity (the last column has
    a single entry, which must be 1, and so on), so the flow would be trivial.
    When Q and K are the same (both None, or the same array object) the kernel is symmetric and
    the fast symmetric iteration is used; otherwise plain alternating Sinkhorn, which slows down
    as β grows and as tokens cluster, so such runs may need a larger ``max_iter``
    (``sinkhorn_potentials``).
    """

    tol: float = eqx.field(static=True, default=1e-9)
    max_iter: int = eqx.field(static=True, default=1000)
    symmetric: bool = eqx.field(static=True, default=True)

    def __init__(
        self, beta=1.0, Q=None, K=None, V=None, *, tol: float = 1e-9, max_iter: int = 1000, mask: str = "none"
    ):
        if mask == "causal":
            raise ValueError(
                "Sinkhorn attention does not support mask='causal': a lower-triangular doubly "
                "stochastic matrix is the identity, so no token would move; use SA(..., mask='causal')"
            )
        # the kernel is symmetric when Q and K are the identity or the same matrix: then the fast
        # symmetric iteration applies (decided here, as Q and K are traced once inside jit)
        symmetric = Q is K
        super().__init__(beta, Q, K, V, mask=mask)
        self.symmetric = symmetric
        self.tol = check_real("tol", tol, 0.0, strict_min=True)
        self.max_iter = check_int("max_iter", max_iter, 1)

    def in_span(self, U) -> Sinkhorn | None:
        """As ``Attention.in_span``: S mixes the values λ x_j, so with V = λI the span of the tokens is invariant.

        A symmetric kernel's K' = UᵀQᵀQ U is symmetrized, as the symmetric iteration assumes.
        """
        reduced = super().in_span(U)
        if reduced is None or reduced.K is None or not self.symmetric:
            return reduced
        return eqx.tree_at(lambda f: f.K, reduced, 0.5 * (reduced.K + jnp.swapaxes(reduced.K, -1, -2)))

    def potentials(self, x: Float[Array, "n d"]):
        """Sinkhorn potentials (f, g), final marginal error and sweeps used, for configuration x."""
        return sinkhorn_potentials(self.logits(x), self.tol, self.max_iter, self.symmetric)

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The doubly stochastic attention matrix S."""
        logits = self.logits(x)
        f, g, _, _ = sinkhorn_potentials(logits, self.tol, self.max_iter, self.symmetric)
        return jnp.exp(logits + f[:, None] + g[None, :])

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The doubly stochastic S = diag(e^f) e^{β⟨Qx_i,Kx_j⟩} diag(e^g) (``attention``)."""
        return self.attention(x)

    def drift(self, t, x):
        return self.attention(x) @ self.values(x)

    def energy(self, x: Float[Array, "n d"]) -> Float[Array, ""]:
        """J(X) = −(Σ_i f_i + Σ_j g_j)/(2β), β > 0: the energy whose gradient ascent is the flow.

        For QᵀK symmetric and V = QᵀK (e.g. Q = K = V = I), ẋ_i = grad_{x_i} J on (S^{d−1})^n,
        so dJ/dt = Σ_i ‖ẋ_i‖² ≥ 0 (module docstring).
        """
        f, g, _, _ = self.potentials(x)
        return -(jnp.sum(f) + jnp.sum(g)) / (2.0 * self.beta.astype(x.dtype))
