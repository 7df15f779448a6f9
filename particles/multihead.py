"""Multi-head self-attention on the sphere, [GLPR] (2.7).

H heads, each with its own (Q_h, K_h, V_h), act on the same configuration and their outputs
are added before the layer norm. The weights are stacked along a leading head axis, so all
heads are computed by one batched contraction (no Python loop over heads), and a stack of
them per ensemble member, (B, H, k, d), runs B members in one compiled call.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import as_beta, as_parameter, check_choice, check_int, required_matrix
from .fields import KERNEL_MODELS, MASKS, Field, rope_frequencies, rotate_positions
from .span import identity_scale, span_kernel

POSITIONAL = ("none", "alibi", "rope")


class MultiHead(Field):
    """Multi-head self-attention with layer norm, [GLPR] (2.7):

        ẋ_i = P_{x_i}( Σ_{h=1}^H Σ_j A^h_ij V_h x_j ),

        model="sa":           A^h_ij = e^{β⟨Q_h x_i, K_h x_j⟩} / Σ_k e^{β⟨Q_h x_i, K_h x_k⟩}   [GLPR] (2.4)
        model="usa":          A^h_ij = (1/n) e^{β⟨Q_h x_i, K_h x_j⟩}                          [GLPR] §3.3
        model="usa-rescaled": A^h_ij = (1/n) e^{β(⟨Q_h x_i, K_h x_j⟩ − 1)}                    [arXiv 2410.06833]

    Q, K have shape (H, k, d) (in practice k = d/H) and V shape (H, d, d); one more leading
    axis is an ensemble of per-member weights. β is shared by the heads. ``mask="causal"``
    lets token i attend to tokens j ≤ i only (arXiv 2411.04990). As in ``SA``/``USA`` each
    row's maximum logit is subtracted before exponentiating, so no β overflows.
    With H = 1 this is ``SA(β, Q[0], K[0], V[0])`` (or ``USA``).

    ``positional="alibi"`` (with ``mask="causal"``) adds −m_h (i − j) to head h's logits, ALiBi as Press,
    Smith and Lewis (2022) define it: one slope per head, ``alibi_slope`` of shape () (every head), (H,)
    or (members, H); ``alibi_slopes(H)`` gives their geometric slopes 2^{−8h/H}.

    ``positional="rope"`` (any mask) rotates each head's queries Q_h x_i and keys K_h x_j to their positions,
    β⟨R_i Q_h x_i, R_j K_h x_j⟩, R_i turning the plane (2p, 2p + 1) of the head's k coordinates by i·θ_p,
    θ_p = ``rope_base``^{−2p/k}, as ``SA`` does with one head (k must be even); the values are not rotated.
    """

    beta: Float[Array, ""]
    Q: Float[Array, "H k d"]
    K: Float[Array, "H k d"]
    V: Float[Array, "H d d"]
    mask: str = eqx.field(static=True, default="none")
    model: str = eqx.field(static=True, default="sa")
    positional: str = eqx.field(static=True, default="none")
    alibi_slope: Float[Array, " H"] | None = None
    rope_base: Float[Array, ""] | None = None
    event_ndim: ClassVar[dict[str, int]] = {"beta": 0, "Q": 3, "K": 3, "V": 3, "alibi_slope": 1, "rope_base": 0}

    def __init__(
        self,
        beta,
        Q,
        K,
        V,
        *,
        mask: str = "none",
        model: str = "sa",
        positional: str = "none",
        alibi_slope=1.0,
        rope_base=10000.0,
    ):
        # β < 0 where the kernel's row maximum is subtracted: not in the rescaled time, meant for β ≥ 0
        self.beta = as_beta(beta, signed=model in ("sa", "usa"), field=f"MultiHead(model={model!r})")
        for name, value in (("Q", Q), ("K", K), ("V", V)):
            if value is None:
                raise ValueError(
                    f"MultiHead needs {name} of shape (heads, ...); "
                    "use MultiHead.identity(beta, heads, d) for coordinate-block heads"
                )
        self.Q = required_matrix("Q", Q, ndim=3)
        self.K = required_matrix("K", K, ndim=3)
        self.V = required_matrix("V", V, ndim=3)
        self.mask = check_choice("mask", mask, MASKS)
        self.model = check_choice("model", model, KERNEL_MODELS)
        if self.Q.shape[-3:] != self.K.shape[-3:]:
            raise ValueError(
                f"Q and K must have the same shape (heads, k, d); got Q {self.Q.shape[-3:]} and K {self.K.shape[-3:]}"
            )
        if self.V.shape[-1] != self.V.shape[-2]:
            raise ValueError(f"V must be a stack of square matrices (heads, d, d), got shape {self.V.shape[-3:]}")
        if self.V.shape[-3] != self.Q.shape[-3]:
            raise ValueError(
                f"Q, K and V must have the same number of heads (leading axis); "
                f"got {self.Q.shape[-3]} for Q, K and {self.V.shape[-3]} for V"
            )
        if self.V.shape[-1] != self.Q.shape[-1]:
            raise ValueError(f"Q, K act on d = {self.Q.shape[-1]} but V on d = {self.V.shape[-1]}; they must agree")
        self.positional = check_choice("positional", positional, POSITIONAL)
        if self.positional == "alibi":
            if self.mask != "causal":
                raise ValueError("positional='alibi' biases attention to earlier tokens: it needs mask='causal'")
            self.alibi_slope = _head_slopes(alibi_slope, self.Q.shape[-3])
        if self.positional == "rope":
            if self.Q.shape[-2] % 2:
                raise ValueError(
                    f"positional='rope' rotates the planes (2p, 2p + 1) of each head's queries and keys: their "
                    f"dimension k = {self.Q.shape[-2]} must be even (d/heads with identity heads)"
                )
            base = as_parameter("rope_base", rope_base, "base")
            if not isinstance(rope_base, jax.core.Tracer) and np.any(np.asarray(rope_base) <= 0):
                raise ValueError(f"rope_base must be > 0 (θ_p = base^(−2p/k)), got {np.asarray(rope_base).tolist()}")
            self.rope_base = base

    @staticmethod
    def alibi_slopes(heads: int) -> np.ndarray:
        """ALiBi's slopes m_h = 2^{−8h/H}, h = 1 … H (Press, Smith, Lewis 2022): 1/2 … 1/256 for 8 heads."""
        heads = check_int("heads", heads, 1)
        return 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)

    @classmethod
    def identity(
        cls,
        beta,
        heads: int,
        d: int,
        *,
        mask: str = "none",
        model: str = "sa",
        positional: str = "none",
        alibi_slope=1.0,
        rope_base=10000.0,
    ) -> MultiHead:
        """H heads that split R^d into H coordinate blocks of size k = d/H.

        Q_h = K_h = rows h·k … (h+1)·k − 1 of I_d, so head h attends with β⟨x_i, x_j⟩ restricted
        to block h; V_h = I_d / H, so the heads' sum is the average of their outputs and, when
        all heads agree (e.g. H = 1), the field is the plain (SA) of [GLPR] with Q = K = V = I.
        """
        heads = check_int("heads", heads, 1)
        d = check_int("d", d, 1)
        if d % heads:
            raise ValueError(f"heads must divide d: got heads={heads} and d={d}")
        k = d // heads
        blocks = np.eye(d).reshape(heads, k, d)
        values = np.broadcast_to(np.eye(d) / heads, (heads, d, d))
        return cls(
            beta,
            blocks,
            blocks,
            values,
            mask=mask,
            model=model,
            positional=positional,
            alibi_slope=alibi_slope,
            rope_base=rope_base,
        )

    @property
    def heads(self) -> int:
        """Number of heads H."""
        return self.Q.shape[-3]

    # -- pieces --------------------------------------------------------------------------
    def logits(self, x: Float[Array, "n d"]) -> Float[Array, "H n n"]:
        """β⟨Q_h x_i, K_h x_j⟩ for every head (−∞ where the mask forbids attention)."""
        # weights follow the configuration's precision, so float32 runs stay float32
        q = jnp.einsum("hkd,nd->hnk", self.Q.astype(x.dtype), x)
        k = jnp.einsum("hkd,nd->hnk", self.K.astype(x.dtype), x)
        if self.positional == "rope":
            theta = rope_frequencies(self.rope_base, q.shape[-1], x.dtype)
            q, k = jax.vmap(lambda a: rotate_positions(a, theta))(q), jax.vmap(lambda a: rotate_positions(a, theta))(k)
        logits = self.beta.astype(x.dtype) * jnp.einsum("hik,hjk->hij", q, k)
        if self.positional == "alibi":
            assert self.alibi_slope is not None, "__init__ sets alibi_slope with positional='alibi'"
            i = jnp.arange(x.shape[0], dtype=x.dtype)
            logits = logits - self.alibi_slope.astype(x.dtype)[:, None, None] * (i[:, None] - i[None, :])
        if self.mask == "causal":
            n = x.shape[0]
            logits = jnp.where(jnp.tril(jnp.ones((n, n), bool)), logits, -jnp.inf)
        return logits

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "H n n"]:
        """The attention matrices A^h (row-stochastic for model="sa")."""
        logits = self.logits(x)
        if self.model == "sa":
            return jax.nn.softmax(logits, axis=-1)
        offset = 0.0 if self.model == "usa" else self.beta.astype(x.dtype)
        return jnp.exp(logits - offset) / x.shape[0]

    @property
    def has_attention(self) -> bool:
        return True

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """A = (1/H) Σ_h softmax_j(β⟨Q_h x_i, K_h x_j⟩): the mean of the heads' row-normalized matrices."""
        return jnp.mean(jax.nn.softmax(self.logits(x), axis=-1), axis=-3)

    def kernel_logits(self, x: Float[Array, "n d"]) -> Float[Array, "H n n"]:
        """β⟨Q_h x_i, K_h x_j⟩ for every head (``logits``)."""
        return self.logits(x)

    def drift(self, t, x):
        logits = self.logits(x)
        # every row keeps its diagonal entry (also under a causal mask), so m is finite
        m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
        w = jnp.exp(logits - m)
        if self.model == "sa":
            w = w / jnp.sum(w, axis=-1, keepdims=True)
        else:
            # restore e^{m} (or e^{m−β}) after the product, as in USA, so only a huge velocity overflows
            offset = 0.0 if self.model == "usa" else self.beta.astype(x.dtype)
            w = w * (jnp.exp(m - offset) / x.shape[0])
        # A^h x first, then V_h: O(H n² d + H n d²) and no (H, n, d) stack of V_h x_j kept around
        mixed = jnp.einsum("hij,jd->hid", w, x)
        return jnp.einsum("hed,hid->ie", self.V.astype(x.dtype), mixed)

    def in_span(self, U) -> MultiHead | None:
        """With every V_h = λ_h I: the same heads on y = x U, Q'_h = I_r, K'_h = UᵀQ_hᵀK_h U, V'_h = λ_h I_r.

        Each head's output Σ_j A^h_ij λ_h x_j is a combination of the tokens whatever Q_h, K_h (the
        coordinate blocks of ``identity`` included, whose V_h = I/H); the logits are unchanged. None
        when some V_h is not a multiple of the identity (e.g. a projection onto a block), for a
        frame left unspecified (an int U: Q_h, K_h need the frame), and with rotary positions.
        """
        scale = identity_scale(self.V)
        if scale is None or isinstance(U, (int, np.integer)) or self.positional == "rope":
            return None
        if np.shape(U)[-2] != self.Q.shape[-1]:
            raise ValueError(f"the frame U has shape {np.shape(U)} but the heads act on d = {self.Q.shape[-1]}")
        K = span_kernel(self.Q, self.K, U, inner_axes=1)
        assert K is not None, "the heads' Q and K are matrices, never the identity None"
        r = K.shape[-1]
        eye = jnp.eye(r, dtype=K.dtype)
        Q = jnp.broadcast_to(eye, (self.heads, r, r))
        V = scale[..., None, None] * eye
        return eqx.tree_at(lambda f: (f.Q, f.K, f.V), self, (Q, K, V))

    # -- validation against a configuration ---------------------------------------------
    def check(self, n: int, d: int, dtype) -> None:
        if self.Q.shape[-1] != d:
            raise ValueError(f"Q has shape {self.Q.shape} but particles live in d = {d}: expected (heads, k, {d})")
        if self.V.shape[-2:] != (d, d):
            raise ValueError(f"V has shape {self.V.shape} but particles live in d = {d}: expected (heads, {d}, {d})")
        if self.model != "usa" or isinstance(self.beta, jax.core.Tracer):
            return
        beta_max = float(np.max(np.abs(np.asarray(self.beta))))  # weights up to e^{|β| ‖QᵀK‖} for either sign
        log_max = math.log(float(jnp.finfo(dtype).max))
        # headroom for the sums over n particles and H heads and a few Runge–Kutta stages
        if beta_max * self.kernel_norm() > log_max - math.log(n * self.heads) - 8.0:
            raise ValueError(
                f"MultiHead(model='usa') at beta={beta_max:g} has velocities of order e^beta, which overflow "
                f"{jnp.dtype(dtype).name}; use model='usa-rescaled' (time t -> e^-beta t), "
                + ("float64, " if jnp.dtype(dtype).itemsize < 8 else "")
                + "or a smaller beta"
            )

    def kernel_norm(self) -> float:
        """Largest |⟨Q_h x, K_h y⟩| over unit x, y and heads: max_h ‖Q_hᵀK_h‖₂ (max over members); with rotary
        positions the bound max_h ‖Q_h‖₂‖K_h‖₂ over every rotation between them."""
        if self.positional == "rope":
            norms = np.linalg.norm(np.asarray(self.Q), 2, axis=(-2, -1)) * np.linalg.norm(
                np.asarray(self.K), 2, axis=(-2, -1)
            )
            return float(np.max(norms))
        qk = np.swapaxes(np.asarray(self.Q), -1, -2) @ np.asarray(self.K)
        return float(np.max(np.linalg.norm(qk, 2, axis=(-2, -1))))


def _head_slopes(value, heads: int) -> Array:
    """ALiBi slopes as an array ending in the head axis: () → (H,); (H,) and (members, H) as given."""
    if isinstance(value, jax.core.Tracer):
        return value
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        arr = np.full(heads, float(arr))
    if arr.ndim > 2 or arr.shape[-1] != heads:
        raise ValueError(
            f"alibi_slope must be a number, one slope per head (shape ({heads},)) or one row of them "
            f"per member (shape (members, {heads})); got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"alibi_slope must be finite and ≥ 0, got {arr.tolist()}")
    return jnp.asarray(arr, dtype=jnp.result_type(float))
