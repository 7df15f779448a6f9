"""A member whose state turns NaN or inf stops there; the run raises NonFiniteError naming it, keeping the rest."""

import jax.numpy as jnp
import numpy as np
import pytest
from field_helpers import BlowsUp

import attnflow as af
from attnflow.experiments.config import load_config
from attnflow.experiments.run import runner

TS = np.linspace(0.0, 3.0, 13)  # every 0.25
X0 = af.init.uniform(0, 8, 3)


def test_it_is_a_floating_point_error_exported_at_the_top():
    assert issubclass(af.NonFiniteError, FloatingPointError)


def test_usa_in_glpr_time_beyond_float32_names_float64():
    x0 = af.init.uniform(0, 8, 3, dtype="float32")
    # β = 70 passes the up-front overflow check (e^70 fits in float32), but a step's end point, of
    # size dt·e^70, no longer has a representable squared norm
    with pytest.raises(af.NonFiniteError, match=r"β = 70 is too large for float32.*dtype=float64") as err:
        af.simulate(af.USA(70.0), x0, 1.0, solver="rk4", dt=0.01)
    assert err.value.member == 0 and "rescaled" in str(err.value)
    # larger β are refused before running, with the same advice
    with pytest.raises(ValueError, match=r"float32.*float64"):
        af.simulate(af.USA(120.0), x0, 1.0, solver="rk4", dt=0.01)


@pytest.mark.slow
@pytest.mark.parametrize("solver,t_last", [("euler", 1.25), ("rk4", 1.0)])
def test_fixed_step_blow_up_keeps_what_came_before(solver, t_last):
    # Euler evaluates the field at the start of a step (finite up to t = 1 included), RK4 also at
    # its middle: the last finite states are at 1.25 and 1.0
    field = BlowsUp(3.0)
    with pytest.raises(af.NonFiniteError) as err:
        af.simulate(field, X0, 3.0, ts=TS, solver=solver, dt=0.25)
    e = err.value
    assert e.member == 0 and e.members == (0,) and e.t == t_last
    assert str(e).startswith(f"simulate: member 0 of 1 became non-finite after t = {t_last:g} (its last finite state)")
    assert "the step dt = 0.25 is likely too large for β = 3: lower dt or use an adaptive solver" in str(e)
    assert str(e).count(".") <= 3  # one sentence (the dots are in numbers)

    before = TS <= t_last
    ref = af.simulate(field, X0, t_last, ts=TS[before], solver=solver, dt=0.25)
    sol = e.solution
    np.testing.assert_allclose(sol.xs[before], ref.xs, rtol=0, atol=1e-14)
    assert np.all(np.isnan(sol.xs[~before]))
    np.testing.assert_allclose(sol.x_final, ref.x_final, rtol=0, atol=1e-14)
    assert int(sol.steps) == int(ref.steps) == round(t_last / 0.25)


@pytest.mark.slow
def test_adaptive_blow_up_stops_at_the_last_finite_time():
    with pytest.raises(af.NonFiniteError, match="whatever the step") as err:
        af.simulate(BlowsUp(3.0), X0, 3.0, ts=TS, solver="tsit5")
    e = err.value
    assert 1.0 - 1e-9 < e.t <= 1.0
    sol = e.solution
    ref = af.simulate(BlowsUp(3.0), X0, 1.0, ts=TS[TS < 1.0], solver="tsit5")
    np.testing.assert_allclose(sol.xs[TS < 1.0], ref.xs, rtol=0, atol=1e-9)
    assert np.all(np.isnan(sol.xs[TS > e.t]))
    assert np.all(np.isfinite(sol.x_final))


@pytest.mark.slow
@pytest.mark.parametrize(
    "solver,kw",
    [("rk4", dict(dt=0.25)), ("rk4", dict(dt=0.25, dense=True)), ("tsit5", {}), ("tsit5", dict(group_size=2))],
)
def test_only_the_failing_member_stops(solver, kw):
    betas = np.array([1.0, 1.5, 3.0, 2.0])  # member 2 blows up after t = 1
    x0 = af.init.uniform(1, 8, 3, batch=4)

    def stat(t, x):
        return {"gap": jnp.min(x @ x.T), "clusters": af.n_clusters(x, 1e-3)}

    with pytest.raises(af.NonFiniteError, match=r"^simulate: member 2 of 4 became non-finite after t = 1") as err:
        af.simulate(BlowsUp(betas), x0, 3.0, ts=TS, solver=solver, save=stat, **kw)
    sol = err.value.solution
    assert err.value.members == (2,)
    keep = [0, 1, 3]
    ref = af.simulate(BlowsUp(betas[keep]), x0[np.array(keep)], 3.0, ts=TS, solver=solver, save=stat, **kw)
    for name in ("gap", "clusters"):
        np.testing.assert_allclose(sol.stats[name][np.array(keep)], ref.stats[name], rtol=0, atol=1e-12)
        late = TS > err.value.t
        assert np.all(np.isnan(sol.stats[name][2, late])) and np.all(np.isfinite(sol.stats[name][2, ~late]))
    np.testing.assert_array_equal(sol.steps[np.array(keep)], ref.steps)
    np.testing.assert_allclose(sol.x_final[np.array(keep)], ref.x_final, rtol=0, atol=1e-12)


def test_several_failing_members_are_counted():
    with pytest.raises(af.NonFiniteError, match=r"member 1 of 3 \(and 1 other member\)") as err:
        af.simulate(BlowsUp([1.0, 3.0, 4.0]), X0, 2.0, solver="euler", dt=0.5)
    assert err.value.members == (1, 2) and err.value.times == (1.5, 1.5)


@pytest.mark.slow
def test_run_names_the_member_by_beta_and_seed():
    config = load_config(
        None,
        [
            "model=usa",
            "n=8",
            "d=3",
            "beta=1,70",
            "seeds=2",
            "seed=5",
            "t1=1",
            "n_save=5",
            "solver=rk4",
            "dt=0.01",
            "dtype=float32",
            "progress=false",
        ],
    )
    with pytest.raises(
        af.NonFiniteError,
        match=r"^run: the member d = 3, β = 70, seed = 5 \(and 1 other member\) "
        r"became non-finite after t = .*float64",
    ) as err:
        runner.run(config)
    e = err.value
    assert e.member == (3, 70.0, 5) and e.members == ((3, 70.0, 5), (3, 70.0, 6))
    result = e.result
    assert result.stats["mean_inner_product"].shape == (1, 2, 2, 5)
    assert np.all(np.isfinite(result.stats["mean_inner_product"][0, 0]))  # β = 1: complete
    late = result.ts > e.t
    assert np.all(np.isnan(result.stats["mean_inner_product"][0, 1][:, late]))
