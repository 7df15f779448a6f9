"""Sweeps on Dask: a real LocalCluster of 2 worker processes on loopback.

The Dask executor must give the local executor's results, write every run exactly once from the
client, survive a worker killed mid-sweep, and refuse bad flags before a cluster starts.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from attnflow.experiments.commands.cli import main
from attnflow.experiments.config import load_config
from attnflow.experiments.results import store
from attnflow.experiments.sweep import executors
from attnflow.experiments.sweep import schedule as sweep

distributed = pytest.importorskip("distributed")

SMALL = """\
model = "sa"
n = 6
d = 3
beta = [1.0]
seeds = 2
t1 = 2.0
n_save = 5
solver = "rk4"
dt = 0.05
progress = false
"""
GRID = ["beta=0.5,1,2,4", "seed=0,1,2"]  # 12 runs: 3 shapes (seed), 4 β each


def config(tmp: Path):
    path = tmp / "small.toml"
    path.write_text(SMALL, encoding="utf-8")
    return load_config(path)


@pytest.fixture(scope="module")
def dask_executor():
    with executors.make_executor("dask", workers=2) as ex:
        yield ex


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    out = root / "sweep"
    runs = sweep.run_sweep(config(root), None, GRID, out, plot=False)
    return out, runs


def _run_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name != store.MANIFEST_FILE)


def _comparable(summary: dict) -> dict:
    summary = dict(summary)
    summary.pop("wall_time_s")
    summary.pop("compilations")  # what the process that ran it had compiled already
    return summary


def _assert_same_sweep(a: Path, b: Path) -> None:
    ma, mb = store.read_manifest(a), store.read_manifest(b)
    assert ma == mb
    assert all(r["status"] == "done" for r in ma["runs"])
    for r in ma["runs"]:
        sa = json.loads((a / r["name"] / store.SUMMARY_FILE).read_text())
        sb = json.loads((b / r["name"] / store.SUMMARY_FILE).read_text())
        assert _comparable(sa) == _comparable(sb), r["name"]
        with np.load(a / r["name"] / store.RESULTS_FILE) as xa, np.load(b / r["name"] / store.RESULTS_FILE) as xb:
            assert sorted(xa.files) == sorted(xb.files)
            for k in xa.files:
                np.testing.assert_array_equal(xa[k], xb[k], err_msg=f"{r['name']}: {k}")


def test_the_cluster_has_two_spawned_worker_processes(dask_executor):
    pids = dask_executor.worker_pids()
    assert len(pids) == 2 and os.getpid() not in pids.values()
    assert len(set(pids.values())) == 2
    # workers start as fresh interpreters (spawn), so JAX is never forked into them
    import dask

    assert dask.config.get("distributed.worker.multiprocessing-method") == "spawn"
    parents = dask_executor.client.run(lambda: __import__("multiprocessing").parent_process() is not None)
    assert all(parents.values())
    env = dask_executor.client.run(lambda: os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))
    assert set(env.values()) == {"false"}


@pytest.mark.slow
def test_dask_sweep_equals_the_local_sweep(dask_executor, local_sweep, tmp_path):
    out = tmp_path / "sweep"
    tasks_before = len(sweep.tasks_of(sweep.check_sweep(config(tmp_path), GRID, out)[1], list(range(12)), 4))
    assert tasks_before == 12  # 3 shapes × up to 4 parts: both workers get work
    runs = sweep.run_sweep(config(tmp_path), None, GRID, out, plot=False, executor=dask_executor)
    assert len(runs) == 12
    _assert_same_sweep(local_sweep[0], out)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_worker_killed_mid_sweep_loses_no_run(dask_executor, local_sweep, tmp_path):
    """Kill a busy worker after the first result: Dask reruns its task, the client writes each run once."""
    killed = []

    class Killing:
        name, workers, address = "dask", dask_executor.workers, dask_executor.address

        def run(self, tasks):
            for i, item in enumerate(dask_executor.run(tasks)):
                if i == 0:
                    processing = dask_executor.client.processing()
                    busy = [w for w, keys in processing.items() if keys] or list(processing)
                    pid = dask_executor.worker_pids()[busy[0]]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                yield item

    out = tmp_path / "sweep"
    executor = Killing()
    runs = sweep.run_sweep(config(tmp_path), None, GRID, out, plot=False, executor=executor)
    assert killed
    assert killed[0] not in dask_executor.worker_pids().values()  # the nanny started a new worker
    assert [r["status"] for r in runs] == ["done"] * 12
    names = [r["name"] for r in store.read_manifest(out)["runs"]]
    assert _run_dirs(out) == sorted(names) and len(set(names)) == 12  # each run once, no temporaries
    assert all(store.is_complete(out / n) for n in names)
    _assert_same_sweep(local_sweep[0], out)
    ds = store.load(out)
    assert ds.sizes["beta"] == 4 and ds.sizes["seed"] >= 3


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_cli_dask_sweep_with_a_local_cluster(tmp_path, capsys):
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL, encoding="utf-8")
    out = tmp_path / "sweep"
    rc = main(
        [
            "sweep",
            str(cfg),
            "--grid",
            "beta=1,2",
            "--executor",
            "dask",
            "--workers",
            "2",
            "--no-plot",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert [r["status"] for r in store.read_manifest(out)["runs"]] == ["done", "done"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--workers", "2"], "--workers needs --executor dask"),
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler needs --executor dask"),
        (["--executor", "dask", "--workers", "0"], "expected a positive integer"),
        (["--executor", "dask", "--scheduler", "tcp://127.0.0.1:9", "--workers", "2"], "with a scheduler address"),
        (["--executor", "dask", "--grid", "n=0"], "grid n"),
    ],
)
def test_bad_executor_flags_are_refused_before_anything_runs(tmp_path, capsys, argv, message):
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL, encoding="utf-8")
    out = tmp_path / "sweep"
    rc = main(["sweep", str(cfg), "--grid", "beta=1,2", "--no-plot", "--out", str(out), *argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not out.exists()


def test_unreachable_scheduler_is_one_clear_error(tmp_path, capsys):
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL, encoding="utf-8")
    out = tmp_path / "sweep"
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler"):
        executors.DaskExecutor("tcp://127.0.0.1:9", timeout=1.0)
    assert not out.exists()


@pytest.mark.parametrize(
    "address, message",
    [
        ("notaurl", r"'notaurl' is not a Dask scheduler address: give SCHEME://HOST:PORT with SCHEME one of tcp, tls"),
        ("10.0.0.5:8786", r"not a Dask scheduler address"),
        ("tcp://10.0.0.5", r"not a Dask scheduler address"),
        ("http://10.0.0.5:8786", r"unknown scheme 'http'; Dask's are tcp, tls, ws, wss, ucx"),
        ("tcp://10.0.0.5:0", r"port 0 is not in 1 … 65535"),
        ("tcp://host name:8786", r"not a Dask scheduler address"),
    ],
)
def test_a_scheduler_address_is_checked_before_any_connection(address, message):
    """A malformed address is one ValueError at once: no Client is made (one that is hangs its cleanup for a minute)."""
    start = time.perf_counter()
    with pytest.raises(ValueError, match=message):
        executors.DaskExecutor(address)
    assert time.perf_counter() - start < 2


def test_scheduler_addresses_dask_accepts_pass():
    for address in ("tcp://10.0.0.5:8786", "tls://scheduler.example.org:8786", "ws://[::1]:8786", "ucx://node-3:13337"):
        assert executors.check_scheduler_address(address) == address


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("betas", [20, pytest.param(100, marks=pytest.mark.slow)])
def test_many_runs_on_two_workers_all_load(dask_executor, tmp_path, betas):
    """betas × 10 seeds small runs (200, or 1000 with -m slow) on the 2-worker cluster; af.load returns every one."""
    import attnflow as af

    cfg = config(tmp_path).replace(n=4, seeds=1, t1=1.0, n_save=3, dt=0.1)
    out = tmp_path / "sweep"
    runs = sweep.run_sweep(cfg, None, [f"beta=0.1:5:{betas}", "seed=0:9:10"], out, plot=False, executor=dask_executor)
    assert len(runs) == 10 * betas and all(r["status"] == "done" for r in runs)
    assert len(_run_dirs(out)) == 10 * betas
    ds = af.load(out)
    assert ds.sizes["beta"] == betas and ds.sizes["seed"] == 10
    np.testing.assert_allclose(ds["beta"].values, np.linspace(0.1, 5, betas))
    # every run is there and complete: the statistic is finite at every point and time, and at
    # t = 0 it equals the one of the run's own initial condition (the same for all β of a seed)
    frac = ds["mean_inner_product"].values
    assert np.all(np.isfinite(frac))
    first = frac[..., 0]
    np.testing.assert_allclose(first, np.broadcast_to(first[..., :1, :], first.shape), rtol=1e-12)
