"""Sinkformers (arXiv 2110.11773): doubly stochastic attention and its gradient-flow structure."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.sinkhorn import Sinkhorn, sinkhorn_potentials


def _random_qk(key, k, d):
    kq, kk, kv = jax.random.split(key, 3)
    return (
        jax.random.normal(kq, (k, d)) / np.sqrt(d),
        jax.random.normal(kk, (k, d)) / np.sqrt(d),
        jax.random.normal(kv, (d, d)) / np.sqrt(d),
    )


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.5, 3.0, 9.0])
def test_attention_is_doubly_stochastic_to_tol(beta):
    x = af.init.uniform(jax.random.key(0), 24, 4)
    Q, K, V = _random_qk(jax.random.key(1), 3, 4)
    tol = 1e-10
    # identity kernel (symmetric iteration) and general Q ≠ K (alternating iteration)
    for field in (Sinkhorn(beta, tol=tol), Sinkhorn(beta, Q, K, V, tol=tol, max_iter=20_000)):
        S = field.attention(x)
        assert float(jnp.min(S)) > 0.0
        np.testing.assert_allclose(S.sum(axis=1), 1.0, rtol=0, atol=tol)
        np.testing.assert_allclose(S.sum(axis=0), 1.0, rtol=0, atol=tol)
        # the drift is S V x, projected
        v = S @ field.values(x)
        np.testing.assert_allclose(field(0.0, x), v - jnp.sum(v * x, -1, keepdims=True) * x, atol=1e-13)


@pytest.mark.slow
def test_symmetric_kernels_give_a_symmetric_matrix_unlike_softmax():
    x = af.init.uniform(jax.random.key(2), 16, 3)
    W = jax.random.normal(jax.random.key(3), (3, 3))
    for beta in (1.0, 5.0):
        S = Sinkhorn(beta).attention(x)
        np.testing.assert_allclose(S, S.T, rtol=0, atol=1e-12)
        # Q = K = W: QᵀK = WᵀW is symmetric. Passing the same matrix takes the symmetric
        # iteration, equal copies the general one; both reach the unique scaling
        S_same = Sinkhorn(beta, W, W, tol=1e-11).attention(x)
        S_copy = Sinkhorn(beta, W, np.array(W), tol=1e-11, max_iter=50_000).attention(x)
        np.testing.assert_allclose(S_same, S_same.T, rtol=0, atol=1e-12)
        np.testing.assert_allclose(S_copy, S_same, rtol=0, atol=1e-9)
        # softmax attention is only row-stochastic: A_ij = e^{β⟨x_i,x_j⟩}/Z_i is not symmetric
        # unless all Z_i agree, nor column-stochastic (asymmetry 8e-3 at β = 1, 10⁹ × the tolerance)
        A = af.SA(beta).attention(x)
        assert float(jnp.max(jnp.abs(A - A.T))) > 1e-3
        assert float(jnp.max(jnp.abs(A.sum(axis=0) - 1.0))) > 1e-2


@pytest.mark.slow
def test_beta_zero_is_uniform_attention():
    x = af.init.uniform(jax.random.key(4), 10, 3)
    Q, K, V = _random_qk(jax.random.key(5), 2, 3)
    for field in (Sinkhorn(0.0), Sinkhorn(0.0, Q, K, V)):
        np.testing.assert_allclose(field.attention(x), np.full((10, 10), 0.1), rtol=0, atol=1e-15)
    # with uniform attention every token moves towards the mean, exactly as SA at β = 0
    np.testing.assert_allclose(Sinkhorn(0.0)(0.0, x), af.SA(0.0)(0.0, x), atol=1e-15)


@pytest.mark.slow
def test_sinkhorn_flow_is_the_gradient_ascent_of_its_energy():
    """Q = K = V = I: ẋ_i = P_{x_i} ∇_{x_i} J, so dJ/dt = Σ_i ‖ẋ_i‖² (gradient flow, round metric).

    Checked pointwise against the autodiff gradient of J and, along a trajectory, J(t) − J(0)
    against the Simpson integral of Σ‖ẋ‖² (error O(h⁴) with h = 0.05, below 10⁻⁷ relative).
    E_β (docs/model.md §1.3), whose gradient flow is USA, is not the Sinkformer's energy, but it
    increases too along these runs (observed, not a theorem).
    """
    beta = 3.0
    field = Sinkhorn(beta, tol=1e-13)
    x = af.init.uniform(jax.random.key(6), 12, 3)
    grad = jax.jacfwd(field.energy)(x)
    riemannian = grad - jnp.sum(grad * x, -1, keepdims=True) * x
    np.testing.assert_allclose(field(0.0, x), riemannian, rtol=0, atol=1e-9)

    x0 = af.init.uniform(jax.random.key(7), 12, 3, batch=4)
    ts = np.linspace(0.0, 8.0, 161)

    def stats(t, x, f):
        return dict(J=f.energy(x), E=af.energy(x, f.beta), speed2=jnp.sum(f(t, x) ** 2))

    sol = af.simulate(field, x0, 8.0, ts=ts, solver="rk4", dt=0.01, save=stats)
    J, E, speed2 = (np.asarray(sol.stats[k]) for k in ("J", "E", "speed2"))
    h = ts[1] - ts[0]
    simpson = h / 3 * (speed2[:, 0] + speed2[:, -1] + 4 * speed2[:, 1:-1:2].sum(1) + 2 * speed2[:, 2:-1:2].sum(1))
    np.testing.assert_allclose(J[:, -1] - J[:, 0], simpson, rtol=1e-7)
    assert np.all(np.diff(J, axis=1) > 0)
    assert np.all(np.diff(E, axis=1) > 0)


@pytest.mark.slow
def test_sinkhorn_potentials_and_limits():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(7, 7)) * 3.0)
    f, g, err, it = sinkhorn_potentials(logits, 1e-12, 10_000)
    S = jnp.exp(logits + f[:, None] + g[None, :])
    assert float(err) < 1e-12 and 1 < int(it) < 10_000
    np.testing.assert_allclose(S.sum(0), 1.0, atol=1e-12)
    # max_iter caps the loop: the error is then reported, not hidden
    _, _, err1, it1 = sinkhorn_potentials(logits, 1e-12, 1)
    assert int(it1) == 1 and float(err1) > 1e-6
    # huge β does not overflow (log domain)
    x = af.init.uniform(jax.random.key(8), 6, 3)
    S = Sinkhorn(1e4).attention(x)
    assert bool(jnp.all(jnp.isfinite(S)))
    np.testing.assert_allclose(S, jnp.eye(6), atol=1e-8)  # tokens attend to themselves


@pytest.mark.slow
def test_ensembles_and_float32():
    x = af.init.uniform(jax.random.key(9), 8, 3)
    sol = af.simulate(Sinkhorn([0.5, 2.0]), x, 1.0, solver="tsit5")
    assert sol.x_final.shape == (2, 8, 3)
    assert float(af.particles.norm_error(sol.x_final)) < 1e-12
    # float32: the requested tolerance is raised to what float32 resolves, so the loop ends
    S = Sinkhorn(2.0).attention(x.astype(jnp.float32))
    assert S.dtype == jnp.float32
    np.testing.assert_allclose(S.sum(0), 1.0, atol=1e-5)


def test_bad_sinkhorn_input():
    with pytest.raises(ValueError, match="causal"):
        Sinkhorn(1.0, mask="causal")
    with pytest.raises(ValueError, match="tol"):
        Sinkhorn(1.0, tol=0.0)
    with pytest.raises(ValueError, match="max_iter"):
        Sinkhorn(1.0, max_iter=0)
    with pytest.raises(ValueError, match="beta"):
        Sinkhorn(-1.0)
