"""A sweep's curve: one summary statistic of its runs against one of its axes (``attnflow plot SWEEP --x AXIS
--y STATISTIC``), one curve per value of the other axes.

Each complete run gives one number, read from its summary.json (docs/design.md §5): a per-time series at the
last save time (``clustered_fraction``, ``energy``, …), a per-member one as the mean over the members that
have a value (``t_clustered``: those that clustered), ``n_clusters`` at the last save time as the mean over
the members, and a number as it is (``steps``, ``wall_time_s``). The figure is a PNG in the sweep directory,
drawn atomically and recorded as attnflow's (``figures.write``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import plots
from . import figures, labels, store
from .dataset import SUMMARY_SERIES

__all__ = ["SweepCurves", "statistics", "value", "sweep_curves", "write"]

_NOT_STATISTICS = ("config", "times", "versions", "error")


@dataclass
class SweepCurves:
    """The curves of ``y`` against ``x``: ``x_values`` (the axis's values, as the sweep gives them) and, per
    curve (a label naming the other axes' values, "" when there are none), one number per x value (NaN where
    the run is missing)."""

    x: str
    y: str
    x_values: list
    curves: dict[str, list[float]]
    how: str


def _reduction(summary: dict, name: str) -> tuple[str, str] | None:
    """How a summary entry becomes one number: its kind and its description; None when it cannot."""
    entry = summary.get(name)
    if name in _NOT_STATISTICS or entry is None or isinstance(entry, (bool, str, dict)):
        return None
    if isinstance(entry, (int, float)):
        return "number", ""
    dims = SUMMARY_SERIES.get(name)
    if dims == ("member",):
        return "members", "mean over the members that have one"
    if dims == ("time", "member"):
        return "time-members", "at the last save time, mean over the members"
    times = summary.get("times")
    if dims == ("time",) or (isinstance(times, list) and len(entry) == len(times)):
        return "time", "at the last save time"
    return None


def statistics(summary: dict) -> list[str]:
    """The statistics of a summary that give one number per run."""
    return [k for k in summary if _reduction(summary, k) is not None]


def _number(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else math.nan


def value(summary: dict, name: str) -> float:
    """The number of statistic ``name`` of one run's summary (NaN where the run has none)."""
    kind = (_reduction(summary, name) or ("", ""))[0]
    entry = summary.get(name)
    if kind == "number":
        return _number(entry)
    if kind == "time":
        return _number(entry[-1]) if entry else math.nan
    if kind == "members":
        assert entry is not None, "_reduction gives no kind to a missing entry"
        values = [_number(v) for v in entry]
    elif kind == "time-members":
        values = [_number(v) for v in (entry[-1] if entry else [])]
    else:
        raise ValueError(f"{name!r} is not a statistic with one number per run")
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def sweep_curves(sweep_dir: Path, x: str, y: str) -> SweepCurves:
    """The curves of statistic ``y`` against axis ``x`` of the sweep in ``sweep_dir``; ValueError naming the
    valid axes or statistics when one is not the sweep's."""
    sweep_dir = Path(sweep_dir)
    if not (sweep_dir / store.MANIFEST_FILE).is_file():
        raise ValueError(f"--x and --y draw a sweep's curves: {str(sweep_dir)!r} has no {store.MANIFEST_FILE}")
    manifest = store.read_manifest(sweep_dir)
    axes: dict[str, list] = manifest["axes"]
    if x not in axes:
        raise ValueError(f"--x {x!r} is not an axis of this sweep; its axes: {', '.join(axes)}")
    summaries = {}
    for run in manifest["runs"]:
        if store.is_complete(sweep_dir / run["name"]):
            summaries[run["name"]] = store.read_summary(sweep_dir / run["name"] / store.SUMMARY_FILE)
    if not summaries:
        raise ValueError(f"{str(sweep_dir)!r} has no complete runs yet")
    valid = statistics(next(iter(summaries.values())))
    if y not in valid:
        raise ValueError(f"--y {y!r} is not a summary statistic of this sweep; choose one of: {', '.join(valid)}")
    others = [a for a in axes if a != x]
    by_point = {_key(run["point"], axes): run["name"] for run in manifest["runs"]}
    curves = {}
    for combo in itertools.product(*(axes[a] for a in others)):
        label = ", ".join(f"{a} = {_text(v)}" for a, v in zip(others, combo))
        ys = []
        for xv in axes[x]:
            name = by_point.get(_key({x: xv, **dict(zip(others, combo))}, axes))
            ys.append(value(summaries[name], y) if name in summaries else math.nan)
        curves[label] = ys
    how = (_reduction(next(iter(summaries.values())), y) or ("", ""))[1]
    return SweepCurves(x=x, y=y, x_values=list(axes[x]), curves=curves, how=how)


def _key(point: dict, axes: dict) -> tuple:
    return tuple(repr(point.get(a)) for a in axes)


def _text(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _axis_label(name: str) -> str:
    """A name as an axis reads it: its label (with units), else a configuration key's documentation."""
    found = labels.label(name)
    if found is None:
        from ..config import KEYS

        key = KEYS.get(name)
        return f"{name}: {key.doc}" if key is not None else name
    return f"{found.long_name} [{found.units}]" if found.units else found.long_name


def write(sweep_dir: Path, x: str, y: str) -> list[Path]:
    """Draw the curves of ``y`` against ``x`` into ``SWEEP/{y}_vs_{x}.png``."""
    data = sweep_curves(sweep_dir, x, y)
    ylabel = _axis_label(y) + (f"\n({data.how})" if data.how else "")
    title = f"{y} against {x}"

    def draw(path):
        plots.sweep_curves(data.x_values, data.curves, xlabel=_axis_label(x), ylabel=ylabel, title=title, path=path)

    return figures.write(Path(sweep_dir), {f"{y}_vs_{x}.png": draw})
