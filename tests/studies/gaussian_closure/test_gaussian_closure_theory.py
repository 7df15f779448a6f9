"""The Gaussian closure of attention without layer norm (arXiv 2501.18322 §5): exact solutions, invariants, the
mean-field velocity of every kind against samples, particles against the closure at the n^{-1/2} rate, limit ranks;
the error-controlled solve against DOP853 on the authors' stiff draws, and the errors of solves that cannot be kept."""

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.studies.gaussian_closure import gaussian_closure_theory as gc
from attnflow.experiments.studies.gaussian_closure.gaussian_closure_solver import solve_closure, solve_covariance


def setup(seed=0, d=3, scale=0.35):
    rng = np.random.default_rng(seed)
    S0 = gc.random_covariance(rng, d) + 0.2 * np.eye(d)
    m0 = 0.5 * rng.standard_normal(d)
    Q = scale * rng.standard_normal((d, d))
    K = -Q + 0.5 * scale * rng.standard_normal((d, d))
    V = np.eye(d) + 0.5 * rng.standard_normal((d, d))
    return rng, m0, S0, Q, K, V


@pytest.mark.slow
def test_paper_map_and_zero_values_freeze_the_gaussian():
    _, m0, S0, Q, K, _ = setup()
    A = gc.attention_kernels(gc.paper_beta(3), Q, K)
    np.testing.assert_allclose(A[0], K.T @ Q / np.sqrt(3), rtol=1e-14)  # the paper's A = KᵀQ/√d
    assert gc.paper_beta(4, heads=2) == pytest.approx(1 / np.sqrt(2))
    sol = solve_closure(m0, S0, np.linspace(0, 3, 4), 0.7, Q, K, np.zeros((3, 3)))
    np.testing.assert_allclose(sol.cov, np.broadcast_to(S0, sol.cov.shape), atol=1e-14)
    np.testing.assert_allclose(sol.mean, np.broadcast_to(m0, sol.mean.shape), atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("lam", [1.0, -0.5, 2.0])
def test_scalar_values_have_the_exact_inverse_covariance(lam):
    # V = λI: d(Σ⁻¹)/dt = −2λ A_s, for a non-symmetric A too
    _, m0, S0, Q, K, _ = setup(1)
    ts = np.linspace(0, 0.6, 7)
    sol = solve_closure(m0, S0, ts, 0.5, Q, K, lam * np.eye(3), rtol=1e-12, atol=1e-14)
    A = gc.attention_kernels(0.5, Q, K)
    np.testing.assert_allclose(sol.cov, gc.identity_value_covariance(S0, A, ts, lam), rtol=0, atol=1e-11)


@pytest.mark.slow
def test_commuting_case_mean_in_closed_form():
    # d = 2, A = diag(a), V = λI, Σ0 diagonal: m_k(t) = m_k e^{λt} (1 − 2λ a_k σ_k t)^{-1/2}
    a, s, m, lam = np.array([-0.8, 0.3]), np.array([0.7, 0.4]), np.array([0.5, -1.0]), 0.9
    ts = np.linspace(0, 1.0, 5)
    sol = solve_closure(m, np.diag(s), ts, 1.0, np.diag(a), None, lam * np.eye(2), rtol=1e-12, atol=1e-14)
    exact = m * np.exp(lam * ts)[:, None] / np.sqrt(1 - 2 * lam * a * s * ts[:, None])
    np.testing.assert_allclose(sol.mean, exact, rtol=1e-10)


def test_rank_is_preserved_and_rank_one_follows_its_vector():
    # Σ = w wᵀ stays rank one with ẇ = (wᵀ A w) V w
    _, _, _, Q, K, V = setup(2)
    w0 = np.array([0.6, -0.3, 0.8])
    ts = np.linspace(0, 0.5, 6)
    sol = solve_closure(None, np.outer(w0, w0), ts, 0.5, Q, K, V, rtol=1e-12, atol=1e-14)
    A = gc.attention_kernels(0.5, Q, K)[0]
    w, h = w0.copy(), 1e-4
    for _ in range(5000):
        f = lambda u: (u @ A @ u) * (V @ u)
        k1 = f(w)
        k2 = f(w + h / 2 * k1)
        k3 = f(w + h / 2 * k2)
        k4 = f(w + h * k3)
        w = w + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    np.testing.assert_allclose(sol.cov[-1], np.outer(w, w), atol=1e-10)
    assert np.all(np.linalg.eigvalsh(sol.cov)[:, :2] < 1e-12)


@pytest.mark.slow
def test_trace_never_grows_for_positive_values_and_negative_kernel():
    rng = np.random.default_rng(3)
    d = 4
    q = rng.standard_normal((2, d))
    M = rng.standard_normal((d, d))
    sol = solve_closure(np.zeros(d), gc.random_covariance(rng, d), np.linspace(0, 5, 26), 0.5, q, -q, M.T @ M / d)
    assert np.all(np.diff(np.trace(sol.cov, axis1=1, axis2=2)) <= 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sa", "sinkhorn", "l2", "multihead"])
def test_affine_velocity_is_the_mean_field_of_samples(kind):
    # the velocity of n Gaussian samples at fixed probes approaches b + Lx like n^{-1/2}
    rng, m0, S0, Q, K, V = setup(4)
    probes = gc.gaussian_sample(rng, 64, m0, S0)
    beta, d = 0.5, 3
    if kind == "multihead":
        Qh = 0.35 * rng.standard_normal((3, 1, d))
        Kh = -Qh + 0.1 * rng.standard_normal((3, 1, d))
        Vh = np.stack([np.eye(d) / 3 + 0.2 * rng.standard_normal((d, d)) for _ in range(3)])
        A, Vs, B = gc.attention_kernels(beta, Qh, Kh), Vh, np.zeros((3, d, d))
        field = af.MultiHead(beta, Qh, Kh, Vh)
    else:
        A, Vs = gc.attention_kernels(beta, Q, K), V[None]
        B = beta * (K.T @ K)[None]
        field = {"sa": af.SA, "sinkhorn": af.Sinkhorn}.get(kind, af.SA)(beta, Q, K, V)
    b, L = gc.affine_velocity(
        jnp.asarray(m0),
        jnp.asarray(S0),
        jnp.asarray(A),
        jnp.asarray(Vs),
        "sa" if kind == "multihead" else kind,
        jnp.asarray(B),
    )
    errors = []
    for n in (400, 3200):
        x = gc.gaussian_sample(np.random.default_rng(n), n, m0, S0)
        if kind == "sinkhorn":  # the doubly stochastic weights need the probes among the tokens
            x = np.concatenate([probes, x])
            vel = np.asarray(field.drift(0.0, jnp.asarray(x)))[:64]
        elif kind == "l2":  # no attnflow field: logits −(β/2)‖Qx − Ky‖²
            logits = -0.5 * beta * np.sum(((probes @ Q.T)[:, None] - (x @ K.T)[None]) ** 2, axis=-1)
            w = np.exp(logits - logits.max(axis=1, keepdims=True))
            vel = (w / w.sum(axis=1, keepdims=True)) @ x @ V.T
        else:
            vel = np.asarray(field.drift(0.0, jnp.asarray(np.concatenate([probes, x]))))[:64]
        pred = np.asarray(b) + probes @ np.asarray(L).T
        errors.append(np.sqrt(np.mean((vel - pred) ** 2)) / np.sqrt(np.mean(pred**2)))
    # 8× the samples: the error shrinks by about √8 ≈ 2.8 (≥ 1.7 allows for the noise of one draw)
    assert errors[1] < 0.08 and errors[0] / errors[1] > 1.7, errors


@pytest.mark.slow
def test_particles_follow_the_closure_at_the_inverse_square_root_rate():
    from attnflow.experiments.studies.gaussian_closure.gaussian_closure import fitted_slope, rate_weights

    d, beta, t1 = 3, gc.paper_beta(3), 1.0
    m0, S0, Q, K, V = rate_weights(d, 0)
    ts = np.array([0.0, t1])
    closure = solve_closure(m0, S0, ts, beta, Q, K, V)
    sizes, replicas = [32, 128, 512], 8
    errors = []
    for n in sizes:
        x0 = gc.gaussian_sample(np.random.default_rng([7, n]), n, m0, S0, (replicas,))
        sol = af.simulate(
            af.NoLN(af.SA(beta, Q, K, V)),
            x0,
            t1,
            ts=ts,
            solver="rk4",
            dt=0.1,
            save=lambda t, x: {"cov": (x - x.mean(0)).T @ (x - x.mean(0)) / x.shape[0]},
        )
        cov = np.asarray(sol.stats["cov"])[:, -1]
        errors.append(np.linalg.norm(cov - closure.cov[-1], axis=(-1, -2)) / np.linalg.norm(closure.cov[-1]))
    slope = fitted_slope(sizes, np.array(errors))
    assert -0.75 <= slope <= -0.3, slope
    assert np.sqrt(np.mean(errors[-1] ** 2)) * np.sqrt(sizes[-1]) < 3.0


@pytest.mark.slow
def test_sinkhorn_closure_agrees_with_softmax_to_first_order_and_keeps_the_mean_linear():
    _, m0, S0, Q, K, V = setup(5)
    ts = np.linspace(0, 0.5, 3)
    small = solve_closure(m0, 1e-3 * S0, ts, 0.5, Q, K, V, kind="sinkhorn")
    soft = solve_closure(m0, 1e-3 * S0, ts, 0.5, Q, K, V)
    np.testing.assert_allclose(small.cov, soft.cov, rtol=0, atol=1e-3 * 1e-3 * np.abs(S0).max())
    sink = solve_closure(m0, S0, ts, 0.5, Q, K, V, kind="sinkhorn", rtol=1e-11, atol=1e-13)
    from scipy.linalg import expm

    np.testing.assert_allclose(sink.mean[-1], expm(ts[-1] * V) @ m0, rtol=1e-9)  # ṁ = V m


@pytest.mark.slow
@pytest.mark.parametrize("d", [3, 4, 5])
def test_limit_ranks_are_d_minus_rank_A(d):
    rng = np.random.default_rng(10 + d)
    draws = 12
    S0 = gc.random_covariance(rng, d, (draws,))
    Q = rng.standard_normal((draws, d // 2, d))
    A = np.stack([gc.attention_kernels(gc.paper_beta(d), q, -q) for q in Q])
    assert all(gc.kernel_dimension(a) == d - d // 2 for a in A)
    M = rng.standard_normal((draws, d, d))
    for V in (None, (np.swapaxes(M, -1, -2) @ M / d + 0.5 * np.eye(d))[:, None]):
        S = solve_covariance(S0, A, V)
        rank, settled = gc.settled_rank(S[:, -2], S[:, -1])
        assert settled.sum() >= draws // 2
        assert np.all(rank[settled] == d - d // 2), rank
        # the limit lives in ker A: A Σ* → 0 (like 1/t)
        residual = np.linalg.norm(A[:, 0] @ S[:, -1], axis=(-1, -2)) / np.linalg.norm(A[:, 0], axis=(-1, -2))
        assert np.all(residual[settled] < 1e-4 * np.linalg.norm(S0[settled], axis=(-1, -2)))
        if V is None:
            exact = np.stack([gc.identity_value_limit(s, a) for s, a in zip(S0, A)])
            assert np.max(np.abs(S[settled, -1] - exact[settled])) < 1e-4 * np.abs(exact).max()
