"""Rotary positions (``positional="rope"``): the logits against explicit rotation matrices, consensus at rest,
the evaluations (dense, blocked, fused, multi-head) agreeing, and the refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run.preflight import check_keys_read
from attnflow.particles.fields import SA, USA
from attnflow.particles.multihead import MultiHead

jax.config.update("jax_enable_x64", True)


def rotation(angles: np.ndarray) -> np.ndarray:
    """The block-diagonal rotation turning plane (2p, 2p + 1) by angles[p]."""
    k = 2 * len(angles)
    R = np.zeros((k, k))
    for p, a in enumerate(angles):
        R[2 * p : 2 * p + 2, 2 * p : 2 * p + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return R


def sphere(rng, n, d):
    x = rng.normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def direct_velocity(beta, x, Q, K, theta, *, softmax=True, causal=False):
    """P_{x_i} Σ_j w_ij x_j with logits β (R_i Q x_i)ᵀ (R_j K x_j), every matrix formed explicitly."""
    n = x.shape[0]
    R = [rotation(i * theta) for i in range(n)]
    L = np.array([[beta * (R[i] @ Q @ x[i]) @ (R[j] @ K @ x[j]) for j in range(n)] for i in range(n)])
    # the relative form: ⟨Q x_i, R_{j−i} K x_j⟩
    rel = np.array([[beta * (Q @ x[i]) @ (rotation((j - i) * theta) @ K @ x[j]) for j in range(n)] for i in range(n)])
    np.testing.assert_allclose(L, rel, atol=1e-12)
    if causal:
        L = np.where(np.tril(np.ones((n, n), bool)), L, -np.inf)
    w = np.exp(L - L.max(axis=1, keepdims=True))
    v = (w @ x) / w.sum(axis=1, keepdims=True) if softmax else (w @ x) * np.exp(L.max(axis=1, keepdims=True)) / n
    return v - np.sum(v * x, axis=1, keepdims=True) * x


@pytest.mark.parametrize("n, d, k, base", [(5, 2, 2, 10000.0), (7, 4, 4, 3.0), (6, 6, 4, 250.0), (9, 8, 8, 1.5)])
@pytest.mark.parametrize("causal", [False, True])
def test_rope_velocity_against_explicit_rotations(n, d, k, base, causal):
    rng = np.random.default_rng(n * d + k)
    x = sphere(rng, n, d)
    Q, K = rng.normal(size=(k, d)) / np.sqrt(d), rng.normal(size=(k, d)) / np.sqrt(d)
    theta = base ** (-2.0 * np.arange(k // 2) / k)
    mask = "causal" if causal else "none"
    for cls, softmax in ((SA, True), (USA, False)):
        f = cls(1.7, Q, K, mask=mask, positional="rope", rope_base=base)
        want = direct_velocity(1.7, x, Q, K, theta, softmax=softmax, causal=causal)
        np.testing.assert_allclose(np.asarray(f(0.0, jnp.asarray(x))), want, atol=1e-13)
        # the frequencies given one by one are the base's
        g = cls(1.7, Q, K, mask=mask, positional="rope", rope_theta=theta)
        np.testing.assert_allclose(np.asarray(g(0.0, jnp.asarray(x))), want, atol=1e-13)


def test_rope_with_identity_weights_on_the_circle_turns_by_position():
    """d = 2, Q = K = I: θ_0 = 1 whatever the base, logits β cos(φ_j − φ_i + (j − i))."""
    phi = np.array([0.3, 1.1, -0.4, 2.0])
    x = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    beta = 2.5
    m = np.arange(4)[None, :] - np.arange(4)[:, None]
    L = beta * np.cos(phi[None, :] - phi[:, None] + m)
    A = np.exp(L) / np.exp(L).sum(axis=1, keepdims=True)
    omega = np.sum(A * np.sin(phi[None, :] - phi[:, None]), axis=1)
    for base in (10000.0, 2.0):
        v = np.asarray(SA(beta, positional="rope", rope_base=base)(0.0, jnp.asarray(x)))
        np.testing.assert_allclose(v, omega[:, None] * np.stack([-x[:, 1], x[:, 0]], axis=1), atol=1e-14)


@pytest.mark.parametrize("d, base, mask", [(2, 10000.0, "none"), (4, 5.0, "causal"), (8, 100.0, "none")])
def test_consensus_stays_a_rest_point(d, base, mask):
    """x_i = x for every i: Σ_j A_ij x_j = x whatever the rotated weights, so the tangent velocity is 0."""
    rng = np.random.default_rng(d)
    x = np.repeat(sphere(rng, 1, d), 6, axis=0)
    fields = [
        SA(3.0, positional="rope", rope_base=base, mask=mask),
        USA(3.0, positional="rope", rope_base=base, mask=mask),
        SA(3.0, rng.normal(size=(d, d)), rng.normal(size=(d, d)), positional="rope", rope_base=base, mask=mask),
    ]
    if d >= 4:
        fields.append(MultiHead.identity(3.0, 2, d, positional="rope", rope_base=base, mask=mask))
    for f in fields:
        assert np.max(np.abs(np.asarray(f(0.0, jnp.asarray(x))))) < 1e-12


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_blocked_fused_and_dense_rope_agree():
    rng = np.random.default_rng(3)
    x = jnp.asarray(sphere(rng, 12, 6))
    dense = SA(2.0, positional="rope", rope_base=30.0, block=None)(0.0, x)
    blocked = SA(2.0, positional="rope", rope_base=30.0, block=4)(0.0, x)
    np.testing.assert_allclose(np.asarray(blocked), np.asarray(dense), atol=1e-13)
    usa = USA(2.0, positional="rope", rope_base=30.0, block=None, mask="causal")(0.0, x)
    usa_blocked = USA(2.0, positional="rope", rope_base=30.0, block=4, mask="causal")(0.0, x)
    np.testing.assert_allclose(np.asarray(usa_blocked), np.asarray(usa), atol=1e-12)
    x32 = x.astype(jnp.float32)
    fused = SA(2.0, positional="rope", rope_base=30.0, kernel="fused")(0.0, x32)
    np.testing.assert_allclose(np.asarray(fused), np.asarray(dense), atol=2e-5)


def test_multihead_rope_rotates_each_head_in_its_own_coordinates():
    rng = np.random.default_rng(4)
    n, d, H, base = 5, 8, 2, 50.0
    x = sphere(rng, n, d)
    k = d // H
    theta = base ** (-2.0 * np.arange(k // 2) / k)
    f = MultiHead.identity(1.3, H, d, positional="rope", rope_base=base)
    want = np.zeros((n, d))
    for h in range(H):
        Q = np.eye(d)[h * k : (h + 1) * k]
        R = [rotation(i * theta) for i in range(n)]
        L = np.array([[1.3 * (R[i] @ Q @ x[i]) @ (R[j] @ Q @ x[j]) for j in range(n)] for i in range(n)])
        A = np.exp(L) / np.exp(L).sum(axis=1, keepdims=True)
        want += A @ x / H
    want -= np.sum(want * x, axis=1, keepdims=True) * x
    np.testing.assert_allclose(np.asarray(f(0.0, jnp.asarray(x))), want, atol=1e-13)


def test_rope_has_no_span_reduction_and_bounds_its_kernel_by_the_norms():
    Q, K = np.diag([2.0, 1.0, 1.0, 1.0]), np.diag([1.0, 1.0, 3.0, 1.0])
    f = SA(1.0, Q, K, positional="rope")
    assert f.in_span(2) is None and f.in_span(jnp.eye(4, 2)) is None
    assert f.kernel_norm() == pytest.approx(6.0)  # ‖Q‖‖K‖, where ‖QᵀK‖ = 3
    assert SA(1.0, Q, K).kernel_norm() == pytest.approx(3.0)


def test_rope_members_by_base_are_the_single_runs():
    x = jnp.asarray(sphere(np.random.default_rng(5), 4, 4))
    both = SA(jnp.asarray([1.0, 1.0]), positional="rope", rope_base=jnp.asarray([2.0, 40.0]))
    got = jax.vmap(lambda b: SA(1.0, positional="rope", rope_base=b)(0.0, x))(both.rope_base)
    for i, b in enumerate((2.0, 40.0)):
        np.testing.assert_allclose(np.asarray(got[i]), np.asarray(SA(1.0, positional="rope", rope_base=b)(0.0, x)))


def test_rope_refusals_name_the_problem():
    with pytest.raises(ValueError, match="d = 3"):
        SA(1.0, positional="rope").check(4, 3, jnp.float64)
    with pytest.raises(ValueError, match=r"k = 3 \(the rows of Q and K\)"):
        SA(1.0, np.ones((3, 4)), np.ones((3, 4)), positional="rope").check(4, 4, jnp.float64)
    with pytest.raises(ValueError, match="rope_base must be > 0"):
        SA(1.0, positional="rope", rope_base=0.0)
    with pytest.raises(ValueError, match="rope_theta has 1 frequencies"):
        SA(1.0, positional="rope", rope_theta=[1.0]).check(4, 4, jnp.float64)
    with pytest.raises(ValueError, match="k = 3 must be even"):
        MultiHead.identity(1.0, 2, 6, positional="rope")
    with pytest.raises(ValueError, match="kernel='pallas'"):
        SA(1.0, positional="rope", kernel="pallas")
    with pytest.raises(ConfigError, match="d = 5 with heads = 1"):
        load_config({"positional": "rope", "d": [4, 5]})
    with pytest.raises(ConfigError, match="rope_base .* acts only with positional = 'rope'"):
        check_keys_read(load_config({"rope_base": 3.0}))
    config = load_config({"positional": "rope", "rope_base": 7.0, "d": [4]})
    assert config.rope_base == 7.0
