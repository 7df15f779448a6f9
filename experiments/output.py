"""Output directories and reports: an ``--out`` refused before any work, figures drawn into a run
directory, numbers as a report prints them.

These serve every command that writes a run (``run``, ``sweep``, ``hist``, ``fit``) or redraws one
(``plot``); what attnflow wrote there is recorded by the store (``.attnflow.json``), so a user's own
files are never replaced.
"""

from __future__ import annotations

import math
import os
import secrets
from pathlib import Path

from . import store

__all__ = ["check_writable", "write_figures", "write_selected_figures", "format_number"]


def format_number(value, digits: int = 3) -> str:
    """A value as a report prints it: ``digits`` significant digits, in plain decimals from 10⁻³ to 10⁵
    ("2228", "12.3", "0.00123"), in scientific notation beyond ("2.23e+14", "4.1e-07")."""
    value = float(value)
    text = f"{value:.{digits}g}"
    magnitude = abs(value)
    if "e" in text and 1e-3 <= magnitude < 1e5:  # what %g would write in exponent form below 10⁵
        text = f"{value:.{max(digits - 1 - math.floor(math.log10(magnitude)), 0)}f}"
    return text


def check_writable(out: Path, *, overwrite: bool = False) -> None:
    """Refuse, before any work, an output path that cannot become a run directory: a file, a link,
    a directory holding anything but an attnflow run, a run holding files attnflow did not write where
    it would write its own, or (unless ``overwrite``) an existing run."""
    if "\0" in str(out):
        raise ValueError(f"--out {str(out)!r} contains a NUL character")
    given = str(out)
    out = Path(os.path.abspath(out))
    store.check_entry_name("--out directory", out.name)  # what the store would refuse after the run
    if out.is_symlink():
        raise ValueError(f"--out {given!r} is a symbolic link (to {os.readlink(out)!r}); attnflow writes only "
                         "into real directories: give the directory itself, or another --out")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {given!r} is a file, not a directory")
    if store.is_run(out):
        theirs = store.unowned_run_files(out)
        if theirs:
            raise ValueError(f"--out {given!r} holds {theirs[0]!r}, which attnflow did not write (its "
                             f"{store.OWNED_FILE} does not list it), and attnflow never replaces a file of yours: "
                             "move it away, or choose another --out")
        if not overwrite:
            raise ValueError(f"--out {given!r} already holds an attnflow run; pass --overwrite to replace it "
                             "(files attnflow did not write are kept), or choose another --out")
    elif out.is_dir() and any(out.iterdir()):
        raise ValueError(f"--out {given!r} is a non-empty directory that is not an attnflow run; "
                         "choose another --out")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"cannot create {str(out)!r}: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write to {str(parent)!r} (permission denied)")
    # permissions do not tell everything (read-only mounts, root on special file systems): try
    probe = parent / f".attnflow-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe)
    except OSError as err:
        raise ValueError(f"cannot write to {str(parent)!r} ({err.strerror or err})") from None
    os.rmdir(probe)


def write_selected_figures(directory: Path, writers: dict, kinds=None) -> list[Path]:
    """``write_figures`` for the figures named in ``kinds`` (with or without ".png"; all when None), refusing
    a name the directory's writers do not have (``attnflow plot DIR --kind NAME``)."""
    if kinds:
        unknown = [k for k in kinds if k.removesuffix(".png") not in writers]
        if unknown:
            raise ValueError(f"unknown figure {unknown[0]!r}; this run has: {', '.join(writers)}")
        writers = {k: w for k, w in writers.items() if k in {x.removesuffix(".png") for x in kinds}}
    return write_figures(Path(directory), writers)


def write_figures(directory: Path, writers: dict) -> list[Path]:
    """Draw figures into ``directory``, each to a temporary name first and renamed when complete,
    and add them to the directory's list of attnflow's files. A file of the same name that attnflow
    did not write is never replaced: it is an error, before anything is drawn."""
    targets = {name: directory / (name if name.endswith((".png", ".gif")) else f"{name}.png") for name in writers}
    owned = store.owned_files(directory)
    for target in targets.values():
        if os.path.lexists(target) and target.name not in owned:
            raise ValueError(f"{str(target)!r} was not written by attnflow; move it away to draw this figure")
    written = []
    for name, draw in writers.items():
        target = targets[name]
        tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
        try:
            draw(tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(target)
        store.record_files(directory, [target.name])
    return written
