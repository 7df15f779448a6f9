"""The feed-forward (MLP) term of a transformer layer as a vector field, [GLPR] (2.8).

Alone it moves each particle independently; added to attention, ``SA(β) + FeedForward(a, b, w)``,
its drift joins the attention drift before the single layer-norm projection.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .checks import check_choice, required_matrix
from .fields import Field

ACTIVATIONS = {
    "relu": jax.nn.relu,
    "tanh": jnp.tanh,
    # the exact (erf) GELU of Hendrycks & Gimpel; BERT-style "gelu_new" is its tanh approximation
    "gelu": lambda z: jax.nn.gelu(z, approximate=False),
    "sigmoid": jax.nn.sigmoid,
    "identity": lambda z: z,
}


class FeedForward(Field):
    """Feed-forward term, [GLPR] (2.8): ẋ_i = P_{x_i}( w σ(a x_i + b) ).

    a (m, d), b (m,), w (d, m) with m the hidden width; σ is applied entrywise and is one of
    "relu", "tanh", "gelu" (exact, erf-based), "sigmoid", "identity". ``b=None`` means b = 0.
    The weights are constant in time (the paper allows a(t), b(t), w(t)); a stack of them
    with one more leading axis, e.g. a of shape (B, m, d), is an ensemble of B members.
    """

    a: Float[Array, "m d"]
    b: Float[Array, " m"]
    w: Float[Array, "d m"]
    activation: str = eqx.field(static=True, default="relu")
    event_ndim: ClassVar[dict[str, int]] = {"a": 2, "b": 1, "w": 2}

    def __init__(self, a, b, w, *, activation: str = "relu"):
        for name, value in (("a", a), ("w", w)):
            if value is None:
                raise ValueError(f"FeedForward needs {name}: a of shape (m, d) and w of shape (d, m)")
        self.a = required_matrix("a", a)
        self.w = required_matrix("w", w)
        self.b = jnp.zeros(self.a.shape[-2], self.a.dtype) if b is None else required_matrix("b", b, ndim=1)
        self.activation = check_choice("activation", activation, tuple(ACTIVATIONS))
        m, d = self.a.shape[-2:]
        if self.b.shape[-1] != m:
            raise ValueError(
                f"b must have shape (m,) = ({m},) to match a of shape (m, d) = {(m, d)}; got b of shape {self.b.shape}"
            )
        if self.w.shape[-2:] != (d, m):
            raise ValueError(
                f"w must have shape (d, m) = {(d, m)} to match a of shape (m, d) = {(m, d)}; "
                f"got w of shape {self.w.shape}"
            )

    def drift(self, t, x):
        # weights follow the configuration's precision, so float32 runs stay float32
        hidden = x @ self.a.T.astype(x.dtype) + self.b.astype(x.dtype)
        return ACTIVATIONS[self.activation](hidden) @ self.w.T.astype(x.dtype)

    def check(self, n: int, d: int, dtype) -> None:
        if self.a.shape[-1] != d:
            raise ValueError(f"a has shape {self.a.shape} but particles live in d = {d}: expected (m, {d})")
