"""The registry of integration methods: every list of solver names derives from it, and what each method
declares (order, rotations, dense output, the queue, state copies) is what it does."""

import diffrax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

import attnflow as af
from attnflow.experiments import config as cfgmod
from attnflow.experiments.run import memory
from attnflow.solvers import dense, queue, simulation
from attnflow.solvers.fixed import FixedStep
from attnflow.solvers.methods import METHODS, Method, names, spoken

X0 = af.init.uniform(11, 8, 3)
FIELD = af.SA(1.5)


def test_every_list_of_solver_names_derives_from_the_registry():
    assert tuple(METHODS) == names() == simulation.SOLVERS == af.SOLVERS == cfgmod.SOLVERS
    assert cfgmod.KEYS["solver"].choices == names()
    assert names() == (
        "euler",
        "renormalized_euler",
        "rk4",
        "lie_euler",
        "cg3",
        "lie_trotter",
        "ab4",
        "tsit5",
        "dopri5",
        "dopri8",
        "kvaerno5",
    )
    assert (
        cfgmod.FIXED_STEP_SOLVERS
        == names("fixed")
        == ("euler", "renormalized_euler", "rk4", "lie_euler", "cg3", "lie_trotter", "ab4")
    )
    assert names("adaptive") == ("tsit5", "dopri5", "dopri8", "kvaerno5")
    assert cfgmod.GRID_ONLY_SOLVERS == simulation.GRID_ONLY == names(grid_only=True) == ("ab4",)
    assert cfgmod.ROTATING_SOLVERS == names(rotating=True) == ("lie_euler", "cg3")
    assert set(names(angles=False)) == {"renormalized_euler", "lie_euler", "cg3"}
    assert cfgmod.ANGLE_SOLVERS == names(angles=True)
    assert dense.GRID_METHODS == names(dense=True) == ("rk4", "ab4")
    assert queue.QUEUE_METHODS == {"tsit5": (diffrax.Tsit5, 5), "dopri5": (diffrax.Dopri5, 5)}
    assert names(implicit=True) == ("kvaerno5",)
    assert memory.STATE_COPIES == {m.name: m.state_copies for m in METHODS.values()}


def test_names_refuses_unknown_kinds_and_flags():
    with pytest.raises(ValueError, match="kind must be"):
        names("implicit")
    with pytest.raises(ValueError, match="unknown Method flags: stiff"):
        names(stiff=True)
    assert spoken(["a"]) == "'a'" and spoken(["a", "b"]) == "'a' or 'b'"
    assert spoken(["a", "b", "c"], quote="") == "a, b or c"


@pytest.mark.parametrize("m", METHODS.values(), ids=list(METHODS))
def test_declarations_agree_with_the_classes(m: Method):
    assert m.kind in ("fixed", "adaptive")
    assert m.order >= 1 and m.state_copies >= 2
    if m.kind == "fixed":
        assert m.queue is False and m.implicit is False
        if m.grid_only:
            # stepped by the uniform-grid loop itself, and so always dense
            assert m.build is None and m.dense
        else:
            assert issubclass(m.build, FixedStep)
            assert (m.build.name, m.build.order) == (m.name, m.order)
            assert isinstance(m.make(), m.build)
    else:
        assert issubclass(m.build, diffrax.AbstractAdaptiveSolver)
        assert not (m.rotating or m.grid_only or m.dense)
        instance = m.make(1e-6, 1e-9)
        assert type(instance) is m.build
        assert instance.order(None) == m.order  # diffrax's own order of the method
        stages = len(m.build.tableau.c) + 1
        # the stages, the start and end points: the memory estimate counts at least these
        assert m.state_copies >= stages
        if m.queue:
            # the queue steps explicit pairs whose last stage is the next step's first
            assert not m.implicit and m.build.tableau.fsal
        if m.implicit:
            # full Newton, its tolerances 1e-2 of the step's
            assert isinstance(instance.root_finder, optx.Newton) and instance.root_finder.rtol == pytest.approx(1e-8)


@pytest.mark.parametrize("solver", names(rotating=True))
def test_rotating_methods_keep_points_on_the_sphere_at_any_step(solver):
    # β = 9 and steps of 0.5: far from the asymptotic range, yet every factor is a rotation
    xs = af.simulate(af.SA(9.0), X0, 10.0, ts=np.linspace(0.0, 10.0, 21), solver=solver, dt=0.5).xs
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(xs, axis=-1) - 1.0))) < 4e-16


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_rotating_methods_are_refused_off_the_sphere_and_the_others_run_there():
    angles = af.to_angles(af.init.uniform(3, 6, 2))
    circle = af.Circle(2.0)
    reference = af.simulate(circle, angles, 1.0, solver="dopri8", rtol=1e-12, atol=1e-12).x_final
    for solver in names(rotating=True):
        with pytest.raises(ValueError, match="rotations of the sphere") as info:
            af.simulate(circle, angles, 1.0, solver=solver, dt=0.1)
        assert str(info.value).endswith("use " + spoken(names(angles=True), quote=""))
    for solver in names(rotating=False, angles=False):
        with pytest.raises(ValueError, match="unprojected velocity") as info:
            af.simulate(circle, angles, 1.0, solver=solver, dt=0.1)
        assert str(info.value).endswith("use " + spoken(names(angles=True), quote=""))
    for solver in names(angles=True):
        out = af.simulate(circle, angles, 1.0, solver=solver, dt=0.01).x_final
        assert float(jnp.max(jnp.abs(out - reference))) < 1e-3, solver
    # in R^d (no layer norm) every method that does not only rotate runs
    noln = af.NoLN(af.SA(2.0))
    x0 = af.init.uniform(3, 6, 2)
    reference = af.simulate(noln, x0, 1.0, solver="dopri8", rtol=1e-12, atol=1e-12).x_final
    for solver in names(rotating=False):
        out = af.simulate(noln, x0, 1.0, solver=solver, dt=0.01).x_final
        # the tokens grow like e^t: the first-order methods' error ≈ 5e-3 of their norm
        assert float(jnp.max(jnp.abs(out - reference)) / jnp.max(jnp.abs(reference))) < 1e-2, solver


@pytest.mark.slow
def test_dense_methods_save_between_their_steps_and_the_others_are_refused():
    ts = np.linspace(0.0, 2.0, 8)  # save times off the grid of h = 0.05
    reference = af.simulate(FIELD, X0, 2.0, ts=ts, solver="dopri8", rtol=1e-13, atol=1e-13).xs
    for solver in names(dense=True):
        xs = af.simulate(FIELD, X0, 2.0, ts=ts, solver=solver, dt=0.05, dense=True).xs
        # fourth-order steps and a cubic Hermite interpolant of error O(h⁴)
        assert float(jnp.max(jnp.abs(xs - reference))) < 1e-5, solver
    for solver in names("fixed", dense=False):
        with pytest.raises(ValueError, match="dense=True interpolates RK4 or AB4 steps"):
            af.simulate(FIELD, X0, 2.0, ts=ts, solver=solver, dt=0.05, dense=True)


def test_grid_only_methods_step_on_the_grid_without_being_asked():
    ts = np.linspace(0.0, 2.0, 8)
    for solver in names(grid_only=True):
        plain = af.simulate(FIELD, X0, 2.0, ts=ts, solver=solver, dt=0.05).xs
        asked = af.simulate(FIELD, X0, 2.0, ts=ts, solver=solver, dt=0.05, dense=True).xs
        np.testing.assert_array_equal(plain, asked)
