"""Multi-head attention, [GLPR] (2.7): the formula, reduction to one head, symmetries, ensembles, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.fields import USA
from attnflow.particles.multihead import MultiHead

N, D, H = 8, 4, 2
K_DIM = D // H
X = af.init.uniform(0, N, D)


def weights(seed, heads=H, k=K_DIM, d=D):
    """Generic heads: Gaussian Q_h, K_h (k×d) and V_h (d×d), scaled so that ⟨Q_h x, K_h y⟩ = O(1)."""
    kq, kk, kv = jax.random.split(jax.random.key(seed), 3)
    return (
        jax.random.normal(kq, (heads, k, d)) / np.sqrt(d),
        jax.random.normal(kk, (heads, k, d)) / np.sqrt(d),
        jax.random.normal(kv, (heads, d, d)) / np.sqrt(d),
    )


def naive_multihead(x, beta, Q, K, V, model="sa", causal=False):
    """Direct transcription of [GLPR] (2.7), one head at a time, no max subtraction, float64."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    total = np.zeros_like(x)
    for q, k, v in zip(np.asarray(Q), np.asarray(K), np.asarray(V)):
        w = np.exp(beta * (x @ q.T) @ (x @ k.T).T - (beta if model == "usa-rescaled" else 0.0))
        if causal:
            w = np.tril(w)
        a = w / w.sum(1, keepdims=True) if model == "sa" else w / n
        total += a @ (x @ v.T)
    return total - np.sum(x * total, 1, keepdims=True) * x


@pytest.mark.parametrize("model", ["sa", "usa", "usa-rescaled"])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_field_matches_the_formula(model, mask):
    Q, K, V = weights(1)
    v = MultiHead(2.5, Q, K, V, mask=mask, model=model)(0.0, X)
    expected = naive_multihead(X, 2.5, Q, K, V, model=model, causal=mask == "causal")
    # both sides are O(1) sums of n·H products of O(1) terms: agreement to ~100 ulps
    np.testing.assert_allclose(v, expected, rtol=1e-12, atol=1e-13)
    # tangent to the sphere at every particle
    np.testing.assert_allclose(jnp.sum(v * X, -1), 0.0, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize("beta", [0.0, 3.0, 1e3])
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_one_head_is_sa_with_the_same_weights(beta, mask):
    Q, K, V = weights(2, heads=1, k=3)
    one = MultiHead(beta, Q, K, V, mask=mask)
    sa = af.SA(beta, Q[0], K[0], V[0], mask=mask)
    # same arithmetic up to the order of the contractions; 1e-13 also at β = 1e3, where
    # the max subtraction keeps the exponentials in range
    np.testing.assert_allclose(one.drift(0.0, X), sa.drift(0.0, X), atol=1e-13)
    np.testing.assert_allclose(one(0.0, X), sa(0.0, X), atol=1e-13)
    for model, time in (("usa", "glpr"), ("usa-rescaled", "rescaled")):
        if beta > 100 and time == "glpr":
            continue  # e^{1000} overflows; check() refuses it (below)
        u1 = MultiHead(beta, Q, K, V, mask=mask, model=model)(0.0, X)
        u = USA(beta, Q[0], K[0], V[0], mask=mask, time=time)(0.0, X)
        np.testing.assert_allclose(u1, u, atol=1e-13 * (1 + float(jnp.max(jnp.abs(u)))))


def test_identity_with_one_head_is_plain_sa():
    np.testing.assert_allclose(MultiHead.identity(4.0, 1, D)(0.0, X), af.SA(4.0)(0.0, X), atol=1e-14)


def test_identical_heads_add_up():
    Q, K, V = weights(3, heads=1)
    one = MultiHead(1.7, Q, K, V)
    for heads in (2, 3):
        many = MultiHead(1.7, *(jnp.repeat(m, heads, axis=0) for m in (Q, K, V)))
        # H copies of the same head: the drift (and its projection) is exactly H times one head's
        np.testing.assert_allclose(many.drift(0.0, X), heads * one.drift(0.0, X), rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(many(0.0, X), heads * one(0.0, X), rtol=1e-13, atol=1e-14)


def test_identity_heads_split_the_coordinates():
    field = MultiHead.identity(2.0, H, D)
    Q, K, V = (np.asarray(m) for m in (field.Q, field.K, field.V))
    # Q_h Q_hᵀ = I_k (orthonormal rows), Σ_h Q_hᵀ Q_h = I_d (the blocks partition R^d), Σ_h V_h = I_d
    np.testing.assert_array_equal(Q @ np.swapaxes(Q, 1, 2), np.broadcast_to(np.eye(K_DIM), (H, K_DIM, K_DIM)))
    np.testing.assert_array_equal(np.sum(np.swapaxes(Q, 1, 2) @ Q, 0), np.eye(D))
    np.testing.assert_array_equal(K, Q)
    np.testing.assert_allclose(np.sum(V, 0), np.eye(D), atol=1e-15)
    assert field.heads == H


def test_block_rotations_are_symmetries_of_identity_heads():
    # each head sees ⟨x_i, x_j⟩ on its own block, so the field commutes with R = diag(R_1, …, R_H),
    # R_h ∈ O(d/H), but not with a generic rotation of R^d
    field = MultiHead.identity(3.0, H, D)
    rng = np.random.default_rng(4)
    blocks = [np.linalg.qr(rng.normal(size=(K_DIM, K_DIM)))[0] for _ in range(H)]
    r = np.zeros((D, D))
    for h, b in enumerate(blocks):
        r[h * K_DIM : (h + 1) * K_DIM, h * K_DIM : (h + 1) * K_DIM] = b
    np.testing.assert_allclose(field(0.0, X @ r), field(0.0, X) @ r, atol=1e-14)
    g = np.linalg.qr(rng.normal(size=(D, D)))[0]
    assert float(jnp.max(jnp.abs(field(0.0, X @ g) - field(0.0, X) @ g))) > 1e-3


def test_permutation_equivariance():
    perm = np.random.default_rng(5).permutation(N)
    for model in ("sa", "usa"):
        field = MultiHead(2.0, *weights(5), model=model)
        np.testing.assert_allclose(field(0.0, X[perm]), field(0.0, X)[perm], atol=1e-14)


def test_ensemble_of_per_member_heads_equals_individual_runs():
    members = [weights(10 + s) for s in range(3)]
    Q, K, V = (jnp.stack(m) for m in zip(*members))
    assert Q.shape == (3, H, K_DIM, D)
    ts = np.linspace(0.0, 2.0, 5)
    batch = af.simulate(MultiHead(2.0, Q, K, V), X, 2.0, ts=ts, solver="rk4", dt=0.05)
    assert batch.xs.shape == (3, 5, N, D)
    for s, (q, k, v) in enumerate(members):
        single = af.simulate(MultiHead(2.0, q, k, v), X, 2.0, ts=ts, solver="rk4", dt=0.05)
        # vmapped and single runs do the same operations: equal to rounding
        np.testing.assert_allclose(batch.xs[s], single.xs, atol=1e-13)
    # the run stays on the sphere (RK4 renormalizes every step)
    assert float(af.particles.sphere.norm_error(batch.xs)) < 1e-14


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((1.0, np.ones((2, 4)), np.ones((2, 4)), np.ones((2, 4, 4))), {}, "Q must be a 3-D real array"),
        ((1.0, np.ones((2, 2, 4)), np.ones((2, 3, 4)), np.ones((2, 4, 4))), {}, "Q and K must have the same shape"),
        ((1.0, np.ones((2, 2, 4)), np.ones((2, 2, 4)), np.ones((3, 4, 4))), {}, "same number of heads"),
        ((1.0, np.ones((2, 2, 4)), np.ones((2, 2, 4)), np.ones((2, 4, 3))), {}, "square"),
        ((1.0, np.ones((2, 2, 4)), np.ones((2, 2, 4)), np.ones((2, 3, 3))), {}, "V on d = 3"),
        ((1.0, None, np.ones((2, 2, 4)), np.ones((2, 4, 4))), {}, "MultiHead needs Q"),
        (
            (-1.0, np.ones((2, 2, 4)), np.ones((2, 2, 4)), np.ones((2, 4, 4))),
            {"model": "usa-rescaled"},
            r"beta must be ≥ 0 for MultiHead\(model='usa-rescaled'\)",
        ),
        ((1.0, *weights(0)), dict(mask="future"), "mask must be one of 'none', 'causal'"),
        ((1.0, *weights(0)), dict(model="linear"), "model must be one of 'sa', 'usa', 'usa-rescaled'"),
    ],
)
def test_bad_arguments(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        MultiHead(*args, **kwargs)


def test_heads_must_divide_d():
    with pytest.raises(ValueError, match="heads must divide d: got heads=3 and d=4"):
        MultiHead.identity(1.0, 3, 4)
    with pytest.raises(ValueError, match="heads must be an integer ≥ 1"):
        MultiHead.identity(1.0, 0, 4)


def test_weights_must_match_the_particle_dimension_and_usa_overflow_is_refused():
    with pytest.raises(ValueError, match=r"Q has shape \(2, 2, 4\) but particles live in d = 3"):
        af.simulate(MultiHead(1.0, *weights(0)), af.init.uniform(0, 5, 3), 1.0)
    with pytest.raises(ValueError, match="usa-rescaled"):
        af.simulate(MultiHead.identity(1e3, H, D, model="usa"), X, 1.0)


def test_float32_configurations_stay_float32():
    x32 = X.astype(jnp.float32)
    v = MultiHead(2.0, *weights(6))(0.0, x32)
    assert v.dtype == jnp.float32
    # float32 rounding (6e-8) times O(1) velocities
    np.testing.assert_allclose(v, MultiHead(2.0, *weights(6))(0.0, X), atol=1e-6)


@pytest.mark.parametrize("model", ["sa", "usa"])
def test_attention_matrix_is_the_mean_of_the_heads_row_normalized_matrices(model):
    Q, K, V = weights(7)
    field = MultiHead(1.5, Q, K, V, model=model)
    x = np.asarray(X)
    logits = np.stack([1.5 * (x @ q.T) @ (x @ k.T).T for q, k in zip(np.asarray(Q), np.asarray(K))])
    np.testing.assert_allclose(field.kernel_logits(X), logits, rtol=1e-13, atol=1e-13)
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    expected = np.mean(w / w.sum(axis=-1, keepdims=True), axis=0)
    np.testing.assert_allclose(field.attention_matrix(0.0, X), expected, rtol=0, atol=1e-14)
    assert field.has_attention and float(field.temperature) == 1.5
