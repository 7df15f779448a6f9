"""From a finished run to its directory: summary, arrays, figures; and back, to redraw figures."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from . import builtin, runner, store
from .config import load_config
from .output import write_figures
from .registry import Experiment
from .rundir import STATE_DIMS


def execute(config) -> runner.RunResult:
    """The run of ``config``: its experiment's own runner, or the particle ensemble with the statistics
    the experiment reads (``builtin.run``)."""
    return builtin.run(config)


def figures(result: runner.RunResult, experiment: Experiment, kinds=None) -> dict:
    """The experiment's figure writers, each wrapped to close its figure after saving."""
    writers = {**experiment.figures(result), **builtin.statistics_figures(result)}
    if kinds:
        def stem(name):
            return name.removesuffix(".png").removesuffix(".gif")

        unknown = [k for k in kinds if stem(k) not in {stem(w) for w in writers}]
        if unknown:
            raise ValueError(f"unknown figure {unknown[0]!r}; this run has: {', '.join(map(stem, writers))}")
        writers = {k: v for k, v in writers.items() if stem(k) in {stem(x) for x in kinds}}
    return writers


def save(out: Path, result: runner.RunResult, experiment: Experiment, *, plot: bool = True,
         error: str | None = None, overwrite: bool = False) -> dict:
    """Write the run directory (atomically) and return its summary; ``error`` (a run that stopped
    early, e.g. on non-finite values) is recorded in the summary as ``"error"``; ``overwrite``
    replaces an existing run's files (``store.write_run``)."""
    summary = runner.summarize(result)
    if error is not None:
        summary["error"] = error
    arrays, dims = runner.arrays(result)
    store.write_run(out, runner.config_toml(result), summary, arrays, figures(result, experiment) if plot else None,
                    dims=dims, overwrite=overwrite)
    return summary


def print_report(result: runner.RunResult, experiment: Experiment, out: Path) -> None:
    """A short human-readable account of a run on stdout: where it went, what the theory says."""
    c = result.config
    members = int(np.prod(result.steps.shape))
    print(f"{experiment.name}: {experiment.describe(c, members)}; {result.wall_time_s:.1f} s")
    checks = experiment.checks(result)
    # a configuration of one's own has no theory checks to skip
    changed = builtin.changed_model_keys(c, experiment) if experiment.name in builtin.EXPERIMENTS else []
    if changed and checks:
        print(f"  theory checks skipped: they hold for {experiment.name}'s own model, and this run sets "
              + ", ".join(changed))
    else:
        for check in checks:
            print(f"  [{check.mark}] {check.name}: expected {check.expected}, measured {check.measured}")
    print(f"results in {out}/")
    for p in sorted(Path(out).iterdir()):
        if p.suffix in (".png", ".gif"):
            print(f"  {p.name}")


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
    stats = {k: arrs[k] for k in arrs if k not in ("d", "beta", "seed", "steps", "t_clustered", "xs")
             and arrs[k].ndim >= 4}
    result = runner.RunResult(config=config, ts=np.asarray(summary["times"], dtype=float), stats=stats,
                              xs=arrs.get("xs"), steps=arrs["steps"],
                              t_event=np.where(np.isnan(arrs["t_clustered"]), np.inf, arrs["t_clustered"]),
                              wall_time_s=float(summary.get("wall_time_s", 0.0)))
    return result, builtin.resolve(config.experiment)


def replot(path: Path, kinds=None) -> list[Path]:
    """Redraw the figures of a run, or of every complete run of a sweep, in place."""
    if (path / store.MANIFEST_FILE).is_file():
        runs = [path / r["name"] for r in store.read_manifest(path)["runs"] if store.is_complete(path / r["name"])]
    elif path.is_dir():
        runs = [path]
    else:
        raise ValueError(f"{str(path)!r} is not a run or sweep directory")
    from . import fit, hist

    written = []
    for run_dir in runs:
        if hist.is_hist_run(run_dir):  # written by attnflow hist
            written += hist.replot(run_dir, kinds)
            continue
        if fit.is_fit_run(run_dir):  # written by attnflow fit
            written += fit.replot(run_dir, kinds)
            continue
        result, experiment = load_result(run_dir)
        written += write_figures(run_dir, figures(result, experiment, kinds))
    if not written:
        print("no figures to draw", file=sys.stderr)
    return written
