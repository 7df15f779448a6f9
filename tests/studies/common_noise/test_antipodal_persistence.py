"""Two antipodal groups under random layer weights (common_noise_theory.py, antipodal_persistence.py): the two
clusters' diffusion against the pair's, the push off R = −1 of unbalanced groups against the model's own layers and
SDE, the invariance of the balanced state, the split exponent and the persistence probability against simulation."""

import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.experiments.studies.common_noise.antipodal_persistence import balanced_start, classify
from attnflow.experiments.studies.common_noise.common_noise_theory import (
    antipodal_exponent,
    antipodal_log_variance,
    antipodal_persistence,
    antipodal_push,
    pair_drift,
    pair_variance,
    split_exponent,
    two_cluster_drift,
    two_cluster_variance,
)
from attnflow.particles.random_depth import Attention, CommonNoise, RandomDepth
from attnflow.solvers.common_noise_paths import common_noise_paths


def groups(k: int, n: int, d: int) -> np.ndarray:
    u = np.eye(d)[0]
    return np.stack([u] * k + [-u] * (n - k))


def test_balanced_clusters_are_the_pair_diffusion():
    r = np.linspace(-0.99, 0.99, 37)
    for beta, d, sigma in ((0.4, 3, 1.0), (1.7, 9, 0.7)):
        np.testing.assert_allclose(two_cluster_drift(r, beta, d, 0.5, sigma), pair_drift(r, beta, d, sigma), atol=1e-14)
        np.testing.assert_allclose(
            two_cluster_variance(r, beta, d, 0.5, sigma), pair_variance(r, beta, d, sigma), atol=1e-14
        )


def test_push_is_the_drift_at_the_antipodal_state_and_vanishes_only_when_balanced():
    for w in (0.125, 0.3, 0.5, 0.7):
        for beta, d in ((0.5, 4), (2.0, 8)):
            np.testing.assert_allclose(antipodal_push(beta, d, w), two_cluster_drift(-1.0, beta, d, w), atol=1e-14)
            assert (antipodal_push(beta, d, w) > 1e-6) == (w != 0.5)
    assert two_cluster_variance(-1.0, 1.0, 5, 0.3) == 0.0


def test_log_variance_is_the_limit_at_the_antipodal_state():
    for beta, d in ((0.3, 4), (1.5, 10)):
        x = 1e-5
        np.testing.assert_allclose(pair_variance(-1 + x, beta, d) / x**2, antipodal_log_variance(beta, d), rtol=1e-4)


@pytest.mark.parametrize("scheme", ["depth", "euler-maruyama", "heun"])
def test_balanced_antipodal_state_is_invariant(scheme):
    d, n = 5, 8
    attention = Attention(jnp.asarray([0.5, 2.0, 4.0]), d)
    model = RandomDepth(attention) if scheme == "depth" else CommonNoise(attention)
    x0 = jnp.asarray(np.broadcast_to(groups(n // 2, n, d), (3, n, d)))
    xs = np.asarray(common_noise_paths(model, x0, jnp.arange(3), dt=0.02, steps=400, save_every=100, scheme=scheme))
    g = np.einsum("bsid,bsjd->bsij", xs, xs)
    assert np.abs(np.abs(g) - 1).max() < 1e-12
    assert (classify(xs) == 2).all()
    # unbalanced groups (5 : 3) are pushed off R = −1 by every layer
    xs = np.asarray(
        common_noise_paths(
            model,
            jnp.asarray(np.broadcast_to(groups(5, n, d), (3, n, d))),
            jnp.arange(3),
            dt=0.02,
            steps=10,
            scheme=scheme,
        )
    )
    assert (np.einsum("bid,bjd->bij", xs[:, -1], xs[:, -1]).min(axis=(1, 2)) > -1 + 1e-8).all()


def test_unbalanced_push_against_the_layers_and_the_sde():
    # from the exact 5 : 3 antipodal state, E(1 + R) after a short time t is μ_w(−1) t + O(t²): the layers (dt = 1/L)
    # and Euler–Maruyama both against the closed form σ²(d − 1)(α_p − α_q)²/(2d)
    d, n, beta, sigma, members = 5, 8, 0.5, 1.3, 4000
    push = antipodal_push(beta, d, 5 / 8, sigma)
    x0 = jnp.asarray(np.broadcast_to(groups(5, n, d), (members, n, d)))
    for model, scheme in (
        (RandomDepth(Attention(beta, d), sigma=sigma), "depth"),
        (CommonNoise(Attention(beta, d), sigma=sigma), "euler-maruyama"),
    ):
        xs = np.asarray(common_noise_paths(model, x0, jnp.arange(members), dt=0.005, steps=4, scheme=scheme))[:, -1]
        gap = 1 + np.einsum("bd,bd->b", xs[:, 0], xs[:, -1])
        t = 0.02
        assert abs(gap.mean() - push * t) <= 4 * gap.std() / np.sqrt(members) + 0.05 * push * t, (
            scheme,
            gap.mean(),
            push * t,
        )
    assert push > 0.01  # a push the test resolves


@pytest.mark.slow
def test_split_exponent_against_the_sde():
    # one token of the + group of {±u} (2 + 2 tokens) displaced by 1e-5: (1/t) log(1 − R₁₂) over t = 3
    d, beta, members, t = 5, 1.0, 400, 3.0
    e = np.eye(d)
    x = np.stack([e[0] * np.cos(1e-5) + e[1] * np.sin(1e-5), e[0], -e[0], -e[0]])
    x0 = jnp.asarray(np.broadcast_to(x, (members, 4, d)))
    xs = np.asarray(
        common_noise_paths(
            CommonNoise(Attention(beta, d)), x0, jnp.arange(members), dt=0.005, steps=600, scheme="euler-maruyama"
        )
    )
    gap = np.log(0.5 * np.sum((xs[:, :, 0] - xs[:, :, 1]) ** 2, axis=-1))
    slopes = (gap[:, -1] - gap[:, 0]) / t
    assert abs(slopes.mean() - split_exponent(beta, d)) <= 3 * slopes.std() / np.sqrt(members) + 0.01


@pytest.mark.slow
def test_persistence_probability_against_pairs_of_the_sde():
    # pairs (the balanced two clusters are the pair diffusion) from 1 + R₀ = 1 − cos 0.01: the fraction with
    # 1 + R < 0.01 at t against Φ((log ε − log(1 + R₀) − λt)/√(vt)), where the antipodal state repels (λ = 0.272)
    d, beta, members, level = 8, 0.75, 2000, 0.01
    ts = np.linspace(0, 20, 6)
    x0 = jnp.asarray(balanced_start(2, d, members, 0, 0.01, 0.0))
    xs = np.asarray(
        common_noise_paths(
            CommonNoise(Attention(beta, d)),
            x0,
            jnp.arange(members),
            dt=0.02,
            steps=1000,
            save_every=200,
            scheme="euler-maruyama",
        )
    )
    kept = (1 + np.einsum("bsd,bsd->bs", xs[:, :, 0], xs[:, :, 1]) < level).mean(axis=0)
    pred = antipodal_persistence(ts, 1 - np.cos(0.01), level, beta, d)
    assert antipodal_exponent(beta, d) > 0.25 and pred[-1] < 0.5
    np.testing.assert_array_less(np.abs(kept - pred), 4 * np.sqrt(pred * (1 - pred) / members) + 0.03)
