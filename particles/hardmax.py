"""Hardmax attention: the β → ∞ limit of self-attention with self-attention forbidden ([GLPR] §9).

At β = ∞ the softmax of SA puts all weight on the largest ⟨Qx_i, Kx_j⟩, which for Q = K = I
is j = i itself: every velocity vanishes and the limit is trivial. The usual fix excludes the
diagonal, so each token moves towards the value of its best other token:

    ẋ_i = P_{x_i}( V x_{j*(i)} ),   j*(i) = argmax_{j ≠ i} ⟨Q x_i, K x_j⟩.

The field is discontinuous where the argmax changes, so solutions are understood in the sense
of Filippov and need not be unique there (at a tie the velocity may be any convex combination
of the tied targets' velocities). The implementation breaks ties by the smallest index, which
picks one Filippov selection; fixed-step methods of order > 1 lose their order at switches.
"""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .checks import as_weights, check_weights
from .fields import Field, query_key


class Hardmax(Field):
    """Hardmax self-attention without self-interaction, [GLPR] §9 (docs/model.md §1.9):

        ẋ_i = P_{x_i}( V x_{j*(i)} ),   j*(i) = argmax_{j≠i} ⟨Qx_i, Kx_j⟩   (smallest j at ties).

    It is the limit β → ∞ of SA with the diagonal logits set to −∞, wherever the argmax is
    unique. Q, K (k×d) and V (d×d) default to the identity; a leading axis makes an ensemble.
    Needs n ≥ 2 tokens.
    """

    Q: Float[Array, "k d"] | None = None
    K: Float[Array, "k d"] | None = None
    V: Float[Array, "d d"] | None = None
    event_ndim: ClassVar[dict[str, int]] = {"Q": 2, "K": 2, "V": 2}

    def __init__(self, Q=None, K=None, V=None):
        self.Q, self.K, self.V = as_weights(Q, K, V)

    def scores(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """⟨Q x_i, K x_j⟩, with −∞ on the diagonal (no self-attention)."""
        q, k = query_key(self.Q, self.K, x)
        n = x.shape[0]
        return jnp.where(jnp.eye(n, dtype=bool), -jnp.inf, q @ k.T)

    def targets(self, x: Float[Array, "n d"]) -> Int[Array, " n"]:
        """j*(i): the index each token attends to (the first one at ties)."""
        return jnp.argmax(self.scores(x), axis=-1)

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The 0/1 attention matrix A_ij = [j = j*(i)] (row-stochastic)."""
        n = x.shape[0]
        return (self.targets(x)[:, None] == jnp.arange(n)[None, :]).astype(x.dtype)

    @property
    def has_attention(self) -> bool:
        return True

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """A_ij = [j = j*(i)] (``attention``)."""
        return self.attention(x)

    def drift(self, t, x):
        y = x[self.targets(x)]
        return y if self.V is None else y @ self.V.T.astype(x.dtype)

    def check(self, n: int, d: int, dtype) -> None:
        if n < 2:
            raise ValueError(f"Hardmax excludes self-attention, so it needs n ≥ 2 tokens, got n = {n}")
        check_weights(self.Q, self.K, self.V, d)
