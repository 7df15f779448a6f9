"""Attention without a softmax: linear attention and regularized least-squares attention.

Both mix the values V x_j with weights that are linear (resp. a linear solve) in the keys instead
of the exponential weights of SA, and both are fields like the others: ``drift`` is the output
before layer norm, the base class projects it onto the tangent space on the sphere, and they
add up with other fields, run inside ``NoLN``/``PreLN``/... and take per-member Q, K, V stacks.

    LinearAttention        ẋ_i = P_{x_i}( (1/n) Σ_j ⟨φ(Qx_i), φ(Kx_j)⟩ V x_j )             normalize="n"
                           ẋ_i = P_{x_i}( Σ_j ⟨φ(Qx_i), φ(Kx_j)⟩ V x_j / Σ_j ⟨φ(Qx_i), φ(Kx_j)⟩ )   "sum"
    LeastSquaresAttention  ẋ_i = P_{x_i}( (Qx_i)ᵀ (K_XᵀK_X + αI)⁻¹ K_Xᵀ V_X )

with K_X = X Kᵀ (n×k) and V_X = X Vᵀ (n×d) the keys and values of the tokens X (n×d, one token
per row). φ is the identity (the raw kernel) or elu + 1 (the positive feature map of
Katharopoulos et al., "Transformers are RNNs", ICML 2020). The least-squares form is the
regularized key-value regression of Garnelo & Czarnecki (arXiv 2305.10203): the output for query
q is qᵀW with W = argmin ‖K_X W − V_X‖² + α‖W‖². As α → ∞, α(K_XᵀK_X + αI)⁻¹ → I, so

    α · LeastSquaresAttention(α)  →  n · LinearAttention(normalize="n")     with error O(1/α).

Neither forms the n×n weights: linear attention is (1/n) φ(Q_X) (φ(K_X)ᵀ V_X), O(n k d) per
evaluation; least squares is one k×k Cholesky solve, O(n k² + k³ + n k d). ``attention(x)``
returns the n×n weights W (output_i = Σ_j W_ij V x_j) when they are wanted.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
from jaxtyping import Array, Float

from .checks import as_weights, check_choice, check_weights
from .fields import Field, query_key

__all__ = ["LinearAttention", "LeastSquaresAttention"]

_NORMALIZE = ("n", "sum")
_FEATURES = {
    "identity": lambda z: z,
    # elu(z) + 1 > 0: the feature map of Katharopoulos et al. (2020)
    "elu": lambda z: jax.nn.elu(z) + 1.0,
}


def _as_alpha(value) -> Array:
    """α > 0 and finite, or a 1-D array of them (one per member)."""
    if isinstance(value, jax.core.Tracer):
        return value
    arr = np.asarray(value)
    if arr.ndim > 1 or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"alpha must be a real number or a 1-D array of them (one per member), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"alpha must be finite and > 0 (the ridge regularization), got {arr.tolist()}")
    return jnp.asarray(arr, dtype=jnp.result_type(float))


class _KeyValue(Field):
    """Q, K (k×d) and V (d×d), each optional (None: the identity), with a leading member axis allowed."""

    Q: Float[Array, "k d"] | None
    K: Float[Array, "k d"] | None
    V: Float[Array, "d d"] | None
    event_ndim: ClassVar[dict[str, int]] = {"Q": 2, "K": 2, "V": 2}

    def values(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """V x_j for every particle."""
        return x if self.V is None else x @ self.V.T.astype(x.dtype)

    def check(self, n: int, d: int, dtype) -> None:
        check_weights(self.Q, self.K, self.V, d)

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The n×n weights W with output_i = Σ_j W_ij V x_j (each form says how it computes them)."""
        raise NotImplementedError

    @property
    def has_attention(self) -> bool:
        return True

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The weights W of ``attention`` when they are row-stochastic (``stochastic``); ValueError when signed."""
        if not self.stochastic:
            raise ValueError(
                f"{type(self).__name__} weights are signed, not a random walk on the tokens "
                "(use LinearAttention(normalize='sum', feature='elu') for a stochastic one); "
                "field.attention(x) returns the weights themselves"
            )
        return self.attention(x)


class LinearAttention(_KeyValue):
    """Linear attention: the kernel ⟨φ(Qx_i), φ(Kx_j)⟩ in place of e^{β⟨Qx_i,Kx_j⟩}.

        normalize="n"   (default) ẋ_i = P_{x_i}( (1/n) Σ_j ⟨φ(Qx_i), φ(Kx_j)⟩ V x_j )
        normalize="sum"           ẋ_i = P_{x_i}( Σ_j ⟨φ(Qx_i), φ(Kx_j)⟩ V x_j / Σ_j ⟨φ(Qx_i), φ(Kx_j)⟩ )

    feature="identity" (default) is the raw kernel ⟨Qx_i, Kx_j⟩, which takes both signs. Its
    "n" form is a polynomial field, defined everywhere; with Q = K = V = I and no layer norm it is
    the linear ODE ẋ_i = M x_i, M = (1/n) Σ_j x_j x_jᵀ, solved by x_i(t) = (I − 2tM₀)^{-1/2} x_i(0)
    up to the blow-up time 1/(2λ_max(M₀)) (M obeys Ṁ = 2M²). On the sphere (layer norm) with
    Q = K = V = I it is the gradient ascent of (1/(4n)) Σ_ij ⟨x_i,x_j⟩² (an Oja-type flow).
    The "sum" form of the raw kernel is ill-defined wherever the denominator
    Σ_j ⟨Qx_i,Kx_j⟩ = n⟨Qx_i, K x̄⟩ vanishes (x̄ the mean token): with Q = K = I it is safe while
    every pair has ⟨x_i,x_j⟩ > 0, but tokens spread over the sphere make it change sign and the
    velocity blow up (the run then stops with a non-finite error). feature="elu" uses
    φ(z) = elu(z) + 1 > 0 entrywise (Katharopoulos et al., ICML 2020): the kernel is positive, so
    "sum" is always defined and its weights form a row-stochastic attention matrix.

    Computed as (1/n) φ(Q_X)(φ(K_X)ᵀ V_X) without the n×n weights: O(n k d).
    """

    normalize: str = eqx.field(static=True, default="n")
    feature: str = eqx.field(static=True, default="identity")

    def __init__(self, Q=None, K=None, V=None, *, normalize: str = "n", feature: str = "identity"):
        self.Q, self.K, self.V = as_weights(Q, K, V)
        self.normalize = check_choice("normalize", normalize, _NORMALIZE)
        self.feature = check_choice("feature", feature, tuple(_FEATURES))

    @property
    def stochastic(self) -> bool:
        """Whether ``attention`` is a row-stochastic matrix (positive kernel, normalized by its row sums)."""
        return self.normalize == "sum" and self.feature == "elu"

    def features(self, x: Float[Array, "n d"]) -> tuple[Array, Array]:
        """φ(Q x_i) and φ(K x_j) for every particle."""
        q, k = query_key(self.Q, self.K, x)
        phi = _FEATURES[self.feature]
        return phi(q), phi(k)

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The n×n weights W with output_i = Σ_j W_ij V x_j (row-stochastic only when ``stochastic``)."""
        q, k = self.features(x)
        w = q @ k.T
        if self.normalize == "sum":
            return w / jnp.sum(w, axis=-1, keepdims=True)
        return w / x.shape[0]

    def drift(self, t, x):
        q, k = self.features(x)
        # associativity: φ(Q_X)(φ(K_X)ᵀ V_X) never forms the n×n weights
        out = q @ (k.T @ self.values(x))
        if self.normalize == "sum":
            return out / (q @ jnp.sum(k, axis=0))[:, None]
        return out / x.shape[0]


class LeastSquaresAttention(_KeyValue):
    """Regularized least-squares attention (Garnelo & Czarnecki, arXiv 2305.10203):

        ẋ_i = P_{x_i}( (Qx_i)ᵀ (K_XᵀK_X + αI_k)⁻¹ K_Xᵀ V_X ),   K_X = X Kᵀ, V_X = X Vᵀ,

    the prediction at the query Qx_i of the ridge regression of the values on the keys. α > 0
    (a traced leaf; a 1-D array runs one member per value). Limits: as α → ∞,
    α · LeastSquaresAttention(α) → n · LinearAttention(normalize="n") with the same Q, K, V, at
    rate O(1/α); as α → 0 with K_X of full column rank k, the output is Q_X K_X⁺ V_X (the
    least-squares fit), and with Q = K = V = I it is x_i itself, so on the sphere nothing moves.

    Evaluated with a Cholesky solve of the k×k system (symmetric positive definite for α > 0),
    never an inverse; in float32 a small α relative to ‖K_X‖² loses digits like its condition number.
    """

    alpha: Float[Array, ""]
    event_ndim: ClassVar[dict[str, int]] = {"alpha": 0, "Q": 2, "K": 2, "V": 2}

    def __init__(self, alpha=1.0, Q=None, K=None, V=None):
        self.alpha = _as_alpha(alpha)
        self.Q, self.K, self.V = as_weights(Q, K, V)

    @property
    def stochastic(self) -> bool:
        """False: its weights take both signs, no random walk on the tokens."""
        return False

    def _solve(self, x: Float[Array, "n d"]) -> tuple[Array, Array, tuple[Array, bool]]:
        """Queries Q_X, keys K_X, and the Cholesky factor of K_XᵀK_X + αI."""
        q, k = query_key(self.Q, self.K, x)
        gram = k.T @ k + self.alpha.astype(x.dtype) * jnp.eye(k.shape[-1], dtype=x.dtype)
        return q, k, jax.scipy.linalg.cho_factor(gram, lower=True)

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The n×n weights W = Q_X (K_XᵀK_X + αI)⁻¹ K_Xᵀ, output_i = Σ_j W_ij V x_j (not stochastic)."""
        q, k, factor = self._solve(x)
        return q @ jax.scipy.linalg.cho_solve(factor, k.T)

    def drift(self, t, x):
        q, k, factor = self._solve(x)
        return q @ jax.scipy.linalg.cho_solve(factor, k.T @ self.values(x))
