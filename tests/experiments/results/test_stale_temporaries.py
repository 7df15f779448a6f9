"""What a killed ``write_run`` leaves is removed by the next run of that name: its temporary directory at every
instant of its writing (marked, or listed whole by its list of files once the marker is gone), and the list of
files cut short inside a run it was replacing; a replaced run that was never marked is kept."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from attnflow.experiments.results import store
from attnflow.experiments.results.rundir import OWNED_FILE, OWNED_FORMAT

CONFIG = "n = 4\nd = 3\n"


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def write(out, **kwargs):
    return store.write_run(out, CONFIG, {"ok": True}, {"x": np.arange(3.0)}, **kwargs)


def finished_temporary(parent, name: str, pid: int):
    """A run written whole into its temporary, the marker already gone: a kill just before the rename."""
    tmp = parent / f".{name}.tmp-{pid}-0123abcd"
    tmp.mkdir()
    files = ["config.toml", "summary.json", "results.npz"]
    for f in files:
        (tmp / f).write_text("x")
    (tmp / OWNED_FILE).write_text(json.dumps({"format": OWNED_FORMAT, "files": files}, indent=1) + "\n")
    return tmp


def test_a_temporary_past_its_marker_is_removed_by_the_next_run(tmp_path):
    pid = dead_pid()
    tmp = finished_temporary(tmp_path, "r", pid)
    write(tmp_path / "r")
    assert not tmp.exists() and (tmp_path / "r" / "summary.json").is_file()


def test_a_temporary_holding_a_file_its_list_does_not_name_is_kept(tmp_path):
    pid = dead_pid()
    tmp = finished_temporary(tmp_path, "r", pid)
    (tmp / "notes.txt").write_text("mine")  # not attnflow's by its own list: the directory is not all attnflow's
    replaced = tmp_path / f".r.old-{pid}-89abcdef"  # a replaced run never marked: possibly the only copy
    replaced.mkdir()
    (replaced / OWNED_FILE).write_text(json.dumps({"format": OWNED_FORMAT, "files": []}) + "\n")
    write(tmp_path / "r")
    assert (tmp / "notes.txt").read_text() == "mine" and replaced.is_dir()


def test_the_list_of_files_cut_short_inside_a_replaced_run_is_removed(tmp_path):
    out = write(tmp_path / "r")
    cut = out / f".attnflow.json.tmp-{dead_pid()}-0123abcd"
    cut.write_text('{\n "format": "' + OWNED_FORMAT + '", "fi')
    (out / "mine.txt").write_text("kept")  # a user's file: the run is replaced in place, around it
    write(out, overwrite=True)
    assert not cut.exists() and (out / "mine.txt").read_text() == "kept"
