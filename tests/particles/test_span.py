"""Runs reduced to the span of the tokens (d > n): exact against the full-d run, and exact in law when sampled reduced."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import cli
from scipy import stats as st

import attnflow as af
from attnflow.experiments.config import load_config
from attnflow.experiments.run import runner
from attnflow.particles.circle import Circle
from attnflow.particles.models import MODELS

N, D, T1 = 6, 20, 1.0
TS = np.linspace(0.0, T1, 5)
RK4 = dict(ts=TS, solver="rk4", dt=0.05)
DELTA = 0.05


def _qk(seed, d=D):
    w = af.sample_weights(seed, d, "ginibre")
    return dict(Q=w["Q"], K=w["K"])


def _layerwise():
    w = af.sample_weights(5, D, "ginibre", members=3)
    scales = np.array([1.0, -0.5, 2.0])[:, None, None] * np.eye(D)
    return af.LayerWise(af.SA(1.5), Qs=w["Q"], Ks=w["K"], Vs=scales, tau=0.3)


FIELDS = {
    "causal": lambda: af.SA(2.0, mask="causal"),
    "pre-ln": lambda: af.PreLN(af.SA(1.0)),
    "peri-ln": lambda: af.PeriLN(af.USA(1.0)),
    "ngpt": lambda: af.NGPT(af.SA(1.0), alpha=0.5),
    "no-ln": lambda: af.NoLN(af.SA(1.0)),
    "rescaled-no-ln": lambda: af.RescaledNoLN(af.SA(1.0, V=0.5 * np.eye(D))),
    "random-qk-v-identity": lambda: af.SA(1.5, **_qk(1)),
    "random-qk-v-2i": lambda: af.SA(1.5, **_qk(2), V=2.0 * np.eye(D)),
    "random-qk-usa-causal-v-minus-i": lambda: af.USA(1.0, **_qk(3), V=-np.eye(D), mask="causal"),
    "rectangular-qk": lambda: af.SA(
        1.0, Q=np.random.default_rng(0).normal(size=(7, D)) / 3, K=np.random.default_rng(1).normal(size=(7, D)) / 3
    ),
    "sum": lambda: af.SA(1.0) + af.USA(0.5, mask="causal"),
    "multihead-identity": lambda: af.MultiHead.identity(2.0, 4, D),
    "layerwise": _layerwise,
    "sinkhorn-qk": lambda: af.Sinkhorn(1.0, **_qk(4)),
}


def _stats(x, beta):
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)  # directions (Pre-LN, no LN leave the sphere)
    return (
        np.asarray(af.clustered_fraction(x, DELTA)),
        np.asarray(af.energy(x, beta)),
        np.asarray(af.n_clusters(x, DELTA)),
    )


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_every_model_reduces_exactly_or_says_it_cannot(model):
    """A model of the table either answers None to ``in_span`` or reduces to a field whose run is the full run's."""
    field = MODELS[model].example()
    x0 = af.init.uniform(11, N, D)
    U, y0 = af.particles.span.span_basis(x0)
    reduced = field.in_span(U)
    if reduced is None:
        return
    full = np.asarray(af.simulate(field, x0, T1, **RK4).xs)
    back = np.asarray(af.particles.span.to_ambient(af.simulate(reduced, y0, T1, **RK4).xs, U))
    assert np.max(np.abs(full - back)) <= 1e-12


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FIELDS))
def test_reduced_run_equals_the_full_run(name):
    field = FIELDS[name]()
    x0 = af.init.uniform(11, N, D)
    U, y0 = af.particles.span.span_basis(x0)
    assert U.shape == (D, N) and y0.shape == (N, N)
    reduced = field.in_span(U)
    assert reduced is not None
    full = af.simulate(field, x0, T1, **RK4).xs
    small = af.simulate(reduced, y0, T1, **RK4).xs
    assert small.shape == (len(TS), N, N)
    back = np.asarray(af.particles.span.to_ambient(small, U))
    assert np.max(np.abs(np.asarray(full) - back)) <= 1e-12
    for a, b in zip(_stats(np.asarray(full), 1.5), _stats(back, 1.5)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_identity_weights_reduce_to_the_same_field_at_dimension_r():
    field = af.USA(2.0, mask="causal", time="rescaled")
    for U in (N, jnp.eye(D, N)):
        reduced = field.in_span(U)
        assert reduced == field  # Q, K, V stay None: the field itself, now acting on R^r
    v = af.SA(1.0, V=-np.eye(D)).in_span(N)
    np.testing.assert_array_equal(v.V, -np.eye(N))


@pytest.mark.slow
def test_batched_ensemble_with_per_member_frames_and_weights():
    B = 3
    x0 = af.init.cap(2, N, D, angle=2.0, batch=B)
    U, y0 = af.particles.span.span_basis(x0)
    assert U.shape == (B, D, N)
    w = af.sample_weights(7, D, "ginibre", members=B)
    field = af.SA(jnp.array([0.5, 2.0, 4.0]), Q=w["Q"], K=w["K"], V=2.0 * np.broadcast_to(np.eye(D), (B, D, D)))
    reduced = field.in_span(U)
    assert reduced.K.shape == (B, N, N) and reduced.V.shape == (B, N, N)
    full = np.asarray(af.simulate(field, x0, T1, **RK4).xs)
    back = np.asarray(af.particles.span.to_ambient(af.simulate(reduced, y0, T1, **RK4).xs, U))
    assert full.shape == back.shape == (B, len(TS), N, D)
    assert np.max(np.abs(full - back)) <= 1e-12
    # an unbatched field with per-member frames becomes a per-member field
    one = af.SA(1.0, **_qk(8)).in_span(U)
    assert one.K.shape == (B, N, N)
    full = np.asarray(af.simulate(af.SA(1.0, **_qk(8)), x0, T1, **RK4).xs)
    back = np.asarray(af.particles.span.to_ambient(af.simulate(one, y0, T1, **RK4).xs, U))
    assert np.max(np.abs(full - back)) <= 1e-12


def test_block_projection_heads():
    blocks = np.eye(D).reshape(4, D // 4, D)
    projections = np.einsum("hkd,hke->hde", blocks, blocks)  # V_h = the projection onto block h
    assert af.MultiHead(1.0, blocks, blocks, projections).in_span(jnp.eye(D, N)) is None
    assert af.MultiHead.identity(1.0, 4, D).in_span(N) is None  # Q_h, K_h need the frame


NOT_REDUCIBLE = {
    "general V": lambda: af.SA(1.0, V=af.sample_weights(0, D, "ginibre")["V"]),
    "V = I to rounding only": lambda: af.SA(1.0, V=np.eye(D) + 1e-17 * np.ones((D, D)) + 1e-16 * np.eye(D, k=1)),
    "V = λ_b I but one member": lambda: af.SA(1.0, V=np.stack([np.eye(D), np.diag(np.arange(1.0, D + 1))])),
    "noise": lambda: af.Noisy(af.SA(1.0), 0.3),
    "feed-forward": lambda: af.SA(1.0) + af.FeedForward(np.ones((4, D)) / D, None, np.ones((D, 4)) / 4),
    "pre-ln around a feed-forward": lambda: af.PreLN(
        af.SA(1.0) + af.FeedForward(np.ones((4, D)), None, np.ones((D, 4)))
    ),
    "layer-wise random V": lambda: af.LayerWise.redrawn(af.SA(1.0), 0, "ginibre", D, 3),
    "hardmax": lambda: af.Hardmax(),
    "linear": lambda: af.LinearAttention(),
}


@pytest.mark.parametrize("name", list(NOT_REDUCIBLE))
def test_fields_whose_span_is_not_invariant_answer_none(name):
    field = NOT_REDUCIBLE[name]()
    assert field.in_span(jnp.eye(D, N)) is None
    assert field.in_span(N) is None


def test_unspecified_frame_needs_identity_query_and_key():
    assert af.SA(1.0, **_qk(0)).in_span(N) is None
    assert af.SA(1.0, **_qk(0)).in_span(jnp.eye(D, N)) is not None
    assert Circle(1.0).in_span(2) is None
    with pytest.raises(ValueError, match="frame U"):
        af.SA(1.0, **_qk(0)).in_span(jnp.eye(D + 1, N))


# -- through the runner and the command line ----------------------------------------------------

RUN = ["n=8", "seeds=3", "beta=[1.0,4.0]", "t1=2", "n_save=5", "solver=rk4", "dt=0.05", "histogram_bins=5"]


def _run(sets, capsys=None, progress=False):
    result = runner.run(load_config(None, sets), progress=progress)
    err = capsys.readouterr().err if capsys is not None else ""
    return result, err


def _same(a, b, tol=1e-10):
    assert a.stats.keys() == b.stats.keys()
    for k in a.stats:
        np.testing.assert_allclose(a.stats[k], b.stats[k], rtol=0, atol=tol, err_msg=k)
    np.testing.assert_array_equal(a.steps, b.steps)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    "sets",
    [
        ["init=orthogonal", "statistics=pairs,clusters,energy,attention"],
        ["init=cap", "weights=repulsive", "save_states=yes"],
        pytest.param(["init=clusters", "norm=pre", "mask=causal", "model=usa"], marks=pytest.mark.slow),
    ],
    ids=["orthogonal", "repulsive-states", "pre-ln-causal-usa"],
)
def test_runner_span_on_and_off_agree(sets, capsys):
    on, err = _run(RUN + ["d=[8,40]"] + sets, capsys, progress=True)
    assert "d=40: simulated in the 8-dimensional span of the tokens (exact for this field)" in err
    assert "d=8: simulated" not in err  # d ≤ n is not reduced
    off, err = _run(RUN + ["d=[8,40]", "span=false"] + sets, capsys, progress=True)
    assert "span of the tokens" not in err
    _same(on, off)
    if on.has_states:
        for d in (8, 40):
            assert on.states(d).shape[-1] == d
            np.testing.assert_allclose(on.states(d), off.states(d), rtol=0, atol=1e-10)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_layer_wise_weights_from_a_file_need_the_frames(tmp_path, capsys):
    d, layers = 40, 3
    w = af.sample_weights(3, d, "ginibre", members=layers)
    weights = tmp_path / "w.npz"
    np.savez(
        weights, Q=np.asarray(w["Q"]), K=np.asarray(w["K"]), V=np.array([1.0, 0.5, -1.0])[:, None, None] * np.eye(d)
    )
    x0 = tmp_path / "x0.npy"
    np.save(x0, np.asarray(af.init.uniform(4, 8, d, batch=3)))
    sets = RUN + [
        f"d={d}",
        f"weights_file={weights}",
        "layer_tau=0.5",
        "init=file",
        f"init_file={x0}",
        "save_states=yes",
    ]
    assert runner.fields.span_reduction(load_config(None, sets), d) == "frame"
    on, err = _run(sets, capsys, progress=True)
    assert "8-dimensional span" in err
    off, _ = _run(sets + ["span=false"])
    _same(on, off)
    np.testing.assert_allclose(on.states(d), off.states(d), rtol=0, atol=1e-10)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    "extra",
    [
        ["noise=0.2"],
        pytest.param(["ff_width=4"], marks=pytest.mark.slow),
        ["weights=ginibre"],
        pytest.param(["coalesce=1e-6"], marks=pytest.mark.slow),
    ],
    ids=lambda e: e[0].split("=")[0],
)
def test_runner_stays_in_full_d_where_the_reduction_does_not_apply(extra, capsys):
    sets = RUN + ["d=12", "seeds=2", "beta=1.0", "t1=0.5"] + extra
    assert runner.fields.span_reduction(load_config(None, sets), 12) is None
    _, err = _run(sets, capsys, progress=True)
    assert "span of the tokens" not in err


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_uniform_runs_draw_reduced_and_save_states_in_r_d(capsys):
    sets = RUN + ["d=40", "save_states=yes", "statistics=pairs,clusters"]
    result, err = _run(sets, capsys, progress=True)
    assert "d=40: simulated in the 8-dimensional span" in err
    xs = result.states(40)  # (β, seeds, T, n, d), mapped back with a Haar frame per member
    assert xs.shape == (2, 3, 5, 8, 40)
    np.testing.assert_allclose(np.linalg.norm(xs, axis=-1), 1.0, atol=1e-12)
    gram = np.einsum("bstid,bstjd->bstij", xs, xs)
    off = ~np.eye(8, dtype=bool)
    # statistics computed from the coordinates are those of the saved states
    np.testing.assert_allclose(gram[..., off].mean(-1), result.stats["mean_inner_product"][0], atol=1e-12)
    np.testing.assert_allclose(gram[..., off].min(-1), result.stats["min_inner_product"][0], atol=1e-12)
    # members labelled by the same seed start from the same configuration for every β
    np.testing.assert_array_equal(xs[0, :, 0], xs[1, :, 0])
    # the member labelled seed s is the run with seed = s
    alone, _ = _run(sets + ["seed=1", "seeds=1"])
    np.testing.assert_allclose(alone.states(40)[:, 0], xs[:, 1], atol=1e-13)


@pytest.mark.slow
def test_cli_span_key(tmp_path):
    x0 = tmp_path / "x0.npy"
    np.save(x0, np.asarray(af.init.uniform(9, 8, 40)))
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'n = 8\nd = 40\nseeds = 2\nbeta = [1.0, 3.0]\nt1 = 2.0\nn_save = 5\nsolver = "rk4"\n'
        f'dt = 0.05\ninit = "file"\ninit_file = "{x0}"\n'
    )
    summaries = {}
    for span in ("true", "false"):
        rc, stdout, stderr = cli(["run", cfg, "--set", f"span={span}", "--json", "--no-plot", "--out", tmp_path / span])
        assert rc == 0, stderr
        assert ("40: simulated in the 8-dimensional span" in stderr) == (span == "true")
        summaries[span] = json.loads(stdout)
    on, off = summaries["true"], summaries["false"]
    assert on["config"]["span"] is True and off["config"]["span"] is False
    for key in ("mean_inner_product", "min_inner_product", "clustered_fraction", "energy"):
        np.testing.assert_allclose(on[key], off[key], rtol=0, atol=1e-10, err_msg=key)
    assert on["n_clusters"] == off["n_clusters"]


# -- sampling in reduced form: the law of the full sample -----------------------------------------

SAMPLES = 4000


@pytest.mark.slow
@pytest.mark.parametrize("n, d", [(2, 3), (8, 33), (8, 1024)])
def test_reduced_sampling_has_the_law_of_uniform_sampling(n, d):
    y = np.asarray(af.particles.span.uniform(100 + d, n, d, batch=SAMPLES))
    x = np.asarray(af.init.uniform(200 + d, n, d, batch=SAMPLES))
    assert y.shape == (SAMPLES, n, n)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), 1.0, atol=1e-14)
    gy, gx = np.einsum("bid,bjd->bij", y, y), np.einsum("bid,bjd->bij", x, x)
    pairs = [(0, 1), (n - 2, n - 1)] if n > 2 else [(0, 1)]
    for i, j in pairs:
        assert st.ks_2samp(gy[:, i, j], gx[:, i, j]).pvalue > 0.01, (i, j)
    if n > 2:
        assert st.ks_2samp(gy[:, 0, n - 1] * gy[:, 1, 2], gx[:, 0, n - 1] * gx[:, 1, 2]).pvalue > 0.01
    assert st.ks_2samp(np.linalg.eigvalsh(gy)[:, 0], np.linalg.eigvalsh(gx)[:, 0]).pvalue > 0.01
    # E⟨x_i, x_j⟩² = 1/d (i ≠ j): the mean over SAMPLES configurations of one pair, within 5 standard errors
    sq = gy[:, n - 2, n - 1] ** 2
    assert abs(sq.mean() - 1.0 / d) <= 5 * sq.std() / np.sqrt(SAMPLES)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("n, d", [(2, 3), (8, 33)])
def test_coordinates_in_a_haar_frame_are_uniform_points(n, d):
    keys = jax.random.split(jax.random.key(3), 2)
    y = af.particles.span.uniform(keys[0], n, d, batch=SAMPLES)
    U = af.particles.span.haar_frame(keys[1], d, n, batch=SAMPLES)
    np.testing.assert_allclose(np.einsum("bdr,bds->brs", U, U), np.broadcast_to(np.eye(n), (SAMPLES, n, n)), atol=1e-13)
    x = np.asarray(af.particles.span.to_ambient(y, U))
    full = np.asarray(af.init.uniform(5, n, d, batch=SAMPLES))
    np.testing.assert_allclose(np.linalg.norm(x, axis=-1), 1.0, atol=1e-13)
    for i in (0, n - 1):  # coordinates depend on the frame: y_1 = e_1 always, x_1 = U's first column
        assert st.ks_2samp(x[:, i, 0], full[:, i, 0]).pvalue > 0.01
        assert st.ks_2samp(x[:, i, d - 1], full[:, i, d - 1]).pvalue > 0.01
    assert st.ks_2samp(x[:, 0, 0] * x[:, n - 1, 0], full[:, 0, 0] * full[:, n - 1, 0]).pvalue > 0.01


@pytest.mark.slow
def test_span_basis_and_to_ambient():
    x = af.init.clusters(1, 7, 30, 2, spread=0.0, batch=2)  # rank 2: the frame's span is larger than the rows'
    U, y = af.particles.span.span_basis(x)
    assert U.shape == (2, 30, 7) and y.shape == (2, 7, 7)
    np.testing.assert_allclose(np.einsum("bdr,bds->brs", U, U), np.broadcast_to(np.eye(7), (2, 7, 7)), atol=1e-13)
    np.testing.assert_allclose(af.particles.span.to_ambient(y, U), x, atol=1e-14)
    traj = jnp.stack([y, 2 * y, 3 * y], axis=1)  # (B, T, n, r)
    np.testing.assert_allclose(af.particles.span.to_ambient(traj, U)[:, 2], 3 * x, atol=1e-13)
    with pytest.raises(ValueError, match="d ≥ n"):
        af.particles.span.uniform(0, 5, 4)
