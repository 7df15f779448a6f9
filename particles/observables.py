"""Observables of a configuration: clusters, pair statistics, histograms, order parameter, plateaus.

A configuration is an array ``x`` of shape (..., n, d) of unit vectors. Everything except
``plateaus`` is pure JAX: jittable, broadcasting over leading batch axes, with no Python loop
over particles or batch members. Closeness is decided on the gaps 1 − ⟨x_i,x_j⟩ computed as
½‖x_i − x_j‖² (``pairwise_gaps``), which keep full precision when particles nearly coincide;
δ = 1e-8 is then still meaningful, while 1 − ⟨x_i,x_j⟩ from the Gram matrix is only good to
about 1e-16 absolute.

A configuration (the trailing (n, d) block) with a NaN or inf entry has no meaningful statistic:
every floating one is NaN and every count (clusters, labels, sizes, histogram bins) is −1 for
that member, the other members of a batch untouched (``finite_members``).
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike
from jaxtyping import Array, Bool, Float, Int

from .checks import check_int, check_real
from .sphere import SMALL_D, inner_products, pairwise_gaps, small_d_gaps

__all__ = [
    "cluster_labels",
    "n_clusters",
    "cluster_sizes",
    "n_clusters_multi",
    "clustered_fraction",
    "clustered_fraction_of_angles",
    "pair_statistics",
    "pair_summary",
    "inner_product_histogram",
    "histogram_edges",
    "plateaus",
    "staircase_levels",
    "order_parameter",
]


def _check_config(x) -> Array:
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[-1] < 1 or x.shape[-2] < 1:
        raise ValueError(f"x must be a configuration of shape (..., n, d) with n, d ≥ 1, got shape {x.shape}")
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    return x


def _check_delta(delta, name: str = "delta"):
    """δ ≥ 0 and finite, as a NumPy value; traced values pass unchecked (validation needs concrete numbers).

    A NumPy value stays concrete under ``jit``, where a ``jnp`` array would be traced, so that the
    routes chosen by δ's value (``_gaps_against``) are taken in compiled runs too.
    """
    if isinstance(delta, jax.core.Tracer):
        return delta
    arr = np.asarray(delta)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{name} must be a real number, got {delta!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and ≥ 0, got {arr.tolist()}")
    return np.asarray(arr, dtype=jnp.result_type(float))


def finite_members(x: Float[Array, "... n d"], name: str, consequence: str) -> Bool[Array, ...]:
    """Whether each configuration (the trailing (n, d) block) holds only finite entries.

    The one rule of the observables and energies: a configuration with a NaN or inf entry gets
    NaN for every floating statistic and −1 for every count, so no two statistics of it
    disagree; callers apply it with ``jnp.where`` on this flag (jittable, one reduction). Called
    on a concrete array (not under jit or vmap), it warns once (RuntimeWarning) when some
    configuration is not finite, as "{name}: k of m configurations ...; their {consequence}".
    """
    ok = jnp.all(jnp.isfinite(jnp.asarray(x)), axis=(-2, -1))
    if not isinstance(x, jax.core.Tracer):
        _warn_non_finite(ok, name, consequence, stacklevel=4)
    return ok


def _warn_non_finite(ok, name: str, consequence: str, *, stacklevel: int) -> None:
    """The RuntimeWarning of ``finite_members`` for the concrete flags ``ok``, if some configuration is not finite;
    ``stacklevel`` counts from here to the line that called the public function."""
    bad = ok.size - int(np.count_nonzero(np.asarray(ok)))
    if bad:
        if ok.ndim == 0:
            which = "the configuration holds"
        else:
            which = f"{bad} of {ok.size} configurations {'holds' if bad == 1 else 'hold'}"
        its = "its" if bad == 1 else "their"
        warnings.warn(
            f"{name}: {which} non-finite entries (NaN or inf); {its} {consequence}",
            RuntimeWarning,
            stacklevel=stacklevel,
        )


def _nan_unless(ok: Bool[Array, ...], value: Array) -> Array:
    """``value`` where its configuration is finite, NaN elsewhere (trailing axes of ``value`` beyond ``ok`` broadcast)."""
    ok = jnp.reshape(ok, ok.shape + (1,) * (jnp.ndim(value) - ok.ndim))
    return jnp.where(ok, value, jnp.asarray(jnp.nan, jnp.result_type(value)))


def _minus_one_unless(ok: Bool[Array, ...], count: Array) -> Array:
    """``count`` where its configuration is finite, −1 elsewhere (trailing axes of ``count`` beyond ``ok`` broadcast)."""
    ok = jnp.reshape(ok, ok.shape + (1,) * (jnp.ndim(count) - ok.ndim))
    return jnp.where(ok, count, jnp.asarray(-1, jnp.result_type(count)))


# ---------------------------------------------------------------------------------------------
# Clusters


_WORD = 32  # adjacency bits per uint32 word of a row signature


def _first_neighbour(adj: Bool[Array, "... n n"]) -> Int[Array, "... n"]:
    """min{j : i ~ j} for a reflexive graph (the vertex itself at worst)."""
    return jnp.argmax(adj, axis=-1).astype(jnp.int32)


def _is_clique_union(adj: Bool[Array, "... n n"]) -> Bool[Array, ...]:
    """Whether a reflexive graph is a disjoint union of cliques: adjacent vertices have equal rows.

    Rows are compared through exact bit signatures (32 neighbours per uint32 word), one pass
    over the pairs. If i ~ j implies N[i] = N[j], every component is a clique. This is the
    usual case for tight clusters, where labels need no propagation at all.
    """
    n = adj.shape[-1]
    words = -(-n // _WORD)
    pad = words * _WORD - n
    bits = jnp.pad(adj, [(0, 0)] * (adj.ndim - 1) + [(0, pad)]).reshape(adj.shape[:-1] + (words, _WORD))
    powers = jnp.asarray(np.left_shift(np.uint32(1), np.arange(_WORD, dtype=np.uint32)), dtype=jnp.uint32)
    sig = jnp.sum(bits * powers, axis=-1, dtype=jnp.uint32)  # (..., n, words)
    equal = jnp.all(sig[..., :, None, :] == sig[..., None, :, :], axis=-1)
    return jnp.all(equal | ~adj, axis=(-2, -1))


@jax.jit
def _components(adj: Bool[Array, "... n n"]) -> Int[Array, "... n"]:
    """Smallest vertex index in each vertex's connected component of a reflexive graph.

    Labels start at l_i = min{j : i ~ j}, which is already the answer when the graph is a
    union of cliques (checked exactly, ``_is_clique_union``); otherwise min-label propagation
    (l_i ← min over neighbours j of l_j) alternated with pointer jumping (l_i ← l_{l_i}) runs
    to the fixed point. Every label is always a vertex of the same component with l_j ≤ j,
    both maps are non-increasing, and a fixed point of their composition is a fixed point of
    propagation, i.e. constant on components, hence the component minimum. Jumping makes a
    path of n vertices converge in O(log n) sweeps instead of n.
    """
    n = adj.shape[-1]
    start = _first_neighbour(adj)

    def body(state):
        labels, _ = state
        new = jnp.min(jnp.where(adj, labels[..., None, :], n), axis=-1)
        new = jnp.take_along_axis(new, new, axis=-1)
        return new, jnp.any(new != labels)

    labels, _ = jax.lax.while_loop(lambda state: state[1], body, (start, ~jnp.all(_is_clique_union(adj))))
    return labels


def cluster_labels(x: Float[Array, "... n d"], delta) -> Int[Array, "... n"]:
    """Cluster label of each particle: the smallest particle index in its cluster.

    Clusters are the connected components of the graph {i ~ j : ⟨x_i, x_j⟩ ≥ 1 − δ}, the
    clustering criterion of [GLPR] §6.3 (tested as 1 − ⟨x_i,x_j⟩ ≤ δ on pairwise gaps).
    δ = 0 groups only coinciding points; δ ≥ 2 puts every particle in one cluster.
    A configuration with a NaN or inf entry has every label −1 (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    delta = _check_delta(delta)
    ok = finite_members(x, "cluster_labels", "labels are -1")
    return _minus_one_unless(ok, _labels(x, delta))


def _labels(x, delta):
    return _components(pairwise_gaps(x) <= delta)


def _count(labels):
    return jnp.sum(labels == jnp.arange(labels.shape[-1]), axis=-1)


def _sizes(labels):
    return jnp.sum(labels[..., :, None] == labels[..., None, :], axis=-1)


def n_clusters(x: Float[Array, "... n d"], delta) -> Int[Array, ...]:
    """Number of clusters: connected components of {⟨x_i, x_j⟩ ≥ 1 − δ} (see ``cluster_labels``).

    −1 for a configuration with a NaN or inf entry (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    delta = _check_delta(delta)
    ok = finite_members(x, "n_clusters", "count is -1")
    return _minus_one_unless(ok, _count(_labels(x, delta)))


def cluster_sizes(x: Float[Array, "... n d"], delta) -> Int[Array, "... n"]:
    """Size of the cluster containing each particle, m_{q(i)}; Σ_i m_{q(i)} = Σ_q m_q².

    Clusters of the configuration ``x`` (..., n, d) at threshold ``delta`` are as in ``cluster_labels``.
    Every size is −1 for a configuration with a NaN or inf entry (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    delta = _check_delta(delta)
    ok = finite_members(x, "cluster_sizes", "sizes are -1")
    return _minus_one_unless(ok, _sizes(_labels(x, delta)))


def n_clusters_multi(x: Float[Array, "... n d"], deltas) -> Int[Array, "... k"]:
    """Number of clusters at each threshold of the 1-D array ``deltas``, on a trailing axis.

    One pass over the gaps for all thresholds, e.g. to see which cluster counts are robust
    (they persist over a range of δ) and which are an artefact of the chosen δ. Every count is
    −1 for a configuration with a NaN or inf entry (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    deltas = _check_delta(deltas, "deltas")
    if jnp.ndim(deltas) != 1:
        raise ValueError(f"deltas must be a 1-D array of thresholds, got shape {jnp.shape(deltas)}")
    ok = finite_members(x, "n_clusters_multi", "counts are -1")
    adj = pairwise_gaps(x)[..., None, :, :] <= deltas[:, None, None]
    return _minus_one_unless(ok, _count(_components(adj)))


def clustered_fraction(x: Float[Array, "... n d"], delta) -> Float[Array, ...]:
    """Fraction of ordered pairs i ≠ j with ⟨x_i, x_j⟩ ≥ 1 − δ ([GLPR] Fig. 3 statistic).

    (1/(n(n−1))) #{(i, j) : i ≠ j, 1 − ⟨x_i,x_j⟩ ≤ δ}; 1 exactly when all particles are within
    δ of each other. With one particle there are no pairs; the value is 1 by convention
    (a single particle is one cluster). NaN for a configuration with a NaN or inf entry (a
    RuntimeWarning when eager).
    """
    x = _check_config(x)
    delta = _check_delta(delta)
    n = x.shape[-2]
    gram = n > 1 and _gram_decides(x, delta)
    if not gram or not isinstance(x, jax.core.Tracer):  # eager calls warn about non-finite configurations
        ok = finite_members(x, "clustered_fraction", "fraction is NaN")
        if n == 1:
            return _nan_unless(ok, jnp.ones(x.shape[:-2]))
        if not gram:
            return _nan_unless(ok, _clustered_fraction(x, _close(small_d_gaps(x), delta)))
    return _clustered_fraction_of_gram_gaps(x, 1.0 - inner_products(x), delta)


def _clustered_fraction_of_gram_gaps(x, gaps, delta):
    """The fraction from gaps 1 − G, NaN where a gap is not finite, in one reduction.

    Each term is [gap ≤ δ] + 0·gap, and 0·gap is NaN exactly where the gap is NaN or infinite:
    a configuration with a non-finite entry has such gaps, so it gets NaN without a pass of its
    own over x (at n = d = 32 that pass cost a tenth of a phase-diagram run). A finite x whose
    squared norms overflow gets NaN too; the Gram route is taken for points of the sphere.
    """
    n = x.shape[-2]
    if n * n > 2 ** (jnp.finfo(jnp.result_type(x.dtype, jnp.float32)).nmant + 1):  # counts exact in int64
        ok = jnp.isfinite(jnp.sum(gaps * 0.0, axis=(-2, -1)))
        return jnp.where(ok, _clustered_fraction(x, _close(gaps, delta)), jnp.nan)
    return _clustered_fraction(x, _close(gaps, delta).astype(gaps.dtype) + gaps * 0.0)


GRAM_MARGIN = 100.0
"""The Gram matrix decides gaps ≤ δ where δ ≥ GRAM_MARGIN · d · ε (``_gaps_against``)."""


def _gaps_against(x: Float[Array, "... n d"], delta) -> Float[Array, "... n n"]:
    """The gaps 1 − ⟨x_i, x_j⟩ as precise as a comparison with ``delta`` needs them.

    For d > ``SMALL_D`` and a known δ ≥ GRAM_MARGIN · d · ε (ε of x's precision), from the Gram
    matrix: one batched matrix product, ≈ 4× cheaper at n = d = 32 than the squared distances
    ½‖x_i − x_j‖², whose (n, n, d) differences XLA reduces over their short minor axis. Each
    entry of 1 − G is then within d·ε of its value, so only a pair whose gap lies within 1% of δ
    can be counted on the other side. Otherwise (small d, a δ near the rounding, or a traced δ)
    the squared distances, accurate to relative precision (``sphere.pairwise_gaps``).
    """
    return 1.0 - inner_products(x) if _gram_decides(x, delta) else small_d_gaps(x)


def _gram_decides(x, delta) -> bool:
    """Whether 1 − ⟨x_i, x_j⟩ from the Gram matrix decides gap ≤ δ (``_gaps_against``)."""
    d = x.shape[-1]
    if d <= SMALL_D or isinstance(delta, jax.core.Tracer):
        return False
    eps = float(jnp.finfo(jnp.result_type(x.dtype, jnp.float32)).eps)
    return float(np.min(np.asarray(delta))) >= GRAM_MARGIN * d * eps


def clustered_fraction_of_angles(theta: Float[Array, "... n 1"], delta) -> Float[Array, ...]:
    """``clustered_fraction`` of the points (cos θ_i, sin θ_i) of the circle, from their angles.

    On the circle 1 − cos(θ_i − θ_j) ≤ δ exactly when θ_i − θ_j is within α = 2 arcsin √(δ/2) of
    a multiple of 2π. With the angles reduced to [0, 2π) once per configuration, that is
    ||θ_i − θ_j| − π| ≥ π − α: five operations per pair and no sine or cosine, where the points
    cost a sine and a cosine per particle (``circle.from_angles``) before the same count. The
    angular threshold is as accurate as the chord's: ~1e-7 absolute in float32 against α ≈ 0.045
    at δ = 1e-3. NaN for a configuration with a NaN or inf angle (a RuntimeWarning when eager).
    """
    theta = _check_config(theta)
    delta = _check_delta(delta)
    if theta.shape[-1] != 1:
        raise ValueError(f"theta must hold one angle per particle, shape (..., n, 1), got {theta.shape}")
    ok = finite_members(theta, "clustered_fraction_of_angles", "fraction is NaN")
    n = theta.shape[-2]
    if n == 1:
        return _nan_unless(ok, jnp.ones(theta.shape[:-2]))
    alpha = 2.0 * jnp.arcsin(jnp.sqrt(jnp.minimum(delta, 2.0) / 2.0))
    two_pi = 2.0 * np.pi
    a = theta[..., 0]
    a = a - two_pi * jnp.floor(a * (1.0 / two_pi))
    far = jnp.abs(jnp.abs(a[..., :, None] - a[..., None, :]) - jnp.asarray(np.pi, a.dtype))
    return _nan_unless(ok, _clustered_fraction(theta, far >= (np.pi - alpha).astype(a.dtype)))


def _close(gaps, delta):
    """gaps ≤ δ, compared in the gaps' own precision: a Python δ would otherwise promote float32
    gaps to float64 (with x64 enabled), halving the width of the vectorized pass over the pairs."""
    return gaps <= jnp.asarray(delta, gaps.dtype)


def _clustered_fraction(x, adj):
    """The fraction from the adjacency ``gaps <= δ``, diagonal included, counted without a select.

    A diagonal gap is exactly 0 in a finite configuration (the callers replace the others' value
    by NaN), so the diagonal counts n: subtracting n instead of masking the n × n diagonal keeps
    the count one reduction that XLA vectorizes, about 5× cheaper than each of the pair
    summary's float reductions (sum, min, max) at n = 32, d = 2.
    """
    n = x.shape[-2]
    dtype = jnp.result_type(x.dtype, jnp.float32)
    # counted in floating point while n² is exact there (n ≤ 4096 in float32): XLA's CPU backend
    # reduces floats over the pairs 1.3× faster than int64 and 3× faster than int32
    acc = dtype if n * n <= 2 ** (jnp.finfo(dtype).nmant + 1) else jnp.int64
    count = jnp.sum(jnp.sum(adj, axis=-1, dtype=acc), axis=-1, dtype=acc) - n
    return count.astype(dtype) / (n * (n - 1))


# ---------------------------------------------------------------------------------------------
# Pair statistics and histograms


def pair_statistics(x: Float[Array, "... n d"]) -> dict[str, Float[Array, ...]]:
    """Mean, min, max and standard deviation of ⟨x_i, x_j⟩ over pairs i ≠ j.

    Returns {"mean", "min", "max", "std"}, each of shape (...). By [GLPR] Thm 6.9 all four
    collapse onto the equiangular γ_β(t) of (6.9) as d → ∞ (std → 0). The std is two-pass
    (deviations from the mean), so it stays accurate when all inner products nearly agree.
    With one particle: mean = min = max = 1, std = 0 (the particle with itself). All four are
    NaN for a configuration with a NaN or inf entry (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    ok = finite_members(x, "pair_statistics", "mean, min, max and std are NaN")
    n = x.shape[-2]
    batch = x.shape[:-2]
    if n == 1:
        one = jnp.ones(batch, dtype=x.dtype)
        out = {"mean": one, "min": one, "max": one, "std": jnp.zeros(batch, dtype=x.dtype)}
        return {k: _nan_unless(ok, v) for k, v in out.items()}
    g = inner_products(x)
    off = ~jnp.eye(n, dtype=bool)
    pairs = n * (n - 1)
    mean = jnp.sum(jnp.where(off, g, 0.0), axis=(-2, -1)) / pairs
    dev = jnp.where(off, g - mean[..., None, None], 0.0)
    out = {
        "mean": mean,
        "min": jnp.min(jnp.where(off, g, jnp.inf), axis=(-2, -1)),
        "max": jnp.max(jnp.where(off, g, -jnp.inf), axis=(-2, -1)),
        "std": jnp.sqrt(jnp.sum(dev * dev, axis=(-2, -1)) / pairs),
    }
    return {k: _nan_unless(ok, v) for k, v in out.items()}


def pair_summary(x: Float[Array, "... n d"], delta, *, clusters: bool = True) -> dict[str, Array]:
    """The pair statistics of a run's summary from one pass over the pairs.

    Returns {"mean_inner_product", "min_inner_product", "max_inner_product" (over i ≠ j),
    "clustered_fraction", "n_clusters", "cluster_level" (Σ_q m_q²/n² over the clusters at
    threshold δ)}, each of shape (...): the values of ``pair_statistics``, ``clustered_fraction``,
    ``n_clusters`` and ``cluster_sizes``, with the gaps ½‖x_i − x_j‖² formed once. Inner
    products are 1 − gap; with one particle they are 1 by convention. ``clusters=False`` leaves
    out the two cluster statistics (their connected components cost the most). For a
    configuration with a NaN or inf entry every value is NaN and n_clusters is −1 (a
    RuntimeWarning when eager).
    """
    x = _check_config(x)
    delta = _check_delta(delta)
    ok = finite_members(x, "pair_summary", "statistics are NaN and cluster count -1")
    n = x.shape[-2]
    gaps = small_d_gaps(x)
    # reductions written without selects (the diagonal gaps are exactly 0): XLA fuses them
    # into one vectorized pass over the pairs
    adj = _close(gaps, delta)
    out: dict[str, Array] = {}
    if clusters:
        labels = _components(adj)
        sizes = jnp.sum(labels[..., :, None] == labels[..., None, :], axis=-1, dtype=jnp.int32)
        out.update(
            n_clusters=_minus_one_unless(ok, _count(labels)),
            cluster_level=_nan_unless(ok, jnp.sum(sizes, axis=-1).astype(gaps.dtype) / (n * n)),
        )
    if n == 1:
        one = _nan_unless(ok, jnp.ones(x.shape[:-2], dtype=x.dtype))
        out.update(mean_inner_product=one, min_inner_product=one, max_inner_product=one, clustered_fraction=one)
        return out
    pairs = n * (n - 1)
    off = jnp.asarray(4.0 * np.eye(n), dtype=gaps.dtype)  # lifts the diagonal above every gap (≤ 2)
    # each reduction over j first, then over i: XLA's CPU backend reduces one axis at a time
    # about 1.5× faster than both at once (n = 32, d = 2)
    pair_values = {
        "mean_inner_product": 1.0 - jnp.sum(jnp.sum(gaps, axis=-1), axis=-1) / pairs,
        "min_inner_product": 1.0 - jnp.max(jnp.max(gaps, axis=-1), axis=-1),
        "max_inner_product": 1.0 - jnp.min(jnp.min(gaps + off, axis=-1), axis=-1),
        "clustered_fraction": _clustered_fraction(x, adj),
    }
    out.update({k: _nan_unless(ok, v) for k, v in pair_values.items()})
    return out


def histogram_edges(bins: int = 64) -> Float[Array, " bins+1"]:
    """The bins + 1 equally spaced edges over [−1, 1] used by ``inner_product_histogram``."""
    bins = check_int("bins", bins, 1)
    # numpy's linspace, not jnp's: the two differ in the last ulp, and numpy.histogram's edges
    # are numpy's
    return jnp.asarray(np.linspace(-1.0, 1.0, bins + 1))


@partial(jax.jit, static_argnames="bins")
def _histogram(x, bins: int):
    n = x.shape[-2]
    iu, ju = np.triu_indices(n, 1)
    g = inner_products(x)[..., iu, ju]
    batch = g.shape[:-1]
    # rounding can push ⟨x_i,x_j⟩ a few ulps outside [−1, 1]; those belong to the end bins
    g = jnp.clip(g, -1.0, 1.0)
    edges = jnp.asarray(np.linspace(-1.0, 1.0, bins + 1))
    idx = jnp.clip(jnp.floor((g + 1.0) * (bins / 2.0)).astype(jnp.int32), 0, bins - 1)
    # same correction as numpy.histogram: the computed index may be one off at an edge, so
    # compare against the actual edges (bins are [e_k, e_{k+1}), the last one closed)
    idx = idx - (g < edges[idx])
    idx = idx + ((g >= edges[idx + 1]) & (idx != bins - 1))
    flat = (jnp.arange(int(np.prod(batch, dtype=int))).reshape(batch + (1,)) * bins + idx).ravel()
    size = int(np.prod(batch, dtype=int)) * bins
    return jnp.bincount(flat, length=size).reshape(batch + (bins,))


def inner_product_histogram(x: Float[ArrayLike, "... n d"], bins: int = 64) -> Int[Array, "... bins"]:
    """Counts of ⟨x_i, x_j⟩ over unordered pairs i < j in ``bins`` equal bins over [−1, 1].

    The histogram of [GLPR] Fig. 1 (and the object that concentrates on γ_β(t) in Thm 6.9).
    Bins are [e_k, e_{k+1}) with edges ``histogram_edges(bins)``, the last one closed, so
    ⟨x_i,x_j⟩ = 1 lands in the last bin; counts agree with ``numpy.histogram(..., bins,
    range=(−1, 1))`` and sum to n(n−1)/2. Every count is −1 for a configuration with a NaN or
    inf entry (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    bins = check_int("bins", bins, 1)
    ok = finite_members(x, "inner_product_histogram", "counts are -1")
    return _minus_one_unless(ok, _histogram(x, bins))


def order_parameter(x: Float[Array, "... n d"]) -> Float[Array, ...]:
    """Kuramoto order parameter R = ‖(1/n) Σ_i x_i‖ ∈ [0, 1]; R = 1 iff all particles coincide.

    R² = (1/n²) Σ_i Σ_j ⟨x_i, x_j⟩, so R² = 1/n + (1 − 1/n)·(mean pair inner product).
    NaN for a configuration with a NaN or inf entry (a RuntimeWarning when eager).
    """
    x = _check_config(x)
    ok = finite_members(x, "order_parameter", "order parameter is NaN")
    return _nan_unless(ok, jnp.linalg.norm(jnp.mean(x, axis=-2), axis=-1))


# ---------------------------------------------------------------------------------------------
# Metastability: plateaus of a time series


def plateaus(ts, series, *, atol: float = 0.0, rtol: float = 0.0, min_duration: float = 0.0):
    """Maximal time intervals on which a 1-D series stays constant: [(t_start, t_end, value), ...].

    ``ts`` holds the sample times of ``series``. Scanning left to right, an interval starts at a sample with value v and extends over every
    following sample within atol + rtol·|v| of v; the next interval starts at the first sample
    that is not. Intervals are reported from their first to their last sample time, with value
    v, if t_end − t_start ≥ min_duration. The defaults (atol = rtol = 0) mean exact equality,
    the right notion for integer series such as cluster counts; energies need a tolerance.
    NaN never equals anything, so a NaN sample is a plateau of its own. This is the staircase
    of metastable states (docs/model.md §3, arXiv 2410.06833). NumPy, not traced.
    """
    ts = np.asarray(ts, dtype=float)
    series = np.asarray(series)
    if ts.ndim != 1 or series.ndim != 1 or ts.shape != series.shape:
        raise ValueError(
            f"ts and series must be 1-D arrays of the same length, got shapes {ts.shape} and {series.shape}"
        )
    if not np.all(np.isfinite(ts)) or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be finite and non-decreasing")
    atol = check_real("atol", atol, 0.0)
    rtol = check_real("rtol", rtol, 0.0)
    min_duration = check_real("min_duration", min_duration, 0.0)
    out = []
    i, m = 0, len(ts)
    while i < m:
        v = series[i]
        tol = atol + rtol * abs(v)
        j = i
        # a Python scan is fine here: series are per-time diagnostics of a finished run
        while j + 1 < m and abs(series[j + 1] - v) <= tol:
            j += 1
        if ts[j] - ts[i] >= min_duration:
            value = v.item() if isinstance(v, np.generic) else v
            out.append((float(ts[i]), float(ts[j]), value))
        i = j + 1
    return out


def staircase_levels(sizes) -> Float[Array, ...]:
    """Normalized-energy level Σ_q m_q² / n² of tight, well-separated clusters of sizes m_q.

    ``sizes`` holds the cluster sizes m_q on its last axis (zeros allowed as padding),
    n = Σ_q m_q. This is the plateau value of 2βE_β e^{−β} = (1/n²)ΣΣ e^{β(⟨x_i,x_j⟩−1)}
    (``normalized_energy``, docs/model.md §1.3) as β → ∞ with clusters fixed; merging clusters
    of sizes a and b raises it by 2ab/n² (arXiv 2410.06833). It ranges from 1/n (all
    separate) to 1 (one cluster).
    """
    if isinstance(sizes, jax.core.Tracer):
        m = sizes.astype(jnp.result_type(float))
    else:
        arr = np.asarray(sizes)
        if arr.ndim < 1 or arr.shape[-1] < 1 or not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"sizes must be an array of cluster sizes on its last axis, got {sizes!r}")
        if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(np.sum(arr, axis=-1) <= 0):
            raise ValueError(f"sizes must be finite, ≥ 0 and not all zero, got {arr.tolist()}")
        m = jnp.asarray(arr, dtype=jnp.result_type(float))
    n = jnp.sum(m, axis=-1)
    return jnp.sum(m * m, axis=-1) / (n * n)


class Clusters(NamedTuple):
    """Clusters of a configuration at threshold δ: per-particle labels, their count, and sizes."""

    labels: Int[Array, "... n"]
    count: Int[Array, ...]  # type: ignore[assignment]  # the number of clusters, shadowing tuple.count by design
    sizes: Int[Array, "... n"]


def clusters(x: Float[ArrayLike, "... n d"], delta=1e-3) -> Clusters:
    """Connected components of {i ~ j : ⟨x_i,x_j⟩ ≥ 1 − δ}: labels (smallest index), count, each particle's cluster size.

    A configuration with a NaN or inf entry has count −1 and every label and size −1 (a
    RuntimeWarning when eager), as ``n_clusters``, ``cluster_labels`` and ``cluster_sizes``.
    """
    x = _check_config(x)
    delta = _check_delta(delta)
    ok, labels, count, sizes = _cluster_parts(x, delta)
    if not isinstance(x, jax.core.Tracer):
        _warn_non_finite(ok, "clusters", "count, labels and sizes are -1", stacklevel=3)
    return Clusters(labels=labels, count=count, sizes=sizes)


@jax.jit
def _cluster_parts(x, delta):
    """``clusters``' arrays in one compiled program (eager, its dozen small operations would each be one): the
    finite flags, then the labels, the count and the sizes, −1 where a configuration is not finite."""
    ok = jnp.all(jnp.isfinite(x), axis=(-2, -1))
    labels = _labels(x, delta)
    return (
        ok,
        _minus_one_unless(ok, labels),
        _minus_one_unless(ok, _count(labels)),
        _minus_one_unless(ok, _sizes(labels)),
    )
