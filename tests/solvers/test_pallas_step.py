"""SA's RK4 step fused into one Pallas kernel (``kernel="pallas"``, interpreted on CPU) against the XLA loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles import blocked
from attnflow.solvers import fused_rk4
from attnflow.solvers.fixed import RK4

N, D, MEMBERS = 16, 8, 6


def _states(dtype, members=MEMBERS, n=N, d=D, beta=1.0):
    """Uniform points; at large β a cap of half-angle 0.05, where the weights e^{β⟨x_i, x_j⟩} still mix the tokens
    (uniform points at β = 10³ each attend to themselves alone, and the velocity vanishes)."""
    if beta >= 100:
        return jnp.stack([af.init.cap(s, n=n, d=d, angle=0.05) for s in range(members)]).astype(dtype)
    return jnp.stack([af.init.uniform(s, n=n, d=d) for s in range(members)]).astype(dtype)


def _weights(dtype, k=D):
    keys = jax.random.split(jax.random.key(3), 3)
    q = jax.random.normal(keys[0], (MEMBERS, k, D), dtype) / np.sqrt(D)
    kk = jax.random.normal(keys[1], (MEMBERS, k, D), dtype) / np.sqrt(D)
    v = jax.random.normal(keys[2], (D, D), dtype) / np.sqrt(D)  # one V shared by the members
    return q, kk, v


def _ensemble_axes(field):
    from attnflow.particles.fields import ensemble_axes

    return ensemble_axes(field)[0]


def _reference(beta, Q, K, V, x, h):
    """(x', F(x')) of one RK4 step by the XLA path: ``fixed.RK4`` on SA(kernel="xla"), vmapped."""
    field = af.SA(beta, Q, K, V, kernel="xla")
    axes = _ensemble_axes(field)
    step = jax.vmap(RK4().step, in_axes=(axes, None, 0, None))(field, 0.0, x, h)
    velocity = jax.vmap(lambda f, y: f(0.0, y), in_axes=(axes, 0))(field, step)
    return step, velocity


def _kernel(beta, Q, K, V, dtype, members=MEMBERS):
    return fused_rk4.FusedRK4((jnp.asarray(beta, dtype), Q, K, V), members, dtype)


def _relative(a, b):
    """max |a − b| relative to b's largest entry, or to 1 where b is smaller (velocities that vanish)."""
    return float(jnp.max(jnp.abs(a - b)) / jnp.maximum(jnp.max(jnp.abs(b)), 1.0))


BETAS = [0.1, 4.0, 1e3]


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("weights", ["identity", "random"])
def test_step_equals_the_xla_step_in_float64(beta, weights):
    dtype = jnp.float64
    x = _states(dtype, beta=beta)
    Q, K, V = _weights(dtype) if weights == "random" else (None, None, None)
    betas = beta * jnp.linspace(0.5, 1.5, MEMBERS, dtype=dtype)  # one β per member
    kernel = _kernel(betas, Q, K, V, dtype)
    want_x, want_f = _reference(betas, Q, K, V, x, 0.25)
    got_x, got_f = kernel.step(x, 0.25)  # k1 evaluated in the kernel (the fixed-step loop's call)
    assert _relative(got_x, want_x) < 1e-13
    assert _relative(got_f, want_f) < 1e-13
    # the uniform grid's call: k1 given, its own velocity F(x) from the kernel
    f0 = kernel.velocity(x)
    xla = af.SA(betas, Q, K, V, kernel="xla")
    want_f0 = jax.vmap(lambda f, y: f(0.0, y), in_axes=(_ensemble_axes(xla), 0))(xla, x)
    assert _relative(f0, want_f0) < 1e-13
    given_x, given_f = kernel.step(x, 0.25, f0)
    assert _relative(given_x, want_x) < 1e-13
    assert _relative(given_f, want_f) < 1e-13
    assert bool(jnp.all(jnp.isfinite(got_x))) and bool(jnp.all(jnp.isfinite(got_f)))


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("weights", ["identity", "random"])
def test_step_equals_the_xla_step_in_float32(beta, weights):
    dtype = jnp.float32
    x = _states(dtype, beta=beta)
    Q, K, V = _weights(dtype) if weights == "random" else (None, None, None)
    kernel = _kernel(beta, Q, K, V, dtype)  # one β shared by the members
    want_x, want_f = _reference(jnp.asarray(beta, dtype), Q, K, V, x, 0.25)
    got_x, got_f = kernel.step(x, 0.25)
    assert got_x.dtype == jnp.float32 and got_f.dtype == jnp.float32
    eps = float(jnp.finfo(jnp.float32).eps)
    assert _relative(got_x, want_x) < 8 * eps
    # the logits' rounding, β⟨x_i, x_j⟩ · eps, enters the weights' exponent: at β = 10³ it is 10³ eps
    assert _relative(got_f, want_f) < 8 * eps * max(1.0, beta)
    assert bool(jnp.all(jnp.isfinite(got_x))) and bool(jnp.all(jnp.isfinite(got_f)))
    # on the sphere to float32 rounding
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(got_x, axis=-1) - 1))) < 4 * eps


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_blocks_cover_every_member_without_padding():
    """Blocks are the largest power of two up to BLOCK_MEMBERS = 8 dividing the members: 11 members run as 11
    blocks of one, 12 as 3 blocks of 4, 16 as 2 blocks of 8; every member's step is the XLA path's."""
    dtype = jnp.float64
    assert fused_rk4.BLOCK_MEMBERS == 8
    assert fused_rk4.FusedRK4((1.0, None, None, None), 16, dtype).block == 8
    for members, block in ((11, 1), (12, 4)):
        x = _states(dtype, members, n=8, d=4)
        betas = jnp.linspace(1.0, 8.0, members, dtype=dtype)
        kernel = _kernel(betas, None, None, None, dtype, members)
        assert kernel.block == block
        want_x, _ = _reference(betas, None, None, None, x, 0.5)
        assert _relative(kernel.step(x, 0.5, after=False), want_x) < 1e-13


def _run(kernel, dense, dtype, beta):
    x0 = _states(dtype)
    ts = jnp.linspace(0.0, 3.0, 7)
    field = af.SA(beta, kernel=kernel)
    return af.simulate(field, x0, 3.0, ts=ts, solver="rk4", dt=0.25, dense=dense, stop_when_clustered=1e-3)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("dense", [True, False], ids=["dense", "fixed"])
def test_simulate_with_the_kernel_equals_the_xla_loop(dense):
    betas = jnp.linspace(0.5, 9.0, MEMBERS)
    xla = _run("xla", dense, jnp.float64, betas)
    fused = _run("pallas", dense, jnp.float64, betas)
    assert fused.xs.shape == xla.xs.shape == (MEMBERS, 7, N, D)
    assert float(jnp.max(jnp.abs(fused.xs - xla.xs))) < 1e-13
    assert float(jnp.max(jnp.abs(fused.x_final - xla.x_final))) < 1e-13
    np.testing.assert_array_equal(np.asarray(fused.steps), np.asarray(xla.steps))
    np.testing.assert_array_equal(np.asarray(fused.t_event), np.asarray(xla.t_event))
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(fused.xs, axis=-1) - 1))) < 1e-14


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_simulate_with_the_kernel_in_float32_and_random_weights():
    dtype = jnp.float32
    x0 = _states(dtype)
    Q, K, V = _weights(dtype)
    ts = jnp.linspace(0.0, 2.0, 5)
    runs = [
        af.simulate(af.SA(3.0, Q, K, V, kernel=kernel), x0, 2.0, ts=ts, solver="rk4", dt=0.25, dense=True)
        for kernel in ("xla", "pallas")
    ]
    eps = float(jnp.finfo(dtype).eps)
    assert runs[1].xs.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(runs[1].xs - runs[0].xs))) < 256 * eps
    assert float(jnp.max(jnp.abs(jnp.linalg.norm(runs[1].xs, axis=-1) - 1))) < 4 * eps


# -- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: af.USA(1.0, kernel="pallas"), "USA's attention"),
        (lambda: af.SA(1.0, mask="causal", kernel="pallas"), "mask='causal'"),
        (lambda: af.SA(1.0, mask="causal", positional="alibi", kernel="pallas"), "positional='alibi'"),
        (lambda: af.SA(1.0, block=64, kernel="pallas"), "block=64"),
        (lambda: af.SA(1.0, kernel="triton"), "'auto', 'xla', 'fused', 'pallas'"),
    ],
)
def test_fields_the_kernel_cannot_take_are_refused(make, words):
    with pytest.raises(ValueError, match="kernel") as err:
        make()
    assert words in str(err.value)


X_SMALL = af.init.uniform(0, n=8, d=3)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(solver="tsit5"), "drift alone"),  # the adaptive loop evaluates the drift: refused at its trace
        (dict(solver="euler", dt=0.1), "solver='rk4'"),
        (dict(solver="ab4", dt=0.1), "solver='rk4'"),
        (dict(solver="cg3", dt=0.1), "solver='rk4'"),
    ],
)
def test_other_methods_are_refused(kwargs, words):
    with pytest.raises(ValueError, match="kernel='pallas'") as err:
        af.simulate(af.SA(1.0, kernel="pallas"), X_SMALL, 1.0, **kwargs)
    assert words in str(err.value)


def test_fields_around_the_kernel_are_refused():
    field = af.SA(1.0, kernel="pallas") + af.FeedForward(jnp.ones((4, 3)), jnp.zeros(4), jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="fuses the RK4 steps of SA itself"):
        af.simulate(field, X_SMALL, 1.0, solver="rk4", dt=0.1)
    with pytest.raises(ValueError, match="fuses the RK4 steps of SA itself"):
        af.simulate(af.Noisy(af.SA(1.0, kernel="pallas"), 0.1), X_SMALL, 1.0, solver="rk4", dt=0.1)


def test_too_many_tokens_are_refused_before_anything_runs():
    assert blocked.PALLAS_MAX_TOKENS == 128 and blocked.PALLAS_MAX_ELEMENTS == 4096
    with pytest.raises(ValueError, match=r"n·d = 4096 numbers, got n = 32, d = 256"):
        af.simulate(af.SA(1.0, kernel="pallas"), af.init.uniform(0, n=32, d=256), 1.0, solver="rk4", dt=0.5)
    with pytest.raises(ValueError, match=r"at most n = 128 tokens.*got n = 129"):
        af.simulate(af.SA(1.0, kernel="pallas"), af.init.uniform(0, n=129, d=2), 1.0, solver="rk4", dt=0.5)


def test_the_drift_alone_and_gradients_are_refused():
    field = af.SA(1.0, kernel="pallas")
    with pytest.raises(ValueError, match="drift alone need kernel='auto', 'xla' or 'fused'"):
        field(0.0, X_SMALL)

    def loss(beta):
        sol = af.simulate(af.SA(beta, kernel="pallas"), X_SMALL, 1.0, solver="rk4", dt=0.5, dense=True)
        return jnp.sum(sol.x_final)

    with pytest.raises(ValueError, match="no derivative"):
        jax.grad(loss)(1.0)


def test_auto_never_takes_the_kernel_until_measured(monkeypatch):
    """ "auto" takes the kernel only on a backend of PALLAS_AUTO, empty until a GPU measurement fills it."""
    assert blocked.PALLAS_AUTO == {}
    assert af.SA(1.0).fused_step(32, 128, jnp.float32) is None
    assert af.SA(1.0, kernel="xla").fused_step(32, 8, jnp.float32) is None
    monkeypatch.setitem(blocked.PALLAS_AUTO, jax.default_backend(), 1024)
    assert af.SA(1.0).fused_step(32, 32, jnp.float32) is not None  # n·d = 1024: within the measured size
    assert af.SA(1.0).fused_step(32, 64, jnp.float32) is None  # beyond it
    assert af.SA(1.0, mask="causal").fused_step(8, 8, jnp.float32) is None  # not plain SA
    assert not af.SA(1.0).asks_fused_step and af.SA(1.0, kernel="pallas").asks_fused_step
