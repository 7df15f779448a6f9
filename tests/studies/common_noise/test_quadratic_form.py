"""The random quadratic form (particles/random_depth.QuadraticForm, arXiv 2603.06187, 2608.16664): the two-point
diffusion of R = ⟨x₁, x₂⟩ derived in docs/model.md §17 against the SDE's own coefficients; one point's
E⟨x₀, x_t⟩ = e^{−(1 + γ²)(d − 1)t/2}; at γ = 0 the exponents −4 at both states and the aligned probability
½ + arcsin(R₀)/π; for γ > 0 the aligned exponent −4 − γ²(d − 1), full synchronization, and the time near the
antipodal state against the diffusion's occupation time."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.experiments.studies.common_noise.common_noise_theory import (
    aligned_probability,
    antipodal_occupation,
    quadratic_exponents,
    quadratic_pair_drift,
    quadratic_pair_variance,
    quadratic_rate,
)
from attnflow.experiments.studies.common_noise.quadratic_form import plateau_fit
from attnflow.particles.random_depth import QuadraticForm
from attnflow.solvers.common_noise_paths import common_noise_paths


def pair(r0, d):
    e = np.eye(d)
    return np.stack([e[0], r0 * e[0] + np.sqrt(1 - r0**2) * e[1]])


def generator_of_r(system, x):
    """dR's Itô drift and quadratic variation rate from the system's own drift and noise: ⟨b₁, x₂⟩ + ⟨x₁, b₂⟩ +
    Σ_a ⟨F_a x₁, F_a x₂⟩ and Σ_a (⟨F_a x₁, x₂⟩ + ⟨x₁, F_a x₂⟩)², a over the unit increments of B and w."""
    shape = system.noise_shape(x.shape[1])
    size = int(np.prod(shape))
    basis = jnp.eye(size).reshape((size, *shape))
    f = jax.vmap(lambda e: system.diffusion(x, e))(basis)  # (a, 2, d)
    b = system.ito_drift(x)
    drift = b[0] @ x[1] + x[0] @ b[1] + jnp.sum(f[:, 0] * f[:, 1])
    variance = jnp.sum((f[:, 0] @ x[1] + f[:, 1] @ x[0]) ** 2)
    return float(drift), float(variance)


@pytest.mark.parametrize("d", [3, 5])
@pytest.mark.parametrize("gamma", [0.0, 0.7])
def test_two_point_diffusion_is_the_sdes(d, gamma):
    system = QuadraticForm(gamma)
    rng = np.random.default_rng(d)
    for r in (-0.95, -0.3, 0.2, 0.9):
        q, _ = np.linalg.qr(rng.normal(size=(d, d)))  # a random rotation of the pair: the law is O(d)-invariant
        x = jnp.asarray(pair(r, d) @ q.T)
        drift, variance = generator_of_r(system, x)
        np.testing.assert_allclose(drift, quadratic_pair_drift(r, d, gamma), rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(variance, quadratic_pair_variance(r, d, gamma), rtol=1e-12, atol=1e-13)
    # one token alone: its Itô drift is radial, −(1 + γ²)(d − 1)/2 x, and its noise covariance (1 + γ²)P_x
    x = jnp.asarray(pair(0.0, d)[:1])
    np.testing.assert_allclose(system.ito_drift(x), -quadratic_rate(d, gamma) * x, rtol=1e-14)
    np.testing.assert_array_equal(system.stratonovich_drift(x), 0.0)


def test_closed_forms():
    # γ = 0: R = ±1 rest points with exponent −4 (the drift's slope less ½Σ''/2 there); θ = arcsin R a martingale
    for r in (-1.0, 1.0):
        assert quadratic_pair_drift(r, 6) == 0 and quadratic_pair_variance(r, 6) == 0
    h = 1e-5
    for s in (-1.0, 1.0):  # exponent of log(1 ∓ R): μ'(±1) − Σ''(±1)/4 in the variable 1 ∓ R
        mu1 = (quadratic_pair_drift(s - s * h, 6) - 0.0) / (-s * h)
        var2 = 2 * quadratic_pair_variance(s - s * h, 6) / h**2
        np.testing.assert_allclose(mu1 - var2 / 4, -4.0, atol=1e-3)
    assert quadratic_exponents(6) == (-4.0, -4.0)
    assert quadratic_exponents(6, 0.5)[0] == -4.0 - 0.25 * 5
    np.testing.assert_allclose(aligned_probability([-0.5, 0.0, 0.5]), [1 / 3, 0.5, 2 / 3], rtol=1e-14)
    # γ > 0: R = −1 is pushed off (drift 2γ²(d − 1)); R = 1 stays a rest point
    assert quadratic_pair_drift(-1.0, 6, 0.3) == pytest.approx(2 * 0.09 * 5)
    assert quadratic_pair_drift(1.0, 6, 0.3) == 0 and quadratic_pair_variance(1.0, 6, 0.3) == 0


def test_antipodal_occupation_grows_like_one_over_gamma():
    # the escape from the antipodal state climbs log(1/γ²) against log-drift −4 with log-variance 16: an
    # Arrhenius time ∝ e^{(2·4/16) log(1/γ²)} = 1/γ; the local slope of log T against log(1/γ) tends to 1
    t = [antipodal_occupation(-0.5, -0.9, 4, g) for g in (1e-3, 5e-4)]
    assert np.log(t[1] / t[0]) / np.log(2.0) == pytest.approx(1.0, abs=0.02)
    # converged in the grid: twice the span and points change it by < 1e-4 relatively
    fine = antipodal_occupation(-0.5, -0.9, 4, 0.1, span=40.0, points=800_001)
    assert antipodal_occupation(-0.5, -0.9, 4, 0.1) == pytest.approx(fine, rel=1e-4)
    with pytest.raises(ValueError, match="gamma > 0"):
        antipodal_occupation(-0.5, -0.9, 4, 0.0)


def test_plateau_fit_recovers_a_line_and_a_power():
    g = np.array([0.4, 0.2, 0.1, 0.05])
    fit = plateau_fit(g, 1.0 + 2.0 * np.log(1 / g), np.full(4, 0.1))
    assert fit["log"][0] == pytest.approx(2.0) and fit["log"][2] == pytest.approx(1.0)
    assert plateau_fit(g, 3.0 / g, 0.01 * 3.0 / g)["power"][0] == pytest.approx(1.0)


@pytest.mark.parametrize("scheme", ["euler-maruyama", "heun"])
def test_one_point_is_brownian_motion_on_the_sphere(scheme):
    d, members, dt = 4, 4000, 0.01
    gammas = np.repeat([0.0, 0.5], members)
    x0 = jnp.asarray(np.broadcast_to(np.eye(d)[:1], (gammas.size, 1, d)))
    xs = common_noise_paths(
        QuadraticForm(jnp.asarray(gammas)), x0, np.arange(gammas.size), dt=dt, steps=50, scheme=scheme
    )
    r = np.asarray(xs[:, -1, 0, 0]).reshape(2, members)
    want = np.exp(-quadratic_rate(d, np.array([0.0, 0.5])) * 0.5)  # 0.472, 0.392
    # Euler–Maruyama's bias is below 0.002 here; Heun's is larger (weak order 1, about 2.4 dt for this noise)
    bias = 0.003 if scheme == "euler-maruyama" else 0.035
    np.testing.assert_array_less(np.abs(r.mean(axis=1) - want), 4 * r.std(axis=1) / np.sqrt(members) + bias)
    np.testing.assert_allclose(jnp.linalg.norm(xs, axis=-1), 1.0, atol=1e-13)


@pytest.mark.slow
def test_pairs_synchronize_aligned_or_antipodal_at_gamma_zero():
    d, members = 5, 3000
    x0 = jnp.asarray(np.broadcast_to(pair(0.5, d), (members, 2, d)))
    xs = common_noise_paths(QuadraticForm(0.0), x0, np.arange(members), dt=0.02, steps=500, scheme="euler-maruyama")
    r = np.asarray(jnp.sum(xs[:, -1, 0] * xs[:, -1, 1], axis=-1))
    aligned, antipodal = (r > 0.99).mean(), (r < -0.99).mean()
    se = np.sqrt(2 / 9 / members)  # the binomial s.e. at p = 2/3
    assert abs(aligned - aligned_probability(0.5)) < 4 * se and aligned + antipodal > 0.99


@pytest.mark.slow
@pytest.mark.parametrize(("state", "gamma"), [("aligned", 0.0), ("antipodal", 0.0), ("aligned", 0.6)])
def test_exponents_against_simulation(state, gamma):
    d, members, t, dt, eps = 4, 600, 2.0, 0.005, 1e-5
    e = np.eye(d)
    x2 = e[0] * np.cos(eps) + e[1] * np.sin(eps)
    x0 = jnp.asarray(np.broadcast_to(np.stack([e[0], x2 if state == "aligned" else -x2]), (members, 2, d)))
    xs = common_noise_paths(
        QuadraticForm(gamma), x0, np.arange(members), dt=dt, steps=int(t / dt), scheme="euler-maruyama"
    )
    sign = -1.0 if state == "aligned" else 1.0
    gap = np.log(0.5 * np.sum(np.asarray(xs[:, :, 0] + sign * xs[:, :, 1]) ** 2, axis=-1))
    slope = (gap[:, -1] - gap[:, 0]) / t
    want = quadratic_exponents(d, gamma)[0 if state == "aligned" else 1]
    assert abs(slope.mean() - want) < 3 * slope.std() / np.sqrt(members) + 0.1, (slope.mean(), want)


@pytest.mark.slow
def test_full_synchronization_after_the_antipodal_stage():
    d, members, dt, every = 4, 1500, 0.01, 10
    x0 = jnp.asarray(np.broadcast_to(pair(-0.5, d), (members, 2, d)))
    xs = common_noise_paths(
        QuadraticForm(0.4), x0, np.arange(members), dt=dt, steps=2000, save_every=every, scheme="euler-maruyama"
    )
    r = np.asarray(jnp.sum(xs[:, :, 0] * xs[:, :, 1], axis=-1))
    occupation = (r[:, 1:] < -0.9).sum(axis=1) * dt * every
    want = antipodal_occupation(-0.5, -0.9, d, 0.4)  # 0.423
    assert abs(occupation.mean() - want) < 4 * occupation.std() / np.sqrt(members) + 0.05 * want
    assert (r[:, -1] > 0.99).mean() == 1.0
