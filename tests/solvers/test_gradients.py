"""Reverse-mode gradients through ``af.simulate``: every fixed-step and adaptive method, with respect to β,
Q, K, V and x0, on the sphere and off it (no layer norm), against central finite differences in float64.

The loss reads the final state and one intermediate save. For the adaptive methods the tolerances are
tight, so that the finite differences see the same accepted steps (the gradient is that of the
discrete solution, which is what an optimizer needs)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af

N, D = 5, 3
SLOW = pytest.mark.slow  # each compiles its own gradient program (5–20 s): one loop of each kind runs by default
FIXED = [
    pytest.param("euler", {}, marks=SLOW),
    pytest.param("renormalized_euler", {}, marks=SLOW),
    ("rk4", {}),
    pytest.param("lie_euler", {}, marks=SLOW),
    pytest.param("cg3", {}, marks=SLOW),
    pytest.param("lie_trotter", {}, marks=SLOW),
    pytest.param("ab4", {}, marks=SLOW),  # the grid loop's gradient runs by default at large d, below
    pytest.param("rk4", {"dense": True}, marks=SLOW, id="rk4-dense"),
]
ADAPTIVE = [
    "tsit5",
    pytest.param("dopri5", marks=SLOW),
    pytest.param("dopri8", marks=SLOW),
    pytest.param("kvaerno5", marks=SLOW),
]
SOLVERS = {"euler", "renormalized_euler", "rk4", "lie_euler", "cg3", "lie_trotter", "ab4"}


def parameters(seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        beta=jnp.asarray(1.3),
        Q=jnp.asarray(np.eye(D) + 0.3 * rng.normal(size=(D, D))),
        K=jnp.asarray(np.eye(D) + 0.3 * rng.normal(size=(D, D))),
        V=jnp.asarray(np.eye(D) + 0.2 * rng.normal(size=(D, D))),
        x0=jnp.asarray(rng.normal(size=(N, D))),
    )


def make_loss(solver, options, sphere: bool):
    target = jnp.asarray(np.random.default_rng(9).normal(size=(N, D)))
    kwargs = dict(solver=solver, ts=jnp.asarray([0.0, 0.4, 1.0]), **options)
    if solver in SOLVERS:
        kwargs["dt"] = 0.05
    else:
        kwargs.update(rtol=1e-11, atol=1e-13)

    def loss(p):
        field = af.SA(p["beta"], Q=p["Q"], K=p["K"], V=p["V"])
        sol = af.simulate(field if sphere else af.NoLN(field), p["x0"], 1.0, **kwargs)
        return jnp.sum((sol.xs[-1] - target) ** 2) + 0.5 * jnp.sum(sol.xs[1][:, 0])

    return loss


def check_against_differences(loss, p, tolerance=1e-5):
    grad = jax.grad(loss)(p)
    rng = np.random.default_rng(1)
    for name, value in p.items():
        direction = jnp.asarray(rng.normal(size=np.shape(value)))
        h = 1e-5 * float(jnp.maximum(1.0, jnp.max(jnp.abs(value))))
        plus = dict(p, **{name: value + h * direction})
        minus = dict(p, **{name: value - h * direction})
        difference = (loss(plus) - loss(minus)) / (2 * h)
        analytic = jnp.sum(grad[name] * direction)
        assert abs(float(analytic) / float(difference) - 1) < tolerance, (name, float(analytic), float(difference))


@pytest.mark.slow
@pytest.mark.parametrize("solver, options", FIXED)
def test_fixed_step_gradients_on_the_sphere(solver, options):
    check_against_differences(make_loss(solver, options, sphere=True), parameters())


@pytest.mark.slow
@pytest.mark.parametrize("solver", ADAPTIVE)
def test_adaptive_gradients_on_the_sphere(solver):
    check_against_differences(make_loss(solver, {}, sphere=True), parameters())


@pytest.mark.parametrize("solver", ["rk4", pytest.param("tsit5", marks=SLOW)])
def test_gradients_off_the_sphere(solver):
    check_against_differences(make_loss(solver, {}, sphere=False), parameters(seed=2))


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_ensembles_and_refusals_under_differentiation():
    """A β ensemble of 70 members (which eager runs give to the queue) is one vmapped solve under jax.grad;
    explicit groups refuse, naming what works."""
    x0 = jnp.asarray(np.random.default_rng(3).normal(size=(70, N, D)))

    def loss(beta, **kwargs):
        sol = af.simulate(af.SA(beta * jnp.linspace(0.5, 2.0, 70)), x0, 1.0, rtol=1e-10, atol=1e-12, **kwargs)
        return jnp.sum(sol.xs[:, -1, :, 0] ** 2)

    g = jax.grad(loss)(1.0)
    h = 1e-5
    assert abs(float(g) / float((loss(1.0 + h) - loss(1.0 - h)) / (2 * h)) - 1) < 1e-5
    with pytest.raises(ValueError, match="leave group_size=None"):
        jax.grad(lambda b: loss(b, group_size=8))(1.0)


@pytest.mark.slow
@pytest.mark.parametrize("solver, options", [("rk4", {}), ("ab4", {})])
def test_gradients_where_the_loops_take_compiler_options(solver, options):
    """From d = PRODUCTS_FROM_D on, the eager loops compile with options a nested jit cannot take: under the
    caller's trace they compile without them."""
    from attnflow.solvers.compiler import PRODUCTS_FROM_D

    x0 = jnp.asarray(np.random.default_rng(5).normal(size=(3, PRODUCTS_FROM_D)))

    def loss(beta):
        sol = af.simulate(af.SA(beta), x0, 0.5, solver=solver, dt=0.1, **options)
        return jnp.sum(sol.xs[-1][:, :3] ** 2)

    h = 1e-5
    assert abs(float(jax.grad(loss)(1.0)) / float((loss(1.0 + h) - loss(1.0 - h)) / (2 * h)) - 1) < 1e-5
