"""One query among n keys (experiments/studies/selectivity/selectivity_theory.py): the threshold where the weight on the nearest key
reaches 1/2, the blocked passes against dense float64 attention, and the local average's closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, optimize

from attnflow.experiments.studies.selectivity.selectivity_theory import (
    attention_output,
    cap_constant,
    critical_scale,
    limit_thresholds,
    local_average_norm,
    local_average_spread,
    mean_field_output,
    nearest_keys,
    selectivity_threshold,
    smallest_gaps,
)
from attnflow.particles import init


def _dense(queries, keys, beta):
    """Softmax attention with V = I in float64, stabilized by the row maximum: (outputs, weights); ``beta``
    broadcasts against the (m, n) logits."""
    s = np.asarray(beta) * (queries @ keys.T)
    w = np.exp(s - s.max(axis=-1, keepdims=True))
    w /= w.sum(axis=-1, keepdims=True)
    return w @ keys, w


@pytest.fixture(scope="module")
def sample():
    """40 queries and 700 keys on S², the first 650 keys used: several blocks of 64, the last one partial."""
    keys, queries = np.asarray(init.uniform(3, 700, 3)), np.asarray(init.uniform(4, 40, 3))
    return queries, keys, 650


def test_threshold_is_where_the_weight_on_the_nearest_key_reaches_one_half(sample):
    queries, keys, n = sample
    beta, index = selectivity_threshold(queries, keys, n, block=64)
    beta, index = np.asarray(beta), np.asarray(index)
    s = queries @ keys[:n].T
    assert np.array_equal(index, np.argmax(s, axis=1))
    # the dense weight on the nearest key is exactly 1/2 there, and below 1/2 just before
    _, w = _dense(queries, keys[:n], beta[:, None])
    assert np.max(np.abs(w[np.arange(len(index)), index] - 0.5)) < 1e-12
    _, w = _dense(queries, keys[:n], beta[:, None] * (1 - 1e-6))
    assert np.all(w[np.arange(len(index)), index] < 0.5)
    # a root of the dense equation found by bisection agrees to rounding
    for i in range(3):

        def excess(b, gaps=s[i].max() - s[i]):
            return np.log(np.exp(-b * gaps).sum()) - np.log(2)

        assert beta[i] == pytest.approx(optimize.brentq(excess, 0.0, 1e6, xtol=1e-14), rel=1e-10)


def test_threshold_grows_with_the_context_and_is_infinite_at_a_tie(sample):
    queries, keys, _ = sample
    # a longer context only adds terms to T(β) = Σ e^{−β g_j}, unless its new key is the nearest one
    short, near_short = selectivity_threshold(queries, keys, 300, block=64)
    long, near_long = selectivity_threshold(queries, keys, 700, block=64)
    same = np.asarray(near_short) == np.asarray(near_long)
    assert np.all(np.asarray(long)[same] > np.asarray(short)[same])
    tied = np.array(keys)
    tied[5] = tied[6] = queries[0]  # two nearest keys at the same inner product: the weight stays ≤ 1/2
    beta, _ = selectivity_threshold(queries[:2], tied, block=64)
    assert np.isinf(beta[0]) and np.isfinite(beta[1])


def test_blocked_output_is_dense_attention_at_every_beta(sample):
    queries, keys, n = sample
    betas = np.array([0.0, 3.0, 300.0, 1e7])  # 1e7: every logit gap overflows a plain exponential
    y, w = attention_output(queries, keys, betas, n, block=64)
    want, weights = _dense(queries, keys[:n], betas[:, None, None])
    assert np.max(np.abs(np.asarray(y) - want)) < 1e-13
    assert np.max(np.abs(np.asarray(w) - weights.max(axis=-1))) < 1e-13
    assert np.allclose(np.asarray(y)[0], keys[:n].mean(axis=0), atol=1e-15, rtol=0)  # β = 0: the plain mean
    # β = 10⁷: the nearest key alone
    _, index = nearest_keys(queries, keys, n, block=64)
    assert np.max(np.abs(np.asarray(y)[3] - keys[np.asarray(index)])) < 1e-12
    # one β per query, as the threshold gives it
    beta, _ = selectivity_threshold(queries, keys, n, block=64)
    _, w = attention_output(queries, keys, beta, n, block=64)
    assert np.max(np.abs(np.asarray(w) - 0.5)) < 1e-12


def test_smallest_gaps_are_the_sorted_gaps(sample):
    queries, keys, n = sample
    gaps = np.asarray(smallest_gaps(queries, keys, n, ranks=10, block=64))
    s = queries @ keys[:n].T
    want = np.sort(s.max(axis=1, keepdims=True) - s, axis=1)[:, :10]
    assert np.max(np.abs(gaps - want)) < 1e-15


def test_bad_input_is_refused_with_one_message(sample):
    queries, keys, _ = sample
    with pytest.raises(ValueError, match="same d"):
        selectivity_threshold(queries[:, :2], keys)
    with pytest.raises(ValueError, match="finite and ≥ 0"):
        attention_output(queries, keys, -1.0)
    with pytest.raises(ValueError, match="beta must be"):
        attention_output(queries, keys, np.ones((2, 3, 4)))


def test_local_average_norm_is_the_von_mises_fisher_mean_length():
    beta = np.array([0.5, 5.0, 500.0])
    # d = 3: A_3(β) = coth β − 1/β
    assert np.allclose(local_average_norm(beta, 3), 1 / np.tanh(beta) - 1 / beta, rtol=1e-13, atol=0)
    # β → 0: β/d; β → ∞: 1 − (d − 1)/(2β) + O(β⁻²)
    assert local_average_norm(1e-10, 5) == pytest.approx(2e-11, rel=1e-9)
    assert 1 - local_average_norm(1e4, 5) == pytest.approx(2 / 1e4, rel=1e-3)


def test_mean_field_output_is_the_kernel_average_of_a_von_mises_fisher_density():
    # d = 3, keys of density ∝ e^{κ⟨μ,k⟩}: the average of k under e^{β⟨q,k⟩} by quadrature on S²
    q, mu, beta, kappa = np.array([0.0, 0.0, 1.0]), np.array([np.sin(0.7), 0.0, np.cos(0.7)]), 12.0, 3.0
    u = beta * q + kappa * mu

    def moment(f):
        def integrand(phi, theta):
            k = np.array([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)])
            return f(k) * np.exp(u @ k - np.linalg.norm(u)) * np.sin(theta)

        return integrate.dblquad(integrand, 0, np.pi, 0, 2 * np.pi, epsabs=1e-13, epsrel=1e-11)[0]

    want = np.array([moment(lambda k, i=i: k[i]) for i in range(3)]) / moment(lambda k: 1.0)
    assert np.allclose(mean_field_output(q, beta, kappa, mu), want, atol=1e-9, rtol=0)
    # for β ≫ κ its tangent part at q is (1/β) ∇_S log ρ(q) = (κ/β) P_q μ: the backward heat step
    y = mean_field_output(q, 400.0, kappa, mu)
    assert np.allclose(y - y @ q * q, kappa / 400.0 * (mu - mu @ q * q), rtol=0.02, atol=1e-15)


@pytest.mark.parametrize(("d", "beta", "n"), [(3, 5.0, 2000), (5, 3.0, 2000)])
def test_local_average_fluctuates_as_the_delta_method_predicts(d, beta, n):
    """n |P_q y|² over 800 independent contexts of n uniform keys, q = e_0: its mean is
    ``local_average_spread`` (within 4 standard errors), and ⟨y, q⟩ is A_d(β)."""
    rng = np.random.default_rng(7)
    keys = rng.standard_normal((800, n, d))
    keys /= np.linalg.norm(keys, axis=-1, keepdims=True)
    s = beta * keys[..., 0]
    w = np.exp(s - s.max(axis=1, keepdims=True))
    y = np.einsum("rn,rnd->rd", w / w.sum(axis=1, keepdims=True), keys)
    spread = n * np.sum(y[:, 1:] ** 2, axis=1)
    se = spread.std(ddof=1) / np.sqrt(spread.size)
    assert abs(spread.mean() - local_average_spread(beta, d)) < 4 * se
    assert np.mean(y[:, 0]) == pytest.approx(local_average_norm(beta, d), rel=2e-3)
    # the limits: (d − 1)/d at β = 0; 1 for d = 3 as β → ∞
    assert local_average_spread(0.0, d) == pytest.approx((d - 1) / d, rel=1e-12)
    assert local_average_spread(1e5, 3) == pytest.approx(1.0, rel=1e-4)


def test_critical_scale_is_n_to_the_two_over_d_minus_one():
    assert critical_scale(10**6, 3) == pytest.approx(1e6)
    assert critical_scale(10**6, 5) == pytest.approx(1e3)
    with pytest.raises(ValueError):
        critical_scale(100, 1)


@pytest.mark.parametrize("d", [3, 4, 5, 8])
def test_cap_constant_is_the_fraction_of_the_sphere_in_a_small_cap(d):
    # ⟨q, k⟩ has density ∝ (1 − u²)^{(d−3)/2} on [−1, 1]
    def mass(lo):
        return integrate.quad(lambda u: (1 - u * u) ** ((d - 3) / 2), lo, 1, epsabs=0, epsrel=1e-10)[0]

    s = 1e-6
    assert mass(1 - s) / mass(-1) == pytest.approx(cap_constant(d) * s ** ((d - 1) / 2), rel=1e-5)


@pytest.mark.slow  # 20 000 keys: a few seconds on two cores
def test_limit_law_solves_its_equation_and_is_the_large_n_law_of_the_scaled_threshold():
    d = 4
    b = limit_thresholds(d, 600, seed=1)
    # each draw is the root of Σ_{j≥2} e^{−b(S_j − S_1)} = 1 for its own Poisson points (same seed, same points)
    rng = np.random.default_rng(1)
    s = np.cumsum(rng.exponential(size=(600, 2000)), axis=1) ** (2 / (d - 1))
    assert np.max(np.abs(np.exp(-b[:, None] * (s[:, 1:] - s[:, :1])).sum(axis=1) - 1)) < 1e-12
    # 400 queries among 20 000 uniform keys on S³: the scaled thresholds' quartiles are the law's, within
    # their sampling errors (about 6 % here) and the O(n^{−2/3}) correction
    keys, queries = init.uniform(5, 20_000, d), init.uniform(6, 400, d)
    beta, _ = selectivity_threshold(queries, keys)
    scaled = np.asarray(beta) / (cap_constant(d) * 20_000) ** (2 / (d - 1))
    want = np.quantile(limit_thresholds(d, 4000, seed=2), [0.25, 0.5, 0.75])
    assert np.allclose(np.quantile(scaled, [0.25, 0.5, 0.75]), want, rtol=0.15, atol=0)
