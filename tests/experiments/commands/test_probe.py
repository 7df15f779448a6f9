"""``attnflow probe`` end to end: the summary holds af.probe's numbers, ``af.load`` reads the directory, ``attnflow
plot`` redraws it, and bad input exits with status 2, one line on stderr and nothing written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import cli, tree

import attnflow as af
from attnflow.experiments.results.store import jsonable

BETA = 2.0


def sa_states(prompts: int = 3, n: int = 12, d: int = 4, layers: int = 4) -> np.ndarray:
    """SA at β = 2 (V = I) from uniform tokens, saved every 0.5: (layers, prompts, n, d)."""
    times = 0.5 * np.arange(layers)
    sol = af.simulate(
        af.SA(BETA), af.init.uniform(0, n=n, d=d, batch=prompts), float(times[-1]), ts=times, solver="rk4", dt=0.05
    )
    return np.moveaxis(np.asarray(sol.xs), 1, 0)


def planted(blocks: int, prompts: int, heads: int, n: int, sink_heads: int) -> np.ndarray:
    """Attention rows with 0.5 on the first token in the first ``sink_heads`` heads, 1/n elsewhere (uniform)."""
    a = np.full((blocks, prompts, heads, n, n), 1.0 / n)
    a[:, :, :sink_heads] = 0.5 / (n - 1)
    a[:, :, :sink_heads, :, 0] = 0.5
    return a


@pytest.fixture(scope="module")
def states_file(tmp_path_factory):
    states = sa_states()
    path = tmp_path_factory.mktemp("probe") / "states.npz"
    np.savez(path, hidden_states=states, attention=planted(3, 3, 4, 12, sink_heads=1))
    return path, states


def test_cli_writes_af_probes_numbers_and_af_load_reads_them(states_file, tmp_path):
    path, states = states_file
    out = tmp_path / "probe"
    rc, stdout, stderr = cli(["probe", path, "--beta", BETA, "--k", 4, "--out", out, "--quiet", "--no-plot"])
    assert rc == 0, stderr
    assert stderr == ""
    summary = json.loads((out / "summary.json").read_text())
    expected = af.probe(states, attention=planted(3, 3, 4, 12, sink_heads=1), beta=BETA, k=4).summary()
    for key in ("layers", "beta", "energy_monotone", "energy_monotone_fraction", "sink_rate", "raw", "normed"):
        assert summary[key] == jsonable(expected[key], key), key  # the same numbers, to the last bit
    assert summary["energy_monotone"] is True  # SA with V = I climbs E_β
    assert summary["sink_rate"] == [0.25, 0.25, 0.25]  # one head of four planted, in every block
    assert summary["knn_chance"] == pytest.approx(4 / 11)
    assert summary["attention_key"] == "attention" and summary["key"] == "hidden_states"
    ds = af.load(out)
    assert ds.sizes["layer"] == 4 and list(ds["layer"].values) == [0, 1, 2, 3]
    np.testing.assert_allclose(ds["energy"].mean("prompt"), summary["raw"]["energy"], rtol=1e-12)
    np.testing.assert_allclose(ds["effective_rank_normed"].mean("prompt"), summary["normed"]["effective_rank"])
    np.testing.assert_array_equal(ds["sink_rate"], [0.25, 0.25, 0.25])
    assert ds["knn_overlap"].attrs["long_name"].startswith("overlap of the k nearest")
    assert all("long_name" in ds[name].attrs for name in ds.data_vars)


@pytest.mark.slow
def test_cli_draws_a_figure_per_family_and_plot_redraws_them(states_file, tmp_path):
    path, _ = states_file
    out = tmp_path / "probe"
    rc, stdout, stderr = cli(["probe", path, "--beta", BETA, "--k", 4, "--out", out, "--quiet"])
    assert rc == 0, stderr
    figures = ["energy.png", "geometry.png", "knn_overlap.png", "rank.png", "sinks.png"]
    assert sorted(p.name for p in out.glob("*.png")) == figures
    assert [line.strip() for line in stdout.splitlines()[-5:]] == figures  # the report lists them
    rc, stdout, _ = cli(["plot", out, "--kind", "rank"])
    assert rc == 0 and stdout.strip().endswith("rank.png")


def test_cli_layers_and_json(states_file, tmp_path):
    path, states = states_file
    rc, stdout, stderr = cli(
        [
            "probe",
            path,
            "--beta",
            BETA,
            "--k",
            3,
            "--layers",
            "1,3",
            "--out",
            tmp_path / "p",
            "--quiet",
            "--json",
            "--no-plot",
        ]
    )
    assert rc == 0, stderr
    summary = json.loads(stdout)
    assert summary["layers"] == [1, 3] and summary["sink_blocks"] == [1, 3]
    assert len(summary["raw"]["knn_overlap"]) == 1


@pytest.mark.parametrize(
    "change, args, message",
    [
        ("rows", [], "sums to"),
        (None, ["--k", 11], "k must be an integer between 1 and n − 2 = 10"),
        (None, ["--beta", "-1"], "--beta must be a finite number > 0"),
        (None, ["--attention-key", "weights"], "no such array"),
        (None, ["--layers", "2"], "at least 2"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(states_file, tmp_path, change, args, message):
    path, states = states_file
    if change == "rows":
        path = tmp_path / "bad.npz"
        np.savez(path, hidden_states=states, attention=1.1 * planted(3, 3, 4, 12, sink_heads=1))
    out = tmp_path / "out"
    before = tree(tmp_path)
    rc, stdout, stderr = cli(["probe", path, "--beta", BETA, *args, "--out", out, "--quiet"])
    assert rc == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and message in stderr, stderr
    assert tree(tmp_path) == before


@pytest.mark.slow
def test_without_beta_the_energy_is_taken_at_the_beta_af_fit_finds():
    # the states are SA's at β = 2 with layers 0.5 apart: af.fit with QᵀK = V = I recovers both
    result = af.probe(sa_states(prompts=4, layers=5), k=4)
    summary = result.summary()
    assert summary["beta_source"] == "fit"
    assert summary["beta"] == pytest.approx(BETA, rel=1e-4)
    np.testing.assert_allclose(summary["fit"]["tau"], 0.5, rtol=1e-4)
    assert summary["energy_monotone"] is True


@pytest.fixture(scope="module")
def falling_file(tmp_path_factory):
    """SA's states in reverse layer order: a stream whose energy falls at every β."""
    path = tmp_path_factory.mktemp("falling") / "falling.npz"
    np.savez(path, hidden_states=sa_states()[::-1])
    return path


def _falls(out, stdout, trend_of):
    summary = json.loads((out / "summary.json").read_text())
    for family in ("raw", "normed"):
        f = summary[family]
        assert f["energy_monotone"] is False and f["energy_monotone_fraction"] == 0.0
        assert f["energy_trend_of"] == trend_of and max(f["energy_increment_max"]) < 0
    assert stdout.count("E_β decreases somewhere (monotone in 0 % of prompts)") == 2
    assert sorted(p.name for p in out.glob("*.png")) == ["energy.png", "geometry.png", "knn_overlap.png", "rank.png"]
    assert (out / "energy.png").stat().st_size > 10_000


def test_a_falling_energy_beyond_overflow_is_drawn_and_reported_as_decreasing(falling_file, tmp_path):
    # at β = 800, E_β overflows float64 (e^β): the trend is decided on the log of the pairs' part, whose
    # increments are negative, and the figure draws them on a signed axis
    out = tmp_path / "probe"
    rc, stdout, stderr = cli(["probe", falling_file, "--beta", 800, "--k", 4, "--out", out, "--quiet"])
    assert rc == 0, stderr
    _falls(out, stdout, "log_pair_energy")
    rc, _, stderr = cli(["plot", out, "--kind", "energy"])  # drawn again from the files
    assert rc == 0, stderr


@pytest.mark.slow
def test_a_falling_energy_at_the_fitted_beta_is_drawn_and_reported_as_decreasing(falling_file, tmp_path):
    # reversed SA is no forward flow with V = I: af.fit drives β to thousands (τ → 0), where E_β overflows and
    # its self-interactions e^β alone would round every increment of log E_β to zero
    out = tmp_path / "probe"
    rc, stdout, stderr = cli(["probe", falling_file, "--k", 4, "--out", out, "--quiet"])
    assert rc == 0, stderr
    assert json.loads((out / "summary.json").read_text())["beta"] > 709
    _falls(out, stdout, "log_pair_energy")
