"""Crash safety of the results store: killed and interrupted sweeps, full disks, unwritable
places, and reproducible runs.

Sweeps run as real ``attnflow`` processes, killed with SIGKILL at seeded random moments and
resumed; every run must end up present exactly once, complete and loadable.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.commands.cli import main
from attnflow.experiments.results import store
from attnflow.experiments.run import runner

TINY = """\
model = "sa"
n = 5
d = 3
beta = [1.0]
seeds = 1
t1 = 1.0
n_save = 4
solver = "rk4"
dt = 0.1
"""
GRID = ["--grid", "seed=0:7:8", "--grid", "beta=1,2"]  # 16 runs in 8 compiled groups (one per seed)
N_RUNS = 16


def _sweep_cmd(cfg: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "attnflow.experiments.commands.cli",
        "sweep",
        str(cfg),
        *GRID,
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def _env(tmp: Path) -> dict:
    env = dict(os.environ, MPLBACKEND="Agg", ATTNFLOW_CACHE_DIR=str(tmp / "cache"))
    env.pop("XLA_FLAGS", None)
    return env


def _done(out: Path) -> int:
    try:
        return sum(r["status"] == "done" for r in store.read_manifest(out)["runs"])
    except (store.StoreError, OSError):
        return 0


def _entries(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir())


def _assert_consistent(out: Path, *, complete: bool) -> None:
    """Every run the manifest calls done is a complete directory; nothing else but pending runs' absence."""
    manifest = store.read_manifest(out)
    names = [r["name"] for r in manifest["runs"]]
    assert len(names) == N_RUNS and len(set(names)) == N_RUNS
    done = {r["name"] for r in manifest["runs"] if r["status"] == "done"}
    on_disk = {n for n in _entries(out) if not n.startswith(".") and n != store.MANIFEST_FILE}
    assert done <= on_disk and all(store.is_complete(out / n) for n in on_disk)
    if complete:
        assert done == on_disk == set(names)
        assert _entries(out) == sorted(names + [store.MANIFEST_FILE])  # no temporaries left
        ds = af.load(out)
        assert ds.sizes["seed"] == 8 and ds.sizes["beta"] == 2
        assert np.all(np.isfinite(ds["mean_inner_product"].values))


@pytest.mark.slow  # a stress test of random kills; the default suite keeps the clean stop (SIGINT) below
def test_sigkill_at_random_moments_then_resume_leaves_every_run_once(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY, encoding="utf-8")
    out = tmp_path / "sweep"
    env = _env(tmp_path)
    rng = np.random.default_rng(2312)
    kills = 0
    for attempt, target in enumerate((2, 7, 12)):
        extra = ["--resume"] if attempt else []
        proc = subprocess.Popen(
            _sweep_cmd(cfg, out, *extra), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 120
        while _done(out) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(float(rng.uniform(0.0, 0.4)))  # somewhere inside the next runs' writing
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        _assert_consistent(out, complete=False)
    assert kills >= 2
    rc = subprocess.run(_sweep_cmd(cfg, out, "--resume"), env=env, capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0, rc.stderr
    _assert_consistent(out, complete=True)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_sigint_stops_cleanly_with_a_consistent_manifest(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY, encoding="utf-8")
    out = tmp_path / "sweep"
    env = _env(tmp_path)
    proc = subprocess.Popen(_sweep_cmd(cfg, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while _done(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err and "interrupted" in err
    _assert_consistent(out, complete=False)
    assert not [n for n in _entries(out) if n.startswith(".")], err  # Ctrl-C removes its temporaries itself
    assert 3 <= _done(out) < N_RUNS, err
    rc = subprocess.run(_sweep_cmd(cfg, out, "--resume"), env=env, capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0, rc.stderr
    _assert_consistent(out, complete=True)


@pytest.mark.slow  # eight interrupted sweeps, ~5 s each; the clean stop above is the default suite's
def test_sigint_at_random_moments_ends_with_130_and_never_a_crash(tmp_path):
    """Ctrl-C at seeded random moments of a sweep: during compilation (XLA compiles on a thread of its own, which
    the interpreter's teardown once pulled the client from under: a segmentation fault after "interrupted"),
    between runs, while a run is written. Always exit status 130, "interrupted", a consistent manifest."""
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY, encoding="utf-8")
    rng = np.random.default_rng(130)
    statuses = []
    for attempt in range(8):
        out = tmp_path / f"sweep{attempt}"
        env = dict(_env(tmp_path), ATTNFLOW_CACHE_DIR=str(tmp_path / f"cache{attempt}"))  # compiling, each time
        proc = subprocess.Popen(
            _sweep_cmd(cfg, out), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 120
        while not (out / store.MANIFEST_FILE).is_file() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # past the imports: the sweep has started
        time.sleep(float(rng.uniform(0.5, 3.0)))  # the first compilation runs about 1.5 … 2.5 s after this
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        statuses.append(proc.returncode)
        assert proc.returncode in (0, 130), err  # 0: it had finished; never a signal's death (negative)
        if proc.returncode == 130:
            assert err.rstrip().endswith("attnflow: interrupted") and "Traceback" not in err, err
        _assert_consistent(out, complete=proc.returncode == 0)
    assert statuses.count(130) >= 5, statuses


# -- full disk, unwritable places ---------------------------------------------------------------


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def tiny(tmp_path) -> Path:
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY, encoding="utf-8")
    return cfg


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("victim", ["_write_npz", "_write_file"])
def test_a_full_disk_during_a_run_leaves_nothing_behind(tiny, tmp_path, monkeypatch, capsys, victim):
    monkeypatch.setattr(store, victim, _disk_full)
    out = tmp_path / "deep" / "run"
    rc = main(["run", str(tiny), "--out", str(out), "--quiet", "--no-plot"])
    err = _one_line(capsys.readouterr().err)
    assert rc == 1 and "No space left on device" in err and str(out) in err  # the machine's failure, not bad input
    assert not (tmp_path / "deep").exists()  # neither the run nor the parent it would have created


def test_a_full_disk_during_a_sweep_keeps_the_finished_runs(tiny, tmp_path, monkeypatch, capsys):
    real, calls = store._write_npz, []

    def fail_on_the_third(path, arrays):
        calls.append(path)
        if len(calls) >= 3:
            _disk_full()
        real(path, arrays)

    monkeypatch.setattr(store, "_write_npz", fail_on_the_third)
    out = tmp_path / "sweep"
    rc = main(["sweep", str(tiny), *GRID, "--out", str(out), "--quiet", "--no-plot"])
    err = _one_line(capsys.readouterr().err)
    assert rc == 1 and "No space left on device" in err
    manifest = store.read_manifest(out)
    assert [r["status"] for r in manifest["runs"]].count("done") == 2
    assert _entries(out) == sorted(
        [r["name"] for r in manifest["runs"] if r["status"] == "done"] + [store.MANIFEST_FILE]
    )


_FILE_SIZE_LIMIT = """\
import contextlib, io, json, resource, signal, sys
from attnflow.experiments.commands.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
answers = []
for argv in json.loads(sys.argv[2]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    answers.append([rc, err.getvalue()])
print(json.dumps(answers))
"""


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_file_size_limit_while_writing_is_exit_1_and_leaves_directories_as_they_were(tmp_path):
    """Writes that fail with EFBIG (RLIMIT_FSIZE below a figure's size, as a full disk fails them): `attnflow plot`
    of a run and `attnflow hist` into a new directory each end with status 1 and one line naming the path and
    the OS error; the run keeps its files byte for byte, no temporary is left, nothing new appears."""
    rng = np.random.default_rng(0)
    states = rng.normal(size=(4, 12, 3))
    np.savez(tmp_path / "states.npz", x=states)
    run = tmp_path / "hist-run"
    assert main(["hist", str(tmp_path / "states.npz"), "--out", str(run), "--quiet"]) == 0
    figures = sorted(p.name for p in run.glob("*.png"))
    assert figures and min((run / f).stat().st_size for f in figures) > 8192
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir()}
    commands = [["plot", str(run)], ["hist", str(tmp_path / "states.npz"), "--out", str(tmp_path / "new"), "--quiet"]]
    proc = subprocess.run(
        [sys.executable, "-c", _FILE_SIZE_LIMIT, "4096", json.dumps(commands)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (plot_rc, plot_err), (hist_rc, hist_err) = json.loads(proc.stdout)
    assert plot_rc == 1 and hist_rc == 1, (plot_err, hist_err)
    line = _one_line(plot_err)
    assert line.startswith(f"attnflow: error: cannot write {run}/") and line.endswith(": File too large"), line
    line = _one_line(hist_err)
    assert line == f"attnflow: error: cannot write run {tmp_path / 'new'}: File too large", line
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hist-run", "states.npz"]  # no temporaries


@pytest.mark.parametrize("where", ["/proc/attnflow-out", "/sys/attnflow-out"])
def test_an_unwritable_output_place_is_refused_before_running(tiny, capsys, where, monkeypatch):
    ran = []
    monkeypatch.setattr(runner, "run", lambda config, **kwargs: ran.append(config))
    rc = main(["run", str(tiny), "--out", where, "--quiet", "--no-plot"])
    err = _one_line(capsys.readouterr().err)
    assert rc == 2 and "cannot write to" in err and not ran
    assert not os.path.exists(where)


def test_an_output_path_below_a_file_is_refused(tiny, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    rc = main(["sweep", str(tiny), *GRID, "--out", str(tmp_path / "file" / "sweep"), "--quiet", "--no-plot"])
    err = _one_line(capsys.readouterr().err)
    assert rc == 2 and "is a file" in err
    assert (tmp_path / "file").read_text() == "x"


def test_stale_temporaries_of_dead_processes_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    stale_dir = tmp_path / f".beta=1.0.tmp-{pid}-0123abcd"
    stale_file = tmp_path / f".manifest.json.tmp-{pid}-89abcdef"
    live = tmp_path / f".beta=2.0.tmp-{os.getpid()}-00000000"
    foreign = tmp_path / ".beta=3.0.tmp-notapid"
    for d in (stale_dir, live, foreign):
        d.mkdir()
    for d in (stale_dir, live):  # attnflow's marker, naming the directory
        (d / store.TEMPORARY_MARKER).write_text(f"attnflow-temporary {d.name}\n")
    (stale_dir / "results.npz").write_bytes(b"partial")
    stale_file.write_text('{\n  "format": "attnflow-sweep",\n  "ver')  # a manifest cut short by the kill
    unmarked = tmp_path / f".beta=4.0.tmp-{pid}-0123abcd"  # a dead process's name, but no marker: not attnflow's
    unmarked.mkdir()
    removed = store.remove_stale_temporaries(tmp_path)
    assert sorted(removed) == sorted([stale_dir, stale_file])
    assert live.is_dir() and foreign.is_dir() and unmarked.is_dir()


# -- reproducibility --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra", [[], ["--set", "solver=tsit5"], ["--set", "noise=0.3"]], ids=["rk4", "tsit5", "noisy"]
)
def test_the_same_config_and_seeds_give_identical_results(tiny, tmp_path, capsys, extra):
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert main(["run", str(tiny), *extra, "--out", str(out), "--quiet", "--no-plot"]) == 0
    capsys.readouterr()
    a, b = (json.loads((o / store.SUMMARY_FILE).read_text()) for o in outs)
    for timing in ("wall_time_s", "compilations"):  # how long it took, and what this process had compiled already
        a.pop(timing), b.pop(timing)
    assert a == b
    with np.load(outs[0] / store.RESULTS_FILE) as xa, np.load(outs[1] / store.RESULTS_FILE) as xb:
        for k in xa.files:
            np.testing.assert_array_equal(xa[k], xb[k], err_msg=k)


# -- non-finite values ------------------------------------------------------------------------------


def test_a_run_that_becomes_non_finite_keeps_what_came_before(tiny, tmp_path, capsys):
    """USA in [GLPR]'s time at β = 70 overflows float32 within the first steps: exit status 1, one line
    naming the member, the time and the cause, and the statistics before the failure on disk."""
    out = tmp_path / "run"
    rc = main(
        [
            "run",
            str(tiny),
            "--set",
            "model=usa",
            "--set",
            "beta=[1.0, 70.0]",
            "--set",
            "dtype=float32",
            "--set",
            "t1=2.0",
            "--set",
            "n_save=5",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    err = _one_line(capsys.readouterr().err)
    assert rc == 1
    assert "β = 70" in err and "seed = 0" in err and "became non-finite after t = " in err
    assert "float32" in err and "dtype=float64" in err and str(out) in err
    summary = json.loads((out / store.SUMMARY_FILE).read_text())
    assert summary["error"] in err
    ds = af.load(out)
    mean = ds["mean_inner_product"].sel(beta=1.0).values  # the β = 1 member is complete
    assert np.all(np.isfinite(mean))
    bad = ds["mean_inner_product"].sel(beta=70.0).values
    assert np.isfinite(bad[..., 0]).all() and np.isnan(bad[..., -1]).all()  # finite at t = 0, then gone
    assert not list(out.glob("*.png"))
