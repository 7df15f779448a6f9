"""The mean-field limit on the circle (solvers/circle_meanfield.py): the continuity equation of SA and USA.

Linear growth rates at the uniform density against docs/model.md §3, mass and positivity through a
clustering run, the energy along the flow, particle systems converging to the density in W1, and
β = 5 forming the three clusters of its fastest mode. Every run shares the grid (MODES), the number
of members (3) and of save times (T), so the SA and USA solvers compile once each.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import special

import attnflow as af
from attnflow.solvers import circle_meanfield as mf

MODES, T, MEMBERS = 128, 24, 3
BETAS = np.array([1.0, 5.0, 20.0])
K = np.arange(1, 6)


def theory(model: str, beta: float) -> np.ndarray:
    """k² I_k(β)/β (USA), k² I_k(β)/(β I_0(β)) (SA), from scipy."""
    rate = K**2 * special.iv(K, beta) / beta
    return rate / special.iv(0, beta) if model == "sa" else rate


def test_scaled_bessel_coefficients_match_scipy():
    betas = np.array([0.5, 5.0, 20.0, 300.0, 2000.0])
    got = np.asarray(mf.scaled_bessel(betas, 200))
    ref = special.ive(np.arange(200)[None], betas[:, None])
    assert np.max(np.abs(got - ref)) <= 1e-15  # every entry is ≤ 1
    head = slice(0, 6)
    assert np.max(np.abs(got[:, head] / ref[:, head] - 1)) <= 1e-12
    for model in ("sa", "usa"):
        for beta in (1.0, 5.0, 20.0):
            np.testing.assert_allclose(mf.growth_rates(K, beta, model), theory(model, beta), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["sa", "usa"])
def test_growth_rates_at_the_uniform_density_match_the_linear_theory(model):
    # ρ0 = (1 + δ Σ_{k≤5} cos kθ)/2π with δ tiny: each mode grows on its own at λ_k for one e-folding
    # time of the fastest one; products of modes are O(δ) relative, far below 1 %
    theta = mf.theta_grid(MODES)
    rho0 = (1 + 1e-8 * np.cos(np.outer(theta, K)).sum(axis=1)) / (2 * np.pi)
    expected = np.stack([theory(model, b) for b in BETAS])  # (β, k)
    windows = np.linspace(0, 1, T)[None] / expected.max(axis=1)[:, None]
    sol = af.meanfield_circle(rho0, BETAS, float(windows.max()), ts=windows, model=model, rtol=1e-12, atol=1e-16)
    logs = np.log(np.abs(sol.coefficients[..., 1:6]))  # (β, T, k)
    measured = np.stack([np.polyfit(windows[j], logs[j], 1)[0] for j in range(len(BETAS))])
    err = np.abs(measured / expected - 1)
    print(
        f"\n{model}: max relative error of the growth rates per β "
        + ", ".join(f"{b:g}: {e:.1e}" for b, e in zip(BETAS, err.max(1)))
    )
    assert err.max() <= 0.01, err
    np.testing.assert_allclose(sol.mass, 1.0, atol=1e-14)


@pytest.fixture(scope="module")
def clustering():
    """β = 5 from three perturbed-uniform densities (ε = 1e-3 on every mode k ≤ 16), SA and USA, up to
    the time the clusters have formed (USA is about I_0(5) ≈ 27 times faster)."""
    rho0 = np.stack([mf.perturbed_uniform(seed, MODES, 1e-3) for seed in range(MEMBERS)])
    out = {}
    for model, t1 in (("sa", 11.5), ("usa", 0.4)):
        out[model] = af.meanfield_circle(rho0, 5.0, t1, ts=np.linspace(0, t1, T), model=model)
    return out


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_mass_is_conserved_and_the_density_stays_non_negative(clustering, model):
    sol = clustering[model]
    drift = np.max(np.abs(sol.mass - 1))
    low = np.min(sol.rho.min(-1) / sol.rho.max(-1))
    print(f"\n{model}: mass drift {drift:.1e}, min ρ/max ρ {low:.1e}, steps {sol.steps}, rejected {sol.rejected}")
    assert drift <= 1e-12
    assert low >= -1e-6
    # the k = 0 coefficient is never updated: the mass is exactly that of ρ0 up to the FFT's rounding
    np.testing.assert_allclose(sol.coefficients[..., 0].imag, 0.0, atol=1e-15)
    assert np.max(sol.rho[:, -1]) > 5 * np.max(sol.rho[:, 0])  # it did cluster


@pytest.mark.parametrize("model", ["usa", "sa"])
def test_energy_never_decreases(clustering, model):
    # USA is the Wasserstein gradient ascent of E[ρ] (docs/model.md §1.3); SA ascends it in a weighted metric
    sol = clustering[model]
    e = sol.energy()
    increments = np.diff(e, axis=-1)
    print(
        f"\n{model}: min energy increment {increments.min():.1e}, E from {e[:, 0].mean():.4f} to {e[:, -1].mean():.4f}"
    )
    assert increments.min() >= -1e-12 * np.max(e)
    assert np.all(e[:, -1] > e[:, 0] * 1.2)
    # E of the uniform density is I_0(β)/(2β): the start is within O(ε²) of it
    np.testing.assert_allclose(e[:, 0], special.iv(0, 5.0) / 10.0, rtol=1e-4)
    np.testing.assert_allclose(sol.energy(normalized=True), e * 10.0 * np.exp(-5.0), rtol=1e-12)


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_beta_5_forms_three_clusters(clustering, model):
    # k² I_k(5) is largest at k = 3 (docs/model.md §3): three peaks emerge from a uniform start
    rates = mf.growth_rates(np.arange(1, 17), 5.0, model)
    assert int(np.argmax(rates)) + 1 == 3
    sol = clustering[model]
    counts = sol.clusters()  # arcs where ρ > 2/2π
    print(f"\n{model}: clusters at t = {sol.ts[-1]:.3g}: {counts[:, -1]}")
    np.testing.assert_array_equal(counts[:, -1], 3)
    assert np.all(counts[:, 0] == 0)
    # the basins of the three peaks (split at the minima between them) hold about a third of the mass each
    for rho in sol.rho[:, -1]:
        print("basin masses", np.round(basin_masses(rho), 3))
        np.testing.assert_allclose(basin_masses(rho), 1 / 3, atol=0.1)


def basin_masses(rho: np.ndarray) -> np.ndarray:
    """Masses between consecutive minima separating the peaks above 2/2π of a density on the grid."""
    above = rho > 1 / np.pi
    shift = int(np.argmin(rho))  # start the circle in a gap
    rho, above = np.roll(rho, -shift), np.roll(above, -shift)
    starts = np.flatnonzero(above & ~np.roll(above, 1))
    ends = np.flatnonzero(above & ~np.roll(above, -1))
    peaks = [a + int(np.argmax(rho[a : b + 1])) for a, b in zip(starts, ends)]
    cuts = [0] + [p + int(np.argmin(rho[p:q])) for p, q in zip(peaks[:-1], peaks[1:])] + [rho.size]
    return np.array([rho[a:b].sum() for a, b in zip(cuts[:-1], cuts[1:])]) * 2 * np.pi / rho.size


def test_an_unresolved_density_stops_with_the_time_reached(clustering):
    rho0 = np.stack([mf.perturbed_uniform(seed, MODES, 1e-3) for seed in range(MEMBERS)])
    with pytest.raises(mf.MeanFieldError, match="narrower than the grid") as info:
        af.meanfield_circle(rho0, 5.0, 30.0, ts=np.linspace(0, 30.0, T))
    sol, t = info.value.solution, info.value.t
    assert 11.5 < t < 30.0
    reached = sol.ts <= np.min(sol.t_final)
    assert np.all(np.isfinite(sol.rho[:, reached])) and np.all(np.isnan(sol.rho[:, -1]))


def test_w1_on_the_circle_is_exact():
    theta = mf.theta_grid(64)
    rho = (1 + 0.5 * np.cos(theta) + 0.2 * np.sin(2 * theta)) / (2 * np.pi)
    x = np.random.default_rng(1).uniform(0, 2 * np.pi, 50)
    # brute force: min_c ∫|F_μ − F_ρ − c| on a very fine grid, c the median
    g = (np.arange(400_000) + 0.5) * 2 * np.pi / 400_000
    F_rho = (g + 0.5 * np.sin(g) + 0.1 * (1 - np.cos(2 * g))) / (2 * np.pi)
    diff = np.searchsorted(np.sort(x), g, side="right") / x.size - F_rho
    brute = np.mean(np.abs(diff - np.median(diff))) * 2 * np.pi
    assert mf.w1_circle(x, rho) == pytest.approx(brute, rel=1e-4)
    uniform = np.full(128, 1 / (2 * np.pi))
    assert mf.w1_circle(np.full(7, 1.0), uniform) == pytest.approx(np.pi / 2, rel=1e-6)  # a Dirac vs uniform
    assert mf.w1_circle(x + 2 * np.pi, rho) == pytest.approx(mf.w1_circle(x, rho), rel=1e-12)
    samples = mf.sample_density(0, rho, 100_000)
    assert mf.w1_circle(samples, rho) < 0.02


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_particles_converge_to_the_density_in_w1():
    # SA at β = 1 from an O(1) perturbation of the uniform density, t = 1: the density moves by
    # W1 ≈ 0.2 while n i.i.d. particles run with simulate (Circle, RK4); their distance to it
    # should fall like n^{-1/2} (16 samples per n, 3 at n = 4096, whose runs cost the most)
    beta, t1 = 1.0, 1.0
    theta = mf.theta_grid(MODES)
    rho0 = (1 + 0.6 * np.cos(theta) + 0.3 * np.cos(3 * theta + 1.0)) / (2 * np.pi)
    sol = af.meanfield_circle(np.broadcast_to(rho0, (MEMBERS, rho0.size)), beta, t1, ts=np.linspace(0, t1, T))
    rho_t = sol.rho[0, -1]
    moved = mf.w1_circle(mf.sample_density(7, rho_t, 200_000), rho0)
    counts = np.array([64, 256, 1024, 4096])
    mean = np.empty(len(counts))
    for i, n in enumerate(counts):
        theta0 = np.stack([mf.sample_density(1000 * n + s, rho0, n) for s in range(16 if n < 4096 else 3)])
        particles = af.simulate(
            af.Circle(beta, "sa"), jnp.asarray(theta0[..., None]), t1, ts=jnp.asarray([0.0, t1]), solver="rk4", dt=0.25
        )
        final = np.asarray(particles.xs)[:, -1, :, 0]
        mean[i] = np.mean([mf.w1_circle(x, rho_t) for x in final])
    alpha = np.polyfit(np.log(counts), np.log(mean), 1)[0]
    print(
        f"\nW1(μ_n(t), ρ(t)) at t = {t1}, n = {counts.tolist()}: {np.round(mean, 4).tolist()}; "
        f"fitted exponent α = {alpha:.3f} (W1 ∝ n^α); the density itself moved by W1 = {moved:.3f}"
    )
    assert np.all(np.diff(mean) < 0)
    assert -0.7 <= alpha <= -0.3
    assert mean[-1] < moved / 5


def test_inputs_are_checked():
    rho0 = np.full(2 * MODES, 1 / (2 * np.pi))
    with pytest.raises(ValueError, match="model"):
        af.meanfield_circle(rho0, 1.0, 1.0, model="sinkhorn")
    with pytest.raises(ValueError, match="even"):
        af.meanfield_circle(rho0[:-1], 1.0, 1.0)
    with pytest.raises(ValueError, match="overflow"):
        af.meanfield_circle(rho0, 800.0, 1.0, model="usa")
    with pytest.raises(ValueError, match="increasing"):
        af.meanfield_circle(rho0, 1.0, 1.0, ts=[0.0, 0.5, 0.5])
    # a function of θ is sampled on the grid of 2·modes points and normalized to mass 1
    sol = af.meanfield_circle(lambda th: 2 + np.cos(th), 1.0, 0.1, modes=16)
    assert sol.rho.shape == (2, 32) and sol.theta.shape == (32,)
    np.testing.assert_allclose(sol.mass, 1.0, atol=1e-14)
