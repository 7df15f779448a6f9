"""Same configuration, same numbers: a run does not depend on how its members are cut into compiled calls.

A noisy member draws its Brownian path from its own seed (``fields.brownian_keys``), never from its position
in a call, so a noisy run is bitwise the same whatever its chunking (``memory_gb``, the CPU cache sizes,
progress on or off), merged with other β or not, resumed or not. An adaptive ensemble runs the loop chosen for
the whole ensemble in every call (``simulate(ensemble=...)``), so showing progress never changes the integrator.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnflow.experiments.config import load_config
from attnflow.experiments.run import plan, runner
from tests.cli_helpers import cli

NOISY = ["n=6", "d=3", "beta=1,4", "seeds=3", "t1=1.5", "n_save=4", "solver=rk4", "dt=0.1", "noise=0.4"]
"""A small noisy run: 2 β × 3 seeds, whose six members fit one call unless cut."""


def noisy(*extra):
    return load_config(None, [*NOISY, "progress=false", *extra])


def assert_same_run(a: runner.RunResult, b: runner.RunResult) -> None:
    assert a.stats.keys() == b.stats.keys()
    for k in a.stats:
        np.testing.assert_array_equal(a.stats[k], b.stats[k], err_msg=k)
    np.testing.assert_array_equal(a.steps, b.steps)
    assert (a.xs is None) == (b.xs is None)
    if a.xs is not None:
        np.testing.assert_array_equal(a.xs, b.xs)


def calls(monkeypatch) -> list[int]:
    """The members of each compiled call the runner makes from now on."""
    seen: list[int] = []
    real = runner.simulate

    def spy(field, x0, *args, **kwargs):
        seen.append(x0.shape[0])
        return real(field, x0, *args, **kwargs)

    monkeypatch.setattr(runner, "simulate", spy)
    return seen


def test_a_noisy_run_is_bitwise_the_same_for_every_chunking(monkeypatch):
    config = noisy()
    seen = calls(monkeypatch)
    whole = runner.run(config, progress=False)
    assert seen == [6]
    seen.clear()
    assert_same_run(whole, runner.run(config, progress=True))  # progress reported between bounded calls
    assert seen == [6]  # progress never changes the calls
    seen.clear()
    monkeypatch.setattr(plan, "CPU_STATE_BYTES", 4 * 8 * 6 * 3)  # at most four members per call: two of three
    assert_same_run(whole, runner.run(config, progress=True))
    assert seen == [3, 3]


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_noisy_member_is_its_seed_whatever_else_the_run_holds():
    # the member labelled seed s is the run --set seed=s --set seeds=1, noise included, and a β's members are
    # the same alone or beside other β (a sweep merges grid points that differ in β into one run)
    whole = runner.run(noisy())
    alone = runner.run(noisy("seed=2", "seeds=1", "beta=4"))
    for k in whole.stats:
        np.testing.assert_array_equal(whole.stats[k][:, 1:, 2:], alone.stats[k], err_msg=k)
    assert whole.xs is not None and alone.xs is not None
    np.testing.assert_array_equal(whole.xs[:, 1:, 2:], alone.xs)
    # distinct seeds draw distinct paths (their initial conditions differ too: compare their increments' effect)
    assert not np.array_equal(whole.xs[0, 0, 0, -1], whole.xs[0, 0, 1, -1])


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_noisy_run_through_the_command_line_is_the_same_with_progress_on_and_off(tmp_path):
    sets = [a for kv in NOISY for a in ("--set", kv)]
    summaries = []
    for i, extra in enumerate([["--quiet"], ["--set", "progress=true"], ["--set", "memory_gb=0.0000002"]]):
        rc, out, err = cli(["run", "simulate", *sets, *extra, "--json", "--no-plot", "--out", tmp_path / f"r{i}"])
        assert rc == 0, err
        summaries.append(json.loads(out))
    for key in ("mean_inner_product", "min_inner_product", "clustered_fraction", "energy", "n_clusters"):
        assert summaries[1][key] == summaries[0][key] == summaries[2][key], key


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_resumed_noisy_sweep_equals_an_uninterrupted_one(tmp_path):
    sets = [a for kv in NOISY if not kv.startswith("beta") for a in ("--set", kv)]
    grid = ["--grid", "beta=1,2,4"]
    whole = tmp_path / "whole"
    rc, _, err = cli(["sweep", "simulate", *sets, *grid, "--quiet", "--no-plot", "--out", whole])
    assert rc == 0, err
    # an interrupted sweep: one point done alone (its own run), then the rest merged in one task on --resume
    part = tmp_path / "part"
    rc, _, err = cli(["sweep", "simulate", *sets, "--grid", "beta=2", "--quiet", "--no-plot", "--out", part])
    assert rc == 0, err
    manifest = json.loads((part / "manifest.json").read_text())
    rc, _, err = cli(["sweep", "simulate", *sets, *grid, "--resume", "--quiet", "--no-plot", "--out", part])
    assert rc == 0 and "1 of 3 runs already complete" in err, err
    assert manifest["runs"][0]["name"] in {r["name"] for r in json.loads((part / "manifest.json").read_text())["runs"]}
    for name in ("beta=1.0", "beta=2.0", "beta=4.0"):
        a = np.load(whole / name / "results.npz")
        b = np.load(part / name / "results.npz")
        for k in a.files:
            if k != "__dims__" and k != "wall_time_s":
                np.testing.assert_array_equal(a[k], b[k], err_msg=f"{name}: {k}")


@pytest.mark.slow
def test_showing_progress_never_changes_the_adaptive_loop():
    # 66 members (> 64): the queue when quiet; with progress the run is cut into 4 calls of 17, which ran
    # diffrax's vmapped solve before the loop was chosen for the whole ensemble
    config = load_config(None, ["n=6", "d=3", "beta=1,8", "seeds=33", "t1=3", "n_save=4", "solver=tsit5"])
    quiet = runner.run(config, progress=False)
    loud = runner.run(config, progress=True)
    np.testing.assert_array_equal(loud.steps, quiet.steps)
    for k in quiet.stats:  # the same algorithm: equal to rounding (the calls' batch sizes differ)
        np.testing.assert_allclose(loud.stats[k], quiet.stats[k], rtol=0, atol=1e-11, err_msg=k)
