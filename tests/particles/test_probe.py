"""The measurements of ``af.probe`` (``particles/probe.py``) on states whose answer the theory gives: SA with V = I
climbs E_β, k separated caps become k clusters, the effective rank falls to 1 as the clusters merge; TwoNN finds
the dimension of a sphere; neighbour sets overlap fully with themselves and at chance k/(n − 1) across
independent layers; the sink rate of planted first-token columns is the planted fraction."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles import probe as pr


def sa_layers(x0, beta: float, times) -> np.ndarray:
    """SA (Q = K = V = I) from x0 (prompts, n, d), saved at ``times``: states (layers, prompts, n, d)."""
    times = np.asarray(times, dtype=float)
    sol = af.simulate(af.SA(beta), jnp.asarray(x0), float(times[-1]), ts=times, solver="rk4", dt=0.05)
    return np.moveaxis(np.asarray(sol.xs), 1, 0)


def caps(k: int, d: int, m: int, *, prompts: int, spread: float = 0.1, seed: int = 0) -> np.ndarray:
    """m tokens around each of the k directions e_1 … e_k, each moved by a Gaussian of standard deviation
    ``spread`` per coordinate, then normalized: (prompts, k·m, d)."""
    rng = np.random.default_rng(seed)
    x = np.repeat(np.eye(d)[:k], m, axis=0) + spread * rng.normal(size=(prompts, k * m, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_sa_climbs_the_energy_and_k_separated_caps_become_k_clusters():
    # SA with V = I is the gradient flow of E_β for the metric weighted by the softmax normalizers Z_i
    # (docs/model.md §1.3): dE/dt = (1/n²) Σ_i Z_i ‖ẋ_i‖² ≥ 0, so E_β never decreases from one layer to the next.
    # Caps of radius 0.1 around orthogonal directions barely see each other at β = 9 (weights e^{−9} of their
    # own), so each cap collapses onto one point long before any two meet: 3 caps, 3 clusters at δ = 1e-3.
    k, d, m, beta = 3, 6, 8, 9.0
    states = sa_layers(caps(k, d, m, prompts=2), beta, np.linspace(0.0, 8.0, 5))
    result = af.probe(states, beta=beta)
    raw = result.families["raw"]
    np.testing.assert_array_equal(raw["n_clusters"][-1], [k, k])
    np.testing.assert_array_equal(raw["n_clusters"][0], [k * m, k * m])
    summary = result.summary()
    assert summary["energy_monotone"] is True and summary["energy_monotone_fraction"] == 1.0
    assert np.all(np.asarray(summary["raw"]["energy_increment_min"]) >= 0)
    # the energy is af.energy's, [GLPR] (3.5), at the β given
    np.testing.assert_allclose(raw["energy"], np.asarray(af.energy(jnp.asarray(states), beta)), rtol=1e-12)
    # the clustered fraction when k equal caps are points: k · m(m − 1) ordered pairs of n(n − 1)
    n = k * m
    np.testing.assert_allclose(raw["clustered_fraction"][-1], k * m * (m - 1) / (n * (n - 1)))


def test_the_energy_trend_keeps_its_digits_at_every_beta():
    # E_β = (n e^β + n(n − 1))/(2β n²) + (1/(2β n²)) Σ_{i≠j} (e^{β⟨x_i,x_j⟩} − 1): the excess has E_β's increments,
    # and tends to (1/(2n²)) Σ_{i≠j} ⟨x_i, x_j⟩ as β → 0, where E_β itself is 1/(2β) to within rounding
    states = sa_layers(caps(2, 4, 5, prompts=2, spread=0.4), 2.0, np.linspace(0.0, 3.0, 4))
    x = jnp.asarray(states)
    n = states.shape[-2]
    constant = (n * np.exp(2.0) + n * (n - 1)) / (2 * 2.0 * n * n)
    np.testing.assert_allclose(pr.energy_excess(x, 2.0), np.asarray(af.energy(x, 2.0)) - constant, rtol=1e-12)
    gram = np.einsum("lpid,lpjd->lpij", states, states)
    half_mean = 0.5 * (np.sum(gram, axis=(-2, -1)) - np.trace(gram, axis1=-2, axis2=-1)) / n**2
    np.testing.assert_allclose(pr.energy_excess(x, 1e-14), half_mean, rtol=1e-12)
    # the pairs' part of E_β in logs: E_β − n e^β/(2β n²)
    self_part = n * np.exp(2.0) / (2 * 2.0 * n * n)
    np.testing.assert_allclose(
        np.exp(pr.log_pair_energy(x, 2.0)), np.asarray(af.energy(x, 2.0)) - self_part, rtol=1e-12
    )
    # at β = 1e-14 the SA layers' mean inner product rises: the trend says so from the excess, where E_β's own
    # increments are rounding (≈ 5e13 · 1e-16) of either sign
    metrics = {"energy_excess": pr.energy_excess(x, 1e-14), "log_pair_energy": pr.log_pair_energy(x, 1e-14)}
    name, values = pr.trend_values(metrics)
    assert name == "energy_excess" and pr.energy_trend(values)["monotone_fraction"] == 1.0
    assert np.all(np.diff(half_mean, axis=0) > 1e-3)
    # beyond float64's range (β = 2000) the excess overflows and the log of the pairs' part decides: SA still climbs
    # E_β, by increments that E_β's self-interactions (e^β, from every token) would round away in log E_β
    big = {"energy_excess": pr.energy_excess(x, 2000.0), "log_pair_energy": pr.log_pair_energy(x, 2000.0)}
    name, values = pr.trend_values(big)
    assert name == "log_pair_energy" and np.all(np.isfinite(values))
    assert pr.energy_trend(values)["monotone_fraction"] == 1.0
    # the same layers in reverse: their energy falls at every β, and the trend says so, from the excess below
    # overflow (β = 200, where log E_β's increments are rounding of e^β's) and from the logs beyond (β = 2000)
    for beta in (200.0, 2000.0):
        backwards = x[::-1]
        metrics = {
            "energy_excess": pr.energy_excess(backwards, beta),
            "log_pair_energy": pr.log_pair_energy(backwards, beta),
        }
        trend = pr.energy_trend(pr.trend_values(metrics)[1])
        assert not trend["monotone"] and trend["monotone_fraction"] == 0.0 and np.all(trend["increments"] < 0)


@pytest.mark.slow
def test_effective_rank_falls_to_one_as_the_clusters_merge():
    # From uniform tokens in d = 4 at β = 4 SA forms a few clusters, which merge: the centred tokens' effective
    # rank falls from about d to 1 (two tight clusters left, or one) and never rises.
    states = sa_layers(af.init.uniform(0, n=16, d=4, batch=4), 4.0, np.linspace(0.0, 60.0, 9))
    result = af.probe(states, beta=4.0)
    rank = result.families["raw"]["effective_rank"].mean(axis=1)
    assert rank[0] > 3.5
    assert np.all(np.diff(rank) <= 1e-9)
    assert rank[-1] < 1.01
    assert result.summary()["energy_monotone_fraction"] == 1.0


def test_effective_rank_of_known_spectra():
    # singular values σ of the centred tokens give exp(entropy of σ / Σσ): equal σ over r directions → r
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    signs = np.array(
        [[1, 1, 1], [-1, 1, 1], [1, -1, 1], [1, 1, -1], [-1, -1, -1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]]
    )
    x = signs @ Q[:3]  # a centred cube: three equal singular values
    assert float(pr.effective_rank(jnp.asarray(x))) == pytest.approx(3.0, rel=1e-12)
    y = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.5], [0.0, -0.5]])  # σ = (√2, √2/2): p = (2/3, 1/3)
    expected = np.exp(-(2 / 3) * np.log(2 / 3) - (1 / 3) * np.log(1 / 3))
    assert float(pr.effective_rank(jnp.asarray(y))) == pytest.approx(expected, rel=1e-12)
    assert float(pr.effective_rank(jnp.ones((5, 3)))) == 1.0  # coinciding tokens


def test_twonn_finds_the_dimension_of_a_sphere_within_its_error():
    # points uniform on S^4 (dimension 4) embedded in R^12 by a random orthonormal frame; 10 prompts of 200
    rng = np.random.default_rng(0)
    y = rng.normal(size=(10, 200, 5))
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    frame, _ = np.linalg.qr(rng.normal(size=(12, 5)))
    mu = np.asarray(pr.twonn_ratios(jnp.asarray(y @ frame.T)))
    estimate, error, used = pr.twonn(mu.reshape(-1))
    assert used == 1800  # the largest 10 % discarded
    assert error == pytest.approx(estimate / np.sqrt(1798))
    assert abs(estimate - 4.0) < 2.5 * error
    # with nothing discarded it is the plain maximum-likelihood form (N − 1) / Σ log μ
    plain, _, _ = pr.twonn(mu.reshape(-1), discard=0.0)
    assert plain == pytest.approx((mu.size - 1) / np.sum(np.log(mu)), rel=1e-12)


def test_knn_overlap_is_one_with_itself_and_chance_across_independent_layers():
    rng = np.random.default_rng(1)
    n, k, prompts = 40, 6, 50
    a = rng.normal(size=(prompts, n, 8))
    b = rng.normal(size=(prompts, n, 8))
    na, nb = (pr.nearest_neighbours(jnp.asarray(v / np.linalg.norm(v, axis=-1, keepdims=True)), k) for v in (a, b))
    np.testing.assert_array_equal(np.asarray(pr.knn_overlap(na, na)), 1.0)
    # |N(i) ∩ N'(i)| is hypergeometric: k draws from n − 1 with k marked, mean k²/(n − 1)
    chance = k / (n - 1)
    variance = (k * chance * (1 - chance) * (n - 1 - k) / (n - 2)) / k**2
    measured = float(np.mean(np.asarray(pr.knn_overlap(na, nb))))
    assert abs(measured - chance) < 4 * np.sqrt(variance / (n * prompts))


def planted_attention(blocks: int, prompts: int, heads: int, n: int, sinks, seed: int = 0) -> np.ndarray:
    """Softmax rows whose first column is 0.6 in the heads ``sinks[b]`` of block b and 0.05 elsewhere."""
    rng = np.random.default_rng(seed)
    a = rng.random(size=(blocks, prompts, heads, n, n - 1))
    first = np.full((blocks, prompts, heads, n, 1), 0.05)
    for b, planted in enumerate(sinks):
        first[b, :, list(planted)] = 0.6
    a = a / a.sum(axis=-1, keepdims=True) * (1 - first)
    return np.concatenate([first, a], axis=-1)


def test_sink_rate_is_the_planted_fraction():
    attention = planted_attention(3, 2, 8, 12, [(0, 1, 2), (), range(8)])
    alpha = pr.first_token_attention(pr.check_attention(attention, 3, 2, 12))
    np.testing.assert_allclose(alpha[0, :, :3], 0.6)
    np.testing.assert_array_equal(pr.sink_rate(alpha), [3 / 8, 0.0, 1.0])
    np.testing.assert_array_equal(pr.sink_rate(alpha, epsilon=0.7), [0.0, 0.0, 0.0])  # no head above 0.7
    states = np.random.default_rng(2).normal(size=(4, 2, 12, 5))
    states[:, :, 0] *= 10.0  # a first token ten times longer than the others
    result = af.probe(states, attention=attention, beta=1.0, k=3)
    np.testing.assert_array_equal(result.summary()["sink_rate"], [3 / 8, 0.0, 1.0])
    assert result.summary()["sink_blocks"] == [1, 2, 3]
    ratio = pr.first_token_norm_ratio(states)
    norms = np.linalg.norm(states, axis=-1)
    np.testing.assert_allclose(ratio, norms[..., 0] / np.median(norms[..., 1:], axis=-1))
    assert np.all(ratio > 3)


def test_layer_norm_centres_and_scales():
    x = np.random.default_rng(3).normal(size=(2, 1, 5, 7)) + 4.0  # a common offset that layer norm removes
    normed = pr.layer_normed_states(x)
    np.testing.assert_allclose(normed.mean(axis=-1), 0.0, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(normed, axis=-1), 1.0, rtol=1e-15)
    layer_norm = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)  # torch's LayerNorm, no affine
    np.testing.assert_allclose(normed, layer_norm / np.sqrt(7), rtol=1e-12)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda a: a * 1.01, "sums to"),
        (lambda a: a[:2], "expected (blocks = 3"),
        (lambda a: np.where(np.arange(12) == 0, -0.1, a), "negative"),
    ],
)
def test_bad_attention_is_one_clear_error(change, message):
    attention = planted_attention(3, 2, 4, 12, [(0,), (1,), (2,)])
    states = np.random.default_rng(4).normal(size=(4, 2, 12, 5))
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        af.probe(states, attention=change(attention), beta=1.0, k=3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"k": 11}, "k must be an integer between 1 and n − 2 = 10"),
        ({"beta": -1.0}, "beta must be a finite number > 0"),
        ({"delta": 0.0}, "delta must be a finite number > 0"),
        ({"layers": [2]}, "at least 2"),
    ],
)
def test_bad_arguments_are_one_clear_error(kwargs, message):
    states = np.random.default_rng(5).normal(size=(3, 12, 4))
    with pytest.raises(ValueError, match=message):
        af.probe(states, **{"beta": 1.0, **kwargs})
