"""The attention matrix as a Markov chain: consensus, reversibility, causal absorption, entropies, run statistics."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments import builtin
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.results import runs as results
from attnflow.experiments.run import plan, runner
from attnflow.particles import attention_stats as ats

N, D = 7, 3
X = af.init.uniform(5, N, D)


def _assert_consensus(A, n):
    A = np.asarray(A)
    np.testing.assert_allclose(A, np.full((n, n), 1.0 / n), rtol=0, atol=1e-12)
    np.testing.assert_allclose(af.stationary_distribution(A), np.full(n, 1.0 / n), rtol=0, atol=1e-12)
    np.testing.assert_allclose(af.row_entropy(A), np.full(n, math.log(n)), rtol=0, atol=1e-12)
    np.testing.assert_allclose(af.effective_tokens(A), np.full(n, float(n)), rtol=0, atol=1e-10)
    lam = np.asarray(af.attention_spectrum(A))
    assert abs(lam[0] - 1.0) < 1e-12 and np.max(np.abs(lam[1:])) < 1e-12


@pytest.mark.parametrize("beta", [0.0, 3.0, 1e4])
def test_consensus_is_uniform_attention(beta):
    x = jnp.broadcast_to(X[2], (N, D))  # every token the same
    _assert_consensus(af.attention_matrix(af.SA(beta), x), N)


def test_reversible_chain_law_for_symmetric_kernels():
    beta = 2.5
    rng = np.random.default_rng(0)
    M = rng.normal(size=(D, D))
    for Q, K in ((None, None), (M, M)):  # QᵀK = I and QᵀK = MᵀM: both symmetric
        field = af.SA(beta, Q=Q, K=K)
        A = af.attention_matrix(field, X)
        pi = af.stationary_distribution(A)
        assert float(jnp.max(jnp.abs(pi @ A - pi))) < 1e-12
        assert float(jnp.min(pi)) >= 0.0 and abs(float(jnp.sum(pi)) - 1.0) < 1e-14
        # detailed balance Z_i A_ij = e^{β⟨Qx_i,Kx_j⟩} = Z_j A_ji: π_i ∝ Z_i = Σ_j e^{β⟨Qx_i,Kx_j⟩}
        Z = np.exp(np.asarray(field.logits(X))).sum(axis=1)
        np.testing.assert_allclose(pi, Z / Z.sum(), rtol=0, atol=1e-12)
        assert float(jnp.max(jnp.abs(pi - 1.0 / N))) > 1e-3  # not doubly stochastic: π is not uniform
        # a reversible chain has a real spectrum, matching numpy's
        lam = np.asarray(af.attention_spectrum(A))
        assert np.max(np.abs(lam.imag)) < 1e-12
        np.testing.assert_allclose(np.sort(lam.real), np.sort(np.linalg.eigvals(np.asarray(A)).real), atol=1e-12)
    # a non-symmetric kernel: π is still stationary, but the reversible formula no longer holds
    field = af.SA(beta, Q=rng.normal(size=(D, D)), K=rng.normal(size=(D, D)))
    A = af.attention_matrix(field, X)
    pi = af.stationary_distribution(A)
    assert float(jnp.max(jnp.abs(pi @ A - pi))) < 1e-12
    Z = np.exp(np.asarray(field.logits(X))).sum(axis=1)
    assert np.max(np.abs(pi - Z / Z.sum())) > 1e-3


def test_doubly_stochastic_attention_has_the_uniform_law():
    A = af.attention_matrix(af.Sinkhorn(2.5, tol=1e-12), X)
    np.testing.assert_allclose(af.stationary_distribution(A), np.full(N, 1.0 / N), rtol=0, atol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize(
    "field",
    [af.SA(3.0, mask="causal"), af.USA(0.5, mask="causal"), af.MultiHead.identity(20.0, 3, 6, mask="causal")],
    ids=["sa", "usa", "heads"],
)
def test_causal_mask_concentrates_the_law_on_token_one(field):
    x = af.init.uniform(2, 9, field.Q.shape[-1] if isinstance(field, af.MultiHead) else D, batch=3)
    A = jax.vmap(lambda c: af.attention_matrix(field, c))(x)
    e1 = np.eye(9)[0]
    # token 1 attends only to itself: it is absorbing, every other state is transient
    assert np.array_equal(np.asarray(af.stationary_distribution(A)), np.stack([e1] * 3))


def test_entropy_is_stable_at_large_beta():
    beta = 1e4
    # a tight cluster (β · gap = O(1), weights spread) plus distant tokens (weights underflow to 0)
    rng = np.random.default_rng(1)
    near = np.array([1.0, 0.0, 0.0]) + 0.01 * rng.normal(size=(5, D))
    x = af.particles.normalize(jnp.asarray(np.concatenate([near, rng.normal(size=(4, D))])))
    for dtype in (jnp.float64, jnp.float32):
        field, xx = af.SA(beta), x.astype(dtype)
        A = af.attention_matrix(field, xx)
        H = np.asarray(af.row_entropy(A))
        assert np.all(np.isfinite(H)) and np.all(H >= 0) and np.all(H <= math.log(9) + 1e-6)
        eff = np.asarray(af.effective_tokens(A))
        assert np.all((eff >= 1.0) & (eff <= 9.0 + 1e-5))
    # against H_i = log Z_i − Σ_j A_ij ℓ_ij from the max-subtracted logits ℓ, in float64
    logits = np.asarray(af.SA(beta).logits(x))
    ell = logits - logits.max(axis=1, keepdims=True)
    A = np.exp(ell) / np.exp(ell).sum(axis=1, keepdims=True)
    expected = np.log(np.exp(ell).sum(axis=1)) - (A * ell).sum(axis=1)
    np.testing.assert_allclose(af.row_entropy(af.attention_matrix(af.SA(beta), x)), expected, rtol=1e-12, atol=1e-13)
    assert np.all(expected[:5] > 0.1)  # the cluster tokens attend to several tokens; the far ones to themselves
    np.testing.assert_allclose(expected[5:], 0.0, atol=1e-12)


def test_wrappers_and_variants_give_the_matrix_their_sublayer_sees():
    sa = af.attention_matrix(af.SA(2.0), X)
    ff = af.FeedForward(np.ones((4, D)), None, np.ones((D, 4)))
    for field in (
        af.PreLN(af.SA(2.0)),
        af.NGPT(af.SA(2.0), 0.5),
        af.Noisy(af.SA(2.0), 0.3),
        af.SA(2.0) + ff,
        af.MultiHead.identity(2.0, 1, D),
    ):
        np.testing.assert_allclose(af.attention_matrix(field, X), sa, atol=1e-15, err_msg=type(field).__name__)
    np.testing.assert_allclose(af.attention_matrix(af.PreLN(af.SA(2.0)), 3.0 * X), sa, atol=1e-15)
    np.testing.assert_allclose(af.attention_matrix(af.USA(2.0), X), sa, atol=1e-15)  # the same random walk
    angles = af.to_angles(X[:, :2] / jnp.linalg.norm(X[:, :2], axis=1, keepdims=True))
    np.testing.assert_allclose(
        af.attention_matrix(af.Circle(2.0), angles), af.attention_matrix(af.SA(2.0), af.from_angles(angles)), atol=1e-15
    )
    A = af.attention_matrix(af.Hardmax(), X)  # mutual nearest neighbours make a periodic chain
    pi = af.stationary_distribution(A)
    assert float(jnp.max(jnp.abs(pi @ A - pi))) < 1e-12 and abs(float(pi.sum()) - 1) < 1e-14
    with pytest.raises(ValueError, match="signed"):
        af.attention_matrix(af.LinearAttention(), X)


def test_summary_is_jit_and_vmap_safe():
    x = af.init.uniform(0, N, D, batch=4)
    A = jax.vmap(lambda c: af.attention_matrix(af.SA(4.0), c))(x)
    mapped = jax.jit(jax.vmap(ats.attention_summary))(A)
    for m in range(4):
        one = ats.attention_summary(A[m])
        for k in one:
            np.testing.assert_allclose(mapped[k][m], one[k], atol=1e-13, err_msg=k)


def _run(*sets):
    return load_config(
        None,
        [
            "n=6",
            "d=3",
            "beta=0.5,30",
            "seeds=2",
            "t1=25",
            "n_save=6",
            "progress=false",
            "statistics=pairs,attention",
            *sets,
        ],
    )


@pytest.mark.slow
def test_attention_statistics_of_a_run(tmp_path):
    config = _run()
    result = runner.run(config)
    T, n = 6, 6
    for k in runner.GROUPS["attention"]:
        assert k in result.stats
    assert result.stats["spectral_gap"].shape == (1, 2, 2, T)
    assert result.stats["stationary_distribution"].shape == (1, 2, 2, T, n)
    assert result.stats["attention_matrix"].shape == (1, 2, 2, T, n, n)  # small: kept
    # β = 0.5 reaches consensus by t = 25 (1 − ⟨x_i,x_j⟩ ~ e^{−2t}): n attended tokens, gap 1, uniform law
    for s in range(2):
        _assert_consensus(af.attention_matrix(af.SA(0.5), result.states()[0, s, -1]), n)
    assert float(af.particles.second_eigenvalue(af.attention_matrix(af.SA(0.5), result.states()[0, 0, 0]))) > 0.05
    end = {k: v[0, 0, :, -1] for k, v in result.stats.items()}
    np.testing.assert_allclose(end["effective_tokens"], n, atol=1e-9)
    np.testing.assert_allclose(end["attention_entropy"], math.log(n), atol=1e-11)
    np.testing.assert_allclose(end["spectral_gap"], 1.0, atol=1e-9)
    np.testing.assert_allclose(end["stationary_distribution"], 1.0 / n, atol=1e-12)
    np.testing.assert_allclose(end["attention_matrix"], 1.0 / n, atol=1e-12)
    # the saved statistics are those of the saved states (β = 30: metastable clusters, gap closed)
    A = af.attention_matrix(af.SA(30.0), result.states()[1, 1, -1])
    np.testing.assert_allclose(result.stats["attention_matrix"][0, 1, 1, -1], A, atol=1e-12)
    np.testing.assert_allclose(
        result.stats["stationary_distribution"][0, 1, 1, -1], af.stationary_distribution(A), atol=1e-12
    )
    assert np.all(result.stats["effective_tokens"][0, 1, :, -1] < n - 1)
    # on disk: named dimensions, and the figure
    out = tmp_path / "run"
    results.save(out, result, builtin.resolve(config.experiment))
    ds = af.load(out)
    assert ds["stationary_distribution"].dims == ("d", "beta", "seed", "time", "particle")
    assert ds["attention_matrix"].dims == ("d", "beta", "seed", "time", "particle", "attended")
    assert ds["spectral_gap"].dims == ("d", "beta", "seed", "time")
    assert (out / "attention.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a causal mask through the config and the runner's statistics: the law sits on token 1
    causal = _run("mask=causal", "beta=4")
    stats = runner.statistics(causal.delta, 0, False, runner.statistics_groups(causal), keep_attention=True)
    field = runner.build_field(causal, np.array([4.0]), np.array([0]), 3)
    for x in af.init.uniform(1, n, 3, batch=3):
        out = stats(0.0, x, field)
        assert np.array_equal(np.asarray(out["stationary_distribution"]), np.eye(n)[0])
        assert np.allclose(np.triu(np.asarray(out["attention_matrix"]), 1), 0.0)


def test_large_runs_keep_only_the_summaries_and_bad_models_are_refused():
    c = load_config(None, ["n=200", "seeds=64", "n_save=101", "statistics=attention"])
    assert not plan.keep_attention(c, 64, 101)
    assert plan.keep_attention(_run(), 4, 6)
    with pytest.raises(ConfigError, match="signed weights"):
        load_config(None, ["model=linear", "statistics=pairs,attention"])
    with pytest.raises(ConfigError, match="n ≤ 1024"):
        load_config(None, ["n=5000", "statistics=attention"])
    load_config(None, ["model=linear", "linear_normalize=sum", "linear_feature=elu", "statistics=attention"])


def _softmax(logits):
    w = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def test_each_field_forms_its_own_matrix_from_the_tokens_as_it_sees_them():
    x = np.asarray(X)
    rng = np.random.default_rng(3)
    y = x * rng.uniform(0.5, 3.0, size=(N, 1))  # tokens off the sphere
    theta = y / np.linalg.norm(y, axis=1, keepdims=True)
    # Pre-LN and peri-LN attend with the directions θ_i = y_i / ‖y_i‖: softmax_j(β⟨θ_i, θ_j⟩)
    for field in (af.PreLN(af.SA(2.0)), af.PeriLN(af.SA(2.0))):
        np.testing.assert_allclose(field.attention_matrix(0.0, y), _softmax(2.0 * theta @ theta.T), rtol=0, atol=1e-14)
    # the rescaled no-LN form attends with x = e^{tV} z: for V = λI, softmax_j(β e^{2λt}⟨z_i, z_j⟩)
    lam, t = 0.5, 0.8
    rescaled = af.RescaledNoLN(af.SA(2.0, V=lam * np.eye(D)))
    np.testing.assert_allclose(
        rescaled.attention_matrix(t, y), _softmax(2.0 * np.exp(2 * lam * t) * y @ y.T), rtol=0, atol=1e-13
    )
    # a sum: the mean of its attention terms' matrices; the feed-forward term has none
    ff = af.FeedForward(np.ones((4, D)), None, np.ones((D, 4)))
    both = af.SA(1.0) + ff + af.SA(3.0)
    np.testing.assert_allclose(
        both.attention_matrix(0.0, X), 0.5 * (_softmax(x @ x.T) + _softmax(3.0 * x @ x.T)), rtol=0, atol=1e-14
    )
    np.testing.assert_allclose(af.attention_matrix(both, X), both.attention_matrix(0.0, X), rtol=0, atol=0)
    assert ff.attention_matrix(0.0, X) is None and not ff.has_attention
    assert all(
        f.has_attention
        for f in (
            af.SA(1.0),
            af.USA(1.0),
            both,
            af.Noisy(af.SA(1.0), 0.1),
            af.Hardmax(),
            af.Circle(1.0),
            af.LinearAttention(),
            af.PreLN(af.SA(1.0)),
        )
    )
    with pytest.raises(ValueError, match="FeedForward has no attention matrix"):
        af.attention_matrix(ff, X)
    with pytest.raises(ValueError, match="signed"):
        af.PreLN(af.LeastSquaresAttention(1.0)).attention_matrix(0.0, y)


def test_kernel_logits_are_those_of_the_field_own_kernel():
    rng = np.random.default_rng(4)
    Q, K = rng.normal(size=(D, D)), rng.normal(size=(D, D))
    x = np.asarray(X)
    np.testing.assert_allclose(
        af.SA(2.0, Q=Q, K=K).kernel_logits(X), 2.0 * (x @ Q.T) @ (x @ K.T).T, rtol=1e-13, atol=1e-13
    )
    np.testing.assert_allclose(af.USA(0.5).kernel_logits(X), 0.5 * x @ x.T, rtol=0, atol=1e-15)
    assert af.PreLN(af.SA(2.0)).kernel_logits(X) is None and af.Hardmax().kernel_logits(X) is None
