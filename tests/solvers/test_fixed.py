"""``renormalized_euler``: the step of the authors' phase-diagram script, x ← (x + h v) / ‖·‖ with the
unprojected velocity v, reproduced to rounding; its relation h_eff = h / (1 + h⟨x, v⟩) to the projected
``euler``; plain Euler in R^d; refused in angles, where ``circle = 'auto'`` keeps the points."""

import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import field_config as models
from attnflow.solvers.fixed import Euler, RenormalizedEuler


def _baseline():
    """benchmarks/baseline.py, the authors' scheme in NumPy (not part of the package)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "baseline.py"
    spec = importlib.util.spec_from_file_location("attnflow_benchmarks_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


baseline = _baseline()
N, D, BETA, H, T1 = 32, 8, 1.0, 0.1, 5.0  # one cell of the phase diagram, at the authors' step
X0 = af.init.uniform(0, N, D, batch=64, dtype=jnp.float64)


def test_reproduces_the_authors_scheme_to_rounding_and_lags_behind_the_flow():
    xb, fractions = baseline.sa_euler(np.asarray(X0), BETA, T1, H)
    xr = af.simulate(af.SA(BETA), X0, T1, solver="renormalized_euler", dt=H).x_final
    assert float(np.max(np.abs(np.asarray(xr) - xb))) < 1e-12
    authors = float(np.mean(af.clustered_fraction(xr, 1e-3)))
    assert authors == pytest.approx(float(np.mean(fractions[-1])), abs=1e-12)
    # measured: 0.041 for these 64 members (0.048 over fig3's first 1024 seeds, against 0.155 for the
    # projected euler and 0.122 for the flow itself)
    assert authors == pytest.approx(0.0412, abs=5e-4)
    # its steps are h/(1 + h⟨x, v⟩) ≈ h/1.1 long near clusters, so its clusters form late: fewer
    # clustered pairs than the exact flow (here RK4 at h = 0.05: the fraction of dopri8 at rtol 1e-10,
    # 0.106); the projected euler overshoots (0.133)
    exact = float(np.mean(af.clustered_fraction(af.simulate(af.SA(BETA), X0, T1, solver="rk4", dt=0.05).x_final, 1e-3)))
    projected = float(
        np.mean(af.clustered_fraction(af.simulate(af.SA(BETA), X0, T1, solver="euler", dt=H).x_final, 1e-3))
    )
    assert authors < exact / 2 < exact < projected


@pytest.mark.parametrize("beta", [1.0, 4.0])
def test_reproduces_the_authors_usa_with_their_shrunk_step(beta):
    dt = baseline.usa_dt(beta)  # dt / max(√β e^{β − 1/2}, 1)
    t1 = 40 * dt  # whole steps of exactly dt, as the script takes them
    xb, _ = baseline.sa_euler(np.asarray(X0[:8]), beta, t1, dt, model="usa")
    xr = af.simulate(af.USA(beta), X0[:8], t1, solver="renormalized_euler", dt=dt).x_final
    assert float(np.max(np.abs(np.asarray(xr) - xb))) < 1e-12
    # the projected euler is another scheme: it differs at first order in dt
    xe = af.simulate(af.USA(beta), X0[:8], t1, solver="euler", dt=dt).x_final
    assert float(np.max(np.abs(np.asarray(xe) - xb))) > 1e-4


def test_one_step_is_the_projected_step_with_the_effective_step():
    # x + h v = (1 + h⟨x, v⟩)(x + h_eff P_x v): the renormalized points agree, with one h_eff per particle
    rng = np.random.default_rng(3)
    field = af.SA(
        2.0,
        Q=np.eye(5) + 0.4 * rng.normal(size=(5, 5)),
        K=np.eye(5) + 0.4 * rng.normal(size=(5, 5)),
        V=np.eye(5) + 0.5 * rng.normal(size=(5, 5)),
    )
    x = af.init.uniform(4, 9, 5)
    for h in (0.5, 0.01):
        h_eff = h / (1.0 + h * jnp.sum(x * field.drift(0.0, x), axis=-1, keepdims=True))
        np.testing.assert_allclose(
            RenormalizedEuler().step(field, 0.0, x, h), Euler().step(field, 0.0, x, h_eff), rtol=0, atol=2e-15
        )


def test_off_the_sphere_it_is_plain_euler():
    x0 = af.init.uniform(5, 6, 3) * jnp.asarray([[1.0], [2.0], [0.5], [1.5], [3.0], [1.0]])
    for field in (af.PreLN(af.SA(1.5)), af.PeriLN(af.SA(1.5))):
        runs = [
            af.simulate(field, x0, 1.0, ts=np.linspace(0, 1, 5), solver=s, dt=0.05).xs
            for s in ("renormalized_euler", "euler")
        ]
        np.testing.assert_array_equal(*runs)
        # in R^d nothing is renormalized: the tokens' norms change
        assert float(jnp.max(jnp.abs(jnp.linalg.norm(runs[0][-1], axis=-1) - jnp.linalg.norm(x0, axis=-1)))) > 0.1


def test_refused_in_angles_and_circle_auto_keeps_points():
    angles = af.to_angles(af.init.uniform(3, 6, 2))
    for field in (af.Circle(2.0), af.Coalesced(af.Circle(2.0), 1e-10)):
        with pytest.raises(
            ValueError, match="renormalized_euler' steps points of the sphere with their unprojected velocity"
        ) as info:
            af.simulate(field, angles, 1.0, solver="renormalized_euler", dt=0.1)
        assert str(info.value).endswith("or use euler, rk4, lie_trotter, ab4, tsit5, dopri5, dopri8 or kvaerno5")
    base = dict(n=6, d=[2], beta=[1.0], t1=1.0, dt=0.1, circle="auto")
    assert models.in_angles(load_config(dict(base, solver="euler")), 2)
    config = load_config(dict(base, solver="renormalized_euler"))
    assert not models.in_angles(config, 2)
    assert models.build_field(config, np.asarray(1.0), np.zeros(1, int), 2).geometry == "sphere"
    with pytest.raises(
        ConfigError,
        match="circle = 'yes' integrates angles in R; solver 'renormalized_euler' "
        "steps points with their unprojected velocity",
    ):
        load_config(dict(base, solver="renormalized_euler", circle="yes"))


def test_runs_on_the_circle_in_points_as_the_authors_do():
    # d = 2 with points: the same scheme as the script at d = 2 (the SA field's planar fast path is not involved)
    x0 = X0[:16, :, :2] / jnp.linalg.norm(X0[:16, :, :2], axis=-1, keepdims=True)
    xb, _ = baseline.sa_euler(np.asarray(x0), 3.0, 2.0, H)
    xr = af.simulate(af.SA(3.0), x0, 2.0, solver="renormalized_euler", dt=H).x_final
    assert float(np.max(np.abs(np.asarray(xr) - xb))) < 1e-12
