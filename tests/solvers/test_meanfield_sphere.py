"""The mean field on S²: spherical harmonics on a Gauss–Legendre grid, Funk–Hecke, the spectral solver's
conservation, energy and linear rates against ``particles/modes.py``, the fastest degrees, and particles."""

import math

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import sph_harm_y, spherical_in

import attnflow as af
from attnflow.solvers import harmonics as H
from attnflow.solvers import sphere_meanfield as ms


def random_coefficients(L, seed=0):
    rng = np.random.default_rng(seed)
    c = (rng.normal(size=(L + 1, L + 1)) + 1j * rng.normal(size=(L + 1, L + 1))) * np.tril(np.ones((L + 1, L + 1)))
    c[:, 0] = c[:, 0].real
    return c


def test_harmonics_are_scipys_and_the_transforms_invert_each_other():
    L = 12
    theta, phi = np.array([0.3, 1.1, 2.5, 3.0]), np.array([0.2, 4.0, 1.0, 5.5])
    P = H.legendre(L, np.cos(theta))
    for ell in range(L + 1):
        for m in range(ell + 1):
            np.testing.assert_allclose(P[:, ell, m] * np.exp(1j * m * phi), sph_harm_y(ell, m, theta, phi), atol=1e-14)
    grid = H.sphere_grid(L)
    c = random_coefficients(L)
    f = H.synthesis(grid, jnp.asarray(c))
    np.testing.assert_allclose(np.asarray(H.analysis(grid, f)), c, atol=1e-13)
    np.testing.assert_allclose(H.evaluate(c, grid.points()), np.asarray(f), atol=1e-12)
    # the weak divergence of the gradient is the Laplacian, −ℓ(ℓ+1), and the mass of any divergence is 0
    d_theta, d_phi = H.gradient(grid, jnp.asarray(c))
    ell = H.degrees(L)
    np.testing.assert_allclose(np.asarray(H.divergence(grid, d_theta, d_phi)), -ell * (ell + 1) * c, atol=1e-11)
    h = 1e-6
    fd = (H.legendre(L, np.cos(theta + h)) - H.legendre(L, np.cos(theta - h))) / (2 * h)
    np.testing.assert_allclose(H.legendre_derivative(L, np.cos(theta)), fd, atol=1e-8)


@pytest.mark.parametrize("beta", [0.5, 5.0, 40.0])
def test_funk_hecke_eigenvalues_are_4pi_i_ell(beta):
    """∫ e^{β(⟨N, y⟩ − 1)} Y_ℓ0(y) dy = e^{−β} 4π i_ℓ(β) Y_ℓ0(N) at the north pole N, by quadrature."""
    L = 20
    grid = H.sphere_grid(96)
    kernel = np.exp(beta * (np.cos(grid.theta) - 1.0))
    P = H.legendre(L, np.cos(grid.theta))[:, :, 0]
    quadrature = 2 * math.pi * np.einsum("j,j,jl->l", grid.weights, kernel, P)
    north = H.legendre(L, [1.0])[0, :, 0]
    expected = ms.scaled_kernel(beta, L) * north
    np.testing.assert_allclose(quadrature, expected, rtol=1e-10, atol=1e-12)  # the quadrature's rounding
    exact = 4 * math.pi * np.exp(-beta) * spherical_in(np.arange(L + 1), beta)
    np.testing.assert_allclose(ms.scaled_kernel(beta, L), exact, rtol=1e-12)


def tiny_start(L, eps, degrees, seed=1):
    return ms.perturbed_uniform_sphere(seed, L, eps, degrees)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sa", "usa"])
def test_linear_rates_of_every_degree_match_modes(model):
    beta, L = 5.0, 16
    rates = ms.sphere_growth_rates(np.arange(1, 9), beta, model)
    window = np.linspace(0.0, 1.0 / rates.max(), 6)
    sol = ms.meanfield_sphere(
        tiny_start(L, 1e-8, 8), beta, window[-1], model=model, L=L, ts=window, rtol=1e-11, atol=1e-16
    )
    power = np.sum(np.where(np.arange(L + 1) == 0, 1.0, 2.0) * np.abs(sol.coefficients) ** 2, axis=-1)[:, 1:9]
    measured = np.polyfit(window, np.log(power) / 2, 1)[0]
    np.testing.assert_allclose(measured, rates, rtol=1e-4)
    np.testing.assert_allclose(rates, np.asarray(af.mode_growth_rates(beta, 3, model=model, kmax=8)[1]), rtol=1e-12)


@pytest.mark.slow
def test_fastest_degrees_from_the_solver_and_from_fastest_mode():
    betas = np.array([5.0, 10.0, 20.0, 50.0, 100.0])
    assert np.asarray(af.fastest_mode(betas, d=3)).tolist() == [3, 4, 6, 10, 14]
    L = 24
    window = np.linspace(0.0, 0.5, 4)
    sol = ms.meanfield_sphere(
        tiny_start(L, 1e-9, 20), betas, window[-1], model="sa", L=L, ts=window, rtol=1e-10, atol=1e-18
    )
    power = np.sum(np.where(np.arange(L + 1) == 0, 1.0, 2.0) * np.abs(sol.coefficients) ** 2, axis=-1)[..., 1:21]
    measured = np.array([np.polyfit(window, np.log(p) / 2, 1)[0] for p in power])  # (β, ℓ)
    assert (np.argmax(measured, axis=1) + 1).tolist() == [3, 4, 6, 10, 14]


@pytest.mark.slow
def test_mass_energy_and_noise():
    L, beta = 20, 4.0
    start = tiny_start(L, 0.05, 6, seed=3)
    sol = ms.meanfield_sphere(start, beta, 0.4, model="usa", L=L, ts=np.linspace(0, 0.4, 9))  # velocities ~ e^β
    assert np.max(np.abs(sol.mass - 1)) < 1e-13
    energy = sol.energy(normalized=True)
    assert np.all(np.diff(energy) > 0) and sol.rho.min() > 0
    # independent noise σ: every degree decays by (σ²/2) ℓ(ℓ+1) more, integrated exactly (large σ costs no steps)
    sigma = 3.0
    window = np.linspace(0.0, 0.02, 5)  # degrees ≤ 6 stay far above rounding (the fastest decays at 190)
    noisy = ms.meanfield_sphere(
        tiny_start(L, 1e-6, 10), beta, window[-1], model="sa", L=L, ts=window, noise=sigma, rtol=1e-11, atol=1e-16
    )
    power = np.sum(np.where(np.arange(L + 1) == 0, 1.0, 2.0) * np.abs(noisy.coefficients) ** 2, axis=-1)[:, 1:7]
    measured = np.polyfit(window, np.log(power) / 2, 1)[0]
    ell = np.arange(1, 7)
    expected = ms.sphere_growth_rates(ell, beta, "sa") - 0.5 * sigma**2 * ell * (ell + 1)
    np.testing.assert_allclose(ms.sphere_growth_rates(ell, beta, "sa", sigma), expected, rtol=1e-14)
    np.testing.assert_allclose(measured, expected, rtol=1e-4)
    assert noisy.steps < 40 and np.max(np.abs(noisy.mass - 1)) < 1e-13


def test_sobolev_distance_of_uniform_samples_has_its_expected_size():
    """For n i.i.d. uniform points E D² = Σ_{ℓ ≥ 1} (1 + ℓ(ℓ+1))^{−2} (2ℓ + 1) / (4π n)."""
    L, n = 16, 400
    uniform = np.zeros((L + 1, L + 1), complex)
    uniform[0, 0] = 1 / math.sqrt(4 * math.pi)
    ell = np.arange(1, L + 1)
    expected = np.sum((1 + ell * (ell + 1.0)) ** -2 * (2 * ell + 1)) / (4 * math.pi * n)
    rng = np.random.default_rng(0)
    squares = []
    for _ in range(200):
        x = rng.normal(size=(n, 3))
        squares.append(ms.sobolev_distance(x, uniform) ** 2)
    assert abs(np.mean(squares) / expected - 1) < 0.1
    # samples drawn from a non-uniform density are as close to it
    c = tiny_start(L, 0.08, 6, seed=2)
    draws = [ms.sobolev_distance(ms.sample_sphere_density(s, c, n), c) ** 2 for s in range(60)]
    assert 0.7 < np.mean(draws) / expected < 1.3


def test_maxima_and_regions_on_the_grid():
    r = np.random.default_rng(0).normal(size=(12, 20))
    brute = 0
    for i in range(12):
        for j in range(20):
            near = [
                r[i + a, (j + b) % 20] for a in (-1, 0, 1) for b in (-1, 0, 1) if (a, b) != (0, 0) and 0 <= i + a < 12
            ]
            if i in (0, 11):
                near += list(r[i])
            brute += r[i, j] > 0 and r[i, j] >= max(near)
    assert ms.sphere_density_maxima(r, 0.0) == brute
    caps = np.zeros((10, 16))
    caps[0, :] = 1  # a polar cap seen on every longitude of the first ring
    caps[5, 3:5] = 1
    caps[5, 15] = caps[5, 0] = 1  # wraps across φ = 0
    assert ms.sphere_density_peaks(caps, 0.5) == 3


@pytest.mark.slow
def test_refusals_and_the_resolution_limit():
    c = tiny_start(8, 1e-3, 4)
    for kwargs, message in (
        (dict(L=1), "L must be an integer ≥ 2"),
        (dict(model="softmax"), "model must be one of"),
        (dict(noise=-1.0), "noise must be"),
    ):
        with pytest.raises(ValueError, match=message):
            ms.meanfield_sphere(c, 5.0, 1.0, **kwargs)
    with pytest.raises(ValueError, match="beta must be a positive"):
        ms.meanfield_sphere(c, -1.0, 1.0)
    with pytest.raises(ValueError, match="rho0 must be coefficients"):
        ms.meanfield_sphere(np.ones(5), 5.0, 1.0)
    # a clustering density outgrows a small degree: the solver names the time it reached
    with pytest.raises(ms.SphereMeanFieldError, match="larger degree") as err:
        ms.meanfield_sphere(tiny_start(10, 0.05, 6), 20.0, 30.0, model="sa", L=10)
    assert 0 < err.value.t < 30 and np.isfinite(err.value.solution.rho[0]).all()
