"""Vector fields: the base class, self-attention (SA, USA), and sums of terms.

A field is an immutable PyTree (``equinox.Module``) with ``__call__(t, x) -> dx`` acting on a configuration ``x`` of
shape (n, d). Its array leaves (β, Q, K, V, ...) are traced, so changing them never recompiles. A leaf with one more
leading axis than one member needs (``event_ndim``) is an ensemble axis: ``simulate`` vmaps over it, so β of shape
(B,) or Q of shape (B, k, d) runs B members in one compiled call.

Every field splits into ``drift(t, x)``, the ambient velocity before layer norm, and, on the
sphere, the tangent projection P_x that keeps particles there ([GLPR] (2.3)). Fields add up:
``SA(...) + FeedForward(...)`` is a ``Sum`` whose drift is the sum of the drifts ([GLPR] (2.8)).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Self

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Float

from . import blocked
from .blocked import blocked_attention, check_block, check_kernel, fused_attention, resolve_block, resolve_kernel
from .checks import as_beta, as_parameter, as_weights, check_choice, check_weights
from .span import span_weights
from .sphere import normalize, project

_TIMES = ("glpr", "rescaled")


MASKS = ("none", "causal")
POSITIONAL = ("none", "alibi", "decay", "rope")

UNROLLED_N = 64
"""Up to this many tokens, SA on the circle (d = 2) and ``Circle`` sum over j term by term: the loop over j
runs once, when the function is traced, and yields n elementwise terms vectorized over the ensemble."""


def _circle_velocity(beta: Float[Array, ""], x: Float[Array, "n 2"]) -> Float[Array, "n 2"]:
    """P_{x_i}(Σ_j softmax_j(β⟨x_i,x_j⟩) x_j) for points of the plane, as ω_i x_i^⊥.

    In d = 2 the projection of v onto the tangent of x is ⟨v, x^⊥⟩ x^⊥ / ‖x‖² with x^⊥ = (−x₂, x₁), so each token's
    velocity is one number ω_i times x_i^⊥. Written as n elementwise terms (row maximum, weights, ω's numerator and
    the normalizer), the whole evaluation is one loop over the ensemble that XLA vectorizes, where the batched n × n
    products cost about twice as much at n = 32. The same numbers to rounding.
    """
    a, b = x[:, 0], x[:, 1]
    logits = [beta * (a * a[j] + b * b[j]) for j in range(x.shape[0])]
    m = logits[0]
    for lj in logits[1:]:
        m = jnp.maximum(m, lj)
    total = pull = jnp.zeros_like(m)
    for j, lj in enumerate(logits):
        w_j = jnp.exp(lj - m)
        total, pull = total + w_j, pull + w_j * (a * b[j] - b * a[j])
    omega = pull / (total * (a * a + b * b))
    return jnp.stack([-omega * b, omega * a], axis=-1)


def query_key(Q, K, x: Float[Array, "n d"]) -> tuple[Array, Array]:
    """(Q x_i)_i and (K x_j)_j, in the configuration's precision (identities cost nothing)."""
    q = x if Q is None else x @ Q.T.astype(x.dtype)
    k = x if K is None else x @ K.T.astype(x.dtype)
    return q, k


def rope_frequencies(base, k: int, dtype) -> Array:
    """θ_p = base^{−2p/k}, p = 0, …, k/2 − 1: the angle per position of the plane (2p, 2p + 1)."""
    return jnp.asarray(base, dtype) ** (-2.0 * jnp.arange(k // 2, dtype=dtype) / k)


def rotate_positions(v: Float[Array, "n k"], theta: Float[Array, " p"]) -> Float[Array, "n k"]:
    """R_{θ,i} v_i: row i's plane (2p, 2p + 1) rotated by the angle i·θ_p (token i at position i, from 0)."""
    n, k = v.shape
    angle = jnp.arange(n, dtype=v.dtype)[:, None] * theta.astype(v.dtype)[None, :]
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    pairs = v.reshape(n, k // 2, 2)
    a, b = pairs[..., 0], pairs[..., 1]
    return jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(n, k)


def _rope_parameters(base, theta, Q, K) -> tuple[Array, Array | None]:
    """(rope_base, rope_theta) checked: a base > 0 (one per member allowed); frequencies finite, one 1-D row
    (or one row per member), of k/2 entries when Q or K says k."""
    checked = as_parameter("rope_base", base, "base")  # a tracer passes as it is
    if not isinstance(base, jax.core.Tracer) and np.any(np.asarray(base) <= 0):
        raise ValueError(f"rope_base must be > 0 (θ_p = base^(−2p/k)), got {np.asarray(base).tolist()}")
    if theta is None or isinstance(theta, jax.core.Tracer):
        return checked, theta
    arr = np.asarray(theta, dtype=float)
    if arr.ndim not in (1, 2) or arr.shape[-1] == 0 or not np.all(np.isfinite(arr)):
        raise ValueError(
            "rope_theta must be the finite frequencies (θ_0, …, θ_{k/2−1}) of the planes (2p, 2p + 1), "
            f"one row, or one row per member; got {arr.tolist()}"
        )
    given = next((w for w in (Q, K) if w is not None), None)
    if given is not None and 2 * arr.shape[-1] != given.shape[-2]:
        raise ValueError(
            f"rope_theta has {arr.shape[-1]} frequencies but the queries and keys have k = {given.shape[-2]} "
            f"coordinates: give k/2 = {given.shape[-2] / 2:g}"
        )
    return checked, jnp.asarray(arr, dtype=jnp.result_type(float))


def _check_rope_dimension(k: int, d: int, theta) -> None:
    """Refuse queries and keys of odd dimension k, or frequencies that are not k/2, for rotary positions."""
    if k % 2:
        what = f"d = {d}" if k == d else f"k = {k} (the rows of Q and K)"
        raise ValueError(
            f"positional='rope' rotates the planes (2p, 2p + 1) of the queries and keys, so their dimension must be "
            f"even: got {what}; use an even d (or Q, K with an even number of rows)"
        )
    if theta is not None and 2 * np.shape(theta)[-1] != k:
        raise ValueError(
            f"rope_theta has {np.shape(theta)[-1]} frequencies but the queries and keys have k = {k} coordinates: "
            f"give k/2 = {k // 2}"
        )


def _is_none(a) -> bool:
    return a is None


class Field(eqx.Module):
    """A vector field on configurations x of shape (n, d).

    geometry   "sphere": particles live on (S^{d-1})^n; the velocity is P_x drift and integrators
               renormalize. "euclidean": particles live in R^d (no layer norm, Pre-LN); the
               velocity is the drift itself and nothing is normalized.
    event_ndim ndim of each array attribute for one ensemble member; one more leading axis
               makes that attribute an ensemble axis.
    """

    geometry: ClassVar[str] = "sphere"
    event_ndim: ClassVar[dict[str, int]] = {}

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """Ambient velocity before layer norm."""
        raise NotImplementedError

    def __call__(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        v = self.drift(t, x)
        return project(x, v) if self.geometry == "sphere" else v

    def check(self, n: int, d: int, dtype) -> None:
        """Raise ValueError if this field cannot act on (n, d) configurations of ``dtype``."""

    def directions(self, x: Float[Array, "... n d"]) -> Float[Array, "... n d"]:
        """The tokens' directions on the sphere, on which clusters and inner products are measured."""
        return normalize(x) if self.geometry != "sphere" else x

    def in_span(self, U) -> Field | None:
        """This field acting on the coordinates y ∈ R^r of the span of U's columns, or None.

        U is an orthonormal frame (d, r), or one per ensemble member (B, d, r), whose span holds the tokens; or the
        int r, a frame left unspecified (only fields that are the same in every frame reduce then). The result g
        satisfies field(t, y Uᵀ) = g(t, y) Uᵀ, so the particles never leave the span and g moves their coordinates
        exactly; inner products, hence every statistic, are those of y. None (this default) wherever the span is not
        invariant or that cannot be proven: general V, noise, feed-forward terms, angles on the circle.
        """
        return None

    # -- what the field says about itself (solvers and statistics ask, never probe) -------
    def inner_fields(self) -> tuple[Field, ...]:
        """The fields this one wraps or adds up: (inner,) for a wrapper, the terms of a ``Sum``, () otherwise."""
        return ()

    def summands(self) -> tuple[Field, ...]:
        """The terms f_k with drift = Σ_k drift_k: those of a ``Sum``, (self,) for any other field."""
        return (self,)

    @property
    def temperature(self) -> Array | None:
        """β: the field's own ``beta``, else that of its first inner field that has one; None if none does."""
        beta = getattr(self, "beta", None)
        if beta is not None:
            return beta
        for f in self.inner_fields():
            beta = f.temperature
            if beta is not None:
                return beta
        return None

    @property
    def stochastic(self) -> bool:
        """Whether ``attention_matrix`` is row-stochastic, a random walk on the tokens (not where weights take both signs)."""
        return True

    @property
    def has_attention(self) -> bool:
        """Whether the field mixes the tokens with an n × n matrix A (``attention_matrix`` is not None)."""
        return any(f.has_attention for f in self.inner_fields())

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"] | None:
        """The matrix A(x) with which the field mixes the tokens at time t, as it sees them; None without one.

        By default that of the inner fields, which see x itself (Post-LN, nGPT, no LN, noise):
        A = (1/m) Σ_k A_k over the m inner fields that have one (the attention terms of a sum).
        """
        mats = [a for a in (f.attention_matrix(t, x) for f in self.inner_fields()) if a is not None]
        if not mats:
            return None
        return mats[0] if len(mats) == 1 else sum(mats[1:], mats[0]) / len(mats)

    def kernel_logits(self, x: Float[Array, "n d"]) -> Float[Array, "... n n"] | None:
        """The logits ℓ_ij = β⟨Qx_i, Kx_j⟩ of the field's own kernel e^ℓ; None for a field without one."""
        return None

    def jump_times(self, t1: float, t0: float = 0.0) -> np.ndarray:
        """The times b, t0 < b < t1, where the field switches (layer-wise weights), sorted: its inner fields'."""
        times = [np.asarray(f.jump_times(t1, t0), dtype=np.float64).ravel() for f in self.inner_fields()]
        return np.unique(np.concatenate(times)) if times else np.empty(0)

    def uses_blocked(self, n: int, dtype) -> bool:
        """Whether some attention term evaluates n tokens of ``dtype`` by the blocked path (its inner fields')."""
        return any(f.uses_blocked(n, dtype) for f in self.inner_fields())

    def fused_step(self, n: int, d: int, dtype) -> tuple | None:
        """(β, Q, K, V) of the SA whose whole RK4 steps the fused Pallas kernel takes (``solvers/fused_rk4.py``)
        for n tokens in R^d, when this field is one that chooses it; None for every other field (this default)."""
        return None

    @property
    def asks_fused_step(self) -> bool:
        """Whether this field or one inside it asks for the fused RK4 step by name (SA's ``kernel="pallas"``)."""
        return any(f.asks_fused_step for f in self.inner_fields())

    def growth_norm(self) -> float | None:
        """The largest κ = ‖QᵀK‖₂ of the USA terms in [GLPR]'s time (velocities of order e^{κβ}); None if none."""
        norms = [k for k in (f.growth_norm() for f in self.inner_fields()) if k is not None]
        return max(norms) if norms else None

    @property
    def noise_sigma(self) -> Array | None:
        """σ of the Brownian part σ P_x ∘ dW; None for a deterministic field (decided by structure alone)."""
        return None

    def deterministic(self) -> Field:
        """The field without its Brownian part: its velocity, P_x drift, is unchanged."""
        return self

    @property
    def coalesce_eps(self) -> float | None:
        """ε: tokens within ½‖x_i − x_j‖² ≤ ε move as one (``Coalesced``); None: every token moves alone."""
        return None

    def settled_field(self) -> Field:
        """The field a solver steps states with once merged tokens sit at their representatives: this field itself."""
        return self

    @property
    def in_angles(self) -> bool:
        """Whether the states are angles θ (n, 1) of points (cos θ, sin θ) of the circle (``Circle``)."""
        return False

    def __add__(self, other: Field) -> Sum:
        if not isinstance(other, Field):
            return NotImplemented
        return Sum(*self.summands(), *other.summands())


def ensemble_axes(field: Field) -> tuple[Field, int | None]:
    """vmap axes of a field's leaves (0 for ensemble axes, None otherwise) and the ensemble size.

    A leaf is an ensemble axis when it has one more dimension than its owner's ``event_ndim``
    says one member needs. All ensemble axes must have the same length.
    """
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(field)
    axes: list[int | None] = []
    sizes: dict[str, int] = {}
    for path, leaf in paths_leaves:
        owner: Any = field  # the module or container that holds the leaf, walked down its path
        name = None
        for key in path:
            if name is not None:
                owner = getattr(owner, name) if isinstance(name, str) else owner[name]
            name = key.name if hasattr(key, "name") else key.idx
        event = getattr(owner, "event_ndim", {}).get(name) if isinstance(name, str) else None
        nd = np.ndim(leaf)
        if event is not None and nd == event + 1:
            axes.append(0)
            sizes[f"{type(owner).__name__}.{name}"] = np.shape(leaf)[0]
        elif event is not None and nd != event:
            raise ValueError(
                f"{type(owner).__name__}.{name} has shape {np.shape(leaf)}: expected {event} "
                f"dimensions for one member, or {event + 1} for an ensemble"
            )
        else:
            axes.append(None)
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{k} has {v}" for k, v in sizes.items())
        raise ValueError(f"ensemble axes of the field disagree in length: {listed}")
    return jax.tree_util.tree_unflatten(treedef, axes), (next(iter(sizes.values())) if sizes else None)


class Sum(Field):
    """A field that is a sum of terms: drift = Σ_k drift_k, then one projection ([GLPR] (2.7), (2.8))."""

    terms: tuple[Field, ...]

    def __init__(self, *terms: Field):
        if not terms or not all(isinstance(f, Field) for f in terms):
            raise ValueError("Sum needs one or more attnflow fields, e.g. SA(1.0) + FeedForward(...)")
        geometries = {f.geometry for f in terms}
        if len(geometries) > 1:
            raise ValueError(f"cannot add fields of different geometries: {sorted(geometries)}")
        self.terms = tuple(terms)

    @property
    def geometry(self) -> str:  # type: ignore[override]  # the wrapped fields'; a class constant elsewhere
        return self.terms[0].geometry

    @property
    def beta(self):
        """β of the first term that has one (for statistics such as the energy)."""
        for f in self.terms:
            beta = f.temperature
            if beta is not None:
                return beta
        raise AttributeError("no term of this Sum has a beta")

    def inner_fields(self):
        return self.terms

    def summands(self):
        return self.terms

    @property
    def noise_sigma(self):
        """Independent Brownian motions add in quadrature: σ = √(Σ_k σ_k²) over the noisy terms."""
        parts = [s for s in (f.noise_sigma for f in self.terms) if s is not None]
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else jnp.sqrt(sum(s**2 for s in parts))

    def deterministic(self):
        """The sum of the terms without their noise."""
        return Sum(*(f.deterministic() for f in self.terms))

    def drift(self, t, x):
        out = self.terms[0].drift(t, x)
        for f in self.terms[1:]:
            out = out + f.drift(t, x)
        return out

    def check(self, n, d, dtype):
        for f in self.terms:
            f.check(n, d, dtype)

    def in_span(self, U):
        """The sum of the terms' reductions, if every term reduces (the span is invariant under each)."""
        terms = [f.in_span(U) for f in self.terms]
        return None if any(f is None for f in terms) else Sum(*terms)


class Attention(Field):
    """Shared structure of the attention fields: ẋ_i = P_{x_i}(Σ_j A_ij V x_j).

    Subclasses say how the weights A_ij are normalized.

    beta         the inverse temperature β; an array of shape (B,) makes B ensemble members.
    Q, K         query and key matrices, k×d (rectangular allowed); ``None`` stands for the
                 identity (and costs nothing).
    V            the value matrix, d×d; ``None`` for the identity.
    mask         "none" or "causal": token i attends to tokens j ≤ i only (arXiv 2411.04990).
    block        how SA and USA evaluate the sum over j (static; the result is the same to
                 rounding): "auto" (default): the dense n×n logits while they take at most
                 ``blocked.dense_limit_bytes()`` per member (16 MiB on CPU, 1 GiB on GPUs), else
                 the blocked evaluation of ``particles/blocked.py`` (memory O(n d), online softmax);
                 an int forces blocked tiles of that side; None forces the dense path.
    kernel       "auto" (default): ``jax.nn.dot_product_attention`` for SA in float32 on GPU
                 backends, attnflow's own dense/blocked evaluation otherwise; "fused" forces the
                 former (SA, float32 only), "xla" the latter. "pallas" (SA, no mask): whole RK4 steps
                 fused into one Pallas kernel (``solvers/fused_rk4.py``), never chosen by "auto" yet.
    positional   "none", "alibi" (SA, USA) or "decay" (USA), with ``mask="causal"``: a bias by the
                 distance in the sequence; or "rope" (SA, USA, any mask): rotary positions. Described below.
    alibi_slope  the slope m ≥ 0 of the positional bias; one per member allowed.
    rope_base    the base b > 0 of the rotary frequencies θ_p = b^{−2p/k} (default 10000); one per member allowed.
    rope_theta   the rotary frequencies (θ_0, …, θ_{k/2−1}) themselves, instead of ``rope_base``'s; None: the base's.

    ``positional="alibi"`` (SA and USA, with ``mask="causal"``) adds the bias −m (i − j) of ALiBi
    (Press, Smith, Lewis 2022) to the logit of token i attending to an earlier token j, m =
    ``alibi_slope`` ≥ 0: attention decays with the distance in the sequence (arXiv 2605.09213).
    The dense and the blocked evaluations both add it; the fused kernel is not used.

    ``positional="decay"`` (USA, ``mask="causal"``) is the position-normalized form of arXiv 2605.09213 (1.3): token i
    weighs the strictly earlier tokens j < i by w_ij = e^{−m (i − j)} / Σ_{k<i} e^{−m (i − k)}, normalized over
    positions, not by the content kernel, which multiplies them unnormalized:
    ẋ_i = P_{x_i}(Σ_{j<i} w_ij e^{β⟨Qx_i, Kx_j⟩} V x_j). The first token never moves. With V = βI, m = λ/n and d = 2
    it is the paper's θ̇_i = −β Σ_{j<i} w_ij sin(θ_i − θ_j) e^{β cos(θ_i − θ_j)}. Evaluated densely (n × n).

    ``positional="rope"`` (SA and USA, with or without a mask) is rotary positions (Su et al. 2021; arXiv
    2607.24502): the logits are β⟨R_i Q x_i, R_j K x_j⟩ = β⟨Q x_i, R_{j−i} K x_j⟩, where R_i rotates each plane
    (2p, 2p + 1) of the k-dimensional queries and keys by the angle i·θ_p, token i at position i (from 0); the
    values are not rotated. k (d for Q = K = None) must be even. The rotated queries and keys go to the dense,
    the blocked and the fused evaluations alike; the Pallas step does not take them. The span of the tokens is
    not invariant in general (the rotations leave it), so the field never reduces to it.
    """

    beta: Float[Array, ""]
    Q: Float[Array, "k d"] | None = None
    K: Float[Array, "k d"] | None = None
    V: Float[Array, "d d"] | None = None
    mask: str = eqx.field(static=True, default="none")
    block: int | str | None = eqx.field(static=True, default="auto")
    kernel: str = eqx.field(static=True, default="auto")
    positional: str = eqx.field(static=True, default="none")
    alibi_slope: Float[Array, ""] | None = None
    rope_base: Float[Array, ""] | None = None
    rope_theta: Float[Array, " p"] | None = None
    event_ndim: ClassVar[dict[str, int]] = {
        "beta": 0,
        "Q": 2,
        "K": 2,
        "V": 2,
        "alibi_slope": 0,
        "rope_base": 0,
        "rope_theta": 1,
    }

    def __init__(
        self,
        beta=1.0,
        Q=None,
        K=None,
        V=None,
        *,
        mask: str = "none",
        block="auto",
        kernel: str = "auto",
        positional: str = "none",
        alibi_slope=1.0,
        rope_base=10000.0,
        rope_theta=None,
    ):
        self.beta = as_beta(beta, signed=self.signed_beta, field=type(self).__name__)
        self.Q, self.K, self.V = as_weights(Q, K, V)
        self.mask = check_choice("mask", mask, MASKS)
        self.block = check_block(block)
        self.kernel = check_kernel(kernel, type(self).__name__, mask=mask, positional=positional, block=block)
        self.positional = check_choice("positional", positional, POSITIONAL)
        if self.positional != "none":
            if self.positional not in self.positional_modes:
                takes = ", ".join(repr(p) for p in self.positional_modes)
                raise ValueError(
                    f"{type(self).__name__} takes positional = {takes}, not {positional!r} "
                    "('alibi', 'rope': SA and USA; 'decay': USA)"
                )
            if self.positional == "rope":
                self.rope_base, self.rope_theta = _rope_parameters(rope_base, rope_theta, self.Q, self.K)
                return
            if self.mask != "causal":
                raise ValueError(f"positional={positional!r} weighs earlier tokens: it needs mask='causal'")
            if self.positional == "decay" and isinstance(self.block, int):
                raise ValueError("positional='decay' is evaluated densely: use block='auto' or None")
            self.alibi_slope = as_parameter("alibi_slope", alibi_slope, "slope")

    positional_modes: ClassVar[tuple[str, ...]] = ("none",)
    """The values of ``positional`` the field takes: SA adds ALiBi's bias or rotary positions, USA also the decay
    form."""

    def frequencies(self, k: int, dtype) -> Array | None:
        """The rotary frequencies θ_p of queries and keys of dimension k (``rope_theta``, else ``rope_base``'s);
        None without rotary positions."""
        if self.positional != "rope":
            return None
        if self.rope_theta is not None:
            return self.rope_theta.astype(dtype)
        return rope_frequencies(self.rope_base, k, dtype)

    def queries_keys(self, x: Float[Array, "n d"]) -> tuple[Array, Array]:
        """(Q x_i)_i and (K x_j)_j, rotated to their positions under ``positional="rope"`` (R_i Q x_i, R_j K x_j)."""
        q, k = query_key(self.Q, self.K, x)
        theta = self.frequencies(q.shape[-1], x.dtype)
        if theta is None:
            return q, k
        return rotate_positions(q, theta), rotate_positions(k, theta)

    def position_bias(self, n: int, dtype) -> Array | None:
        """The bias added to the logits (n × n, in ``dtype``); None without one.

        ALiBi: −m (i − j). Decay: −m (i − j) − log Σ_{k<i} e^{−m (i − k)} for j < i and −∞ for j ≥ i,
        so that e^{bias} are the position weights w_ij (row 0, which has no earlier token, is all −∞).
        The decay's bias is formed as −m (i − j − 1) − log[(1 − e^{−m i})/(1 − e^{−m})], which stays finite
        (no ∞ − ∞, no ∞ · 0) for every slope, one beyond the dtype too: at m → ∞ each token weighs its
        predecessor alone.
        """
        if self.positional in ("none", "rope"):
            return None
        assert self.alibi_slope is not None, "__init__ sets alibi_slope with every positional bias"
        i = jnp.arange(n, dtype=dtype)
        m = self.alibi_slope.astype(dtype)
        gap = i[:, None] - i[None, :]
        if self.positional == "alibi":  # 0 on the diagonal also for a slope beyond the dtype (∞ · 0)
            return jnp.where(gap == 0, 0.0, -m * gap)
        # Σ_{g=1}^{i} e^{−m g} = e^{−m} (1 − e^{−m i}) / (1 − e^{−m}), = i at m = 0
        safe = jnp.where(m > 0, m, 1.0)
        ratio = jnp.where(
            m > 0,
            jnp.log(-jnp.expm1(-safe * jnp.maximum(i, 1.0))) - jnp.log(-jnp.expm1(-safe)),
            jnp.log(jnp.maximum(i, 1.0)),
        )
        with_earlier = jnp.where(gap > 1, -m * (gap - 1.0), 0.0) - ratio[:, None]
        return jnp.where(gap > 0, with_earlier, -jnp.inf)

    # -- pieces --------------------------------------------------------------------------
    def logits(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """β⟨Q x_i, K x_j⟩, β⟨R_i Q x_i, R_j K x_j⟩ with rotary positions (−∞ where the mask forbids attention)."""
        # weights follow the configuration's precision, so float32 runs stay float32
        q, k = self.queries_keys(x)
        logits = self.beta.astype(x.dtype) * (q @ k.T)
        bias = self.position_bias(x.shape[0], x.dtype)
        if bias is not None:
            logits = logits + bias
        if self.mask == "causal":
            n = x.shape[0]
            logits = jnp.where(jnp.tril(jnp.ones((n, n), bool)), logits, -jnp.inf)
        return logits

    def values(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """V x_j for every particle."""
        return x if self.V is None else x @ self.V.T.astype(x.dtype)

    @property
    def has_attention(self) -> bool:
        return True

    softmax: ClassVar[bool] = True
    """Whether the weights are normalized over each row (SA); USA's are not."""

    signed_beta: ClassVar[bool] = False
    """Whether β < 0 is accepted: the weights e^{β⟨Qx_i, Kx_j⟩} with the row maximum subtracted stay finite
    for either sign (SA, USA in [GLPR]'s time; arXiv 2507.22857 studies them on the circle for β < 0)."""

    def uses_blocked(self, n: int, dtype) -> bool:
        """Whether n tokens of ``dtype`` take the blocked evaluation (not a fused kernel asked for by name)."""
        if resolve_block(self.block, n, dtype) is None:
            return False
        try:
            kernel = resolve_kernel(self.kernel, self.softmax, dtype)
        except ValueError:
            return False
        return not (kernel == "fused" and self.kernel == "fused")

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """A_ij = softmax_j(β⟨Qx_i, Kx_j⟩), [GLPR] (2.4); for USA its weights over their row sums
        (a row that attends to no token, the first under ``positional="decay"``, is zero)."""
        logits = self.logits(x)
        attends = jnp.isfinite(jnp.max(logits, axis=-1, keepdims=True))
        return jnp.where(attends, jax.nn.softmax(jnp.where(attends, logits, 0.0), axis=-1), 0.0)

    def kernel_logits(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """β⟨Q x_i, K x_j⟩ (``logits``)."""
        return self.logits(x)

    def _without_matrix(self, x: Float[Array, "n d"], normalized: bool, offset=0.0) -> Array | None:
        """The drift by the fused kernel or the blocked evaluation when ``kernel``/``block`` pick one, else None."""
        causal = self.mask == "causal"
        kernel = resolve_kernel(self.kernel, normalized, x.dtype)
        block = resolve_block(self.block, x.shape[0], x.dtype)
        if self.positional == "decay":
            return None
        if kernel == "fused" and self.positional in ("none", "rope") and (block is None or self.kernel == "fused"):
            q, k = self.queries_keys(x)
            return fused_attention(self.beta, q, k, self.values(x), causal=causal)
        if block is None:
            return None
        q, k = self.queries_keys(x)
        slope = self.alibi_slope if self.positional == "alibi" else None
        return blocked_attention(
            self.beta,
            q,
            k,
            self.values(x),
            block=block,
            normalized=normalized,
            offset=offset,
            causal=causal,
            slope=slope,
        )

    # -- validation against a configuration ---------------------------------------------
    def check(self, n: int, d: int, dtype) -> None:
        check_weights(self.Q, self.K, self.V, d)
        blocked.check_kernel_size(self.kernel, n, d)
        if self.positional == "rope":
            k = d if self.Q is None and self.K is None else next(w for w in (self.Q, self.K) if w is not None).shape[-2]
            _check_rope_dimension(k, d, self.rope_theta)

    @property
    def asks_fused_step(self) -> bool:
        return self.kernel == "pallas"

    def in_span(self, U) -> Self | None:
        """With V = λI (or None): the same attention on y = x U, with K' = UᵀQᵀK U (r × r), Q' = I, V' = λI_r.

        Every velocity Σ_j A_ij λ x_j, projected or not, is a combination of the tokens, whatever Q, K
        and the mask; the logits ⟨Q x_i, K x_j⟩ = ⟨y_i, K' y_j⟩ are unchanged. Q = K = identity stays
        the identity: the reduced field is this field at dimension r. None for any other V, and with rotary
        positions (the logits ⟨Q x_i, R_{j−i} K x_j⟩ are not those of any r × r kernel on the span).
        """
        if self.positional == "rope":
            return None
        weights = span_weights(self.Q, self.K, self.V, U)
        if weights is None:
            return None
        return eqx.tree_at(lambda f: (f.Q, f.K, f.V), self, weights, is_leaf=_is_none)

    def kernel_norm(self) -> float:
        """Largest |⟨Qx, Ky⟩| over unit x, y: the spectral norm of QᵀK (1 for identities; max over members).
        With rotary positions a bound on |⟨Qx, R K y⟩| over every rotation R: ‖Q‖₂‖K‖₂."""
        if (given := self.Q if self.Q is not None else self.K) is None:
            return 1.0
        d = given.shape[-1]
        q = np.eye(d) if self.Q is None else np.asarray(self.Q)
        k = np.eye(d) if self.K is None else np.asarray(self.K)
        if self.positional == "rope":
            norms = np.linalg.norm(q, 2, axis=(-2, -1)) * np.linalg.norm(k, 2, axis=(-2, -1))
            return float(np.max(norms))
        qk = np.swapaxes(q, -1, -2) @ k
        return float(np.max(np.linalg.norm(qk, 2, axis=(-2, -1))))


class SA(Attention):
    """Self-attention with layer norm, [GLPR] (2.3)–(2.5):

        ẋ_i = P_{x_i}( Σ_j A_ij V x_j ),   A_ij = e^{β⟨Qx_i,Kx_j⟩} / Σ_k e^{β⟨Qx_i,Kx_k⟩}.

    The softmax subtracts each row's maximum before exponentiating, so any β (10⁴ included) is free of overflow in
    float32 and float64; β < 0 too (weights that favour distant tokens, arXiv 2507.22857).
    """

    signed_beta: ClassVar[bool] = True
    positional_modes: ClassVar[tuple[str, ...]] = ("none", "alibi", "rope")
    if TYPE_CHECKING:  # Attention's __init__, for type checkers: they read a Module without one as a dataclass

        def __init__(
            self,
            beta: ArrayLike = 1.0,
            Q: ArrayLike | None = None,
            K: ArrayLike | None = None,
            V: ArrayLike | None = None,
            *,
            mask: str = "none",
            block: int | str | None = "auto",
            kernel: str = "auto",
            positional: str = "none",
            alibi_slope: ArrayLike = 1.0,
            rope_base: ArrayLike = 10000.0,
            rope_theta: ArrayLike | None = None,
        ) -> None: ...

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The row-stochastic attention matrix A."""
        return jax.nn.softmax(self.logits(x), axis=-1)

    def __call__(self, t, x):
        """The projected velocity; on the circle (d = 2, plain weights, no mask, n ≤ ``UNROLLED_N``)
        from ``_circle_velocity``, elsewhere P_x of ``drift``."""
        n, d = x.shape
        plain = (
            self.Q is None
            and self.K is None
            and self.V is None
            and self.mask == "none"
            and self.positional == "none"
            and type(self).drift is SA.drift
            and self.geometry == "sphere"
        )
        if (
            plain
            and d == 2
            and n <= UNROLLED_N
            and resolve_kernel(self.kernel, True, x.dtype) == "xla"
            and resolve_block(self.block, n, x.dtype) is None
        ):
            return _circle_velocity(self.beta.astype(x.dtype), x)
        return super().__call__(t, x)

    def fused_step(self, n, d, dtype):
        """(β, Q, K, V) with ``kernel="pallas"`` (or "auto" where ``blocked.PALLAS_AUTO`` has measured it faster)."""
        plain = self.mask == "none" and self.positional == "none" and not isinstance(self.block, int)
        if type(self).drift is not SA.drift or not blocked.pallas_step(self.kernel, n, d, plain=plain):
            return None
        return self.beta, self.Q, self.K, self.V

    def drift(self, t, x):
        fast = self._without_matrix(x, normalized=True)
        if fast is not None:
            return fast
        logits = self.logits(x)
        # every row keeps its diagonal entry (also under a causal mask), so m is finite
        m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
        w = jnp.exp(logits - m)
        return (w @ self.values(x)) / jnp.sum(w, axis=-1, keepdims=True)


class USA(Attention):
    """Unnormalized self-attention, [GLPR] §3.3, in one of two time conventions:

        time="glpr":      ẋ_i = P_{x_i}( (1/n) Σ_j e^{β⟨Qx_i,Kx_j⟩} V x_j )            [GLPR]
        time="rescaled":  ẋ_i = P_{x_i}( (1/n) Σ_j e^{β(⟨Qx_i,Kx_j⟩ − 1)} V x_j )     [arXiv 2410.06833]

    The second is the first after the time change t → e^{−β} t. The weights are computed as e^{β⟨⟩ − m_i} with m_i the
    row maximum and the factor e^{m_i} (or e^{m_i − β}) restored afterwards, so nothing overflows unless the velocity
    itself does: in the "glpr" convention velocities grow like e^β, which float32 cannot represent beyond β ≈ 88 and
    float64 beyond β ≈ 709; ``check`` refuses such runs and names the "rescaled" convention, whose velocities stay
    O(1) for every β.
    """

    time: str = eqx.field(static=True, default="glpr")

    def __init__(
        self,
        beta=1.0,
        Q=None,
        K=None,
        V=None,
        *,
        mask: str = "none",
        time: str = "glpr",
        block="auto",
        kernel: str = "auto",
        positional: str = "none",
        alibi_slope=1.0,
        rope_base=10000.0,
        rope_theta=None,
    ):
        time = check_choice("time", time, _TIMES)
        if time == "rescaled":  # the time e^{β} t is meant for β ≥ 0, where it keeps velocities O(1)
            as_beta(beta, field="USA(time='rescaled')")
        super().__init__(
            beta,
            Q,
            K,
            V,
            mask=mask,
            block=block,
            kernel=kernel,
            positional=positional,
            alibi_slope=alibi_slope,
            rope_base=rope_base,
            rope_theta=rope_theta,
        )
        self.time = time

    signed_beta: ClassVar[bool] = True
    positional_modes: ClassVar[tuple[str, ...]] = ("none", "alibi", "decay", "rope")

    def drift(self, t, x):
        offset = 0.0 if self.time == "glpr" else self.beta.astype(x.dtype)
        fast = self._without_matrix(x, normalized=False, offset=offset)
        if fast is not None:
            return fast
        logits = self.logits(x)
        m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
        if self.positional == "decay":  # position weights sum to one; the first row attends to nothing
            m = jnp.where(jnp.isfinite(m), m, 0.0)
            return (jnp.exp(logits - m) @ self.values(x)) * jnp.exp(m - offset)
        w = jnp.exp(logits - m)
        return (w @ self.values(x)) * (jnp.exp(m - offset) / x.shape[0])

    softmax: ClassVar[bool] = False

    def growth_norm(self) -> float | None:
        """‖QᵀK‖₂ in [GLPR]'s time, where velocities grow like e^{β‖QᵀK‖}; None in the rescaled time (O(1))."""
        return self.kernel_norm() if self.time == "glpr" else None

    def check(self, n, d, dtype):
        super().check(n, d, dtype)
        if self.time != "glpr" or isinstance(self.beta, jax.core.Tracer):
            return
        beta_max = float(np.max(np.abs(np.asarray(self.beta))))  # weights up to e^{|β| ‖QᵀK‖} for either sign
        log_max = math.log(float(jnp.finfo(dtype).max))
        # headroom for the sum over n particles and a few Runge–Kutta stages
        if beta_max * self.kernel_norm() > log_max - math.log(n) - 8.0:
            raise ValueError(
                f"USA with time='glpr' at beta={beta_max:g} has velocities of order e^beta, which overflow "
                f"{jnp.dtype(dtype).name}; use USA(..., time='rescaled') (time t -> e^-beta t), "
                + ("float64, " if jnp.dtype(dtype).itemsize < 8 else "")
                + "or a smaller beta"
            )


KERNEL_MODELS = ("sa", "usa", "usa-rescaled")
"""The models of the kernel e^{β⟨Qx, Ky⟩}: SA (normalized by its row sums), USA in [GLPR]'s time, and USA
in the time of arXiv 2410.06833 (times e^{−β}). Every function that takes one of them by name (``make``, ``Circle``,
``MultiHead``, the equiangular ODE, the mode growth rates, the mean field) checks against this tuple."""


def make(model: str, beta=1.0, **kwargs) -> Attention:
    """Build a field from its name: ``"sa"`` or ``"usa"`` (``"usa-rescaled"`` for the other time)."""
    builders = {
        "sa": lambda: SA(beta, **kwargs),
        "usa": lambda: USA(beta, **kwargs),
        "usa-rescaled": lambda: USA(beta, time="rescaled", **kwargs),
    }
    check_choice("model", model, KERNEL_MODELS)
    return builders[model]()
