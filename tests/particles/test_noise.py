"""Noisy transformers (arXiv 2512.01868 §7): stationary laws, the heat kernel, keys, composition.

Statistical checks compare with exact predictions and allow 4 standard errors estimated from
independent samples (members or particles), i.e. a false alarm about once in 10⁴ runs for a
correct scheme, on top of a measured discretization bias far below one standard error.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import ive

import attnflow as af
from attnflow.particles.fields import Field
from attnflow.particles.layerwise import LayerWise
from attnflow.particles.noise import Noisy, deterministic, noise_sigma
from attnflow.particles.sphere import norm_error


class Still(Field):
    """Zero drift: with noise, each particle is an independent Brownian motion on the sphere."""

    def drift(self, t, x):
        return jnp.zeros_like(x)


def gibbs_r2(kappa, n):
    """Exact E R² for n particles in the stationary law of noisy Kuramoto (β = 0, d = 2).

    The n-particle system is a reversible diffusion: dθ_i = −∂_i H dt + σ dW_i with
    H = −(n/2)R², R = ‖(1/n)Σ x_i‖, so its stationary density is ∝ e^{−2H/σ²} = e^{κnR²/2}
    on the torus. Writing e^{κnR²/2} as a Gaussian integral (Hubbard–Stratonovich) gives
    Z(κ) = E_uniform e^{κnR²/2} = (n/κ) ∫₀^∞ r e^{−nr²/(2κ)} I₀(r)ⁿ dr, and
    E R² = (2/n) ∂_κ log Z = ⟨r²⟩/κ² − 2/(nκ) with ⟨·⟩ the average under r e^{−nr²/(2κ)} I₀(r)ⁿ.
    For κ < 2 and large n this is 2/(n(2−κ)) (the OU fluctuations of the first Fourier mode).
    """

    def logw(r):
        return np.log(r) - n * r**2 / (2 * kappa) + n * (np.log(ive(0, r)) + r)

    # locate the weight's support on a coarse grid, then integrate on a fine one
    coarse = np.geomspace(1e-8, 50.0, 20_001)
    lw = logw(coarse)
    support = coarse[lw > lw.max() - 60.0]
    r = np.linspace(support[0] * 0.5, support[-1] * 1.5, 200_001)
    w = np.exp(logw(r) - logw(r).max())
    return np.sum(w * r**2) / np.sum(w) / kappa**2 - 2.0 / (n * kappa)


def test_gibbs_formula_has_the_known_limits():
    # κ = 0: independent uniform angles, E R² = 1/n exactly; κ < 2, n large: 2/(n(2−κ)); κ > 2: R → R*
    assert gibbs_r2(1e-4, 7) * 7 == pytest.approx(1.0, rel=1e-3)
    assert gibbs_r2(0.2, 4000) * 4000 == pytest.approx(2.0 / 1.8, rel=2e-3)
    assert gibbs_r2(1.0, 4000) * 4000 == pytest.approx(2.0, rel=2e-3)
    r_star = brentq(lambda R: R - ive(1, 6 * R) / ive(0, 6 * R), 0.1, 1.0)
    assert gibbs_r2(6.0, 4000) == pytest.approx(r_star**2, rel=2e-3)


def _r2(t, x):
    return jnp.sum(jnp.mean(x, axis=0) ** 2)


@pytest.mark.slow
def test_noisy_kuramoto_order_parameter_below_and_above_kappa_2():
    """β = 0, d = 2: R² ~ 1/n for κ = 1 (uniform law), R ≈ R* > 0 for κ = 6 (synchronized).

    One ensemble over σ: 16 members at κ = 1 and 16 at κ = 6, all started in a cap (R ≈ 0.9)
    and averaged over t ∈ [15, 215] (burn-in: the transients decay like e^{−t} or faster).
    rk4 with dt = 0.1 inside the Strang splitting is weak order 2 on the circle; in runs with
    64 members over t ≤ 1000 its bias was below 0.2 % at both κ, within the statistical error.
    """
    n, m = 64, 16
    kappas = np.repeat([1.0, 6.0], m)
    x0 = af.init.cap(jax.random.key(0), n, 2, angle=0.5, batch=2 * m)
    ts = np.arange(15.0, 215.0 + 1e-9, 0.5)
    sol = af.simulate(Noisy.from_kappa(af.USA(0.0), kappas), x0, ts[-1], ts=ts, solver="rk4", dt=0.1, save=_r2, key=7)
    per_member = np.asarray(sol.stats).mean(axis=1)  # time averages: independent across members
    assert float(norm_error(sol.x_final)) < 1e-12
    for kappa, r2 in ((1.0, per_member[:m]), (6.0, per_member[m:])):
        mean, se = r2.mean(), r2.std(ddof=1) / np.sqrt(m)
        exact = gibbs_r2(kappa, n)
        assert se < 0.05 * mean  # the averaging window is long enough for the test to be sharp
        assert abs(mean - exact) < 4 * se, (kappa, mean, se, exact)
        if kappa == 1.0:
            # the uniform law: R² is O(1/n), n E R² = 1.94 (→ 2/(2−κ) = 2 as n → ∞, not 1: the
            # interaction amplifies the fluctuations of the mean by 1/(1 − κ/2))
            assert 1.7 < n * mean < 2.2
        else:
            # synchronized: R close to the mean-field root of R = I₁(κR)/I₀(κR) (0.902 at κ = 6;
            # the finite-n correction is +0.35 % in R²), far above the n^{-1/2} = 0.125 level
            r_star = brentq(lambda R, kappa=kappa: R - ive(1, kappa * R) / ive(0, kappa * R), 0.1, 1.0)
            assert np.sqrt(mean) == pytest.approx(r_star, rel=5e-3)
            assert np.sqrt(mean) > 5 / np.sqrt(n)


@pytest.mark.slow
def test_noisy_kuramoto_fluctuations_scale_like_one_over_n():
    """κ = 1 at n = 256: n E R² is again the exact value (≈ 1.98), so R = O(n^{-1/2}).

    4 members from uniform starts (already stationary in law up to O(1/n)) over t ∈ [5, 105]:
    the standard error is ≈ 5 %, so this checks the 1/n scaling (a factor 4 from n = 64), not
    the third digit.
    """
    n, m = 256, 4
    x0 = af.init.uniform(jax.random.key(1), n, 2, batch=m)
    ts = np.arange(5.0, 105.0 + 1e-9, 0.5)
    sol = af.simulate(Noisy.from_kappa(af.SA(0.0), 1.0), x0, ts[-1], ts=ts, solver="rk4", dt=0.1, save=_r2, key=3)
    per_member = np.asarray(sol.stats).mean(axis=1)
    mean, se = per_member.mean(), per_member.std(ddof=1) / np.sqrt(m)
    assert abs(mean - gibbs_r2(1.0, n)) < 4 * se + 0.05 * mean, (n * mean, n * se)
    assert 1.6 < n * mean < 2.4


@pytest.mark.slow
def test_brownian_motion_on_s2_decorrelates_at_the_heat_kernel_rate():
    """Drift 0, d = 3: E P_l(⟨x(t), x(0)⟩) = e^{−l(l+1)σ²t/2} (Legendre P_l: eigenfunctions of Δ).

    l = 1 is the rate e^{−(d−1)σ²t/2} of the issue; l = 2 checks the second moment of the
    increments too. 20 000 independent particles give standard errors ≤ 0.004 (|P_l| ≤ 1); the
    geodesic random walk's own bias is −σ⁴t·dt/12 in the exponent of l = 1, i.e. < 0.1 %.
    """
    sigma, n, m = 1.0, 500, 40
    x0 = af.init.uniform(jax.random.key(2), n, 3, batch=m)
    ts = np.array([0.25, 0.5, 1.0])
    sol = af.simulate(Noisy(Still(), sigma), x0, 1.0, ts=ts, solver="euler", dt=0.01, key=11)
    c = jnp.einsum("btnd,bnd->tbn", sol.xs, x0).reshape(len(ts), -1)
    legendre = {1: c, 2: 0.5 * (3 * c**2 - 1)}
    for l, p in legendre.items():
        mean = np.asarray(p.mean(axis=1))
        se = np.asarray(p.std(axis=1)) / np.sqrt(p.shape[1])
        expected = np.exp(-l * (l + 1) * sigma**2 * ts / 2)
        np.testing.assert_array_less(np.abs(mean - expected), 4 * se)
    assert float(norm_error(sol.xs)) < 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["euler", "renormalized_euler", "rk4", "lie_euler", "cg3"])
def test_zero_noise_reproduces_the_deterministic_run_and_noise_keeps_the_sphere(solver):
    x0 = af.init.uniform(jax.random.key(4), 8, 5)
    ts = np.linspace(0.0, 4.0, 5)
    ref = af.simulate(af.SA(2.0), x0, 4.0, ts=ts, solver=solver, dt=0.05)
    # an ensemble over σ: the σ = 0 member is the deterministic run (the noise sub-steps are then
    # the identity), the strongly noisy one moves away and still stays on the sphere
    both = af.simulate(Noisy(af.SA(2.0), [0.0, 3.0]), x0, 4.0, ts=ts, solver=solver, dt=0.05, key=5)
    np.testing.assert_allclose(both.xs[0], ref.xs, rtol=0, atol=1e-14)
    assert int(both.steps[0]) == int(ref.steps)
    assert float(jnp.max(jnp.abs(both.xs[1, -1] - ref.xs[-1]))) > 1e-1
    assert float(norm_error(both.xs)) < 1e-12


@pytest.mark.slow
def test_keys_make_runs_reproducible_and_members_independent():
    field = Noisy(af.SA(1.0), 0.5)
    x0 = af.init.uniform(jax.random.key(5), 6, 3)
    run = lambda x, key: af.simulate(field, x, 1.0, solver="rk4", dt=0.1, key=key).x_final  # noqa: E731
    a = run(x0, 0)
    np.testing.assert_array_equal(a, run(x0, None))  # default key 0
    np.testing.assert_array_equal(a, run(x0, jax.random.key(0)))  # typed key
    np.testing.assert_array_equal(a, run(x0, jax.random.PRNGKey(0)))  # raw uint32 key
    assert float(jnp.max(jnp.abs(a - run(x0, 1)))) > 1e-3
    # member m draws from fold_in(key, m): member 0 of an ensemble is the single run with that key,
    # and members with the same start and σ follow different paths
    batch = run(jnp.stack([x0, x0, x0]), 0)
    np.testing.assert_allclose(batch[0], a, rtol=0, atol=1e-15)
    assert float(jnp.max(jnp.abs(batch[1] - batch[2]))) > 1e-3


@pytest.mark.slow
def test_per_member_keys_make_each_member_its_own_whatever_the_ensemble():
    # one key per member (shape (members,)): member m draws from key[m] alone, so any cut of the ensemble into
    # calls gives every member the same path, bitwise; one key for the ensemble is fold_in(key, m) per member
    field = Noisy(af.SA(1.0), 0.5)
    x0 = af.init.uniform(jax.random.key(9), 5, 3, batch=4)
    keys = jax.random.split(jax.random.key(3), 4)
    run = lambda x, key: np.asarray(af.simulate(field, x, 0.6, solver="rk4", dt=0.1, key=key).x_final)  # noqa: E731
    whole = run(x0, keys)
    np.testing.assert_array_equal(np.concatenate([run(x0[:1], keys[:1]), run(x0[1:], keys[1:])]), whole)
    np.testing.assert_array_equal(run(x0[2:0:-1], keys[2:0:-1]), whole[2:0:-1])  # reordered members too
    folded = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(jax.random.key(3), jnp.arange(4, dtype=jnp.uint32))
    np.testing.assert_array_equal(run(x0, folded), run(x0, jax.random.key(3)))
    raw = jax.random.key_data(keys)  # raw uint32 keys (members, 2) are the same keys
    np.testing.assert_array_equal(run(x0, np.asarray(raw)), whole)
    assert float(np.max(np.abs(whole - run(x0, jax.random.split(jax.random.key(4), 4))))) > 1e-3
    with pytest.raises(ValueError, match=r"key holds 3 keys \(shape \(3,\)\) but the run has 4 members"):
        run(x0, keys[:3])
    with pytest.raises(ValueError, match=r"key holds 3 keys \(shape \(3,\)\) but the run has 4 members"):
        run(x0, np.asarray(raw)[:3])


@pytest.mark.slow
def test_noise_composes_with_sums_and_ensembles():
    sa, usa = af.SA(1.0), af.USA(0.5)
    assert noise_sigma(sa) is None
    assert float(noise_sigma(Noisy(sa, 0.3) + Noisy(usa, 0.4))) == pytest.approx(0.5)
    assert float(noise_sigma(Noisy(Noisy(sa, 0.3), 0.4))) == pytest.approx(0.5)
    assert float(noise_sigma(sa + Noisy(usa, 0.4))) == pytest.approx(0.4)
    stripped = deterministic(sa + Noisy(usa, 0.4))
    assert noise_sigma(stripped) is None and stripped.terms == (sa, usa)
    x = af.init.uniform(jax.random.key(6), 5, 3)
    # the velocity of a noisy field is its deterministic part
    np.testing.assert_array_equal(Noisy(sa, 0.7)(0.0, x), sa(0.0, x))
    assert float(Noisy(sa, 0.7).beta) == 1.0
    kappa_field = Noisy.from_kappa(sa, np.array([0.5, 2.0, np.inf]))
    np.testing.assert_allclose(kappa_field.sigma, [2.0, 1.0, 0.0])
    np.testing.assert_allclose(Noisy(sa, 1.0).kappa, 2.0)
    # ensembles over β of the inner field and over σ run together
    sol = af.simulate(Noisy(af.SA([0.5, 1.0, 2.0]), [0.1, 0.2, 0.3]), x, 0.5, solver="euler", dt=0.1)
    assert sol.x_final.shape == (3, 5, 3)


@pytest.mark.slow
def test_noisy_runs_support_events_saves_and_progress(capsys):
    # small noise: tokens still cluster (to within ~σ), so the clustering event fires
    field = Noisy(af.SA(1.0), 0.01)
    x0 = af.init.cap(jax.random.key(7), 6, 3, angle=1.0, batch=2)
    sol = af.simulate(
        field,
        x0,
        60.0,
        ts=np.linspace(0, 60, 7),
        solver="euler",
        dt=0.1,
        stop_when_clustered=1e-2,
        save=lambda t, x, f: af.energy(x, f.beta),
        progress="noisy",
    )
    assert np.all(np.isfinite(sol.t_event)) and np.all(sol.t_event < 60.0)
    assert np.all(sol.steps < 600) and sol.stats.shape == (2, 7)
    assert "noisy" in capsys.readouterr().err


def test_bad_noisy_input():
    sa = af.SA(1.0)
    x0 = af.init.uniform(jax.random.key(8), 4, 3)
    with pytest.raises(ValueError, match="fixed-step"):
        af.simulate(Noisy(sa, 0.1), x0, 1.0)
    with pytest.raises(ValueError, match="dt is required"):
        af.simulate(Noisy(sa, 0.1), x0, 1.0, solver="euler")
    with pytest.raises(ValueError, match="sigma"):
        Noisy(sa, -1.0)
    with pytest.raises(ValueError, match="kappa"):
        Noisy.from_kappa(sa, 0.0)
    with pytest.raises(ValueError, match="attnflow field"):
        Noisy(lambda t, x: x, 0.1)

    class Flat(Still):
        geometry = "euclidean"

    with pytest.raises(ValueError, match="R\\^d"):
        Noisy(Flat(), 0.1)
    with pytest.raises(ValueError, match="key"):
        af.simulate(Noisy(sa, 0.1), x0, 1.0, solver="euler", dt=0.1, key="seven")


def test_a_field_reports_its_noise_and_its_deterministic_part():
    sa, usa = af.SA(1.0), af.USA(0.5)
    ff = af.FeedForward(np.ones((4, 3)), None, np.ones((3, 4)))
    field = Noisy(sa, 0.3) + ff
    assert float(field.noise_sigma) == pytest.approx(0.3)
    # independent noises add in quadrature: √(0.3² + 0.4² + 1.2²) = 1.3
    assert float((Noisy(sa, 0.3) + Noisy(Noisy(usa, 0.4), 1.2)).noise_sigma) == pytest.approx(1.3)
    np.testing.assert_allclose(Noisy(sa, [0.6, 0.8]).noise_sigma, [0.6, 0.8])
    assert sa.noise_sigma is None and ff.noise_sigma is None and (sa + ff).noise_sigma is None
    assert sa.deterministic() is sa and Noisy(Noisy(usa, 0.4), 1.2).deterministic() is usa
    stripped = field.deterministic()
    assert stripped.terms == (sa, ff) and stripped.noise_sigma is None
    assert float(noise_sigma(field)) == float(field.noise_sigma) and deterministic(sa) is sa


@pytest.mark.slow
def test_noisy_layer_wise_weights_step_to_the_layer_switches():
    layers = LayerWise.redrawn(af.SA(1.0), jax.random.key(3), "ginibre", d=3, n_layers=3, tau=0.3)
    x0 = af.init.uniform(jax.random.key(4), 5, 3)
    np.testing.assert_array_equal(Noisy(layers, 0.2).jump_times(1.0), layers.jump_times(1.0))
    # σ = 0: the noise sub-steps leave the tokens as they are, so the run is the deterministic one
    noisy = af.simulate(Noisy(layers, 0.0), x0, 1.0, solver="rk4", dt=0.05)
    plain = af.simulate(layers, x0, 1.0, solver="rk4", dt=0.05)
    np.testing.assert_allclose(noisy.x_final, plain.x_final, rtol=0, atol=1e-13)
