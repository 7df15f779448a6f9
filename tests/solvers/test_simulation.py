"""simulate(): convergence orders, ensembles, on-the-fly statistics, events, progress, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles import sphere
from attnflow.solvers.methods import METHODS, names

X0 = af.init.uniform(11, 8, 3)
FIELD = af.SA(1.5)


@pytest.fixture(scope="module")
def reference():
    return af.simulate(FIELD, X0, 2.0, solver="dopri8", rtol=1e-14, atol=1e-14).x_final


FIXED_DTS = {
    "euler": (0.04, 0.02, 0.01, 0.005),
    "renormalized_euler": (0.04, 0.02, 0.01, 0.005),
    "lie_euler": (0.04, 0.02, 0.01, 0.005),
    "cg3": (0.2, 0.1, 0.05, 0.025),
    "rk4": (0.2, 0.1, 0.05, 0.025),
    "ab4": (0.2, 0.1, 0.05, 0.025),
}
# steps that divide t1 = 2 evenly, in the asymptotic range and above the reference's accuracy
EMBEDDED_DTS = {
    "tsit5": (0.2, 0.1, 0.05),
    "dopri5": (0.2, 0.1, 0.05),
    "dopri8": (2 / 3, 0.5, 0.4, 1 / 3, 0.25),
    "kvaerno5": (0.2, 0.1, 0.05),
}


def test_every_declared_order_is_measured():
    # lie_trotter's order is that of its splitting, measured on non-commuting terms in test_feedforward.py
    assert set(FIXED_DTS) | set(EMBEDDED_DTS) | {"lie_trotter"} == set(METHODS)
    assert set(FIXED_DTS) | {"lie_trotter"} == set(names("fixed"))


@pytest.mark.parametrize("solver, dts", FIXED_DTS.items())
def test_measured_order_of_convergence(reference, solver, dts):
    order = METHODS[solver].order
    errors = [
        float(jnp.max(jnp.abs(af.simulate(FIELD, X0, 2.0, solver=solver, dt=dt).x_final - reference))) for dt in dts
    ]
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    # the smallest error stays ≥ 1e-11, far above the reference's ~1e-13 accuracy
    assert min(errors) > 1e-11
    assert abs(slope - order) < 0.3, (solver, slope, errors)


@pytest.mark.slow
@pytest.mark.parametrize("solver, dts", EMBEDDED_DTS.items())
def test_measured_order_of_the_embedded_methods_at_constant_step(reference, solver, dts):
    order = METHODS[solver].order
    # an implicit method's Newton iterations are solved to 1e-2 of these tolerances
    tols = dict(rtol=1e-12, atol=1e-12) if METHODS[solver].implicit else {}
    errors = [
        float(
            jnp.max(
                jnp.abs(af.simulate(FIELD, X0, 2.0, solver=solver, dt=dt, adaptive=False, **tols).x_final - reference)
            )
        )
        for dt in dts
    ]
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert min(errors) > 1e-12
    assert abs(slope - order) < 0.3, (solver, slope, errors)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["tsit5", "dopri5", "dopri8"])
def test_adaptive_error_follows_the_tolerance(reference, solver):
    errors = [
        float(jnp.max(jnp.abs(af.simulate(FIELD, X0, 2.0, solver=solver, rtol=tol, atol=tol).x_final - reference)))
        for tol in (1e-5, 1e-8)
    ]
    # global error stays within a small factor of the tolerance and shrinks with it
    assert errors[0] < 1e-4 and errors[1] < 1e-7
    assert errors[1] < errors[0] / 10


def test_ensemble_over_beta_equals_individual_runs():
    betas = jnp.array([0.5, 2.0, 6.0])
    ts = np.linspace(0, 3, 7)
    batch = af.simulate(af.SA(betas), X0, 3.0, ts=ts, solver="rk4", dt=0.01)
    assert batch.xs.shape == (3, 7, 8, 3)
    for i, b in enumerate(betas):
        single = af.simulate(af.SA(float(b)), X0, 3.0, ts=ts, solver="rk4", dt=0.01)
        np.testing.assert_allclose(batch.xs[i], single.xs, atol=1e-13)


@pytest.mark.slow
def test_ensemble_over_initial_conditions_equals_individual_runs():
    x0 = af.init.uniform(12, 8, 3, batch=4)
    ts = np.linspace(0, 3, 4)
    batch = af.simulate(FIELD, x0, 3.0, ts=ts, rtol=1e-9, atol=1e-9)
    for i in range(4):
        single = af.simulate(FIELD, x0[i], 3.0, ts=ts, rtol=1e-9, atol=1e-9)
        # each member has its own step-size control, so the results agree to rounding
        np.testing.assert_allclose(batch.xs[i], single.xs, atol=1e-12)
        assert int(batch.steps[i]) == int(single.steps)


def test_batched_beta_and_x0_together_must_match():
    with pytest.raises(ValueError, match="x0 has a batch of 4 configurations but the field has 3 members"):
        af.simulate(af.SA(jnp.ones(3)), af.init.uniform(0, 8, 3, batch=4), 1.0)


@pytest.mark.slow
def test_statistics_on_the_fly_equal_statistics_of_saved_states():
    ts = np.linspace(0, 4, 9)

    def stat(t, x):
        return {"energy": af.energy(x, 1.5), "min_gap": jnp.min(sphere.pairwise_gaps(x) + 2 * jnp.eye(x.shape[0]))}

    for kw in (dict(solver="rk4", dt=0.05), dict(solver="tsit5")):
        full = af.simulate(FIELD, X0, 4.0, ts=ts, **kw)
        stats = af.simulate(FIELD, X0, 4.0, ts=ts, save=stat, **kw)
        assert stats.xs is None
        np.testing.assert_allclose(stats.stats["energy"], af.energy(full.xs, 1.5), rtol=1e-12)
        np.testing.assert_allclose(stats.x_final, full.x_final, atol=1e-14)


def test_fixed_step_hits_save_times_exactly():
    # save times off the dt grid: each interval is split into equal substeps ≤ dt
    ts = np.array([0.0, 0.3, 0.35, 1.0])
    sol = af.simulate(FIELD, X0, 1.0, ts=ts, solver="rk4", dt=0.1)
    assert int(sol.steps) == 3 + 1 + 7
    one = af.simulate(FIELD, X0, 0.35, solver="rk4", dt=0.05)
    np.testing.assert_allclose(sol.xs[2], one.x_final, atol=1e-6)  # rk4 at dt ≤ 0.1: error ~1e-7


def test_stop_when_clustered_freezes_members_and_records_time():
    betas = jnp.array([1.0, 1.0])
    x0 = jnp.stack([af.init.cap(0, 8, 3, angle=0.3), af.init.uniform(1, 8, 3)])
    sol = af.simulate(
        af.SA(betas), x0, 200.0, ts=np.linspace(0, 200, 5), solver="rk4", dt=0.05, stop_when_clustered=1e-3
    )
    t_event = np.asarray(sol.t_event)
    assert np.all(np.isfinite(t_event)) and t_event[0] < t_event[1]
    for i in range(2):
        g = np.asarray(sol.x_final[i] @ sol.x_final[i].T)
        # stopped within one step of the crossing: the gap shrinks by ≈ 2·gap·dt = 1e-4 per step
        assert 1 - 1e-3 <= g.min() < 1 - 1e-3 + 1.5e-4
    assert int(sol.steps[0]) == round(t_event[0] / 0.05)


def test_progress_goes_to_stderr(capsys):
    af.simulate(FIELD, X0, 1.0, solver="rk4", dt=0.01, progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert "t = 1 / 1 (100%)" in err


@pytest.mark.slow
def test_float32_runs_stay_float32():
    x0 = af.init.uniform(0, 8, 3, dtype="float32")
    sol = af.simulate(FIELD, x0, 1.0)
    assert sol.xs.dtype == jnp.float32 and sol.x_final.dtype == jnp.float32
    sol64 = af.simulate(FIELD, x0, 1.0, dtype="float64")
    assert sol64.xs.dtype == jnp.float64
    np.testing.assert_allclose(sol.xs, sol64.xs, atol=1e-5)


def test_changing_beta_does_not_recompile():
    compiled = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, duration, **kw: compiled.append(event) if "backend_compile" in event else None
    )
    x0 = af.init.uniform(0, 7, 3)  # a shape no other test uses, so the first call compiles
    af.simulate(af.SA(1.0), x0, 1.0, solver="rk4", dt=0.1)
    first = len(compiled)
    for beta in (2.0, 3.0, 4.0):
        af.simulate(af.SA(beta), x0, 1.0, solver="rk4", dt=0.1)
    assert first > 0 and len(compiled) == first


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(t1=-1.0), "t1 must be a finite number ≥ 0, got -1"),
        (dict(t1=float("inf")), "t1 must be a finite number"),
        (
            dict(solver="rk45"),
            "solver must be one of 'euler', 'renormalized_euler', 'rk4', 'lie_euler', 'cg3', 'lie_trotter', 'ab4', 'tsit5', "
            "'dopri5', 'dopri8'",
        ),
        (dict(solver="rk4"), "dt is required for the fixed-step solver 'rk4'"),
        (dict(solver="rk4", dt=0.0), "dt must be a finite number > 0"),
        (dict(rtol=0.0), "rtol must be a finite number > 0"),
        (dict(ts=[0.0, 2.0]), r"ts must lie in \[t0, t1\]"),
        (dict(ts=[0.5, 0.2]), "ts must be strictly increasing"),
        (dict(ts=[[0.5]]), "ts must be a non-empty 1-D array"),
        (dict(x0=np.ones((3,))), r"shape \(n, d\) or \(batch, n, d\)"),
        (dict(x0=np.array([[1.0, 0.0], [0.0, 0.0]])), "zero row at index"),
        (dict(x0=np.array([[1.0, np.inf]])), "non-finite"),
        (dict(dtype="float16"), "dtype must be 'float32' or 'float64'"),
        (dict(field=lambda t, x: x), "field must be an attnflow vector field"),
        (dict(stop_when_clustered=0.0), "stop_when_clustered must be a finite number > 0"),
    ],
)
def test_bad_arguments_are_refused_before_any_work(kwargs, message):
    args = dict(field=FIELD, x0=X0, t1=1.0)
    args.update(kwargs)
    field, x0, t1 = args.pop("field"), args.pop("x0"), args.pop("t1")
    with pytest.raises(ValueError, match=message):
        af.simulate(field, x0, t1, **args)


def test_unnormalized_rows_are_normalized():
    sol = af.simulate(FIELD, 3.0 * X0, 1.0, rtol=1e-9, atol=1e-9)
    ref = af.simulate(FIELD, X0, 1.0, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sol.xs, ref.xs, atol=1e-14)


def test_simulate_is_usable_inside_jax_transformations_of_beta():
    # β traced inside a user's own jit: no recompilation per value, same numbers
    run = jax.jit(lambda b: af.simulate(af.SA(b), X0, 1.0, solver="rk4", dt=0.1).x_final)
    np.testing.assert_allclose(run(2.0), af.simulate(af.SA(2.0), X0, 1.0, solver="rk4", dt=0.1).x_final, atol=1e-14)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_float32_adaptive_runs_stop_at_consensus_like_float64():
    """The event's root find works in float32 (its value in the default float dtype, its tolerance
    at float32's precision): the consensus times agree with float64 to float32 accuracy."""
    x0 = af.init.uniform(0, 8, 2, batch=2, dtype=jnp.float64)
    kw = dict(solver="tsit5", stop_when_clustered=1e-3, ts=np.linspace(0.0, 30.0, 5))
    t64 = np.asarray(af.simulate(af.SA(jnp.asarray([1.0, 2.0])), x0, 30.0, dtype="float64", **kw).t_event)
    t32 = np.asarray(af.simulate(af.SA(jnp.asarray([1.0, 2.0])), x0, 30.0, dtype="float32", **kw).t_event)
    assert np.isfinite(t64).all()
    np.testing.assert_allclose(t32, t64, rtol=1e-4)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_statistics_after_the_loop_equal_those_inside_it(monkeypatch):
    """Small adaptive solves apply ``save`` after the loop (loop.STATES_AFTER_LOOP_BYTES);
    forcing the in-loop path gives the same values, for members stopped at consensus (their later
    saves hold the stopped state), for integer statistics, and for grouped ensembles."""
    from attnflow.solvers import loop

    betas = jnp.array([1.0, 2.0, 6.0, 8.0])
    x0 = jnp.stack([af.init.cap(k, 8, 3, angle=0.4 + 0.3 * k) for k in range(4)])
    ts = np.linspace(0.0, 30.0, 16)

    def stat(t, x, field):
        g = x @ x.T
        return {"energy": af.energy(x, field.beta), "close": jnp.sum(g >= 1 - 1e-3)}

    kw = dict(ts=ts, solver="tsit5", save=stat, stop_when_clustered=1e-3)
    runs = {}
    for where, limit in (("after", loop.STATES_AFTER_LOOP_BYTES), ("inside", 0)):
        monkeypatch.setattr(loop, "STATES_AFTER_LOOP_BYTES", limit)
        runs[where] = [
            af.simulate(af.SA(betas), x0, 30.0, **kw),
            af.simulate(af.SA(betas), x0, 30.0, group_size=2, **kw),
        ]
    for after, inside in zip(runs["after"], runs["inside"]):
        t_event = np.asarray(after.t_event)
        assert np.isfinite(t_event).sum() >= 2  # some members stop and hold their state
        np.testing.assert_array_equal(t_event, np.asarray(inside.t_event))
        np.testing.assert_allclose(after.stats["energy"], inside.stats["energy"], rtol=1e-13)
        assert after.stats["close"].dtype == inside.stats["close"].dtype
        np.testing.assert_array_equal(after.stats["close"], inside.stats["close"])
