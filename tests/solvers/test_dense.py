"""Dense output of RK4 on a uniform grid: saves interpolated between steps, not stepped onto."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af

X0 = af.init.uniform(11, 8, 3)
FIELD = af.SA(1.5)
# save times that fall between the grid points of every step size below
TS = np.array([0.0, 0.137, 0.71, 1.333, 1.9, 2.0])


@pytest.fixture(scope="module")
def reference():
    return af.simulate(FIELD, X0, 2.0, ts=TS, solver="dopri8", rtol=1e-14, atol=1e-14).xs


@pytest.mark.slow
def test_interpolated_saves_converge_at_fourth_order(reference):
    dts = (0.4, 0.2, 0.1, 0.05)
    errors = []
    for dt in dts:
        sol = af.simulate(FIELD, X0, 2.0, ts=TS, solver="rk4", dt=dt, dense=True)
        assert int(sol.steps) == round(2.0 / dt)  # the grid, not the save times, sets the steps
        errors.append(float(jnp.max(jnp.abs(sol.xs - reference))))
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert min(errors) > 1e-12
    assert abs(slope - 4) < 0.3, (slope, errors)


@pytest.mark.slow
def test_saves_on_grid_points_equal_plain_rk4_and_stay_on_the_sphere():
    ts = np.linspace(0.0, 3.0, 7)  # every save a grid point of dt = 0.25
    dense = af.simulate(FIELD, X0, 3.0, ts=ts, solver="rk4", dt=0.25, dense=True)
    plain = af.simulate(FIELD, X0, 3.0, ts=ts, solver="rk4", dt=0.25)
    assert float(jnp.max(jnp.abs(dense.xs - plain.xs))) < 1e-14
    assert float(jnp.max(jnp.abs(dense.x_final - plain.x_final))) < 1e-14
    between = af.simulate(FIELD, X0, 3.0, ts=np.linspace(0.0, 3.0, 41), solver="rk4", dt=0.25, dense=True)
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(between.xs, axis=-1) - 1.0))) < 1e-14


def test_many_saves_cost_no_extra_steps_and_batch_members_agree():
    beta = jnp.array([0.5, 2.0, 6.0])
    ts = np.linspace(0.0, 10.0, 301)
    batch = af.simulate(af.SA(beta), X0, 10.0, ts=ts, solver="rk4", dt=0.5, dense=True)
    assert np.all(np.asarray(batch.steps) == 20)
    for m, b in enumerate(np.asarray(beta)):
        one = af.simulate(af.SA(float(b)), X0, 10.0, ts=ts, solver="rk4", dt=0.5, dense=True)
        assert float(jnp.max(jnp.abs(batch.xs[m] - one.xs))) < 1e-13


@pytest.mark.slow
def test_stop_when_clustered_holds_the_state_where_the_member_stopped():
    x0 = af.init.cap(3, 8, 3, 0.3, batch=2)
    ts = np.linspace(0.0, 20.0, 81)
    delta = 1e-4
    sol = af.simulate(af.SA(1.0), x0, 20.0, ts=ts, solver="rk4", dt=0.5, dense=True, stop_when_clustered=delta)
    t_event = np.asarray(sol.t_event)
    assert np.all(np.isfinite(t_event)) and np.all(t_event < 20.0)
    for m in range(2):
        after = ts >= t_event[m]
        held = np.asarray(sol.xs[m][after])
        assert np.max(np.abs(held - held[-1])) < 1e-15
        assert np.max(np.abs(held[-1] - np.asarray(sol.x_final[m]))) < 1e-15
        gram = held[-1] @ held[-1].T
        assert gram.min() >= 1.0 - delta
    # the event lands on a step end at most one step after the exact hitting time
    exact = af.simulate(af.SA(1.0), x0, 20.0, solver="dopri8", rtol=1e-10, atol=1e-12, stop_when_clustered=delta)
    assert np.all(t_event >= np.asarray(exact.t_event) - 1e-6)
    assert np.all(t_event <= np.asarray(exact.t_event) + 0.5 + 1e-9)


@pytest.mark.parametrize("solver", ["euler", "renormalized_euler", "lie_euler", "cg3"])
def test_dense_needs_an_interpolant(solver):
    with pytest.raises(ValueError, match="solver='rk4'"):
        af.simulate(FIELD, X0, 1.0, dense=True, solver=solver, dt=0.1)


def test_adaptive_solvers_already_save_from_dense_output():
    ts = np.linspace(0.0, 1.0, 11)
    a = af.simulate(FIELD, X0, 1.0, ts=ts, dense=True)
    b = af.simulate(FIELD, X0, 1.0, ts=ts)
    assert float(jnp.max(jnp.abs(a.xs - b.xs))) == 0.0


def test_dense_refuses_noise():
    with pytest.raises(ValueError, match="noisy"):
        af.simulate(af.Noisy(FIELD, 0.1), X0, 1.0, solver="rk4", dt=0.1, dense=True)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_phase_diagram_method_is_more_accurate_than_the_authors_euler():
    # fig3's defaults (RK4 dt = 0.75, dense output, float32) against Euler dt = 0.1 in float64, the
    # authors' renormalized one and attnflow's projected one, all measured against a tight reference on
    # the phase diagram's own setting (d = 2, n = 32, t ≤ 30)
    from attnflow.experiments.builtin import EXPERIMENTS

    defaults = EXPERIMENTS["fig3-phase-diagram"].defaults
    assert (defaults["solver"], defaults["dt"], defaults["dense"], defaults["dtype"], defaults["circle"]) == (
        "rk4",
        0.75,
        True,
        "float32",
        "auto",
    )
    x0 = af.init.uniform(5, 32, 2, batch=16)
    ts = np.linspace(0.0, 30.0, 61)
    ref = af.simulate(af.SA(4.0), x0, 30.0, ts=ts, solver="dopri8", rtol=1e-11, atol=1e-11).xs
    method = dict(solver="rk4", dt=0.75, dense=True, dtype="float32")
    # d = 2 runs in angles (circle = 'auto'); the planar form is what every other d integrates
    angles = af.from_angles(af.simulate(af.Circle(4.0), af.to_angles(x0), 30.0, ts=ts, **method).xs)
    plane = af.simulate(af.SA(4.0), x0, 30.0, ts=ts, **method).xs
    eulers = [
        af.simulate(af.SA(4.0), x0, 30.0, ts=ts, solver=solver, dt=0.1).xs for solver in ("renormalized_euler", "euler")
    ]

    def error(xs):
        return np.max(np.abs(np.asarray(xs, dtype=float) - np.asarray(ref)), axis=(1, 2, 3))

    def fraction_error(xs):  # the figure's statistic, over members and save times
        return np.mean(
            np.abs(
                np.asarray(af.clustered_fraction(np.asarray(xs, dtype=float), 1e-3))
                - np.asarray(af.clustered_fraction(ref, 1e-3))
            )
        )

    for ours in (angles, plane):
        for euler in eulers:
            assert error(ours).max() < error(euler).max()
            assert np.median(error(ours)) < np.median(error(euler)) / 5
            assert fraction_error(ours) < fraction_error(euler) / 2
    # AB4 at dt = 0.25 on the same grid: 123 evaluations instead of 160, stable (SA's rates ≤ 1 in
    # modulus on the negative axis, h|λ| ≤ 0.25 < 0.3), and a closer clustered fraction than RK4's
    ab4 = af.from_angles(
        af.simulate(af.Circle(4.0), af.to_angles(x0), 30.0, ts=ts, solver="ab4", dt=0.25, dtype="float32").xs
    )
    assert all(error(ab4).max() < error(euler).max() / 5 for euler in eulers)
    assert fraction_error(ab4) < fraction_error(angles)


def test_ab4_converges_at_fourth_order_on_the_grid_with_one_evaluation_per_step(reference):
    dts = (0.2, 0.1, 0.05, 0.025)
    errors = []
    for dt in dts:
        sol = af.simulate(FIELD, X0, 2.0, ts=TS, solver="ab4", dt=dt)
        assert int(sol.steps) == round(2.0 / dt)  # saves interpolated, never stepped onto
        errors.append(float(jnp.max(jnp.abs(sol.xs - reference))))
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert min(errors) > 1e-12
    assert abs(slope - 4) < 0.3, (slope, errors)
    # on the sphere to rounding error, saves between the steps included
    sol = af.simulate(FIELD, X0, 3.0, ts=np.linspace(0.0, 3.0, 41), solver="ab4", dt=0.25)
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(sol.xs, axis=-1) - 1.0))) < 1e-14


def test_ab4_starts_with_three_rk4_steps_then_follows_the_adams_bashforth_recurrence():
    from attnflow.solvers.dense import AB4_START

    h, field = 0.25, af.SA(2.0)
    ts = h * np.arange(7)
    sol = af.simulate(field, X0, ts[-1], ts=ts, solver="ab4", dt=h)
    rk4 = af.simulate(field, X0, ts[AB4_START], ts=ts[: AB4_START + 1], solver="rk4", dt=h)
    assert float(jnp.max(jnp.abs(sol.xs[: AB4_START + 1] - rk4.xs))) < 1e-15
    # every later step: x_k+1 = normalize(x_k + h/24 (55 f_k − 59 f_k−1 + 37 f_k−2 − 9 f_k−3))
    xs = np.asarray(sol.xs)
    fs = [np.asarray(field(0.0, jnp.asarray(x))) for x in xs]
    for k in range(AB4_START, len(ts) - 1):
        y = xs[k] + h / 24 * (55 * fs[k] - 59 * fs[k - 1] + 37 * fs[k - 2] - 9 * fs[k - 3])
        y /= np.linalg.norm(y, axis=-1, keepdims=True)
        assert np.max(np.abs(y - xs[k + 1])) < 1e-14


@pytest.mark.slow
def test_ab4_members_stop_at_consensus_and_batch_members_agree():
    beta = jnp.array([0.5, 2.0, 6.0])
    ts = np.linspace(0.0, 10.0, 101)
    batch = af.simulate(af.SA(beta), X0, 10.0, ts=ts, solver="ab4", dt=0.25)
    for m, b in enumerate(np.asarray(beta)):
        one = af.simulate(af.SA(float(b)), X0, 10.0, ts=ts, solver="ab4", dt=0.25)
        assert float(jnp.max(jnp.abs(batch.xs[m] - one.xs))) < 1e-13
    x0 = af.init.cap(3, 8, 3, 0.3, batch=2)
    delta = 1e-4
    sol = af.simulate(
        af.SA(1.0), x0, 20.0, ts=np.linspace(0.0, 20.0, 81), solver="ab4", dt=0.25, stop_when_clustered=delta
    )
    exact = af.simulate(af.SA(1.0), x0, 20.0, solver="dopri8", rtol=1e-10, atol=1e-12, stop_when_clustered=delta)
    t_event = np.asarray(sol.t_event)
    assert np.all(t_event >= np.asarray(exact.t_event) - 1e-6)
    assert np.all(t_event <= np.asarray(exact.t_event) + 0.25 + 1e-9)
    assert np.max(np.abs(np.asarray(sol.xs[:, -1]) - np.asarray(sol.x_final))) < 1e-15


def test_ab4_refuses_noise_and_switching_weights():
    with pytest.raises(ValueError, match="stochastic field: solver 'ab4'"):
        af.simulate(af.Noisy(FIELD, 0.1), X0, 1.0, solver="ab4", dt=0.1)
    from attnflow.experiments.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="noise > 0 integrates an SDE"):
        load_config(None, ["solver=ab4", "dt=0.1", "noise=0.5"])
    with pytest.raises(ConfigError, match="solver = 'ab4'"):
        load_config(None, ["solver=ab4", "dt=0.1", "weights=ginibre", "layer_tau=1"])


@pytest.mark.slow
def test_library_fusions_of_products_change_no_result(monkeypatch):
    # d ≥ 9 on CPUs: the loop is compiled with XLA's YNNPACK fusions of dots (solvers/compiler.py);
    # the same run compiled with XLA's defaults gives the same states to rounding
    from attnflow.solvers import compiler

    x0 = af.init.uniform(11, 12, 16, batch=3)
    field = af.SA(np.array([0.5, 3.0, 8.0]))
    ts = np.linspace(0.0, 4.0, 9)
    assert compiler.loop_options(16) == (compiler.PRODUCTS_ON_CPU if jax.default_backend() == "cpu" else {})
    fused = af.simulate(field, x0, 4.0, ts=ts, solver="rk4", dt=0.25, dense=True)
    monkeypatch.setattr(compiler, "PRODUCTS_FROM_D", 10**9)
    plain = af.simulate(field, x0, 4.0, ts=ts, solver="rk4", dt=0.25, dense=True)
    np.testing.assert_allclose(fused.xs, plain.xs, atol=1e-13)
    assert float(af.particles.norm_error(fused.xs)) < 1e-14


@pytest.mark.slow
def test_saves_after_every_member_stopped_are_held_only_for_saves_that_do_not_read_t():
    # members that reach consensus early: with save_reads_time=False their later saves repeat the
    # values computed at the held states (the same numbers, not computed again); a save that reads
    # t keeps reading it
    x0 = af.init.cap(2, 10, 3, angle=0.5, batch=4)  # in a cap: one cluster, quickly
    field = af.SA(np.array([1.0, 2.0, 3.0, 4.0]))
    ts = np.linspace(0.0, 20.0, 41)

    def stats(t, x):
        return {"gap": af.particles.observables.clustered_fraction(x, 1e-3), "norm": jnp.sum(x * x)}

    kw = dict(ts=ts, solver="rk4", dt=0.25, dense=True, stop_when_clustered=1e-4, save=stats)
    held = af.simulate(field, x0, 20.0, save_reads_time=False, **kw)
    fresh = af.simulate(field, x0, 20.0, **kw)
    assert float(np.max(held.t_event)) < 15.0  # every member stopped well before t1
    for k in ("gap", "norm"):
        np.testing.assert_array_equal(held.stats[k], fresh.stats[k])
    assert np.all(held.stats["gap"][:, -1] == 1.0)
    timed = af.simulate(
        field,
        x0,
        20.0,
        ts=ts,
        solver="rk4",
        dt=0.25,
        dense=True,
        stop_when_clustered=1e-4,
        save=lambda t, x: t + 0.0 * x[0, 0],
    )
    np.testing.assert_allclose(timed.stats[:, -1], 20.0)
