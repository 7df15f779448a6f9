"""Random layer weights: the random-depth transformer and its common-noise SDE on the sphere (docs/model.md §1.12).

The discrete model (arXiv 2601.21942, as summarized): in layer ℓ every token takes the step

    x_i ← (x_i + L^{−α} Σ_h Σ_j A^h_ij V^h_ℓ x_j) / ‖·‖,    A^h_ij = softmax_j(β⟨Q_h x_i, K_h x_j⟩),
    V^h_ℓ = V̄ + σ G^h_ℓ / √d,

with G_ℓ a d×d matrix of i.i.d. standard normals drawn afresh in each layer and shared by the member's
tokens (one per head with ``per_head``, else one for all heads), t·L layers up to time t. With α = 1 the
fluctuations average out and the depth limit is the deterministic flow ẋ_i = P_{x_i} Σ_h Σ_j A^h_ij V̄ x_j;
with α = 1/2 and V̄ = 0 it is the Itô SDE (W a d×d matrix of independent Brownian motions, one per head
with ``per_head``, common to the member's tokens; y^h_i = Σ_j A^h_ij x_j)

    dx_i = (σ/√d) P_{x_i} Σ_h dW^h y^h_i − σ² (d − 1)/(2d) q_i x_i dt,

    q_i = Σ_h |y^h_i|² (per head) or |Σ_h y^h_i|² (shared),

whose drift is the normalization's second-order term. ``CommonNoise`` is this SDE, with an attention
drift P_{x_i} Σ_h V̄ y^h_i dt added (the limit of V_ℓ = V̄/√L + σ G_ℓ/√d); its Stratonovich drift is the Itô
drift less ½ Σ_a DF_a F_a over the noise's directions a, computed by forward differentiation.

``QuadraticForm`` is the random quadratic form on the sphere (arXiv 2603.06187, 2608.16664), the same kind of
common noise without attention: dx_i = P_{x_i} ∘ dQ_t x_i + γ P_{x_i} ∘ dw_t, Q_t = (B_t + B_tᵀ)/√2.

``CommonBrownian`` is the attention flow with fixed weights forced by one Brownian motion w in R^d common to the
tokens (the coercive common noise of arXiv 2604.26898, as summarized): dx_i = P_{x_i} Σ_h y^h_i dt + γ P_{x_i} ∘ dw_t.

All four are PyTrees of one ensemble member; ``solvers/common_noise_paths.py`` vmaps them over members and draws
G (or the Brownian increments) keyed by (seed, layer), so that a path never depends on the chunking.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .errors import InputError
from .sphere import normalize

RESIDUAL_EXPONENTS = (0.5, 1.0)
"""The residual scalings L^{−α} the model takes: 1/2 (the stochastic depth limit), 1 (the deterministic one)."""

HEAD_NOISE = ("shared", "per-head")
"""Whether the heads of a layer share one G_ℓ or draw one each."""

ATTENTION_MASKS = ("none", "causal")


def _weights(name: str, value, heads: int, d: int) -> Array:
    """Q or K as a (heads, k, d) stack: None is the identity in every head; (k, d) is shared by the heads."""
    if value is None:
        return jnp.broadcast_to(jnp.eye(d), (heads, d, d))
    a = jnp.asarray(value, dtype=float)
    if a.ndim == 2:
        a = jnp.broadcast_to(a, (heads, *a.shape))
    if a.ndim not in (3, 4) or a.shape[-3] != heads or a.shape[-1] != d:
        raise InputError(
            f"{name} must have shape (k, d), (heads, k, d) or (members, heads, k, d), with d = {d} and heads = {heads}"
        )
    return a


class Attention(eqx.Module):
    """The attention means y^h_i = Σ_j A^h_ij x_j of softmax self-attention, for every head h.

        A^h_ij = e^{β⟨Q_h x_i, K_h x_j⟩} / Σ_k e^{β⟨Q_h x_i, K_h x_k⟩}      (the row maximum subtracted)

    ``mask="causal"`` lets token i attend to tokens j ≤ i only.
    """

    beta: Float[Array, ""]
    Q: Float[Array, "H k d"]
    K: Float[Array, "H k d"]
    mask: str = eqx.field(static=True, default="none")

    def __init__(self, beta, d: int, *, Q=None, K=None, heads: int = 1, mask: str = "none"):
        if not isinstance(heads, int) or heads < 1:
            raise InputError(f"heads must be an integer ≥ 1, got {heads!r}")
        if mask not in ATTENTION_MASKS:
            raise InputError(f"mask must be one of {', '.join(ATTENTION_MASKS)}, got {mask!r}")
        self.beta = jnp.asarray(beta, dtype=float)
        self.Q = _weights("Q", Q, heads, d)
        self.K = _weights("K", K, heads, d)
        self.mask = mask

    @property
    def heads(self) -> int:
        return self.Q.shape[-3]

    def means(self, x: Float[Array, "n d"]) -> Float[Array, "H n d"]:
        # products summed by broadcasting, not einsum: vmapped over many small members, XLA fuses these
        q = jnp.sum(self.Q[:, None] * x[None, :, None, :], axis=-1)  # (H, n, k); one member's (member_axes)
        k = jnp.sum(self.K[:, None] * x[None, :, None, :], axis=-1)
        logits = self.beta * jnp.sum(q[:, :, None, :] * k[:, None, :, :], axis=-1)
        if self.mask == "causal":
            n = x.shape[0]
            logits = jnp.where(jnp.tril(jnp.ones((n, n), dtype=bool)), logits, -jnp.inf)
        a = jax.nn.softmax(logits, axis=-1)  # subtracts each row's maximum
        return jnp.sum(a[..., None] * x[None, None, :, :], axis=2)


EVENT_NDIM = {"beta": 0, "Q": 3, "K": 3, "sigma": 0, "vbar": 2, "gamma": 0}
"""The dimensions of one member's leaves; a leaf with one more leading axis carries one value per member."""


def member_axes(tree):
    """The ``in_axes`` of an ``Attention``, ``RandomDepth``, ``CommonNoise`` or ``QuadraticForm`` for ``jax.vmap``: 0 for each leaf with
    a leading member axis (β or σ of shape (B,), Q or K of shape (B, H, k, d)), None for the shared ones."""

    def axis(path, leaf):
        return 0 if jnp.ndim(leaf) > EVENT_NDIM[path[-1].name] else None

    return jax.tree_util.tree_map_with_path(axis, tree)


def _apply(v: Float[Array, "h d d"], y: Float[Array, "h n d"]) -> Float[Array, "n d"]:
    """Σ_h v_h y_{h,i} for every token i."""
    return jnp.sum(v[:, None, :, :] * y[:, :, None, :], axis=(0, 3))


def _value_mean(vbar, d: int) -> Array:
    a = jnp.asarray(vbar, dtype=float)
    if a.ndim == 0:
        return a * jnp.eye(d)
    if a.shape != (d, d):
        raise InputError(f"the mean value matrix V̄ must be a number (V̄ = v I) or a {d}×{d} matrix, got {a.shape}")
    return a


class RandomDepth(eqx.Module):
    """One member of the random-depth transformer (module docstring): its layer map and what its G's look like.

    attention        the ``Attention`` of every layer (β, Q, K, heads, mask)
    sigma            σ ≥ 0, the spread of the value matrices V_ℓ = V̄ + σ G_ℓ/√d
    vbar             V̄, a number (V̄ = v I) or a d×d matrix; 0 is the centred model
    alpha            the residual exponent α ∈ {1/2, 1}: layer ℓ adds L^{−α} times the attention output
    per_head         one G_ℓ per head (True) or one shared by the heads
    random_attention draw the attention's Q_ℓ, K_ℓ afresh in every layer (one pair per head with ``per_head``,
                     else one for all heads), with i.i.d. N(0, d^{−1/2}) entries: QᵀK = Z_QᵀZ_K/√d, whose logits
                     β⟨Q x_i, K x_j⟩ have covariance β² G_ij G_kl (docs/model.md §17.2); they replace the
                     attention's own Q, K. The layer's standard normals stack G, Z_Q and Z_K (``noise_shape``).
    """

    SCHEMES: ClassVar[tuple[str, ...]] = ("depth",)
    """The schemes of ``solvers/common_noise_paths.py`` that step it: its own layers."""

    attention: Attention
    sigma: Float[Array, ""]
    vbar: Float[Array, "d d"]
    alpha: float = eqx.field(static=True, default=0.5)
    per_head: bool = eqx.field(static=True, default=False)
    random_attention: bool = eqx.field(static=True, default=False)

    def __init__(
        self,
        attention: Attention,
        *,
        sigma=1.0,
        vbar=0.0,
        alpha: float = 0.5,
        per_head: bool = False,
        random_attention: bool = False,
    ):
        if alpha not in RESIDUAL_EXPONENTS:
            raise InputError(f"the residual exponent alpha must be one of 0.5, 1, got {alpha!r}")
        if random_attention and attention.Q.shape[-2] != attention.Q.shape[-1]:
            raise InputError("random attention weights are square (d × d): give an Attention without Q, K")
        self.attention = attention
        self.sigma = jnp.asarray(sigma, dtype=float)
        self.vbar = _value_mean(vbar, attention.Q.shape[-1])
        self.alpha = float(alpha)
        self.per_head = bool(per_head)
        self.random_attention = bool(random_attention)

    def noise_shape(self, d: int) -> tuple[int, int, int]:
        """The shape of one layer's standard normals: G as (h, d, d), h = heads with ``per_head``, else 1; with
        ``random_attention`` Z_Q and Z_K follow, (3h, d, d) in all."""
        h = self.attention.heads if self.per_head else 1
        return (3 * h if self.random_attention else h, d, d)

    def layer_attention(self, g: Float[Array, "e d d"]) -> Attention:
        """The attention of the layer whose standard normals are ``g``: the model's own, or with
        ``random_attention`` Q = Z_Q d^{−1/4}, K = Z_K d^{−1/4} from ``g``'s second and third blocks."""
        if not self.random_attention:
            return self.attention
        h, d, heads = g.shape[0] // 3, g.shape[-1], self.attention.heads
        scale = d ** (-0.25)
        q = jnp.broadcast_to(scale * g[h : 2 * h], (heads, d, d))
        k = jnp.broadcast_to(scale * g[2 * h :], (heads, d, d))
        return eqx.tree_at(lambda a: (a.Q, a.K), self.attention, (q, k))

    def layer(self, x: Float[Array, "n d"], g: Float[Array, "e d d"], layers_per_time) -> Float[Array, "n d"]:
        """One layer, with the standard normals ``g`` (shape ``noise_shape``: G, then Z_Q and Z_K with
        ``random_attention``) and L = ``layers_per_time`` layers per unit time."""
        d = x.shape[1]
        y = self.layer_attention(g).means(x)
        if self.random_attention:
            g = g[: g.shape[0] // 3]
        v = self.vbar + self.sigma * g / math.sqrt(d)  # (h, d, d), broadcast over heads when shared
        out = _apply(jnp.broadcast_to(v, (y.shape[0], d, d)), y)
        return normalize(x + jnp.asarray(layers_per_time, dtype=x.dtype) ** (-self.alpha) * out)


class CommonNoise(eqx.Module):
    """The common-noise SDE on the sphere, the α = 1/2 depth limit of ``RandomDepth`` (module docstring):

        dx_i = P_{x_i}(Σ_h V̄ y^h_i) dt + (σ/√d) P_{x_i} Σ_h dW^h y^h_i − σ² (d − 1)/(2d) q_i x_i dt     (Itô)

    One matrix Brownian motion W (one per head with ``per_head``) drives every token of a member.
    """

    SCHEMES: ClassVar[tuple[str, ...]] = ("euler-maruyama", "heun")
    """The schemes of ``solvers/common_noise_paths.py`` that step it: the SDE's (its drifts and diffusion)."""

    attention: Attention
    sigma: Float[Array, ""]
    vbar: Float[Array, "d d"]
    per_head: bool = eqx.field(static=True, default=False)

    def __init__(self, attention: Attention, *, sigma=1.0, vbar=0.0, per_head: bool = False):
        self.attention = attention
        self.sigma = jnp.asarray(sigma, dtype=float)
        self.vbar = _value_mean(vbar, attention.Q.shape[-1])
        self.per_head = bool(per_head)

    @classmethod
    def limit_of(cls, model: RandomDepth) -> CommonNoise:
        """The SDE that ``model`` tends to as L → ∞; only α = 1/2 with V̄ = 0 has one with noise (α = 1 tends to
        the deterministic flow, and α = 1/2 with V̄ ≠ 0 has no limit: the mean's step L^{−1/2} V̄ diverges)."""
        if model.alpha != 0.5:
            raise InputError("with alpha = 1 the depth limit is the deterministic flow with V̄, not a common-noise SDE")
        if model.random_attention:
            raise InputError(
                "random attention weights have no CommonNoise limit here: its coefficients are expectations over"
                " Q, K (docs/model.md §17.2); run the layers (scheme 'depth')"
            )
        if not isinstance(model.vbar, jax.core.Tracer) and bool(jnp.any(model.vbar != 0)):
            raise InputError("with alpha = 1/2 and V̄ ≠ 0 the depth limit diverges: centre the values (vbar = 0)")
        return cls(model.attention, sigma=model.sigma, per_head=model.per_head)

    def noise_shape(self, d: int) -> tuple[int, int, int]:
        """The shape of one step's Brownian increment: (heads, d, d) with ``per_head``, else (1, d, d)."""
        return (self.attention.heads if self.per_head else 1, d, d)

    def _noise_input(self, y: Float[Array, "H n d"]) -> Float[Array, "h n d"]:
        return y if self.per_head else y.sum(axis=0, keepdims=True)

    def diffusion(self, x: Float[Array, "n d"], dw: Float[Array, "h d d"]) -> Float[Array, "n d"]:
        """The noise term F(x)[dW]_i = (σ/√d) P_{x_i} Σ_h dW^h y^h_i (tangent)."""
        u = self._noise_input(self.attention.means(x))
        v = (self.sigma / math.sqrt(x.shape[1])) * _apply(dw, u)
        return v - jnp.sum(v * x, axis=-1, keepdims=True) * x

    def ito_drift(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """P_{x_i}(Σ_h V̄ y^h_i) − σ² (d − 1)/(2d) q_i x_i, the second term the normalization's (docs/model.md)."""
        d = x.shape[1]
        y = self.attention.means(x)
        m = _apply(jnp.broadcast_to(self.vbar, (y.shape[0], *self.vbar.shape)), y)
        m = m - jnp.sum(m * x, axis=-1, keepdims=True) * x
        q = jnp.sum(self._noise_input(y) ** 2, axis=(0, 2))
        return m - (self.sigma**2 * (d - 1) / (2 * d)) * q[:, None] * x

    def stratonovich_drift(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """The drift of the same SDE in Stratonovich form: the Itô drift less ½ Σ_a DF_a(x) F_a(x), the sum over
        the basis E_a of the increments' space (d² matrices, times the heads with ``per_head``)."""
        shape = self.noise_shape(x.shape[1])
        size = math.prod(shape)
        basis = jnp.eye(size, dtype=x.dtype).reshape((size, *shape))

        def correction(e):
            def f(z):
                return self.diffusion(z, e)

            return jax.jvp(f, (x,), (f(x),))[1]

        return self.ito_drift(x) - 0.5 * jax.vmap(correction)(basis).sum(axis=0)


class QuadraticForm(eqx.Module):
    """The random quadratic form on the sphere (Engel–Shalova, arXiv 2603.06187; Shalova, arXiv 2608.16664):

        dx_i = P_{x_i} ∘ dQ_t x_i + γ P_{x_i} ∘ dw_t,      Q_t = (B_t + B_tᵀ)/√2      (Stratonovich)

    B a d×d matrix of independent Brownian motions and w a Brownian motion in R^d, both common to the member's
    tokens (w common: the aligned state stays invariant, the antipodal one does not for γ > 0). One step's
    increments are one (1, d + 1, d) array: rows 0 … d − 1 are ΔB, row d is Δw. Each token alone is a Brownian
    motion on the sphere with generator ½(1 + γ²)Δ (docs/model.md §17), so the Itô drift is
    −(1 + γ²)(d − 1)/2 · x_i and the Stratonovich drift is 0.
    """

    SCHEMES: ClassVar[tuple[str, ...]] = ("euler-maruyama", "heun")
    """The schemes of ``solvers/common_noise_paths.py`` that step it: the SDE's (its drifts and diffusion)."""

    gamma: Float[Array, ""]

    def __init__(self, gamma=0.0):
        self.gamma = jnp.asarray(gamma, dtype=float)

    def noise_shape(self, d: int) -> tuple[int, int, int]:
        """The shape of one step's increments: (1, d + 1, d), ΔB above Δw."""
        return (1, d + 1, d)

    def diffusion(self, x: Float[Array, "n d"], dw: Float[Array, "1 e d"]) -> Float[Array, "n d"]:
        """The noise term P_{x_i}(ΔQ x_i + γ Δw), ΔQ = (ΔB + ΔBᵀ)/√2 (tangent)."""
        d = x.shape[1]
        b, w = dw[0, :d], dw[0, d]
        dq = (b + b.T) / math.sqrt(2.0)
        v = jnp.sum(dq[None, :, :] * x[:, None, :], axis=-1) + self.gamma * w[None, :]
        return v - jnp.sum(v * x, axis=-1, keepdims=True) * x

    def ito_drift(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """−(1 + γ²)(d − 1)/2 · x_i: the Stratonovich correction, radial (the noise's covariance is (1 + γ²)P_{x_i})."""
        d = x.shape[1]
        return -(1.0 + self.gamma**2) * (d - 1) / 2.0 * x

    def stratonovich_drift(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """0: the Stratonovich equation has no drift."""
        return jnp.zeros_like(x)


class CommonBrownian(eqx.Module):
    """Self-attention forced by a Brownian motion common to the tokens (docs/model.md §17.3):

        dx_i = P_{x_i} Σ_h y^h_i dt + γ P_{x_i} ∘ dw_t,      y^h_i = Σ_j A^h_ij x_j      (Stratonovich)

    w a Brownian motion in R^d shared by the member's tokens (QᵀK of ``attention``, V = I). Alone, the noise
    moves R = ⟨x_i, x_j⟩ by dR = γ²(1 − R)(d − 2 − R) dt + γ(1 − R)⟨x_i + x_j, dw⟩: it contracts every pair at a
    rate of at least γ²(d − 3), the interaction energy decays on average (synchronization by noise). The Itô
    drift is the Stratonovich one less the radial γ²(d − 1)/2 · x_i; one step's increment is a (1, 1, d) array.
    """

    SCHEMES: ClassVar[tuple[str, ...]] = ("euler-maruyama", "heun")
    """The schemes of ``solvers/common_noise_paths.py`` that step it: the SDE's (its drifts and diffusion)."""

    attention: Attention
    gamma: Float[Array, ""]

    def __init__(self, attention: Attention, gamma=1.0):
        self.attention = attention
        self.gamma = jnp.asarray(gamma, dtype=float)

    def noise_shape(self, d: int) -> tuple[int, int, int]:
        """The shape of one step's increment: (1, 1, d), Δw."""
        return (1, 1, d)

    def diffusion(self, x: Float[Array, "n d"], dw: Float[Array, "1 1 d"]) -> Float[Array, "n d"]:
        """The noise term γ P_{x_i} Δw (tangent)."""
        v = jnp.broadcast_to(self.gamma * dw[0, 0], x.shape)
        return v - jnp.sum(v * x, axis=-1, keepdims=True) * x

    def stratonovich_drift(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """P_{x_i} Σ_h y^h_i: the attention flow with V = I."""
        m = self.attention.means(x).sum(axis=0)
        return m - jnp.sum(m * x, axis=-1, keepdims=True) * x

    def ito_drift(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """The Stratonovich drift less γ²(d − 1)/2 · x_i (the noise's covariance is γ² P_{x_i})."""
        d = x.shape[1]
        return self.stratonovich_drift(x) - self.gamma**2 * (d - 1) / 2.0 * x
