"""Feed-forward term, [GLPR] (2.8): formula, sums with attention, exact linear flows, Lie–Trotter splitting."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from scipy.special import erf

import attnflow as af
from attnflow.particles.feedforward import FeedForward
from attnflow.particles.fields import Sum
from attnflow.particles.sphere import norm_error
from attnflow.solvers.fixed import RK4, LieTrotter

N, D, M = 8, 3, 5
X = af.init.uniform(1, N, D)


def mlp(seed, m=M, d=D, scale=1.0):
    """Generic feed-forward weights a (m, d), b (m,), w (d, m)."""
    ka, kb, kw = jax.random.split(jax.random.key(seed), 3)
    return (
        jax.random.normal(ka, (m, d)),
        jax.random.normal(kb, (m,)),
        scale * jax.random.normal(kw, (d, m)) / np.sqrt(m),
    )


NUMPY_ACTIVATIONS = {
    "relu": lambda z: np.maximum(z, 0.0),
    "tanh": np.tanh,
    "gelu": lambda z: 0.5 * z * (1.0 + erf(z / np.sqrt(2.0))),
    "sigmoid": lambda z: 1.0 / (1.0 + np.exp(-z)),
    "identity": lambda z: z,
}


@pytest.mark.parametrize("activation", list(NUMPY_ACTIVATIONS))
def test_field_matches_the_formula(activation):
    a, b, w = mlp(2)
    ff = FeedForward(a, b, w, activation=activation)
    x = np.asarray(X)
    drift = NUMPY_ACTIVATIONS[activation](x @ np.asarray(a).T + np.asarray(b)) @ np.asarray(w).T
    # O(1) sums of m products: agreement to a few ulps
    np.testing.assert_allclose(ff.drift(0.0, X), drift, rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(ff(0.0, X), drift - np.sum(x * drift, 1, keepdims=True) * x, rtol=1e-12, atol=1e-14)


def test_zero_bias_by_default():
    a, _, w = mlp(3)
    np.testing.assert_array_equal(FeedForward(a, None, w).drift(0.0, X), FeedForward(a, jnp.zeros(M), w).drift(0.0, X))


def test_zero_output_weights_give_exactly_sa():
    a, b, _ = mlp(4)
    sa = af.SA(2.0)
    field = sa + FeedForward(a, b, jnp.zeros((D, M)))
    assert isinstance(field, Sum) and field.beta == sa.beta
    # adding an exact zero changes no bit
    np.testing.assert_array_equal(field.drift(0.0, X), sa.drift(0.0, X))
    np.testing.assert_array_equal(field(0.0, X), sa(0.0, X))
    ts = np.linspace(0.0, 2.0, 3)
    both = af.simulate(field, X, 2.0, ts=ts, solver="rk4", dt=0.05).xs
    alone = af.simulate(sa, X, 2.0, ts=ts, solver="rk4", dt=0.05).xs
    # separately compiled programs may fuse operations differently: equal to rounding
    np.testing.assert_allclose(both, alone, atol=1e-14)


def test_drift_of_a_sum_is_the_sum_of_drifts():
    sa, ff = af.SA(1.5, V=-np.eye(D)), FeedForward(*mlp(5), activation="tanh")
    field = sa + ff
    np.testing.assert_allclose(field.drift(0.0, X), sa.drift(0.0, X) + ff.drift(0.0, X), atol=1e-15)
    # the projection P_x is linear, so the velocity is the sum of the terms' velocities too
    np.testing.assert_allclose(field(0.0, X), sa(0.0, X) + ff(0.0, X), atol=1e-15)
    assert len((field + ff).terms) == 3  # sums flatten


def test_linear_feed_forward_flow_is_the_normalized_matrix_exponential():
    # σ = identity, b = 0: ẋ = P_x(W x) with W = w a, whose solution is e^{tW} x0 / ‖e^{tW} x0‖
    # (differentiate: the normalization removes exactly the radial part ⟨x, Wx⟩x)
    a, _, w = mlp(6)
    W = np.asarray(w) @ np.asarray(a)
    ts = np.linspace(0.0, 3.0, 7)
    sol = af.simulate(FeedForward(a, None, w, activation="identity"), X, 3.0, ts=ts, solver="rk4", dt=0.02)
    exact = np.stack([af.particles.sphere.normalize(np.asarray(X) @ scipy.linalg.expm(t * W).T) for t in ts])
    # RK4 at dt = 0.02 with ‖W‖ ≈ 2 over t ≤ 3: global error measured 7e-10 (÷15 ≈ 2⁴ when dt halves)
    np.testing.assert_allclose(sol.xs, exact, atol=1e-8)
    assert float(norm_error(sol.xs)) < 1e-14


def test_attention_plus_feed_forward_stays_on_the_sphere():
    field = af.SA(3.0) + FeedForward(*mlp(7, scale=3.0), activation="gelu")
    ts = np.linspace(0.0, 5.0, 6)
    # (adaptive solvers share the sphere wrapper tested in test_simulate; the fixed ones are what differs here)
    for kw in (dict(solver="rk4", dt=0.05), dict(solver="lie_trotter", dt=0.05)):
        xs = af.simulate(field, X, 5.0, ts=ts, **kw).xs
        # every method renormalizes each step: norms are 1 to rounding
        assert float(norm_error(xs)) < 1e-14, kw


def test_ensemble_over_beta_and_feed_forward_weights():
    members = [mlp(20 + s) for s in range(3)]
    a, b, w = (jnp.stack(m) for m in zip(*members))
    betas = jnp.array([0.5, 2.0, 4.0])
    ts = np.linspace(0.0, 1.0, 3)
    batch = af.simulate(af.SA(betas) + FeedForward(a, b, w), X, 1.0, ts=ts, solver="rk4", dt=0.05)
    assert batch.xs.shape == (3, 3, N, D)
    for s, m in enumerate(members):
        single = af.simulate(af.SA(float(betas[s])) + FeedForward(*m), X, 1.0, ts=ts, solver="rk4", dt=0.05)
        np.testing.assert_allclose(batch.xs[s], single.xs, atol=1e-13)


# -- Lie–Trotter splitting ---------------------------------------------------------------


def _error(field, x0, t1, solver, dt, reference):
    return float(jnp.max(jnp.abs(af.simulate(field, x0, t1, solver=solver, dt=dt).x_final - reference)))


@pytest.mark.slow
def test_lie_trotter_converges_at_first_order():
    # attention and a strong feed-forward term do not commute, so the splitting error is
    # C·dt with C ∝ the commutator, while RK4's own sub-step error is O(dt⁴) and invisible here
    field = af.SA(2.0) + FeedForward(*mlp(8, scale=2.0), activation="tanh")
    t1 = 1.0
    reference = af.simulate(field, X, t1, solver="dopri8", rtol=1e-13, atol=1e-13).x_final
    dts = np.array([0.1, 0.05, 0.025, 0.0125])
    errors = np.array([_error(field, X, t1, "lie_trotter", dt, reference) for dt in dts])
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert abs(slope - LieTrotter.order) < 0.3, (slope, errors)
    # the reference is far more accurate than the smallest splitting error
    assert errors[-1] > 1e-6


def test_lie_trotter_is_exact_for_commuting_terms():
    # two linear terms with commuting W1 = w1 a1, W2 = w2 a2 (polynomials in one matrix): the flows
    # x ↦ normalize(e^{hW} x) commute, so the splitting error vanishes and only RK4's O(dt⁴) remains
    rng = np.random.default_rng(9)
    S = rng.normal(size=(D, D))
    W1, W2, R = S, 0.5 * S @ S - np.eye(D), rng.normal(size=(D, D))

    def linear(*ws):
        return Sum(*(FeedForward(np.eye(D), None, w, activation="identity") for w in ws))

    def exact(W):
        return af.particles.sphere.normalize(np.asarray(X) @ scipy.linalg.expm(W).T)

    # ‖W1‖, ‖W2‖ ≈ 2, dt = 0.05: RK4's error (0.1)⁴-ish, measured 2e-7
    assert _error(linear(W1, W2), X, 1.0, "lie_trotter", 0.05, exact(W1 + W2)) < 1e-5
    # the same step with a generic, non-commuting second term errs by the splitting's O(dt): measured 5e-2
    assert _error(linear(W1, R), X, 1.0, "lie_trotter", 0.05, exact(W1 + R)) > 1e-3


def test_lie_trotter_on_a_single_field_is_rk4():
    sa = af.SA(2.0)
    np.testing.assert_array_equal(LieTrotter().step(sa, 0.0, X, 0.1), RK4().step(sa, 0.0, X, 0.1))
    assert "lie_trotter" in af.SOLVERS


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((np.ones((5, 3)), np.ones(4), np.ones((3, 5))), {}, r"b must have shape \(m,\) = \(5,\)"),
        ((np.ones((5, 3)), np.ones(5), np.ones((5, 3))), {}, r"w must have shape \(d, m\) = \(3, 5\)"),
        ((np.ones(3), np.ones(5), np.ones((3, 5))), {}, "a must be a 2-D real array"),
        ((np.ones((5, 3)), np.ones(5), np.full((3, 5), np.nan)), {}, "w must have finite entries"),
        ((None, np.ones(5), np.ones((3, 5))), {}, "FeedForward needs a"),
        ((np.ones((5, 3)), np.ones(5), np.ones((3, 5))), dict(activation="swish"), "activation must be one of"),
    ],
)
def test_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        FeedForward(*args, **kwargs)


def test_weights_must_match_the_particle_dimension():
    with pytest.raises(ValueError, match=r"a has shape \(5, 3\) but particles live in d = 4"):
        af.simulate(af.SA(1.0) + FeedForward(*mlp(0)), af.init.uniform(0, 6, 4), 1.0)


def test_float32_configurations_stay_float32():
    ff = FeedForward(*mlp(10), activation="gelu")
    v = ff(0.0, X.astype(jnp.float32))
    assert v.dtype == jnp.float32
    # float32 rounding (6e-8) times O(1) velocities
    np.testing.assert_allclose(v, ff(0.0, X), atol=1e-6)
