"""``attnflow hist``: inner-product histograms per layer of token states ([GLPR] Fig. 1), and the
simulation started from one layer compared with the later ones.

The "model" is attnflow itself: SA at β = 1 from uniform tokens, its states saved every half time
unit as the layers of an .npz file. So the histograms have an exact reference (numpy.histogram of
the pairwise inner products), and a simulation started from a layer with the generating β, solver
and step must reproduce the later layers, while a wrong β must not. Bad inputs are in the table of
tests/experiments/test_hostile.py.
"""

from __future__ import annotations

import contextlib
import io
import json

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.commands import hist
from attnflow.experiments.commands import states as state_files
from attnflow.experiments.commands.cli import main
from attnflow.experiments.results import store

N, D, PROMPTS, TAU, BETA, WRONG_BETA, DT = 8, 4, 2, 0.5, 1.0, 4.0, 0.05
LAYERS = 7  # states at t = 0, 0.5, ..., 3


def cli(argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def npz(path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def numpy_histograms(states: np.ndarray, bins: int) -> np.ndarray:
    """The reference: numpy.histogram of ⟨x_i, x_j⟩ (i < j) of the normalized tokens, per layer,
    summed over prompts; states (layers, [prompts,] tokens, d)."""
    x = states if states.ndim == 4 else states[:, None]
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    iu, ju = np.triu_indices(x.shape[-2], 1)
    out = np.zeros((x.shape[0], bins), dtype=np.int64)
    for layer in range(x.shape[0]):
        for prompt in x[layer]:
            # inner products rounded a few ulps past ±1 belong to the end bins (as documented)
            g = np.clip((prompt @ prompt.T)[iu, ju], -1.0, 1.0)
            out[layer] += np.histogram(g, bins=bins, range=(-1.0, 1.0))[0]
    return out


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """SA's own trajectories as token states: (layers, prompts, tokens, d), layer ℓ at t = ℓ·τ."""
    root = tmp_path_factory.mktemp("states")
    x0 = af.init.uniform(3, N, D, batch=PROMPTS)
    sol = af.simulate(af.SA(BETA), x0, t1=TAU * (LAYERS - 1), ts=jnp.arange(LAYERS) * TAU, solver="rk4", dt=DT)
    xs = np.moveaxis(np.asarray(sol.xs), 1, 0)  # (layers, prompts, n, d)
    assert xs.shape == (LAYERS, PROMPTS, N, D)
    # scaled tokens, as a model's hidden states before layer norm: hist normalizes them
    xs = xs * np.random.default_rng(0).uniform(0.5, 20.0, size=xs.shape[:-1] + (1,))
    np.savez(root / "batched.npz", hidden_states=xs)
    np.savez(root / "single.npz", hidden_states=xs[:, 0], other=np.zeros(3))
    np.save(root / "single.npy", xs[:, 0])
    return {"root": root, "xs": xs}


@pytest.fixture(scope="module")
def plain_run(states):
    out = states["root"] / "plain"
    rc, stdout, stderr = cli(["hist", states["root"] / "single.npz", "--key", "hidden_states", "--json", "--out", out])
    assert rc == 0, stderr
    return {"out": out, "summary": json.loads(stdout)}


@pytest.fixture(scope="module")
def sim_run(states):
    """The batched states, simulated from layer 0 at the generating β and at a wrong one, one call."""
    out = states["root"] / "sim"
    rc, stdout, stderr = cli(
        [
            "hist",
            states["root"] / "batched.npz",
            "--simulate-from",
            0,
            "--beta",
            f"{BETA},{WRONG_BETA}",
            "--layer-time",
            TAU,
            "--set",
            "solver=rk4",
            "--set",
            f"dt={DT}",
            "--json",
            "--quiet",
            "--out",
            out,
        ]
    )
    assert rc == 0, stderr
    return {"out": out, "summary": json.loads(stdout)}


# -- (1) histograms of the model's layers -------------------------------------------------------


def test_histograms_equal_numpy_histogram_of_the_pairwise_inner_products(states, plain_run):
    data = npz(plain_run["out"] / store.RESULTS_FILE)
    expected = numpy_histograms(states["xs"][:, 0], 64)
    np.testing.assert_array_equal(data["histogram"], expected)
    assert data["histogram"].dtype.kind == "i"
    np.testing.assert_array_equal(data["edges"], np.linspace(-1.0, 1.0, 65))
    assert data["layer"].tolist() == list(range(LAYERS))
    assert np.all(data["histogram"].sum(axis=1) == N * (N - 1) // 2)
    # the states cluster: the mean inner product grows layer after layer
    assert np.all(np.diff(data["mean_inner_product"]) > 0)


def test_results_have_named_dimensions_and_the_figure_is_written(plain_run):
    out = plain_run["out"]
    dims = json.loads(str(npz(out / store.RESULTS_FILE)[store.DIMS_KEY]))
    assert dims["histogram"] == ["layer", "bin"] and dims["layer"] == ["layer"] and dims["edges"] == ["edge"]
    assert not any(name.startswith("sim") for name in dims)
    assert (out / "histograms.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "distance.png").exists()
    ds = af.load(out)
    assert ds["histogram"].dims == ("layer", "bin") and ds["layer"].values.tolist() == list(range(LAYERS))
    assert ds.attrs["command"] == "hist" and ds.attrs["key"] == "hidden_states"
    s = plain_run["summary"]
    assert s["shape"] == [LAYERS, N, D] and s["bins"] == 64 and s["pairs_per_layer"] == N * (N - 1) // 2
    assert s["simulation"] is None
    assert json.loads((out / store.SUMMARY_FILE).read_text()) == s


def test_layers_and_bins_select(states, tmp_path):
    out = tmp_path / "some"
    rc, _, stderr = cli(
        ["hist", states["root"] / "single.npy", "--layers", "0,3-4,6", "--bins", 16, "--no-plot", "--out", out]
    )
    assert rc == 0, stderr
    data = npz(out / store.RESULTS_FILE)
    assert data["layer"].tolist() == [0, 3, 4, 6]
    np.testing.assert_array_equal(data["histogram"], numpy_histograms(states["xs"][[0, 3, 4, 6], 0], 16))
    assert not list(out.glob("*.png"))


# -- (2) a simulation from a layer reproduces the later layers at the generating β ---------------


def test_simulation_at_the_generating_beta_reproduces_the_later_layers(sim_run):
    s = sim_run["summary"]["simulation"]
    assert s["beta"] == [BETA, WRONG_BETA] and s["layers"] == list(range(LAYERS))
    np.testing.assert_allclose(s["times"], np.arange(LAYERS) * TAU)
    right, wrong = np.asarray(s["w1"])
    assert right.max() < 1e-6, right
    # a genuine check: the wrong β is far away at every later layer, and the best β is the right one
    assert wrong[1:].min() > 1e-3 and wrong[1:].mean() > 1e4 * max(right[1:].mean(), 1e-12), (right, wrong)
    assert s["best_beta"] == BETA
    data = npz(sim_run["out"] / store.RESULTS_FILE)
    # the start is the model's layer 0 itself; later on, the histograms of the right β are the model's
    np.testing.assert_array_equal(data["sim_histogram"][:, 0], np.stack([data["histogram"][0]] * 2))
    # at most one pair per layer on a bin edge
    assert np.abs(data["sim_histogram"][0] - data["histogram"]).sum() <= 2 * LAYERS
    assert np.mean(s["tv"][1][1:]) > 0.1  # the histograms too: most of their mass in other bins


def test_simulation_from_a_later_layer_maps_layers_to_times(states, tmp_path):
    rc, stdout, stderr = cli(
        [
            "hist",
            states["root"] / "single.npz",
            "--key",
            "hidden_states",
            "--simulate-from",
            2,
            "--beta",
            BETA,
            "--layer-time",
            TAU,
            "--set",
            "solver=rk4",
            "--set",
            f"dt={DT}",
            "--layers",
            "1-6",
            "--json",
            "--quiet",
            "--out",
            tmp_path / "late",
        ]
    )
    assert rc == 0, stderr
    s = json.loads(stdout)["simulation"]
    assert s["from_layer"] == 2 and s["layers"] == [2, 3, 4, 5, 6]
    np.testing.assert_allclose(s["times"], [0.0, 0.5, 1.0, 1.5, 2.0])
    assert max(s["w1"][0]) < 1e-6, s["w1"]


def test_simulation_results_and_figures(sim_run):
    out = sim_run["out"]
    dims = json.loads(str(npz(out / store.RESULTS_FILE)[store.DIMS_KEY]))
    assert dims["sim_histogram"] == ["beta", "sim_layer", "bin"] and dims["w1"] == ["beta", "sim_layer"]
    ds = af.load(out)
    assert ds["beta"].values.tolist() == [BETA, WRONG_BETA]
    assert ds["sim_histogram"].shape == (2, LAYERS, 64)
    assert ds.attrs["simulation.solver"] == "rk4" and ds.attrs["simulation.layer_time"] == TAU
    for name in ("histograms.png", "distance.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- (3) prompts are pooled ---------------------------------------------------------------------


def test_batched_states_pool_the_pairs_of_every_prompt(states, sim_run):
    data = npz(sim_run["out"] / store.RESULTS_FILE)
    np.testing.assert_array_equal(data["histogram"], numpy_histograms(states["xs"], 64))
    pairs = PROMPTS * N * (N - 1) // 2
    assert sim_run["summary"]["pairs_per_layer"] == pairs
    assert np.all(data["sim_histogram"].sum(axis=-1) == pairs)
    # pooled within prompts only: the pooled histogram is the sum of the prompts' own
    per_prompt = [numpy_histograms(states["xs"][:, p], 64) for p in range(PROMPTS)]
    np.testing.assert_array_equal(data["histogram"], sum(per_prompt))


# -- the pieces ---------------------------------------------------------------------------------


def test_wasserstein1_of_sorted_samples_is_scipys():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    a, b = np.sort(rng.uniform(-1, 1, 50)), np.sort(rng.normal(0.3, 0.2, 50))
    assert hist.wasserstein1(a, b) == pytest.approx(scipy_stats.wasserstein_distance(a, b), rel=1e-12)
    x = af.init.uniform(0, 5, 3, batch=2)
    pairs = hist.pair_inner_products(x)
    assert pairs.shape == (2 * 10,) and np.all(np.diff(pairs) >= 0)


def test_parse_layers():
    assert state_files.parse_layers(None, 4).tolist() == [0, 1, 2, 3]
    assert state_files.parse_layers("3,0-1,1", 4).tolist() == [0, 1, 3]
    with pytest.raises(ValueError, match=r"layer 4 is out of range; the states have 4 layers \(0–3\)"):
        state_files.parse_layers("1,4", 4)


def test_plot_redraws_the_figures_of_a_hist_directory(sim_run):
    out = sim_run["out"]
    for png in out.glob("*.png"):
        png.unlink()
    rc, stdout, stderr = cli(["plot", out])
    assert rc == 0, stderr
    assert sorted(stdout.split()) == sorted(str(out / name) for name in ("histograms.png", "distance.png"))
    assert (out / "histograms.png").is_file() and (out / "distance.png").is_file()
