"""Hostile and mistaken input: one table of bad inputs over the command line, TOML configs and the Python API.

Every command-line and TOML case must be answered by exit status 2 and exactly one line on stderr
naming the problem (and the valid choices where there is a finite set), with nothing on stdout, no
traceback, and nothing written: the working directory's tree (paths, sizes, modification times) is
the same before and after. Every Python case must raise a ValueError whose message names the
problem. Configs and results are data only: files holding pickles are refused, and the sentinel
that unpickling them would create never appears.

Nothing here simulates: every refusal happens before the first step.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import SMALL, cli, tree

import attnflow as af
from attnflow.experiments import builtin
from attnflow.experiments.config import MAX_GRID_POINTS, ConfigError, expand_grid, load_config, parse_grid, to_toml
from attnflow.experiments.results import store
from attnflow.experiments.run import memory, plan, runner
from attnflow.experiments.sweep import executors
from attnflow.particles import LayerWise

SENTINEL = "UNPICKLED"  # created in the working directory if anything ever unpickles our files


SOLVER_CHOICES = "'euler', 'renormalized_euler', 'rk4', 'lie_euler', 'cg3', 'lie_trotter', 'ab4', 'tsit5', 'dopri5', 'dopri8', 'kvaerno5'"
INIT_CHOICES = "'uniform', 'orthogonal', 'equiangular', 'cap', 'clusters', 'file', 'angles'"
MODEL_CHOICES = "'sa', 'usa', 'usa-rescaled', 'sinkhorn', 'hardmax'"


class Evil:
    """Unpickling this creates the sentinel file: proof that a pickle was (wrongly) loaded."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


# -- the working directory: configs and hostile files ---------------------------------------------


def _evil_npz(path: Path, sentinel: Path, name: str) -> None:
    arr = np.empty((2, 3, 3), dtype=object)
    arr.fill(Evil(str(sentinel)))
    np.savez(path, **{name: arr})


def _lying_npy(shape) -> bytes:
    """A .npy whose header claims ``shape`` (far more data than follows it)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    buf.write(np.ones(18).tobytes())
    return buf.getvalue()


def _fake_run(
    root: Path,
    name: str,
    *,
    config: str = SMALL,
    summary: str = '{"times": [0.0, 1.0]}',
    results: bytes | None = None,
    sentinel: Path | None = None,
) -> Path:
    """A directory that looks like a complete run: its files as given, or results.npz holding a pickled
    object array that would create ``sentinel`` if it were ever unpickled."""
    run = root / name
    run.mkdir()
    (run / "config.toml").write_text(config, encoding="utf-8")
    (run / "summary.json").write_text(summary, encoding="utf-8")
    if results is not None:
        (run / "results.npz").write_bytes(results)
    else:
        arr = np.empty((1, 2, 2, 2), dtype=object)
        arr.fill(Evil(str(sentinel)))
        np.savez(
            run / "results.npz", steps=np.zeros((1, 2, 2)), t_clustered=np.zeros((1, 2, 2)), mean_inner_product=arr
        )
    return run


def _stored_run(path: Path, config) -> Path:
    """A run directory as attnflow writes it for ``config`` (made-up numbers: nothing here simulates)."""
    times = [0.0, config.t1]
    return store.write_run(
        path,
        to_toml(config),
        {"times": times},
        {
            "steps": np.ones((1, len(config.beta), config.seeds)),
            "t_clustered": np.full((1, len(config.beta), config.seeds), np.nan),
        },
    )


def _stored_sweep(path: Path, config, axis: str, values) -> Path:
    """A complete sweep of ``config`` over one axis, as ``attnflow sweep`` leaves it."""
    points = expand_grid(config, [(axis, list(values))])
    runs = []
    for point, cfg in points:
        _stored_run(path / store.run_name(point), cfg)
        runs.append({"name": store.run_name(point), "point": point, "status": "done"})
    store.write_manifest(path, {axis: list(values)}, runs)
    return path


def _corrupt_compressed(run: Path) -> None:
    """Damage the deflate stream of an array inside results.npz (its zip directory stays intact)."""
    path = run / store.RESULTS_FILE
    data = bytearray(path.read_bytes())
    info = zipfile.ZipFile(path).getinfo("steps.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 3
    data[start : start + 3] = bytes(b ^ 0x5A for b in data[start : start + 3])
    path.write_bytes(bytes(data))


@pytest.fixture
def workdir(small_workdir):
    """The working directory of ``small_workdir``, holding good and bad configs, hostile arrays and obstacles."""
    tmp_path = small_workdir
    sentinel = tmp_path / SENTINEL
    (tmp_path / "afile").write_text("not a directory\n", encoding="utf-8")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine\n", encoding="utf-8")
    (tmp_path / "dir.toml").mkdir()
    good = np.asarray(af.init.uniform(0, 6, 3))
    np.save(tmp_path / "good.npy", good)
    objects = np.empty((6, 3), dtype=object)
    objects.fill(Evil(str(sentinel)))
    np.save(tmp_path / "evil.npy", objects, allow_pickle=True)
    (tmp_path / "rawpickle.npy").write_bytes(pickle.dumps(Evil(str(sentinel))))
    (tmp_path / "garbage.npy").write_bytes(b"\x00\x01 definitely not an array \xff" * 8)
    np.save(tmp_path / "complex.npy", good.astype(complex))
    np.save(tmp_path / "strings.npy", np.full((6, 3), "x"))
    np.save(tmp_path / "wrongshape.npy", good[:4])
    np.save(tmp_path / "flat.npy", good.reshape(-1))
    np.save(tmp_path / "nan.npy", np.full((6, 3), np.nan))
    np.save(tmp_path / "batch3.npy", np.stack([good] * 3))
    np.savetxt(tmp_path / "x.txt", good)
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "lying.npy").write_bytes(_lying_npy((10**12, 3)))
    (tmp_path / "folder.npy").mkdir()
    np.savez(tmp_path / "archive.npz", x=good)
    os.replace(tmp_path / "archive.npz", tmp_path / "archive.npy")
    with zipfile.ZipFile(tmp_path / "lying_weights.npz", "w") as zf:
        zf.writestr("Q.npy", _lying_npy((10**12, 3, 3)))
    _evil_npz(tmp_path / "evil_weights.npz", sentinel, "Q")
    states = np.stack([good, good[::-1], good])  # token states (layers, tokens, d) for attnflow hist
    np.savez(tmp_path / "states.npz", x=states)
    np.savez(tmp_path / "states_two.npz", a=states, b=states)
    np.savez(tmp_path / "states_int.npz", x=(10 * states).astype(np.int64))
    np.savez(tmp_path / "states_nan.npz", x=np.where(np.arange(3)[:, None, None] == 2, np.nan, states))
    np.savez(tmp_path / "states_zero.npz", x=states * (np.arange(6) != 4)[:, None])
    _fake_run(tmp_path, "evilrun", sentinel=sentinel)
    buf = io.BytesIO()
    np.savez(buf, steps=np.zeros((1, 2, 2)), t_clustered=np.zeros((1, 2, 2)))
    _fake_run(tmp_path, "cutrun", results=buf.getvalue()[: len(buf.getvalue()) // 2])
    _fake_run(tmp_path, "badconfrun", config="n = = 6\n", results=buf.getvalue())
    _fake_run(tmp_path, "notimesrun", summary="[1, 2]", results=buf.getvalue())
    (tmp_path / "badsweep").mkdir()
    (tmp_path / "badsweep" / "manifest.json").write_text("{not json", encoding="utf-8")
    small_config = load_config(SMALL)
    _stored_run(tmp_path / "donerun", small_config)
    (tmp_path / "donerun" / "notes.txt").write_text("mine\n", encoding="utf-8")
    _stored_sweep(tmp_path / "donesweep", small_config, "beta", [1.0, 3.0])
    fig5 = builtin.EXPERIMENTS["fig5-random-matrices"]
    fig5_config = load_config({**fig5.defaults, **fig5.quick, "n": 5})
    axis, values = next(iter(fig5.grid.items()))
    _stored_sweep(tmp_path / "fig5sweep", fig5_config, axis, values)
    _stored_run(tmp_path / "zlibrun", small_config)
    _corrupt_compressed(tmp_path / "zlibrun")
    # a directory of the user's own that looks like a run: the three files, no record of attnflow's
    (_stored_run(tmp_path / "userrun", small_config) / store.OWNED_FILE).unlink()
    _stored_sweep(tmp_path / "usersweep", small_config, "beta", [1.0, 3.0])
    (tmp_path / "usersweep" / store.run_name({"beta": 3.0}) / store.OWNED_FILE).unlink()
    (tmp_path / "emptydir").mkdir()
    os.mkfifo(tmp_path / "pipe.toml")  # what a shell's <(...) hands over, and what nobody may ever write to
    os.symlink("/dev/null", tmp_path / "device.toml")
    os.symlink("nowhere.toml", tmp_path / "broken.toml")
    os.symlink("emptydir", tmp_path / "linkdir")
    (tmp_path / "escsweep").mkdir()
    (tmp_path / "escsweep" / "manifest.json").write_text(
        json.dumps(
            {
                "format": "attnflow-sweep",
                "version": 1,
                "axes": {"beta": [1.0]},
                "runs": [{"name": "../../etc", "point": {"beta": 1.0}, "status": "done"}],
            }
        ),
        encoding="utf-8",
    )
    return tmp_path


# -- the table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cli:
    """A command line (OUT stands for a fresh output directory) and the fragments its one line must hold."""

    argv: tuple
    fragments: tuple


@dataclass(frozen=True)
class Toml:
    """A config file's text (str, or bytes for undecodable files), given to ``attnflow run``."""

    text: str | bytes
    fragments: tuple


@dataclass(frozen=True)
class Api:
    """A Python call on the working directory and a pattern its ValueError's message must match."""

    call: Callable[[Path], object]
    pattern: str
    error: type = ValueError


def run(*args):
    return ("run", *args, "--out", "OUT")


def fig4(*sets):
    return run("fig4-circle", "--quick", *(a for s in sets for a in ("--set", s)))


def own(name, *sets):
    """``attnflow run NAME --quick`` with --set overrides."""
    return run(name, "--quick", *(a for s in sets for a in ("--set", s)))


def small(*sets):
    return run("small.toml", *(a for s in sets for a in ("--set", s)))


def sweep(*args):
    return ("sweep", "small.toml", *args, "--out", "OUT")


def hist(path, *args):
    return ("hist", path, *args, "--out", "OUT")


def fit_states(p: Path, **kw):
    """``af.fit`` on the working directory's token states (3 layers × 6 tokens in R³), with ``kw``."""
    return af.fit(np.load(p / "states.npz")["x"], **kw)


LONG_NAME = "n" * 300  # longer than any file system's name limit (ENAMETOOLONG)


def hist_sim(*args):
    return hist("states.npz", "--simulate-from", "0", "--beta", "1", *args)


def _finite_or_raise(field):
    """The field's velocity on a small configuration, raising ValueError("finite ...") when it is finite: a
    table row that holds when a slope the dtype holds gives a finite field (no NaN from ∞ − ∞)."""
    for dtype in ("float64", "float32"):
        v = np.asarray(field(0.0, af.init.uniform(0, 10, 2, dtype=dtype)))
        if not np.all(np.isfinite(v)):
            raise AssertionError(f"non-finite velocity in {dtype}: {v}")
    raise ValueError("finite in float64 and float32")


def X0():
    """A tiny valid configuration for the API cases."""
    return af.init.uniform(0, 4, 3)


def _sim(**kw):
    kw.setdefault("field", af.SA(1.0))
    kw.setdefault("x0", X0())
    kw.setdefault("t1", 1.0)
    field, x0, t1 = kw.pop("field"), kw.pop("x0"), kw.pop("t1")
    return af.simulate(field, x0, t1, **kw)


CASES = {
    # ---- command line: subcommands, flags, experiment names -------------------------------------
    "cli/unknown-subcommand": Cli(("frobnicate",), ("invalid choice: 'frobnicate'", "'list'", "'run'", "'sweep'")),
    "cli/unknown-flag": Cli(run("fig4-circle", "--bogus"), ("unrecognized arguments: --bogus",)),
    "cli/list-extra-argument": Cli(("list", "fig4-circle", "extra"), ("unrecognized arguments: extra",)),
    "cli/list-unknown-experiment": Cli(
        ("list", "fig4-circel"), ("unknown experiment 'fig4-circel'", "did you mean 'fig4-circle'")
    ),
    "cli/validate-unknown-flag": Cli(("validate", "--fast"), ("--fast",)),
    "cli/run-without-target": Cli(("run",), ("NAME|FILE.toml", "required")),
    "cli/unknown-experiment": Cli(
        run("fig4-circel"), ("unknown experiment 'fig4-circel'", "did you mean 'fig4-circle'", "fig3-phase-diagram")
    ),
    "cli/unknown-experiment-sweep": Cli(
        ("sweep", "nonesuch", "--grid", "beta=1,2", "--out", "OUT"), ("unknown experiment 'nonesuch'", "staircase")
    ),
    "cli/empty-experiment-name": Cli(run(""), ("unknown experiment ''",)),
    "cli/missing-config-file": Cli(run("missing.toml"), ("'missing.toml'", "does not exist")),
    "cli/config-is-a-directory": Cli(run("dir.toml"), ("'dir.toml'", "is a directory")),
    "cli/config-is-a-pipe": Cli(
        run("pipe.toml"),
        ("config file 'pipe.toml' is a named pipe (FIFO)", "not a regular file", "save the configuration"),
    ),
    "cli/config-links-to-a-device": Cli(run("device.toml"), ("'device.toml' is a character device",)),
    "cli/config-broken-link": Cli(run("broken.toml"), ("'broken.toml' is a broken symbolic link", "'nowhere.toml'")),
    "cli/config-process-substitution": Cli(run("/dev/fd/0"), ("'/dev/fd/0'", "not a regular file")),
    "cli/simulate-is-a-target": Cli(run("simulate", "--set", "bta=1"), ("unknown key 'bta'", "did you mean 'beta'")),
    "cli/simulate-misspelt": Cli(
        run("simulat"),
        ("unknown experiment 'simulat'", "did you mean 'simulate'", "a configuration of your own", "--set KEY=VALUE"),
    ),
    "cli/sweep-simulate-is-a-target": Cli(
        ("sweep", "simulate", "--grid", "bta=1,2", "--out", "OUT"), ("unknown key 'bta'",)
    ),
    # ---- --set: keys, types, values ---------------------------------------------------------------
    "set/unknown-key": Cli(fig4("bta=1"), ("unknown key 'bta'", "did you mean 'beta'")),
    "set/unknown-key-huge": Cli(fig4("k" * 5000 + "=1"), ("unknown key 'kkkkk", "…'", "valid keys:")),
    "set/unknown-key-no-near-match": Cli(fig4("zzzzzz=1"), ("unknown key 'zzzzzz'", "valid keys:", "beta")),
    "set/no-equals": Cli(fig4("beta"), ("--set expects key=value", "'beta'")),
    "set/empty-key": Cli(fig4("=3"), ("--set expects key=value", "key is empty")),
    "set/n-text": Cli(fig4("n=abc"), ("n must be an integer ≥ 1", "'abc'")),
    "set/n-quoted-number": Cli(fig4('n="32"'), ("n must be an integer ≥ 1", "'32' (a string)")),
    "set/n-negative": Cli(fig4("n=-5"), ("n must be an integer ≥ 1, got -5",)),
    "set/n-zero": Cli(fig4("n=0"), ("n must be an integer ≥ 1, got 0",)),
    "set/n-nan": Cli(fig4("n=nan"), ("n must be an integer ≥ 1, got nan",)),
    "set/n-inf": Cli(fig4("n=inf"), ("n must be an integer ≥ 1, got inf",)),
    "set/n-fraction": Cli(fig4("n=3.5"), ("n must be an integer ≥ 1, got 3.5",)),
    "set/d-one": Cli(fig4("d=1"), ("d must be an integer", "≥ 2", "got 1")),
    "set/d-negative-in-list": Cli(fig4("d=[2, -8]"), ("d[1] must be an integer ≥ 2, got -8",)),
    "set/d-inf": Cli(fig4("d=inf"), ("d must be an integer", "got inf")),
    "set/beta-negative": Cli(
        fig4("beta=-1"), ("experiment 'fig4-circle'", "theory of beta ≥ 0", "got beta = -1", "negative-beta")
    ),
    "set/beta-nan": Cli(fig4("beta=nan"), ("beta must be a finite number", "got nan")),
    "set/beta-inf": Cli(fig4("beta=inf"), ("beta must be a finite number", "got inf")),
    "set/beta-minus-inf-in-list": Cli(fig4("beta=[1.0, -inf]"), ("beta[1]", "got -inf")),
    "set/beta-text": Cli(fig4("beta=hot"), ("beta must be", "'hot'")),
    "set/beta-empty-list": Cli(fig4("beta=[]"), ("beta must be", "empty list")),
    "set/beta-linspace-zero-points": Cli(fig4("beta=1:9:0"), ("beta", "'1:9:0'", "a:b:n", "n ≥ 1")),
    "set/beta-linspace-huge": Cli(
        fig4("beta=0:1:10000000000"), ("beta", "'0:1:10000000000'", f"at most {MAX_GRID_POINTS}")
    ),
    "set/t1-negative": Cli(fig4("t1=-1"), ("t1 must be a finite number > 0, got -1",)),
    "set/t1-zero": Cli(fig4("t1=0"), ("t1 must be a finite number > 0, got 0",)),
    "set/t1-nan": Cli(fig4("t1=nan"), ("t1 must be a finite number > 0, got nan",)),
    "set/t1-list": Cli(fig4("t1=[1, 2]"), ("t1 must be a finite number", "[1, 2]")),
    "set/dt-negative": Cli(fig4("dt=-0.1"), ("dt must be a finite number ≥ 0, got -0.1",)),
    "set/dt-nan": Cli(fig4("dt=nan"), ("dt must be a finite number", "got nan")),
    "set/dt-inf": Cli(fig4("dt=inf"), ("dt must be a finite number", "got inf")),
    "set/dt-zero-fixed-step": Cli(fig4("solver=rk4", "dt=0"), ("dt must be > 0", "'rk4'")),
    "set/delta-zero": Cli(fig4("delta=0"), ("delta must be a finite number > 0 and ≤ 2, got 0",)),
    "set/delta-negative": Cli(fig4("delta=-0.1"), ("delta must be a finite number > 0", "got -0.1")),
    "set/delta-nan": Cli(fig4("delta=nan"), ("delta must be a finite number", "got nan")),
    "set/delta-too-large": Cli(fig4("delta=3"), ("delta must be a finite number > 0 and ≤ 2, got 3",)),
    "set/seeds-fraction": Cli(fig4("seeds=2.5"), ("seeds must be an integer ≥ 1, got 2.5",)),
    "set/seeds-zero": Cli(fig4("seeds=0"), ("seeds must be an integer ≥ 1, got 0",)),
    "set/seed-negative": Cli(fig4("seed=-1"), ("seed must be an integer ≥ 0, got -1",)),
    "set/unknown-solver": Cli(
        fig4("solver=rk5"), ("solver must be one of", SOLVER_CHOICES, "'rk5'", "did you mean 'rk4'")
    ),
    "set/unknown-init": Cli(fig4("init=gaussian"), ("init must be one of", INIT_CHOICES, "'gaussian'")),
    "set/unknown-model": Cli(fig4("model=gpt"), ("model must be one of", MODEL_CHOICES, "'gpt'")),
    "set/unknown-dtype": Cli(fig4("dtype=float16"), ("dtype must be one of 'float32', 'float64'", "'float16'")),
    "set/bool-not-bool": Cli(fig4("progress=maybe"), ("progress must be true or false", "'maybe'")),
    "set/n-save-one": Cli(fig4("n_save=1"), ("n_save must be an integer ≥ 2, got 1",)),
    "set/save-times-decreasing": Cli(fig4("save_times=[2.0, 1.0]"), ("save_times must be strictly increasing",)),
    "set/save-times-beyond-t1": Cli(fig4("save_times=[0.0, 100.0]"), ("save_times must lie within [0, t1",)),
    "set/init-file-without-path": Cli(fig4("init=file"), ("init = 'file' needs init_file",)),
    "set/heads-not-dividing-d": Cli(fig4("heads=3"), ("heads must divide d", "heads = 3", "d = 2")),
    "set/noise-with-adaptive-solver": Cli(fig4("noise=0.5"), ("noise > 0", "solver", "'tsit5'")),
    "set/grid-experiment-own-axis": Cli(
        run("fig5-random-matrices", "--quick", "--set", "weights=ginibre"),
        ("fig5-random-matrices sweeps weights itself",),
    ),
    # ---- output paths -----------------------------------------------------------------------------
    "out/is-a-file": Cli(("run", "small.toml", "--out", "afile"), ("--out", "afile", "is a file")),
    "out/under-a-file": Cli(("run", "small.toml", "--out", "afile/sub"), ("afile", "is a file")),
    "out/foreign-directory": Cli(("run", "small.toml", "--out", "foreign"), ("foreign", "not an attnflow run")),
    "out/nul-character": Cli(("run", "small.toml", "--out", "a\0b"), ("--out", "NUL")),
    "out/control-character": Cli(("run", "small.toml", "--out", "a\nb"), ("--out", "control characters")),
    "out/hidden-name": Cli(("run", "small.toml", "--out", ".hidden"), ("--out", "'.hidden'")),
    "out/sweep-into-a-file": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,2", "--out", "afile"), ("--out", "afile", "is a file")
    ),
    "out/run-empty": Cli(("run", "small.toml", "--out", ""), ("--out '' is empty", "runs/small")),
    "out/sweep-empty": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,2", "--out", ""), ("--out '' is empty", "sweeps/small")
    ),
    "out/hist-empty": Cli(("hist", "states.npz", "--out", ""), ("--out '' is empty", "runs/hist-states")),
    "out/fit-empty": Cli(("fit", "states.npz", "--out", ""), ("--out '' is empty", "runs/fit-states")),
    "out/blank": Cli(("run", "small.toml", "--out", "  "), ("--out '  ' is empty",)),
    "out/name-too-long": Cli(
        ("run", "small.toml", "--out", LONG_NAME),
        ("--out 'nnnn", "has 300 bytes", "this file system allows", "shorter"),
    ),
    "out/name-too-long-below": Cli(("run", "small.toml", "--out", f"{LONG_NAME}/run"), ("has 300 bytes",)),
    "out/sweep-name-too-long": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,2", "--out", LONG_NAME), ("has 300 bytes",)
    ),
    "out/hist-name-too-long": Cli(("hist", "states.npz", "--out", LONG_NAME), ("has 300 bytes",)),
    "out/fit-name-too-long": Cli(("fit", "states.npz", "--out", LONG_NAME), ("has 300 bytes",)),
    "plot/name-too-long": Cli(("plot", LONG_NAME), ("nnnn", "File name too long")),
    "out/users-own-run-overwrite": Cli(
        ("run", "small.toml", "--out", "userrun", "--overwrite"),
        (
            "--out 'userrun' holds 'config.toml', which attnflow did not write",
            ".attnflow.json",
            "never replaces",
            "move it away",
        ),
    ),
    "out/users-own-run": Cli(
        ("run", "small.toml", "--out", "userrun"), ("holds 'config.toml', which attnflow did not write",)
    ),
    "out/hist-into-users-own-run": Cli(
        ("hist", "states.npz", "--out", "userrun", "--overwrite"),
        ("holds 'config.toml', which attnflow did not write",),
    ),
    "out/sweep-over-users-own-run": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,3", "--out", "usersweep", "--overwrite"),
        ("beta=3.0", "holds 'config.toml'", "which attnflow did not write", "move it away"),
    ),
    "out/sweep-into-foreign-directory": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,2", "--out", "foreign", "--resume"),
        ("foreign", "not an attnflow sweep"),
    ),
    # ---- existing results: never replaced without --overwrite, never reused for another configuration ----
    "out/existing-run": Cli(
        ("run", "small.toml", "--out", "donerun"),
        (
            "--out 'donerun' already holds an attnflow run",
            "--overwrite",
            "files attnflow did not write are kept",
            "another --out",
        ),
    ),
    "out/existing-run-other-config": Cli(
        ("run", "fig4-circle", "--quick", "--out", "donerun"),
        ("'donerun' already holds an attnflow run", "--overwrite"),
    ),
    "out/hist-into-existing-run": Cli(
        ("hist", "states.npz", "--out", "donerun"), ("'donerun' already holds an attnflow run", "--overwrite")
    ),
    "out/hist-simulation-into-existing-run": Cli(
        ("hist", "states.npz", "--simulate-from", "0", "--beta", "1", "--out", "donerun"),
        ("already holds an attnflow run",),
    ),
    "out/run-into-a-sweep": Cli(
        ("run", "small.toml", "--out", "donesweep", "--overwrite"), ("donesweep", "not an attnflow run")
    ),
    "out/symbolic-link": Cli(
        ("run", "small.toml", "--out", "linkdir"),
        ("--out 'linkdir' is a symbolic link", "'emptydir'", "real directories"),
    ),
    "out/symbolic-link-overwrite": Cli(("run", "small.toml", "--out", "linkdir", "--overwrite"), ("symbolic link",)),
    "out/hist-symbolic-link": Cli(("hist", "states.npz", "--out", "linkdir"), ("symbolic link",)),
    "out/sweep-symbolic-link": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,3", "--out", "linkdir"), ("--out 'linkdir' is a symbolic link",)
    ),
    "out/sweep-existing-without-resume": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,3", "--out", "donesweep"),
        ("'donesweep' already holds a sweep", "--resume", "--overwrite"),
    ),
    "out/sweep-resume-other-n": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,3", "--set", "n=16", "--out", "donesweep", "--resume"),
        (
            "cannot resume the sweep in 'donesweep': 2 of the 2 complete runs",
            "another configuration",
            "differing keys: n",
            "n: stored 6, requested 16",
            "--overwrite",
        ),
    ),
    "out/sweep-resume-other-solver": Cli(
        (
            "sweep",
            "small.toml",
            "--grid",
            "beta=1,2,3",
            "--set",
            "solver=rk4",
            "--set",
            "dt=0.01",
            "--out",
            "donesweep",
            "--resume",
        ),
        ("2 of the 2 complete runs", "differing keys: dt", "stored 0.05, requested 0.01"),
    ),
    "out/sweep-resume-other-file": Cli(
        (
            "sweep",
            "small.toml",
            "--grid",
            "beta=1,3",
            "--set",
            "init=file",
            "--set",
            "init_file=good.npy",
            "--set",
            "seeds=1",
            "--out",
            "donesweep",
            "--resume",
        ),
        ("differing keys: init, init_file, seeds",),
    ),
    "out/sweep-resume-and-overwrite": Cli(
        ("sweep", "small.toml", "--grid", "beta=1,3", "--out", "donesweep", "--resume", "--overwrite"),
        ("--resume", "--overwrite", "give one"),
    ),
    "out/grid-experiment-rerun-other-config": Cli(
        ("run", "fig5-random-matrices", "--quick", "--out", "fig5sweep"),
        ("cannot resume the sweep in 'fig5sweep'", "differing keys: n", "stored 5, requested", "--overwrite"),
    ),
    # ---- step counts and seeds: refused before anything runs, never zero steps or a wrapped seed -----
    "steps/dt-tiny": Cli(small("dt=1e-12"), ("solver 'rk4'", "needs at least 2e+12 steps", "max_steps = 1000000")),
    "steps/t1-huge": Cli(small("t1=1e300"), ("dt = 0.05", "below the resolution of float64", "t = 1e+300")),
    "steps/dt-vanishing": Cli(small("dt=1e-300"), ("dt = 1e-300", "below the resolution of float64")),
    "steps/ab4-grid": Cli(small("solver=ab4", "dt=1e-9"), ("solver 'ab4'", "needs 2e+09 steps", "max_steps")),
    "steps/float32-resolution": Cli(
        small("dtype=float32", "dt=1e-8", "max_steps=1000000000"), ("below the resolution of float32", "float64")
    ),
    "steps/save-times": Cli(
        small("solver=tsit5", "n_save=100000000", "seeds=1", "beta=1", "statistics=clustered", "save_states=no"),
        ("n_save = 100000000", "max_steps"),
    ),
    "steps/sweep-point": Cli(sweep("--grid", "dt=0.05,1e-12"), ("dt = 1e-12", "max_steps")),
    "steps/max-steps-zero": Cli(small("max_steps=0"), ("max_steps must be an integer ≥ 1, got 0",)),
    "set/seed-beyond-int64": Cli(
        small("seed=18446744073709551615"), ("seed = 18446744073709551615", "seeds = 2", "[0, 9223372036854775806]")
    ),
    "set/seed-wraps": Cli(small("seed=9223372036854775807"), ("seed = 9223372036854775807", "seeds = 2")),
    # ---- grids --------------------------------------------------------------------------------------
    "grid/missing": Cli(sweep(), ("--grid",)),
    "grid/empty": Cli(sweep("--grid", "beta="), ("--grid beta", "the grid is empty")),
    "grid/empty-list": Cli(sweep("--grid", "beta=[]"), ("grid beta is empty",)),
    "grid/too-many-points": Cli(
        sweep("--grid", "beta=0:1:1000", "--grid", "seed=0:999:1000"),
        ("grid has 1000000 points", f"at most {MAX_GRID_POINTS}"),
    ),
    "grid/huge-linspace": Cli(sweep("--grid", "beta=0:1:10000000000"), ("--grid beta", f"at most {MAX_GRID_POINTS}")),
    "grid/unknown-key": Cli(sweep("--grid", "bta=1,2"), ("unknown key 'bta'", "did you mean 'beta'")),
    "grid/repeated-value": Cli(sweep("--grid", "beta=1,1"), ("grid beta repeats the value 1.0",)),
    "grid/axis-twice": Cli(sweep("--grid", "beta=1,2", "--grid", "beta=3,4"), ("'beta'", "more than once")),
    "grid/unknown-solver-value": Cli(sweep("--grid", "solver=rk4,rk5"), ("grid solver, value 1", SOLVER_CHOICES)),
    "grid/invalid-point": Cli(sweep("--grid", "dt=0.1,0"), ("grid point dt=0.0", "dt must be > 0")),
    # ---- files given to a run: initial conditions and weights, never unpickled ------------------------
    "file/init-pickled-object-array": Cli(
        small("init=file", "init_file=evil.npy"), ("init_file", "evil.npy", "pickle")
    ),
    "file/init-raw-pickle": Cli(small("init=file", "init_file=rawpickle.npy"), ("init_file", "rawpickle.npy")),
    "file/init-garbage": Cli(small("init=file", "init_file=garbage.npy"), ("init_file", "garbage.npy")),
    "file/init-complex": Cli(small("init=file", "init_file=complex.npy"), ("init_file", "complex.npy", "complex128")),
    "file/init-strings": Cli(small("init=file", "init_file=strings.npy"), ("init_file", "strings.npy", "<U1")),
    "file/init-wrong-n": Cli(
        small("init=file", "init_file=wrongshape.npy"), ("init_file", "wrongshape.npy", "(4, 3)", "n = 6")
    ),
    "file/init-one-dimensional": Cli(small("init=file", "init_file=flat.npy"), ("init_file", "flat.npy", "(18,)")),
    "file/init-nan": Cli(small("init=file", "init_file=nan.npy"), ("init_file", "nan.npy", "non-finite")),
    "file/init-wrong-batch": Cli(
        small("init=file", "init_file=batch3.npy"), ("init_file", "batch3.npy", "3 configurations", "seeds = 2")
    ),
    "file/init-not-npy": Cli(small("init=file", "init_file=x.txt"), ("init_file", "x.txt", ".npy")),
    "file/init-missing": Cli(
        small("init=file", "init_file=nowhere.npy"), ("init_file", "nowhere.npy", "does not exist")
    ),
    "file/init-empty": Cli(small("init=file", "init_file=empty.npy"), ("init_file", "empty.npy")),
    "file/init-header-lies-about-size": Cli(small("init=file", "init_file=lying.npy"), ("init_file", "lying.npy")),
    "file/init-directory": Cli(small("init=file", "init_file=folder.npy"), ("init_file", "folder.npy", "not a file")),
    "file/init-npz-in-disguise": Cli(
        small("init=file", "init_file=archive.npy"), ("init_file", "archive.npy", ".npz archive")
    ),
    "file/weights-header-lies-about-size": Cli(
        small("weights_file=lying_weights.npz", "layer_tau=1"), ("weights_file", "lying_weights.npz", "corrupt")
    ),
    "file/init-pickle-in-sweep": Cli(
        sweep("--set", "init=file", "--set", "init_file=evil.npy", "--grid", "beta=1,2"), ("init_file", "evil.npy")
    ),
    "file/weights-pickled": Cli(
        small("weights_file=evil_weights.npz", "layer_tau=1"), ("weights_file", "evil_weights.npz")
    ),
    "file/weights-missing": Cli(small("weights_file=nowhere.npz", "layer_tau=1"), ("weights_file", "nowhere.npz")),
    "file/weights-not-npz": Cli(small("weights_file=good.npy", "layer_tau=1"), ("weights_file", "good.npy")),
    # ---- plot: run and sweep directories are data --------------------------------------------------
    "plot/missing-directory": Cli(("plot", "nowhere"), ("'nowhere'", "not a run or sweep directory")),
    "plot/a-file": Cli(("plot", "afile"), ("afile", "not a run or sweep directory")),
    "plot/pickled-results": Cli(("plot", "evilrun"), ("evilrun", "results.npz")),
    "plot/truncated-results": Cli(("plot", "cutrun"), ("cutrun/results.npz", "corrupt")),
    "plot/corrupt-compressed-arrays": Cli(("plot", "zlibrun"), ("zlibrun/results.npz", "corrupt")),
    "plot/malformed-config": Cli(("plot", "badconfrun"), ("badconfrun/config.toml", "line 1")),
    "plot/summary-without-times": Cli(("plot", "notimesrun"), ("notimesrun/summary.json", "must hold a JSON object")),
    "plot/malformed-manifest": Cli(("plot", "badsweep"), ("badsweep", "manifest.json")),
    "plot/manifest-escaping-the-sweep": Cli(("plot", "escsweep"), ("escsweep", "'../../etc'")),
    # ---- hist: token states from a user's model, never unpickled -------------------------------------
    "hist/missing-file": Cli(hist("nowhere.npz"), ("states file 'nowhere.npz'", "does not exist")),
    "hist/directory": Cli(hist("folder.npy"), ("folder.npy", "is a directory")),
    "hist/pickled-npz": Cli(hist("evil_weights.npz"), ("evil_weights.npz", "pickled", "never loaded")),
    "hist/pickled-npy": Cli(hist("evil.npy"), ("evil.npy", "pickled")),
    "hist/raw-pickle": Cli(hist("rawpickle.npy"), ("rawpickle.npy", "pickle", "never loaded")),
    "hist/garbage": Cli(hist("garbage.npy"), ("garbage.npy", "neither an .npz archive nor an .npy array")),
    "hist/empty-file": Cli(hist("empty.npy"), ("empty.npy", "it is empty")),
    "hist/text-file": Cli(hist("x.txt"), ("x.txt", "neither an .npz archive nor an .npy array")),
    "hist/header-lies-npz": Cli(hist("lying_weights.npz"), ("lying_weights.npz", "corrupt", "header claims")),
    "hist/header-lies-npy": Cli(hist("lying.npy"), ("lying.npy", "not a plain numeric .npy array")),
    "hist/complex": Cli(hist("complex.npy"), ("complex.npy", "complex128", "floating-point")),
    "hist/integers": Cli(hist("states_int.npz"), ("states_int.npz", "int64", "floating-point")),
    "hist/strings": Cli(hist("strings.npy"), ("strings.npy", "<U1")),
    "hist/two-dimensional": Cli(hist("good.npy"), ("good.npy", "(6, 3)", "(layers, tokens, d)")),
    "hist/nan": Cli(hist("states_nan.npz"), ("states_nan.npz", "non-finite", "layer 2, token 0")),
    "hist/zero-token": Cli(hist("states_zero.npz"), ("states_zero.npz", "layer 0, token 4", "zero vector")),
    "hist/several-arrays": Cli(hist("states_two.npz"), ("2 arrays (a, b)", "--key")),
    "hist/unknown-key": Cli(hist("states_two.npz", "--key", "c"), ("no array 'c'", "a, b")),
    "hist/key-on-npy": Cli(hist("batch3.npy", "--key", "x"), ("--key", ".npy")),
    "hist/layers-out-of-range": Cli(
        hist("states.npz", "--layers", "0,5"), ("--layers", "layer 5 is out of range", "3 layers")
    ),
    "hist/layers-not-numbers": Cli(hist("states.npz", "--layers", "first"), ("--layers", "'first'")),
    "hist/bins-zero": Cli(hist("states.npz", "--bins", "0"), ("--bins", "positive integer")),
    "hist/bins-huge": Cli(hist("states.npz", "--bins", "10000000000"), ("--bins", "at most")),
    "hist/simulate-from-out-of-range": Cli(
        hist("states.npz", "--simulate-from", "3", "--beta", "1"), ("--simulate-from 3", "out of range")
    ),
    "hist/simulate-from-last-layer": Cli(
        hist("states.npz", "--simulate-from", "2", "--beta", "1"), ("--simulate-from 2", "no layer after it")
    ),
    "hist/simulate-without-beta": Cli(hist("states.npz", "--simulate-from", "0"), ("--simulate-from needs --beta",)),
    "hist/beta-without-simulate": Cli(hist("states.npz", "--beta", "1"), ("--beta", "--simulate-from")),
    "hist/beta-infinite": Cli(hist("states.npz", "--simulate-from", "0", "--beta", "1,-inf"), ("--beta", "-inf")),
    "hist/layer-time-nan": Cli(hist_sim("--layer-time", "nan"), ("--layer-time", "'nan'")),
    "hist/set-fixed-key": Cli(hist_sim("--set", "n=5"), ("--set n=5", "from the states")),
    "hist/set-unknown-key": Cli(hist_sim("--set", "solvr=rk4"), ("unknown key 'solvr'", "did you mean 'solver'")),
    "hist/set-rk4-without-dt": Cli(hist_sim("--set", "solver=rk4"), ("dt must be > 0", "'rk4'")),
    "hist/out-is-a-file": Cli(("hist", "states.npz", "--out", "afile"), ("--out", "afile", "is a file")),
    "hist/out-foreign-directory": Cli(("hist", "states.npz", "--out", "foreign"), ("foreign", "not an attnflow run")),
    "hist/named-pipe": Cli(
        hist("pipe.toml"), ("states file 'pipe.toml' is a named pipe (FIFO)", "not a regular file", ".npz or .npy file")
    ),
    "hist/device": Cli(hist("device.toml"), ("states file 'device.toml' is a character device",)),
    "hist/broken-link": Cli(hist("broken.toml"), ("states file 'broken.toml' is a broken symbolic link",)),
    "hist/name-too-long": Cli(hist(LONG_NAME + ".npz"), ("states file 'nnnn", "File name too long")),
    # ---- fit: optimizer settings ----------------------------------------------------------------------
    "fit/lbfgs-steps-negative": Cli(
        ("fit", "states.npz", "--lbfgs-steps", "-3", "--out", "OUT"), ("--lbfgs-steps", "an integer ≥ 0", "'-3'")
    ),
    "fit/steps-negative": Cli(("fit", "states.npz", "--steps", "-1", "--out", "OUT"), ("--steps", "'-1'")),
    "fit/seed-negative": Cli(("fit", "states.npz", "--seed", "-1", "--out", "OUT"), ("--seed", "an integer ≥ 0")),
    "fit/complex-states": Cli(("fit", "complex.npy", "--out", "OUT"), ("complex.npy", "complex128")),
    # ---- Dask ----------------------------------------------------------------------------------------
    "dask/scheduler-not-a-url": Cli(
        sweep("--grid", "beta=1,2", "--executor", "dask", "--scheduler", "notaurl"),
        ("--scheduler 'notaurl' is not a Dask scheduler address", "SCHEME://HOST:PORT", "tcp, tls, ws, wss, ucx"),
    ),
    "dask/scheduler-unknown-scheme": Cli(
        sweep("--grid", "beta=1,2", "--executor", "dask", "--scheduler", "http://localhost:8786"),
        ("unknown scheme 'http'",),
    ),
    "dask/scheduler-bad-port": Cli(
        sweep("--grid", "beta=1,2", "--executor", "dask", "--scheduler", "tcp://localhost:99999"), ("port 99999",)
    ),
    # ---- sizes beyond the machine, refused up front ------------------------------------------------
    "memory/trajectories": Cli(
        fig4("n=1000000000", "save_states=yes"), ("needs about", "memory", "save_states = 'no'")
    ),
    "memory/save-times": Cli(fig4("n_save=10000000000"), ("needs about", "n_save")),
    "memory/ensemble": Cli(fig4("seeds=1000000000"), ("needs about", "memory", "seeds")),
    "memory/weight-layers": Cli(
        fig4("weights=ginibre", "layer_tau=1e-12"), ("needs about", "the weights", "layer_tau")
    ),
    "memory/feed-forward": Cli(fig4("ff_width=1000000000000"), ("needs about", "ff_width")),
    "memory/histogram": Cli(fig4("histogram_bins=1000000000000"), ("needs about", "histogram_bins")),
    "memory/kvaerno-jacobian": Cli(
        fig4("n=100000", "solver=kvaerno5", "seeds=1", "save_states=no"), ("needs about", "Jacobians", "tsit5")
    ),
    "memory/sinkhorn-dense": Cli(
        fig4("n=1000000", "model=sinkhorn", "seeds=1", "save_states=no"),
        ("needs about", "the attention", "fewer particles"),
    ),
    "memory/sweep": Cli(sweep("--set", "n=1000000000", "--grid", "beta=1,2"), ("needs about", "memory")),
    # ---- experiments with runners of their own: the same preflight as particle runs --------------------
    # memory, per experiment
    "own/memory-meanfield-circle": Cli(
        own("meanfield-circle", "modes=100000000"), ("experiment 'meanfield-circle' needs about", "modes")
    ),
    "own/memory-meanfield-sphere": Cli(
        own("meanfield-sphere", "degree=100000"), ("experiment 'meanfield-sphere' needs about", "degree")
    ),
    "own/memory-lost-in-the-middle": Cli(
        own("lost-in-the-middle", "profile_runs=10000000000"),
        ("experiment 'lost-in-the-middle' needs about", "profile_runs"),
    ),
    "own/memory-gaussian-closure": Cli(
        own("gaussian-closure", "rank_draws=1000000000"), ("experiment 'gaussian-closure' needs about", "rank_draws")
    ),
    "own/memory-long-context": Cli(
        own("long-context", "particle_max=10000000", "context_lengths=[10, 10000000]"),
        ("experiment 'long-context' needs about", "particle_max"),
    ),
    "own/memory-selectivity": Cli(
        own("selectivity", "queries=10000000000"), ("experiment 'selectivity' needs about", "queries")
    ),
    "own/memory-noisy-transition": Cli(
        own("noisy-transition", "modes=1000000000", "meanfield_time=1"),
        ("experiment 'noisy-transition' needs about", "modes"),
    ),
    # keys the run does not read, per experiment
    "own/unread-meanfield-circle": Cli(
        own("meanfield-circle", "degree=40"), ("experiment 'meanfield-circle' does not read degree", "modes")
    ),
    "own/unread-meanfield-sphere": Cli(
        own("meanfield-sphere", "heads=3"), ("experiment 'meanfield-sphere' does not read heads",)
    ),
    "own/unread-lost-in-the-middle": Cli(
        own("lost-in-the-middle", "mask=causal"), ("experiment 'lost-in-the-middle' does not read mask", "decay_rate")
    ),
    "own/unread-key-at-its-default": Cli(
        own("gaussian-closure", "norm=post"), ("experiment 'gaussian-closure' does not read norm",)
    ),
    "own/unread-gaussian-closure": Cli(
        own("gaussian-closure", "solver=tsit5"), ("experiment 'gaussian-closure' does not read solver",)
    ),
    "own/unread-long-context": Cli(
        own("long-context", "n=5"), ("experiment 'long-context' does not read n", "context_lengths")
    ),
    "own/unread-selectivity": Cli(own("selectivity", "beta=[2.0]"), ("experiment 'selectivity' does not read beta",)),
    "own/unread-noisy-transition": Cli(
        own("noisy-transition", "noise=0.1"), ("experiment 'noisy-transition' does not read noise", "noise_ratios")
    ),
    "own/unread-in-a-sweep": Cli(
        ("sweep", "long-context", "--quick", "--grid", "n=4,8", "--out", "OUT"),
        ("experiment 'long-context' does not read n",),
    ),
    # values the runner cannot take, and horizons no step count reaches
    "own/decay-rate-overflows": Cli(own("lost-in-the-middle", "decay_rate=1e300"), ("decay_rate must be ≤ 700",)),
    "own/classes-below-one": Cli(own("lost-in-the-middle", "classes=1e-300"), ("classes must be ≥ 1",)),
    "own/one-token": Cli(own("lost-in-the-middle", "n=1"), ("needs n ≥ 3 tokens",)),
    "own/profile-times-beyond-t1": Cli(
        own("lost-in-the-middle", "profile_times=[0.5, 100.0]"), ("profile_times must lie within", "t1 = 10")
    ),
    "own/context-beyond-float": Cli(
        own("long-context", "context_lengths=[10, 100000000000000000000]"), ("context_lengths must be ≤ 1e15",)
    ),
    "own/selectivity-two-lengths": Cli(
        own("selectivity", "context_lengths=[100, 1000]"), ("needs at least three distinct context_lengths",)
    ),
    "own/selectivity-few-queries": Cli(own("selectivity", "queries=8"), ("at least 16 queries",)),
    "own/selectivity-large-d": Cli(own("selectivity", "d=[3, 9]"), ("for d ≤ 6 only", "got d = [3, 9]")),
    "own/t1-meanfield-circle": Cli(own("meanfield-circle", "t1=1e300"), ("beyond what the adaptive steps resolve",)),
    "own/t1-meanfield-sphere": Cli(own("meanfield-sphere", "t1=1e300"), ("beyond what the adaptive steps resolve",)),
    "own/t1-lost-in-the-middle": Cli(own("lost-in-the-middle", "t1=1e300"), ("dt = 0.025 is below the resolution",)),
    "own/t1-gaussian-closure": Cli(own("gaussian-closure", "t1=1e300"), ("below the resolution",)),
    "own/collapse-time-gaussian-closure": Cli(
        own("gaussian-closure", "collapse_time=1e9"), ("needs", "steps, more than max_steps")
    ),
    "own/t1-noisy-transition": Cli(
        own("noisy-transition", "t1=1e9"), ("dt = 0.025 is below the resolution of float32",)
    ),
    # ---- what an experiment's figures and theory need, refused before anything runs ---------------------
    "needs/fig4-in-d3": Cli(fig4("d=3"), ("experiment 'fig4-circle' runs one dimension, d = 2", "got d = [3]")),
    "needs/fig4-sweep-in-d3": Cli(
        ("sweep", "fig4-circle", "--quick", "--set", "d=3", "--grid", "beta=1,2", "--out", "OUT"),
        ("experiment 'fig4-circle' runs one dimension, d = 2",),
    ),
    "needs/renyi-in-d3": Cli(
        own("renyi-centres", "d=3"), ("experiment 'renyi-centres' runs one dimension", "parking count")
    ),
    "needs/renyi-without-states": Cli(own("renyi-centres", "save_states=no"), ("saved states",)),
    "needs/negative-beta-in-d3": Cli(own("negative-beta", "d=3"), ("experiment 'negative-beta' runs one dimension",)),
    "needs/sphere-movie-in-d4": Cli(own("sphere-movie", "d=4"), ("d = 2 or d = 3",)),
    # ---- keys a model does not take, and keys that act only with another: refused, never dropped --------
    "model/hardmax-causal": Cli(
        small("model=hardmax", "mask=causal"), ("model 'hardmax' takes no mask", "it takes weights, value")
    ),
    "model/hardmax-layer-wise": Cli(
        small("model=hardmax", "weights=ginibre", "layer_tau=0.5"), ("model 'hardmax' takes no layer_tau",)
    ),
    "model/sa-sinkhorn-tol": Cli(small("sinkhorn_tol=1e-3"), ("model 'sa' takes no sinkhorn_tol", "'sinkhorn'")),
    "model/linear-beta-list": Cli(small("model=linear", "beta=[1, 2]"), ("model 'linear' has no inverse temperature",)),
    "model/alibi-slope-alone": Cli(small("alibi_slope=0.5"), ("alibi_slope = 0.5 acts only with positional",)),
    "model/layer-tau-without-weights": Cli(small("layer_tau=0.5"), ("layer_tau = 0.5", "random weights")),
    "model/rho-without-equiangular": Cli(small("rho=0.5"), ("rho = 0.5 acts only with init = 'equiangular'",)),
    "model/experiment-key-in-a-particle-run": Cli(
        small("degree=40"), ("degree = 40 is read by another experiment", "meanfield-sphere")
    ),
    # ---- TOML config files ---------------------------------------------------------------------------
    "toml/syntax-error": Toml('model = "sa"\nn = = 3\n', ("case.toml: malformed TOML", "line 2")),
    "toml/duplicate-key": Toml("n = 3\nn = 4\n", ("case.toml: malformed TOML", "line 2")),
    "toml/not-utf8": Toml(b"n = 3\n# \xff\xfe\n", ("case.toml", "UTF-8")),
    "toml/unknown-key": Toml("bta = 2.0\n", ("case.toml", "unknown key 'bta'", "did you mean 'beta'")),
    "toml/unknown-table": Toml("[solver_options]\nstep = 1\n", ("case.toml", "unknown key 'solver_options'")),
    "toml/nested-table": Toml("[n]\nvalue = 3\n", ("case.toml", "n must be an integer", "nested tables")),
    "toml/n-string": Toml('n = "32"\n', ("case.toml", "n must be an integer ≥ 1, got '32' (a string)")),
    "toml/n-date": Toml("n = 1979-05-27\n", ("case.toml", "n must be an integer", "1979")),
    "toml/seeds-float": Toml("seeds = 2.5\n", ("case.toml", "seeds must be an integer ≥ 1, got 2.5")),
    "toml/t1-list": Toml("t1 = [1.0, 2.0]\n", ("case.toml", "t1 must be a finite number", "[1.0, 2.0]")),
    "toml/beta-table": Toml("beta = {low = 1}\n", ("case.toml", "beta must be", "a table")),
    "toml/d-mixed-list": Toml('d = [2, "x"]\n', ("case.toml", "d[1] must be an integer", "'x'")),
    "toml/solver-number": Toml("solver = 4\n", ("case.toml", "solver must be", "got 4")),
    "toml/n-nan": Toml("n = nan\n", ("case.toml", "n must be an integer ≥ 1, got nan")),
    "toml/n-negative": Toml("n = -3\n", ("case.toml", "n must be an integer ≥ 1, got -3")),
    "toml/beta-inf": Toml("beta = inf\n", ("case.toml", "beta must be", "got inf")),
    "toml/delta-minus-inf": Toml("delta = -inf\n", ("case.toml", "delta must be", "got -inf")),
    "toml/dt-nan": Toml('solver = "rk4"\ndt = nan\n', ("case.toml", "dt must be a finite number", "got nan")),
    "toml/t1-negative": Toml("t1 = -1.0\n", ("case.toml", "t1 must be a finite number > 0, got -1")),
    "toml/beta-empty-list": Toml("beta = []\n", ("case.toml", "beta must be", "empty list")),
    "toml/unknown-experiment": Toml('experiment = "fig5"\n', ("case.toml", "unknown experiment 'fig5'")),
    "toml/experiment-not-a-string": Toml("experiment = 5\n", ("case.toml", "experiment must be a string")),
    "toml/unknown-init": Toml('init = "sobol"\n', ("case.toml", "init must be one of", INIT_CHOICES)),
    "toml/init-pickle": Toml(
        'n = 6\nd = 3\nseeds = 2\ninit = "file"\ninit_file = "evil.npy"\n', ("init_file", "evil.npy")
    ),
    "toml/init-complex": Toml(
        'n = 6\nd = 3\nseeds = 2\ninit = "file"\ninit_file = "complex.npy"\n',
        ("init_file", "complex.npy", "complex128"),
    ),
    "toml/huge-trajectories": Toml('n = 1000000000\nsave_states = "yes"\n', ("needs about", "save_states = 'no'")),
    "toml/huge-n-bigint": Toml("n = 99999999999999999999999\n", ("needs about", "memory")),
    "toml/rk4-dt-tiny": Toml(
        'solver = "rk4"\ndt = 1e-12\nt1 = 2.0\nn = 4\nseeds = 1\n', ("needs at least 2e+12 steps", "max_steps")
    ),
    "toml/seed-wraps": Toml("seed = 9223372036854775807\nseeds = 2\n", ("seed = 9223372036854775807", "seeds = 2")),
    # ---- Python API ---------------------------------------------------------------------------------------
    "api/SA-beta-nan": Api(lambda p: af.SA(beta=float("nan")), r"beta must be finite, got nan"),
    "api/Sinkhorn-beta-negative": Api(
        lambda p: af.Sinkhorn(beta=-1.0), r"beta must be ≥ 0 for Sinkhorn, got -1.0; β < 0 runs with SA, USA"
    ),
    "api/SA-beta-2d": Api(lambda p: af.SA(beta=jnp.ones((2, 2))), r"beta must be .* 1-D array .*shape \(2, 2\)"),
    "api/SA-beta-string": Api(
        lambda p: af.SA(beta="hot"), r"beta must be a finite number or a 1-D array of them, got 'hot' \(a string\)"
    ),
    "api/SA-beta-none": Api(
        lambda p: af.SA(beta=None), r"beta must be a finite number or a 1-D array of them, got None"
    ),
    "api/USA-beta-dict": Api(lambda p: af.USA(beta={"low": 1}), r"beta must be .*\{'low': 1\} \(a dict\)"),
    "api/SA-beta-list-of-strings": Api(
        lambda p: af.SA(beta=["1", "2"]), r"beta must be .*\['1', '2'\] \(a list of strings\)"
    ),
    "api/SA-beta-bool": Api(lambda p: af.SA(beta=True), r"beta must be .*True \(a bool\)"),
    "api/Sinkhorn-beta-complex": Api(lambda p: af.Sinkhorn(beta=1 + 2j), r"beta must be .*\(1\+2j\) \(a complex\)"),
    "api/SA-beta-empty-list": Api(lambda p: af.SA(beta=[]), r"beta must not be empty: give at least one temperature"),
    "api/Circle-beta-empty-array": Api(
        lambda p: af.Circle(beta=jnp.zeros(0)), r"beta must not be empty: give at least one temperature"
    ),
    "api/SA-block": Api(lambda p: af.SA(1.0, block="big"), r"block must be None \(dense\), 'auto' or a positive int"),
    "api/USA-time": Api(lambda p: af.USA(1.0, time="bogus"), r"time must be one of 'glpr', 'rescaled'; got 'bogus'"),
    "api/simulate-unknown-solver": Api(lambda p: _sim(solver="rk5"), r"solver must be one of 'euler', .*got 'rk5'"),
    "api/simulate-t1-negative": Api(lambda p: _sim(t1=-1.0), r"t1 must be a finite number ≥ 0, got -1"),
    "api/simulate-t1-nan": Api(lambda p: _sim(t1=float("nan")), r"t1 must be a finite number .*got nan"),
    "api/simulate-t1-list": Api(lambda p: _sim(t1=[1.0]), r"t1 must be a real number, got \[1.0\]"),
    "api/simulate-dt-negative": Api(lambda p: _sim(solver="rk4", dt=-0.1), r"dt must be a finite number > 0"),
    "api/simulate-dt-inf": Api(lambda p: _sim(solver="rk4", dt=float("inf")), r"dt must be .*got inf"),
    "api/simulate-dt-missing": Api(lambda p: _sim(solver="rk4"), r"dt is required for the fixed-step solver 'rk4'"),
    "api/simulate-x0-vector": Api(lambda p: _sim(x0=jnp.ones(4)), r"shape \(n, d\) or \(batch, n, d\), got \(4,\)"),
    "api/simulate-x0-4d": Api(lambda p: _sim(x0=jnp.ones((1, 2, 4, 3))), r"shape \(n, d\) or \(batch, n, d\)"),
    "api/simulate-ensemble-mismatch": Api(
        lambda p: _sim(field=af.SA(jnp.array([1.0, 2.0, 3.0])), x0=af.init.uniform(0, 4, 3, batch=2)),
        r"batch of 2 configurations but the field has 3 members",
    ),
    "api/simulate-Q-wrong-d": Api(lambda p: _sim(field=af.SA(1.0, Q=np.eye(4))), r"Q has shape \(4, 4\).*d = 3"),
    "api/simulate-x0-nan": Api(lambda p: _sim(x0=jnp.full((4, 3), jnp.nan)), r"non-finite entries"),
    "api/simulate-x0-complex": Api(lambda p: _sim(x0=X0().astype(complex)), r"real array, got dtype complex128"),
    "api/simulate-ts-decreasing": Api(lambda p: _sim(ts=jnp.array([0.5, 0.2])), r"ts must be strictly increasing"),
    "api/simulate-ts-beyond-t1": Api(lambda p: _sim(ts=jnp.array([0.0, 2.0])), r"ts must lie in \[t0, t1\]"),
    "api/simulate-ts-empty": Api(lambda p: _sim(ts=jnp.array([])), r"ts must be a non-empty 1-D array"),
    "api/simulate-dt-tiny": Api(
        lambda p: _sim(solver="rk4", dt=1e-12), r"needs 1e\+12 steps, more than max_steps = 1000000"
    ),
    "api/simulate-ab4-dt-tiny": Api(lambda p: _sim(solver="ab4", dt=1e-9), r"solver 'ab4' .*needs 1e\+09 steps"),
    "api/simulate-t1-huge": Api(
        lambda p: _sim(t1=1e300, solver="rk4", dt=0.05), r"dt = 0.05 is below the resolution of float64 at t = 1e\+300"
    ),
    "api/simulate-constant-tsit5-dt-tiny": Api(
        lambda p: _sim(solver="tsit5", adaptive=False, dt=1e-12), r"\(adaptive=False\).*more than max_steps"
    ),
    "api/simulate-t1-at-t0": Api(lambda p: _sim(t1=0.0), r"t1 must be > t0 = 0, got 0"),
    "api/init-seed-beyond-int64": Api(
        lambda p: af.init.uniform(2**63, 3, 3),
        r"seed must be an integer in \[0, 2\*\*63 - 1\], got 9223372036854775808",
    ),
    "api/init-seed-negative": Api(
        lambda p: af.init.uniform(-1, 3, 3), r"seed must be an integer in \[0, 2\*\*63 - 1\], got -1"
    ),
    "api/simulate-noise-key-negative": Api(
        lambda p: _sim(field=af.Noisy(af.SA(1.0), 0.1), solver="euler", dt=0.1, key=-1),
        r"seed must be an integer in \[0, 2\*\*63 - 1\], got -1",
    ),
    "api/simulate-not-a-field": Api(lambda p: _sim(field="sa"), r"field must be an attnflow vector field"),
    "api/init-n-zero": Api(lambda p: af.init.uniform(0, n=0, d=3), r"n must be an integer ≥ 1, got 0"),
    "api/init-d-one": Api(lambda p: af.init.uniform(0, n=3, d=1), r"d must be an integer ≥ 2, got 1"),
    "api/init-n-string": Api(lambda p: af.init.uniform(0, n="3", d=3), r"n must be an integer ≥ 1, got '3'"),
    "api/init-batch-zero": Api(lambda p: af.init.uniform(0, 3, 3, batch=0), r"batch must be an integer ≥ 1"),
    "api/init-dtype-int": Api(lambda p: af.init.uniform(0, 3, 3, dtype="int32"), r"dtype must be a floating type"),
    "api/init-equiangular-rho": Api(lambda p: af.init.equiangular(0, 4, 4, rho=1.5), r"rho must be"),
    "api/init-orthogonal-d-small": Api(lambda p: af.init.orthogonal(0, 5, 3), r"orthogonal needs d ≥ n"),
    "api/from-array-pickled-npy": Api(lambda p: af.init.from_array(p / "evil.npy"), r"evil\.npy.*not a plain numeric"),
    "api/from-array-raw-pickle": Api(lambda p: af.init.from_array(p / "rawpickle.npy"), r"rawpickle\.npy"),
    "api/from-array-complex-npy": Api(lambda p: af.init.from_array(p / "complex.npy"), r"dtype complex128"),
    "api/from-array-strings-npy": Api(lambda p: af.init.from_array(p / "strings.npy"), r"dtype <U1"),
    "api/from-array-flat-npy": Api(lambda p: af.init.from_array(p / "flat.npy"), r"got \(18,\)"),
    "api/from-array-not-npy": Api(lambda p: af.init.from_array(p / "x.txt"), r"reads \.npy files"),
    "api/from-array-empty-file": Api(lambda p: af.init.from_array(p / "empty.npy"), r"empty\.npy.*not a plain"),
    "api/from-array-header-lies": Api(lambda p: af.init.from_array(p / "lying.npy"), r"lying\.npy.*not a plain"),
    "api/from-array-npz-in-disguise": Api(lambda p: af.init.from_array(p / "archive.npy"), r"\.npz archive"),
    "api/from-array-directory": Api(lambda p: af.init.from_array(p / "folder.npy"), r"folder\.npy"),
    "api/layerwise-header-lies": Api(
        lambda p: LayerWise.from_npz(af.SA(1.0), p / "lying_weights.npz"), r"lying_weights\.npz: array Q is corrupt"
    ),
    "api/from-array-missing": Api(lambda p: af.init.from_array(p / "nowhere.npy"), r"nowhere\.npy.*does not exist"),
    "api/layerwise-pickled-npz": Api(
        lambda p: LayerWise.from_npz(af.SA(1.0), p / "evil_weights.npz"), r"evil_weights\.npz.*(pickle|object)"
    ),
    "api/clusters-delta-negative": Api(lambda p: af.clusters(X0(), delta=-1.0), r"delta must be finite and ≥ 0"),
    "api/clusters-delta-nan": Api(lambda p: af.clusters(X0(), delta=float("nan")), r"delta must be finite"),
    "api/clusters-vector": Api(
        lambda p: af.clusters(jnp.ones(3)), r"x must be a configuration of shape \(\.\.\., n, d\)"
    ),
    "api/energy-vector": Api(lambda p: af.energy(jnp.ones(3), 1.0), r"x must be a configuration of shape"),
    "api/energy-beta-zero": Api(lambda p: af.energy(X0(), 0.0), r"beta must be .*> 0"),
    "api/energy-beta-negative": Api(lambda p: af.energy(X0(), -2.0), r"beta must be .*> 0"),
    "api/histogram-zero-bins": Api(lambda p: af.inner_product_histogram(X0(), 0), r"bins must be an integer ≥ 1"),
    "api/equiangular-unknown-model": Api(
        lambda p: af.equiangular(1.0, 4, jnp.linspace(0, 1, 3), model="xyz"),
        r"model must be one of 'sa', 'usa', 'usa-rescaled'; got 'xyz'",
    ),
    "api/sample-weights-unknown": Api(lambda p: af.sample_weights(0, 3, "bogus"), r"ensemble must be one of"),
    "api/load-missing": Api(lambda p: af.load(p / "nowhere"), r"nowhere does not exist"),
    "api/load-a-file": Api(lambda p: af.load(p / "afile"), r"afile"),
    "api/load-pickled-results": Api(lambda p: af.load(p / "evilrun"), r"results\.npz.*pickl"),
    "api/load-truncated-results": Api(lambda p: af.load(p / "cutrun"), r"results\.npz"),
    "api/load-corrupt-compressed-arrays": Api(lambda p: af.load(p / "zlibrun"), r"zlibrun/results\.npz is corrupt"),
    "api/load-manifest-escaping": Api(lambda p: af.load(p / "escsweep"), r"'\.\./\.\./etc'"),
    "api/load-config-unknown-key": Api(
        lambda p: load_config({"bta": 1.0}), r"unknown key 'bta'; did you mean 'beta'", ConfigError
    ),
    "api/load-config-malformed-text": Api(
        lambda p: load_config("n = 3\nn = = 4\n"), r"config text: malformed TOML", ConfigError
    ),
    "api/load-config-wrong-type": Api(
        lambda p: load_config({"n": "many"}), r"n must be an integer ≥ 1, got 'many'", ConfigError
    ),
    "api/load-config-pipe": Api(
        lambda p: load_config(p / "pipe.toml"), r"'.*pipe\.toml' is a named pipe \(FIFO\)", ConfigError
    ),
    "api/load-config-not-a-mapping": Api(
        lambda p: load_config([("n", 3)]), r"a configuration is a TOML file path", ConfigError
    ),
    "api/load-config-inf": Api(lambda p: load_config({"t1": float("inf")}), r"t1 must be a finite number", ConfigError),
    "api/parse-grid-empty": Api(lambda p: parse_grid("beta="), r"--grid beta: the grid is empty", ConfigError),
    "api/expand-grid-huge": Api(
        lambda p: expand_grid(load_config(), {"beta": np.linspace(0, 1, 400), "seed": list(range(400))}),
        rf"grid has 160000 points .*at most {MAX_GRID_POINTS}",
        ConfigError,
    ),
    "api/meanfield-sphere-memory": Api(
        lambda p: af.meanfield_sphere(lambda x: 1.0 + 0.0 * x[..., 0], 5.0, 1.0, L=100000),
        r"meanfield_sphere at L = 100000 needs about .* PiB of memory.*a smaller L",
    ),
    "api/perturbed-sphere-memory": Api(
        lambda p: af.perturbed_uniform_sphere(0, 100000, 1e-3), r"perturbed_uniform_sphere at L = 100000 needs about"
    ),
    "api/meanfield-circle-memory": Api(
        lambda p: af.meanfield_circle(lambda th: 1.0 + 0.01 * np.cos(th), 5.0, 1.0, modes=10**10),
        r"meanfield_circle with 10000000000 modes needs about .*fewer modes",
    ),
    "api/meanfield-circle-horizon": Api(
        lambda p: af.meanfield_circle(lambda th: 1.0 + 0.01 * np.cos(th), 5.0, 1e300),
        r"t1 = 1e\+300 is beyond what the adaptive steps resolve",
    ),
    "api/decay-slope-finite": Api(
        lambda p: _finite_or_raise(af.USA(1.0, mask="causal", positional="decay", alibi_slope=1e300)), r"finite"
    ),
    "api/alibi-slope-finite-blocked": Api(
        lambda p: _finite_or_raise(af.SA(1.0, mask="causal", positional="alibi", alibi_slope=1e300, block=4)), r"finite"
    ),
    "api/fit-adam-steps-negative": Api(
        lambda p: fit_states(p, adam_steps=-1), r"adam_steps must be an integer ≥ 0, got -1"
    ),
    "api/fit-lbfgs-steps-negative": Api(
        lambda p: fit_states(p, lbfgs_steps=-5), r"lbfgs_steps must be an integer ≥ 0, got -5"
    ),
    "api/fit-learning-rate-negative": Api(
        lambda p: fit_states(p, learning_rate=-0.1), r"learning_rate must be a finite number > 0, got -0.1"
    ),
    "api/fit-learning-rate-zero": Api(
        lambda p: fit_states(p, learning_rate=0.0), r"learning_rate must be .*> 0, got 0"
    ),
    "api/fit-learning-rate-nan": Api(lambda p: fit_states(p, learning_rate=float("nan")), r"learning_rate .*got nan"),
    "api/fit-holdout-one": Api(lambda p: fit_states(p, holdout=1.0), r"holdout must be .*< 1"),
    "api/fit-seed-negative": Api(lambda p: fit_states(p, seed=-2), r"seed must be an integer ≥ 0, got -2"),
    "api/fit-complex-states": Api(
        lambda p: af.fit(np.load(p / "states.npz")["x"] * (1 + 1j)), r"states must be a real array .*complex128"
    ),
    "api/fit-string-states": Api(lambda p: af.fit(np.full((3, 6, 3), "x")), r"states must be a real array .*<U1"),
    "api/dask-scheduler-not-a-url": Api(
        lambda p: executors.DaskExecutor("notaurl"), r"'notaurl' is not a Dask scheduler address"
    ),
    "api/write-over-users-run": Api(
        lambda p: _stored_run(p / "userrun", load_config(SMALL)),
        r"userrun: it holds 'config.toml', which attnflow did not write",
    ),
    "api/check-fits-trajectories": Api(
        lambda p: memory.check_fits(load_config(None, ["n=1000000000", "save_states=yes"])),
        r"needs about .* save_states = 'no'",
        ConfigError,
    ),
}


def _ids(kind):
    return [k for k, v in CASES.items() if isinstance(v, kind)]


def test_the_table_is_large_and_spans_the_three_channels():
    assert len(CASES) >= 45
    assert len(_ids(Cli)) >= 15 and len(_ids(Toml)) >= 15 and len(_ids(Api)) >= 15


def _check_cli_refusal(workdir: Path, argv, fragments) -> None:
    out = workdir / "OUT"
    argv = [str(out) if a == "OUT" else a for a in argv]
    before = tree(workdir)
    rc, stdout, stderr = cli(argv)
    assert rc == 2, stderr
    assert stdout == ""
    assert "Traceback" not in stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    line = stderr.strip()
    assert line.startswith("attnflow: error: ") and len(line) > len("attnflow: error: "), stderr
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert tree(workdir) == before, "something was written"
    assert not out.exists()
    assert not (workdir / SENTINEL).exists(), "a pickle was loaded"


@pytest.mark.slow
@pytest.mark.parametrize("case", _ids(Cli))
def test_command_line(workdir, case):
    c = CASES[case]
    _check_cli_refusal(workdir, c.argv, c.fragments)
    if case == "set/unknown-key-huge":  # the key is quoted once, cut short
        _, _, err = cli([str(workdir / "OUT") if a == "OUT" else a for a in c.argv])
        assert len(re.findall("k{20,}", err)) == 1 and len(err) < 1000, err


def test_a_byte_order_mark_is_skipped(workdir):
    (workdir / "bom.toml").write_bytes("\ufeff".encode() + SMALL.encode())
    assert load_config(workdir / "bom.toml") == load_config(SMALL)
    assert load_config("\ufeff" + SMALL) == load_config(SMALL)


@pytest.mark.parametrize("case", _ids(Toml))
def test_toml_config(workdir, case):
    c = CASES[case]
    path = workdir / "case.toml"
    if isinstance(c.text, bytes):
        path.write_bytes(c.text)
    else:
        path.write_text(c.text, encoding="utf-8")
    _check_cli_refusal(workdir, ["run", "case.toml", "--out", "OUT"], c.fragments)


@pytest.mark.slow
@pytest.mark.parametrize("case", _ids(Api))
def test_python_api(workdir, case):
    c = CASES[case]
    before = tree(workdir)
    with pytest.raises(c.error) as info:
        c.call(workdir)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "\n" not in message.strip(), message
    assert re.search(c.pattern, message), f"{c.pattern!r} does not match {message!r}"
    assert tree(workdir) == before
    assert not (workdir / SENTINEL).exists(), "a pickle was loaded"


# -- observables of non-finite states: NaN or -1, consistently, and said eagerly ------------------------


def _nan_state():
    x = np.array(af.init.uniform(0, 5, 3, batch=3))
    x[1, 2, 0] = np.nan
    x[2, 0, 1] = np.inf
    return x


NON_FINITE = {
    "clusters-count": (lambda x: af.clusters(x, 1e-3).count, -1),
    "clusters-labels": (lambda x: af.clusters(x, 1e-3).labels, -1),
    "clustered-fraction": (lambda x: af.clustered_fraction(x, 1e-3), np.nan),
    "energy": (lambda x: af.energy(x, 2.0), np.nan),
    "normalized-energy": (lambda x: af.normalized_energy(x, 2.0), np.nan),
    "histogram": (lambda x: af.inner_product_histogram(x, 8), -1),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(NON_FINITE))
def test_observables_of_non_finite_states(case):
    fn, bad = NON_FINITE[case]
    x = _nan_state()
    with pytest.warns(RuntimeWarning, match=r"2 of 3 configurations hold non-finite entries \(NaN or inf\)"):
        got = np.asarray(fn(x))
    for member in (1, 2):
        assert np.all(np.isnan(got[member])) if np.isnan(bad) else np.all(got[member] == bad), got[member]
    np.testing.assert_array_equal(got[0], np.asarray(fn(x[:1]))[0])  # the finite member is untouched


# -- the memory estimate ----------------------------------------------------------------------------

LAPTOP = 8 * 2**30  # a 2-core, 8 GB laptop


@pytest.fixture
def laptop(monkeypatch):
    monkeypatch.setattr(memory, "machine_bytes", lambda: LAPTOP)


README_EXAMPLES = [
    ("fig3-phase-diagram", ["d=[2,8,32,128]", "seeds=64", "beta=0.1:9:46"]),
    ("fig3-phase-diagram", ["d=[2,8]", "seeds=256"]),
    ("fig4-circle", ["beta=4"]),
]


@pytest.mark.parametrize("name", list(builtin.EXPERIMENTS))
def test_every_builtin_default_fits_a_laptop(laptop, name):
    experiment = builtin.EXPERIMENTS[name]
    config = load_config(experiment.defaults)
    memory.check_fits(config)
    assert 0 < memory.estimate_bytes(config) < LAPTOP
    memory.check_fits(load_config({**experiment.defaults, **experiment.quick}))


@pytest.mark.parametrize("name,sets", README_EXAMPLES, ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_readme_examples_fit_a_laptop(laptop, name, sets):
    memory.check_fits(load_config(None, sets, base=builtin.EXPERIMENTS[name].defaults))


def test_refusal_names_estimate_machine_and_remedy(laptop):
    config = load_config(None, ["n=200000", "d=3", "seeds=4", "save_states=yes", "n_save=1001"])
    with pytest.raises(ConfigError) as info:
        memory.check_fits(config)
    message = str(info.value)
    assert "\n" not in message
    assert re.search(r"needs about [\d.]+ [GT]iB", message), message
    assert "8.0 GiB" in message
    assert "save_states = 'no'" in message


def test_forced_dense_attention_is_refused_with_the_blocked_mode_suggested(laptop):
    config = load_config(None, ["n=10000000", "seeds=1", "beta=1.0", "save_states=no"])
    dense = memory.estimate_bytes(config, block=None)
    blocked = memory.estimate_bytes(config)
    assert dense > 1000 * blocked and dense > 10**14  # the n×n logits of n = 10⁷ particles
    with pytest.raises(ConfigError, match=r"needs about .*blocked evaluation \(block = 'auto'"):
        memory.check_fits(config, block=None)


def test_auto_keeps_the_states_of_every_d_within_one_budget():
    # counted as they are kept: len(d) × members × save times × n × max d numbers against plan.STATES_LIMIT
    both = load_config(None, ["d=[3,5]", "n=100"])
    at_limit = plan.STATES_LIMIT // (2 * 100 * 5)  # members × save times
    assert both.save_states == "auto"
    assert plan.keep_states(both, at_limit, 1) and not plan.keep_states(both, at_limit + 1, 1)
    alone = load_config(None, ["d=5", "n=100"])  # d = 5 alone keeps twice as many
    assert plan.keep_states(alone, 2 * at_limit, 1) and not plan.keep_states(alone, 2 * at_limit + 1, 1)
    assert plan.keep_states(both.replace(save_states="yes"), 10 * at_limit, 1)
    assert not plan.keep_states(both.replace(save_states="no"), 1, 1)


def test_estimate_counts_the_states_of_every_d_once():
    members, times, n = 2 * 4, 11, 8
    sets = ["d=[3,5]", f"n={n}", "seeds=4", "beta=[1.0,2.0]", f"n_save={times}"]
    kept = memory.estimate_bytes(load_config(None, sets + ["save_states=yes"]))
    # on the host one array of both d's padded to d = 5, filled in place; in the largest compiled call
    # (d = 5, every member) the states it saves
    assert kept - memory.estimate_bytes(load_config(None, sets + ["save_states=no"])) == 8 * members * times * n * (
        2 * 5 + 5
    )


def test_estimate_grows_with_the_run(laptop):
    base = load_config(None, ["n=64", "seeds=8"])
    e = memory.estimate_bytes(base)
    assert memory.estimate_bytes(base.replace(seeds=64)) > e
    assert memory.estimate_bytes(base.replace(n=512)) > e
    assert memory.estimate_bytes(base.replace(save_states="yes")) > memory.estimate_bytes(
        base.replace(save_states="no")
    )
    assert memory.estimate_bytes(base.replace(dtype="float32")) < e


def test_a_smaller_machine_refuses_what_a_larger_one_runs(monkeypatch):
    config = load_config(None, ["n=4096", "d=16", "seeds=64", "save_states=yes", "n_save=501"])
    need = memory.estimate_bytes(config)
    monkeypatch.setattr(memory, "machine_bytes", lambda: 2 * need)
    memory.check_fits(config)
    monkeypatch.setattr(memory, "machine_bytes", lambda: need // 2)
    with pytest.raises(ConfigError, match="needs about"):
        memory.check_fits(config)


def test_unknown_machine_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(memory, "machine_bytes", lambda: None)
    memory.check_fits(load_config(None, ["n=1000000000", "save_states=yes"]))


def test_machine_bytes_reads_this_machine():
    total = memory.machine_bytes()
    assert total is None or total > 2**26


def test_memory_refusal_comes_before_any_simulation(workdir, laptop, monkeypatch):
    def no_simulation(*args, **kwargs):
        raise AssertionError("simulate was called")

    monkeypatch.setattr(runner, "simulate", no_simulation)
    _check_cli_refusal(workdir, fig4("n=100000", "seeds=64", "save_states=yes"), ("needs about", "8.0 GiB"))
