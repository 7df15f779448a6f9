"""The attention matrix of a configuration as a Markov chain: spectrum, stationary law, entropies.

The attention matrix A of SA is row-stochastic ([GLPR] (2.4)): A_ij is the probability that token i
attends to token j, i.e. a random walk on the tokens. Its spectrum, its stationary distribution
(the left Perron vector π, πA = π) and the entropy of its rows say how attention is spread:

* at consensus (all tokens equal) A = (1/n)11ᵀ: spectrum {1, 0, …, 0}, π uniform, every row has
  entropy log n, so every token attends to n tokens;
* with k tight, well-separated clusters A is nearly block diagonal: k eigenvalues near 1, so the
  spectral gap 1 − |λ₂| closes, and each token attends to about the size of its cluster;
* with QᵀK symmetric the chain is reversible: π_i ∝ Z_i = Σ_j e^{β⟨Qx_i,Kx_j⟩} (detailed balance
  Z_i A_ij = e^{β⟨Qx_i,Kx_j⟩} = Z_j A_ji), uniform only when A is doubly stochastic (Sinkhorn);
* under a causal mask token 1 attends only to itself: it is absorbing, π = e₁.

``attention_matrix(field, x)`` takes any field and the configuration it moves; the other functions
take a row-stochastic matrix (or a stack, shape (..., n, n)), are pure JAX, and jit and vmap.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jaxtyping import Array, Complex, Float

from .fields import Field

__all__ = [
    "attention_matrix",
    "attention_spectrum",
    "second_eigenvalue",
    "stationary_distribution",
    "row_entropy",
    "effective_tokens",
    "attention_summary",
]


def attention_matrix(field: Field, x: Float[Array, "n d"], t=0.0) -> Float[Array, "n n"]:
    """The row-stochastic attention matrix A(x) with which ``field`` mixes the tokens at time t.

    The field's own ``Field.attention_matrix``. SA, USA (and their masks, random or layer-wise
    weights): the softmax of the logits β⟨Qx_i,Kx_j⟩ (for USA, its weights normalized by their row
    sums: the same random walk); Sinkhorn: its doubly stochastic matrix; hardmax: the 0/1 matrix of
    the targets j*(i); MultiHead: the mean over heads of their row-normalized matrices; the circle
    (angles): the softmax of β cos(θ_i − θ_j); linear attention with a positive feature map and
    normalize="sum": its weights. Wrappers look through to their sublayer, as it sees the tokens:
    Pre-LN and peri-LN normalize x first, no-LN uses x as it is, the rescaled no-LN form maps z to
    x = e^{tV}z, layer-wise weights take layer ℓ(t). Sums: a term without attention (feed-forward)
    is skipped; several attention terms give the mean of their matrices. Signed weights (linear
    attention with the raw kernel, least-squares attention) are not a random walk: ValueError (their
    ``attention(x)`` gives the weights themselves), as for a field without attention (feed-forward alone).
    """
    A = field.attention_matrix(t, jnp.asarray(x))
    if A is None:
        raise ValueError(f"{type(field).__name__} has no attention matrix")
    return A


def attention_spectrum(A: Float[Array, "... n n"]) -> Complex[Array, "... n"]:
    """Eigenvalues of A, by decreasing modulus (λ₁ = 1 for a row-stochastic A).

    ``jnp.linalg.eigvals``: LAPACK geev on CPU; on GPUs JAX calls cuSOLVER's geev (CUDA ≥ 12.6) or
    LAPACK on the host. Jit- and vmap-safe.
    """
    lam = jnp.linalg.eigvals(jnp.asarray(A))
    order = jnp.argsort(-jnp.abs(lam), axis=-1, stable=True)
    return jnp.take_along_axis(lam, order, axis=-1)


def second_eigenvalue(A: Float[Array, "... n n"]) -> Float[Array, ...]:
    """|λ₂|, the second-largest eigenvalue modulus; the spectral gap is 1 − |λ₂| (0 for n = 1).

    The walk forgets its start like |λ₂|^k: |λ₂| = 0 at consensus, → 1 as tokens split into
    clusters that no longer see each other. ``A`` is a row-stochastic attention matrix (..., n, n).
    """
    A = jnp.asarray(A)
    if A.shape[-1] < 2:
        return jnp.zeros(A.shape[:-2], A.dtype)
    return jnp.abs(attention_spectrum(A)[..., 1])


@partial(jax.jit, static_argnames="max_squarings")
def stationary_distribution(A: Float[Array, "... n n"], *, max_squarings: int = 64) -> Float[Array, "... n"]:
    """The stationary law π of the chain A: πA = π, π ≥ 0, Σπ = 1 (the left Perron vector).

    Computed as π = (1/n) 1ᵀ lim_m P^m with P = (I + A)/2 (the lazy chain: the same stationary
    laws, and never periodic), the power P^m by repeated squaring with the rows renormalized: up to
    2^``max_squarings`` steps of the walk started from a uniformly chosen token. Squaring converges
    quadratically once |λ₂(P)|^m is small, so it stops when successive powers agree to √eps, then
    squares five more times, which makes entries of transient states underflow to exact zeros.

    When the chain has one closed class (irreducible chains; a causal mask, where token 1 is
    absorbing) this is the unique stationary law; a causal mask gives π = e₁ exactly. With several
    closed classes (clusters that do not see each other at all in floating point) it is the
    limit law of the walk from a uniform start: each class weighted by the probability of
    ending in it. Entries are ≥ 0 by construction; cost O(n³) per squaring.
    """
    A = jnp.asarray(A)
    if not jnp.issubdtype(A.dtype, jnp.floating):
        A = A.astype(jnp.result_type(float))
    n = A.shape[-1]
    tol = float(jnp.finfo(A.dtype).eps) ** 0.5
    P = 0.5 * (A + jnp.eye(n, dtype=A.dtype))
    P = P / jnp.sum(P, axis=-1, keepdims=True)

    def square(P):
        P2 = P @ P
        return P2 / jnp.sum(P2, axis=-1, keepdims=True)

    def cond(state):
        _, k, since = state
        return (k < max_squarings) & (since < 6)

    def body(state):
        P, k, since = state
        P2 = square(P)
        # ``since`` counts squarings from the first one that changed P by at most tol: that one
        # leaves an error of about tol², five more square it to zero for transient states
        converged = (since > 0) | (jnp.max(jnp.abs(P2 - P)) <= tol)
        return P2, k + 1, jnp.where(converged, since + 1, 0)

    zero = jnp.asarray(0, jnp.int32)
    P, _, _ = jax.lax.while_loop(cond, body, (P, zero, zero))
    pi = jnp.mean(P, axis=-2)
    return pi / jnp.sum(pi, axis=-1, keepdims=True)


def row_entropy(A: Float[Array, "... n n"]) -> Float[Array, "... n"]:
    """Entropy of each row, H_i = −Σ_j A_ij log A_ij (0 log 0 = 0), in nats: 0 … log n.

    Exact zeros (masked entries, weights e^{−β·gap} that underflow at large β) contribute 0, so
    β = 10⁴ gives finite entropies near 0 rather than NaN.
    """
    A = jnp.asarray(A)
    positive = A > 0
    # the double where keeps gradients finite at zero entries
    safe = jnp.where(positive, A, 1.0)
    return jnp.sum(jnp.where(positive, -A * jnp.log(safe), 0.0), axis=-1)


def effective_tokens(A: Float[Array, "... n n"]) -> Float[Array, "... n"]:
    """The effective number of tokens each token attends to, exp(H_i) ∈ [1, n] (the perplexity of row i).

    n for uniform attention (consensus), 1 when a token attends to one token only, about m
    inside a cluster of m tokens that sees nothing else. Average over rows for one number.
    ``A`` is a row-stochastic attention matrix (..., n, n).
    """
    return jnp.exp(row_entropy(A))


@jax.jit
def attention_summary(A: Float[Array, "... n n"]) -> dict[str, Array]:
    """The attention statistics of a run, from one attention matrix A (or a stack):

    "spectral_gap"             1 − |λ₂| (``second_eigenvalue``), shape (...)
    "stationary_distribution"  π (``stationary_distribution``), shape (..., n)
    "attention_entropy"        row entropy averaged over the rows, shape (...)
    "effective_tokens"         exp(row entropy) averaged over the rows, shape (...)
    """
    A = jnp.asarray(A)
    entropy = row_entropy(A)
    return {
        "spectral_gap": 1.0 - second_eigenvalue(A),
        "stationary_distribution": stationary_distribution(A),
        "attention_entropy": jnp.mean(entropy, axis=-1),
        "effective_tokens": jnp.mean(jnp.exp(entropy), axis=-1),
    }
