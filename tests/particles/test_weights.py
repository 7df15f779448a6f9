"""Random weights and layer-wise fields: moments and spectra of the ensembles, the member→key rule,
layer selection against split runs, per-member batches, the repulsive flow's energy minima, bad input."""

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.layerwise import LayerWise
from attnflow.particles.sphere import normalize
from attnflow.particles.weights import ENSEMBLES, member_keys, sample_weights
from attnflow.solvers.fixed import RK4

KEY = jax.random.key(2024)


def _z_bound(n_samples: int, sigmas: float = 5.0) -> float:
    # a sample mean of n i.i.d. unit-variance terms fluctuates by 1/√n; 5σ fails with probability ~6e-7
    return sigmas / np.sqrt(n_samples)


# -- ensembles ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ensemble", list(ENSEMBLES))
def test_every_ensemble_has_the_documented_shapes_and_identities(ensemble):
    d = 5
    one, many = sample_weights(KEY, d, ensemble), sample_weights(KEY, d, ensemble, members=3)
    assert set(one) == set(many) == {"Q", "K", "V"}
    identity_q = ensemble in ("identity", "repulsive", "wigner-psd", "wigner-v-qk")
    identity_k = ensemble in ("identity", "repulsive")
    assert (one["Q"] is None) == identity_q and (one["K"] is None) == identity_k
    assert (one["V"] is None) == (ensemble == "identity")
    for name, a in one.items():
        if a is not None:
            assert a.shape == (d, d) and a.dtype == jnp.float64
            assert many[name].shape == (3, d, d)
    # float32 draws are the float64 draws rounded
    f32 = sample_weights(KEY, d, ensemble, dtype="float32")
    for name, a in one.items():
        if a is not None:
            assert f32[name].dtype == jnp.float32
            np.testing.assert_array_equal(f32[name], np.asarray(a).astype(np.float32))


def test_ginibre_entries_are_independent_with_mean_zero_and_variance_one_over_d():
    d, members = 64, 16
    w = sample_weights(KEY, d, "ginibre", members=members)
    n = members * d * d
    q, k, v = (np.asarray(w[m]).ravel() * np.sqrt(d) for m in "QKV")  # rescaled to unit variance
    for z in (q, k, v):
        assert abs(z.mean()) < _z_bound(n)
        # the sample variance of Gaussians has standard deviation √(2/n)
        assert abs(z.var() - 1.0) < 5.0 * np.sqrt(2.0 / n)
    for a, b in ((q, k), (q, v), (k, v)):  # independent draws: correlations of order 1/√n
        assert abs(np.mean(a * b)) < _z_bound(n)
    # rectangular queries and keys (k×d) keep the 1/d variance
    rect = sample_weights(KEY, d, "ginibre", k=8)
    assert rect["Q"].shape == rect["K"].shape == (8, d) and rect["V"].shape == (d, d)


def test_ginibre_spectral_radius_follows_the_circular_law():
    # entries N(0, 1/d): eigenvalues fill the unit disk; at d = 400 the radius exceeds 1 by the
    # finite-d correction √(log d / 4d) ≈ 0.06 at most, so 0.1 is enough
    v = np.asarray(sample_weights(KEY, 400, "ginibre")["V"])
    assert abs(np.max(np.abs(np.linalg.eigvals(v))) - 1.0) < 0.1


def test_wigner_is_symmetric_with_goe_variances_and_semicircle_edge():
    d, members = 64, 32
    w = np.asarray(sample_weights(KEY, d, "wigner-psd", members=members)["K"])
    np.testing.assert_array_equal(w, np.swapaxes(w, -1, -2))
    iu = np.triu_indices(d, 1)
    off = w[:, iu[0], iu[1]].ravel() * np.sqrt(d)  # N(0, 1) after rescaling
    diag = np.diagonal(w, axis1=1, axis2=2).ravel() * np.sqrt(d / 2.0)
    for z in (off, diag):
        assert abs(z.mean()) < _z_bound(z.size)
        assert abs(z.var() - 1.0) < 5.0 * np.sqrt(2.0 / z.size)
    # semicircle on [−2, 2]: the extreme eigenvalues sit within O(d^{-2/3}) ≈ 0.02 of ±2 at d = 400
    eig = np.linalg.eigvalsh(np.asarray(sample_weights(KEY, 400, "wigner-v-qk")["K"]))
    assert abs(eig[-1] - 2.0) < 0.1 and abs(eig[0] + 2.0) < 0.1


def test_psd_values_have_marchenko_pastur_spectrum():
    v = np.asarray(sample_weights(KEY, 400, "wigner-psd", members=2)["V"])
    np.testing.assert_array_equal(v, np.swapaxes(v, -1, -2))
    eig = np.linalg.eigvalsh(v)
    # exactly PSD up to the rounding of G Gᵀ/d (~1e-15); the smallest true eigenvalue is ~1/d² > 0
    assert eig.min() >= -1e-12
    # E V = I: the mean eigenvalue is tr V / d, which has standard deviation √2/d ≈ 0.004
    np.testing.assert_allclose(eig.mean(axis=-1), 1.0, atol=0.02)
    # Marchenko–Pastur with ratio 1 ends at 4; the top eigenvalue fluctuates on 2^{4/3} d^{-2/3} ≈ 0.05
    np.testing.assert_allclose(eig[:, -1], 4.0, atol=0.3)


def test_value_matrices_tied_to_the_kernel():
    for ensemble, sign in (("ginibre-v-qk", 1.0), ("v-minus-qk", -1.0)):
        w = sample_weights(KEY, 6, ensemble, members=4, k=3)
        qk = np.swapaxes(np.asarray(w["Q"]), -1, -2) @ np.asarray(w["K"])
        # same product computed twice: equal up to a few roundings of a 3-term sum
        np.testing.assert_allclose(w["V"], sign * qk, rtol=0, atol=1e-15)
    w = sample_weights(KEY, 6, "wigner-v-qk", members=4)
    np.testing.assert_array_equal(w["V"], w["K"])  # Q = I: QᵀK is K itself
    w = sample_weights(KEY, 6, "repulsive", members=2)
    np.testing.assert_array_equal(w["V"], -np.broadcast_to(np.eye(6), (2, 6, 6)))


def test_members_differ_are_reproducible_and_member_m_is_the_draw_of_fold_in_key_m():
    w = sample_weights(KEY, 4, "ginibre", members=5)
    again = sample_weights(KEY, 4, "ginibre", members=5)
    more = sample_weights(KEY, 4, "ginibre", members=8)
    for name in "QKV":
        np.testing.assert_array_equal(w[name], again[name])
        np.testing.assert_array_equal(w[name], more[name][:5])  # growing the ensemble keeps its members
        for m in range(5):
            single = sample_weights(jax.random.fold_in(KEY, m), 4, "ginibre")
            np.testing.assert_array_equal(w[name][m], single[name])
        assert len({np.asarray(a).tobytes() for a in w[name]}) == 5
    np.testing.assert_array_equal(
        sample_weights(3, 4, "ginibre")["V"], sample_weights(jax.random.key(3), 4, "ginibre")["V"]
    )
    assert not np.array_equal(sample_weights(3, 4, "ginibre")["V"], sample_weights(4, 4, "ginibre")["V"])
    keys = member_keys(KEY, 3)
    np.testing.assert_array_equal(jax.random.key_data(keys[2]), jax.random.key_data(jax.random.fold_in(KEY, 2)))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="ensemble must be one of 'identity', 'ginibre'.*got 'gauss'"):
        sample_weights(KEY, 4, "gauss")
    with pytest.raises(ValueError, match="d must be an integer ≥ 2, got 1"):
        sample_weights(KEY, 1, "ginibre")
    with pytest.raises(ValueError, match="members must be an integer ≥ 1, got 0"):
        sample_weights(KEY, 4, "ginibre", members=0)
    with pytest.raises(ValueError, match="k must be d = 4; got k = 2"):
        sample_weights(KEY, 4, "wigner-psd", k=2)
    with pytest.raises(ValueError, match="dtype must be a floating type"):
        sample_weights(KEY, 4, "ginibre", dtype="int32")


# -- layer-wise fields -------------------------------------------------------------------------

X0 = af.init.uniform(5, 6, 4)


def _two_layers(tau=0.5):
    return LayerWise.redrawn(af.SA(1.5), KEY, "ginibre", d=4, n_layers=2, tau=tau)


def test_layer_index_and_jump_times():
    f = LayerWise.redrawn(af.SA(1.0), KEY, "wigner-psd", d=3, n_layers=4, tau=0.3)
    assert f.n_layers == 4 and f.Ks.shape == (4, 3, 3) and f.Qs is None
    b = f.boundaries()
    np.testing.assert_array_equal(b, [0.3, 0.6, 0.3 * 3])
    # a boundary belongs to the later layer, one ulp below it to the earlier one
    assert [int(f.layer_index(t)) for t in (-1.0, 0.0, b[0], np.nextafter(b[0], 0), b[1], b[2], 50.0)] == [
        0,
        0,
        1,
        0,
        2,
        3,
        3,
    ]
    assert int(jax.jit(lambda t: f.layer_index(t))(np.nextafter(b[2], 0))) == 2
    assert int(f.layer_index(1)) == 3 and int(f.layer_index(jnp.float32(0.6))) == 2  # any real dtype
    np.testing.assert_array_equal(f.jump_times(0.7), b[:2])  # strictly below t1
    np.testing.assert_array_equal(f.jump_times(0.6), b[:1])
    np.testing.assert_array_equal(f.jump_times(100.0), b)  # the last layer stays on: no jump after 0.9
    np.testing.assert_array_equal(f.jump_times(100.0, t0=0.3), b[1:])


def test_sums_and_wrappers_merge_the_layer_switches_of_their_terms():
    a = LayerWise.redrawn(af.SA(1.0), KEY, "ginibre", d=3, n_layers=3, tau=0.5)  # switches at 0.5, 1.0
    b = LayerWise.redrawn(af.USA(1.0, time="rescaled"), KEY, "ginibre", d=3, n_layers=4, tau=0.3)  # 0.3, 0.6, 0.9
    np.testing.assert_allclose((a + b).jump_times(1.2), [0.3, 0.5, 0.6, 0.9, 1.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose((a + b).jump_times(1.0, t0=0.5), [0.6, 0.9], rtol=0, atol=1e-15)
    for wrapped in (af.Noisy(a, 0.1), af.PreLN(a), af.Coalesced(a), af.Noisy(a, 0.1) + af.SA(2.0)):
        np.testing.assert_array_equal(wrapped.jump_times(2.0), [0.5, 1.0])
    assert af.SA(1.0).jump_times(5.0).shape == (0,) and (af.SA(1.0) + af.USA(1.0)).jump_times(5.0).shape == (0,)


def test_layer_wise_attention_is_that_of_the_layer_in_force():
    f = _two_layers()
    x = np.asarray(X0)
    for t, ell in ((0.2, 0), (0.5, 1), (2.0, 1)):
        Q = np.eye(4) if f.Qs is None else np.asarray(f.Qs[ell])
        K = np.eye(4) if f.Ks is None else np.asarray(f.Ks[ell])
        logits = 1.5 * (x @ Q.T) @ (x @ K.T).T
        w = np.exp(logits - logits.max(axis=1, keepdims=True))
        np.testing.assert_allclose(f.attention_matrix(t, X0), w / w.sum(axis=1, keepdims=True), rtol=0, atol=1e-14)
    assert f.has_attention and f.kernel_logits(X0) is None


def test_drift_at_time_t_is_the_drift_of_that_layer():
    f = _two_layers()
    drift = jax.jit(lambda t, x: f.drift(t, x))
    for t, ell in ((0.0, 0), (0.49, 0), (0.5, 1), (3.0, 1)):
        plain = af.SA(1.5, Q=f.Qs[ell], K=f.Ks[ell], V=f.Vs[ell])
        # op by op the arithmetic is the same; compiled with a traced t, fusion may round differently
        np.testing.assert_array_equal(f(t, X0), plain(t, X0))
        np.testing.assert_allclose(drift(t, X0), plain.drift(t, X0), rtol=0, atol=1e-15)
    assert f.geometry == "sphere" and float(f.beta) == 1.5


def test_equal_layers_give_the_plain_run():
    w = sample_weights(KEY, 4, "wigner-psd")
    plain = af.SA(2.0, **w)
    stack = LayerWise(af.SA(2.0), Ks=jnp.stack([w["K"]] * 3), Vs=jnp.stack([w["V"]] * 3), tau=0.4)
    a = af.simulate(plain, X0, 2.0, ts=jnp.linspace(0, 2, 5), solver="rk4", dt=0.05)
    b = af.simulate(stack, X0, 2.0, ts=jnp.linspace(0, 2, 5), solver="rk4", dt=0.05)
    # the drift is the same arithmetic in every layer, so the runs agree to rounding
    np.testing.assert_allclose(b.xs, a.xs, rtol=0, atol=1e-13)


class _InsideStep(af.particles.fields.Field):
    """The field with its time clamped into the open interval (lo, hi): one step, one layer."""

    field: af.particles.fields.Field
    lo: jax.Array
    hi: jax.Array

    def drift(self, t, x):
        return self.field.drift(jnp.clip(t, jnp.nextafter(self.lo, self.hi), jnp.nextafter(self.hi, self.lo)), x)


def _rk4_stepping_to_the_jumps(field, x, t1, dt):
    """Fixed-step RK4 whose steps end on the layer boundaries and see the layer they lie in.

    This is what a jump-aware fixed-step loop does: knots at the boundaries, equal substeps
    ≤ dt between them, stage times kept inside the step's open interval.
    """
    knots = np.concatenate([[0.0], field.jump_times(t1), [t1]])
    step = jax.jit(lambda f, t, x, h: RK4().step(f, t, x, h))
    for a, b in zip(knots[:-1], knots[1:]):
        m = int(np.ceil((b - a) / dt - 1e-9))
        h = (b - a) / m
        win = _InsideStep(field, jnp.asarray(a), jnp.asarray(b))
        for j in range(m):
            x = step(win, a + j * h, x, h)
    return x


def test_two_layers_with_fixed_rk4_equal_layer_0_to_tau_then_layer_1():
    tau, dt = 0.5, 0.05
    f = _two_layers(tau)
    x = _rk4_stepping_to_the_jumps(f, X0, 2 * tau, dt)
    mid = af.simulate(f.layer(0), X0, tau, solver="rk4", dt=dt).x_final
    ref = af.simulate(f.layer(1), mid, 2 * tau, t0=tau, solver="rk4", dt=dt).x_final
    # identical steps on identical time-independent fields: agreement to rounding
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-12)
    # and the two layers really differ, so this is no tautology: one layer throughout misses by far
    one = af.simulate(f.layer(0), X0, 2 * tau, solver="rk4", dt=dt).x_final
    assert float(jnp.max(jnp.abs(one - ref))) > 1e-2


@eqx.filter_jit
def _tsit5_with_jumps(field, x0, t0, t1, jumps):
    ctrl = diffrax.ClipStepSizeController(diffrax.PIDController(rtol=1e-11, atol=1e-13), jump_ts=jumps)
    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, _: field(t, y)),
        diffrax.Tsit5(),
        t0,
        t1,
        0.01,
        x0,
        stepsize_controller=ctrl,
        max_steps=10_000,
    )
    return normalize(sol.ys[-1])


@pytest.mark.slow
def test_adaptive_solver_stepping_to_the_jump_times_matches_the_split_run():
    tau = 0.5
    f = _two_layers(tau)
    x = _tsit5_with_jumps(f, X0, 0.0, 2 * tau, jnp.asarray(f.jump_times(2 * tau)))
    # the reference runs layer ℓ alone, as a LayerWise whose two layers are both ℓ (one compilation)
    only = [LayerWise(f.inner, *(jnp.stack([s[ell]] * 2) for s in (f.Qs, f.Ks, f.Vs)), tau=tau) for ell in (0, 1)]
    far = jnp.asarray([10.0])  # a jump outside the run: the same controller, no effect
    mid = _tsit5_with_jumps(only[0], X0, 0.0, tau, far)
    ref = _tsit5_with_jumps(only[1], mid, tau, 2 * tau, far)
    # tolerance-limited solutions (rtol 1e-11) of the same piecewise ODE over one time unit
    np.testing.assert_allclose(x, ref, rtol=0, atol=1e-9)


@pytest.mark.slow
def test_per_member_weights_batched_through_simulate_equal_per_member_runs():
    members, d = 2, 4
    f = LayerWise.redrawn(af.SA(1.0), KEY, "ginibre-v-qk", d=d, n_layers=3, tau=0.4, members=members)
    assert f.Qs.shape == (members, 3, d, d)
    x0 = af.init.uniform(8, 5, d, batch=members)
    batch = af.simulate(f, x0, 1.2, ts=[0.6, 1.2], solver="rk4", dt=0.05)
    for m in range(members):
        single = LayerWise.redrawn(af.SA(1.0), jax.random.fold_in(KEY, m), "ginibre-v-qk", d=d, n_layers=3, tau=0.4)
        np.testing.assert_array_equal(single.Vs, f.Vs[m])  # member m = the draw of fold_in(key, m)
        run = af.simulate(single, x0[m], 1.2, ts=[0.6, 1.2], solver="rk4", dt=0.05)
        # vmapped and single matmuls may round differently: agreement to ~1e-15 per step
        np.testing.assert_allclose(batch.xs[m], run.xs, rtol=0, atol=1e-12)
    assert not np.allclose(batch.x_final[0], batch.x_final[1])


def test_redrawn_layers_are_draws_of_fold_in_key_layer():
    f = LayerWise.redrawn(af.USA(1.0, time="rescaled"), KEY, "v-minus-qk", d=3, n_layers=3, tau=1.0, k=2)
    assert f.Qs.shape == (3, 2, 3) and f.Vs.shape == (3, 3, 3)
    for ell in range(3):
        w = sample_weights(jax.random.fold_in(KEY, ell), 3, "v-minus-qk", k=2)
        np.testing.assert_array_equal(f.Qs[ell], w["Q"])
        np.testing.assert_array_equal(f.Vs[ell], w["V"])
    rep = LayerWise.redrawn(af.SA(1.0), KEY, "repulsive", d=3, n_layers=2, tau=1.0, members=2)
    assert rep.Qs is None and rep.Vs.shape == (2, 2, 3, 3)
    with pytest.raises(ValueError, match="inner field already has V"):
        LayerWise.redrawn(af.SA(1.0, V=np.eye(3)), KEY, "ginibre", d=3, n_layers=2)
    with pytest.raises(ValueError, match="n_layers must be an integer ≥ 1"):
        LayerWise.redrawn(af.SA(1.0), KEY, "ginibre", d=3, n_layers=0)


def test_from_npz_round_trip(tmp_path):
    f = _two_layers()
    path = tmp_path / "w.npz"
    np.savez(path, Q=np.asarray(f.Qs), K=np.asarray(f.Ks), V=np.asarray(f.Vs))
    g = LayerWise.from_npz(af.SA(1.5), path, tau=0.5)
    for name in ("Qs", "Ks", "Vs"):
        np.testing.assert_array_equal(getattr(g, name), getattr(f, name))
    np.testing.assert_array_equal(g(0.7, X0), f(0.7, X0))
    # arrays left out keep the inner field's matrices (here the identity)
    np.savez(tmp_path / "v.npz", V=-np.broadcast_to(np.eye(4), (3, 4, 4)))
    h = LayerWise.from_npz(af.SA(1.0), tmp_path / "v.npz", tau=1.0)
    assert h.Qs is None and h.n_layers == 3


@pytest.mark.parametrize(
    "arrays, message",
    [
        (dict(Q=np.zeros((2, 3, 4))), None),  # valid: the control case
        (dict(), "none of the arrays Q, K, V"),
        (dict(W=np.zeros((2, 4, 4))), r"unexpected arrays \['W'\]"),
        (dict(Q=np.zeros((3, 4))), r"array Q has shape \(3, 4\); expected \(L, k, d\)"),
        (dict(V=np.zeros((2, 3, 4))), "expected square matrices"),
        (dict(Q=np.zeros((2, 3, 4)), K=np.zeros((2, 2, 4))), "they must match"),
        (dict(Q=np.zeros((2, 3, 4)), V=np.zeros((3, 4, 4))), "disagree on the number of layers"),
        (dict(Q=np.zeros((2, 3, 5)), V=np.zeros((2, 4, 4))), "the last axis of Q must be d = 4"),
        (dict(V=np.full((1, 2, 2), np.nan)), "non-finite"),
        (dict(V=np.array([[["a", "b"], ["c", "d"]]])), "expected real numbers"),
        (dict(V=np.zeros((1, 2, 2), complex)), "expected real numbers"),
        (dict(V=np.array([[[None, 1], [1, None]]], dtype=object)), "object"),
    ],
)
def test_from_npz_errors(tmp_path, arrays, message):
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    if message is None:
        LayerWise.from_npz(af.SA(1.0), path)
        return
    with pytest.raises(ValueError, match=message):
        LayerWise.from_npz(af.SA(1.0), path)


def test_from_npz_file_errors(tmp_path):
    with pytest.raises(ValueError, match="weights file not found"):
        LayerWise.from_npz(af.SA(1.0), tmp_path / "missing.npz")
    np.save(tmp_path / "one.npy", np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="holds a single array"):
        LayerWise.from_npz(af.SA(1.0), tmp_path / "one.npy")
    (tmp_path / "junk.npz").write_bytes(b"not an archive at all")
    with pytest.raises(ValueError, match="junk.npz"):
        LayerWise.from_npz(af.SA(1.0), tmp_path / "junk.npz")


def test_constructor_and_check_errors():
    with pytest.raises(ValueError, match="wraps an attention field"):
        LayerWise(lambda t, x: x, Vs=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="same number of layers L: Qs has 2, Vs has 3"):
        LayerWise(af.SA(1.0), Qs=np.zeros((2, 3, 3)), Vs=np.zeros((3, 3, 3)))
    with pytest.raises(ValueError, match="same shape"):
        LayerWise(af.SA(1.0, K=np.zeros((2, 3))), Qs=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        LayerWise(af.SA(1.0), Vs=np.zeros((2, 3, 3)), tau=0.0)
    with pytest.raises(ValueError, match="Vs must be a 3-D real array"):
        LayerWise(af.SA(1.0), Vs=np.zeros((3, 3)))
    f = LayerWise(af.SA(1.0), Vs=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="particles live in d = 4"):
        af.simulate(f, X0, 1.0)
    # USA's overflow guard sees the largest ‖QᵀK‖ over the layers
    big = LayerWise(af.USA(300.0), Ks=np.stack([np.eye(4), 4.0 * np.eye(4)]))
    assert big.kernel_norm() == pytest.approx(4.0)
    with pytest.raises(ValueError, match="overflow"):
        af.simulate(big, X0, 1.0)


# -- the repulsive flow V = −I -----------------------------------------------------------------


def _energy_of_gram(gram, beta):
    """E_β from a Gram matrix ⟨x_i, x_j⟩, [GLPR] (3.5)."""
    n = gram.shape[0]
    return np.exp(beta * gram).sum() / (2.0 * beta * n * n)


def test_repulsive_flow_is_energy_descent_at_the_predicted_rate():
    # SA with V = −I is minus the gradient of E_β for the metric Σ Z_i⟨a_i, b_i⟩ ([GLPR] §3.3), so
    # ⟨∇E, ẋ⟩ = −(1/n²) Σ_i Z_i ‖ẋ_i‖², an identity that holds to rounding at any configuration
    beta = 1.3
    f = af.SA(beta, **sample_weights(KEY, 4, "repulsive"))
    x = af.init.uniform(3, 7, 4)

    @jax.jit
    def both_sides(x):
        v = f(0.0, x)
        grad = jax.grad(lambda y: af.energy(y, beta))(x)
        z = jnp.sum(jnp.exp(beta * x @ x.T), axis=1)
        return jnp.sum(grad * v), -jnp.sum(z * jnp.sum(v * v, 1)) / x.shape[0] ** 2

    lhs, rhs = both_sides(x)
    assert float(rhs) < -1e-3  # a random start is far from equilibrium
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "n, d, gram",
    [
        # n = d + 1: the regular simplex, ⟨x_i, x_j⟩ = −1/(n−1)
        (4, 3, np.where(np.eye(4, dtype=bool), 1.0, -1.0 / 3.0)),
        # n = 2d: the cross-polytope (octahedron), ⟨x_i, x_j⟩ ∈ {0, −1} off the diagonal
        (6, 3, np.kron(np.eye(3), np.array([[1.0, -1.0], [-1.0, 1.0]]))),
    ],
)
def test_repulsive_flow_decreases_the_energy_to_its_minimum(n, d, gram):
    # Both are universally optimal codes (Cohn–Kumar), so they minimize E_β, whose kernel
    # e^{β⟨x,y⟩} = e^{β} e^{−β‖x−y‖²/2} is a Gaussian of the squared distance.
    beta = 1.0
    target = _energy_of_gram(gram, beta)
    field = af.SA(beta, **sample_weights(KEY, d, "repulsive"))
    x0 = af.init.uniform(17, n, d, batch=4)
    # The octahedron is singled out among balanced tight frames only by the cubic term of
    # e^{βt}, so its slowest mode relaxes slowly (the energy gap shrinks ~8× per 10 time units
    # at β = 1); t = 150 leaves gaps ≲ 1e-9 for both codes. RK4's fixed points are the flow's
    # equilibria, so its step (h = 0.1, local error ~1e-5 at the start) does not move the limit.
    t1 = 150.0
    sol = af.simulate(
        field, x0, t1, ts=jnp.linspace(0.0, t1, 151), save=lambda t, x: af.energy(x, beta), solver="rk4", dt=0.1
    )
    e = np.asarray(sol.stats)
    # non-increasing up to rounding of the energy itself (values ~1, eps·n² terms)
    assert np.max(np.diff(e, axis=1)) < 1e-13
    assert np.all(e[:, 0] > target + 1e-3)  # random starts are far from optimal
    np.testing.assert_allclose(e[:, -1], target, rtol=0, atol=1e-6)
    # and the final Gram matrix is that of the code, up to relabeling: same sorted inner products
    x = np.asarray(sol.x_final)
    for xm in x:
        np.testing.assert_allclose(np.sort((xm @ xm.T).ravel()), np.sort(gram.ravel()), atol=1e-3)
