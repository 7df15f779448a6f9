"""The ``attnflow`` command line: bad input, the --json summary contract, results on disk, sweeps,
plot, validate, list and the installed entry point.

Everything runs in-process through ``attnflow.experiments.commands.cli.main`` on one tiny configuration
(n = 6, d = 3, two β, two seeds, RK4 with dt = 0.05): every run here shares that compiled shape
or one of two others, so the module costs a few compilations and validate --quick.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import SMALL, cli, tree

import attnflow as af
from attnflow.experiments import builtin, plots
from attnflow.experiments.builtin import Check
from attnflow.experiments.commands import validate
from attnflow.experiments.commands.cli import main
from attnflow.experiments.config import KEYS, load_config, to_toml
from attnflow.experiments.results import rundir, store
from attnflow.experiments.results import runs as results
from attnflow.experiments.results.runs import format_number
from attnflow.experiments.run import runner
from attnflow.experiments.sweep import schedule as sweep

N, D, BETAS, SEEDS, T1, N_SAVE, DT, DELTA = 6, 3, [1.0, 3.0], 2, 2.0, 5, 0.05, 1e-3
CONTRACT_KEYS = {
    "config",
    "times",
    "mean_inner_product",
    "min_inner_product",
    "clustered_fraction",
    "n_clusters",
    "energy",
    "t_clustered",
    "steps",
    "precision",
    "wall_time_s",
    "versions",
    "compilations",
}


# -- helpers ------------------------------------------------------------------------------------


def write_small(path: Path, extra: str = "") -> Path:
    path.write_text(SMALL + extra, encoding="utf-8")
    return path


def members_x0(seed: int = 0) -> np.ndarray:
    """The initial conditions of the SMALL run, members in (β, seed) order; member s drawn from seed + s."""
    x0 = np.stack([np.asarray(af.init.uniform(seed + s, N, D)) for s in range(SEEDS)])
    return np.concatenate([x0] * len(BETAS))


def npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@contextlib.contextmanager
def count_runs():
    """Record the β list of every runner.run call (sweeps group grid points into calls)."""
    calls = []
    real = runner.run

    def spy(config, **kw):
        calls.append(list(config.beta))
        return real(config, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "run", spy)
        yield calls


# -- 1. bad input: exit status 2, one line on stderr, nothing written --------------------------------

BAD_TOML = 'model = "sa"\nn = = 3\n'


def _error_cases():
    q = ["--quick", "--out", "OUT"]
    return [
        ("unknown-key", ["run", "fig4-circle", "--set", "bta=1", *q], "did you mean 'beta'"),
        ("unknown-key-no-near-match", ["run", "fig4-circle", "--set", "zzzzzz=1", *q], "unknown key 'zzzzzz'"),
        ("int-not-text", ["run", "fig4-circle", "--set", "n=abc", *q], "n must be an integer"),
        ("int-not-fraction", ["run", "fig4-circle", "--set", "n=3.5", *q], "n must be an integer"),
        ("n-zero", ["run", "fig4-circle", "--set", "n=0", *q], "n must be an integer ≥ 1, got 0"),
        ("beta-negative", ["run", "fig4-circle", "--set", "beta=-1", *q], "beta"),
        ("beta-list-negative", ["run", "fig4-circle", "--set", "beta=[1.0, -2.0]", *q], "theory of beta ≥ 0"),
        ("beta-list-infinite", ["run", "fig4-circle", "--set", "beta=[1.0, inf]", *q], "beta[1]"),
        ("t1-nan", ["run", "fig4-circle", "--set", "t1=nan", *q], "t1 must be a finite number"),
        ("t1-inf", ["run", "fig4-circle", "--set", "t1=inf", *q], "t1 must be a finite number"),
        ("delta-zero", ["run", "fig4-circle", "--set", "delta=0", *q], "delta must be a finite number > 0"),
        ("dt-negative", ["run", "fig4-circle", "--set", "dt=-0.1", *q], "dt must be"),
        ("d-one", ["run", "fig4-circle", "--set", "d=1", *q], "d must be"),
        ("fixed-step-without-dt", ["run", "fig4-circle", "--set", "solver=rk4", *q], "dt must be > 0"),
        (
            "unknown-solver",
            ["run", "fig4-circle", "--set", "solver=rk5", *q],
            "'euler', 'renormalized_euler', 'rk4', 'lie_euler', 'cg3', 'lie_trotter', 'ab4', 'tsit5', 'dopri5', "
            "'dopri8', 'kvaerno5'",
        ),
        ("unknown-experiment", ["run", "fig4-circel", *q], "did you mean 'fig4-circle'"),
        ("missing-config-file", ["run", "missing.toml", *q], "does not exist"),
        ("malformed-toml", ["run", "bad.toml", *q], "line 2, column"),
        ("unknown-key-in-file", ["run", "typo.toml", *q], "did you mean 'beta'"),
        ("unknown-experiment-in-file", ["run", "noexp.toml", *q], "unknown experiment 'fig5'"),
        ("out-is-a-file", ["run", "small.toml", "--out", "afile"], "is a file"),
        ("out-under-a-file", ["run", "small.toml", "--out", "afile/sub"], "is a file"),
        ("out-is-a-foreign-dir", ["run", "small.toml", "--out", "foreign"], "not an attnflow run"),
        ("unknown-subcommand", ["frobnicate"], "invalid choice"),
        ("unknown-flag", ["run", "fig4-circle", "--bogus", *q], "unrecognized arguments"),
        ("run-without-target", ["run"], "required"),
        ("sweep-without-grid", ["sweep", "small.toml", "--out", "OUT"], "--grid"),
        ("sweep-unknown-grid-key", ["sweep", "small.toml", "--grid", "bta=1,2", "--out", "OUT"], "did you mean 'beta'"),
        ("sweep-invalid-grid-value", ["sweep", "small.toml", "--grid", "n=4,0", "--out", "OUT"], "grid n, value 1"),
        (
            "sweep-invalid-grid-point",
            ["sweep", "small.toml", "--grid", "dt=0.1,0", "--out", "OUT"],
            "grid point dt=0.0: dt must be > 0",
        ),
        ("sweep-bad-linspace", ["sweep", "small.toml", "--grid", "beta=1:2", "--out", "OUT"], "a:b:n"),
        (
            "unknown-executor",
            ["sweep", "small.toml", "--grid", "beta=1,2", "--executor", "mpi", "--out", "OUT"],
            "invalid choice",
        ),
        ("plot-missing-dir", ["plot", "nowhere"], "not a run or sweep directory"),
    ]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """tmp_path as the working directory, holding a few config files, a plain file and a foreign dir."""
    write_small(tmp_path / "small.toml")
    (tmp_path / "bad.toml").write_text(BAD_TOML, encoding="utf-8")
    (tmp_path / "typo.toml").write_text("bta = 2.0\n", encoding="utf-8")
    (tmp_path / "noexp.toml").write_text('experiment = "fig5"\n', encoding="utf-8")
    (tmp_path / "afile").write_text("not a directory\n", encoding="utf-8")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("argv,fragment", [c[1:] for c in _error_cases()], ids=[c[0] for c in _error_cases()])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(workdir, argv, fragment):
    argv = [str(workdir / "out") if a == "OUT" else a for a in argv]
    before = tree(workdir)
    rc, out, err = cli(argv)
    assert rc == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("attnflow: error:"), err
    assert fragment in lines[0], err
    assert tree(workdir) == before


def test_malformed_toml_message_names_the_file_and_position(workdir):
    rc, _, err = cli(["run", "bad.toml", "--quick", "--out", workdir / "out"])
    assert rc == 2
    assert re.search(r"bad\.toml: malformed TOML: .*\(at line 2, column \d+\)$", err.strip()), err


def test_no_command_prints_help_to_stderr_and_exits_2(workdir):
    before = tree(workdir)
    rc, out, err = cli([])
    assert rc == 2 and out == ""
    assert "usage: attnflow" in err
    assert tree(workdir) == before


# -- 2. the --json summary contract and the run directory -------------------------------------------


@pytest.fixture(scope="module")
def json_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("json")
    cfg = write_small(root / "small.toml")
    out = root / "run"
    rc, stdout, stderr = cli(["run", cfg, "--json", "--no-plot", "--quiet", "--out", out])
    assert rc == 0, stderr
    return {"cfg": cfg, "out": out, "stdout": stdout, "summary": json.loads(stdout)}


def test_json_stdout_is_exactly_the_contract_object(json_run):
    s = json_run["summary"]
    assert set(s) == CONTRACT_KEYS
    assert json_run["stdout"].strip().startswith("{") and json_run["stdout"].strip().endswith("}")
    assert s["times"] == np.linspace(0.0, T1, N_SAVE).tolist()
    for key in ("mean_inner_product", "min_inner_product", "clustered_fraction", "energy"):
        assert len(s[key]) == N_SAVE and all(isinstance(v, float) for v in s[key]), key
    members = len(BETAS) * SEEDS
    assert len(s["n_clusters"]) == N_SAVE
    assert all(len(row) == members and all(type(k) is int and 1 <= k <= N for k in row) for row in s["n_clusters"])
    assert len(s["t_clustered"]) == members
    assert all(t is None or 0.0 <= t <= T1 for t in s["t_clustered"])
    assert s["steps"] == round(T1 / DT) == 40
    assert s["precision"] == "float64"  # a float64 run's products
    assert isinstance(s["wall_time_s"], float) and s["wall_time_s"] > 0
    assert s["versions"]["attnflow"] == af.__version__
    assert {"python", "jax", "numpy"} <= set(s["versions"])
    # the compilations by program add up to the totals (tests/solvers/test_compilations.py counts them)
    c = s["compilations"]
    assert c["compiled"] == sum(p["compiled"] for p in c["by_program"].values())
    assert c["cached"] == sum(p["cached"] for p in c["by_program"].values())
    assert abs(c["seconds"] - sum(p["seconds"] for p in c["by_program"].values())) < 0.01


def test_json_config_is_the_resolved_config(json_run):
    expected = load_config(json_run["cfg"], ["progress=false"])
    assert json_run["summary"]["config"] == expected.to_dict()
    assert json_run["summary"]["config"]["experiment"] == "simulate"


def test_json_statistics_at_time_zero_match_the_initial_conditions(json_run):
    s = json_run["summary"]
    x0 = members_x0(seed=0)  # (members, n, d), members in (β, seed) order
    betas = np.repeat(BETAS, SEEDS)
    gram = np.einsum("mid,mjd->mij", x0, x0)
    off = ~np.eye(N, dtype=bool)
    pairs = gram[:, off]  # (members, n(n-1))
    assert s["mean_inner_product"][0] == pytest.approx(pairs.mean(), rel=1e-12, abs=1e-14)
    assert s["min_inner_product"][0] == pytest.approx(pairs.min(axis=1).mean(), rel=1e-12, abs=1e-14)
    assert s["clustered_fraction"][0] == pytest.approx((pairs >= 1 - DELTA).mean(), abs=1e-15)
    energies = [float(af.energy(x, b)) for x, b in zip(x0, betas)]
    assert s["energy"][0] == pytest.approx(np.mean(energies), rel=1e-12)
    # E_β(x) = (1/(2β n²)) Σ_ij e^{β⟨x_i,x_j⟩}, [GLPR] (3.5), by hand
    by_hand = [np.exp(b * g).sum() / (2 * b * N**2) for g, b in zip(gram, betas)]
    assert s["energy"][0] == pytest.approx(np.mean(by_hand), rel=1e-12)
    assert s["n_clusters"][0] == [int(af.n_clusters(x, DELTA)) for x in x0]


def test_json_energy_increases_along_the_flow(json_run):
    # SA with V = I is a gradient ascent flow of E_β ([GLPR] §3): the ensemble mean can only grow
    e = np.asarray(json_run["summary"]["energy"])
    assert np.all(np.diff(e) > 0)
    m = np.asarray(json_run["summary"]["mean_inner_product"])
    assert m[-1] > m[0]


def test_t_clustered_is_first_time_all_pairs_within_delta(json_run):
    data = npz(json_run["out"] / store.RESULTS_FILE)
    ts = np.asarray(json_run["summary"]["times"])
    mins = data["min_inner_product"].reshape(-1, N_SAVE)  # members in (d, β, seed) order
    for t, row in zip(json_run["summary"]["t_clustered"], mins):
        together = np.nonzero(row >= 1 - DELTA)[0]
        assert (t is None) == (together.size == 0)
        if t is not None:
            assert t == ts[together[0]]


def test_summary_json_on_disk_equals_stdout(json_run):
    on_disk = json.loads((json_run["out"] / store.SUMMARY_FILE).read_text(encoding="utf-8"))
    assert on_disk == json_run["summary"]


def test_config_toml_round_trips_to_the_resolved_config(json_run):
    expected = load_config(json_run["cfg"], ["progress=false"])
    again = load_config(json_run["out"] / store.CONFIG_FILE)
    assert again == expected
    assert again.to_dict() == json_run["summary"]["config"]


def test_results_npz_loads_without_pickle_and_matches_summary(json_run):
    data = npz(json_run["out"] / store.RESULTS_FILE)
    for name, arr in data.items():
        if name == store.DIMS_KEY:
            assert arr.dtype.kind == "U" and arr.shape == ()
        else:
            assert arr.dtype.kind in "biuf", name
    assert data["d"].tolist() == [D] and data["beta"].tolist() == BETAS and data["seed"].tolist() == [0, 1]
    assert data["steps"].shape == (1, len(BETAS), SEEDS) and np.all(data["steps"] == 40)
    mean = data["mean_inner_product"]
    assert mean.shape == (1, len(BETAS), SEEDS, N_SAVE)
    np.testing.assert_allclose(mean.mean(axis=(0, 1, 2)), json_run["summary"]["mean_inner_product"], rtol=1e-12)
    np.testing.assert_array_equal(data["n_clusters"].reshape(-1, N_SAVE).T, json_run["summary"]["n_clusters"])
    # small runs keep their states: (d, β, seed, T, n, coord), on the sphere, starting at x0
    assert json.loads(data[store.DIMS_KEY].item())["xs"] == ["d", "beta", "seed", "time", "particle", "coord"]
    xs = data["xs"][0]
    assert xs.shape == (len(BETAS), SEEDS, N_SAVE, N, D)
    np.testing.assert_allclose(np.linalg.norm(xs, axis=-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(xs[:, :, 0].reshape(-1, N, D), members_x0(), atol=1e-15)


def test_af_load_gives_named_dimensions(json_run):
    ds = af.load(json_run["out"])
    assert ds["mean_inner_product"].dims == ("d", "beta", "seed", "time")
    assert ds["d"].values.tolist() == [D]
    assert ds["beta"].values.tolist() == BETAS
    assert ds["seed"].values.tolist() == [0, 1]
    np.testing.assert_array_equal(ds["time"].values, np.linspace(0.0, T1, N_SAVE))
    mean = ds["mean_inner_product"].mean(dim=("d", "beta", "seed")).values
    np.testing.assert_allclose(mean, json_run["summary"]["mean_inner_product"], rtol=1e-12, atol=1e-15)
    assert ds.attrs["n"] == N and ds.attrs["solver"] == "rk4"


def test_af_load_labels_every_variable_and_xarray_plots_with_them(json_run):
    ds = af.load(json_run["out"])
    assert all("long_name" in ds[name].attrs for name in ds.variables)
    assert ds["time"].attrs == {"long_name": "time t", "units": "model time units"}
    assert ds["beta"].attrs == {"long_name": "inverse temperature β"}  # no units
    assert ds["t_clustered"].attrs == {"long_name": "first time every pair is within δ", "units": "model time units"}
    import matplotlib.pyplot as plt

    line = ds["mean_inner_product"].sel(d=D, beta=BETAS[0], seed=0).plot.line()[0]
    plt.close(line.figure)
    assert line.axes.get_xlabel() == "time t [model time units]"
    assert " ".join(line.axes.get_ylabel().split()) == "mean ⟨x_i, x_j⟩ over pairs i ≠ j"  # xarray wraps long labels


def test_json_stdout_stays_parseable_with_progress_on(json_run, tmp_path):
    rc, out, _ = cli(["run", json_run["cfg"], "--json", "--no-plot", "--out", tmp_path / "loud"])
    assert rc == 0
    loud = json.loads(out)
    quiet = json_run["summary"]
    assert loud["config"]["progress"] is True
    for key in (
        "times",
        "mean_inner_product",
        "min_inner_product",
        "clustered_fraction",
        "n_clusters",
        "energy",
        "t_clustered",
        "steps",
    ):
        # progress never changes the calls: the same bits
        np.testing.assert_array_equal(
            np.asarray(loud[key], dtype=float), np.asarray(quiet[key], dtype=float), err_msg=key
        )


def test_progress_of_a_chunked_ensemble_is_reported_between_compiled_calls(json_run, tmp_path, monkeypatch):
    # a memory budget of a few members per call: progress is counted between the calls, and no
    # call compiles a callback into its loop (such a program never enters the compilation cache)
    seen = []
    real = runner.simulate

    def spy(*args, **kwargs):
        seen.append(kwargs["progress"])
        return real(*args, **kwargs)

    monkeypatch.setattr(runner, "simulate", spy)
    rc, out, err = cli(
        ["run", json_run["cfg"], "--json", "--no-plot", "--set", "memory_gb=0.0000003", "--out", tmp_path / "chunked"]
    )
    assert rc == 0, err
    members = len(BETAS) * SEEDS
    assert len(seen) > 1 and not any(seen)
    lines = err.replace("\r", "\n").splitlines()
    assert f"simulate: [{'#' * 24}] {members} / {members} members (100%)" in "\n".join(lines)
    counts = [int(m.group(1)) for line in lines if (m := re.search(r"\] (\d+) / \d+ members", line))]
    assert counts == sorted(counts) and counts[0] == 0 and len(counts) == len(seen) + 1
    np.testing.assert_allclose(
        json.loads(out)["mean_inner_product"], json_run["summary"]["mean_inner_product"], rtol=1e-12
    )
    # an ensemble that fits one call is one call, whatever is shown: its loop reports the time between its bounded
    # calls, from no callback
    for name, more in [("whole", []), ("one", ["--set", "seeds=1", "--set", f"beta=[{BETAS[0]}]"])]:
        seen.clear()
        rc, _, err = cli(["run", json_run["cfg"], "--no-plot", *more, "--out", tmp_path / name])
        assert rc == 0 and seen == ["simulate"], seen
        assert re.search(r"simulate: \[#{24}\] t = [\d.]+ / [\d.]+ \(100%\)", err.replace("\r", "\n")), err


def test_run_without_json_reports_on_stdout(json_run, tmp_path):
    out_dir = tmp_path / "report"
    rc, out, _ = cli(["run", json_run["cfg"], "--no-plot", "--quiet", "--out", out_dir])
    assert rc == 0
    assert f"{len(BETAS) * SEEDS} member(s), n = {N}, d = [{D}]" in out
    assert f"results in {out_dir}/" in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


def test_run_replaces_an_existing_run_only_with_overwrite(json_run, tmp_path):
    target = tmp_path / "again"
    shutil.copytree(json_run["out"], target)
    (target / "notes.txt").write_text("mine\n")
    argv = ["run", json_run["cfg"], "--json", "--no-plot", "--quiet", "--set", "n_save=3", "--out", target]
    before = tree(tmp_path)
    rc, out, err = cli(argv)
    assert rc == 2 and out == ""
    assert err == (
        f"attnflow: error: --out {str(target)!r} already holds an attnflow run; pass --overwrite to "
        "replace it (files attnflow did not write are kept), or choose another --out\n"
    )
    assert tree(tmp_path) == before
    rc, out, _ = cli(argv + ["--overwrite"])
    assert rc == 0
    assert json.loads((target / store.SUMMARY_FILE).read_text())["times"] == [0.0, 1.0, 2.0]
    assert (target / "notes.txt").read_text() == "mine\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary leftovers
    assert store.foreign_files(target) == ["notes.txt"]


def test_a_directory_of_the_users_own_is_read_but_never_written_over(json_run, tmp_path):
    """config.toml, summary.json and results.npz with no record of attnflow's: the user's files. They load and
    plot; no --overwrite replaces them, and removing the run removes nothing of theirs."""
    mine = tmp_path / "mine"
    shutil.copytree(json_run["out"], mine)
    (mine / store.OWNED_FILE).unlink()
    originals = {
        name: (mine / name).read_bytes() for name in (store.CONFIG_FILE, store.SUMMARY_FILE, store.RESULTS_FILE)
    }
    assert store.owned_files(mine) == {store.OWNED_FILE}
    assert store.unowned_run_files(mine) == [store.CONFIG_FILE, store.SUMMARY_FILE, store.RESULTS_FILE]
    assert af.load(mine)["steps"].shape == (1, len(BETAS), SEEDS)
    rc, out, err = cli(["plot", mine])  # figures are added, and only they become attnflow's
    assert rc == 0, err
    assert sorted(Path(line).name for line in out.splitlines()) == ["cluster_counts.png", "trajectories.png"]
    assert store.owned_files(mine) == {store.OWNED_FILE, "cluster_counts.png", "trajectories.png"}
    before = tree(tmp_path)
    rc, out, err = cli(["run", json_run["cfg"], "--no-plot", "--quiet", "--overwrite", "--out", mine])
    assert rc == 2 and out == ""
    assert err == (
        f"attnflow: error: --out {str(mine)!r} holds 'config.toml', which attnflow did not write (its "
        ".attnflow.json does not list it), and attnflow never replaces a file of yours: move it away, "
        "or choose another --out\n"
    )
    assert tree(tmp_path) == before
    with pytest.raises(store.StoreError, match="holds 'config.toml', which attnflow did not write"):
        store.write_run(mine, "n = 6\n", {}, {}, overwrite=True)
    assert sorted(store.remove_run(mine)) == sorted(originals)  # the figures go, the user's files stay
    assert {name: (mine / name).read_bytes() for name in originals} == originals


def test_run_simulate_is_a_configuration_of_ones_own(json_run, tmp_path):
    """The target the β < 0 refusal names: the key defaults, changed with --set, here SMALL with β = −1."""
    sets = [a for line in SMALL.splitlines() if not line.startswith("beta") for a in ("--set", line.replace(" ", ""))]
    rc, out, err = cli(
        [
            "run",
            "simulate",
            *sets,
            "--set",
            "beta=[-1.0, 3.0]",
            "--json",
            "--no-plot",
            "--quiet",
            "--out",
            tmp_path / "neg",
        ]
    )
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["config"]["experiment"] == "simulate" and summary["config"]["beta"] == [-1.0, 3.0]
    assert summary["config"]["n"] == N and summary["steps"] == round(T1 / DT)
    # β = 3 is the same member as in the TOML run: same seeds, same start
    np.testing.assert_allclose(
        npz(tmp_path / "neg" / store.RESULTS_FILE)["mean_inner_product"][:, 1],
        npz(json_run["out"] / store.RESULTS_FILE)["mean_inner_product"][:, 1],
        rtol=1e-12,
    )
    rc, out, err = cli(
        ["sweep", "simulate", *sets, "--grid", "beta=-1,3", "--no-plot", "--quiet", "--out", tmp_path / "negsweep"]
    )
    assert rc == 0, err
    assert out.splitlines()[0] == f"simulate sweep: 2 runs in {tmp_path / 'negsweep'}/: 2 done, 0 failed"


# -- 4. sweeps ----------------------------------------------------------------------------------------

GRID_POINTS = [{"beta": 0.5, "n": 4}, {"beta": 0.5, "n": 6}, {"beta": 2.0, "n": 4}, {"beta": 2.0, "n": 6}]


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    cfg = write_small(root / "small.toml")
    out = root / "grid"
    with count_runs() as calls:
        rc, stdout, stderr = cli(
            ["sweep", cfg, "--grid", "beta=0.5,2", "--grid", "n=4,6", "--no-plot", "--quiet", "--out", out]
        )
    assert rc == 0, stderr
    return {"cfg": cfg, "out": out, "calls": calls, "stdout": stdout, "stderr": stderr}


def test_sweep_expands_the_grid_into_named_run_directories(grid_sweep):
    out = grid_sweep["out"]
    names = [store.run_name(p) for p in GRID_POINTS]
    assert names == ["beta=0.5_n=4", "beta=0.5_n=6", "beta=2.0_n=4", "beta=2.0_n=6"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names + [store.MANIFEST_FILE])
    manifest = store.read_manifest(out)
    assert manifest["axes"] == {"beta": [0.5, 2.0], "n": [4, 6]}
    assert [r["name"] for r in manifest["runs"]] == names  # product order, first axis slowest
    assert [r["point"] for r in manifest["runs"]] == GRID_POINTS
    assert all(r["status"] == "done" for r in manifest["runs"])
    for point, name in zip(GRID_POINTS, names):
        config = load_config(out / name / store.CONFIG_FILE)
        assert list(config.beta) == [point["beta"]] and config.n == point["n"]
        assert config.seeds == SEEDS and config.d == (D,)
        s = json.loads((out / name / store.SUMMARY_FILE).read_text())
        assert len(s["t_clustered"]) == SEEDS and all(len(row) == SEEDS for row in s["n_clusters"])
        assert s["steps"] == 40


def test_sweep_reports_on_stdout_and_quiet_silences_only_stderr(grid_sweep):
    out = grid_sweep["out"]
    lines = grid_sweep["stdout"].splitlines()
    assert grid_sweep["stderr"] == ""
    assert lines[0] == f"simulate sweep: 4 runs in {out}/: 4 done, 0 failed"
    assert lines[1].split() == ["run", "status", "t_clustered", "steps"]
    assert len(lines) == 2 + len(GRID_POINTS)
    for line, point in zip(lines[2:], GRID_POINTS):
        name = store.run_name(point)
        summary = json.loads((out / name / store.SUMMARY_FILE).read_text())
        reached = [t for t in summary["t_clustered"] if t is not None]  # the members that clustered
        if not reached:
            clustered = f"never (0/{SEEDS})"
        else:
            clustered = format_number(np.mean(reached)) + (
                "" if len(reached) == SEEDS else f" ({len(reached)}/{SEEDS})"
            )
        assert re.split(r"\s{2,}", line.strip()) == [name, "done", clustered, str(summary["steps"])]


def test_format_number_switches_to_scientific_notation_outside_1e_3_to_1e5():
    assert format_number(222759498957541.8) == "2.23e+14"
    assert format_number(4.1e-7) == "4.1e-07" and format_number(-3.5e9) == "-3.5e+09"
    assert format_number(2227.5) == "2228" and format_number(12.345) == "12.3" and format_number(0.00123) == "0.00123"
    assert format_number(99999.9) == "100000" and format_number(123456.0) == "1.23e+05"
    assert format_number(3.14159, 4) == "3.142" and format_number(0.0) == "0" and format_number(float("nan")) == "nan"


def test_sweep_groups_points_differing_only_in_beta(grid_sweep):
    # one compiled ensemble per n, holding both β values
    assert grid_sweep["calls"] == [[0.5, 2.0], [0.5, 2.0]]


def test_sweep_into_an_existing_sweep_needs_resume(grid_sweep):
    out = grid_sweep["out"]
    before = tree(out)
    rc, stdout, err = cli(
        ["sweep", grid_sweep["cfg"], "--grid", "beta=0.5,2", "--grid", "n=4,6", "--no-plot", "--quiet", "--out", out]
    )
    assert rc == 2 and stdout == ""
    assert len(err.splitlines()) == 1 and err.startswith("attnflow: error:") and "--resume" in err
    assert tree(out) == before


def test_sweep_resume_redoes_only_the_missing_run(grid_sweep, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(grid_sweep["out"], out)
    victim = "beta=0.5_n=6"
    old_summary = json.loads((out / victim / store.SUMMARY_FILE).read_text())
    old_arrays = npz(out / victim / store.RESULTS_FILE)
    shutil.rmtree(out / victim)
    keep = {
        name: (os.stat(out / name).st_ino, tree(out / name))
        for name in ("beta=0.5_n=4", "beta=2.0_n=4", "beta=2.0_n=6")
    }
    args = [
        "sweep",
        grid_sweep["cfg"],
        "--grid",
        "beta=0.5,2",
        "--grid",
        "n=4,6",
        "--no-plot",
        "--quiet",
        "--resume",
        "--out",
        out,
    ]
    with count_runs() as calls:
        rc, stdout, err = cli(args)
    assert rc == 0, err
    assert calls == [[0.5]]
    assert "3 of 4 runs already complete" in err
    assert stdout.splitlines()[0] == f"simulate sweep: 4 runs in {out}/: 4 done (3 reused), 0 failed"
    assert store.is_complete(out / victim)
    for name, snap in keep.items():
        assert (os.stat(out / name).st_ino, tree(out / name)) == snap, name
    assert all(r["status"] == "done" for r in store.read_manifest(out)["runs"])
    # the redone run is the same computation: same β, same seeds, same initial conditions
    new_summary = json.loads((out / victim / store.SUMMARY_FILE).read_text())
    np.testing.assert_allclose(new_summary["mean_inner_product"], old_summary["mean_inner_product"], rtol=1e-12)
    new_arrays = npz(out / victim / store.RESULTS_FILE)
    np.testing.assert_allclose(new_arrays["xs"], old_arrays["xs"], rtol=0, atol=1e-12)

    runs_before = {p.name: tree(p) for p in out.iterdir() if p.is_dir()}
    with count_runs() as calls:
        rc, stdout, err = cli(args + ["--json"])
    assert rc == 0, err
    assert calls == []
    assert "4 of 4 runs already complete" in err
    assert {p.name: tree(p) for p in out.iterdir() if p.is_dir()} == runs_before
    report = json.loads(stdout)  # the whole of stdout
    assert {k: report[k] for k in ("sweep", "runs_total", "done", "reused", "failed", "pending")} == {
        "sweep": str(out),
        "runs_total": 4,
        "done": 4,
        "reused": 4,
        "failed": 0,
        "pending": 0,
    }
    manifest = store.read_manifest(out)["runs"]
    assert [{k: v for k, v in r.items() if k != "summary"} for r in report["runs"]] == manifest
    for r in report["runs"]:
        assert r["summary"] == json.loads((out / r["name"] / store.SUMMARY_FILE).read_text())


def test_sweep_resume_with_another_configuration_is_refused_and_overwrite_replaces(grid_sweep, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(grid_sweep["out"], out)
    (out / "notes.txt").write_text("about this sweep\n")
    (out / "beta=0.5_n=4" / "mine.png").write_bytes(b"my own figure")
    base = ["sweep", grid_sweep["cfg"], "--grid", "beta=0.5,2", "--grid", "n=4,6", "--no-plot", "--quiet", "--out", out]
    before = tree(out)
    with count_runs() as calls:
        rc, stdout, err = cli(base + ["--resume", "--set", "seed=7"])
    assert rc == 2 and stdout == "" and calls == []
    assert "cannot resume the sweep in" in err and "differing keys: seed" in err
    assert "seed: stored 0, requested 7" in err and "--overwrite" in err
    assert tree(out) == before

    # overwrite a grid that shares two points with the old one: every point is computed again, the
    # run outside the new grid is removed (its user file kept), and the user's files stay where they were
    grid = [
        "sweep",
        grid_sweep["cfg"],
        "--grid",
        "beta=2,3",
        "--grid",
        "n=4,6",
        "--no-plot",
        "--quiet",
        "--set",
        "seed=7",
        "--out",
        out,
        "--overwrite",
    ]
    with count_runs() as calls:
        rc, _, err = cli(grid)
    assert rc == 0, err
    assert sorted(calls) == [[2.0, 3.0], [2.0, 3.0]]
    assert "kept 1 file(s) attnflow did not write in" in err and "mine.png" in err
    names = ["beta=2.0_n=4", "beta=2.0_n=6", "beta=3.0_n=4", "beta=3.0_n=6"]
    assert sorted(p.name for p in out.iterdir()) == sorted(names + ["beta=0.5_n=4", "manifest.json", "notes.txt"])
    assert sorted(p.name for p in (out / "beta=0.5_n=4").iterdir()) == [store.OWNED_FILE, "mine.png"]
    assert (out / "notes.txt").read_text() == "about this sweep\n"
    assert all(load_config(out / n / store.CONFIG_FILE).seed == 7 for n in names)
    assert [r["name"] for r in store.read_manifest(out)["runs"]] == names

    # the same command with --resume now finds every run its own
    with count_runs() as calls:
        rc, _, err = cli(grid[:-1] + ["--resume"])
    assert rc == 0 and calls == [] and "4 of 4 runs already complete" in err


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("error::FutureWarning")
def test_af_load_of_a_beta_by_n_sweep_has_the_grid_axes_as_dimensions(grid_sweep):
    ds = af.load(grid_sweep["out"])
    assert "beta" in ds.dims and "n" in ds.dims
    assert ds["beta"].values.tolist() == [0.5, 2.0] and ds["n"].values.tolist() == [4, 6]
    for point, name in zip(GRID_POINTS, [store.run_name(p) for p in GRID_POINTS]):
        mine = npz(grid_sweep["out"] / name / store.RESULTS_FILE)["mean_inner_product"]
        got = ds["mean_inner_product"].sel(beta=point["beta"], n=point["n"]).values
        np.testing.assert_allclose(got.reshape(mine.shape), mine, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("error::FutureWarning")
def test_af_load_of_an_n_sweep_with_states(grid_sweep, tmp_path):
    out = tmp_path / "nsweep"
    rc, _, err = cli(["sweep", grid_sweep["cfg"], "--grid", "n=4,6", "--no-plot", "--quiet", "--out", out])
    assert rc == 0, err
    assert npz(out / "n=4" / store.RESULTS_FILE)["xs"].shape[-2] == 4  # states were kept (save_states auto)
    ds = af.load(out)
    assert ds["n"].values.tolist() == [4, 6]
    assert ds["mean_inner_product"].dims[0] == "n"


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("error::FutureWarning")
def test_af_load_of_a_beta_by_dt_sweep(grid_sweep, tmp_path):
    out = tmp_path / "bdt"
    rc, _, err = cli(
        [
            "sweep",
            grid_sweep["cfg"],
            "--grid",
            "beta=0.5,2",
            "--grid",
            "dt=0.05,0.1",
            "--no-plot",
            "--quiet",
            "--out",
            out,
        ]
    )
    assert rc == 0, err
    ds = af.load(out)
    assert ds["beta"].values.tolist() == [0.5, 2.0] and ds["dt"].values.tolist() == [0.05, 0.1]
    steps = ds["steps"].sel(beta=2.0).values
    assert np.nanmax(steps.reshape(2, -1), axis=1).tolist() == [40, 20]


def _number(v):
    return np.nan if v is None else float(v)


@pytest.mark.filterwarnings("error::FutureWarning")
def test_plot_x_y_draws_a_statistic_of_the_sweep_against_an_axis(grid_sweep, tmp_path, monkeypatch):
    out = tmp_path / "grid"
    shutil.copytree(grid_sweep["out"], out)
    drawn = {}

    def capture(x_values, curves, **kw):
        drawn.update(x=x_values, curves=curves, **kw)
        real(x_values, curves, **kw)

    real = plots.sweep_curves
    monkeypatch.setattr(plots, "sweep_curves", capture)
    rc, stdout, err = cli(["plot", out, "--x", "beta", "--y", "t_clustered"])
    assert rc == 0, err
    assert stdout.splitlines() == [str(out / "t_clustered_vs_beta.png")]
    assert (out / "t_clustered_vs_beta.png").read_bytes()[:4] == b"\x89PNG"
    assert "t_clustered_vs_beta.png" in store.owned_files(out)  # attnflow's: the next plot replaces it
    # one curve per value of the other axis, one point per β: the summaries' values
    assert drawn["x"] == [0.5, 2.0] and list(drawn["curves"]) == ["n = 4", "n = 6"]
    for n in (4, 6):
        for b, y in zip((0.5, 2.0), drawn["curves"][f"n = {n}"]):
            summary = json.loads((out / store.run_name({"beta": b, "n": n}) / store.SUMMARY_FILE).read_text())
            reached = [v for v in summary["t_clustered"] if v is not None]  # the members that clustered
            assert y == (np.mean(reached) if reached else pytest.approx(np.nan, nan_ok=True))
    assert drawn["xlabel"] == "inverse temperature β"
    assert drawn["ylabel"].startswith("first time every pair is within δ [model time units]")
    # a per-time statistic at the last save time, against n: one curve per β
    rc, _, err = cli(["plot", out, "--x", "n", "--y", "clustered_fraction"])
    assert rc == 0, err
    assert drawn["x"] == [4, 6] and list(drawn["curves"]) == ["beta = 0.5", "beta = 2"]
    assert drawn["xlabel"] == "n: number of particles (tokens)"
    for b in (0.5, 2.0):
        for n, y in zip((4, 6), drawn["curves"][f"beta = {b:g}"]):
            summary = json.loads((out / store.run_name({"beta": b, "n": n}) / store.SUMMARY_FILE).read_text())
            assert y == _number(summary["clustered_fraction"][-1])


def test_plot_x_y_refuses_a_name_the_sweep_does_not_have_in_one_line(grid_sweep, json_run, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(grid_sweep["out"], out)
    before = tree(out)
    cases = [
        (["--x", "gamma", "--y", "t_clustered"], "--x 'gamma' is not an axis of this sweep; its axes: beta, n"),
        (
            ["--x", "beta", "--y", "t_cluster"],
            "--y 't_cluster' is not a summary statistic of this sweep; choose one of: mean_inner_product, "
            "min_inner_product, clustered_fraction, n_clusters, energy, t_clustered, steps, wall_time_s",
        ),
        (["--x", "beta"], "--x and --y go together"),
        (["--x", "beta", "--y", "steps", "--interactive"], "--x/--y draw a sweep's curve alone"),
    ]
    for flags, message in cases:
        rc, stdout, err = cli(["plot", out, *flags])
        assert rc == 2 and stdout == "" and len(err.splitlines()) == 1, (flags, err)
        assert err.startswith(f"attnflow: error: {message}"), err
    assert tree(out) == before
    rc, _, err = cli(["plot", json_run["out"], "--x", "beta", "--y", "steps"])
    assert rc == 2 and "--x and --y draw a sweep's curves" in err and "has no manifest.json" in err


@pytest.fixture(scope="module")
def beta_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("bsweep")
    cfg = write_small(root / "small.toml")
    out = root / "betas"
    with count_runs() as calls:
        rc, _, err = cli(["sweep", cfg, "--grid", "beta=0.5,2", "--no-plot", "--quiet", "--out", out])
    assert rc == 0, err
    singles = {}
    for b in (0.5, 2.0):
        rc, _, err = cli(["run", cfg, "--set", f"beta={b}", "--no-plot", "--quiet", "--out", root / f"single{b}"])
        assert rc == 0, err
        singles[b] = root / f"single{b}"
    return {"cfg": cfg, "out": out, "calls": calls, "singles": singles}


def test_beta_only_sweep_is_one_ensemble_equal_to_separate_runs(beta_sweep):
    assert beta_sweep["calls"] == [[0.5, 2.0]]
    for b, single in beta_sweep["singles"].items():
        swept = beta_sweep["out"] / store.run_name({"beta": b})
        assert swept.name == f"beta={b!r}"
        a, s = npz(swept / store.RESULTS_FILE), npz(single / store.RESULTS_FILE)
        assert set(a) == set(s)
        for name in a:
            if a[name].dtype.kind == "U":
                assert a[name] == s[name]
            else:
                np.testing.assert_allclose(a[name], s[name], rtol=1e-12, atol=1e-12, err_msg=name)
        sa, ss = (json.loads((p / store.SUMMARY_FILE).read_text()) for p in (swept, single))
        assert sa["config"] == ss["config"]
        assert sa["precision"] == ss["precision"]
        for key in CONTRACT_KEYS - {"config", "precision", "wall_time_s", "versions", "compilations"}:
            np.testing.assert_allclose(
                np.asarray(sa[key], dtype=float), np.asarray(ss[key], dtype=float), rtol=1e-12, atol=1e-12, err_msg=key
            )


@pytest.mark.filterwarnings("error::FutureWarning")
def test_af_load_of_a_beta_sweep(beta_sweep):
    ds = af.load(beta_sweep["out"])
    assert ds["beta"].values.tolist() == [0.5, 2.0]
    assert ds.attrs["sweep_axes"] == ["beta"]
    assert ds["mean_inner_product"].dims == ("d", "beta", "seed", "time")
    for b, single in beta_sweep["singles"].items():
        mine = npz(single / store.RESULTS_FILE)["mean_inner_product"][:, 0]
        np.testing.assert_allclose(ds["mean_inner_product"].sel(beta=b).values, mine, rtol=1e-12)


@pytest.fixture(scope="module")
def solver_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("ssweep")
    cfg = write_small(root / "small.toml")
    out = root / "solver"
    rc, _, err = cli(
        ["sweep", cfg, "--grid", "dt=0.05,0.1", "--grid", "delta=1e-3,0.5", "--no-plot", "--quiet", "--out", out]
    )
    assert rc == 0, err
    return out


@pytest.mark.filterwarnings("error::FutureWarning")
def test_af_load_of_a_product_sweep_has_one_dimension_per_axis(solver_sweep):
    ds = af.load(solver_sweep)
    assert ds["mean_inner_product"].dims == ("dt", "delta", "d", "beta", "seed", "time")
    assert ds["dt"].values.tolist() == [0.05, 0.1]
    assert ds["delta"].values.tolist() == [1e-3, 0.5]
    # steps = t1 / dt for the fixed-step solver, per grid point
    np.testing.assert_array_equal(ds["steps"].sel(delta=1e-3).values.reshape(2, -1).max(axis=1), [40, 20])
    # δ only changes the clustering statistics, never the trajectory
    m = ds["mean_inner_product"]
    np.testing.assert_array_equal(m.sel(delta=1e-3).values, m.sel(delta=0.5).values)
    # a looser threshold can only see more pairs together
    f = ds["clustered_fraction"]
    assert np.all(f.sel(delta=0.5).values >= f.sel(delta=1e-3).values)
    for name in [store.run_name({"dt": dt, "delta": de}) for dt in (0.05, 0.1) for de in (1e-3, 0.5)]:
        cfg = load_config(solver_sweep / name / store.CONFIG_FILE)
        mine = npz(solver_sweep / name / store.RESULTS_FILE)["mean_inner_product"]
        np.testing.assert_array_equal(ds["mean_inner_product"].sel(dt=cfg.dt, delta=cfg.delta).values, mine)


# -- 4b. the states of every d ------------------------------------------------------------------------

DS = [3, 5]


@pytest.fixture(scope="module")
def several_d(json_run, tmp_path_factory):
    """The SMALL run with d = [3, 5] and its states kept, the same as a sweep over its β values, and
    the run with d = 5 alone (``json_run`` is the run with d = 3 alone)."""
    root = tmp_path_factory.mktemp("several_d")
    cfg, both, five, sweep = json_run["cfg"], root / "d35", root / "d5", root / "sweep"
    keep = ["--set", "d=[3,5]", "--set", "save_states=yes", "--no-plot", "--quiet"]
    for args in (
        ["run", cfg, *keep, "--out", both],
        ["run", cfg, "--set", "d=5", "--no-plot", "--quiet", "--out", five],
        ["sweep", cfg, "--grid", "beta=1,3", *keep, "--out", sweep],
    ):
        rc, _, err = cli(args)
        assert rc == 0, err
    return {"both": both, "alone": {3: json_run["out"], 5: five}, "sweep": sweep}


def test_every_d_keeps_its_states_on_its_own_sphere_equal_to_its_run_alone(several_d):
    data = npz(several_d["both"] / store.RESULTS_FILE)
    assert json.loads(data[store.DIMS_KEY].item())["xs"] == list(rundir.STATE_DIMS)
    assert data["xs"].shape == (len(DS), len(BETAS), SEEDS, N_SAVE, N, max(DS))
    # d = 3 fills its first 3 coordinates and NaN the other 2; d = 5 fills all 5
    assert np.isnan(data["xs"][0, ..., 3:]).all() and not np.isnan(data["xs"][0, ..., :3]).any()
    assert not np.isnan(data["xs"][1]).any()
    result, _ = results.load_result(several_d["both"])
    for k, d in enumerate(DS):
        xs = result.states(d)
        assert xs.shape == (len(BETAS), SEEDS, N_SAVE, N, d)
        assert np.max(np.abs(np.linalg.norm(xs, axis=-1) - 1.0)) < 1e-14
        # member s draws from seed + s whatever the other d's: the run with this d alone, to rounding
        alone, _ = results.load_result(several_d["alone"][d])
        np.testing.assert_allclose(xs, alone.states(), rtol=0, atol=1e-14)
        np.testing.assert_allclose(
            result.stats["mean_inner_product"][k], alone.stats["mean_inner_product"][0], rtol=0, atol=1e-14
        )
    np.testing.assert_allclose(result.states(3)[:, :, 0].reshape(-1, N, D), members_x0(), atol=1e-15)
    with pytest.raises(ValueError, match=r"several dimensions d = \[3, 5\]: name the one"):
        result.states()
    with pytest.raises(ValueError, match=r"d = 4 is not a dimension of this run; choose one of \[3, 5\]"):
        result.states(4)


def test_af_load_gives_each_d_on_its_own_sphere(several_d):
    ds = af.load(several_d["both"])
    assert ds["xs"].dims == rundir.STATE_DIMS
    assert ds["d"].values.tolist() == DS and ds.sizes["coord"] == max(DS)
    for d in DS:
        mine = ds["xs"].sel(d=d).isel(coord=slice(0, d))  # d's states without the padding
        assert mine.dims == ("beta", "seed", "time", "particle", "coord") and mine.sizes["coord"] == d
        alone = af.load(several_d["alone"][d])["xs"].sel(d=d)
        np.testing.assert_allclose(mine.values, alone.values, rtol=0, atol=1e-14)
        norms = np.sqrt((mine**2).sum("coord"))
        assert float(np.abs(norms - 1.0).max()) < 1e-14
        # xarray's reductions skip the NaN padding: the norm over every coordinate is the same
        np.testing.assert_allclose(np.sqrt((ds["xs"].sel(d=d) ** 2).sum("coord")), norms, rtol=0, atol=1e-15)
    assert bool(ds["xs"].sel(d=3).isel(coord=slice(3, None)).isnull().all())


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("error::FutureWarning")
def test_a_sweep_over_beta_keeps_every_d(several_d):
    whole, _ = results.load_result(several_d["both"])
    ds = af.load(several_d["sweep"])
    assert ds["xs"].dims == rundir.STATE_DIMS and ds["beta"].values.tolist() == BETAS
    for j, b in enumerate(BETAS):
        part, _ = results.load_result(several_d["sweep"] / store.run_name({"beta": b}))
        for d in DS:
            np.testing.assert_allclose(part.states(d), whole.states(d)[j : j + 1], rtol=0, atol=1e-14)
            np.testing.assert_allclose(
                ds["xs"].sel(d=d, beta=b).isel(coord=slice(0, d)), whole.states(d)[j], rtol=0, atol=1e-14
            )


def test_plot_draws_the_trajectories_of_every_d(several_d, tmp_path):
    run, sweep = tmp_path / "run", tmp_path / "sweep"
    shutil.copytree(several_d["both"], run)
    shutil.copytree(several_d["sweep"], sweep)
    rc, out, err = cli(["plot", run])
    assert rc == 0, err
    assert sorted(Path(p).name for p in out.splitlines()) == [
        "cluster_counts.png",
        "trajectories_d3.png",
        "trajectories_d5.png",
    ]
    rc, out, err = cli(["plot", sweep, "--kind", "trajectories_d5"])
    assert rc == 0, err
    assert sorted(out.splitlines()) == [str(sweep / store.run_name({"beta": b}) / "trajectories_d5.png") for b in BETAS]


def _as_written_before(run_dir: Path) -> None:
    """Rewrite a run's results.npz as attnflow wrote it before it kept every d's states: ``xs`` of the
    last d alone, on (beta, seed, time, particle, coord)."""
    data = npz(run_dir / store.RESULTS_FILE)
    dims = json.loads(data.pop(store.DIMS_KEY).item())
    data["xs"] = data["xs"][-1, ..., : int(data["d"][-1])]
    dims["xs"] = ["beta", "seed", "time", "particle", "coord"]
    np.savez(run_dir / store.RESULTS_FILE, **data, **{store.DIMS_KEY: np.array(json.dumps(dims))})


def test_runs_written_before_every_d_was_kept_load_and_plot(several_d, json_run, tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(json_run["out"], old)
    shutil.copytree(json_run["out"], new)
    _as_written_before(old)
    assert npz(old / store.RESULTS_FILE)["xs"].shape == (len(BETAS), SEEDS, N_SAVE, N, D)
    # read as one d
    ds = af.load(old)
    assert ds["xs"].dims == rundir.STATE_DIMS
    np.testing.assert_array_equal(ds["xs"].values, af.load(new)["xs"].values)
    np.testing.assert_array_equal(results.load_result(old)[0].states(D), results.load_result(new)[0].states(D))
    for run in (old, new):
        rc, _, err = cli(["plot", run, "--kind", "trajectories"])
        assert rc == 0, err
    assert (old / "trajectories.png").read_bytes() == (new / "trajectories.png").read_bytes()
    # several d: the last d's states alone were kept, the others read as NaN
    two = tmp_path / "two"
    shutil.copytree(several_d["both"], two)
    _as_written_before(two)
    ds = af.load(two)
    assert ds["xs"].dims == rundir.STATE_DIMS and ds.sizes["coord"] == 5
    assert bool(ds["xs"].sel(d=3).isnull().all())
    np.testing.assert_array_equal(ds["xs"].sel(d=5).values, af.load(several_d["both"])["xs"].sel(d=5).values)


@pytest.mark.slow
def test_a_sweep_with_failed_runs_reports_every_run_and_exits_1(tmp_path):
    """USA at β = 70 overflows float32 at once, SA does not: one run done, one failed, both reported."""
    cfg = write_small(tmp_path / "small.toml")
    out = tmp_path / "models"
    rc, stdout, err = cli(
        [
            "sweep",
            cfg,
            "--set",
            "beta=70",
            "--set",
            "dtype=float32",
            "--grid",
            "model=sa,usa",
            "--no-plot",
            "--quiet",
            "--out",
            out,
        ]
    )
    assert rc == 1
    assert len(err.splitlines()) == 1 and err.startswith("attnflow: error: 1 of 2 runs failed")
    lines = stdout.splitlines()
    assert lines[0] == f"simulate sweep: 2 runs in {out}/: 1 done, 1 failed"
    assert lines[2].split()[:2] == ["model=sa", "done"]
    assert lines[3].split()[:3] == ["model=usa", "failed", "NonFiniteError:"] and "β = 70" in lines[3]
    assert [r["status"] for r in store.read_manifest(out)["runs"]] == ["done", "failed"]


def test_a_linspace_grid_is_stored_as_a_user_writes_it(tmp_path):
    """--grid beta=0.1:0.3:3: the values 0.1, 0.2, 0.3 (numpy's third is 0.30000000000000004) in the
    run names, each run's config.toml and the manifest, read back equal."""
    axes, points = sweep.check_sweep(load_config(SMALL), ["beta=0.1:0.3:3"], tmp_path / "sw")
    assert axes == [("beta", [0.1, 0.2, 0.3])]
    assert [store.run_name(point) for point, _ in points] == ["beta=0.1", "beta=0.2", "beta=0.3"]
    text = to_toml(points[2][1])
    assert "beta = [\n    0.3,\n]" in text and "0000000" not in text
    assert load_config(text) == points[2][1]
    store.write_manifest(
        tmp_path / "sw", dict(axes), [{"name": store.run_name(p), "point": p, "status": "pending"} for p, _ in points]
    )
    manifest = (tmp_path / "sw" / store.MANIFEST_FILE).read_text()
    assert "0.30000000000000004" not in manifest and store.read_manifest(tmp_path / "sw")["axes"]["beta"][2] == 0.3


# -- 5. plot --------------------------------------------------------------------------------------------


def test_plot_redraws_figures_of_a_run(json_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(json_run["out"], run)
    assert not list(run.glob("*.png"))  # the run was made with --no-plot
    rc, out, err = cli(["plot", run])
    assert rc == 0, err
    written = [Path(line) for line in out.splitlines()]
    assert sorted(p.name for p in written) == ["cluster_counts.png", "trajectories.png"]
    first = {p.name: p.read_bytes() for p in written}
    assert all(b.startswith(b"\x89PNG\r\n\x1a\n") and len(b) > 10_000 for b in first.values())

    (run / "trajectories.png").unlink()
    kept = (run / "cluster_counts.png").stat().st_mtime_ns
    rc, out, err = cli(["plot", run, "--kind", "trajectories"])
    assert rc == 0, err
    assert out.splitlines() == [str(run / "trajectories.png")]
    assert (run / "trajectories.png").read_bytes() == first["trajectories.png"]  # drawn from the same data
    assert (run / "cluster_counts.png").stat().st_mtime_ns == kept
    assert not [p for p in run.iterdir() if p.name.startswith(".") and p.name != store.OWNED_FILE]
    assert {"cluster_counts.png", "trajectories.png"} <= store.owned_files(run)  # a later --overwrite may replace them
    (run / "trajectories.png").unlink()
    store.record_files(run, [])  # the list drops what is gone: a file of that name is the user's from now on
    (run / "trajectories.png").write_bytes(b"the user's own figure")
    rc, out, err = cli(["plot", run, "--kind", "trajectories"])
    assert rc == 2 and "was not written by attnflow" in err
    assert (run / "trajectories.png").read_bytes() == b"the user's own figure"


def test_plot_unknown_kind_lists_the_valid_ones(json_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(json_run["out"], run)
    before = tree(tmp_path)
    rc, out, err = cli(["plot", run, "--kind", "phase_diagram"])
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("attnflow: error:")
    assert "'phase_diagram'" in err and "trajectories" in err and "cluster_counts" in err
    assert tree(tmp_path) == before


def test_plot_a_sweep_redraws_every_run(beta_sweep, tmp_path):
    out = tmp_path / "betas"
    shutil.copytree(beta_sweep["out"], out)
    rc, stdout, err = cli(["plot", out, "--kind", "cluster_counts"])
    assert rc == 0, err
    assert sorted(stdout.splitlines()) == sorted(str(out / f"beta={b!r}" / "cluster_counts.png") for b in (0.5, 2.0))
    assert all((out / f"beta={b!r}" / "cluster_counts.png").read_bytes()[:4] == b"\x89PNG" for b in (0.5, 2.0))


# -- 6. validate ------------------------------------------------------------------------------------


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    "everything",
    [
        # by default two of the checks: the experiments' own checks run in test_experiments.py, the
        # energy's in test_theory.py and Wendel's in test_equiangular_ode.py
        False,
        pytest.param(True, marks=pytest.mark.slow),
    ],
)
def test_validate_quick_passes_every_check(capsys, monkeypatch, everything):
    if not everything:
        monkeypatch.setattr(
            validate, "CHECKS", [(label, fn) for label, fn in validate.CHECKS if label in ("tanh", "equiangular USA")]
        )
        assert len(validate.CHECKS) == 2
    rc = main(["validate", "--quick"])
    out, err = capsys.readouterr()
    assert rc == 0, out
    lines = out.rstrip("\n").splitlines()
    assert re.fullmatch(r"check\s+expected\s+measured\s+pass", lines[0]), lines[0]
    assert re.fullmatch(r"-+( {2}-+){3}", lines[1]), lines[1]
    final = re.match(r"(\d+) passed, 0 failed\b", lines[-1])
    assert final, lines[-1]
    rows = lines[2 : lines.index("")]
    assert len(rows) == int(final.group(1)) >= len(validate.CHECKS)
    assert all(row.rstrip().endswith("  yes") for row in rows)
    # the pass column lines up under its header
    col = lines[0].index("pass")
    assert all(row[col:].strip() == "yes" for row in rows)
    for label, _ in validate.CHECKS:
        assert f"validate: {label} …" in err


def test_validate_table_format():
    checks = [Check("tanh", "≤ 1e-8", "1.7e-10", True), Check("a longer check name", "x", "y", False)]
    assert validate.table(checks) == (
        "check                expected  measured  pass\n"
        "-------------------  --------  --------  ----\n"
        "tanh                 ≤ 1e-8    1.7e-10   yes\n"
        "a longer check name  x         y         NO"
    )
    assert validate.table([]) == "check  expected  measured  pass\n-----  --------  --------  ----"


def _unit(v):
    v = np.asarray(v, dtype=float)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_in_open_hemisphere_on_constructed_configurations():
    rng = np.random.default_rng(1)
    # points in a cap of angular radius < π/2 around the north pole: in a hemisphere
    cap = _unit(rng.normal(size=(50, 6, 3)) * [0.3, 0.3, 0.0] + [0.0, 0.0, 1.0])
    assert np.all(validate._in_open_hemisphere(cap))
    # a regular pentagon on the circle and a regular simplex in R^3 surround the origin: not in one
    theta = 2 * np.pi * np.arange(5) / 5
    pentagon = np.stack([np.cos(theta), np.sin(theta)], axis=-1)[None]
    assert not validate._in_open_hemisphere(pentagon)[0]
    simplex = _unit([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]])[None]
    assert not validate._in_open_hemisphere(simplex)[0]
    # five points spread over less than a half circle are in one
    half = np.stack([np.cos(theta / 2.2), np.sin(theta / 2.2)], axis=-1)[None]
    assert validate._in_open_hemisphere(half)[0]
    # the Monte-Carlo estimate agrees with Wendel's formula on a small sample
    x = _unit(rng.normal(size=(4000, 5, 2)))
    p = af.particles.wendel_probability(5, 2)
    assert abs(np.mean(validate._in_open_hemisphere(x)) - p) < 4 * np.sqrt(p * (1 - p) / 4000)


def test_in_open_hemisphere_antipodal_pair_is_not_in_an_open_hemisphere():
    pair = np.array([[[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]])
    assert not validate._in_open_hemisphere(pair)[0]
    with_others = np.array([[[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]])
    assert not validate._in_open_hemisphere(with_others)[0]


# -- 7. list, --version, the installed entry point ------------------------------------------------------


def test_list_prints_every_builtin_experiment_and_simulate():
    rc, out, _ = cli(["list"])
    assert rc == 0
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [*builtin.EXPERIMENTS, "simulate"]
    for line, e in zip(lines, builtin.EXPERIMENTS.values()):
        assert e.description in line and e.reference in line
    assert "a configuration of your own" in lines[-1] and "--set KEY=VALUE" in lines[-1]


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_closed_stdout_ends_quietly_with_status_141():
    """``attnflow list --keys | head``: the reader goes away; no traceback, the status of a SIGPIPE (128 + 13)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnflow.experiments.commands.cli", "list", "--keys"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # before the first write: every write fails with EPIPE
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 141
    assert err == b""


def test_list_keys_prints_every_config_key():
    rc, out, _ = cli(["list", "--keys"])
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["key", "type", "default", "description"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    names = [line.split()[0] for line in lines[2:]]
    assert names == list(KEYS)
    for line, key in zip(lines[2:], KEYS.values()):
        assert line.split()[1] == key.type and key.doc in line


def test_version_in_process():
    rc, out, _ = cli(["--version"])
    assert rc == 0
    assert out.strip() == f"attnflow {af.__version__}"


def test_installed_entry_point_version_and_help():
    exe = Path(sys.executable).with_name("attnflow")
    if not exe.exists():
        exe = shutil.which("attnflow")
    if exe is None:
        pytest.skip("the attnflow console script is not installed")
    version = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0
    assert version.stdout.strip() == f"attnflow {af.__version__}"
    help_ = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert help_.returncode == 0
    for command in ("list", "run", "sweep", "plot", "validate"):
        assert re.search(rf"^\s+{command}\s", help_.stdout, re.M), command
