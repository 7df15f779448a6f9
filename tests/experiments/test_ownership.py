"""Nothing of the user's replaced or removed, and no read that blocks or never ends.

* ``attnflow export`` writes its pair (the states file and its provenance beside it) only over a pair it
  wrote, with ``--overwrite``; a file of the user's at either name is refused, before the model is run.
* A temporary is attnflow's by a marker it wrote inside, never by its name: a folder of the user's named
  like one is kept by ``sweep --resume``, and the temporary a killed run left is removed when it runs again.
* Every reader of a user's or a cache's file refuses a named pipe, a device, or a link to one, by its kind:
  each reader runs in a subprocess with a time limit, so that a read that blocks fails instead of hanging.
* A TOML file nested 5 000 deep is one line naming the nesting, not Python's recursion limit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cli_helpers import SMALL, cli, tree

from attnflow.experiments.commands import export
from attnflow.experiments.config import ConfigError
from attnflow.experiments.config.toml import read_source, read_toml_file
from attnflow.experiments.results import store
from attnflow.particles import files

ARRAYS = {"states": np.arange(3 * 2 * 4 * 2, dtype=np.float32).reshape(3, 2, 4, 2)}
PROVENANCE = {"command": "export", "model": "tiny", "prompts": 2, "tokens": 4}


# -- export: its pair, never the user's files ------------------------------------------------------


def test_export_refuses_a_json_of_the_users_beside_out_with_or_without_overwrite(tmp_path):
    out = tmp_path / "states.npz"
    mine = tmp_path / "states.json"
    mine.write_text('{"my": "notes"}\n')
    before = tree(tmp_path)
    for overwrite in (False, True):
        with pytest.raises(ValueError, match=r"states\.json.*attnflow export did not write it") as err:
            export.write_pair(out, ARRAYS, PROVENANCE, overwrite=overwrite)
        assert "\n" not in str(err.value)
        assert tree(tmp_path) == before  # the user's file as it was, nothing beside it
    assert mine.read_text() == '{"my": "notes"}\n'


def test_export_refuses_a_states_file_of_the_users_even_with_overwrite(tmp_path):
    out = tmp_path / "states.npz"
    out.write_bytes(b"mine")
    before = tree(tmp_path)
    with pytest.raises(ValueError, match="exists") as err:
        export.write_pair(out, ARRAYS, PROVENANCE, overwrite=False)
    assert "--overwrite" in str(err.value)
    with pytest.raises(ValueError, match="attnflow export did not write it"):
        export.write_pair(out, ARRAYS, PROVENANCE, overwrite=True)
    assert tree(tmp_path) == before and out.read_bytes() == b"mine"


def test_export_replaces_its_own_pair_on_request_only(tmp_path):
    out = tmp_path / "states.npz"
    export.write_pair(out, ARRAYS, PROVENANCE, overwrite=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["states.json", "states.npz"]  # no temporaries
    written = json.loads(out.with_suffix(".json").read_text())
    assert written["format"] == export.PROVENANCE_FORMAT and written["states_file"] == "states.npz"
    with pytest.raises(ValueError, match="--overwrite"):
        export.write_pair(out, ARRAYS, PROVENANCE, overwrite=False)
    doubled = {"states": 2 * ARRAYS["states"]}
    export.write_pair(out, doubled, {**PROVENANCE, "model": "other"}, overwrite=True)
    with np.load(out) as z:
        np.testing.assert_array_equal(z["states"], doubled["states"])
    assert json.loads(out.with_suffix(".json").read_text())["model"] == "other"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["states.json", "states.npz"]


def test_export_refuses_a_provenance_of_its_own_for_another_states_file(tmp_path):
    """A pair is the states file and the provenance that names it: a provenance copied beside a file of the
    user's does not make that file attnflow's."""
    export.write_pair(tmp_path / "a.npz", ARRAYS, PROVENANCE, overwrite=False)
    os.replace(tmp_path / "a.json", tmp_path / "b.json")
    (tmp_path / "b.npz").write_bytes(b"mine")
    with pytest.raises(ValueError, match="did not write it"):
        export.write_pair(tmp_path / "b.npz", ARRAYS, PROVENANCE, overwrite=True)
    assert (tmp_path / "b.npz").read_bytes() == b"mine"


def test_export_checks_its_pair_before_the_model_runs(tmp_path, monkeypatch):
    """The refusal comes before anything is loaded: with the model part standing in for torch, it is never called."""
    (tmp_path / "states.json").write_text("{}")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a b c\n")
    monkeypatch.setattr(export, "_require_hf", lambda: (None, None))
    monkeypatch.setattr(export, "load_tokenizer", lambda name: pytest.fail("the tokenizer was loaded"))
    before = tree(tmp_path)
    rc, out, err = cli(["export", "m", "--prompts", prompts, "--out", tmp_path / "states.npz", "--overwrite"])
    assert rc == 2 and err.count("\n") == 1 and "states.json" in err and "did not write it" in err
    assert tree(tmp_path) == before


# -- temporaries: by the marker inside, never by the name -----------------------------------------


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


KILLED_WRITE = textwrap.dedent(
    """
    import os, signal, sys
    from attnflow.experiments.results import store
    def figure(path):
        os.kill(os.getpid(), signal.SIGKILL)
    store.write_run(sys.argv[1], "n = 1\\n", {}, {"x": [1.0]}, {"fig": figure})
    """
)


def test_the_temporary_of_a_killed_run_is_removed_by_the_rerun_and_a_users_folder_kept(tmp_path):
    out = tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(out)], timeout=120)
    assert killed.returncode == -signal.SIGKILL
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".run.tmp-")]
    assert len(left) == 1 and left[0].is_dir()
    users = tmp_path / f".run.tmp-{_dead_pid()}-0123abcd"  # a name like a temporary's: a folder of the user's
    users.mkdir()
    (users / "notes.txt").write_text("mine\n")
    store.write_run(out, "n = 1\n", {}, {"x": [1.0]})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", users.name])
    assert (users / "notes.txt").read_text() == "mine\n"


def test_stale_temporaries_are_known_by_their_marker_not_their_name(tmp_path):
    pid = _dead_pid()
    users = [tmp_path / f".beta=1.0.tmp-{pid}-0123abcd", tmp_path / f".beta=1.0.old-{pid}-0123abcd"]
    for d in users:
        d.mkdir()
        (d / "notes.txt").write_text("mine\n")
    users_file = tmp_path / f".manifest.json.tmp-{pid}-89abcdef"
    users_file.write_text("my own file\n")
    assert store.remove_stale_temporaries(tmp_path) == []
    assert all((d / "notes.txt").read_text() == "mine\n" for d in users)
    assert users_file.read_text() == "my own file\n"


def test_sweep_resume_keeps_a_users_folder_named_like_a_temporary(tmp_path):
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL.replace("beta = [1.0, 3.0]", "beta = [1.0]").replace("seeds = 2", "seeds = 1"))
    out = tmp_path / "sweep"
    grid = ["--grid", "beta=1,2"]
    rc, _, err = cli(["sweep", cfg, *grid, "--out", out, "--quiet", "--no-plot", "--no-cache"])
    assert rc == 0, err
    users = out / f".beta=1.0.tmp-{_dead_pid()}-0123abcd"
    users.mkdir()
    (users / "notes.txt").write_text("mine\n")
    rc, _, err = cli(["sweep", cfg, *grid, "--out", out, "--resume", "--quiet", "--no-plot", "--no-cache"])
    assert rc == 0, err
    assert (users / "notes.txt").read_text() == "mine\n"


# -- reads that never block -----------------------------------------------------------------------


def _in_subprocess(code: str, timeout: float = 90) -> str:
    """Run ``code`` in a fresh interpreter (this one's path, so this attnflow) and return its stdout; a read
    that blocks fails the test at ``timeout`` instead of hanging it."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the read blocked: still running after {timeout} s")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def hostile(tmp_path):
    """A FIFO, a link to a FIFO and a link to /dev/zero."""
    os.mkfifo(tmp_path / "fifo")
    os.symlink(tmp_path / "fifo", tmp_path / "to_fifo")
    os.symlink("/dev/zero", tmp_path / "zero")
    return tmp_path


REFUSED = """
def refused(read, path, *words):
    try:
        read(path)
    except ValueError as err:
        message = str(err)
        assert "\\n" not in message and all(w in message for w in words), message
        print("refused")
    else:
        print("read")
"""

READERS = {
    "prompts": ("from attnflow.experiments.commands.export import read_prompts as read", ()),
    "toml": ("from attnflow.experiments.config.toml import read_toml_file as read", ()),
    "states": ("from attnflow.experiments.commands.states import read_states as read", ()),
    "init": ("from attnflow.particles.init import from_array as read", ".npy"),
    "summary": (
        "from attnflow.experiments.results.rundir import read_summary as read",
        (),
    ),
    "config": ("from attnflow.experiments.results.rundir import read_config as read", ()),
    "manifest": ("from attnflow.experiments.results.rundir import read_manifest as read", ()),
    "arrays": ("from attnflow.experiments.results.rundir import read_arrays as read", ()),
    "weights": (
        "import attnflow as af\ndef read(path):\n    af.LayerWise.from_npz(af.SA(beta=1.0), path)",
        (),
    ),
}


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_refuses_pipes_and_devices_by_kind(hostile, reader):
    imports, suffix = READERS[reader]
    if suffix:  # from_array reads paths ending in .npy
        for name in ("fifo", "to_fifo", "zero"):
            os.symlink(hostile / name, hostile / f"{name}{suffix}")
    names = [f"{n}{suffix or ''}" for n in ("fifo", "to_fifo", "zero")]
    code = f"from pathlib import Path\n{imports}\n{REFUSED}\n" + "".join(
        f"refused(read, Path({str(hostile / n)!r}), {kind!r})\n"
        for n, kind in zip(names, ("FIFO", "FIFO", "character device"), strict=True)
    )
    assert _in_subprocess(code).split() == ["refused"] * 3


def test_a_run_directorys_files_and_owned_list_never_block(hostile):
    run = hostile / "run"
    store.write_run(run, "n = 1\n", {}, {"x": [1.0]})
    os.replace(run / store.OWNED_FILE, run / "kept")
    os.mkfifo(run / store.OWNED_FILE)
    code = f"""
    from attnflow.experiments.results import rundir
    print(sorted(rundir.owned_files({str(run)!r})))
    """
    assert _in_subprocess(code).strip() == repr([store.OWNED_FILE])  # a pipe claims nothing


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_stored_programs_that_are_pipes_or_devices_are_skipped(hostile):
    """An entry, a refusal marker and an eviction candidate that are pipes or links to /dev/zero: not read."""
    cache = hostile / "programs"
    cache.mkdir()
    os.mkfifo(cache / f"{'a' * 40}.jaxexport")
    os.symlink("/dev/zero", cache / f"{'b' * 40}.jaxexport")
    os.mkfifo(cache / f"{'c' * 40}.traced")
    code = f"""
    from pathlib import Path
    from attnflow.solvers import programs
    cache = Path({str(cache)!r})
    program = programs.Program(lambda x: x)
    print(program.load(cache / "{"a" * 40}.jaxexport", "0" * 64))
    print(program.load(cache / "{"b" * 40}.jaxexport", "0" * 64))
    print(programs.Refusal.holds(cache / "{"c" * 40}.traced"))
    programs.evict(cache, 0)
    print(sorted(p.name for p in cache.iterdir()) == sorted({sorted(p.name for p in cache.iterdir())!r}))
    """
    assert _in_subprocess(code).split() == ["None", "None", "None", "True"]


def test_the_shared_reader_bounds_the_size(tmp_path):
    big = tmp_path / "big.toml"
    big.write_bytes(b"a = 1\n" * 100)
    with pytest.raises(ValueError, match=r"holds 600 bytes, more than the 100 bytes"):
        files.read_regular(big, "config file 'big.toml'", limit=100)
    assert files.read_regular(big, "config file", limit=600) == b"a = 1\n" * 100


# -- deep nesting ------------------------------------------------------------------------------------


def test_a_toml_nested_5000_deep_is_one_line_naming_the_nesting(tmp_path):
    deep = "a = " + "[" * 5000 + "]" * 5000 + "\n"
    path = tmp_path / "deep.toml"
    path.write_text(deep)
    for read in (lambda: read_toml_file(path), lambda: read_source(deep)):
        with pytest.raises(ConfigError, match="nested too deeply") as err:
            read()
        assert "\n" not in str(err.value) and "recursion" not in str(err.value)
    rc, out, err = cli(["run", path, "--quiet"])
    assert rc == 2 and err.count("\n") == 1 and "nested too deeply" in err


def test_a_run_directory_file_nested_5000_deep_is_a_store_error(tmp_path):
    run = tmp_path / "run"
    store.write_run(run, "n = 1\n", {}, {"x": [1.0]})
    (run / store.SUMMARY_FILE).write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(store.StoreError, match="nested too deeply"):
        store.read_summary(run / store.SUMMARY_FILE)
