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
"""

from __future__ import annotations

import hashlib
import itertools
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

__all__ = [
    "StoreError",
    "CONFIG_FILE",
    "SUMMARY_FILE",
    "RESULTS_FILE",
    "MANIFEST_FILE",
    "DIMS_KEY",
    "STATUSES",
    "OWNED_FILE",
    "write_run",
    "is_complete",
    "is_run",
    "owned_files",
    "foreign_files",
    "record_files",
    "remove_run",
    "check_target",
    "check_entry_name",
    "jsonable",
    "read_config",
    "read_summary",
    "read_arrays",
    "write_manifest",
    "read_manifest",
    "run_name",
    "load",
]

CONFIG_FILE = "config.toml"
SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.npz"
MANIFEST_FILE = "manifest.json"
OWNED_FILE = ".attnflow.json"
"""The list of the files attnflow wrote in a run (or sweep) directory: the only ones it ever replaces or removes."""
DIMS_KEY = "__dims__"
STATUSES = ("pending", "done", "failed")
_RUN_FILES = (CONFIG_FILE, SUMMARY_FILE, RESULTS_FILE)
_OWNED_FORMAT = "attnflow-files"
_NUMERIC_KINDS = "biufc"  # bool, signed, unsigned, float, complex: what np.load reads without pickle
_MAX_NAME = 100
_MANIFEST_FORMAT = "attnflow-sweep"

# How the per-time and per-member series of the summary contract map onto dimensions, for loading
# them as variables when results.npz does not hold them already.
_SUMMARY_SERIES = {
    "mean_inner_product": ("time",),
    "min_inner_product": ("time",),
    "clustered_fraction": ("time",),
    "energy": ("time",),
    "n_clusters": ("time", "member"),
    "t_clustered": ("member",),
}


class StoreError(OSError, ValueError):
    """A run or sweep directory that cannot be written or read; the message names the path.

    Both an OSError (disk problems) and a ValueError (bad contents), so either ``except`` catches it.
    """


# --------------------------------------------------------------------------------------------
# Small helpers


def jsonable(value: Any, where: str) -> Any:
    """A JSON-ready copy: numpy → Python, tuples → lists, NaN/inf → None; else StoreError."""
    if isinstance(value, np.generic):
        value = value.item()
    elif hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        value = np.asarray(value).tolist()  # numpy or jax arrays
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise StoreError(f"{where} has a non-string key {k!r}; JSON objects need string keys")
            out[k] = jsonable(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (list, tuple)):
        return [jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise StoreError(f"{where} holds {type(value).__name__} {value!r}, which JSON cannot represent")


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


def check_entry_name(kind: str, name: Any) -> str:
    """A name used as a file or archive entry: non-empty text, no separators, not hidden."""
    if not isinstance(name, str) or not name or name in (".", "..") or name.startswith("."):
        raise StoreError(f"{kind} name must be a non-empty string not starting with '.', got {name!r}")
    if any(c in name for c in "/\\\0") or any(ord(c) < 0x20 for c in name):
        raise StoreError(f"{kind} name {name!r} must not contain path separators or control characters")
    return name


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


def remove_stale_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporary run directories and manifests that a killed process left in ``directory``.

    Only attnflow's own temporary names (``.NAME.tmp-<pid>-<hex>``, ``.NAME.old-<pid>-<hex>``) of
    processes no longer running are touched. Returns what was removed.
    """
    removed = []
    for entry in Path(directory).iterdir():
        m = _TEMP.match(entry.name)
        if m is None or _alive(int(m.group(2))):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                entry.unlink()
            except OSError:
                continue
        removed.append(entry)
    return removed


# --------------------------------------------------------------------------------------------
# Runs


def is_complete(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` is a finished run: it holds config.toml, summary.json and results.npz."""
    p = Path(run_dir)
    return p.is_dir() and all((p / f).is_file() for f in _RUN_FILES)


def is_run(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` is attnflow's: a finished run, or one whose replacement was interrupted
    (it still holds the list of attnflow's files)."""
    p = Path(run_dir)
    return is_complete(p) or (p.is_dir() and not p.is_symlink() and (p / OWNED_FILE).is_file())


def owned_files(directory: str | os.PathLike) -> set[str]:
    """The names attnflow wrote in ``directory``: those its ``.attnflow.json`` lists, the three run
    files and that list itself. A run written before the list existed owns only the three files."""
    p = Path(directory)
    names = set(_RUN_FILES) | {OWNED_FILE}
    try:
        doc = json.loads((p / OWNED_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return names
    listed = doc.get("files") if isinstance(doc, dict) and doc.get("format") == _OWNED_FORMAT else None
    for name in listed if isinstance(listed, list) else []:
        try:
            names.add(check_entry_name("file", name))
        except StoreError:
            continue  # a list edited by hand: an entry that is not a plain name claims nothing
    return names


def foreign_files(directory: str | os.PathLike) -> list[str]:
    """The entries of ``directory`` that attnflow did not write, sorted."""
    owned = owned_files(directory)
    return sorted(e.name for e in Path(directory).iterdir() if e.name not in owned)


def _owned_text(names) -> bytes:
    return (json.dumps({"format": _OWNED_FORMAT, "files": sorted(names)}, indent=1) + "\n").encode("utf-8")


def _write_owned(directory: Path, names) -> None:
    """Write ``directory/.attnflow.json`` atomically (a temporary name, then ``os.replace``)."""
    tmp = directory / _temp_name(OWNED_FILE.lstrip("."), "tmp")
    _write_file(tmp, _owned_text(names))
    os.replace(tmp, directory / OWNED_FILE)


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
    if (p / CONFIG_FILE).is_file():
        os.unlink(p / CONFIG_FILE)  # first: from here on it is no longer a complete run
    for name in sorted(owned - {CONFIG_FILE, OWNED_FILE}):
        _remove_entry(p / name)
    if kept:
        return kept
    _remove_entry(p / OWNED_FILE)
    os.rmdir(p)
    return kept


# --------------------------------------------------------------------------------------------
# Runs


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
            all_dims.update(_parse_dims(value, f"arrays[{DIMS_KEY!r}]"))
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
        all_dims.update(_parse_dims(dims, "dims"))
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


def _parse_dims(value: Any, where: str) -> dict[str, list[str]]:
    """Dimension names from a ``__dims__`` entry (JSON text in a 0-d array) or a dict."""
    if isinstance(value, np.ndarray):
        if value.shape != () or value.dtype.kind not in "US":
            raise StoreError(
                f"{where} must be a 0-d string array holding JSON, got dtype {value.dtype} shape {value.shape}"
            )
        value = value.item()
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise StoreError(f"{where} is not valid JSON: {err}") from None
    if not isinstance(value, Mapping):
        raise StoreError(f"{where} must map array names to lists of dimension names, got {value!r}")
    out = {}
    for name, names in value.items():
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n for n in names):
            raise StoreError(f"{where}[{name!r}] must be a list of dimension names, got {names!r}")
        if len(set(names)) != len(names):
            raise StoreError(f"{where}[{name!r}] repeats a dimension name: {list(names)}")
        out[str(name)] = list(names)
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

    Everything is written and fsynced in a temporary sibling directory ``.NAME.tmp-<pid>-<hex>``,
    then renamed to ``out_dir``. An empty directory at ``out_dir`` is filled; an existing run is an
    error unless ``overwrite`` is true, and then only the files attnflow wrote there (its
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
        tmp = parent / _temp_name(out.name, "tmp")
        os.mkdir(tmp)
        _write_file(tmp / CONFIG_FILE, config_toml.encode("utf-8"))
        _write_file(tmp / SUMMARY_FILE, summary_text.encode("utf-8"))
        _write_npz(tmp / RESULTS_FILE, prepared)
        for name, fn in figures.items():
            path = tmp / (name if name.endswith((".png", ".gif")) else f"{name}.png")
            fn(path)
            if not path.is_file():
                raise StoreError(f"figure {name!r} wrote nothing at {path.name}")
            _fsync_file(path)
        _write_file(tmp / OWNED_FILE, _owned_text(os.listdir(tmp)))
        _fsync_dir(tmp)
        _commit(tmp, out, overwrite)
    except BaseException as err:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for d in reversed(created):
            try:
                os.rmdir(d)
            except OSError:
                break
        if isinstance(err, OSError) and not isinstance(err, StoreError):
            raise StoreError(f"cannot write run {out}: {err.strerror or err}") from err
        raise
    return out


def check_target(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "overwrite=True") -> None:
    """Refuse a run directory's path unless it is free, an empty directory, or (``overwrite``) a run.

    ``flag`` names the remedy in the message (``--overwrite`` on the command line)."""
    out = Path(out)
    if not os.path.lexists(out):
        return
    if out.is_symlink():
        raise StoreError(f"cannot write run {out}: it is a symbolic link (to {os.readlink(out)!r}); attnflow "
                         f"writes only into real directories: give the directory itself, or another path")
    if not out.is_dir():
        raise StoreError(f"cannot write run {out}: a file (not a run directory) is in the way")
    if is_run(out):
        if not overwrite:
            raise StoreError(f"{out} already holds an attnflow run; pass {flag} to replace it (files attnflow "
                             f"did not write are kept), or choose another directory")
        return
    if any(out.iterdir()):
        raise StoreError(
            f"cannot write run {out}: the directory exists, is not empty and is not an attnflow run; "
            f"refusing to replace it"
        )


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
            raise StoreError(f"cannot replace run {out}: it holds {clash[0]!r}, which attnflow did not write and "
                             f"the new run would write over; move it away or choose another directory")
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


def _validate_manifest(axes: Any, runs: Any, where: str) -> tuple[dict, list]:
    if not isinstance(axes, Mapping):
        raise StoreError(f"{where}: axes must map grid keys to lists of values, got {axes!r}")
    axes_out = {}
    for k, v in axes.items():
        if not isinstance(k, str) or not k:
            raise StoreError(f"{where}: axis names must be non-empty strings, got {k!r}")
        if isinstance(v, (str, bytes)) or not isinstance(v, (Sequence, np.ndarray)):
            raise StoreError(f"{where}: axis {k!r} must be a list of values, got {v!r}")
        axes_out[k] = jsonable(list(v.tolist() if isinstance(v, np.ndarray) else v), f"axis {k!r}")
    if not isinstance(runs, (list, tuple)):
        raise StoreError(f"{where}: runs must be a list, got {type(runs).__name__}")
    runs_out, names = [], set()
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or not {"name", "point", "status"} <= set(run):
            raise StoreError(f"{where}: runs[{i}] must be a dict with name, point and status, got {run!r}")
        name = run["name"]
        try:
            check_entry_name("run directory", name)
        except StoreError as err:
            raise StoreError(f"{where}: runs[{i}]: {err}") from None
        if name in names:
            raise StoreError(f"{where}: run name {name!r} appears twice")
        names.add(name)
        if run["status"] not in STATUSES:
            raise StoreError(f"{where}: runs[{i}] status must be one of {', '.join(STATUSES)}; got {run['status']!r}")
        point = run["point"]
        if not isinstance(point, Mapping) or set(point) != set(axes_out):
            raise StoreError(
                f"{where}: runs[{i}] point must give a value for each axis {sorted(axes_out)}, got {point!r}"
            )
        runs_out.append(jsonable(dict(run), f"runs[{i}]"))
    return axes_out, runs_out


def write_manifest(sweep_dir: str | os.PathLike, axes: Mapping[str, Sequence], runs: Sequence[Mapping]) -> Path:
    """Write ``sweep_dir/manifest.json`` atomically (temporary file, fsync, ``os.replace``).

    ``axes`` maps each grid key to its values in grid order; each run is
    ``{"name": dirname, "point": {key: value}, "status": "pending" | "done" | "failed"}`` (other
    fields are kept). Creates ``sweep_dir`` if needed. Returns the manifest's path.
    """
    sweep = Path(sweep_dir)
    axes_out, runs_out = _validate_manifest(axes, runs, "manifest")
    doc = {"format": _MANIFEST_FORMAT, "version": 1, "axes": axes_out, "runs": runs_out}
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


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read a sweep's manifest (give the sweep directory or the manifest file): ``{"axes", "runs"}``."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_FILE
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{p} does not exist (not a sweep directory?)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StoreError(f"{p} is unreadable or not valid JSON: {err}") from None
    if not isinstance(doc, dict) or "axes" not in doc or "runs" not in doc:
        raise StoreError(f"{p} is not an attnflow sweep manifest (needs 'axes' and 'runs')")
    axes, runs = _validate_manifest(doc["axes"], doc["runs"], str(p))
    return {"axes": axes, "runs": runs}


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
        if any(x is None for x in items):
            return None
        return ",".join(items) + ("," if len(items) == 1 else "")
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


# --------------------------------------------------------------------------------------------
# Loading


def read_config(path: Path) -> dict[str, Any]:
    """A run's config.toml as a table; StoreError (one line naming the file) if missing or malformed."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise StoreError(f"{path} is unreadable or not valid TOML: {err}") from None


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json as a dict; StoreError if missing, malformed or not an object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StoreError(f"{path} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise StoreError(f"{path} is unreadable or not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise StoreError(f"{path} must hold a JSON object, got {type(doc).__name__}")
    return doc


def read_arrays(path: Path) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """A run's results.npz as (arrays, dimension names), never unpickling; StoreError on any corruption."""
    if not path.is_file():
        raise StoreError(f"{path} is missing")
    # We own the file handle: np.load leaks its own when the archive turns out to be corrupt.
    try:
        fh = open(path, "rb")
    except OSError as err:
        raise StoreError(f"{path} is unreadable: {err.strerror or err}") from None
    with fh:
        try:
            obj = np.load(fh, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - any failure to parse means a corrupt file
            raise StoreError(f"{path} is corrupt: not a readable .npz archive ({err})") from None
        if not isinstance(obj, np.lib.npyio.NpzFile):
            raise StoreError(f"{path} is not a .npz archive")
        try:
            with obj:
                data = {k: obj[k] for k in obj.files}
        except Exception as err:  # noqa: BLE001 - corrupt members, or object arrays refused without pickle
            raise StoreError(f"{path} is corrupt or holds arrays that need pickling: {err}") from None
    dims = _parse_dims(data.pop(DIMS_KEY), f"{path}: {DIMS_KEY}") if DIMS_KEY in data else {}
    for name, names in dims.items():
        if name in data and len(names) != data[name].ndim:
            raise StoreError(
                f"{path}: {DIMS_KEY} names {len(names)} dimensions for {name!r} of shape {data[name].shape}"
            )
    return data, dims


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in table.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _series(value: Any) -> np.ndarray | None:
    """A summary list as a float array (null → NaN); None when it is not a rectangular numeric list."""
    try:
        arr = np.array(value, dtype=object)
    except ValueError:
        return None
    if arr.dtype != object or arr.ndim == 0 or arr.size == 0:
        return None
    flat = arr.reshape(-1)
    if not all(x is None or (isinstance(x, (int, float)) and not isinstance(x, bool)) for x in flat):
        return None
    if all(isinstance(x, int) for x in flat):
        try:
            return np.array(flat.tolist(), dtype=np.int64).reshape(arr.shape)  # counts stay integers
        except OverflowError:
            pass
    return np.array([np.nan if x is None else float(x) for x in flat]).reshape(arr.shape)


def _load_run(run_dir: Path):
    """One run as a Dataset, and the names of the summary scalars put in its attrs."""
    import xarray as xr

    config = read_config(run_dir / CONFIG_FILE)
    summary = read_summary(run_dir / SUMMARY_FILE)
    data, dims = read_arrays(run_dir / RESULTS_FILE)

    sizes: dict[str, int] = {}
    times = summary.get("times")
    time_coord = None
    if isinstance(times, list):
        time_coord = _series(times) if times else np.zeros(0)
        if time_coord is None or time_coord.ndim != 1:
            raise StoreError(f"{run_dir / SUMMARY_FILE}: 'times' must be a list of numbers")
        time_coord = time_coord.astype(np.float64)
        sizes["time"] = len(times)

    variables: dict[str, tuple[list[str], np.ndarray]] = {}
    for name in sorted(data, key=lambda n: n not in dims):  # named dimensions claim their sizes first
        arr = data[name]
        if name in dims:
            names = dims[name]
            for dim, size in zip(names, arr.shape):
                if sizes.setdefault(dim, size) != size:
                    raise StoreError(
                        f"{run_dir}: dimension {dim!r} of {name!r} has size {size}, elsewhere {sizes[dim]}"
                    )
        else:
            # dim_0, dim_1... shared between arrays when sizes agree, else all private to the array
            names = [f"dim_{i}" for i in range(arr.ndim)]
            if any(sizes.get(dim, s) != s for dim, s in zip(names, arr.shape)):
                names = [f"{name}_dim_{i}" for i in range(arr.ndim)]
            for dim, size in zip(names, arr.shape):
                sizes.setdefault(dim, size)
        variables[name] = (names, arr)
    for key, value in summary.items():
        if key in ("config", "times", "versions") or key in variables:
            continue
        arr = _series(value) if isinstance(value, list) else None
        if arr is None:
            continue
        names = list(_SUMMARY_SERIES.get(key, ()))
        if not names and arr.ndim == 1 and "time" in sizes and len(arr) == sizes["time"]:
            names = ["time"]
        if len(names) != arr.ndim or any(sizes.get(d, s) != s for d, s in zip(names, arr.shape)):
            continue  # not shaped as the contract says: keep it out rather than guess
        for dim, size in zip(names, arr.shape):
            sizes.setdefault(dim, size)
        variables[key] = (names, arr)

    coords = {}
    if time_coord is not None:
        coords["time"] = ("time", time_coord)
    # a 1-D array named after its own dimension (d, beta, ...) labels that dimension
    for name, (names, arr) in list(variables.items()):
        if names == [name] and name not in coords:
            coords[name] = variables.pop(name)
    attrs = _flatten(config)
    scalars = []
    extras = {k: v for k, v in summary.items() if k not in ("config", "times")}
    if isinstance(extras.get("versions"), Mapping):
        extras.update(_flatten(extras.pop("versions"), "versions."))
    for key, value in extras.items():
        if isinstance(value, (bool, int, float, str)) and key not in variables:
            name = key if key not in attrs else f"summary.{key}"
            attrs[name] = value
            scalars.append(name)
    return xr.Dataset(variables, coords=coords, attrs=attrs), scalars


def _coord_value(v: Any) -> Any:
    """A grid value usable as an index label (whole-list values become their TOML text)."""
    if isinstance(v, list):
        return "[" + ", ".join(json.dumps(x) for x in v) + "]"
    return v


def _load_sweep(sweep_dir: Path):
    import xarray as xr

    manifest = read_manifest(sweep_dir)
    axes: dict[str, list] = manifest["axes"]
    names = list(axes)
    runs, datasets = [], []
    for run in manifest["runs"]:
        run_dir = sweep_dir / run["name"]
        if not is_complete(run_dir):
            continue  # pending, failed or interrupted: the sweep loads what is done
        ds, scalars = _load_run(run_dir)
        for key in scalars:
            value = ds.attrs[key]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                ds[key] = ((), value)  # per-run numbers (steps, wall time) vary along the grid
                del ds.attrs[key]
        for key in names:
            ds.attrs.pop(key, None)  # the grid value is a coordinate, not an attribute
        runs.append(run)
        datasets.append(ds)
    if not datasets:
        raise StoreError(f"{sweep_dir}: no complete runs yet ({len(manifest['runs'])} listed in {MANIFEST_FILE})")
    ds = None
    if _is_product(axes, manifest["runs"]):
        try:
            ds = _combine_on_grid(datasets, runs, axes)
        except (ValueError, KeyError):
            ds = None  # not a grid xarray can lay out: fall back to a run dimension
    if ds is None:
        kw = dict(data_vars="all", coords="different", compat="equals", join="outer",
                  combine_attrs="drop_conflicts")
        ds = xr.concat([_indexed(d) for d in datasets], dim="run", **kw)
        coords = {ax: ("run", [_coord_value(r["point"][ax]) for r in runs]) for ax in names if ax not in ds.dims}
        coords["run_name"] = ("run", [r["name"] for r in runs])
        ds = ds.assign_coords(coords)
    ds.attrs["sweep_axes"] = names
    return ds


def _indexed(ds):
    """Give every dimension a coordinate (particle, coord, bin: 0, 1, ...) so runs of different
    sizes align on an outer join instead of clashing."""
    return ds.assign_coords({dim: np.arange(size) for dim, size in ds.sizes.items() if dim not in ds.coords})


def _combine_on_grid(datasets, runs, axes):
    """Lay complete runs out on their grid: one dimension per axis, merged by coordinate values.

    An axis that is already a dimension of every run (``beta``, ``d``, ``seed``) merges along
    it; any other axis becomes a new dimension. Per-run scalars spread along the axes.
    """
    import xarray as xr

    names = list(axes)
    # dimensions without labels of their own (particle, coord, bin) are padded to a common length
    # with NaN, so runs of different n line up instead of becoming an axis to combine along
    unlabelled: dict[str, int] = {}
    for ds in datasets:
        for dim, size in ds.sizes.items():
            if dim not in ds.coords:
                unlabelled[dim] = max(size, unlabelled.get(dim, 0))
    laid = []
    for ds, run in zip(datasets, runs):
        ds = _indexed(ds).reindex({dim: np.arange(size) for dim, size in unlabelled.items() if dim in ds.dims})
        new_axes = {ax: [_coord_value(run["point"][ax])] for ax in names if ax not in ds.dims}
        run_axes = {ax: ds[ax].values for ax in names if ax in ds.dims}
        for key in [k for k, v in ds.data_vars.items() if v.ndim == 0]:
            ds[key] = ds[key].expand_dims(run_axes)  # a per-run number belongs to each of its grid values
        laid.append(ds.expand_dims(new_axes) if new_axes else ds)
        added = list(new_axes)
    combined = xr.combine_by_coords(laid, data_vars="all", join="outer", combine_attrs="drop_conflicts")
    order = [ax for ax in names if ax in combined.dims]
    front = [ax for ax in added if ax in combined.dims]
    # combining sorts coordinates; put each axis back in the order the sweep was given
    for ax in order:
        given = [_coord_value(v) for v in axes[ax] if not isinstance(v, list)]
        if len(given) == combined.sizes[ax] and set(given) == set(combined[ax].values.tolist()):
            combined = combined.reindex({ax: given})
    return combined.transpose(*front, ...)


def _is_product(axes: Mapping[str, list], runs: Sequence[Mapping]) -> bool:
    """Whether the manifest's points are exactly the Cartesian product of its axes."""

    def key(values):
        return json.dumps(list(values), sort_keys=True)

    names = list(axes)
    product = {key(combo) for combo in itertools.product(*(axes[n] for n in names))}
    points = [key(r["point"][n] for n in names) for r in runs]
    return len(points) == len(product) == len(set(points)) and set(points) == product


def load(path: str | os.PathLike):
    """Load a run directory or a sweep directory as an ``xarray.Dataset``.

    Run: every array of results.npz as a variable with the dimension names of ``__dims__``
    (``dim_0``, ``dim_1``... for unnamed ones), the summary's per-time and per-member series
    (``mean_inner_product``, ``n_clusters``...) when the archive lacks them, coordinate ``time``
    from the summary's ``times``, and attrs = the configuration (nested tables flattened to
    ``a.b``) plus the summary's scalars (``steps``, ``wall_time_s``, ``versions.jax``...).

    Sweep (a directory with manifest.json): the complete runs laid out on their grid, one
    dimension per axis (an axis that is already a run dimension, such as ``beta`` or ``d``,
    merges along it; missing runs and shorter particle axes are NaN), or, where the points do
    not form a grid, along a ``run`` dimension with each axis as a coordinate. Per-run scalars
    become variables along the grid. Nothing is unpickled; bad or missing files raise StoreError.
    """
    p = Path(path)
    if p.is_file() and p.name == MANIFEST_FILE:
        return _load_sweep(p.parent)
    if not p.exists():
        raise StoreError(f"{p} does not exist")
    if not p.is_dir():
        raise StoreError(f"{p} is not a run or sweep directory")
    if (p / MANIFEST_FILE).exists():
        return _load_sweep(p)
    missing = [f for f in _RUN_FILES if not (p / f).is_file()]
    if missing:
        raise StoreError(f"{p} is not a complete run (missing {', '.join(missing)}) and has no {MANIFEST_FILE}")
    return _load_run(p)[0]
