"""Causal masking (arXiv 2411.04990): token 1 never moves, and with V = I every token converges to x_1(0).

Near the consensus p = x_1(0) the tangent displacements y_k = x_k − p obey, to first order,
ẏ_k = Σ_{j≤k} A_kj (y_j − y_k) with A_kj the weights at p: 1/k for SA (all logits equal
β⟨Qp, Kp⟩) and c/n, c = e^{β⟨Qp,Kp⟩}, for USA. The system is triangular with y_1 = 0, so its
slowest mode is token 2's, ẏ_2 = −A_21 y_2 with A_21 = 1/2 (SA) or c/n (USA): ‖x_2(t) − p‖ decays
like e^{−t/2} (SA) and e^{−ct/n} (USA), whatever Q, K and β, and the other tokens, driven by it, no
slower. The tests measure token 2's rate (the other modes, e^{−(k−1)t/k}, separate from it too slowly
to read a clean rate off the maximum over tokens).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.fields import USA
from attnflow.particles.multihead import MultiHead

N, D, B = 8, 3, 4
KEYS = jax.random.split(jax.random.key(2411), 4)
X0 = af.init.uniform(KEYS[0], N, D, batch=B)  # one start per seed
# generic per-member Q, K (d×d, ⟨Qx, Ky⟩ = O(1)) and one β per member
Q = jax.random.normal(KEYS[1], (B, D, D)) / np.sqrt(D)
K = jax.random.normal(KEYS[2], (B, D, D)) / np.sqrt(D)
BETAS = jnp.array([0.5, 1.0, 2.0, 4.0])


def distances_to_first_token(sol, x0):
    """‖x_k(t) − x_1(0)‖ for every member, save time and token: (B, T, n)."""
    return np.linalg.norm(np.asarray(sol.xs) - np.asarray(x0)[:, None, :1, :], axis=-1)


def decay_rate(ts, dist):
    """−d log(dist)/dt fitted where dist is in the linear regime (≪ 1) and above rounding (≫ 1e-16)."""
    # below 1e-3 the O(y²) terms change the rate by < 1e-3; above 1e-11 rounding is negligible
    keep = (dist < 1e-3) & (dist > 1e-11)
    assert keep.sum() >= 2, dist
    return -np.polyfit(ts[keep], np.log(dist[keep]), 1)[0]


def multihead(heads=3, seed=0):
    kq, kk = jax.random.split(jax.random.key(seed))
    Qh = jax.random.normal(kq, (heads, 1, D))
    Kh = jax.random.normal(kk, (heads, 1, D))
    # Σ_h V_h = I: token 1's velocity is P_{x_1}(x_1) = 0, as with V = I
    return MultiHead(2.0, Qh, Kh, jnp.broadcast_to(jnp.eye(D) / heads, (heads, D, D)), mask="causal")


@pytest.mark.slow
def test_token_one_attends_only_to_itself():
    x = X0[0]
    V = jax.random.normal(KEYS[3], (D, D))
    # whatever the others do, ẋ_1 = P_{x_1}(A_11 V x_1) with A_11 its only weight:
    # 1 for SA, e^{β⟨Qx_1,Kx_1⟩}/n for USA (β = 1 here)
    for field in (af.SA(3.0, Q[0], K[0], V, mask="causal"), USA(1.0, Q[0], K[0], V, mask="causal")):
        a11 = 1.0 if isinstance(field, af.SA) else np.exp(float(x[0] @ Q[0].T @ K[0] @ x[0])) / N
        y = a11 * (V @ x[0])
        np.testing.assert_allclose(field(0.0, x)[0], y - (x[0] @ y) * x[0], atol=1e-14)
    # with V = I that velocity vanishes: exactly for SA (A_11 = e^0 / e^0 = 1, and P_x x = 0 in
    # floating point), to rounding for USA and for heads whose values add up to I
    np.testing.assert_array_equal(af.SA(3.0, Q[0], K[0], mask="causal")(0.0, x)[0], 0.0)
    assert float(jnp.max(jnp.abs(USA(1.0, Q[0], K[0], mask="causal")(0.0, x)[0]))) < 1e-15
    assert float(jnp.max(jnp.abs(multihead()(0.0, x)[0]))) < 1e-15


@pytest.mark.parametrize(
    "field",
    [af.SA(2.0, Q[0], K[0], mask="causal"), USA(2.0, Q[0], K[0], mask="causal"), multihead()],
    ids=["sa", "usa", "multihead"],
)
def test_tokens_do_not_see_the_future(field):
    x = X0[0]
    moved = x.at[5:].set(x[5:] @ jnp.asarray(np.linalg.qr(np.random.default_rng(0).normal(size=(D, D)))[0]))
    # tokens 1..5 attend to tokens 1..5 only, which did not change: their velocities are bit-identical
    np.testing.assert_array_equal(field(0.0, moved)[:5], field(0.0, x)[:5])
    assert float(jnp.max(jnp.abs(field(0.0, moved)[5:] - field(0.0, x)[5:]))) > 1e-3


def test_sa_with_causal_mask_converges_to_the_first_token():
    ts = np.arange(0.0, 40.0 + 1e-9, 5.0)
    sol = af.simulate(af.SA(BETAS, Q, K, mask="causal"), X0, 40.0, ts=ts, solver="rk4", dt=0.1)
    dist = distances_to_first_token(sol, X0)
    # token 1 never moves: its velocity is exactly 0, only renormalization rounds (1 ulp per step at most)
    assert dist[..., 0].max() <= 1e-14
    worst = dist.max(-1)  # (B, T): max over tokens
    # every token ends at x_1(0): e^{−40/2} ≈ 2e-9 times a transient factor (measured ≤ 1.2e-6)
    assert worst[:, -1].max() < 1e-5, worst[:, -1]
    # once the transient is over (t ≥ 20), the distance decreases at every save
    assert np.all(np.diff(worst[:, ts >= 20], axis=1) < 0), worst
    # token 2 approaches at the rate 1/2 of the linearization, for every β and (Q, K)
    # (measured within 6e-6; RK4 at dt = 0.1 errs by ~1e-7 relative on e^{−t/2})
    for b in range(B):
        assert abs(decay_rate(ts, dist[b, :, 1]) - 0.5) < 5e-3, (b, decay_rate(ts, dist[b, :, 1]))


def test_without_mask_the_consensus_is_not_the_first_token():
    # the control: without the mask token 1 attends to the others and moves, so the tokens end far from x_1(0)
    sol = af.simulate(af.SA(BETAS, Q, K), X0, 60.0, solver="rk4", dt=0.1)
    dist = np.linalg.norm(np.asarray(sol.x_final) - np.asarray(X0)[:, :1, :], axis=-1)
    assert dist.max() > 0.1


def test_usa_with_causal_mask_fixes_token_one_and_converges_at_rate_c_over_n():
    beta = 1.0
    ts = np.arange(0.0, 120.0 + 1e-9, 10.0)
    sol = af.simulate(USA(beta, Q, K, mask="causal"), X0, 120.0, ts=ts, solver="rk4", dt=0.2)
    dist = distances_to_first_token(sol, X0)
    # P_x(c x) is 0 only to rounding (c ≠ 1), ~1e-16 per unit time: 1e-14 over t = 120
    assert dist[..., 0].max() <= 1e-14
    worst = dist.max(-1)
    # slower than SA (rates c/n ≈ 0.08–0.25 here), but every token approaches x_1(0) (measured ≤ 1e-4)
    assert worst[:, -1].max() < 1e-3 and np.all(np.diff(worst[:, ts >= 20], axis=1) < 0), worst
    p = np.asarray(X0[:, 0])
    c = np.exp(beta * np.einsum("bi,bji,bjk,bk->b", p, np.asarray(Q), np.asarray(K), p))
    for b in range(B):
        # token 2 at the predicted rate c/n = e^{β⟨Qp,Kp⟩}/n (measured within 2e-5 relative)
        assert abs(decay_rate(ts, dist[b, :, 1]) / (c[b] / N) - 1.0) < 5e-3, (b, c[b] / N)


def test_multihead_with_causal_mask_keeps_token_one_fixed():
    ts = np.linspace(0.0, 20.0, 5)
    sol = af.simulate(multihead(), X0[0], 20.0, ts=ts, solver="rk4", dt=0.1)
    # the heads' values add to I only up to rounding (I/3 · 3): velocity ~1e-17, displacement ≤ 1e-14
    assert float(np.linalg.norm(np.asarray(sol.xs[:, 0]) - np.asarray(X0[0, 0]), axis=-1).max()) <= 1e-14
