"""Observables of configurations: clusters, pair statistics, histograms, plateaus, order parameter.

Configurations are built by hand so that the right answer is known exactly (cluster structure,
inner products placed on bin edges, step series), plus property tests against SciPy's
connected components and a Monte-Carlo identity for the order parameter.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.sparse.csgraph import connected_components

import attnflow as af  # noqa: F401  (enables float64)
from attnflow.particles.energy import normalized_energy
from attnflow.particles.observables import (
    cluster_labels,
    cluster_sizes,
    clustered_fraction,
    clustered_fraction_of_angles,
    histogram_edges,
    inner_product_histogram,
    n_clusters,
    n_clusters_multi,
    order_parameter,
    pair_statistics,
    plateaus,
    staircase_levels,
)
from attnflow.particles.sphere import inner_products, pairwise_gaps


def tight_clusters(sizes, spread, rng, d=4):
    """Clusters of the given sizes around ±e_k (centres at inner product 0 or −1, gap ≥ 1), each
    point tilted off its centre by an angle ≤ spread, in random order. Returns (x, cluster id)."""
    centres = np.concatenate([np.eye(d), -np.eye(d)])[: len(sizes)]
    ids = np.repeat(np.arange(len(sizes)), sizes)
    perm = rng.permutation(len(ids))
    ids = ids[perm]
    x = centres[ids] + spread * rng.uniform(-1, 1, (len(ids), d)) / math.sqrt(d)
    return x / np.linalg.norm(x, axis=-1, keepdims=True), ids


def expected_labels(ids):
    """Smallest particle index sharing each particle's cluster id."""
    return np.array([np.flatnonzero(ids == k)[0] for k in ids])


# ---------------------------------------------------------------------------------- clusters


@pytest.mark.slow
def test_hand_built_clusters():
    rng = np.random.default_rng(0)
    sizes = [3, 1, 4, 2]
    x, ids = tight_clusters(sizes, 1e-3, rng)
    # within a cluster the gap is ≤ ½(2·1e-3)² = 2e-6; between clusters ≥ 1 − 0 = 1
    delta = 1e-3
    np.testing.assert_array_equal(cluster_labels(x, delta), expected_labels(ids))
    assert int(n_clusters(x, delta)) == 4
    np.testing.assert_array_equal(cluster_sizes(x, delta), np.array(sizes)[ids])
    # ordered pairs inside clusters: Σ m(m − 1) = 6 + 0 + 12 + 2 = 20 of n(n − 1) = 90
    assert float(clustered_fraction(x, delta)) == pytest.approx(20 / 90, abs=1e-15)
    # δ = 0: all 10 points distinct; δ = 1.5 links the centres e1..e4 (gap 1 ± 2e-3): one cluster
    np.testing.assert_array_equal(n_clusters_multi(x, jnp.array([0.0, 1e-3, 1.5, 2.0])), [10, 4, 1, 1])


def great_circle(angles):
    return np.stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)], axis=-1)


def test_chain_is_one_component_and_a_wider_gap_splits_it():
    n, phi = 64, 0.02
    gap = 1 - math.cos(phi)  # consecutive gap; the next-nearest gap is 1 − cos 2φ ≈ 4·gap
    delta = gap * (1 + 1e-6)  # just inside: only consecutive points are adjacent
    perm = np.random.default_rng(1).permutation(n)
    steps = np.full(n, phi)
    steps[0] = 0.0
    x = great_circle(np.cumsum(steps))[perm]  # chain order scrambled: labels must travel
    assert int(n_clusters(x, delta)) == 1
    np.testing.assert_array_equal(cluster_labels(x, delta), np.zeros(n, dtype=int))
    assert int(n_clusters(x, gap * (1 - 1e-6))) == n  # just outside: no edges at all

    # widen the step between chain positions 40 and 41 to just outside δ
    steps[41] = math.acos(1 - delta * (1 + 1e-6))
    x = great_circle(np.cumsum(steps))[perm]
    side = perm >= 41  # x[i] sits at chain position perm[i]
    want = np.where(side, np.flatnonzero(side)[0], np.flatnonzero(~side)[0])
    assert int(n_clusters(x, delta)) == 2
    np.testing.assert_array_equal(cluster_labels(x, delta), want)
    np.testing.assert_array_equal(cluster_sizes(x, delta), np.where(side, 23, 41))


@pytest.mark.slow
def test_delta_edge_cases():
    p, q, r = np.eye(3)
    x = np.stack([p, p, q, p, r, -r])
    # δ = 0: exactly coinciding points (gap exactly 0) and nothing else
    np.testing.assert_array_equal(cluster_labels(x, 0.0), [0, 0, 2, 0, 4, 5])
    assert float(clustered_fraction(x, 0.0)) == pytest.approx(6 / 30, abs=1e-15)
    # δ = 2: ⟨x_i,x_j⟩ ≥ −1 always (r, −r have gap exactly ½‖2r‖² = 2): one cluster
    assert int(n_clusters(x, 2.0)) == 1
    assert float(clustered_fraction(x, 2.0)) == 1.0
    # a single particle: one cluster, fraction 1 by convention
    assert int(n_clusters(x[:1], 0.0)) == 1
    assert float(clustered_fraction(x[:1], 0.0)) == 1.0


def test_clustered_fraction_takes_the_gram_route_under_jit_and_is_nan_for_non_finite_members():
    # n = d = 32 in float32 at δ = 1e-3: the Gram matrix decides (δ ≥ 100·d·ε), also inside jit and vmap,
    # where δ must stay a concrete number; 12 of 32 tokens in a cap of gaps ≤ 2e-4 (far from δ)
    rng = np.random.default_rng(5)
    pole = np.eye(32)[0]
    cap = pole + 0.02 * rng.standard_normal((3, 12, 32)) * np.r_[0, np.ones(31)] / np.sqrt(31)
    spread = rng.standard_normal((3, 20, 32))
    x = np.concatenate([cap, spread], axis=1)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    x[2, 5, 7] = np.nan
    x = jnp.asarray(x, jnp.float32)
    fn = jax.jit(jax.vmap(lambda y: clustered_fraction(y, 1e-3)))
    assert "dot_general" in str(jax.make_jaxpr(fn)(x))
    frac = np.asarray(fn(x))
    np.testing.assert_allclose(frac[:2], 12 * 11 / (32 * 31), rtol=1e-6)  # 132 pairs: a miscount is 1/132
    assert np.isnan(frac[2])


def test_clustered_fraction_counts_exactly_in_float32_and_is_nan_for_non_finite_configurations():
    # 40 of 64 points in one tight cap: 40·39 ordered pairs close, counted without rounding in float32
    rng = np.random.default_rng(3)
    theta = np.concatenate([rng.uniform(0, 1e-3, 40), np.linspace(1.0, 6.0, 24)])
    x = np.stack([np.cos(theta), np.sin(theta)], -1)
    f32 = clustered_fraction(jnp.asarray(x, jnp.float32), 1e-3)
    assert f32.dtype == jnp.float32 and float(f32) == np.float32(40 * 39) / np.float32(64 * 63)
    assert float(clustered_fraction(x, 1e-3)) == pytest.approx(40 * 39 / (64 * 63), abs=1e-15)
    # a configuration holding a non-finite particle has no fraction (as it has no cluster count)
    bad = x.copy()
    bad[0] = np.nan
    bad[1, 0] = np.inf
    with pytest.warns(RuntimeWarning, match="non-finite"):
        assert np.isnan(float(clustered_fraction(bad, 1e-3)))


@pytest.mark.slow
def test_clustered_fraction_of_angles_is_the_fraction_of_their_points():
    # 1 − cos(θ_i − θ_j) ≤ δ ⟺ θ_i − θ_j within α = 2 arcsin √(δ/2) of a multiple of 2π
    delta = 1e-3
    alpha = 2.0 * math.asin(math.sqrt(delta / 2.0))
    # across the cut at ±π, 2π and 6π apart, and just inside / just outside α: pairs (0, 1), (2, 3), (4, 5)
    # are close, (6, 7) is not; every other pair is far
    theta = np.array(
        [
            np.pi - alpha / 3,
            -np.pi + alpha / 3,
            1.0,
            1.0 + 2 * np.pi + alpha * (1 - 1e-6),
            -2.0,
            -2.0 + 6 * np.pi - alpha * (1 - 1e-6),
            0.3,
            0.3 + alpha * (1 + 1e-6),
        ]
    )[:, None]
    expected = 3 * 2 / (8 * 7)
    assert float(clustered_fraction_of_angles(theta, delta)) == pytest.approx(expected, abs=1e-15)
    points = np.concatenate([np.cos(theta), np.sin(theta)], axis=-1)
    assert float(clustered_fraction(points, delta)) == pytest.approx(expected, abs=1e-15)
    # random angles over several turns, in float64 and float32, batched: the points' fraction at each δ
    rng = np.random.default_rng(5)
    centers = rng.uniform(-10.0, 10.0, (6, 1, 1))
    theta = centers + rng.normal(0.0, 0.05, (6, 40, 1)) + 2 * np.pi * rng.integers(-2, 3, (6, 40, 1))
    points = np.concatenate([np.cos(theta), np.sin(theta)], axis=-1)
    for d in (1e-3, 3e-3, 0.5, 2.0):
        want = np.asarray(clustered_fraction(points, d))
        assert np.all((want > 0) & (want < 1)) if d < 0.01 else np.all(want == 1.0)  # α ≈ the spread, or far above
        np.testing.assert_array_equal(clustered_fraction_of_angles(theta, d), want)
        f32 = clustered_fraction_of_angles(jnp.asarray(theta, jnp.float32), d)
        assert f32.dtype == jnp.float32
        np.testing.assert_allclose(f32, want, atol=2 / (40 * 39))  # a pair within float32 rounding of α may flip
    # a configuration holding a non-finite angle has no fraction; the other members keep theirs
    bad = theta.copy()
    bad[0, 0] = np.nan
    bad[0, 1] = np.inf
    with pytest.warns(RuntimeWarning, match="1 of 6 configurations holds non-finite entries"):
        got = np.asarray(clustered_fraction_of_angles(bad, 1e-3))
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], clustered_fraction_of_angles(theta[1:], 1e-3))
    with pytest.raises(ValueError, match="one angle per particle"):
        clustered_fraction_of_angles(points, 1e-3)


@pytest.mark.slow
def test_batch_axes_match_members():
    rng = np.random.default_rng(2)
    partitions = ([2, 2, 2, 2], [5, 3], [8], [1, 1, 3, 3], [4, 4], [6, 2])
    configs = [tight_clusters(s, 1e-3, rng, d=3)[0] for s in partitions]
    x = np.stack(configs).reshape(2, 3, 8, 3)
    deltas = jnp.array([1e-4, 1e-3, 0.5])
    labels, counts, sizes = cluster_labels(x, 1e-3), n_clusters(x, 1e-3), cluster_sizes(x, 1e-3)
    multi, frac = n_clusters_multi(x, deltas), clustered_fraction(x, 1e-3)
    stats, hist, r = pair_statistics(x), inner_product_histogram(x, 16), order_parameter(x)
    assert multi.shape == (2, 3, 3) and hist.shape == (2, 3, 16)
    for b in range(6):
        i, j = divmod(b, 3)
        m = configs[b]
        np.testing.assert_array_equal(labels[i, j], cluster_labels(m, 1e-3))
        assert counts[i, j] == n_clusters(m, 1e-3)
        np.testing.assert_array_equal(sizes[i, j], cluster_sizes(m, 1e-3))
        np.testing.assert_array_equal(multi[i, j], [n_clusters(m, d) for d in deltas])
        # counts agree exactly; the division by n(n − 1) may round differently in XLA (1 ulp)
        assert float(frac[i, j]) == pytest.approx(float(clustered_fraction(m, 1e-3)), abs=1e-15)
        for key in stats:
            assert float(stats[key][i, j]) == pytest.approx(float(pair_statistics(m)[key]), abs=1e-15)
        np.testing.assert_array_equal(hist[i, j], inner_product_histogram(m, 16))
        assert float(r[i, j]) == pytest.approx(float(order_parameter(m)), abs=1e-15)
    assert list(np.asarray(counts).ravel()) == [4, 2, 1, 4, 2, 2]


def test_cluster_labels_jit_and_traced_delta():
    x, ids = tight_clusters([2, 3, 1], 1e-3, np.random.default_rng(3))
    f = jax.jit(lambda x, d: (cluster_labels(x, d), n_clusters(x, d)))
    labels, count = f(jnp.asarray(x), 1e-3)
    np.testing.assert_array_equal(labels, expected_labels(ids))
    assert int(count) == 3


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), log_delta=st.floats(-6.0, 0.3), spread=st.sampled_from([1e-3, 0.05, 0.5]))
def test_components_match_scipy(seed, log_delta, spread):
    # random clustered configurations (n = 12 fixed so the kernel compiles once)
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((rng.integers(1, 6), 3))
    x = centres[rng.integers(0, len(centres), 12)] + spread * rng.standard_normal((12, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    delta = 10.0**log_delta
    adj = np.asarray(pairwise_gaps(jnp.asarray(x))) <= delta
    count, comp = connected_components(adj, directed=False)
    labels = np.asarray(cluster_labels(x, delta))
    assert int(n_clusters(x, delta)) == count == len(np.unique(labels))
    # every edge joins particles with the same label, and the label is its component's minimum
    i, j = np.nonzero(adj)
    assert np.all(labels[i] == labels[j])
    np.testing.assert_array_equal(labels, [np.flatnonzero(comp == c)[0] for c in comp])
    assert float(clustered_fraction(x, delta)) == pytest.approx((adj.sum() - 12) / 132, abs=1e-15)


# ---------------------------------------------------------------------------------- pair statistics


def test_pair_statistics_known_values():
    # e1, e2, −e1: inner products (ordered pairs) 0, −1, 0 twice each
    x = np.array([[1.0, 0, 0], [0, 1.0, 0], [-1.0, 0, 0]])
    s = pair_statistics(x)
    assert float(s["mean"]) == pytest.approx(-1 / 3, abs=1e-15)
    assert float(s["min"]) == -1.0 and float(s["max"]) == 0.0
    assert float(s["std"]) == pytest.approx(math.sqrt(2) / 3, abs=1e-15)
    # equiangular configuration ([GLPR] Thm 6.8 start): every statistic is ρ, spread 0 up to
    # the ~1e-16 error of building the configuration
    e = af.init.equiangular(0, 6, 8, 0.3)
    s = pair_statistics(e)
    for key in ("mean", "min", "max"):
        assert float(s[key]) == pytest.approx(0.3, abs=1e-14)
    assert float(s["std"]) < 1e-14
    one = pair_statistics(x[:1])
    assert [float(one[k]) for k in ("mean", "min", "max", "std")] == [1.0, 1.0, 1.0, 0.0]


def test_histogram_matches_numpy_and_counts_pairs():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 20, 3))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    # append points whose inner products sit exactly on edges: −1, 0, ±0.5, 1 (for bins = 64, 8, 4)
    extra = np.array([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0.5, math.sqrt(0.75), 0], [1.0, 0, 0]])
    x = np.concatenate([x, np.broadcast_to(extra, (3, 5, 3))], axis=1)
    n = x.shape[1]
    iu = np.triu_indices(n, 1)
    g = np.asarray(inner_products(jnp.asarray(x)))
    for bins in (64, 7, 8, 4):
        h = np.asarray(inner_product_histogram(x, bins))
        np.testing.assert_array_equal(h.sum(-1), n * (n - 1) // 2)
        for b in range(3):
            want, edges = np.histogram(np.clip(g[b][iu], -1, 1), bins=bins, range=(-1, 1))
            np.testing.assert_array_equal(h[b], want)
        np.testing.assert_array_equal(histogram_edges(bins), edges)
    # the pair (e1, e1) has inner product exactly 1: last bin, not an overflow bin
    assert int(inner_product_histogram(extra[[0, 4]], 8)[-1]) == 1


# ---------------------------------------------------------------------------------- order parameter


def test_order_parameter():
    e = np.eye(3)
    assert float(order_parameter(np.stack([e[0]] * 5))) == pytest.approx(1.0, abs=1e-15)
    assert float(order_parameter(np.stack([e[0], -e[0], e[1], -e[1]]))) == 0.0
    # R² = 1/n + (1 − 1/n) · mean_{i≠j} ⟨x_i,x_j⟩ identically
    x = af.init.uniform(5, n=8, d=3, batch=4000)
    r2 = np.asarray(order_parameter(x)) ** 2
    mean = np.asarray(pair_statistics(x)["mean"])
    np.testing.assert_allclose(r2, 1 / 8 + (7 / 8) * mean, rtol=0, atol=1e-14)
    # uniform points: E⟨x_i,x_j⟩ = 0, so E R² = 1/n. Var R² = 2(n−1)/(n³d) = 0.0091, so the
    # standard error over 4000 draws is 0.0015; allow 5 of them
    assert abs(r2.mean() - 1 / 8) < 5 * math.sqrt(2 * 7 / (8**3 * 3) / 4000)


# ---------------------------------------------------------------------------------- metastability


def test_plateaus_of_step_series():
    ts = np.arange(10.0)
    counts = np.array([5, 3, 3, 3, 2, 2, 2, 2, 1, 1])
    assert plateaus(ts, counts) == [(0.0, 0.0, 5), (1.0, 3.0, 3), (4.0, 7.0, 2), (8.0, 9.0, 1)]
    assert plateaus(ts, counts, min_duration=2.0) == [(1.0, 3.0, 3), (4.0, 7.0, 2)]
    # energies: a drift of 1e-6 inside each level is a plateau at rtol 1e-4 but not exactly
    levels = np.array([0.2, 0.2, 0.2, 0.52, 0.52, 1.0])
    series = levels + 1e-6 * np.arange(6)
    got = plateaus(ts[:6], series, rtol=1e-4)
    assert [(a, b) for a, b, _ in got] == [(0.0, 2.0), (3.0, 4.0), (5.0, 5.0)]
    assert [v for *_, v in got] == pytest.approx([0.2, 0.52 + 3e-6, 1.0 + 5e-6], abs=1e-15)
    assert len(plateaus(ts[:6], series)) == 6
    # NaN equals nothing, not even NaN: every NaN sample stands alone
    assert len(plateaus(ts[:3], [1.0, np.nan, np.nan])) == 3
    with pytest.raises(ValueError, match="same length"):
        plateaus(ts, counts[:-1])
    with pytest.raises(ValueError, match="atol"):
        plateaus(ts, counts, atol=-1.0)


def test_staircase_levels():
    n = 5
    assert float(staircase_levels([1] * n)) == pytest.approx(1 / n, abs=1e-15)
    assert float(staircase_levels([n, 0, 0])) == 1.0
    # each merge of clusters of sizes a and b raises the level by 2ab/n² (arXiv 2410.06833)
    before, after = staircase_levels([[2, 1, 1, 1], [3, 1, 1, 0]])
    assert float(after - before) == pytest.approx(2 * 2 * 1 / n**2, abs=1e-15)
    with pytest.raises(ValueError, match="sizes"):
        staircase_levels([0, 0])


def test_staircase_level_is_the_energy_of_tight_clusters():
    # docs/model.md §1.3: for well-separated tight clusters, (1/n²)ΣΣ e^{β(⟨x_i,x_j⟩−1)} ≈ Σ m_q²/n².
    # Within clusters the gap is ≤ 2e-12, so e^{−β gap} = 1 − O(2e-9) at β = 1000; between
    # clusters the gap is ≥ 1 and e^{−1000} = 0 in float64.
    rng = np.random.default_rng(6)
    sizes = [3, 1, 4, 2]
    x, _ = tight_clusters(sizes, 1e-6, rng)
    # one size per cluster: the size at each cluster's representative (label == own index)
    representative = np.asarray(cluster_labels(x, 1e-6)) == np.arange(10)
    level = float(staircase_levels(np.asarray(cluster_sizes(x, 1e-6))[representative]))
    assert level == pytest.approx(30 / 100, abs=1e-15)
    assert float(normalized_energy(jnp.asarray(x), 1000.0)) == pytest.approx(level, abs=1e-8)


def test_bad_arguments_are_named():
    x = np.eye(3)
    with pytest.raises(ValueError, match="delta"):
        cluster_labels(x, -1e-3)
    with pytest.raises(ValueError, match="delta"):
        clustered_fraction(x, np.nan)
    with pytest.raises(ValueError, match="deltas"):
        n_clusters_multi(x, [[0.1]])
    with pytest.raises(ValueError, match="bins"):
        inner_product_histogram(x, 0)
    with pytest.raises(ValueError, match="shape"):
        order_parameter(np.ones(3))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clustered_fraction_from_the_gram_matrix_counts_every_pair_away_from_delta(dtype):
    # d > SMALL_D and δ far above d·ε: the count comes from 1 − G (one matrix product); it must equal
    # the exact count of float64 squared distances for every pair not within 1% of δ
    from attnflow.particles.observables import GRAM_MARGIN

    rng = np.random.default_rng(11)
    n, d, delta = 32, 32, 1e-3
    centers = rng.normal(size=(6, 1, d))
    x = centers + rng.normal(size=(6, n, d)) * rng.choice([1e-3, 2e-2, 1.0], size=(6, n, 1))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    gaps = 0.5 * np.sum((x[:, :, None] - x[:, None]) ** 2, axis=-1)
    assert np.any((gaps < delta) & ~np.eye(n, dtype=bool)) and np.any(gaps > delta)
    exact = (gaps <= delta).sum(axis=(1, 2)) - n  # ordered pairs i ≠ j
    near = np.abs(gaps - delta) <= 0.01 * delta
    assert delta >= GRAM_MARGIN * d * np.finfo(dtype).eps
    got = np.asarray(af.clustered_fraction(jnp.asarray(x, dtype), delta))
    for m in range(6):
        if not near[m].any():
            assert round(float(got[m]) * n * (n - 1)) == exact[m]
    # under jit with a traced δ the squared distances decide, as for δ near the rounding
    traced = np.asarray(jax.jit(af.clustered_fraction)(jnp.asarray(x, dtype), delta))
    np.testing.assert_allclose(traced, got, atol=1e-12)
