"""The moderate-interaction regime's closed forms and observables (moderate_interaction_theory.py): the collapse of the
Laplace limit onto a great circle, USA's time unit, the unstable band's power and the cluster count."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import quad

import attnflow as af
from attnflow.experiments.studies.moderate_interaction.moderate_interaction_theory import (
    band_growth,
    band_power,
    cluster_count,
    collapse_moment,
    collapse_time,
    first_crossing,
    line_fit,
    plane_angles,
    second_moment_spectrum,
    sphere_resultant,
    unstable_band,
    usa_time_unit,
)
from attnflow.particles.modes import fastest_mode, fastest_rate


@pytest.mark.parametrize("rate", [0.5, 1.0, 2.0])
def test_collapse_moment_is_the_mean_of_the_exact_solution(rate):
    """E z² of z²/(1 − z²) = e^{−2at} z₀²/(1 − z₀²) over z₀ uniform on [−1, 1], by quadrature, at five times."""
    for t in (0.0, 1e-8, 0.3, 1.5, 6.0):
        q = math.exp(-2 * rate * t)
        want = quad(lambda z0, q=q: q * z0**2 / (1 - z0**2 + q * z0**2), 0.0, 1.0, epsabs=1e-14)[0]
        assert float(collapse_moment(t, rate)) == pytest.approx(want, rel=1e-9, abs=1e-15)
    assert float(collapse_moment(0.0, rate)) == pytest.approx(1 / 3, rel=1e-12)


def test_collapse_time_solves_the_level_and_scales_as_one_over_the_rate():
    """E z²(t₁) = e^{−2}/3, and t₁(a) = t₁(1)/a (the closed form depends on a t only)."""
    t1 = collapse_time(1.0)
    assert float(collapse_moment(t1, 1.0)) == pytest.approx(math.exp(-2) / 3, rel=1e-9)
    assert collapse_time(2.5) == pytest.approx(t1 / 2.5, rel=1e-9)
    assert 1.7 < t1 < 1.8


def test_collapse_moment_matches_the_laplace_flow_of_many_tokens():
    """The Laplace limit ẋ = P_x V x, V = diag(1, 1, 0), integrated for 20 000 uniform tokens: the mean z² at
    t = 1 and 2 agrees with the closed form to Monte Carlo accuracy (σ of z² ≤ 0.3/√n)."""
    x = np.asarray(af.init.uniform(jax.random.PRNGKey(3), 20_000, 3))
    z2 = x[:, 2] ** 2
    z2_t = {}
    for t in (1.0, 2.0):
        q = math.exp(-2 * t)
        z2_t[t] = float(np.mean(q * z2 / (1 - z2 + q * z2)))
    for t, value in z2_t.items():
        assert value == pytest.approx(float(collapse_moment(t)), abs=4 * 0.3 / math.sqrt(x.shape[0]))


def test_sphere_resultant_is_the_von_mises_fisher_mean(beta=7.0):
    """∫ z e^{βz} dz / ∫ e^{βz} dz over [−1, 1] (the mean of ⟨x, y⟩ under e^{β⟨x, y⟩} on S²), by quadrature."""
    for b in (1e-6, 0.3, beta, 200.0):
        num = quad(lambda z, b=b: z * math.exp(b * (z - 1)), -1, 1)[0]
        den = quad(lambda z, b=b: math.exp(b * (z - 1)), -1, 1)[0]
        assert sphere_resultant(b) == pytest.approx(num / den, rel=1e-8)


@pytest.mark.parametrize("beta", [0.5, 3.0, 40.0])
def test_usa_time_unit_is_one_over_the_mean_kernel(beta):
    """1/unit = (1/|S|) ∫ e^{β(⟨x, y⟩ − 1)} dy by quadrature on the circle and on S²."""
    circle = quad(lambda u: math.exp(beta * (math.cos(u) - 1)), 0, math.pi)[0] / math.pi
    sphere = quad(lambda z: math.exp(beta * (z - 1)) / 2, -1, 1)[0]
    assert 1 / usa_time_unit(beta, 2) == pytest.approx(circle, rel=1e-10)
    assert 1 / usa_time_unit(beta, 3) == pytest.approx(sphere, rel=1e-10)
    with pytest.raises(ValueError, match="d = 2 or 3"):
        usa_time_unit(beta, 4)


def test_unstable_band_contains_the_fastest_mode_near_sqrt_two_beta():
    """The band's fastest rate is modes.fastest_rate, at k* ≈ √(2β); SA's rate tends to 2/e."""
    beta = 200.0
    k, rates = unstable_band(beta)
    assert int(k[np.argmax(rates)]) == int(fastest_mode(beta))
    assert abs(int(k[np.argmax(rates)]) - math.sqrt(2 * beta)) <= 1
    assert rates.max() == pytest.approx(fastest_rate(beta), rel=1e-12)
    assert rates.max() == pytest.approx(2 / math.e, rel=0.02)
    assert np.all(rates >= 0.5 * rates.max())


def test_band_power_of_uniform_tokens_and_of_one_cluster():
    """i.i.d. uniform angles: mean power (modes)/n (over 200 draws, within 4 standard errors); one cluster: 1 per mode."""
    rng = np.random.default_rng(0)
    modes = np.arange(5, 15)
    n = 400
    draws = [band_power(rng.uniform(0, 2 * np.pi, n), modes) for _ in range(200)]
    # each |ρ̂_k|² is exponential with mean 1/n: the sum of 10 has standard deviation √10/n
    assert np.mean(draws) == pytest.approx(modes.size / n, abs=4 * math.sqrt(modes.size) / n / math.sqrt(200))
    assert band_power(np.full(n, 0.7), modes) == pytest.approx(modes.size, rel=1e-12)
    growth = band_growth(np.array([0.0, 1.0]), np.array([0.5, 0.25]), 10)
    assert growth == pytest.approx([0.2, (math.e + math.exp(0.5)) / 10], rel=1e-12)


def test_cluster_count_of_separated_groups_and_the_plane_of_tokens_on_a_great_circle():
    """Five groups of angles 1/50 wide, 0.8 apart, counted with gap 0.1; tokens on a tilted great circle of S² give
    back their angles (up to a rotation and reflection) and a second moment of spectrum (0, 1/2, 1/2)."""
    rng = np.random.default_rng(1)
    centres = np.array([0.0, 0.8, 1.6, 2.4, 3.2])
    theta = (centres[:, None] + rng.uniform(0, 0.02, (5, 40))).ravel()
    assert cluster_count(theta, 0.1) == 5
    assert cluster_count(rng.uniform(0, 0.05, 30), 0.1) == 1
    phi = np.linspace(0, 2 * np.pi, 64, endpoint=False)
    R = np.linalg.qr(rng.standard_normal((3, 3)))[0]
    x = np.column_stack([np.cos(phi), np.sin(phi), np.zeros_like(phi)]) @ R.T
    assert second_moment_spectrum(x) == pytest.approx([0.0, 0.5, 0.5], abs=1e-12)
    back = np.unwrap(plane_angles(x))
    step = np.diff(back)
    assert np.allclose(np.abs(step), 2 * np.pi / 64, atol=1e-9)


def test_first_crossing_interpolates_log_linearly_and_line_fit_recovers_a_slope():
    """A series e^{−t} crosses e^{−2.5} at t = 2.5 exactly (log-linear interpolation); a noisy line's slope is
    recovered within 3 standard errors, which shrink like 1/√n."""
    ts = np.linspace(0, 5, 11)
    assert first_crossing(ts, np.exp(-ts), math.exp(-2.5)) == pytest.approx(2.5, rel=1e-12)
    assert math.isnan(first_crossing(ts, np.exp(-ts), 1e-9))
    rng = np.random.default_rng(2)
    x = np.linspace(0, 1, 200)
    y = 0.3 + 1.7 * x + 0.05 * rng.standard_normal(x.size)
    slope, se, icpt = line_fit(x, y)
    assert abs(slope - 1.7) <= 3 * se
    assert se == pytest.approx(0.05 / (x.std() * math.sqrt(x.size)), rel=0.15)


@pytest.mark.slow
def test_sa_at_moderate_beta_collapses_like_the_laplace_limit():
    """SA with V = diag(1, 1, 0), n = 3000 uniform tokens on S², β = 0.01·n = 30: λ_min(M) at t = 1 and 2 within
    5 % of the Laplace limit's E z² at the rate coth β − 1/β (exact at the uniform density; measured 2 % at t = 2,
    where the limit's own rate 1 is 12 % off)."""
    jax.config.update("jax_enable_x64", True)
    x0 = af.init.uniform(jax.random.PRNGKey(0), 3000, 3, dtype=jnp.float64)
    V = jnp.diag(jnp.array([1.0, 1.0, 0.0]))
    sol = af.simulate(af.SA(30.0, V=V), x0, 2.0, ts=jnp.array([1.0, 2.0]), solver="rk4", dt=0.02)
    for x, t in zip(np.asarray(sol.xs), (1.0, 2.0)):
        assert second_moment_spectrum(x)[0] == pytest.approx(
            float(collapse_moment(t, sphere_resultant(30.0))), rel=0.05
        )
