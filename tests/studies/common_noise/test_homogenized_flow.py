"""The homogenized flow (arXiv 2604.01978) under the common-noise SDE (common_noise_theory.py): the Gram
diffusion's coefficients against the two-point ones and against the SDE's own; the scalar ODE γ̇ = b(γ); the
O(1/d) bias δ/d and the variance C/d of the linear noise approximation against ensembles at d = 8, 16, 32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

from attnflow.experiments.studies.common_noise.common_noise_theory import (
    equiangular_weights,
    gram_coefficients,
    homogenized_bias,
    homogenized_drift,
    pair_drift,
    pair_variance,
)
from attnflow.particles.random_depth import Attention, CommonNoise
from attnflow.solvers.common_noise_paths import common_noise_paths


def equiangular(n, d, gamma0):
    e = np.eye(d)
    return np.sqrt(gamma0) * e[0] + np.sqrt(1 - gamma0) * e[1 : n + 1]


def test_two_tokens_give_the_pair_diffusion():
    for r in (-0.6, 0.1, 0.8):
        m0, m1, s0 = gram_coefficients([r], 1.3, 2, sigma=1.5)
        for d in (3, 7):
            np.testing.assert_allclose(m0[0] + m1[0] / d, pair_drift(r, 1.3, d, 1.5), rtol=1e-13)
            np.testing.assert_allclose(s0[0, 0] / d, pair_variance(r, 1.3, d, 1.5), rtol=1e-13)


def test_gram_coefficients_are_the_sdes():
    # n = 3 tokens at a generic configuration, d = 6: the drift ⟨b_i, x_j⟩ + ⟨x_i, b_j⟩ + Σ_a ⟨F_a x_i, F_a x_j⟩
    # and the covariance Σ_a ΔG_ij ΔG_kl over the unit increments of W, from CommonNoise itself
    n, d, beta, sigma = 3, 6, 0.8, 1.2
    x = np.random.default_rng(3).normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    sde = CommonNoise(Attention(beta, d), sigma=sigma)
    basis = jnp.eye(d * d).reshape(d * d, 1, d, d)
    f = np.asarray(jax.vmap(lambda e: sde.diffusion(jnp.asarray(x), e))(basis))  # (a, n, d)
    b = np.asarray(sde.ito_drift(jnp.asarray(x)))
    i, j = np.triu_indices(n, 1)
    drift = np.sum(b[i] * x[j], -1) + np.sum(x[i] * b[j], -1) + np.sum(f[:, i] * f[:, j], axis=(0, 2))
    dg = np.sum(f[:, i] * x[j], -1) + np.sum(x[i] * f[:, j], -1)  # (a, pairs)
    m0, m1, s0 = gram_coefficients((x @ x.T)[i, j], beta, n, sigma)
    np.testing.assert_allclose(m0 + m1 / d, drift, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s0 / d, dg.T @ dg, rtol=1e-12, atol=1e-14)


def test_equiangular_data_follow_the_scalar_ode():
    n, beta = 5, 1.5
    f, g = equiangular_weights(0.4, beta, n)
    # π_ii = 1/(1 + 4e^{−0.9}), π_ij = (1 − π_ii)/4; f + (n − 1)·… : the rows of π sum to 1
    a = 1 / (1 + 4 * np.exp(-0.9))
    np.testing.assert_allclose([f, g], [a**2 + 4 * ((1 - a) / 4) ** 2, 2 * a * (1 - a) / 4 + 3 * ((1 - a) / 4) ** 2])
    # the Gram drift's d⁰ part on equiangular data is b(γ) for every pair
    m0, _, _ = gram_coefficients(np.full(10, 0.4), beta, n)
    np.testing.assert_allclose(m0, homogenized_drift(0.4, beta, n), rtol=1e-13)
    ts = [0.5, 1.0, 2.0]
    gam, _, _ = homogenized_bias(0.3, beta, n, ts)
    ode = solve_ivp(lambda t, y: homogenized_drift(y, beta, n), (0, 2), [0.3], t_eval=ts, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(gam, ode.y[0], atol=1e-8)


@pytest.mark.slow
def test_bias_and_variance_against_ensembles_at_finite_d():
    # n = 4, β = 1, γ₀ = 0.3, t = 1: γ = 0.6079, δ = −0.8195, C = 0.3765; measured d·bias −0.756, −0.802, −0.769
    # (s.e. 0.04–0.07) and d·Var 0.466, 0.438, 0.406 at d = 8, 16, 32: the variance's O(1/d) correction shrinks
    n, beta, g0, members = 4, 1.0, 0.3, 2000
    gam, delta, var = homogenized_bias(g0, beta, n, [1.0])
    np.testing.assert_allclose([gam[0], delta[0], var[0]], [0.60793, -0.81950, 0.37648], atol=1e-4)
    i, j = np.triu_indices(n, 1)
    ratios = []
    for d in (8, 16, 32):
        x0 = jnp.asarray(np.broadcast_to(equiangular(n, d, g0), (members, n, d)))
        xs = common_noise_paths(
            CommonNoise(Attention(beta, d)), x0, np.arange(members), dt=0.01, steps=100, scheme="euler-maruyama"
        )
        v = np.asarray(jnp.einsum("bid,bjd->bij", xs[:, -1], xs[:, -1]))[:, i, j]
        mean = v.mean(axis=1)
        assert abs(d * (mean.mean() - gam[0]) - delta[0]) < 4 * d * mean.std() / np.sqrt(members) + 0.1
        ratios.append(d * v[:, 0].var() / var[0])
    assert 1.0 < ratios[2] < ratios[0] < 1.4


# -- random attention weights, Q and K drawn per layer ----------------------------------------------------------


def test_fixed_attention_reproduces_the_closed_form():
    from attnflow.experiments.studies.common_noise.common_noise_theory import equiangular_drift_samples

    for beta, n in ((0.7, 3), (2.5, 6)):
        for g in (0.0, 0.35, 0.9):
            np.testing.assert_allclose(
                equiangular_drift_samples(g, beta, n, None)[0], homogenized_drift(g, beta, n), rtol=1e-13
            )


def test_monte_carlo_weights_at_small_beta_and_at_zero():
    from attnflow.experiments.studies.common_noise.common_noise_theory import (
        equiangular_rows,
        logit_matrices,
        random_attention_drift,
        small_beta_weights,
    )

    n, beta, gammas = 4, 0.15, np.array([0.1, 0.4, 0.8])
    for d in (None, 6):
        m = logit_matrices(n, 100_000, d=d, seed=1)
        for gamma in gammas:
            x = equiangular_rows(gamma, n)
            z = beta * np.einsum("ia,sab,kb->sik", x, m, x)
            p = np.exp(z - z.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            f = (p**2).sum(axis=-1).mean(axis=-1)  # per draw: the row mean of Σ_k π_ik²
            g = (p[:, 0] * p[:, 1]).sum(axis=-1)  # one pair's Σ_k π_ik π_jk
            f_th, g_th = small_beta_weights(gamma, beta, n)
            for sim, th in ((f, f_th), (g, g_th)):
                se = sim.std() / np.sqrt(sim.size)
                assert abs(sim.mean() - th) <= 4 * se + 1e-5, (d, gamma, sim.mean(), th)
            assert f.mean() - 1 / n > 20 * f.std() / np.sqrt(f.size)  # the β² term is resolved
        # in b the β² terms of f and g cancel: b = b(β = 0) + O(β⁴)
        b, se = random_attention_drift(gammas, beta, n, 100_000, d=d, seed=1)
        np.testing.assert_array_less(np.abs(b - homogenized_drift(gammas, 0.0, n)), 4 * se + 1e-5)
    b0, _ = random_attention_drift(gammas, 0.0, n, 10)
    np.testing.assert_allclose(b0, homogenized_drift(gammas, 0.0, n), rtol=1e-13)


def test_random_layers_draw_logits_with_covariance_beta_squared_g_g():
    # the model's own draws: the logits β⟨Q x_i, K x_k⟩ of a layer have covariance β² G_ij G_kl at any d
    from attnflow.particles.random_depth import RandomDepth
    from attnflow.solvers.common_noise_paths import gaussian, noise_key

    n, d, beta, draws = 3, 6, 1.7, 6000
    x = np.random.default_rng(2).normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    model = RandomDepth(Attention(beta, d), random_attention=True)
    shape = model.noise_shape(d)
    assert shape == (3, d, d)
    key = noise_key(5)

    def logits(s):
        a = model.layer_attention(gaussian(key, s, shape, jnp.float64))
        return beta * (a.Q[0] @ x.T).T @ (a.K[0] @ x.T)

    z = np.asarray(jax.vmap(logits)(jnp.arange(draws))).reshape(draws, -1)
    g = x @ x.T
    expected = beta**2 * np.einsum("ij,kl->ikjl", g, g).reshape(n * n, n * n)
    cov = z.T @ z / draws
    se = np.sqrt((cov**2 + np.outer(np.diag(cov), np.diag(cov))) / draws)
    np.testing.assert_array_less(np.abs(cov - expected), 5 * se + 1e-12)


def test_random_attention_paths_do_not_depend_on_the_chunking_and_have_no_sde_limit():
    from attnflow.particles.errors import InputError
    from attnflow.particles.random_depth import RandomDepth

    d, n = 5, 4
    model = RandomDepth(Attention(jnp.asarray([1.0, 2.0]), d, heads=2), random_attention=True, per_head=True)
    assert model.noise_shape(d) == (6, d, d)
    x0 = jnp.asarray(np.broadcast_to(equiangular(n, d, 0.3), (2, n, d)))
    a = common_noise_paths(model, x0, jnp.arange(2), dt=0.05, steps=40)
    b = common_noise_paths(model, x0, jnp.arange(2), dt=0.05, steps=40, chunk=7)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    fixed = common_noise_paths(
        RandomDepth(Attention(jnp.asarray([1.0, 2.0]), d, heads=2), per_head=True), x0, jnp.arange(2), dt=0.05, steps=40
    )
    assert np.abs(np.asarray(a) - np.asarray(fixed)).max() > 1e-3
    with pytest.raises(InputError, match="no CommonNoise limit"):
        CommonNoise.limit_of(model)
