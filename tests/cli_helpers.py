"""Helpers shared by the command-line tests: run ``attnflow`` in-process, snapshot a directory tree."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

from attnflow.experiments.commands.cli import main

SMALL = """\
model = "sa"
n = 6
d = 3
beta = [1.0, 3.0]
seeds = 2
t1 = 2.0
n_save = 5
solver = "rk4"
dt = 0.05
"""
"""A small run (6 tokens in R^3, 2 β × 2 seeds, RK4 to t = 2): a second or two, compiled."""


def cli(argv) -> tuple[int, str, str]:
    """Run the command line in-process: (exit status, stdout, stderr). argparse's own exits count too."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:  # --version / --help exit through argparse
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return rc, out.getvalue(), err.getvalue()


def tree(root: Path) -> dict[str, tuple]:
    """Every path under root with its kind, size, modification time and inode: a snapshot to compare."""
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            snap[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns, st.st_ino)
    return snap
