"""Lost in the middle (arXiv 2605.09213): the position-normalized causal dynamics, the closed-form soft-accuracy
profile, t_crit, and the particles' linear response against them."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.studies.lost_in_middle import lost_in_middle_theory as lim
from attnflow.experiments.studies.lost_in_middle.lost_in_middle import decay_field


def paper_velocity(theta, beta, lam):
    """θ̇_j = −β Σ_{k<j} w_jk sin(θ_j − θ_k) e^{β cos(θ_j − θ_k)}, w normalized over the positions k < j."""
    n = theta.size
    out = np.zeros(n)
    for j in range(1, n):
        k = np.arange(j)
        w = np.exp(-(lam / n) * (j - k))
        diff = theta[j] - theta[:j]
        out[j] = (w / w.sum()) @ (-beta * np.sin(diff) * np.exp(beta * np.cos(diff)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("beta, lam", [(1.0, 1.0), (2.5, 0.0), (0.7, 6.0)])
def test_decay_field_is_the_papers_dynamics(beta, lam):
    theta = np.random.default_rng(3).uniform(0, 2 * np.pi, 23)
    x = np.stack([np.cos(theta), np.sin(theta)], 1)
    v = np.asarray(decay_field(beta, theta.size, lam)(0.0, jnp.asarray(x)))
    speed = paper_velocity(theta, beta, lam)
    np.testing.assert_allclose(v, np.stack([-np.sin(theta), np.cos(theta)], 1) * speed[:, None], atol=1e-13)
    assert np.all(v[0] == 0.0)  # the first token has no earlier token


@pytest.mark.slow
def test_position_weights_sum_to_one_and_the_first_row_is_empty():
    field = af.USA(1.0, mask="causal", positional="decay", alibi_slope=0.3)
    w = np.exp(np.asarray(field.position_bias(9, jnp.float64)))
    np.testing.assert_allclose(w[1:].sum(1), 1.0, rtol=1e-14)
    assert np.all(w[0] == 0) and np.all(np.triu(w) == 0)
    np.testing.assert_allclose(w, lim.decay_weights(9, 0.3 * 9), rtol=1e-14)
    # slope 0: the mean over the earlier tokens, with a finite derivative in the slope there
    flat = np.exp(
        np.asarray(af.USA(1.0, mask="causal", positional="decay", alibi_slope=0.0).position_bias(5, jnp.float64))
    )
    np.testing.assert_allclose(flat[4, :4], 0.25, rtol=1e-15)
    grad = jax.grad(
        lambda m: jnp.exp(af.USA(1.0, mask="causal", positional="decay", alibi_slope=m).position_bias(5, jnp.float64))[
            4, 0
        ]
    )(0.0)
    assert np.isfinite(grad) and grad < 0  # a larger slope weighs the farthest token less
    # the attention matrix of such a field: rows over their sums, the first row zero
    x = np.random.default_rng(0).normal(size=(6, 3))
    A = np.asarray(field.attention_matrix(0.0, jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True))))
    assert np.all(A[0] == 0) and np.allclose(A[1:].sum(1), 1.0)


def test_configuration_takes_decay_for_usa_only():
    c = load_config(None, ["model=usa", "positional=decay", "mask=causal", "alibi_slope=0.02"])
    assert (c.positional, c.alibi_slope) == ("decay", 0.02)
    with pytest.raises(ConfigError, match="model usa or usa-rescaled"):
        load_config(None, ["model=sa", "positional=decay", "mask=causal"])


def test_psi_is_the_series_and_a_bessel_function():
    for c, y in ((0.7, 2.3), (3.0, 0.01), (0.05, 40.0), (2.0, 0.0)):
        series = sum(c ** (k + 1) * y**k / (math.factorial(k) * math.factorial(k + 1)) for k in range(80))
        np.testing.assert_allclose(lim.psi(c, y), series, rtol=1e-13)


@pytest.mark.parametrize("beta, paper", [(1.0, 2.457489), (2.0, 0.600716), (3.0, 0.174018)])
def test_critical_time_is_the_papers_and_where_the_end_slope_changes_sign(beta, paper):
    t_crit = lim.critical_time(beta, 1.0, 8.0)
    assert abs(t_crit - paper) <= 5e-7
    h = 1e-6

    def end_slope(t):
        return (lim.profile(1.0, t, beta) - lim.profile(1.0 - h, t, beta)) / h

    assert end_slope(0.98 * t_crit) > 0 > end_slope(1.02 * t_crit)


def test_mode_rates_are_n_squared_bessel():
    from scipy.special import iv

    n = np.arange(1, 21)
    np.testing.assert_allclose(lim.mode_rates(1.7), n**2 * iv(n, 1.7), rtol=1e-12)


def test_minimum_moves_to_the_end_and_stays_there_past_t_crit():
    s = np.linspace(0.02, 0.98, 2000)
    t_crit = lim.critical_time(1.0)
    minima = [s[np.argmin(lim.profile(s, f * t_crit, 1.0))] for f in (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)]
    assert np.all(np.diff(minima) > 0) and minima[-1] < 0.98 and minima[0] < 0.1
    for f in (1.05, 1.5, 3.0):
        assert s[np.argmin(lim.profile(s, f * t_crit, 1.0))] == s[-1]


@pytest.mark.slow
def test_first_order_in_time_and_the_finite_n_response_converging_to_the_closed_form():
    s = np.linspace(0.1, 1.0, 10)
    t = 1e-4
    first_order = t * lim.position_weight(s, 1.0) * np.sum(lim.mode_weights(8.0) * lim.mode_rates(1.0))
    np.testing.assert_allclose(lim.profile(s, t, 1.0), first_order, rtol=1e-3)
    errors = []
    for n in (128, 512):
        j = np.arange(1, n)
        far = j / n > 0.1
        errors.append(np.max(np.abs(lim.discrete_profile(n, 1.0, 1.0) - lim.profile(j / n, 1.0, 1.0))[far]))
    assert errors[0] < 0.02 and 3.0 < errors[0] / errors[1] < 5.0  # O(1/n)


@pytest.mark.slow
def test_particles_follow_the_linear_response_within_monte_carlo_error():
    n, runs, t = 32, 4096, 0.5
    theta0 = np.random.default_rng(5).uniform(0, 2 * np.pi, (runs, n))
    x0 = np.stack([np.cos(theta0), np.sin(theta0)], -1)
    sol = af.simulate(decay_field(1.0, n, 1.0), x0, t, solver="rk4", dt=0.05)
    xs = np.asarray(sol.xs)
    mean, error = lim.soft_accuracy(np.arctan2(xs[:, -1, :, 1], xs[:, -1, :, 0]), theta0)
    expected = lim.discrete_profile(n, t, 1.0, 1.0)
    z = (mean - expected) / error
    assert np.max(np.abs(z)) < 4.5 and np.sqrt(np.mean(z**2)) < 1.6
    # the control variate: without it, the error would be several times larger
    w, k = lim.mode_weights(8.0), np.arange(1, 21)
    raw = n * np.sum(
        w * np.cos(k * (np.arctan2(xs[:, -1, -1:, 1], xs[:, -1, -1:, 0])[..., None] - theta0[:, :-1, None])), -1
    )
    assert np.median(raw.std(0) / np.sqrt(runs)) > 3 * np.median(error)


def test_reference_start_is_four_groups_of_consecutive_tokens():
    theta, groups = lim.cluster_start(64, 17)
    assert np.all(np.diff(groups) >= 0) and np.bincount(groups).tolist() == [16] * 4
    centres = np.linspace(0.1, 1.9, 4) * np.pi
    offset = np.angle(np.exp(1j * (theta - centres[groups])))
    assert np.max(np.abs(offset)) < 5 * 0.075 and abs(np.std(offset) - 0.075) < 0.02


def test_reference_run_at_the_experiments_step_is_the_papers_step():
    """RK4 at dt = 0.025 (the experiment) and at the paper's 0.0025 agree to 1e-8 over t ∈ [0, 10]."""
    theta, _ = lim.cluster_start(64, 17)
    x0 = np.stack([np.cos(theta), np.sin(theta)], 1)
    ends = [
        np.asarray(af.simulate(decay_field(1.0, 64, 1.0), x0, 10.0, solver="rk4", dt=dt).xs[-1])
        for dt in (0.025, 0.0025)
    ]
    assert np.max(np.abs(ends[0] - ends[1])) < 1e-8
