"""A run or sweep directory as an ``xarray.Dataset`` with named dimensions (``af.load``).

The files are read by ``rundir``; here they are laid out: a run's arrays on the dimensions
``__dims__`` names, the summary's series and scalars, and a sweep's complete runs on its grid.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import labels
from .rundir import MANIFEST_FILE, RUN_FILES, SUMMARY_FILE, StoreError, is_complete, read_manifest, read_run

__all__ = ["load", "SUMMARY_SERIES"]

# How the per-time and per-member series of the summary contract map onto dimensions, for loading
# them as variables when results.npz does not hold them already.
SUMMARY_SERIES = {
    "mean_inner_product": ("time",),
    "min_inner_product": ("time",),
    "clustered_fraction": ("time",),
    "energy": ("time",),
    "n_clusters": ("time", "member"),
    "t_clustered": ("member",),
}


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

    files = read_run(run_dir)
    config, summary, data, dims = files.config, files.summary, files.arrays, files.dims

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
        series = _series(value) if isinstance(value, list) else None
        if series is None:
            continue
        names = list(SUMMARY_SERIES.get(key, ()))
        if not names and series.ndim == 1 and "time" in sizes and len(series) == sizes["time"]:
            names = ["time"]
        if len(names) != series.ndim or any(sizes.get(d, s) != s for d, s in zip(names, series.shape)):
            continue  # not shaped as the contract says: keep it out rather than guess
        for dim, size in zip(names, series.shape):
            sizes.setdefault(dim, size)
        variables[key] = (names, series)

    coords: dict[str, tuple[str | list[str], np.ndarray]] = {}
    if time_coord is not None:
        coords["time"] = ("time", time_coord)
    # a 1-D array named after its own dimension (d, beta, ...) labels that dimension (the archive's own
    # times, where a run stores them, over the summary's)
    for name, (names, _) in list(variables.items()):
        if names == [name]:
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
        ds = xr.concat(
            [_indexed(d) for d in datasets],
            dim="run",
            data_vars="all",
            coords="different",
            compat="equals",
            join="outer",
            combine_attrs="drop_conflicts",
        )
        coords = {ax: ("run", [_coord_value(r["point"][ax]) for r in runs]) for ax in names if ax not in ds.dims}
        coords["run_name"] = ("run", [r["name"] for r in runs])
        ds = ds.assign_coords(coords)
    ds.attrs["sweep_axes"] = names
    return _labelled(ds, names)


def _labelled(ds, axes: Sequence[str] = ()):
    """``ds`` with every variable and coordinate's ``long_name`` (and ``units``) from ``labels``; a sweep axis
    attnflow declares no label for is a configuration key, named by its documentation."""
    for name, var in ds.variables.items():
        found = labels.attrs(str(name))
        if not found and name in axes:
            from ..config import KEYS  # only a sweep over a key without a label of its own needs them

            key = KEYS.get(str(name))
            found = {"long_name": key.doc if key is not None else str(name)}
        var.attrs.update(found)
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
    # every option named: xarray's defaults for combining are changing (coords, compat, join)
    combined = xr.combine_by_coords(
        laid, data_vars="all", coords="different", compat="no_conflicts", join="outer", combine_attrs="drop_conflicts"
    )
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
    """Load a run directory or a sweep directory (``path``) as an ``xarray.Dataset``.

    Run: every array of results.npz as a variable with the dimension names of ``__dims__``
    (``dim_0``, ``dim_1``... for unnamed ones), the summary's per-time and per-member series
    (``mean_inner_product``, ``n_clusters``...) when the archive lacks them, coordinate ``time``
    from the summary's ``times``, and attrs = the configuration (nested tables flattened to
    ``a.b``) plus the summary's scalars (``steps``, ``wall_time_s``, ``versions.jax``...). A particle
    run's states ``xs``, when kept, are on (d, beta, seed, time, particle, coord), every d padded
    with NaN to the largest along ``coord``: ``ds.xs.sel(d=3).isel(coord=slice(0, 3))`` are the states
    of d = 3 on their own sphere (a run of an older layout, without the d dimension, reads as one d).

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
    missing = [f for f in RUN_FILES if not (p / f).is_file()]
    if missing:
        raise StoreError(f"{p} is not a complete run (missing {', '.join(missing)}) and has no {MANIFEST_FILE}")
    return _labelled(_load_run(p)[0])
