"""Hardmax attention without self-attention: formula, ties, and the β → ∞ limit of masked softmax."""

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.fields import Field
from attnflow.particles.hardmax import Hardmax


class NoSelfSA(Field):
    """SA (Q = K = V = I) with the diagonal logits at −∞: the finite-β field whose limit is Hardmax."""

    beta: jax.Array
    event_ndim: ClassVar[dict[str, int]] = {"beta": 0}

    def drift(self, t, x):
        logits = self.beta * (x @ x.T)
        logits = jnp.where(jnp.eye(x.shape[0], dtype=bool), -jnp.inf, logits)
        return jax.nn.softmax(logits, axis=-1) @ x


def _gaps(x):
    """Per token, the margin between its best and second-best other token."""
    s = jnp.where(jnp.eye(x.shape[0], dtype=bool), -jnp.inf, x @ x.T)
    top = jnp.sort(s, axis=-1)
    return top[:, -1] - top[:, -2]


def test_matches_the_formula_with_general_weights():
    rng = np.random.default_rng(0)
    n, d, k = 9, 4, 3
    x = np.asarray(af.init.uniform(jax.random.key(0), n, d))
    Q, K, V = rng.normal(size=(k, d)), rng.normal(size=(k, d)), rng.normal(size=(d, d))
    scores = (x @ Q.T) @ (x @ K.T).T
    np.fill_diagonal(scores, -np.inf)
    target = scores.argmax(axis=1)
    y = x[target] @ V.T
    expected = y - np.sum(x * y, 1, keepdims=True) * x
    field = Hardmax(Q, K, V)
    np.testing.assert_array_equal(field.targets(x), target)
    np.testing.assert_allclose(field(0.0, x), expected, atol=1e-13)
    A = field.attention(x)
    np.testing.assert_array_equal(A, np.eye(n)[target])  # one-hot rows, zero diagonal
    assert np.all(np.diag(A) == 0)


def test_ties_go_to_the_smallest_index():
    # token 0 at angle 0 is exactly as close to token 1 (+0.5) as to token 2 (−0.5)
    th = np.array([0.0, 0.5, -0.5, 2.5])
    x = np.stack([np.cos(th), np.sin(th)], -1)
    assert x[0] @ x[1] == x[0] @ x[2]
    assert Hardmax().targets(x).tolist() == [1, 0, 0, 1]


@pytest.mark.slow
def test_is_the_large_beta_limit_of_softmax_without_self_attention():
    """On a well-separated configuration (margin ≥ 0.08 between best and second-best partner along
    the run), masked softmax at β differs from Hardmax by ≤ 2(n−2) e^{−β·margin} in velocity:
    Σ_j A_ij x_j − x_{j*} = Σ_{j≠j*} A_ij (x_j − x_{j*}) and A_ij ≤ e^{−β(s_ij* − s_ij)}. So the
    trajectories over t ∈ [0, 0.5] agree to an error that falls exponentially in β.
    """
    n = 6
    x0 = af.init.uniform(jax.random.key(1), n, 3)
    ts = np.linspace(0.0, 0.5, 11)
    hard = af.simulate(Hardmax(), x0, 0.5, ts=ts, solver="rk4", dt=0.005)
    # the argmax never switches: the Hardmax field is smooth along this run
    targets = jax.vmap(Hardmax().targets)(hard.xs)
    assert bool(jnp.all(targets == targets[0]))
    margin = float(jnp.min(jax.vmap(_gaps)(hard.xs)))
    assert margin > 0.08

    betas = np.array([25.0, 50.0, 100.0, 200.0])
    soft = af.simulate(NoSelfSA(jnp.asarray(betas)), x0, 0.5, ts=ts, solver="rk4", dt=0.005)
    errors = np.asarray(jnp.max(jnp.abs(soft.xs - hard.xs[None]), axis=(1, 2, 3)))
    assert np.all(np.diff(errors) < 0)
    assert errors[-1] < 1e-8  # measured 5e-10
    for beta in betas:
        v_err = jnp.max(jnp.linalg.norm(NoSelfSA(beta)(0.0, x0) - Hardmax()(0.0, x0), axis=-1))
        assert float(v_err) <= 2 * (n - 2) * np.exp(-beta * float(jnp.min(_gaps(x0))))
    # with the diagonal allowed, large β is trivial: each token attends to itself and stays put
    np.testing.assert_allclose(af.SA(1e4)(0.0, x0), 0.0, atol=1e-12)


def test_pairs_merge_and_ensembles_over_weights():
    # two tokens that are each other's target: each turns towards the other at angular speed
    # sin θ, so θ̇ = −2 sin θ and tan(θ/2) = tan(θ₀/2) e^{−2t}
    th = np.array([0.0, 1.0])
    x0 = np.stack([np.cos(th), np.sin(th)], -1)
    ts = np.linspace(0.0, 3.0, 7)
    sol = af.simulate(Hardmax(), x0, 3.0, ts=ts, solver="rk4", dt=0.01)
    angle = np.asarray(af.particles.geodesic_distance(sol.xs[:, 0], sol.xs[:, 1]))
    np.testing.assert_allclose(angle, 2 * np.arctan(np.tan(0.5) * np.exp(-2 * ts)), rtol=1e-8)
    assert float(af.particles.norm_error(sol.xs)) < 1e-12
    V = np.stack([np.eye(3), -np.eye(3)])
    x = af.init.uniform(jax.random.key(2), 5, 3)
    out = af.simulate(Hardmax(V=V), x, 0.2, solver="euler", dt=0.01)
    assert out.x_final.shape == (2, 5, 3)


def test_bad_hardmax_input():
    with pytest.raises(ValueError, match="n ≥ 2"):
        af.simulate(Hardmax(), np.array([[1.0, 0.0]]), 1.0, solver="euler", dt=0.1)
    with pytest.raises(ValueError, match="same shape"):
        Hardmax(np.eye(3), np.eye(2, 3))
    with pytest.raises(ValueError, match="square"):
        Hardmax(V=np.ones((2, 3)))
    with pytest.raises(ValueError, match="d = 2"):
        af.simulate(Hardmax(V=np.eye(3)), np.eye(2), 1.0, solver="euler", dt=0.1)
