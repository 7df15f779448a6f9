"""Results on disk: one directory per run, a sweep as a directory of runs plus ``manifest.json``.

A run directory holds::

    config.toml    the resolved configuration (experiments.config.to_toml)
    summary.json   the summary object of the --json contract (NaN and inf written as null)
    results.npz    numeric arrays; the string entry ``__dims__`` (JSON) names their dimensions
    *.png          figures, optional
    .attnflow.json the names of the files above: what attnflow wrote, and so all it may replace

Nothing else in a run directory is attnflow's: a file a user puts there (notes, their own plots)
is never replaced or removed, by ``write_run(..., overwrite=True)`` or :func:`remove_run` either.
An existing run is replaced only when asked (``overwrite=True``).

:func:`write_run` builds the directory under a temporary sibling name and renames it into place only
when every file is written and synced, so a crash or Ctrl-C never leaves a half-written run and a
resumed sweep can trust :func:`is_complete`. :func:`load` reads a run or a whole sweep back as an
``xarray.Dataset`` with named dimensions, never unpickling anything.

Reading lives in ``rundir`` (files) and ``dataset`` (``load``); their public names are importable
from here too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import secrets
import shutil
import tomllib
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...particles.files import open_regular, read_regular
from .dataset import load
from .rundir import (
    CONFIG_FILE,
    DIMS_KEY,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    OWNED_FILE,
    OWNED_FORMAT,
    RESULTS_FILE,
    STATUSES,
    SUMMARY_FILE,
    RunFiles,
    StoreError,
    check_entry_name,
    command_of,
    foreign_files,
    is_complete,
    is_run,
    jsonable,
    owned_files,
    parse_dims,
    read_arrays,
    read_config,
    read_manifest,
    read_run,
    read_summary,
    validate_manifest,
)
from .target import check_target, unowned_run_files

__all__ = [
    "StoreError",
    "CONFIG_FILE",
    "SUMMARY_FILE",
    "RESULTS_FILE",
    "MANIFEST_FILE",
    "DIMS_KEY",
    "STATUSES",
    "OWNED_FILE",
    "RunFiles",
    "write_run",
    "is_complete",
    "is_run",
    "owned_files",
    "foreign_files",
    "unowned_run_files",
    "record_files",
    "remove_run",
    "remove_stale_temporaries",
    "TEMPORARY_MARKER",
    "check_entry_name",
    "jsonable",
    "read_config",
    "command_of",
    "read_summary",
    "read_arrays",
    "read_run",
    "write_manifest",
    "read_manifest",
    "run_name",
    "load",
]

_NUMERIC_KINDS = "biufc"  # bool, signed, unsigned, float, complex: what np.load reads without pickle
_MAX_NAME = 100


# --------------------------------------------------------------------------------------------
# Writing files


def _fsync_dir(path: Path) -> None:
    """Sync a directory entry so renames inside it survive a power cut (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write a compressed .npz that ``np.load`` reads (the format of ``np.savez_compressed``).

    Written by hand because ``np.savez_compressed(f, **arrays)`` rejects arrays named ``file`` or
    ``allow_pickle``, and to pass ``allow_pickle=False`` so nothing can be pickled by accident.
    """
    with open(path, "xb") as f:
        with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
            for name, arr in arrays.items():
                with zf.open(name + ".npy", mode="w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())


def _temp_name(name: str, tag: str) -> str:
    return f".{name}.{tag}-{os.getpid()}-{secrets.token_hex(4)}"


_TEMP = re.compile(r"^\..+\.(tmp|old)-(\d+)-[0-9a-f]{8}$")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


TEMPORARY_MARKER = ".attnflow-temporary"
"""The file attnflow writes first into a temporary run directory (and into a replaced run's before it is
removed): what makes a directory named like a temporary attnflow's, and so removable once its process is gone."""
TEMPORARY_FORMAT = "attnflow-temporary"
_TEMPORARY_FILES = (
    b'{\n "format": "' + OWNED_FORMAT.encode() + b'"',
    b'{\n  "format": "' + MANIFEST_FORMAT.encode() + b'"',
)  # how the temporaries of the list of attnflow's files and of a manifest begin, as attnflow writes them


def _marker_text(directory: Path) -> bytes:
    return f"{TEMPORARY_FORMAT} {directory.name}\n".encode()


def _mark(directory: Path) -> None:
    """Mark ``directory`` (a temporary, or a replaced run about to go) as attnflow's to remove."""
    with open(directory / TEMPORARY_MARKER, "wb") as f:
        f.write(_marker_text(directory))


def _finished_temporary(entry: Path) -> bool:
    """Whether ``entry``, a temporary run directory (``.NAME.tmp-…``) past its marker, is a whole run of attnflow's:
    its list of attnflow's files names every entry it holds (the list is written before the marker goes)."""
    if ".tmp-" not in entry.name:
        return False  # a replaced run (.NAME.old-…) without its marker may be the only copy of the results: kept
    owned = owned_files(entry)
    return len(owned) > 1 and all(inner.name in owned for inner in entry.iterdir())


def _marked(entry: Path) -> bool:
    """Whether attnflow wrote the temporary ``entry``: a directory holding its marker (naming the directory) or,
    once its marker is gone, a finished run's list of files naming everything in it, or a file that begins as
    attnflow's list of files or manifest does. Never by the name alone."""
    if entry.is_symlink():
        return False
    try:
        if entry.is_dir():
            if not os.path.lexists(entry / TEMPORARY_MARKER):
                return _finished_temporary(entry)
            data = read_regular(entry / TEMPORARY_MARKER, "marker", limit=4096, error=OSError)
            return data == _marker_text(entry)
        with open_regular(entry, "temporary", error=OSError) as f:
            head = f.read(max(len(t) for t in _TEMPORARY_FILES))
    except OSError:
        return False
    return head.startswith(_TEMPORARY_FILES)


def _remove_temporary(entry: Path) -> None:
    """Remove a marked temporary, its marker last: an interruption leaves it marked, for a later pass."""
    if not entry.is_dir():
        entry.unlink(missing_ok=True)
        return
    for inner in entry.iterdir():
        if inner.name != TEMPORARY_MARKER:
            _remove_entry(inner)
    (entry / TEMPORARY_MARKER).unlink(missing_ok=True)
    os.rmdir(entry)


def remove_stale_temporaries(directory: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove the temporary run directories and manifests that a killed process left in ``directory``
    (those of the run ``name`` only, if given).

    Only attnflow's own temporaries are touched: named ``.NAME.tmp-<pid>-<hex>`` or ``.NAME.old-<pid>-<hex>``,
    of a process no longer running, and marked as attnflow's inside (a directory holding its
    ``TEMPORARY_MARKER``, a file beginning as attnflow's list of files or manifest do): a folder or file
    of the user's with such a name is kept. Returns what was removed."""
    removed: list[Path] = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if m is None or (name is not None and not entry.name.startswith(f".{name}.")):
            continue
        if _alive(int(m.group(2))) or not _marked(entry):
            continue
        try:
            _remove_temporary(entry)
        except OSError:
            continue
        removed.append(entry)
    return removed


# --------------------------------------------------------------------------------------------
# Runs


def _owned_text(names) -> bytes:
    return (json.dumps({"format": OWNED_FORMAT, "files": sorted(names)}, indent=1) + "\n").encode("utf-8")


def _write_owned(directory: Path, names) -> None:
    """Write ``directory/.attnflow.json`` atomically (a temporary name, then ``os.replace``)."""
    tmp = directory / _temp_name(OWNED_FILE.lstrip("."), "tmp")
    try:
        _write_file(tmp, _owned_text(names))
        os.replace(tmp, directory / OWNED_FILE)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and not isinstance(err, StoreError):
            raise StoreError(f"cannot write {directory / OWNED_FILE}: {err.strerror or err}") from err
        raise


def record_files(directory: str | os.PathLike, names: Sequence[str]) -> None:
    """Add ``names`` (files attnflow just wrote in ``directory``, figures say) to its list of attnflow's files."""
    p = Path(directory)
    present = {name for name in owned_files(p) - {OWNED_FILE} if os.path.lexists(p / name)}
    _write_owned(p, present | {check_entry_name("file", n) for n in names})


def _remove_entry(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def remove_run(run_dir: str | os.PathLike) -> list[str]:
    """Remove the files attnflow wrote in ``run_dir`` (and the directory, once empty); return the
    names of the files it keeps because attnflow did not write them."""
    p = Path(run_dir)
    if not is_run(p):
        raise StoreError(f"{p} is not an attnflow run; nothing removed")
    kept = foreign_files(p)
    owned = owned_files(p)
    if CONFIG_FILE in owned and (p / CONFIG_FILE).is_file():
        os.unlink(p / CONFIG_FILE)  # first: from here on it is no longer a complete run
    for name in sorted(owned - {CONFIG_FILE, OWNED_FILE}):
        _remove_entry(p / name)
    if kept:
        return kept
    _remove_entry(p / OWNED_FILE)
    os.rmdir(p)
    return kept


def _prepare_arrays(
    arrays: Mapping[str, Any], dims: Mapping[str, Sequence[str]] | None, summary: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """Check arrays and dimension names before anything touches the disk; add ``__dims__``."""
    if not isinstance(arrays, Mapping):
        raise StoreError(f"arrays must be a dict of name → array, got {type(arrays).__name__}")
    out: dict[str, np.ndarray] = {}
    all_dims: dict[str, list[str]] = {}
    for name, value in arrays.items():
        check_entry_name("array", name)
        if name == DIMS_KEY:
            all_dims.update(parse_dims(value, f"arrays[{DIMS_KEY!r}]"))
            continue
        if name.startswith("__"):
            raise StoreError(f"array name {name!r} is reserved (names starting with '__')")
        arr = np.asarray(value)
        if arr.dtype.kind not in _NUMERIC_KINDS:
            raise StoreError(
                f"array {name!r} has dtype {arr.dtype}; results.npz stores only numeric and bool arrays "
                f"(no objects, strings or pickles)"
            )
        out[name] = arr
    if dims is not None:
        all_dims.update(parse_dims(dims, "dims"))
    sizes: dict[str, tuple[int, str]] = {}
    times = summary.get("times") if isinstance(summary, Mapping) else None
    if isinstance(times, (list, tuple, np.ndarray)):
        sizes["time"] = (len(times), "summary['times']")
    for name, names in all_dims.items():
        if name not in out:
            raise StoreError(f"dimension names are given for {name!r}, which is not among the arrays")
        arr = out[name]
        if len(names) != arr.ndim:
            raise StoreError(f"array {name!r} has {arr.ndim} dimensions {arr.shape} but {len(names)} names {names}")
        for dim, size in zip(names, arr.shape):
            prev = sizes.setdefault(dim, (size, f"array {name!r}"))
            if prev[0] != size:
                raise StoreError(f"dimension {dim!r} has size {size} in array {name!r} but {prev[0]} in {prev[1]}")
    if all_dims:
        out[DIMS_KEY] = np.array(json.dumps(all_dims))
    return out


def _existing_ancestors(parent: Path) -> list[Path]:
    """The missing directories above a run, outermost first; StoreError if a file is in the way."""
    missing = []
    p = parent
    while not p.exists():
        if p.is_symlink():
            raise StoreError(f"cannot create {parent}: {p} is a broken symbolic link")
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise StoreError(f"cannot write a run under {parent}: {p} is a file, not a directory")
    return list(reversed(missing))


def write_run(
    out_dir: str | os.PathLike,
    config_toml: str,
    summary: Mapping[str, Any],
    arrays: Mapping[str, Any],
    figures: Mapping[str, Callable[[Path], Any]] | None = None,
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    overwrite: bool = False,
) -> Path:
    """Write a complete run directory atomically and return its path.

    ``config_toml`` is the resolved configuration as TOML text; ``summary`` the summary object
    (NaN/inf become null); ``arrays`` numeric or bool arrays for results.npz, optionally with a
    ``__dims__`` entry (``np.array(json.dumps({name: [dim, ...]}))``) or the ``dims`` mapping naming
    their dimensions; ``figures`` maps a name to a callable that writes a PNG at the path it is
    given (``NAME.png``).

    Everything is written and fsynced in a temporary sibling directory ``.NAME.tmp-<pid>-<hex>``, marked
    as attnflow's (``TEMPORARY_MARKER``) while it is incomplete, then renamed to ``out_dir``; the marked
    temporaries of this name that killed processes left are removed first. An empty directory at
    ``out_dir`` is filled; an existing run is an error unless ``overwrite`` is true, and then only the files attnflow wrote there (its
    ``.attnflow.json``) are replaced or removed: a file a user added is kept (and one the new run
    would write over is an error). Any other existing path is left alone and is an error. On any
    exception, Ctrl-C included, the temporary directory (and parent directories this call created)
    are removed.
    Disk problems are raised as StoreError; exceptions from figure callables propagate unchanged.
    """
    out = Path(os.path.abspath(os.fspath(out_dir)))
    if out.name in ("", ".", "..") or out.parent == out:
        raise StoreError(f"cannot write a run at {str(out_dir)!r}: give a directory name")
    check_entry_name("run directory", out.name)  # also keeps clear of the hidden temporary names
    # Everything that can be checked without the disk is checked first, so a bad call writes nothing.
    if not isinstance(config_toml, str):
        raise StoreError(f"config_toml must be TOML text (a str), got {type(config_toml).__name__}")
    try:
        tomllib.loads(config_toml)
    except tomllib.TOMLDecodeError as err:
        raise StoreError(f"config_toml is not valid TOML: {err}") from None
    if not isinstance(summary, Mapping):
        raise StoreError(f"summary must be a dict, got {type(summary).__name__}")
    summary_text = json.dumps(jsonable(summary, "summary"), indent=2, allow_nan=False) + "\n"
    prepared = _prepare_arrays(arrays, dims, summary)
    figures = dict(figures or {})
    for name, fn in figures.items():
        check_entry_name("figure", name)
        if name.removesuffix(".png") in ("config", "summary", "results"):
            raise StoreError(f"figure name {name!r} is reserved")
        if not callable(fn):
            raise StoreError(f"figure {name!r} must be a callable that writes a PNG at a path, got {fn!r}")
    check_target(out, overwrite=overwrite)

    parent = out.parent
    created: list[Path] = []
    tmp: Path | None = None
    try:
        for d in _existing_ancestors(parent):
            os.mkdir(d)
            created.append(d)
        remove_stale_temporaries(parent, out.name)  # what a killed run of this name left
        if out.is_dir() and not out.is_symlink():
            remove_stale_temporaries(out)  # and inside the run it replaces (its list of files, cut short)
        tmp = parent / _temp_name(out.name, "tmp")
        os.mkdir(tmp)
        _mark(tmp)
        _write_file(tmp / CONFIG_FILE, config_toml.encode("utf-8"))
        _write_file(tmp / SUMMARY_FILE, summary_text.encode("utf-8"))
        _write_npz(tmp / RESULTS_FILE, prepared)
        for name, fn in figures.items():
            path = tmp / (name if name.endswith((".png", ".gif")) else f"{name}.png")
            fn(path)
            if not path.is_file():
                raise StoreError(f"figure {name!r} wrote nothing at {path.name}")
            _fsync_file(path)
        # the list of the run's files before the marker goes: at every instant one of them marks it as attnflow's
        _write_file(tmp / OWNED_FILE, _owned_text(set(os.listdir(tmp)) - {TEMPORARY_MARKER}))
        os.unlink(tmp / TEMPORARY_MARKER)  # the run's own files only, from here on
        _fsync_dir(tmp)
        _commit(tmp, out, overwrite)
    except BaseException as err:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)  # this process's own: the marker's name is its own
        for d in reversed(created):
            try:
                os.rmdir(d)
            except OSError:
                break
        if isinstance(err, OSError) and not isinstance(err, StoreError):
            raise StoreError(f"cannot write run {out}: {err.strerror or err}") from err
        raise
    return out


def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished temporary directory to ``out``, replacing (``overwrite``) an old run's files."""
    check_target(out, overwrite=overwrite)
    if not os.path.lexists(out):
        os.rename(tmp, out)
    elif not is_run(out):
        os.rmdir(out)  # an empty directory, e.g. made by the user for --out
        os.rename(tmp, out)
    else:
        kept = foreign_files(out)
        new = set(os.listdir(tmp))
        clash = sorted(new & set(kept))
        if clash:
            raise StoreError(
                f"cannot replace run {out}: it holds {clash[0]!r}, which attnflow did not write and "
                f"the new run would write over; move it away or choose another directory"
            )
        if kept:
            _replace_in_place(tmp, out, new)
        else:
            old = out.parent / _temp_name(out.name, "old")
            os.rename(out, old)
            try:
                os.rename(tmp, out)
            except BaseException:
                os.rename(old, out)  # put the previous run back rather than leave nothing
                raise
            try:
                _mark(old)  # replaced: a later pass may finish its removal
            except OSError:
                pass
            shutil.rmtree(old, ignore_errors=True)
    _fsync_dir(out.parent)


def _replace_in_place(tmp: Path, out: Path, new: set[str]) -> None:
    """Replace attnflow's files in ``out`` by those of ``tmp`` one by one, keeping the user's files.

    Not atomic, but never unsafe: the list of attnflow's files first covers old and new ones, and
    config.toml goes first and comes back last, so an interruption leaves an incomplete run (that
    a later ``overwrite`` replaces) and every file of the user's in place."""
    old = owned_files(out) - {OWNED_FILE}
    _write_owned(out, {name for name in old if os.path.lexists(out / name)} | (new - {OWNED_FILE}))
    if (out / CONFIG_FILE).is_file():
        os.unlink(out / CONFIG_FILE)
    for name in sorted(new - {CONFIG_FILE, OWNED_FILE}):
        if (out / name).is_dir() and not (out / name).is_symlink():
            shutil.rmtree(out / name)
        os.replace(tmp / name, out / name)
    for name in sorted(old - new):
        _remove_entry(out / name)
    os.replace(tmp / OWNED_FILE, out / OWNED_FILE)
    os.replace(tmp / CONFIG_FILE, out / CONFIG_FILE)
    os.rmdir(tmp)
    _fsync_dir(out)


# --------------------------------------------------------------------------------------------
# Sweeps


def write_manifest(sweep_dir: str | os.PathLike, axes: Mapping[str, Sequence], runs: Sequence[Mapping]) -> Path:
    """Write ``sweep_dir/manifest.json`` atomically (temporary file, fsync, ``os.replace``).

    ``axes`` maps each grid key to its values in grid order; each run is
    ``{"name": dirname, "point": {key: value}, "status": "pending" | "done" | "failed"}`` (other
    fields are kept). Creates ``sweep_dir`` if needed. Returns the manifest's path.
    """
    sweep = Path(sweep_dir)
    axes_out, runs_out = validate_manifest(axes, runs, "manifest")
    doc = {"format": MANIFEST_FORMAT, "version": 1, "axes": axes_out, "runs": runs_out}
    text = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    path = sweep / MANIFEST_FILE
    tmp = sweep / _temp_name(MANIFEST_FILE, "tmp")
    try:
        sweep.mkdir(parents=True, exist_ok=True)
        _write_file(tmp, text.encode("utf-8"))
        os.replace(tmp, path)
        _fsync_dir(sweep)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError) and not isinstance(err, StoreError):
            raise StoreError(f"cannot write {path}: {err.strerror or err}") from err
        raise
    return path


_SAFE_TEXT = re.compile(r"[A-Za-z0-9.+-]+")
_SAFE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def _name_value(v: Any) -> str | None:
    """``v`` as directory-name text that no other value shares, or None when that is not possible.

    Numbers and booleans render as TOML does; strings only when they are plain and would not read
    as another type; lists as comma-joined elements (a one-element list ends in a comma).
    """
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else None
    if isinstance(v, str):
        if not _SAFE_TEXT.fullmatch(v):
            return None
        try:
            parsed = tomllib.loads(f"v = {v}").get("v")
        except tomllib.TOMLDecodeError:
            return v
        return v if isinstance(parsed, str) else None  # "2", "true", "1e3" would collide with numbers
    if isinstance(v, (list, tuple)) and v:
        items = [_name_value(x) if not isinstance(x, (list, tuple)) else None for x in v]
        named = [x for x in items if x is not None]
        if len(named) < len(items):
            return None
        return ",".join(named) + ("," if len(named) == 1 else "")
    return None


def run_name(point: Mapping[str, Any]) -> str:
    """A deterministic, filesystem-safe directory name for a grid point, e.g. ``beta=0.1_d=8``.

    Keys are sorted, so the name does not depend on the order of the --grid options. Distinct
    points get distinct names: when a value has no unambiguous plain rendering (free text, nested
    lists, NaN) or the name would exceed 100 characters, a hash of the point is appended
    (``...__<10 hex>``).
    """
    if not isinstance(point, Mapping):
        raise StoreError(f"a grid point is a dict of key → value, got {point!r}")
    if not point:
        return "run"
    parts, exact = [], True
    for k in sorted(point, key=str):
        text = _name_value(point[k])
        if text is None or not isinstance(k, str) or not _SAFE_KEY.fullmatch(k):
            exact = False
            text = text if text is not None else str(point[k])
        parts.append(f"{k}={text}")
    name = "_".join(parts)
    if exact and len(name) <= _MAX_NAME:
        return name
    canonical = json.dumps(jsonable(dict(point), "point"), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha1(canonical.encode("utf-8")).hexdigest()[:10]
    readable = re.sub(r"[^A-Za-z0-9.+=,_-]", "-", name).lstrip(".")[: _MAX_NAME - len(digest) - 2]
    return f"{readable}__{digest}"
