"""Attention forced by a common Brownian motion (particles/random_depth.CommonBrownian, docs/model.md §17.3):
the pair's diffusion against the backward Kolmogorov equation, the noise's contraction rate γ²(d − 3), and
Dynkin's formula for the interaction energy of n tokens (the Itô generator against the simulated mean)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.experiments.studies.common_noise.common_noise_theory import (
    brownian_pair_drift,
    brownian_pair_variance,
    energy_generator,
    kolmogorov_expectation,
    kolmogorov_path,
    noise_contraction_rate,
)
from attnflow.particles.random_depth import Attention, CommonBrownian
from attnflow.particles.sphere import normalize
from attnflow.solvers.common_noise_paths import common_noise_paths


def pairs(members, d):
    e = np.eye(d)
    return jnp.asarray(np.broadcast_to(np.stack([e[0], e[1]]), (members, 2, d)))  # R(0) = 0


def test_one_token_is_brownian_motion_and_the_pair_drift_is_the_generators():
    d, beta, gamma = 5, 1.5, 0.8
    system = CommonBrownian(Attention(beta, d), gamma)
    x = normalize(jax.random.normal(jax.random.PRNGKey(0), (2, d)))
    r = float(x[0] @ x[1])
    # the Itô drift of R: ⟨b₁, x₂⟩ + ⟨x₁, b₂⟩ + the covariation γ² tr(P₁P₂), against μ(R) in closed form
    b = system.ito_drift(x)
    p = [jnp.eye(d) - jnp.outer(x[i], x[i]) for i in (0, 1)]
    mu = float(b[0] @ x[1] + x[0] @ b[1] + gamma**2 * jnp.trace(p[0] @ p[1]))
    assert mu == pytest.approx(float(brownian_pair_drift(r, beta, d, gamma)), rel=1e-12)
    # the martingale part: dR = ⟨F₁ dw, x₂⟩ + ⟨x₁, F₂ dw⟩ = γ(1 − R)⟨x₁ + x₂, dw⟩ for every dw
    dws = jax.random.normal(jax.random.PRNGKey(1), (4, 1, 1, d))
    for dw in dws:
        f = system.diffusion(x, dw)
        lhs = float(f[0] @ x[1] + x[0] @ f[1])
        assert lhs == pytest.approx(float(gamma * (1 - r) * (x[0] + x[1]) @ dw[0, 0]), rel=1e-10, abs=1e-14)
    var = float(gamma**2 * (1 - r) ** 2 * jnp.sum((x[0] + x[1]) ** 2))
    assert var == pytest.approx(float(brownian_pair_variance(r, gamma)), rel=1e-12)


def test_the_noise_alone_contracts_pairs_at_rate_gamma_squared_d_minus_three():
    # β = 0 with n = 2 still attracts (a = 1/2), so the noise's bound holds with attention on; and the rate is
    # attained as R → 1 without attention: E(1 − R_t) ≤ (1 − R_0) e^{−γ²(d − 3)t}
    for d, gamma in ((4, 1.0), (6, 0.7)):
        rate = float(noise_contraction_rate(d, gamma))
        assert rate == pytest.approx(gamma**2 * (d - 3))
        for beta in (0.0, 3.0):
            path = kolmogorov_path(  # at t = 0, 0.5, …, 2
                lambda r: 1 - r,
                0.0,
                0.5,
                4,
                lambda r, b=beta, d=d, g=gamma: brownian_pair_drift(r, b, d, g),
                lambda r, g=gamma: brownian_pair_variance(r, g),
                points=401,
            )
            bound = np.exp(-rate * 0.5 * np.arange(5))
            assert np.all(path[1:] > 0) and np.all(path <= bound + 1e-4), (d, gamma, beta, path, bound)


@pytest.mark.slow
def test_pairs_under_attention_and_common_noise_follow_the_kolmogorov_equation():
    d, beta, gamma, members, t, dt = 5, 1.0, 1.0, 8000, 1.0, 0.01
    exact = kolmogorov_expectation(
        lambda r: 1 - r,
        0.0,
        t,
        lambda r: brownian_pair_drift(r, beta, d, gamma),
        lambda r: brownian_pair_variance(r, gamma),
    )
    for scheme in ("euler-maruyama", "heun"):
        xs = common_noise_paths(
            CommonBrownian(Attention(beta, d), gamma),
            pairs(members, d),
            np.arange(members),
            dt=dt,
            steps=int(round(t / dt)),
            scheme=scheme,
        )
        gap = 1 - np.asarray(jnp.sum(xs[:, -1, 0] * xs[:, -1, 1], axis=-1))
        se = gap.std() / np.sqrt(members)
        assert abs(gap.mean() - exact) <= 3 * se + 0.01, (scheme, gap.mean(), exact, se)  # weak error O(dt)


@pytest.mark.slow
def test_dynkin_formula_for_the_interaction_energy_of_n_tokens():
    # n = 8 tokens, d = 6, β = 2, γ = 0.7: E E(T) − E E(0) = ∫ E (L E)(x_t) dt, the generator in closed form
    n, d, beta, gamma, members, dt, steps, every = 8, 6, 2.0, 0.7, 2000, 0.005, 200, 10
    system = CommonBrownian(Attention(beta, d), gamma)
    x0 = normalize(jax.random.normal(jax.random.PRNGKey(3), (members, n, d)))
    xs = common_noise_paths(system, x0, np.arange(members), dt=dt, steps=steps, save_every=every, scheme="heun")
    xs = np.asarray(xs)
    energy = 1 - np.sum(xs.mean(axis=2) ** 2, axis=-1)  # (B, S)
    drift = jax.vmap(jax.vmap(system.stratonovich_drift))(jnp.asarray(xs))
    generator = energy_generator(xs.reshape(-1, n, d), np.asarray(drift).reshape(-1, n, d), gamma).reshape(members, -1)
    h = dt * every
    integral = h * (generator[:, 1:] + generator[:, :-1]).sum(axis=1) / 2  # per member, trapezoid
    change = energy[:, -1] - energy[:, 0]
    diff = change - integral  # a martingale increment per member, plus the quadrature's O(h²)
    assert abs(diff.mean()) <= 3 * diff.std() / np.sqrt(members) + 2e-3, (diff.mean(), diff.std())
    assert change.mean() < 0  # the energy decays on average
