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
from .config import shorten

__all__ = ["output_path", "check_name_lengths", "check_writable", "write_figures", "write_selected_figures", "format_number"]

# ``store.write_run`` builds a run under the hidden sibling ".NAME.tmp-<pid>-<8 hex>": room for it
_TEMPORARY_NAME_BYTES = 32
# what a sweep or a run adds below --out ("/RUN-NAME__HASH/.attnflow.json.tmp-..."): room for it
_INNER_PATH_BYTES = 256


def format_number(value, digits: int = 3) -> str:
    """A value as a report prints it: ``digits`` significant digits, in plain decimals from 10⁻³ to 10⁵
    ("2228", "12.3", "0.00123"), in scientific notation beyond ("2.23e+14", "4.1e-07")."""
    value = float(value)
    text = f"{value:.{digits}g}"
    magnitude = abs(value)
    if "e" in text and 1e-3 <= magnitude < 1e5:  # what %g would write in exponent form below 10⁵
        text = f"{value:.{max(digits - 1 - math.floor(math.log10(magnitude)), 0)}f}"
    return text


def output_path(given: str | None, default: str) -> Path:
    """The directory of ``--out`` (``default`` when the flag is absent); an empty ``--out`` is refused
    rather than taken for the default."""
    if given is None:
        return Path(default)
    if not given.strip():
        raise ValueError(f"--out {given!r} is empty: give a directory, or leave --out out to write to {default}")
    return Path(given)


def _name_limits(out: Path) -> tuple[int, int]:
    """The longest file name and path of the file system that would hold ``out`` (POSIX minimums where unknown)."""
    existing = out.parent
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    limits = []
    for name, fallback in (("PC_NAME_MAX", 255), ("PC_PATH_MAX", 4096)):
        try:
            limits.append(os.pathconf(existing, name))
        except (OSError, ValueError):
            limits.append(fallback)
    return limits[0], limits[1]


def check_name_lengths(out: Path, given: str | None = None) -> None:
    """Refuse an ``--out`` the file system cannot name (ENAMETOOLONG), leaving room for attnflow's
    temporary names; ``given`` is how the user wrote it."""
    given = str(out) if given is None else given
    out = Path(os.path.abspath(out))
    name_max, path_max = _name_limits(out)
    for part in out.parts[1:]:
        room = name_max - (_TEMPORARY_NAME_BYTES if part == out.name else 0)
        if len(os.fsencode(part)) > room:
            raise ValueError(f"--out {shorten(given)!r}: the name {shorten(part)!r} has {len(os.fsencode(part))} "
                             f"bytes; this file system allows {name_max} ({room} for the run's own name, which "
                             "attnflow first writes under a longer temporary one): give a shorter --out")
    if len(os.fsencode(str(out))) + _INNER_PATH_BYTES > path_max:
        raise ValueError(f"--out {shorten(given)!r}: the path has {len(os.fsencode(str(out)))} bytes; this file "
                         f"system allows {path_max} (less {_INNER_PATH_BYTES} for the files inside): give a "
                         "shorter --out")


def check_writable(out: Path, *, overwrite: bool = False) -> None:
    """Refuse, before any work, an output path that cannot become a run directory: a name too long, a
    file, a link, a directory holding anything but an attnflow run, a run holding files attnflow did
    not write where it would write its own, or (unless ``overwrite``) an existing run."""
    if "\0" in str(out):
        raise ValueError(f"--out {str(out)!r} contains a NUL character")
    given = str(out)
    out = Path(os.path.abspath(out))
    store.check_entry_name("--out directory", out.name)  # what the store would refuse after the run
    check_name_lengths(out, given)
    try:
        _check_place(given, out, overwrite)
    except OSError as err:
        if isinstance(err, ValueError):  # a StoreError says it all
            raise
        raise ValueError(f"--out {shorten(given)!r}: {err.strerror or err}") from None


def _check_place(given: str, out: Path, overwrite: bool) -> None:
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
    """Draw figures into ``directory`` and add them to the directory's list of attnflow's files.

    Every figure is drawn to a temporary name first; only when all are drawn are they renamed into
    place, so a failure (a full disk: a StoreError naming the file and the OS error) leaves the
    directory as it was, temporaries removed. A file of the same name that attnflow did not write is
    never replaced: it is an error, before anything is drawn."""
    targets = {name: directory / (name if name.endswith((".png", ".gif")) else f"{name}.png") for name in writers}
    owned = store.owned_files(directory)
    for target in targets.values():
        if os.path.lexists(target) and target.name not in owned:
            raise ValueError(f"{str(target)!r} was not written by attnflow; move it away to draw this figure")
    drawn: dict[Path, Path] = {}
    try:
        for name, draw in writers.items():
            target = targets[name]
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}{target.suffix}")
            drawn[target] = tmp
            try:
                draw(tmp)
            except OSError as err:
                raise store.StoreError(f"cannot write {target}: {err.strerror or err}") from err
        for target, tmp in drawn.items():
            os.replace(tmp, target)
    finally:
        for tmp in drawn.values():
            tmp.unlink(missing_ok=True)
    if drawn:
        store.record_files(directory, [target.name for target in drawn])
    return list(drawn)
