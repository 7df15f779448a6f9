"""Reading run and sweep directories: their files, which of them attnflow wrote, and the manifest.

The one reader of what ``store`` writes (the layout is described there): a run's config.toml,
summary.json and results.npz (arrays never unpickled, dimension names from ``__dims__``), the list of
attnflow's files (``.attnflow.json``) and a sweep's manifest.json, each only from a regular file (a pipe
or a device in a run's place is refused by its kind: ``particles/files.py``). Every problem is a
StoreError whose message names the file.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...particles.files import open_regular, read_regular

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
    "STATE_DIMS",
    "is_complete",
    "is_run",
    "command_of",
    "owned_files",
    "foreign_files",
    "check_entry_name",
    "jsonable",
    "parse_dims",
    "validate_manifest",
    "read_config",
    "read_summary",
    "read_arrays",
    "read_run",
    "read_manifest",
]

CONFIG_FILE = "config.toml"
SUMMARY_FILE = "summary.json"
RESULTS_FILE = "results.npz"
MANIFEST_FILE = "manifest.json"
OWNED_FILE = ".attnflow.json"
"""The list of the files attnflow wrote in a run (or sweep) directory: the only ones it ever replaces or removes."""
DIMS_KEY = "__dims__"
STATUSES = ("pending", "done", "failed")
RUN_FILES = (CONFIG_FILE, SUMMARY_FILE, RESULTS_FILE)
"""The files of a complete run."""
OWNED_FORMAT = "attnflow-files"
"""The ``format`` of ``.attnflow.json``."""
MANIFEST_FORMAT = "attnflow-sweep"
"""The ``format`` of a sweep's manifest.json."""


class StoreError(OSError, ValueError):
    """A run or sweep directory that cannot be written or read; the message names the path.

    Both an OSError (disk problems) and a ValueError (bad contents), so either ``except`` catches it.
    """


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


def check_entry_name(kind: str, name: Any) -> str:
    """A name used as a file or archive entry: non-empty text, no separators, not hidden."""
    if not isinstance(name, str) or not name or name in (".", "..") or name.startswith("."):
        raise StoreError(f"{kind} name must be a non-empty string not starting with '.', got {name!r}")
    if any(c in name for c in "/\\\0") or any(ord(c) < 0x20 for c in name):
        raise StoreError(f"{kind} name {name!r} must not contain path separators or control characters")
    return name


# --------------------------------------------------------------------------------------------
# Runs


def is_complete(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` is a finished run: it holds config.toml, summary.json and results.npz."""
    p = Path(run_dir)
    return p.is_dir() and all((p / f).is_file() for f in RUN_FILES)


def is_run(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir`` is attnflow's: a finished run, or one whose replacement was interrupted
    (it still holds the list of attnflow's files)."""
    p = Path(run_dir)
    return is_complete(p) or (p.is_dir() and not p.is_symlink() and (p / OWNED_FILE).is_file())


def owned_files(directory: str | os.PathLike) -> set[str]:
    """The names attnflow wrote in ``directory``: those its ``.attnflow.json`` lists, and that list itself.

    Nothing else: a file attnflow cannot prove it wrote is the user's, even when it is called
    config.toml, summary.json or results.npz (a directory of the user's own that looks like a run, or
    a run written before the list existed, can be read but none of its files replaced)."""
    p = Path(directory)
    names = {OWNED_FILE}
    try:  # a regular file only: a pipe or a device in its place claims nothing (and is never read)
        doc = json.loads(read_regular(p / OWNED_FILE, str(p / OWNED_FILE), error=StoreError).decode("utf-8"))
    except (StoreError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return names
    listed = doc.get("files") if isinstance(doc, dict) and doc.get("format") == OWNED_FORMAT else None
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


def parse_dims(value: Any, where: str) -> dict[str, list[str]]:
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


def _read_text(path: Path, parse, malformed: tuple, language: str, missing: str = "is missing") -> Any:
    """``parse`` of the text in ``path``; StoreError (one line naming the file) saying ``missing`` if there is
    none, or that it is unreadable or not valid ``language`` (``malformed``: the parser's errors)."""
    data = read_regular(path, str(path), error=StoreError, missing=missing)  # never a pipe or a device
    try:
        return parse(data.decode("utf-8"))
    except RecursionError:
        raise StoreError(f"{path} is not valid {language}: arrays or tables nested too deeply") from None
    except (UnicodeDecodeError, *malformed) as err:
        raise StoreError(f"{path} is unreadable or not valid {language}: {err}") from None


def read_config(path: Path) -> dict[str, Any]:
    """A run's config.toml as a table; StoreError (one line naming the file) if missing or malformed."""
    return _read_text(path, tomllib.loads, (tomllib.TOMLDecodeError,), "TOML")


def command_of(run_dir) -> str | None:
    """The command that wrote ``run_dir`` as its config.toml says (``hist``, ``fit``); None for an experiment
    run (no ``command`` key) or a directory without a readable config.toml."""
    try:
        return read_config(Path(run_dir) / CONFIG_FILE).get("command")
    except StoreError:
        return None


def _read_json(path: Path, missing: str) -> Any:
    """The JSON document in ``path``; StoreError saying ``missing`` if there is none, or what is wrong with it."""
    return _read_text(path, json.loads, (json.JSONDecodeError,), "JSON", missing)


def read_summary(path: Path) -> dict[str, Any]:
    """A run's summary.json as a dict; StoreError if missing, malformed or not an object."""
    doc = _read_json(path, "is missing")
    if not isinstance(doc, dict):
        raise StoreError(f"{path} must hold a JSON object, got {type(doc).__name__}")
    return doc


def read_arrays(path: Path) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """A run's results.npz as (arrays, dimension names), never unpickling; StoreError on any corruption."""
    # We own the file handle: np.load leaks its own when the archive turns out to be corrupt.
    fh = open_regular(path, str(path), error=StoreError, missing="is missing")  # never a pipe or a device
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
    dims = parse_dims(data.pop(DIMS_KEY), f"{path}: {DIMS_KEY}") if DIMS_KEY in data else {}
    for name, names in dims.items():
        if name in data and len(names) != data[name].ndim:
            raise StoreError(
                f"{path}: {DIMS_KEY} names {len(names)} dimensions for {name!r} of shape {data[name].shape}"
            )
    return data, dims


@dataclass(frozen=True)
class RunFiles:
    """What a run directory holds: config.toml as a table, summary.json, and results.npz's arrays with
    their dimension names."""

    config: dict[str, Any]
    summary: dict[str, Any]
    arrays: dict[str, np.ndarray]
    dims: dict[str, list[str]]


STATE_DIMS = ("d", "beta", "seed", "time", "particle", "coord")
"""The dimensions of a particle run's states ``xs`` (``runner.RunResult.xs``): every d's states, padded
with NaN beyond each d's own coordinates to the largest d."""
OLD_STATE_DIMS = list(STATE_DIMS[1:])
"""The dimensions of ``xs`` written before the states of every d were kept: the last d's states alone."""


def _states_of_every_d(arrays: dict[str, np.ndarray], dims: dict[str, list[str]], path: Path) -> None:
    """Read ``xs`` of the older layout (no d dimension: the states of the run's last d, the others
    not kept) as today's: a d dimension, the other d's NaN, coordinates padded with NaN to the largest d."""
    if dims.get("xs") != OLD_STATE_DIMS or "xs" not in arrays:
        return
    xs = arrays["xs"]
    ds = [int(v) for v in np.ravel(arrays.get("d", [xs.shape[-1]]))]
    if not ds or ds[-1] != xs.shape[-1]:
        raise StoreError(
            f"{path}: 'xs' holds points in dimension {xs.shape[-1]}, but the run's last d is "
            f"{ds[-1] if ds else 'missing'}"
        )
    if len(ds) == 1:
        padded = xs[None]
    else:
        padded = np.full((len(ds),) + xs.shape[:-1] + (max(ds),), np.nan, dtype=np.result_type(xs.dtype, np.float32))
        padded[-1, ..., : xs.shape[-1]] = xs
    arrays["xs"], dims["xs"] = padded, list(STATE_DIMS)


def read_run(run_dir: str | os.PathLike) -> RunFiles:
    """The three files of a run directory, read in that order (config.toml, summary.json, results.npz);
    StoreError naming the first that is missing or malformed. The states of a particle run written
    by an older attnflow (``xs`` without a d dimension) are read in today's layout."""
    p = Path(run_dir)
    config = read_config(p / CONFIG_FILE)
    summary = read_summary(p / SUMMARY_FILE)
    arrays, dims = read_arrays(p / RESULTS_FILE)
    _states_of_every_d(arrays, dims, p / RESULTS_FILE)
    return RunFiles(config, summary, arrays, dims)


# --------------------------------------------------------------------------------------------
# Sweeps


def validate_manifest(axes: Any, runs: Any, where: str) -> tuple[dict, list]:
    """Checked, JSON-ready copies of a manifest's axes and runs; StoreError naming ``where`` otherwise."""
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


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """Read a sweep's manifest (give the sweep directory or the manifest file): ``{"axes", "runs"}``."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_FILE
    doc = _read_json(p, "does not exist (not a sweep directory?)")
    if not isinstance(doc, dict) or "axes" not in doc or "runs" not in doc:
        raise StoreError(f"{p} is not an attnflow sweep manifest (needs 'axes' and 'runs')")
    axes, runs = validate_manifest(doc["axes"], doc["runs"], str(p))
    return {"axes": axes, "runs": runs}
