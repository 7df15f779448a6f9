"""Linear and least-squares attention: the explicit linear ODE, the α → ∞ and α → 0 limits, composition, configs."""

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import runner

N, D = 6, 3
X0 = af.init.uniform(1, N, D)


def _closed_form(x0, t):
    """x_i(t) = (I − 2tM₀)^{-1/2} x_i(0), M₀ = (1/n) Σ_j x_j x_jᵀ, and the eigen-data of M₀."""
    x0 = np.asarray(x0)
    m0 = x0.T @ x0 / x0.shape[0]
    lam, U = np.linalg.eigh(m0)
    S = U @ np.diag((1.0 - 2.0 * t * lam) ** -0.5) @ U.T
    return x0 @ S.T, lam, U


def test_linear_attention_without_layer_norm_is_an_explicit_linear_ode():
    # ẋ_i = M x_i with M = (1/n) Σ_j x_j x_jᵀ, so Ṁ = 2M², M(t) = M₀(I − 2tM₀)⁻¹, up to t* = 1/(2λ_max)
    _, lam, _ = _closed_form(X0, 0.0)
    t_star = 1.0 / (2.0 * lam.max())
    ts = np.linspace(0.0, 0.8 * t_star, 9)
    sol = af.simulate(af.NoLN(af.LinearAttention()), X0, ts[-1], ts=ts, solver="tsit5", rtol=1e-12, atol=1e-12)
    err = max(np.max(np.abs(np.asarray(sol.xs[k]) - _closed_form(X0, t)[0])) for k, t in enumerate(ts))
    assert err < 1e-8, err
    # the drift itself is M x_i
    m0 = np.asarray(X0).T @ np.asarray(X0) / N
    np.testing.assert_allclose(af.LinearAttention().drift(0.0, X0), np.asarray(X0) @ m0, atol=1e-15)


def _ring(n=5, h=0.6):
    """n tokens on a circle of latitude: a rotation permutes them, so all |x_i(t)| of the linear ODE agree."""
    r = np.sqrt(1.0 - h * h)
    th = 2.0 * np.pi * np.arange(n) / n
    return jnp.asarray(np.stack([r * np.cos(th), r * np.sin(th), np.full(n, h)], axis=1))


def _time_change(x0, t):
    """s(t) = ∫₀ᵗ |x_1(τ)|² dτ = −Σ_k c_k² log(1 − 2tλ_k)/(2λ_k), c = x_1(0) in the eigenbasis of M₀."""
    _, lam, U = _closed_form(x0, 0.0)
    c2 = (np.asarray(x0)[0] @ U) ** 2
    return float(np.sum(-c2 * np.log1p(-2.0 * t * lam) / (2.0 * lam)))


@pytest.mark.slow
def test_on_the_sphere_the_normalized_closed_form_holds_only_for_equal_norms():
    # x = y/|y| for ẏ_i = M_y y_i gives ẋ_i = P_{x_i}((1/n) Σ_j |y_j|² ⟨x_i,x_j⟩ x_j): the layer-norm flow
    # after the time change ds = |y|² dt when all |y_j| agree, and a different flow when they do not
    field = af.LinearAttention()
    x0 = _ring()
    _, lam, _ = _closed_form(x0, 0.0)
    t = np.linspace(0.0, 0.9 / (2.0 * lam.max()), 6)
    s = np.array([_time_change(x0, tk) for tk in t])
    sol = af.simulate(field, x0, s[-1], ts=s, solver="tsit5", rtol=1e-12, atol=1e-12)
    expected = np.stack([af.particles.normalize(_closed_form(x0, tk)[0]) for tk in t])
    assert np.max(np.abs(np.asarray(sol.xs) - expected)) < 1e-8
    assert np.max(np.abs(np.asarray(sol.xs[-1] - sol.xs[0]))) > 0.1  # the ring really moves (to the pole)
    # a generic start: norms differ, and no common time change maps one flow onto the other
    y = _closed_form(X0, 0.4)[0]
    assert np.ptp(np.linalg.norm(y, axis=1)) > 1e-2
    sol = af.simulate(field, X0, 0.5, ts=np.linspace(0, 0.5, 51), solver="tsit5", rtol=1e-12, atol=1e-12)
    direction = af.particles.normalize(jnp.asarray(y))
    assert np.min(np.max(np.abs(np.asarray(sol.xs) - np.asarray(direction)), axis=(1, 2))) > 1e-3
    # what holds instead: gradient ascent of (1/(4n)) Σ_ij ⟨x_i,x_j⟩² (an Oja-type flow)
    energy = np.sum(np.einsum("tid,tjd->tij", sol.xs, sol.xs) ** 2, axis=(1, 2)) / (4 * N)
    assert np.all(np.diff(energy) > 0)


def test_least_squares_tends_to_linear_attention_like_one_over_alpha():
    rng = np.random.default_rng(0)
    k = 4  # rectangular queries and keys, a general value matrix
    # ‖K_XᵀK_X‖ = O(1), so α = 100 is already in the asymptotic regime
    Q, K, V = rng.normal(size=(k, D)), rng.normal(size=(k, D)) / 4, rng.normal(size=(D, D))
    linear = np.asarray(af.LinearAttention(Q, K, V).drift(0.0, X0))
    alphas = np.array([1e2, 1e3, 1e4])
    errs = [
        float(np.max(np.abs(a / N * np.asarray(af.LeastSquaresAttention(a, Q, K, V).drift(0.0, X0)) - linear)))
        for a in alphas
    ]
    slope = np.polyfit(np.log(alphas), np.log(errs), 1)[0]
    assert abs(slope + 1.0) < 0.02, (errs, slope)
    # the O(1/α) term exactly: α(K_XᵀK_X + αI)⁻¹ = I − K_XᵀK_X/α + O(α⁻²)
    q, kx, v = np.asarray(X0) @ Q.T, np.asarray(X0) @ K.T, np.asarray(X0) @ V.T
    lead = -q @ kx.T @ kx @ kx.T @ v / N
    a = 1e4
    resid = a * (a / N * np.asarray(af.LeastSquaresAttention(a, Q, K, V).drift(0.0, X0)) - linear)
    assert np.max(np.abs(resid - lead)) < 1e-3 * np.max(np.abs(lead))
    # the velocities on the sphere converge alike (P_x is linear)
    np.testing.assert_allclose(
        1e6 / N * np.asarray(af.LeastSquaresAttention(1e6, Q, K, V)(0.0, X0)),
        af.LinearAttention(Q, K, V)(0.0, X0),
        atol=1e-5,
    )


def test_least_squares_as_alpha_vanishes_is_the_least_squares_fit():
    rng = np.random.default_rng(1)
    n, k = 12, 3
    x = af.init.uniform(4, n, D)
    Q, K, V = rng.normal(size=(k, D)), rng.normal(size=(k, D)), rng.normal(size=(D, D))
    kx, vx, qx = np.asarray(x) @ K.T, np.asarray(x) @ V.T, np.asarray(x) @ Q.T
    W = np.linalg.lstsq(kx, vx, rcond=None)[0]  # argmin ‖K_X W − V_X‖
    out = np.asarray(af.LeastSquaresAttention(1e-13, Q, K, V).drift(0.0, x))
    # the ridge term shifts the fit by about α/λ_min(K_XᵀK_X)
    np.testing.assert_allclose(out, qx @ W, rtol=0, atol=1e-9 * np.max(np.abs(qx @ W)))
    # Q = K = V = I: the fit reproduces every token, so under layer norm nothing moves
    ident = af.LeastSquaresAttention(1e-12)
    np.testing.assert_allclose(ident.drift(0.0, x), x, atol=1e-10)
    assert float(jnp.max(jnp.abs(ident(0.0, x)))) < 1e-10
    np.testing.assert_allclose(ident.attention(x) @ x, ident.drift(0.0, x), atol=1e-12)


def test_weights_match_the_fast_evaluation_and_elu_sum_is_stochastic():
    rng = np.random.default_rng(2)
    Q, K, V = rng.normal(size=(2, D)), rng.normal(size=(2, D)), rng.normal(size=(D, D))
    for kw in (dict(), dict(normalize="sum", feature="elu"), dict(feature="elu")):
        f = af.LinearAttention(Q, K, V, **kw)
        np.testing.assert_allclose(f.drift(0.0, X0), f.attention(X0) @ f.values(X0), atol=1e-13)
    A = af.attention_matrix(af.LinearAttention(Q, K, normalize="sum", feature="elu"), X0)
    assert float(jnp.min(A)) > 0 and float(jnp.max(jnp.abs(A.sum(1) - 1))) < 1e-14
    pi = af.stationary_distribution(A)
    assert float(jnp.max(jnp.abs(pi @ A - pi))) < 1e-12
    with pytest.raises(ValueError, match="normalize must be one of"):
        af.LinearAttention(normalize="max")
    with pytest.raises(ValueError, match="alpha must be finite and > 0"):
        af.LeastSquaresAttention(0.0)
    with pytest.raises(ValueError, match="expected \\(k, 3\\)"):
        af.simulate(af.LinearAttention(Q=np.ones((2, 4))), X0, 1.0)


@pytest.mark.slow
def test_sums_with_softmax_attention_run_as_ensembles_on_the_sphere():
    betas = jnp.array([0.5, 2.0, 6.0])
    alphas = jnp.array([0.5, 1.0, 2.0])
    field = (
        af.SA(betas)
        + af.LinearAttention(normalize="sum", feature="elu")
        + af.LeastSquaresAttention(alphas)
        + af.MultiHead.identity(1.0, 3, D)
    )
    ts = np.linspace(0.0, 2.0, 5)
    sol = af.simulate(field, X0, 2.0, ts=ts, solver="rk4", dt=0.02)
    assert sol.xs.shape == (3, 5, N, D)
    assert float(af.particles.norm_error(sol.xs)) < 1e-12
    for m in (0, 2):
        one = (
            af.SA(float(betas[m]))
            + af.LinearAttention(normalize="sum", feature="elu")
            + af.LeastSquaresAttention(float(alphas[m]))
            + af.MultiHead.identity(1.0, 3, D)
        )
        np.testing.assert_allclose(sol.xs[m], af.simulate(one, X0, 2.0, ts=ts, solver="rk4", dt=0.02).xs, atol=1e-11)
    # per-member Q, K, V stacks, and the layer-norm wrappers
    stack = np.random.default_rng(3).normal(size=(3, D, D))
    ens = af.simulate(af.LinearAttention(Q=stack, K=stack), X0, 1.0, ts=ts[:3], solver="rk4", dt=0.05)
    assert ens.xs.shape == (3, 3, N, D) and float(af.particles.norm_error(ens.xs)) < 1e-12
    pre = af.simulate(af.PreLN(af.LeastSquaresAttention(1.0)), X0, 1.0, ts=ts[:3], solver="rk4", dt=0.05)
    assert bool(jnp.all(jnp.isfinite(pre.xs)))


def _config(*sets):
    return load_config(
        None, [f"n={N}", f"d={D}", "t1=1", "n_save=3", "seeds=2", "progress=false", "solver=rk4", "dt=0.05", *sets]
    )


def test_configs_build_and_run_the_new_models():
    field = runner.build_field(_config("model=least_squares", "alpha=3"), np.array([1.0]), np.array([0]), D)
    assert isinstance(field, af.LeastSquaresAttention) and float(field.alpha) == 3.0
    field = runner.build_field(
        _config("model=linear", "linear_normalize=sum", "linear_feature=elu"), np.array([1.0]), np.array([0]), D
    )
    assert isinstance(field, af.LinearAttention) and field.normalize == "sum" and field.feature == "elu"
    # random weights per member, and no layer norm
    field = runner.build_field(_config("model=linear", "weights=ginibre", "norm=none"), np.ones(2), np.arange(2), D)
    assert isinstance(field, af.NoLN) and field.inner.Q.shape == (2, D, D)
    result = runner.run(_config("model=least_squares", "alpha=0.5", "statistics=pairs"))
    assert result.stats["mean_inner_product"].shape == (1, 1, 2, 3)
    assert np.all(np.isfinite(result.stats["mean_inner_product"]))


@pytest.mark.parametrize(
    "extra, message",
    [
        (["model=linear", "heads=3"], "model 'linear' takes no heads"),
        (["model=least_squares", "mask=causal"], "model 'least_squares' takes no mask"),
        (["model=least_squares", "alpha=-1"], "alpha must be"),
        (["model=linear", "linear_normalize=max"], "linear_normalize must be one of"),
    ],
)
def test_meaningless_combinations_are_refused(extra, message):
    with pytest.raises(ConfigError, match=message):
        _config(*extra)
