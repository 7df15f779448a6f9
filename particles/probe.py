"""Measurements of token states layer by layer, as the particle model measures its own configurations.

The states are an array (layers, prompts, tokens, d), a model's residual stream read after every block. Every
statistic is taken per layer on two families of unit vectors:

* **raw**: each token scaled to unit length, x_i/‖x_i‖ (its direction; what ``attnflow hist`` and ``fit`` read);
* **normed**: each token centred over its d coordinates and then scaled to unit length,
  (x_i − m_i 1)/‖x_i − m_i 1‖ with m_i = (1/d) Σ_a x_ia: layer norm without its learned gain and bias,
  divided by √d, which is what an attention layer behind a layer norm sees, up to that gain.

Per layer and family (``layer_metrics``, vectorized over prompts; the command runs it over layers with
``jax.lax.map``): the inner-product histogram, the mean cosine, the clustered fraction and the cluster count at
δ (``observables.pair_summary``, as the particle runs compute them), the interaction energy E_β
(``energy.energy``), the effective rank of the centred token matrix, the TwoNN ratios and the k nearest
neighbours of each token. Across layers: the energy's trend (``energy_trend``), the TwoNN estimate
(``twonn``) and the overlap of neighbour sets (``knn_overlap``). With attention weights: the sink rate
(``first_token_attention``, ``sink_rate``). Nothing here fits β: the caller gives it.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp
from jaxtyping import Array, Float

from .energy import energy
from .observables import inner_product_histogram, pair_summary
from .sphere import pairwise_gaps

__all__ = [
    "FAMILIES",
    "SINK_EPSILON",
    "TWONN_DISCARD",
    "unit_states",
    "layer_normed_states",
    "effective_rank",
    "twonn_ratios",
    "twonn",
    "nearest_neighbours",
    "knn_overlap",
    "layer_metrics",
    "layers_metrics",
    "energy_excess",
    "log_pair_energy",
    "energy_trend",
    "first_token_attention",
    "sink_rate",
    "first_token_norm_ratio",
    "check_attention",
    "PAIRWISE_COPIES",
    "layer_metrics_bytes",
    "distinct_points",
]

FAMILIES = ("raw", "normed")
SINK_EPSILON = 0.3  # arXiv 2410.10781's threshold on a head's mean attention to the first token
TWONN_DISCARD = 0.1  # Facco et al. 2017 discard the largest 10 % of the ratios μ = r2/r1
COINCIDENT = 1e-12  # tokens closer than this (Euclidean, unit vectors) coincide to the rounding of their directions
PAIRWISE_COPIES = 10
"""n×n arrays that one layer's statistics hold at once per prompt (``layer_metrics``: the gaps, the Gram
matrix, the exponentials and logits of the energies, the cluster masks and labels, the neighbours' top-k)."""


def layer_metrics_bytes(prompts: int, n: int, d: int) -> int:
    """Bytes that ``layer_metrics`` holds for one layer of ``prompts`` configurations of n tokens in R^d, in
    float64: ``PAIRWISE_COPIES`` n×n arrays and a few copies of the tokens per prompt (``layers_metrics`` runs the
    layers one at a time)."""
    return 8 * prompts * (PAIRWISE_COPIES * n * n + 4 * n * d)


def _where(label: str, index, shape) -> str:
    layer, prompt, token = (int(i) for i in index)
    return f"layer {layer}, " + (f"prompt {prompt}, " if shape[1] > 1 else "") + f"token {token}"


def unit_states(states, label: str = "the states") -> np.ndarray:
    """The raw family: each token x_i/‖x_i‖ in float64, states (layers, prompts, tokens, d); a zero token is a
    ValueError naming it."""
    x = np.asarray(states, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1)
    if np.any(norms == 0):
        where = _where(label, np.argwhere(norms == 0)[0], x.shape)
        raise ValueError(f"{label}: {where} is the zero vector, which has no direction on the sphere")
    return x / norms[..., None]


def layer_normed_states(states, label: str = "the states") -> np.ndarray:
    """The normed family: each token centred over its d coordinates, then scaled to unit length, in float64.

    (x_i − m_i 1)/‖x_i − m_i 1‖ with m_i the mean of x_i's coordinates: LayerNorm without its gain and bias,
    divided by √d. A token whose coordinates are all equal has no direction after centring: a ValueError naming it.
    """
    x = np.asarray(states, dtype=np.float64)
    centred = x - x.mean(axis=-1, keepdims=True)
    norms = np.linalg.norm(centred, axis=-1)
    scale = np.linalg.norm(x, axis=-1)
    flat = norms <= 1e-12 * np.maximum(scale, np.finfo(float).tiny)
    if np.any(flat):
        where = _where(label, np.argwhere(flat)[0], x.shape)
        raise ValueError(
            f"{label}: {where} has all its coordinates equal, so it has no direction after layer norm's centring"
        )
    return centred / norms[..., None]


def effective_rank(x: Float[Array, "... n d"]) -> Float[Array, ...]:
    """Effective rank (Roy & Vetterli 2007) of the centred token matrix X − 1 x̄ᵀ, x̄ the mean token.

    exp(−Σ_k p_k log p_k) with p_k = σ_k / Σ_l σ_l over its singular values σ_k: between 1 (one direction) and
    min(n − 1, d) (all singular values equal). Scale-free, so it reads the shape of the spread of the tokens,
    not its size. Singular values at the level of rounding, below max(n, d)·ε·‖X‖_F (about the tolerance
    of ``numpy.linalg.matrix_rank``), are left out; when none is left the tokens coincide to rounding, and the value
    is 1, the rank of the token matrix itself and the limit of a collapse along one direction.

    Near consensus SA and USA contract every deviation from the mean token at the same rate, so this shape, and
    the effective rank, freeze once all tokens are close; the rank falls while clusters form and merge, each
    merger removing a direction, and is 1 + O(spread / separation) once two tight clusters are left.
    """
    x = jnp.asarray(x)
    centred = x - jnp.mean(x, axis=-2, keepdims=True)
    s = jnp.linalg.svd(centred, compute_uv=False)
    scale = jnp.sqrt(jnp.sum(x * x, axis=(-2, -1)))[..., None]
    tol = max(x.shape[-2], x.shape[-1]) * jnp.finfo(x.dtype).eps * scale
    s = jnp.where(s > tol, s, 0.0)
    total = jnp.sum(s, axis=-1, keepdims=True)
    p = s / jnp.where(total > 0, total, 1.0)
    entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=-1)
    return jnp.where(total[..., 0] > 0, jnp.exp(entropy), 1.0)


def _gaps_off_diagonal(x):
    """½‖x_i − x_j‖² (accurate for near-coincident tokens) with +inf on the diagonal."""
    gaps = pairwise_gaps(x)
    n = x.shape[-2]
    return jnp.where(jnp.eye(n, dtype=bool), jnp.inf, gaps)


def twonn_ratios(x: Float[Array, "... n d"]) -> Float[Array, "... n"]:
    """μ_i = r₂(i)/r₁(i), the distances from token i to its second and first nearest neighbours among the tokens
    of its configuration (Euclidean, in R^d). NaN for a token that coincides with another (r₁ ≤ ``COINCIDENT``,
    the rounding of unit vectors: a ratio of two rounding errors would be noise): TwoNN needs distinct points.
    Needs n ≥ 3."""
    neg, _ = jax.lax.top_k(-_gaps_off_diagonal(x), 2)
    r1, r2 = jnp.sqrt(2.0 * -neg[..., 0]), jnp.sqrt(2.0 * -neg[..., 1])
    apart = r1 > COINCIDENT
    return jnp.where(apart, r2 / jnp.where(apart, r1, 1.0), jnp.nan)


def distinct_points(x: Float[Array, "... n d"]) -> Array:
    """The number of distinct points among the tokens x (..., n, d): tokens within ``COINCIDENT`` of an earlier
    one are not counted (exact when the coinciding tokens are tight clusters, the case it is for)."""
    gaps = pairwise_gaps(x)
    n = x.shape[-2]
    earlier = jnp.tril(jnp.ones((n, n), dtype=bool), -1)
    first = jnp.all(jnp.where(earlier, gaps > 0.5 * COINCIDENT**2, True), axis=-1)
    return jnp.sum(first, axis=-1)


def twonn(mu, discard: float = TWONN_DISCARD) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TwoNN intrinsic dimension (Facco, d'Errico, Rodriguez & Laio 2017) from ratios ``mu`` (..., N), pooled
    along the last axis: (estimate, its standard error, the ratios used), each of shape (...).

    On a manifold of dimension m sampled with locally constant density, log μ is exponential with rate m. As
    the paper does, the largest fraction ``discard`` of the ratios (where the density is least constant) are
    not used as values: of the N finite ratios the r = N − ⌊discard·N⌋ smallest are kept, and the discarded
    ones enter only through their count (they exceed μ_(r)). That is a type-II censored exponential sample,
    whose maximum-likelihood form is

        d̂ = (r − 1) / (Σ_{i ≤ r} log μ_(i) + (N − r) log μ_(r)),

    unbiased (2 m T is χ² with 2r degrees of freedom), with standard error d̂/√(r − 2). With discard = 0 it is
    the plain d̂ = (N − 1)/Σ log μ_i; dropping the largest ratios without counting them would bias d̂ upwards.
    NaN ratios (coinciding tokens) are left out; fewer than 3 finite ratios give NaN.
    """
    mu = np.asarray(mu, dtype=np.float64)
    logs = np.sort(np.where(np.isfinite(mu), np.log(np.where(np.isfinite(mu), mu, 1.0)), np.inf), axis=-1)
    count = np.sum(np.isfinite(logs), axis=-1)
    kept = count - np.floor(discard * count).astype(np.int64)
    rank = np.arange(logs.shape[-1])
    used = rank < kept[..., None]
    last = np.take_along_axis(logs, np.maximum(kept - 1, 0)[..., None], axis=-1)[..., 0]
    total = np.sum(np.where(used, logs, 0.0), axis=-1) + (count - kept) * np.where(kept > 0, last, 0.0)
    ok = (kept >= 3) & (total > 0)
    safe = np.where(ok, total, 1.0)
    estimate = np.where(ok, (kept - 1) / safe, np.nan)
    error = np.where(ok, estimate / np.sqrt(np.maximum(kept - 2, 1)), np.nan)
    return estimate, error, kept


def nearest_neighbours(x: Float[Array, "... n d"], k: int) -> Array:
    """Indices (..., n, k) of the k nearest other tokens of each token (largest ⟨x_i, x_j⟩, j ≠ i)."""
    _, idx = jax.lax.top_k(-_gaps_off_diagonal(x), k)
    return idx


def knn_overlap(a, b) -> Array:
    """Mean over tokens of |N_k^a(i) ∩ N_k^b(i)| / k for neighbour indices ``a``, ``b`` (..., n, k) of the same
    tokens in two layers: 1 when every token keeps its neighbours, about k/(n − 1) for unrelated layers."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    k = a.shape[-1]
    shared = jnp.sum(a[..., :, None] == b[..., None, :], axis=(-2, -1))
    return jnp.mean(shared, axis=-1) / k


def _off_diagonal(n: int):
    return ~jnp.eye(n, dtype=bool)


def energy_excess(x: Float[Array, "... n d"], beta) -> Float[Array, ...]:
    """(1/(2β n²)) Σ_{i≠j} (e^{β⟨x_i, x_j⟩} − 1) = E_β − (n e^β + n(n − 1))/(2β n²) for unit tokens: E_β less a
    constant of the layers, so with the same increments, which keeps its digits at every β below overflow. The
    −1 (summed with expm1) keeps them at small β, where E_β ≈ 1/(2β) swamps the pairs (at β = 1e-14, E_β ≈ 5e13
    and its changes from layer to layer are below rounding); leaving out the self-interactions e^β keeps them at
    large β, where those swamp every pair but the closest (at β = 800, e^{β(⟨x_i,x_j⟩ − 1)} < 1e-16 for
    ⟨x_i,x_j⟩ < 0.95). It tends to (1/(2n²)) Σ_{i≠j} ⟨x_i, x_j⟩ as β → 0, and overflows once β max⟨x_i, x_j⟩ ≳ 709
    in float64 (``log_pair_energy`` then)."""
    beta = jnp.asarray(beta)
    n = x.shape[-2]
    g = jnp.einsum("...id,...jd->...ij", x, x)
    return jnp.sum(jnp.where(_off_diagonal(n), jnp.expm1(beta * g), 0.0), axis=(-2, -1)) / (2.0 * beta * n * n)


def log_pair_energy(x: Float[Array, "... n d"], beta) -> Float[Array, ...]:
    """log((1/(2β n²)) Σ_{i≠j} e^{β⟨x_i, x_j⟩}) = log(E_β − n e^β/(2β n²)) for unit tokens: the log of E_β less its
    self-interactions, an increasing function of E_β, finite at every β > 0 (a log-sum-exp over the pairs i ≠ j)."""
    beta = jnp.asarray(beta)
    n = x.shape[-2]
    g = jnp.einsum("...id,...jd->...ij", x, x)
    logits = jnp.where(_off_diagonal(n), beta * g, -jnp.inf)
    return logsumexp(logits, axis=(-2, -1)) - jnp.log(2.0 * beta * n * n)


@partial(jax.jit, static_argnames=("k", "bins"))
def layer_metrics(x: Float[Array, "P n d"], beta, delta, *, k: int, bins: int) -> dict[str, Array]:
    """Every per-layer statistic of one layer's unit tokens x (prompts, n, d), per prompt: ``histogram``
    (P, bins), ``mean_inner_product``, ``clustered_fraction``, ``n_clusters`` (``pair_summary`` at δ),
    ``energy`` (E_β), ``energy_excess`` and ``log_pair_energy`` (its trend, kept at every β), ``effective_rank``
    (P,), ``twonn_ratios`` (P, n), ``neighbours`` (P, n, k) and ``distinct`` (P,: ``distinct_points``)."""
    pairs = pair_summary(x, delta)
    return {
        "histogram": inner_product_histogram(x, bins),
        "mean_inner_product": pairs["mean_inner_product"],
        "clustered_fraction": pairs["clustered_fraction"],
        "n_clusters": pairs["n_clusters"],
        "energy": energy(x, beta),
        "energy_excess": energy_excess(x, beta),
        "log_pair_energy": log_pair_energy(x, beta),
        "effective_rank": effective_rank(x),
        "twonn_ratios": twonn_ratios(x),
        "neighbours": nearest_neighbours(x, k),
        "distinct": distinct_points(x),
    }


@partial(jax.jit, static_argnames=("k", "bins"))
def layers_metrics(x: Float[Array, "L P n d"], beta, delta, *, k: int, bins: int) -> dict[str, Array]:
    """``layer_metrics`` of every layer of x (layers, prompts, n, d), one layer at a time in a compiled loop
    (``jax.lax.map``: the memory of one layer's pairs), each value with a leading layer axis."""
    return jax.lax.map(lambda layer: layer_metrics(layer, beta, delta, k=k, bins=bins), x)


def energy_trend(values, rtol: float = 1e-9) -> dict:
    """Whether E_β, ``values`` (layers, prompts), never decreases from one layer to the next, as along the
    gradient flow (SA and USA with V = I climb E_β, docs/model.md §1.3). ``values`` may be any increasing
    function of E_β with its digits kept (``energy_excess``, ``log_pair_energy``: ``trend_values`` picks one).

    An increment counts as a decrease when it is below −rtol·|E_β| (rounding of the sums otherwise reads as a
    decrease when the energy has stopped moving). Returns ``increments`` (layers − 1, prompts), ``monotone``
    (the mean over prompts never decreases), ``monotone_per_prompt`` (prompts,), ``monotone_fraction`` and
    the ``increment_min``/``median``/``max`` over prompts per transition (layers − 1,), and ``undefined``.

    A NaN or infinite value is no verdict: a prompt with one has ``monotone_per_prompt`` None and is left out
    of ``monotone_fraction`` (None when no prompt is left), ``monotone`` is then None, and ``undefined`` says
    why (None when the verdict is defined). The increments keep their NaNs.
    """
    e = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # inf − inf: the NaN that makes the verdict undefined
        steps = np.diff(e, axis=0)
    slack = rtol * np.abs(e[:-1])
    finite = np.all(np.isfinite(e), axis=0) & np.all(np.isfinite(steps), axis=0)
    climbs = np.all(steps >= -slack, axis=0)
    per_prompt = np.array([bool(c) if f else None for c, f in zip(climbs, finite)], dtype=object)
    mean = e.mean(axis=1)
    undefined = None
    if not np.all(finite):
        bad = int(np.sum(~finite))
        undefined = (
            f"E_β is not finite (NaN or inf, its exponentials out of float64's range) in {bad} of {finite.size} prompts"
        )
    with np.errstate(invalid="ignore"):
        return {
            "increments": steps,
            "monotone": None if undefined else bool(np.all(np.diff(mean) >= -rtol * np.abs(mean[:-1]))),
            "monotone_per_prompt": per_prompt,
            "monotone_fraction": float(np.mean(climbs[finite])) if np.any(finite) else None,
            "increment_min": steps.min(axis=1) if steps.size else np.zeros(0),
            "increment_median": np.median(steps, axis=1) if steps.size else np.zeros(0),
            "increment_max": steps.max(axis=1) if steps.size else np.zeros(0),
            "undefined": undefined,
        }


def trend_values(metrics: dict) -> tuple[str, np.ndarray]:
    """The increasing function of E_β whose trend ``energy_trend`` decides, from ``layer_metrics``'s values:
    ``energy_excess`` while it is finite (it keeps its digits at every β below overflow), else ``log_pair_energy``."""
    excess = np.asarray(metrics["energy_excess"], dtype=np.float64)
    if np.all(np.isfinite(excess)):
        return "energy_excess", excess
    return "log_pair_energy", np.asarray(metrics["log_pair_energy"], dtype=np.float64)


def check_attention(attention, blocks: int, prompts: int | None, tokens: int, label: str = "attention") -> np.ndarray:
    """Attention weights as (blocks, prompts, heads, tokens, tokens) float64, checked: shape (blocks, [prompts,]
    heads, tokens, tokens) against the states (``prompts`` None: states without a prompt axis), finite,
    non-negative, every row summing to 1 (within 1e-3, the rounding of a float16 softmax). One ValueError
    naming the first problem."""
    a = np.asarray(attention)
    if a.dtype.kind not in "fiu":
        raise ValueError(f"{label} has dtype {a.dtype}; expected floating-point attention weights")
    want = (
        f"(blocks = {blocks}, " + ("" if prompts is None else f"prompts = {prompts}, ") + f"heads, {tokens}, {tokens})"
    )
    ndim = 4 if prompts is None else 5
    if (
        a.ndim != ndim
        or a.shape[0] != blocks
        or a.shape[-2:] != (tokens, tokens)
        or (prompts is not None and a.shape[1] != prompts)
    ):
        raise ValueError(f"{label} has shape {a.shape}; expected {want}: one block per layer transition")
    a = a.astype(np.float64)
    if prompts is None:
        a = a[:, None]
    if a.shape[2] < 1:
        raise ValueError(f"{label} has shape {attention.shape}: no heads")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{label} has non-finite entries (nan or inf)")
    if np.any(a < 0):
        raise ValueError(f"{label} has negative entries: expected attention weights (softmax rows)")
    error = np.abs(a.sum(axis=-1) - 1.0)
    if np.any(error > 1e-3):
        b, p, h, i = (int(v) for v in np.argwhere(error > 1e-3)[0])
        where = f"block {b}, " + ("" if prompts is None else f"prompt {p}, ") + f"head {h}, query {i}"
        raise ValueError(
            f"{label}: the row of {where} sums to {a[b, p, h, i].sum():.6g}, not 1: expected attention weights "
            "(each query's softmax over the keys)"
        )
    return a


def first_token_attention(attention) -> np.ndarray:
    """α = (1/T) Σ_i A_{i,1}: each head's attention to the first token, averaged over all T queries, from
    weights (..., heads, T, T); shape (..., heads). This is arXiv 2410.10781's importance score of token k = 1,
    α_k = (1/(T − k + 1)) Σ_{i ≥ k} A_{i,k}, the mean over the queries that can see token k (all of them for
    the first token, causal or not)."""
    return np.asarray(attention, dtype=np.float64)[..., :, 0].mean(axis=-1)


def sink_rate(alpha, epsilon: float = SINK_EPSILON) -> np.ndarray:
    """The fraction of heads whose first-token score α exceeds ε (arXiv 2410.10781, Sink_1^ε per block):
    ``alpha`` (blocks, prompts, heads) → (blocks,), the indicator α > ε averaged over heads and prompts."""
    alpha = np.asarray(alpha, dtype=np.float64)
    return (alpha > epsilon).mean(axis=(-2, -1))


def first_token_norm_ratio(states) -> np.ndarray:
    """‖x_1‖ / median_{j ≥ 2} ‖x_j‖ per layer and prompt, states (layers, prompts, tokens, d) as given (not
    normalized): above 1 when the first token's residual stream grows massive, as it does with attention sinks."""
    norms = np.linalg.norm(np.asarray(states, dtype=np.float64), axis=-1)
    return norms[..., 0] / np.median(norms[..., 1:], axis=-1)
