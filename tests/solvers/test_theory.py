"""The paper's exact results, reproduced by simulation ([GLPR] §4–§6, docs/model.md §2)."""

import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import attnflow as af
from attnflow.particles import sphere

TIGHT = dict(solver="dopri8", rtol=1e-11, atol=1e-13)


def gamma_rhs(model, beta, n):
    """(6.9) for SA, (6.10) for USA (GLPR time)."""
    if model == "sa":
        return lambda t, g: 2 * (1 - g) * ((n - 1) * g + 1) / (np.exp(beta * (1 - g)) + (n - 1))
    return lambda t, g: (2 / n) * np.exp(beta * g) * (1 - g) * ((n - 1) * g + 1)


def gamma_reference(model, beta, n, rho0, ts, delta=None):
    event = None
    if delta is not None:
        event = lambda t, g: g[0] - (1 - delta)  # noqa: E731
        event.terminal = True
    sol = solve_ivp(
        gamma_rhs(model, beta, n), (0, ts[-1]), [rho0], t_eval=ts, method="DOP853", rtol=1e-13, atol=1e-15, events=event
    )
    return sol


def off_diagonal(x):
    g = np.asarray(jnp.einsum("...id,...jd->...ij", x, x))
    n = g.shape[-1]
    return g[..., ~np.eye(n, dtype=bool)]


@pytest.mark.slow
def test_two_particles_at_beta_zero_follow_tanh():
    # n = 2, β = 0: γ̇ = 1 − γ², so γ(t) = tanh(t + artanh ρ0)
    ts = np.linspace(0, 6, 61)
    for rho0 in (-0.6, 0.0, 0.45):
        x0 = af.init.equiangular(0, 2, 3, rho0)
        for field in (af.SA(0.0), af.USA(0.0)):
            sol = af.simulate(field, x0, 6.0, ts=ts, **TIGHT)
            # rtol 1e-11 over O(10) steps leaves ~1e-10 global error: 1e-8 is a safe bound
            np.testing.assert_allclose(off_diagonal(sol.xs)[:, 0], np.tanh(ts + np.arctanh(rho0)), atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize(
    "model, n, beta, rho0",
    [("sa", 4, 1.0, 0.0), ("sa", 8, 4.0, 0.0), ("sa", 6, 9.0, 0.2), ("usa", 5, 1.0, 0.0), ("usa", 8, 2.5, -0.1)],
)
def test_equiangular_starts_follow_the_ode(model, n, beta, rho0):
    # Thm 6.8: the configuration stays equiangular and γ solves (6.9) / (6.10)
    t1 = 8.0 if model == "sa" else 3.0
    ts = np.linspace(0, t1, 81)
    field = af.SA(beta) if model == "sa" else af.USA(beta)
    x0 = af.init.orthogonal(1, n, n + 1) if rho0 == 0 else af.init.equiangular(1, n, n + 1, rho0)
    sol = af.simulate(field, x0, t1, ts=ts, **TIGHT)
    ref = gamma_reference(model, beta, n, rho0, ts).y[0]
    # every pair, every time: the 1e-6 bound, with rtol 1e-11 leaving a wide margin
    np.testing.assert_allclose(off_diagonal(sol.xs), np.broadcast_to(ref[:, None], (81, n * (n - 1))), atol=1e-6)


@pytest.mark.parametrize("model, n, beta", [("sa", 6, 2.0), ("usa", 4, 1.0)])
def test_time_to_cluster_matches_the_ode_hitting_time(model, n, beta):
    delta = 1e-3
    field = af.SA(beta) if model == "sa" else af.USA(beta)
    sol = af.simulate(field, af.init.orthogonal(2, n, n), 50.0, stop_when_clustered=delta, **TIGHT)
    ref = gamma_reference(model, beta, n, 0.0, np.array([0.0, 50.0]), delta=delta)
    t_star = ref.t_events[0][0]
    # the event is located by Newton root finding on the dense output
    assert float(sol.t_event) == pytest.approx(t_star, rel=1e-6)


def test_simplex_is_stationary():
    n = 5
    x0 = af.init.equiangular(3, n, n - 1, -1 / (n - 1))
    sol = af.simulate(af.SA(3.0), x0, 10.0, **TIGHT)
    np.testing.assert_allclose(sol.xs[-1], x0, atol=1e-12)


def test_consensus_rate_of_theorem_6_3():
    # d ≥ n, uniform start: one cluster, ‖x_i − x*‖ ≤ C e^{−λt}. Near consensus SA contracts
    # x_i − x̄ at rate 1, so gaps 1 − ⟨x_i,x_j⟩ = ½‖x_i − x_j‖² decay like e^{−2t}.
    n, d = 16, 16
    ts = np.linspace(0, 40, 81)
    sol = af.simulate(af.SA(1.0), af.init.uniform(4, n, d), 40.0, ts=ts, **TIGHT)
    max_gap = np.asarray(jnp.max(sphere.pairwise_gaps(sol.xs), axis=(-2, -1)))
    assert max_gap[-1] < 1e-12  # one cluster
    late = (ts >= 20) & (max_gap > 1e-25)
    slope = np.polyfit(ts[late], np.log(max_gap[late]), 1)[0]
    assert slope == pytest.approx(-2.0, rel=0.02)


def test_energy_is_monotone():
    # [GLPR] §3: SA and USA with V = I increase E_β; with V = −I it decreases
    ts = np.linspace(0, 10, 101)
    x0 = af.init.uniform(5, 24, 3)
    beta = 2.0
    for field, sign in (
        (af.SA(beta), 1),
        (af.USA(beta), 1),
        (af.SA(beta, V=-np.eye(3)), -1),
        (af.USA(beta, V=-np.eye(3)), -1),
    ):
        sol = af.simulate(field, x0, 10.0, ts=ts, save=lambda t, x: af.energy(x, beta), **TIGHT)
        increments = sign * np.diff(np.asarray(sol.stats))
        assert increments.min() > -1e-12, field
        assert increments.sum() > 1e-3  # and it really moves


@pytest.mark.slow
def test_lemma_6_4_cap_start_stays_and_contracts():
    # all x_i(0) in {⟨x, w⟩ > 0}: min_i ⟨x_i(t), w⟩ is non-decreasing, and they converge to one point
    w = np.array([0.0, 0.0, 0.0, 1.0])
    x0 = af.init.cap(6, 40, 4, angle=1.4, w=w)
    ts = np.linspace(0, 30, 121)
    sol = af.simulate(
        af.SA(5.0),
        x0,
        30.0,
        ts=ts,
        save=lambda t, x: (jnp.min(x @ jnp.asarray(w)), jnp.max(sphere.pairwise_gaps(x))),
        **TIGHT,
    )
    lowest, spread = (np.asarray(a) for a in sol.stats)
    assert np.diff(lowest).min() > -1e-12
    assert lowest[0] > 0 and spread[-1] < 1e-6


@pytest.mark.slow
def test_sa_and_usa_coincide_at_beta_zero():
    x0 = af.init.uniform(7, 20, 3)
    a = af.simulate(af.SA(0.0), x0, 5.0, ts=np.linspace(0, 5, 11), **TIGHT)
    b = af.simulate(af.USA(0.0), x0, 5.0, ts=np.linspace(0, 5, 11), **TIGHT)
    np.testing.assert_allclose(a.xs, b.xs, atol=1e-9)


@pytest.mark.slow  # 10⁴ steps; norms to rounding stay checked by default in test_methods and test_variants
def test_unit_norms_after_ten_thousand_steps():
    x0 = af.init.uniform(8, 16, 5)
    for solver in ("euler", "renormalized_euler", "rk4", "lie_euler", "cg3"):
        sol = af.simulate(af.SA(3.0), x0, 100.0, solver=solver, dt=0.01)
        assert int(sol.steps) == 10_000
        assert float(sphere.norm_error(sol.x_final)) <= 1e-12, solver
    # a long adaptive run: thousands of projected steps at a tight tolerance
    sol = af.simulate(af.SA(3.0), x0, 100.0, solver="tsit5", rtol=1e-13, atol=1e-13)
    assert int(sol.steps) > 1000
    assert float(sphere.norm_error(sol.x_final)) <= 1e-12


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow)])  # float32: the narrower
@pytest.mark.parametrize("beta", [1e3, pytest.param(1e4, marks=pytest.mark.slow)])
def test_huge_beta_runs_are_finite(dtype, beta):
    x0 = af.init.uniform(9, 32, 3, dtype=dtype)
    for field in (af.SA(beta), af.USA(beta, time="rescaled")):
        for solver, kw in (("tsit5", {}), ("rk4", dict(dt=0.05))):
            sol = af.simulate(field, x0, 5.0, ts=np.linspace(0, 5, 6), solver=solver, **kw)
            assert sol.xs.dtype == jnp.dtype(dtype)
            assert bool(jnp.all(jnp.isfinite(sol.xs)))
            assert float(sphere.norm_error(sol.xs)) < (1e-5 if dtype == "float32" else 1e-13)
