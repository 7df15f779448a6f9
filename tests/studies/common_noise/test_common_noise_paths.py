"""Paths of the random-depth model and its SDE (solvers/common_noise_paths.py): noise keyed by (seed, step),
whatever the chunking; weak convergence of the layers to the SDE and of the schemes, E⟨x₁, x₂⟩(1) against the
two-point diffusion's backward Kolmogorov equation (order 1 stated, measured)."""

import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.experiments.studies.common_noise.common_noise_theory import pair_expectation
from attnflow.particles.errors import InputError
from attnflow.particles.random_depth import Attention, CommonNoise, RandomDepth
from attnflow.solvers.common_noise_paths import WEAK_ORDER, common_noise_paths


def pairs(members, d=3):
    e = np.eye(d)
    return jnp.asarray(np.broadcast_to(np.stack([e[0], e[1]]), (members, 2, d)))


@pytest.mark.parametrize("scheme", ["depth", "heun"])
def test_paths_do_not_depend_on_the_chunking_and_equal_seeds_share_the_noise(scheme):
    att = Attention(jnp.array([1.0, 1.0, 2.0]), 3, heads=2)
    system = RandomDepth(att, per_head=True) if scheme == "depth" else CommonNoise(att, per_head=True)
    x0, seeds = pairs(3), jnp.array([7, 7, 7])
    whole = common_noise_paths(system, x0, seeds, dt=0.05, steps=12, save_every=4, scheme=scheme)
    pieces = common_noise_paths(system, x0, seeds, dt=0.05, steps=12, save_every=4, scheme=scheme, chunk=3)
    np.testing.assert_array_equal(whole, pieces)
    np.testing.assert_array_equal(whole[0], whole[1])  # same seed, same β: the same path
    assert float(jnp.abs(whole[0, -1] - whole[2, -1]).max()) > 1e-3  # same noise, another β
    np.testing.assert_allclose(jnp.linalg.norm(whole, axis=-1), 1.0, atol=1e-13)


def test_refusals():
    att = Attention(1.0, 3)
    with pytest.raises(InputError, match="scheme must be one of depth, euler-maruyama, heun"):
        common_noise_paths(CommonNoise(att), pairs(1), [0], dt=0.1, steps=1, scheme="milstein")
    with pytest.raises(InputError, match="scheme 'heun' does not step a RandomDepth, whose schemes are depth"):
        common_noise_paths(RandomDepth(att), pairs(1), [0], dt=0.1, steps=1, scheme="heun")
    with pytest.raises(InputError, match="multiple of save_every"):
        common_noise_paths(RandomDepth(att), pairs(1), [0], dt=0.1, steps=5, save_every=2)


def weak_errors(system, scheme, steps, members, exact):
    out = []
    for L in steps:
        xs = common_noise_paths(system, pairs(members), np.arange(members) + 1000 * L, dt=1 / L, steps=L, scheme=scheme)
        r = np.asarray(jnp.sum(xs[:, -1, 0] * xs[:, -1, 1], axis=-1))
        out.append((r.mean() - exact, r.std() / np.sqrt(members)))
    return np.array(out)


@pytest.mark.slow
def test_weak_convergence_to_the_sde():
    # d = 3, β = 1, σ = 2, R(0) = 0: E R(1) = 0.29365 (the Kolmogorov equation, converged to 1e-6)
    d, beta, sigma, members = 3, 1.0, 2.0, 16_000
    exact = pair_expectation(lambda r: r, 0.0, 1.0, beta, d, sigma)
    att = Attention(beta, d)
    depth = weak_errors(RandomDepth(att, sigma=sigma), "depth", [4, 8, 16, 32], members, exact)
    # the layers tend to the SDE at order 1 in 1/L: fit log|e| against log(1/L)
    order = -np.polyfit(np.log([4, 8, 16, 32]), np.log(depth[:, 0]), 1, w=depth[:, 0] / depth[:, 1])[0]
    assert abs(order - WEAK_ORDER["depth"]) < 0.35, (order, depth)
    assert np.all(depth[:, 0] > 0)
    heun = weak_errors(CommonNoise(att, sigma=sigma), "heun", [4, 8, 16], members, exact)
    assert abs(heun[2, 0]) <= 3 * heun[2, 1]
    assert abs(heun[0, 0]) > 2 * abs(heun[1, 0])  # at least order 1 from dt = 1/4 to 1/8
    em = weak_errors(CommonNoise(att, sigma=sigma), "euler-maruyama", [4, 16], members, exact)
    assert np.all(np.abs(em[:, 0]) <= 3 * em[:, 1] + 0.01)  # its weak error is below 0.01 already at dt = 1/4
