"""Vector fields: formulas against naive NumPy, stability at huge β, symmetries, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow as af


def naive_field(x, beta, Q=None, K=None, V=None, normalized=True, rescaled=False):
    """Direct transcription of [GLPR] (2.3)–(2.5) and §3.3 (no max subtraction), float64."""
    x = np.asarray(x, dtype=np.float64)
    n, d = x.shape
    Q = np.eye(d) if Q is None else np.asarray(Q)
    K = np.eye(d) if K is None else np.asarray(K)
    V = np.eye(d) if V is None else np.asarray(V)
    w = np.exp(beta * (x @ Q.T) @ (x @ K.T).T - (beta if rescaled else 0.0))
    a = w / w.sum(1, keepdims=True) if normalized else w / n
    y = a @ (x @ V.T)
    return y - np.sum(x * y, 1, keepdims=True) * x


@jax.jit
def _three_fields(x, beta, mats):
    # one compiled program per example's shapes (eager evaluation would compile each operation anew)
    return (af.SA(beta, **mats)(0.0, x), af.USA(beta, **mats)(0.0, x), af.USA(beta, time="rescaled", **mats)(0.0, x))


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 12),
    d=st.integers(2, 6),
    beta=st.floats(0.0, 8.0),
    general=st.booleans(),
)
def test_fields_match_the_formula_and_are_tangent(seed, n, d, beta, general):
    keys = jax.random.split(jax.random.key(seed), 4)
    x = af.init.uniform(keys[0], n, d)
    mats = {}
    if general:
        k = max(1, d - 1)
        mats = dict(
            Q=jax.random.normal(keys[1], (k, d)) / np.sqrt(d),
            K=jax.random.normal(keys[2], (k, d)) / np.sqrt(d),
            V=jax.random.normal(keys[3], (d, d)) / np.sqrt(d),
        )
    sa, usa, usa_r = _three_fields(x, beta, mats)
    np.testing.assert_allclose(sa, naive_field(x, beta, **mats), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(usa, naive_field(x, beta, normalized=False, **mats), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        usa_r, naive_field(x, beta, normalized=False, rescaled=True, **mats), rtol=1e-10, atol=1e-12
    )
    # every velocity is tangent to the sphere at its particle
    for v in (sa, usa, usa_r):
        np.testing.assert_allclose(jnp.sum(v * x, -1), 0.0, atol=1e-12 * (1 + float(jnp.max(jnp.abs(v)))))


def test_rescaled_usa_is_the_glpr_field_slowed_by_e_minus_beta():
    x = af.init.uniform(3, 10, 4)
    for beta in (0.5, 3.0, 20.0):
        glpr = af.USA(beta)(0.0, x)
        # the tangent projection cancels digits in small components: compare relative to the largest
        np.testing.assert_allclose(
            af.USA(beta, time="rescaled")(0.0, x),
            np.exp(-beta) * glpr,
            rtol=1e-10,
            atol=1e-14 * np.exp(-beta) * float(jnp.max(jnp.abs(glpr))),
        )


def test_at_beta_zero_sa_and_usa_coincide():
    x = af.init.uniform(4, 16, 3)
    np.testing.assert_allclose(af.SA(0.0)(0.0, x), af.USA(0.0)(0.0, x), atol=1e-15)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("beta", [1e3, 1e4])
def test_huge_beta_is_finite_and_exact(dtype, beta):
    x = af.init.uniform(5, 32, 3, dtype=dtype)
    # reference without max subtraction in extended precision: e^{10⁴} ≈ 10^{4343} fits in x86 long double
    xl = np.asarray(x, dtype=np.longdouble)
    if np.finfo(np.longdouble).maxexp < 16000:
        pytest.skip("no extended-precision long double on this platform")
    w = np.exp(beta * (xl @ xl.T))
    for field, weights in (
        (af.SA(beta), w / w.sum(1, keepdims=True)),
        (af.USA(beta, time="rescaled"), w * np.exp(-np.longdouble(beta)) / 32),
    ):
        v = field(0.0, x)
        assert v.dtype == jnp.dtype(dtype)
        assert bool(jnp.all(jnp.isfinite(v)))
        y = weights @ xl
        expected = (y - np.sum(xl * y, 1, keepdims=True) * xl).astype(np.float64)
        # float32: e^{β(⟨⟩−m)} amplifies the rounding of ⟨⟩ (~6e-8) by β, so compare loosely
        tol = 1e-9 if dtype == "float64" else 1e-7 * beta
        np.testing.assert_allclose(np.asarray(v, np.float64), expected, atol=tol * (1 + np.abs(expected).max()))


def test_glpr_usa_refuses_betas_whose_velocity_overflows():
    with pytest.raises(ValueError, match="rescaled"):
        af.simulate(af.USA(1e3), af.init.uniform(0, 8, 3), 1.0)
    with pytest.raises(ValueError, match="float32"):
        af.simulate(af.USA(200.0), af.init.uniform(0, 8, 3, dtype="float32"), 1.0)


def test_permutation_equivariance():
    x = af.init.uniform(6, 12, 4)
    perm = np.random.default_rng(0).permutation(12)
    for field in (af.SA(3.0), af.USA(2.0)):
        np.testing.assert_allclose(field(0.0, x[perm]), field(0.0, x)[perm], atol=1e-14)


def test_rotation_equivariance_for_identity_weights():
    x = af.init.uniform(7, 12, 5)
    r, _ = np.linalg.qr(np.random.default_rng(1).normal(size=(5, 5)))
    for field in (af.SA(3.0), af.USA(2.0)):
        np.testing.assert_allclose(field(0.0, x @ r), field(0.0, x) @ r, atol=1e-13)


def test_softmax_attention_is_row_stochastic():
    x = af.init.uniform(8, 20, 3)
    a = af.SA(50.0).attention(x)
    np.testing.assert_allclose(jnp.sum(a, -1), 1.0, rtol=1e-14)
    assert float(jnp.min(a)) >= 0.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(beta=float("nan")), "beta must be finite"),
        (dict(beta=-np.inf), "beta must be finite"),
        (dict(beta=[[1.0]]), "beta must be a real number or a 1-D array"),
        (dict(beta=1.0, Q=np.ones((2, 3)), K=np.ones((3, 3))), "Q and K must have the same shape"),
        (dict(beta=1.0, V=np.ones((2, 3))), "V must be square"),
        (dict(beta=1.0, Q=np.ones(3)), "Q must be a 2-D real array"),
        (dict(beta=1.0, V=np.full((3, 3), np.inf)), "V must have finite entries"),
    ],
)
def test_bad_field_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        af.SA(**kwargs)


def test_weights_must_match_the_particle_dimension():
    with pytest.raises(ValueError, match=r"Q has shape \(2, 4\) but particles live in d = 3"):
        af.simulate(af.SA(1.0, Q=np.ones((2, 4)), K=np.ones((2, 4))), af.init.uniform(0, 5, 3), 1.0)
    with pytest.raises(ValueError, match=r"expected \(3, 3\)"):
        af.simulate(af.SA(1.0, V=np.eye(4)), af.init.uniform(0, 5, 3), 1.0)


def test_unknown_usa_time_convention():
    with pytest.raises(ValueError, match="time must be one of 'glpr', 'rescaled'"):
        af.USA(1.0, time="paper")


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 5, 32, 64])
@pytest.mark.parametrize("beta", [0.0, 3.0, 1e4])
def test_sa_on_the_circle_written_out_matches_the_batched_products(n, beta):
    # d = 2, plain weights, n ≤ 64: SA.__call__ sums over j term by term (ω_i x_i^⊥); it must give
    # P_x(drift) of the general path to rounding, also off the sphere (Runge–Kutta stages) and at β = 10⁴
    from attnflow.particles.fields import UNROLLED_N
    from attnflow.particles.sphere import project

    assert n <= UNROLLED_N
    x = af.init.uniform(n, n, 2)
    x = x * (1.0 + 0.2 * jax.random.uniform(jax.random.key(1), (n, 1)))  # norms in [1, 1.2]
    field = af.SA(beta)
    fast, general = field(0.0, x), project(x, field.drift(0.0, x))
    assert bool(jnp.all(jnp.isfinite(fast)))
    scale = 1.0 + float(jnp.max(jnp.abs(general)))
    np.testing.assert_allclose(fast, general, atol=1e-13 * scale * max(1.0, beta * 1e-2))
    # tangent at every (off-sphere) point
    np.testing.assert_allclose(jnp.sum(fast * x, -1), 0.0, atol=1e-14 * scale)
    x32 = x.astype(jnp.float32)
    v32 = field(0.0, x32)
    assert v32.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(v32)))
    np.testing.assert_allclose(v32, general, atol=2e-6 * scale * max(1.0, beta * 1e-2))


def test_a_field_reports_its_beta_its_terms_and_the_growth_of_its_velocities():
    rng = np.random.default_rng(7)
    Q, K = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    ff = af.FeedForward(np.ones((2, 3)), None, np.ones((3, 2)))
    sa = af.SA(2.0)
    # β looked through sums and wrappers; None for fields without one
    assert float(sa.temperature) == 2.0 and float((ff + af.USA(3.0)).temperature) == 3.0
    assert float(af.PreLN(af.Noisy(af.SA(1.5), 0.1)).temperature) == 1.5
    assert float(af.LayerWise(af.SA(0.5), Ks=np.stack([K, Q])).temperature) == 0.5
    np.testing.assert_array_equal(af.SA([0.5, 1.0]).temperature, [0.5, 1.0])
    assert af.Hardmax().temperature is None and ff.temperature is None and (ff + af.Hardmax()).temperature is None
    # the terms of a sum, and what a wrapper wraps
    total = ff + sa + ff
    assert total.summands() == (ff, sa, ff) and sa.summands() == (sa,) and total.inner_fields() == (ff, sa, ff)
    assert af.Noisy(sa, 0.1).inner_fields()[0] is sa and sa.inner_fields() == ()
    assert (total + sa).summands() == (ff, sa, ff, sa)
    # USA in [GLPR]'s time: velocities of order e^{β‖QᵀK‖₂}
    kappa = np.linalg.norm(Q.T @ K, 2)
    assert af.USA(1.0, Q=Q, K=K).growth_norm() == pytest.approx(kappa, rel=1e-12)
    assert af.NGPT(af.USA(1.0, Q=Q, K=K)).growth_norm() == pytest.approx(kappa, rel=1e-12)
    assert (sa + af.USA(1.0, Q=2.0 * np.eye(3))).growth_norm() == pytest.approx(2.0, rel=1e-12)
    assert af.USA(1.0, Q=Q, K=K, time="rescaled").growth_norm() is None and sa.growth_norm() is None
    # layer-wise weights: the largest over the layers
    layers = af.LayerWise(af.USA(1.0), Qs=np.stack([np.eye(3), 3.0 * np.eye(3)]))
    assert layers.growth_norm() == pytest.approx(3.0, rel=1e-12)
