"""Rényi centres (arXiv 2411.04990 §5): the greedy definitions on hand-made configurations, Rényi's
parking constant, and the parking count of uniform tokens on the circle."""

import numpy as np
import pytest
from scipy import integrate, special

import attnflow as af
from attnflow.experiments.studies.renyi_centres.renyi_centres_theory import RENYI_PARKING, parking_count, renyi_centres


def on_circle(angles):
    a = np.asarray(angles, dtype=float)
    return np.stack([np.cos(a), np.sin(a)], -1)


@pytest.mark.parametrize(
    "angles, centres, strong",
    [
        ([0.0, 0.1, 1.0, 1.05, 3.0], [1, 0, 1, 0, 1], [1, 0, 1, 0, 1]),
        # token 2 is 0.8 from the centre 0 (a centre) but 0.4 from token 1 (not strong)
        ([0.0, 0.4, 0.8], [1, 0, 1], [1, 0, 0]),
        # distances are geodesic and wrap around the circle: 2π − 0.3 is 0.3 from 0
        ([0.0, 2 * np.pi - 0.3, np.pi], [1, 0, 1], [1, 0, 1]),
    ],
)
def test_centres_are_greedy_in_token_order(angles, centres, strong):
    c, s = renyi_centres(on_circle(angles), 0.5)
    assert np.asarray(c).astype(int).tolist() == centres
    assert np.asarray(s).astype(int).tolist() == strong


def test_centres_take_batches_and_any_dimension_and_compare_directions():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 4, 40, 3))  # unnormalized points of R^3: their directions count
    c, s = renyi_centres(x, 0.7)
    assert c.shape == s.shape == (3, 4, 40)
    for idx in np.ndindex(3, 4):
        y = x[idx] / np.linalg.norm(x[idx], axis=-1, keepdims=True)
        dist = np.arccos(np.clip(y @ y.T, -1, 1))
        greedy = []
        for i in range(40):
            greedy.append(all(dist[i, j] > 0.7 for j in range(i) if greedy[j]))
        assert np.asarray(c[idx]).tolist() == greedy
        assert np.asarray(s[idx]).tolist() == [bool(np.all(dist[i, :i] > 0.7)) for i in range(40)]
    assert np.all(np.asarray(s) <= np.asarray(c))  # a strong centre is a centre


def test_parking_constant_is_renyis_integral():
    inner = lambda t: special.exp1(t) + np.log(t) + np.euler_gamma  # ∫_0^t (1 − e^{−u})/u du
    value, _ = integrate.quad(lambda t: np.exp(-2 * inner(t)) if t > 0 else 1.0, 0, np.inf, limit=400)
    assert abs(value - RENYI_PARKING) < 1e-8


@pytest.mark.slow
def test_uniform_tokens_park_rényis_count_on_the_circle():
    """Many uniform tokens (n = 800) leave c_R · 2π/δ centres on average, at δ = 0.5 and 0.25."""
    for delta, configs in ((0.5, 100), (0.25, 50)):
        x = af.init.uniform(3, 800, 2, batch=configs)
        c, _ = renyi_centres(x, delta)
        counts = np.asarray(c).sum(-1)
        expected = parking_count(delta)
        assert abs(counts.mean() - expected) < 3 * counts.std() / np.sqrt(configs) + 0.01 * expected, (
            delta,
            counts.mean(),
            expected,
        )
