"""Where the layer norm sits: Post-LN, Pre-LN, peri-LN, nGPT, and no layer norm at all.

Each scheme is a wrapper around an attention sublayer ``inner`` (``SA``, ``USA``, a ``Sum`` of
heads...), whose ``drift`` A_i(X) = Σ_j A_ij V x_j is the sublayer's output before any
normalization. The schemes differ in what the sublayer sees and in how its output enters the
residual stream ([GLPR] §9; arXiv 2510.22026, as summarized in arXiv 2512.01868 §6.2):

    scheme        state                  velocity                                  geometry
    Post-LN       x_i ∈ S^{d-1}          ẋ_i = P_{x_i} A_i(X)                       sphere
    Pre-LN        x_i ∈ R^d, θ = x/‖x‖   ẋ_i = A_i(Θ)                               euclidean
    peri-LN       x_i ∈ R^d, θ = x/‖x‖   ẋ_i = A_i(Θ) / ‖A_i(Θ)‖                    euclidean
    nGPT          x_i ∈ S^{d-1}          ẋ_i = α P_{x_i}( A_i(X) / ‖A_i(X)‖ )        sphere
    no LN         x_i ∈ R^d              ẋ_i = A_i(X)                               euclidean
    no LN, z      z_i = e^{−tV} x_i      ż_i = e^{−tV} A_i(e^{tV} Z) − V z_i        euclidean

With r_i = ‖x_i‖, the two schemes in R^d move the directions by θ̇_i = r_i^{-1} P_{θ_i}(ẋ_i):
attention is blind to the norms, which only slow the directions down as they grow.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
from jaxtyping import Array, Float

from .fields import Attention, Field
from .sphere import normalize

__all__ = ["PostLN", "PreLN", "PeriLN", "NGPT", "NoLN", "RescaledNoLN"]


def _unit_rows(a: Float[Array, "n d"]) -> Float[Array, "n d"]:
    """a_i / ‖a_i‖, and 0 for a zero row (where the direction is undefined, the particle rests)."""
    norm = jnp.linalg.norm(a, axis=-1, keepdims=True)
    # the double where keeps gradients finite at a zero row
    return jnp.where(norm > 0, a / jnp.where(norm > 0, norm, 1.0), 0.0)


def _as_alpha(value) -> Array:
    if isinstance(value, jax.core.Tracer):
        return value
    arr = np.asarray(value)
    if arr.ndim > 1 or not np.issubdtype(arr.dtype, np.number) or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"alpha must be a number > 0 or a 1-D array of them, got {arr.tolist()}")
    return jnp.asarray(arr, dtype=jnp.result_type(float))


def _sublayer(inner) -> Field:
    if not isinstance(inner, Field):
        raise ValueError(f"inner must be an attnflow attention field such as af.SA(beta), got {type(inner).__name__}")
    if inner.geometry != "sphere":
        raise ValueError(
            f"inner must be an attention sublayer acting on unit vectors (geometry 'sphere'), "
            f"got {type(inner).__name__} with geometry {inner.geometry!r}"
        )
    return inner


class _Wrapper(Field):
    """A normalization scheme around an attention sublayer; β, validation and ensembles come from ``inner``."""

    inner: Field

    def __init__(self, inner: Field):
        self.inner = _sublayer(inner)

    @property
    def beta(self):
        """β of the sublayer (for statistics such as the energy)."""
        return self.inner.beta

    def inner_fields(self) -> tuple[Field, ...]:
        return (self.inner,)

    def check(self, n: int, d: int, dtype) -> None:
        self.inner.check(n, d, dtype)

    def in_span(self, U) -> Field | None:
        """The same scheme around the sublayer's reduction: every scheme feeds the sublayer the tokens
        or their directions and adds a multiple of its output, so the span is invariant when the
        sublayer's is (for the rescaled no-LN form, e^{−tV} = e^{−λt} keeps it too)."""
        inner = self.inner.in_span(U)
        return None if inner is None else eqx.tree_at(lambda f: f.inner, self, inner)


class PostLN(_Wrapper):
    """Post-LN, the sphere model of [GLPR] (2.3): ẋ_i = P_{x_i} A_i(X).

    Normalizing after the residual update, x ← (x + h A(x)) / ‖·‖, is in continuous time the
    projection P_x. ``PostLN(SA(β))`` is ``SA(β)``; the wrapper exists so that the schemes of
    this module are written alike.
    """

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.inner.drift(t, x)


class PreLN(_Wrapper):
    """Pre-LN: tokens in R^d, attention on their directions, output added unnormalized.

        ẋ_i = A_i(Θ),   θ_i = x_i / ‖x_i‖     [arXiv 2510.22026; 2512.01868 §6.2]

    Equivalently, with r_i = ‖x_i‖:  ṙ_i = ⟨θ_i, A_i(Θ)⟩,  θ̇_i = r_i^{-1} P_{θ_i} A_i(Θ).
    With V = I the norms grow like r_i ~ t once the directions have merged, so the directions
    slow down like 1/t: on equiangular data 1 − ρ(t) ~ C t^{-2}, against e^{-2t} for Post-LN.
    Rows must be nonzero (a zero token has no direction).
    """

    geometry: ClassVar[str] = "euclidean"

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.inner.drift(t, normalize(x))

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"] | None:
        """The sublayer's matrix on the directions: A(Θ), θ_i = x_i / ‖x_i‖."""
        return self.inner.attention_matrix(t, normalize(x))


class PeriLN(_Wrapper):
    """Peri-LN: normalize both the sublayer's input and its output, residual stream unnormalized.

        ẋ_i = A_i(Θ) / ‖A_i(Θ)‖,   θ_i = x_i / ‖x_i‖

    Continuous form of h ← h + Norm(Attn(Norm(h))) (Kim et al. 2025, arXiv 2502.02732) with Norm
    the scaling to unit length (no learned gain). Every token moves at unit speed, so, with
    u_i = A_i/‖A_i‖, ṙ_i = ⟨θ_i, u_i⟩ ∈ [−1, 1] and θ̇_i = r_i^{-1} P_{θ_i} u_i. A zero output
    ‖A_i‖ = 0 leaves its token at rest.

    The public simuformer code shares the direction equation only: it steps θ ← Norm(θ + h u / r)
    (the renormalized Euler step of θ̇ = r^{-1} P_θ u) but updates the radius by r ← r + h r Σ_k u_k,
    r times the sum of u's coordinates, in place of ⟨θ, u⟩. Its radii then grow or decay
    exponentially, at rates up to √d, where ⟨θ, u⟩ moves each by at most t: from 5e-25 to 4e19 by
    t = 20 (its update rewritten in NumPy: n = 64, d = 16, 8 heads, β = 1, h = 0.1, float32), and as
    θ̇ divides by r its directions move on another clock. This field follows the equation above.
    """

    geometry: ClassVar[str] = "euclidean"

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return _unit_rows(self.inner.drift(t, normalize(x)))

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"] | None:
        """The sublayer's matrix on the directions: A(Θ), θ_i = x_i / ‖x_i‖."""
        return self.inner.attention_matrix(t, normalize(x))


class NGPT(_Wrapper):
    """nGPT: tokens on the sphere move towards the normalized sublayer output with step α.

        ẋ_i = α P_{x_i}( A_i(X) / ‖A_i(X)‖ )

    Continuous form of h ← Norm(h + α (Norm(Attn(h)) − h)) (Loshchilov et al. 2024,
    arXiv 2410.01131, with one scalar α in place of the per-coordinate eigen learning rates
    α_A): to first order in α, Norm(h + α(a − h)) = h + α P_h a. The public simuformer code
    uses α = 0.2. The tangent direction is that of Post-LN (P_{x_i} A_i); only the speed differs,
    α ‖P_{x_i} A_i‖ / ‖A_i‖ ≤ α, so near consensus (A_i → x_i) 1 − ⟨x_i, x_j⟩ ~ e^{-2αt}.
    α is a traced leaf: an array of shape (B,) runs B members.
    """

    alpha: Float[Array, ""]
    event_ndim: ClassVar[dict[str, int]] = {"alpha": 0}

    def __init__(self, inner: Field, alpha=1.0):
        super().__init__(inner)
        self.alpha = _as_alpha(alpha)

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.alpha.astype(x.dtype) * _unit_rows(self.inner.drift(t, x))


class NoLN(_Wrapper):
    """No layer norm: the attention dynamics in R^d on the raw tokens, [GLPR] §9 (arXiv 2305.05465).

        ẋ_i = Σ_j A_ij(X) V x_j,   A_ij(X) = e^{β⟨Qx_i,Kx_j⟩} / Σ_k e^{β⟨Qx_i,Kx_k⟩}   (SA inner)

    Tokens grow like e^{tV}; the logits grow with them (like e^{2t} for V = I), so attention
    hardens into a hardmax. ``RescaledNoLN`` follows z = e^{-tV} x instead, which converges.
    """

    geometry: ClassVar[str] = "euclidean"

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.inner.drift(t, x)


class RescaledNoLN(_Wrapper):
    """No layer norm in the rescaled variables z_i = e^{-tV} x_i, [GLPR] §9 (arXiv 2305.05465):

        ż_i = Σ_j A_ij(e^{tV} Z) V (z_j − z_i)         (SA inner; A row-stochastic)

    In general ż_i = e^{-tV} A_i(e^{tV} Z) − V z_i; since attention mixes tokens and V acts on
    coordinates, e^{-tV} A_i(e^{tV} Z) = Σ_j A_ij(e^{tV} Z) V z_j, which is computed as the inner
    field with Q, K replaced by Q e^{tV}, K e^{tV} evaluated at Z, so no e^{±tV} multiplies the
    values (their product would lose digits like the condition number of e^{tV}). The field
    depends on t; z(0) = x(0). For V = I and QᵀK ≻ 0 the z_i converge to the vertices of a
    convex polytope ([GLPR] §9, Table 1).

    ``inner`` must be a single attention field (``SA`` or ``USA``): its V defines the rescaling.
    """

    inner: Attention
    geometry: ClassVar[str] = "euclidean"

    def __init__(self, inner: Field):
        if not isinstance(inner, Attention):
            raise ValueError(
                f"RescaledNoLN needs a single attention field (SA or USA) whose V defines "
                f"z = e^(-tV) x, got {type(inner).__name__}"
            )
        super().__init__(inner)

    def drift(self, t, z: Float[Array, "n d"]) -> Float[Array, "n d"]:
        inner = self.inner
        t = jnp.asarray(t, z.dtype)
        if inner.V is None:
            E = jnp.exp(t) * jnp.eye(z.shape[-1], dtype=z.dtype)
        else:
            E = jax.scipy.linalg.expm(t * inner.V.astype(z.dtype))
        # Q e^{tV}, K e^{tV} (rather than β e^{2t} when V = I, which would also move the e^{-β}
        # offset of USA's rescaled time)
        Q = E if inner.Q is None else inner.Q.astype(z.dtype) @ E
        K = E if inner.K is None else inner.K.astype(z.dtype) @ E
        conjugated = eqx.tree_at(lambda f: (f.Q, f.K), inner, (Q, K), is_leaf=lambda a: a is None)
        return conjugated.drift(t, z) - inner.values(z)

    def attention_matrix(self, t, z: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The sublayer's matrix on the tokens of ``NoLN``: A(e^{tV} Z)."""
        return self.inner.attention_matrix(t, self.tokens(t, z))

    def tokens(self, t, z: Float[Array, "... n d"]) -> Float[Array, "... n d"]:
        """x = e^{tV} z: the tokens of ``NoLN`` from the rescaled ones.

        ``t`` is a scalar, or the save times (T,) with ``z`` of shape (..., T, n, d) (as in
        ``simulate(...).xs``). V may carry an ensemble axis matching the leading axis of z.
        """
        return self._apply(t, z, sign=1.0)

    def rescale(self, t, x: Float[Array, "... n d"]) -> Float[Array, "... n d"]:
        """z = e^{-tV} x: the rescaled tokens of the ``NoLN`` tokens x (shapes as in ``tokens``)."""
        return self._apply(t, x, sign=-1.0)

    def _apply(self, t, y, sign):
        y = jnp.asarray(y)
        tt = sign * jnp.asarray(t, y.dtype)
        V = self.inner.V
        if V is None:
            return jnp.exp(tt)[..., None, None] * y
        V = V.astype(y.dtype)
        if tt.ndim == 1:
            V = V[..., None, :, :]  # a time axis before (d, d), so members × times broadcast
        E = jnp.vectorize(jax.scipy.linalg.expm, signature="(d,d)->(d,d)")(tt[..., None, None] * V)
        return jnp.einsum("...de,...ne->...nd", E, y)
