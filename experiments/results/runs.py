"""A finished run and its directory: what a particle run writes (summary, arrays, figures), its report, and the
run read back from disk.

``save`` is the one writer of a run of an experiment: the summary of docs/design.md §5 (:func:`summarize`), the
arrays of results.npz with their named dimensions (:func:`arrays`) and the experiment's figures, written
atomically by ``store.write_run``. ``load_result`` reads a run back as a ``RunResult`` with its experiment.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from ...solvers.problem import products
from .. import builtin
from ..config import load_config, to_toml
from ..registry import Experiment
from ..run import plan, runner
from . import figures, store
from .rundir import STATE_DIMS

__all__ = ["save", "summarize", "arrays", "members_written", "print_report", "load_result", "format_number"]


def format_number(value, digits: int = 3) -> str:
    """A value as a report prints it: ``digits`` significant digits, in plain decimals from 10⁻³ to 10⁵
    ("2228", "12.3", "0.00123"), in scientific notation beyond ("2.23e+14", "4.1e-07")."""
    value = float(value)
    text = f"{value:.{digits}g}"
    magnitude = abs(value)
    if "e" in text and 1e-3 <= magnitude < 1e5:  # what %g would write in exponent form below 10⁵
        text = f"{value:.{max(digits - 1 - math.floor(math.log10(magnitude)), 0)}f}"
    return text


def _finite_or_none(values) -> list:
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(values, dtype=float).ravel()]


def summarize(result: runner.RunResult) -> dict:
    """The summary object of docs/design.md §5 ("Summary contract"): means over members, per time.

    A statistic the run did not compute (the ``statistics`` key leaves its group out) is null
    at every time (``n_clusters``: an empty list).
    """
    T = len(result.ts)

    def mean(name):
        if name not in result.stats:
            return [None] * T
        return _finite_or_none(np.mean(result.member(name), axis=0))

    return {
        "config": result.config.to_dict(),
        "times": [float(t) for t in result.ts],
        "mean_inner_product": mean("mean_inner_product"),
        "min_inner_product": mean("min_inner_product"),
        "clustered_fraction": mean("clustered_fraction"),
        # a member that became non-finite has no count after that time: null
        "n_clusters": (
            [
                [None if not math.isfinite(v) else int(v) for v in row]
                for row in np.asarray(result.member("n_clusters"), dtype=float).T
            ]
            if "n_clusters" in result.stats
            else []
        ),
        "energy": mean("energy"),
        "t_clustered": _finite_or_none(runner.t_clustered(result)),
        "steps": int(round(float(np.mean(result.steps)))),
        # the matrix products' precision, as ``Solution.precision`` states it
        "precision": products(result.config.precision, result.config.dtype),
        "wall_time_s": float(result.wall_time_s),
        "versions": runner.versions(),
        # the programs the run compiled (or loaded from the compilation cache) and the compiler's seconds
        **({"compilations": result.compilations} if result.compilations is not None else {}),
    }


def members_written(result: runner.RunResult, experiment: Experiment | None = None) -> bool:
    """Whether the run writes each member's statistics (``plan.keep_members``): ``save_members``, or by default
    when they are small or ``experiment``'s figures read them. Else each statistic on (d, beta, seed, time, ...)
    is written as its mean over the seeds, on (d, beta, time, ...)."""
    reads = True if experiment is None or experiment.run is not None else experiment.figures_read_members(result.config)
    nbytes = sum(v.nbytes for k, v in result.stats.items() if _per_seed(k))
    return plan.keep_members(result.config, nbytes, reads)


def _per_seed(name: str) -> bool:
    """Whether a statistic has the ensemble's layout (d, beta, seed, time, ...), whose seeds a mean can take."""
    return name not in runner.STAT_DIMENSIONS


def arrays(
    result: runner.RunResult, experiment: Experiment | None = None
) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """The run's arrays for results.npz and the names of their dimensions (statistics per member, or their
    means over the seeds: ``members_written``)."""
    out = {
        "d": np.asarray(result.config.d),
        "beta": np.asarray(result.config.beta, dtype=float),
        "seed": result.config.seed + np.arange(result.config.seeds),
        "steps": result.steps,
        "t_clustered": runner.t_clustered(result).reshape(result.steps.shape),
    }
    dims = {
        "d": ["d"],
        "beta": ["beta"],
        "seed": ["seed"],
        "steps": ["d", "beta", "seed"],
        "t_clustered": ["d", "beta", "seed"],
    }
    members = members_written(result, experiment)
    for name, value in result.stats.items():
        out[name] = value
        dims[name] = list(runner.STAT_DIMENSIONS.get(name) or list(runner.STAT_DIMS) + runner.EXTRA_DIMS.get(name, []))
        if not members and _per_seed(name):
            # as the figures average them (``analysis.mean_over_seeds``): members that became non-finite skipped
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a (d, β, time) whose every member is NaN
                mean = np.nanmean(value, axis=2)  # counts (n_clusters) become their float means
                out[name] = mean.astype(value.dtype) if np.issubdtype(value.dtype, np.floating) else mean
            dims[name] = [dim for dim in dims[name] if dim != "seed"]
    if result.xs is not None:
        out["xs"] = result.xs
        dims["xs"] = list(STATE_DIMS)
    for name, value in result.extra.items():
        out[name], dims[name] = value
    return out, dims


def save(
    out: Path,
    result: runner.RunResult,
    experiment: Experiment | None,
    *,
    plot: bool = True,
    error: str | None = None,
    overwrite: bool = False,
) -> dict:
    """Write the run directory (atomically) and return its summary; ``error`` (a run that stopped
    early, e.g. on non-finite values) is recorded in the summary as ``"error"``; ``overwrite``
    replaces an existing run's files (``store.write_run``)."""
    summary = summarize(result)
    if experiment is not None and experiment.summary is not None and error is None:
        summary.update(experiment.summary(result))
    if error is not None:
        summary["error"] = error
    data, dims = arrays(result, experiment)
    store.write_run(
        out,
        to_toml(result.config),
        summary,
        data,
        figures.writers(result, experiment) if plot else None,
        dims=dims,
        overwrite=overwrite,
    )
    return summary


def print_report(result: runner.RunResult, experiment: Experiment, out: Path) -> None:
    """A short human-readable account of a run on stdout: where it went, what the theory says."""
    c = result.config
    members = int(np.prod(result.steps.shape))
    print(f"{experiment.name}: {experiment.describe(c, members)}; {result.wall_time_s:.1f} s")
    if result.compilations is not None:
        compiled = result.compilations
        hits = f", {compiled['cached']} loaded from the compilation cache" if compiled["cached"] else ""
        print(f"  {compiled['compiled']} programs compiled in {compiled['seconds']:.2f} s{hits}")
    for check in experiment.theory_checks(result):  # not applicable where the run changes the model
        print(f"  [{check.mark}] {check.name}: expected {check.expected}, measured {check.measured}")
    print(f"results in {out}/")
    for p in sorted(Path(out).iterdir()):
        if p.suffix in (".png", ".gif"):
            print(f"  {p.name}")


def _seed_mean(dims, name: str) -> bool:
    """Whether an array of results.npz, on ``dims``, is a statistic written as its mean over the seeds."""
    full = list(runner.STAT_DIMS) + runner.EXTRA_DIMS.get(name, [])
    return _per_seed(name) and dims is not None and list(dims) == [dim for dim in full if dim != "seed"]


def load_result(run_dir: Path) -> tuple[runner.RunResult, Experiment]:
    """Rebuild a RunResult from a run directory (arrays read without unpickling)."""
    if not store.is_complete(run_dir):
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow run (config.toml, summary.json, results.npz)")
    files = store.read_run(run_dir)
    try:
        config = load_config(files.config)
    except ValueError as err:
        raise ValueError(f"{str(run_dir / store.CONFIG_FILE)!r} is not a valid attnflow configuration: {err}") from None
    summary, arrs = files.summary, files.arrays
    missing = [] if isinstance(summary, dict) and "times" in summary else [f"{store.SUMMARY_FILE}: times"]
    missing += [f"{store.RESULTS_FILE}: {k}" for k in ("steps", "t_clustered") if k not in arrs]
    if "xs" in arrs and files.dims.get("xs") != list(STATE_DIMS):
        missing.append(f"{store.RESULTS_FILE}: xs on ({', '.join(STATE_DIMS)})")
    if missing:
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow run: it lacks {', '.join(missing)}")
    stats = {
        k: arrs[k] for k in arrs if k not in ("d", "beta", "seed", "steps", "t_clustered", "xs") and arrs[k].ndim >= 4
    }
    # statistics written as their means over the seeds (``save_members``): one member, the mean, on the seed axis
    means = [k for k in arrs if _seed_mean(files.dims.get(k), k)]
    stats.update({k: np.expand_dims(arrs[k], 2) for k in means})
    # the coordinates of a statistic's own dimensions (a 1-D array named after its dimension), as the run had them
    extra = {
        k: (arrs[k], [k])
        for k in arrs
        if k not in stats and k not in ("d", "beta", "seed") and files.dims.get(k) == [k] and arrs[k].ndim == 1
    }
    result = runner.RunResult(
        config=config,
        ts=np.asarray(summary["times"], dtype=float),
        stats=stats,
        xs=arrs.get("xs"),
        steps=arrs["steps"],
        t_event=np.where(np.isnan(arrs["t_clustered"]), np.inf, arrs["t_clustered"]),
        wall_time_s=float(summary.get("wall_time_s", 0.0)),
        extra=extra,
    )
    return result, builtin.resolve(config.experiment)
