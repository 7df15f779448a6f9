"""Noisy transformers (arXiv 2606.05140): β*^{(d)} and K_#^{(d)}(β) against scipy, the map K = 1/σ² against
the linear growth rate of the uniform density, the noisy mean field on the circle (the diffusion −(σ²/2)k²
of ``meanfield_circle(..., noise=σ)``), the uniform phase's susceptibility of particles in d = 3, and the
experiment's crossing analysis."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import gamma, iv

import attnflow as af
from attnflow.experiments.studies.noisy_transition.noisy_transition import crossing, susceptibility_fit, sweep_crossings
from attnflow.experiments.studies.noisy_transition.noisy_transition_theory import (
    bessel_ratio,
    coupling_to_noise,
    critical_beta,
    critical_noise,
    degree_one_rate,
    noise_to_coupling,
    threshold_coupling,
    uniform_susceptibility,
)
from attnflow.particles.modes import mode_growth_rates
from attnflow.solvers import circle_meanfield as mf

PAPER_BETA_STAR = {2: 2.4469, 3: 1.8162, 4: 1.5753, 8: 1.2666}


@pytest.mark.parametrize("d", [2, 3, 4, 5, 8, 16])
def test_critical_beta_solves_the_bessel_ratio_equation(d):
    reference = brentq(lambda b: iv(d / 2 + 1, b) / iv(d / 2, b) - 1.0 / d, 1e-3, 50.0, xtol=1e-14, rtol=1e-15)
    assert critical_beta(d) == pytest.approx(reference, rel=1e-6, abs=0)
    if d in PAPER_BETA_STAR:
        assert round(critical_beta(d), 4) == PAPER_BETA_STAR[d]


@pytest.mark.parametrize("d", [2, 3, 4, 7, 8])
def test_threshold_coupling_is_the_papers_formula(d):
    beta = np.array([1e-2, 0.5, 1.0, critical_beta(d), 4.0, 8.0, 30.0, 300.0])
    reference = beta ** (d / 2) / (2 ** (d / 2) * gamma(d / 2) * iv(d / 2, beta))
    np.testing.assert_allclose(threshold_coupling(beta, d), reference, rtol=1e-6)
    ratio = iv(d / 2 + 1, beta[:-1]) / iv(d / 2, beta[:-1])
    np.testing.assert_allclose(bessel_ratio(beta[:-1], d), ratio, rtol=1e-10)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_the_map_to_sigma_zeroes_the_degree_one_growth_rate(d):
    """σ_# = 1/√K_#: the USA degree-1 rate of ``mode_growth_rates`` minus the diffusion's (σ²/2)(d − 1) vanishes
    there, is positive below (instability) and negative above."""
    beta = np.array([0.3, 1.0, critical_beta(d), 6.0, 12.0])
    sigma = coupling_to_noise(threshold_coupling(beta, d))
    np.testing.assert_allclose(sigma, critical_noise(beta, d), rtol=1e-13)
    np.testing.assert_allclose(noise_to_coupling(sigma), threshold_coupling(beta, d), rtol=1e-13)
    _, rates = mode_growth_rates(beta, d, model="usa", kmax=3)
    rates = np.asarray(rates)
    ell = np.arange(1, 4)
    noisy = rates - 0.5 * sigma[:, None] ** 2 * ell * (ell + d - 2)
    np.testing.assert_allclose(noisy[:, 0], 0.0, atol=1e-12 * rates[:, 0].max())
    assert np.all(noisy[:, 1:] < 0)  # degree 1 is the first to lose stability
    np.testing.assert_allclose(degree_one_rate(beta, d, sigma), 0.0, atol=1e-12 * rates[:, 0].max())
    assert np.all(degree_one_rate(beta, d, 0.9 * sigma) > 0) and np.all(degree_one_rate(beta, d, 1.1 * sigma) < 0)
    # β → 0: K_# → d/2, κ = 2/σ² → d (the noisy Kuramoto threshold κ = 2 on the circle, arXiv 2512.01868 §7)
    assert threshold_coupling(1e-8, d) == pytest.approx(d / 2, rel=1e-7)
    assert float(af.Noisy(af.USA(1e-8), float(critical_noise(1e-8, d))).kappa) == pytest.approx(d, rel=1e-7)


def test_other_clocks_and_sa_have_their_own_thresholds():
    beta, d = np.array([1.0, 4.0]), 3
    np.testing.assert_allclose(
        critical_noise(beta, d, "usa-rescaled") ** 2, np.exp(-beta) / threshold_coupling(beta, d), rtol=1e-12
    )
    sa = 2 * iv(d / 2, beta) / (beta * iv(d / 2 - 1, beta))
    np.testing.assert_allclose(critical_noise(beta, d, "sa") ** 2, sa, rtol=1e-10)
    assert np.isinf(uniform_susceptibility(critical_noise(1.0, d) * 0.99, 1.0, d))
    assert uniform_susceptibility(2 * critical_noise(1.0, d), 1.0, d) == pytest.approx(4 / 3)


def test_noise_arguments_are_checked():
    with pytest.raises(ValueError, match="beta"):
        threshold_coupling(0.0, 2)
    with pytest.raises(ValueError, match="coupling"):
        coupling_to_noise(-1.0)
    with pytest.raises(ValueError, match="noise"):
        mf.meanfield_circle(np.full(16, 1 / (2 * np.pi)), 1.0, 1.0, noise=-0.1)
    with pytest.raises(ValueError, match="broadcast"):
        mf.meanfield_circle(np.full((2, 16), 1 / (2 * np.pi)), 1.0, 1.0, noise=[0.1, 0.2, 0.3])


# -- the noisy mean field on the circle ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("model", ["usa", "sa"])
def test_noisy_meanfield_mode_rates_at_the_uniform_density(model):
    """A mode-k perturbation of the uniform density grows at growth_rates(k, β) − (σ²/2)k² (within 1 %): for USA
    mode 1 decays above σ_# and grows below it."""
    modes, eps = 16, 1e-8
    theta = mf.theta_grid(modes)
    beta = np.array([1.0, 1.0, 4.0, 4.0])
    sigma = critical_noise(beta, 2, model) * np.array([0.8, 1.25, 0.8, 1.25])
    rho0 = (1 + eps * (np.cos(theta) + np.cos(2 * theta + 0.3) + np.cos(3 * theta + 1.0))) / (2 * np.pi)
    expected = mf.growth_rates(np.arange(1, 4)[None], beta[:, None], model, sigma[:, None])
    ts = np.linspace(0.0, 1.0, 21)[None] / np.abs(expected).max(axis=1)[:, None]  # one e-folding of the fastest
    sol = mf.meanfield_circle(rho0, beta, float(ts.max()), ts=ts, model=model, noise=sigma, rtol=1e-11, atol=1e-18)
    np.testing.assert_allclose(sol.noise, sigma)
    logs = np.log(np.abs(sol.coefficients[:, :, 1:4]))  # (members, T, k)
    slopes = np.array([[np.polyfit(ts[m], logs[m, :, k], 1)[0] for k in range(3)] for m in range(4)])
    np.testing.assert_allclose(slopes, expected, rtol=1e-2)
    if model == "usa":
        assert np.all(slopes[[0, 2], 0] > 0) and np.all(slopes[[1, 3], 0] < 0)


@pytest.mark.slow
def test_noise_zero_is_the_deterministic_solver_and_mass_is_kept():
    modes = 32
    rho0 = mf.perturbed_uniform(3, modes, 1e-2, k_max=8)
    plain = mf.meanfield_circle(rho0, 2.0, 1.0, model="usa")
    zero = mf.meanfield_circle(rho0, 2.0, 1.0, model="usa", noise=0.0)
    np.testing.assert_array_equal(plain.rho, zero.rho)
    noisy = mf.meanfield_circle(rho0, 2.0, 1.0, model="usa", noise=3.0)
    np.testing.assert_allclose(noisy.mass, 1.0, atol=1e-13)
    # far above σ_# the density relaxes to uniform
    assert np.abs(2 * np.pi * noisy.rho[-1] - 1).max() < 0.5 * np.abs(2 * np.pi * rho0 - 1).max()


def test_noisy_meanfield_settles_on_the_ordered_state_below_threshold():
    """Below σ_# (β = 1 ≤ β*) the density leaves the uniform state for an ordered one, the stationary solution
    ρ ∝ exp(2Φ[ρ]/(βσ²)) of the noisy equation: check it by the self-consistency of the last density."""
    modes, beta = 32, 1.0
    sigma = 0.8 * float(critical_noise(beta, 2))
    theta = mf.theta_grid(modes)
    rho0 = (1 + 0.05 * np.cos(theta)) / (2 * np.pi)
    sol = mf.meanfield_circle(rho0, beta, 60.0, model="usa", noise=sigma, rtol=1e-10, atol=1e-13)
    rho = sol.rho[-1]
    N = rho.size
    phi = np.exp(beta * np.cos(theta[:, None] - theta[None, :])) @ rho * (2 * np.pi / N)
    gibbs = np.exp(2 * phi / (beta * sigma**2))
    gibbs /= gibbs.sum() * 2 * np.pi / N
    np.testing.assert_allclose(rho, gibbs, atol=1e-6)
    assert abs(sol.coefficients[-1, 1]) > 0.5


# -- particles --------------------------------------------------------------------------------------------


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_particles_in_the_uniform_phase_have_the_predicted_susceptibility():
    """d = 3, β = 1, σ = 1.5 σ_#: n⟨‖(1/n) Σ x_i‖²⟩ = 1/(1 − K/K_#) = 1.8 (within 10 %), 64 vmapped members."""
    d, beta, n, members = 3, 1.0, 64, 64
    sigma0 = float(critical_noise(beta, d))
    tau = 2.0 / ((d - 1) * sigma0**2)
    x0 = af.init.uniform(0, n, d, batch=members)
    ts = np.linspace(0.0, 40 * tau, 81)
    sol = af.simulate(
        af.Noisy(af.USA(beta), 1.5 * sigma0),
        x0,
        float(ts[-1]),
        ts=ts,
        solver="rk4",
        dt=0.05 * tau,
        save=lambda t, x: jnp.sum(jnp.mean(x, axis=0) ** 2),
        key=7,
    )
    chi = n * float(np.asarray(sol.stats)[:, ts >= 10 * tau].mean())
    assert chi == pytest.approx(float(uniform_susceptibility(1.5 * sigma0, beta, d)), rel=0.1)


# -- the experiment's analysis ------------------------------------------------------------------------------


def test_crossings_and_susceptibility_fit_on_synthetic_sweeps():
    ratios = np.array([0.8, 0.9, 1.0, 1.1, 1.2])
    assert crossing(ratios, np.array([0.9, 0.8, 0.4, 0.1, 0.1]), 0.5) == pytest.approx(0.975)
    assert np.isnan(crossing(ratios, np.full(5, 0.9), 0.5))
    down = np.array([0.9, 0.85, 0.1, 0.05, 0.05])
    up = np.array([0.9, 0.85, 0.8, 0.7, 0.05])
    order = np.stack([np.stack([down, up])] * 3)  # (seeds, 2, levels)
    cross = sweep_crossings(ratios, order)
    assert cross[1, -1] - cross[0, -1] > 0.15  # the sweep up stays ordered longer: a loop
    n = 100
    sq = np.broadcast_to(1.0 / (n * (1.0 - 1.0 / ratios**2).clip(1e-3)), order.shape)
    flat = np.zeros_like(order)
    flat[:, :, 0] = 1.0  # ordered at the lowest noise only
    root, xs, ys = susceptibility_fit(ratios, flat, np.asarray(sq), n)
    assert root == pytest.approx(1.0, rel=1e-9) and xs.size == 2
