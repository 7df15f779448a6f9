"""The path a run is written to: the one refusal of an output path, before any work and when a run commits.

Every command that writes a run (``run``, ``sweep``, ``hist``, ``fit``, ``probe``) asks :func:`check_target` about
the user's ``--out`` before anything is computed, and ``store.write_run`` asks it again when it renames the finished
run into place: a link, a file, a directory holding anything but an attnflow run, a run holding files attnflow did
not write, an existing run (unless replaced on request), names the file system cannot hold, and a place that cannot
be written are refused in one line. Every check of an output path is here; ``rundir`` answers what a directory
holds (``is_run``, ``owned_files``) and which names the store takes (``check_entry_name``), and never asks back.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .rundir import OWNED_FILE, RUN_FILES, StoreError, check_entry_name, is_run, owned_files

__all__ = ["output_path", "check_name_lengths", "check_target", "unowned_run_files"]


def output_path(given: str | None, default: str) -> Path:
    """The directory of ``--out`` (``default`` when the flag is absent); an empty ``--out`` is refused
    rather than taken for the default."""
    if given is None:
        return Path(default)
    if not given.strip():
        raise StoreError(f"--out {given!r} is empty: give a directory, or leave --out out to write to {default}")
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


# ``write_run`` builds a run under the hidden sibling ".NAME.tmp-<pid>-<8 hex>": room for it
_TEMPORARY_NAME_BYTES = 32
# what a sweep or a run adds below --out ("/RUN-NAME__HASH/.attnflow.json.tmp-..."): room for it
_INNER_PATH_BYTES = 256


def check_name_lengths(out: Path, given: str | None = None) -> None:
    """Refuse an ``--out`` the file system cannot name (ENAMETOOLONG), leaving room for attnflow's
    temporary names; ``given`` is how the user wrote it."""
    given = str(out) if given is None else given
    out = Path(os.path.abspath(out))
    name_max, path_max = _name_limits(out)
    for part in out.parts[1:]:
        room = name_max - (_TEMPORARY_NAME_BYTES if part == out.name else 0)
        if len(os.fsencode(part)) > room:
            raise StoreError(
                f"--out {_short(given)!r}: the name {_short(part)!r} has {len(os.fsencode(part))} "
                f"bytes; this file system allows {name_max} ({room} for the run's own name, which "
                "attnflow first writes under a longer temporary one): give a shorter --out"
            )
    if len(os.fsencode(str(out))) + _INNER_PATH_BYTES > path_max:
        raise StoreError(
            f"--out {_short(given)!r}: the path has {len(os.fsencode(str(out)))} bytes; this file "
            f"system allows {path_max} (less {_INNER_PATH_BYTES} for the files inside): give a "
            "shorter --out"
        )


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_target(
    out: str | os.PathLike, *, overwrite: bool = False, flag: str = "overwrite=True", user: bool = False
) -> None:
    """Refuse a path that cannot become this run's directory: a link, a file, a directory holding anything but
    an attnflow run, a run holding files attnflow did not write (its own would replace them), or, unless
    ``overwrite``, an existing run. ``flag`` names the remedy (``--overwrite`` on the command line).

    ``user``: the path is the user's ``--out``, refused before any work: besides, a NUL or a name the store
    refuses, names the file system cannot hold, and a place that cannot be created or written. Every command
    that writes a run (``run``, ``sweep``, ``hist``, ``fit``) asks here, and ``write_run`` asks again when
    it commits."""
    given = os.fsdecode(out)
    if user and "\0" in given:
        raise StoreError(f"--out {given!r} contains a NUL character")
    out = Path(os.path.abspath(out)) if user else Path(out)
    subject, other = (f"--out {given!r}", "--out") if user else (f"cannot write run {out}: it", "directory")
    if user:
        check_entry_name("--out directory", out.name)  # what the store would refuse after the run
        check_name_lengths(out, given)
    try:
        _check_place(out, subject, other, overwrite, flag, f"--out {given!r}" if user else str(out))
        if user:
            _check_parent(out)
    except StoreError:
        raise
    except OSError as err:
        raise StoreError(f"{subject.removesuffix(': it')}: {err.strerror or err}") from None


def _check_place(out: Path, subject: str, other: str, overwrite: bool, flag: str, name: str) -> None:
    if not os.path.lexists(out):
        return
    if out.is_symlink():
        raise StoreError(
            f"{subject} is a symbolic link (to {os.readlink(out)!r}); attnflow writes only into real "
            f"directories: give the directory itself, or another {other}"
        )
    if not out.is_dir():
        raise StoreError(f"{subject} is a file, not a directory")
    if is_run(out):
        theirs = unowned_run_files(out)
        if theirs:
            raise StoreError(
                f"{subject} holds {theirs[0]!r}, which attnflow did not write (its {OWNED_FILE} does "
                f"not list it), and attnflow never replaces a file of yours: move it away, or choose "
                f"another {other}"
            )
        if not overwrite:
            raise StoreError(
                f"{name} already holds an attnflow run; pass {flag} to replace it (files attnflow did "
                f"not write are kept), or choose another {other}"
            )
        return
    if any(out.iterdir()):
        raise StoreError(
            f"{subject} is a non-empty directory that is not an attnflow run; refusing to replace it: "
            f"choose another {other}"
        )


def unowned_run_files(directory: str | os.PathLike) -> list[str]:
    """The run files (config.toml, summary.json, results.npz) present in ``directory`` that attnflow did
    not write: a new run there would have to replace them, which it never does."""
    p = Path(directory)
    owned = owned_files(p)
    return [name for name in RUN_FILES if os.path.lexists(p / name) and name not in owned]


def _check_parent(out: Path) -> None:
    """The directory that will hold ``out`` can be created and written (tried: permissions do not tell all)."""
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise StoreError(f"cannot create {str(out)!r}: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"cannot write to {str(parent)!r} (permission denied)")
    # read-only mounts, root on special file systems: try
    probe = parent / f".attnflow-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe)
    except OSError as err:
        raise StoreError(f"cannot write to {str(parent)!r} ({err.strerror or err})") from None
    os.rmdir(probe)
