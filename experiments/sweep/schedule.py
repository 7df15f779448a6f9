"""Sweeps: the Cartesian product of ``--grid`` axes, one run directory per grid point.

Grid points that differ only in β share a compiled, vmapped call: their β values become the
members of one ensemble, and the result is split back into one run per point. Every run
directory is written atomically by this process (whichever executor ran the work) and the
manifest is rewritten after each task, so a killed sweep leaves only complete runs behind and
``--resume`` skips them.
"""

from __future__ import annotations

import os
import secrets
import sys
import time
from pathlib import Path

from .. import builtin
from ..config import Config, expand_grid, load_config, parse_grid, shorten
from ..results import store, target
from ..results.runs import format_number, save
from ..run import plan, preflight, runner
from . import executors
from .executors import Task

NEUTRAL_KEYS = ("progress", "memory_gb")
"""Keys that change how a run is shown or cut into compiled calls, not its results (a noisy member's path is
keyed by its seed, the adaptive loop chosen for the whole ensemble): a resumed sweep ignores them."""


def split(result: runner.RunResult, configs: list[Config]) -> list[runner.RunResult]:
    """Cut a merged run (its β list the concatenation of the configs' β lists) into one run per config."""
    out, lo = [], 0
    for c in configs:
        out.append(result.beta_slice(slice(lo, lo + len(c.beta)), c))
        lo += len(c.beta)
    return out


class SweepRuns(list):
    """The manifest's runs of a sweep, in grid order (a list of its entries), and how many of them
    were complete before it started and kept (``reused``, when resuming)."""

    reused: int = 0


class SweepError(RuntimeError):
    """Some runs of a sweep failed (the others are written); the manifest marks which and why, and
    ``runs`` holds its entries."""

    def __init__(self, message: str, runs: SweepRuns | None = None):
        super().__init__(message)
        self.runs = SweepRuns() if runs is None else runs


def tasks_of(points: list, todo: list[int], parts_per_group: int = 1) -> list[Task]:
    """The sweep's tasks: grid points of equal shape merged into one β list, each group cut into
    up to ``parts_per_group`` tasks of (nearly) equal size so that several workers share it."""
    groups: dict = {}
    for i in todo:
        groups.setdefault(plan.ensemble_key(points[i][1]), []).append(i)
    tasks = []
    for g, members in enumerate(groups.values()):
        k = max(1, min(parts_per_group, len(members)))
        size = -(-len(members) // k)
        for p, lo in enumerate(range(0, len(members), size)):
            part = members[lo : lo + size]
            configs = [points[i][1] for i in part]
            # each run keeps the statistics its own figures read, whatever it is merged with
            wanted = {g for c in configs for g in builtin.statistics_groups(c)}
            merged = configs[0].replace(
                beta=[b for c in configs for b in c.beta], statistics=[g for g in plan.GROUPS if g in wanted]
            )
            tasks.append(
                Task(
                    key=f"attnflow-sweep-group{g}-part{p}-{secrets.token_hex(4)}",
                    config=merged.to_dict(),
                    runs=tuple(part),
                )
            )
    return tasks


def _short(value) -> str:
    text = repr(list(value) if isinstance(value, tuple) else value)
    return text if len(text) <= 40 else text[:37] + "..."


def config_differences(run_dir: Path, wanted: Config) -> list[str]:
    """How the configuration stored in ``run_dir`` differs from ``wanted``, one 'key: stored …,
    requested …' per key (the keys of NEUTRAL_KEYS aside); empty when the run is ``wanted``'s."""
    try:
        stored = load_config(store.read_config(run_dir / store.CONFIG_FILE)).to_dict()
    except ValueError as err:  # ConfigError, StoreError: a config this attnflow cannot read is not ``wanted``
        return [f"config.toml unreadable ({' '.join(str(err).split())[:80]})"]
    requested = wanted.to_dict()
    return [
        f"{k}: stored {_short(stored.get(k))}, requested {_short(requested.get(k))}"
        for k in requested
        if k not in NEUTRAL_KEYS and stored.get(k) != requested.get(k)
    ]


def _stale(out: Path, names: list[str], points: list) -> dict[str, list[str]]:
    """The complete runs of the grid in ``out`` made with another configuration, with how they differ."""
    found = {}
    for name, (_, cfg) in zip(names, points):
        if store.is_complete(out / name):
            diff = config_differences(out / name, cfg)
            if diff:
                found[name] = diff
    return found


def check_sweep(
    config: Config, grid_specs: list[str], out: Path, *, resume: bool = False, overwrite: bool = False
) -> tuple[list, list]:
    """Everything about a sweep that can be refused before it runs: the grid, every point's
    config, the output directory, and (``resume``) runs stored there with another configuration.
    Returns (axes, points); raises ValueError, writing nothing."""
    if resume and overwrite:
        raise ValueError("--resume keeps the runs already complete and --overwrite replaces them: give one of them")
    axes = [parse_grid(spec) for spec in grid_specs]
    points = expand_grid(config, axes)  # validates every point before anything runs
    # the keys each run reads, its files, memory and steps, as its experiment runs it
    experiment = builtin.EXPERIMENTS.get(config.experiment)
    preflight.check([cfg for _, cfg in points], experiment=experiment, needs=builtin.needs)
    out = Path(out)
    target.check_name_lengths(out)
    if out.is_symlink():
        raise ValueError(
            f"--out {str(out)!r} is a symbolic link; attnflow writes only into real directories: "
            "give the directory itself, or another --out"
        )
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file, not a directory")
    manifest_path = out / store.MANIFEST_FILE
    if out.is_dir() and any(out.iterdir()) and not manifest_path.is_file():
        raise ValueError(f"--out {str(out)!r} is a non-empty directory that is not an attnflow sweep")
    if manifest_path.is_file() and not (resume or overwrite):
        raise ValueError(
            f"{str(out)!r} already holds a sweep; pass --resume to complete it, --overwrite to "
            "replace its runs (files attnflow did not write are kept), or choose another --out"
        )
    if manifest_path.is_file():
        store.read_manifest(out)  # a corrupt manifest is one line, before anything runs
    for point, _ in points:  # where a run will be written: nothing in the way that is not attnflow's
        run_dir = out / store.run_name(point)
        if os.path.lexists(run_dir) and not (resume and store.is_complete(run_dir)):
            target.check_target(run_dir, overwrite=True, flag="--overwrite")
    if resume:
        stale = _stale(out, [store.run_name(point) for point, _ in points], points)
        if stale:
            done = sum(store.is_complete(out / store.run_name(point)) for point, _ in points)
            keys = sorted({d.split(":", 1)[0] for diff in stale.values() for d in diff})
            first = next(iter(stale.values()))
            raise ValueError(
                f"cannot resume the sweep in {str(out)!r}: {len(stale)} of the {done} complete runs "
                f"there were made with another configuration (differing keys: {', '.join(keys)}; e.g. {'; '.join(first[:3])}); "
                "pass --overwrite to replace them, or choose another --out"
            )
    target.check_target(out / "probe", flag="--overwrite", user=True)
    return axes, points


def run_sweep(
    config: Config,
    experiment,
    grid_specs: list[str],
    out: Path,
    *,
    resume: bool = False,
    overwrite: bool = False,
    plot: bool = True,
    executor=None,
) -> list[dict]:
    """Run every grid point not yet complete in ``out``; return the manifest's runs.

    The grid is the product of ``grid_specs`` (``--grid`` options) applied to ``config``, each point
    run as ``experiment`` runs it.
    ``executor`` (``executors.LocalExecutor`` by default, or a ``DaskExecutor``) runs the tasks;
    this process writes every run directory (atomically) and rewrites the manifest after each
    task. Runs whose task failed are marked "failed" with the error in the manifest and the others
    are kept; SweepError is raised at the end. Ctrl-C leaves a consistent manifest and only
    complete runs; ``resume=True`` completes the sweep (it also clears the temporaries a killed
    process left, known by attnflow's marker inside them, never by their name), refusing if a
    complete run there was made with another configuration.
    ``overwrite=True`` runs every grid point again into a directory that holds a sweep: first the
    runs of the old manifest that are not this sweep's (outside the grid, or of another
    configuration) are removed, then each of the others is replaced when its new run is written;
    files attnflow did not write are kept wherever they are.
    """
    axes, points = check_sweep(config, grid_specs, out, resume=resume, overwrite=overwrite)
    out = Path(out)
    if (resume or overwrite) and out.is_dir():
        store.remove_stale_temporaries(out)

    names = [store.run_name(point) for point, _ in points]
    if overwrite and (out / store.MANIFEST_FILE).is_file():
        _remove_old_runs(out, names, points)
    runs = SweepRuns(
        {"name": name, "point": point, "status": "done" if resume and store.is_complete(out / name) else "pending"}
        for name, (point, _) in zip(names, points)
    )
    axes_dict = {k: list(v) for k, v in axes}
    store.write_manifest(out, axes_dict, runs)

    todo = [i for i, r in enumerate(runs) if r["status"] != "done"]
    runs.reused = len(runs) - len(todo)
    if resume and len(todo) < len(runs):
        print(f"sweep: {len(runs) - len(todo)} of {len(runs)} runs already complete", file=sys.stderr)
    own = executor is None
    executor = executors.LocalExecutor() if own else executor
    tasks = tasks_of(points, todo, 1 if executor.workers == 1 else 2 * executor.workers)
    start = time.perf_counter()
    done, failed = len(runs) - len(todo), 0
    try:
        for task, result in executor.run(tasks):
            if isinstance(result, BaseException):
                for i in task.runs:
                    runs[i]["status"] = "failed"
                    runs[i]["error"] = f"{type(result).__name__}: {result}"
                failed += len(task.runs)
            else:
                for i, part in zip(task.runs, split(result, [points[i][1] for i in task.runs])):
                    # resuming, an incomplete run of attnflow's (an interrupted replacement) is written over too
                    save(out / names[i], part, experiment, plot=plot, overwrite=overwrite or resume)
                    runs[i]["status"] = "done"
                    runs[i].pop("error", None)
                done += len(task.runs)
            store.write_manifest(out, axes_dict, runs)
            if config.progress:
                print(f"sweep: {done}/{len(runs)} runs complete ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    except KeyboardInterrupt:
        store.write_manifest(out, axes_dict, runs)
        print(
            f"sweep: interrupted with {done} of {len(runs)} runs complete in {out}; rerun with --resume to finish",
            file=sys.stderr,
        )
        raise
    finally:
        if own:
            executor.close()
    if failed:
        first = next(r for r in runs if r["status"] == "failed")
        raise SweepError(
            f"{failed} of {len(runs)} runs failed (the others are in {out}; "
            f"{store.MANIFEST_FILE} names each failure); first: {first['name']}: {first['error']}",
            runs,
        )
    return runs


def _remove_old_runs(out: Path, names: list[str], points: list) -> None:
    """Before an overwriting sweep: remove the old manifest's runs that this sweep will not replace
    (outside its grid) and those made with another configuration, so that an interrupted overwrite
    leaves nothing stale for ``--resume`` to find. Only attnflow's files go."""
    wanted = set(names)
    old = [r["name"] for r in store.read_manifest(out)["runs"]]
    stale = [n for n in old if n not in wanted and store.is_run(out / n)] + list(_stale(out, names, points))
    for name in stale:
        kept = store.remove_run(out / name)
        if kept:
            print(
                f"sweep: kept {len(kept)} file(s) attnflow did not write in {out / name}: {', '.join(kept)}",
                file=sys.stderr,
            )


def _run_summary(run_dir: Path) -> dict | None:
    """A run's summary.json, or None where the run is not complete or its summary cannot be read."""
    if not store.is_complete(run_dir):
        return None
    try:
        return store.read_summary(run_dir / store.SUMMARY_FILE)
    except ValueError:
        return None


def report(out: Path, runs: list[dict]) -> dict:
    """The sweep as ``attnflow sweep --json`` prints it: where it is, how many of its runs are done
    (``reused`` of them kept from before), failed or pending, and each run's manifest entry with its
    summary object (null where it has none)."""
    out = Path(out)
    counts = {status: sum(r["status"] == status for r in runs) for status in store.STATUSES}
    return {
        "sweep": str(out),
        "runs_total": len(runs),
        **counts,
        "reused": getattr(runs, "reused", 0),
        "runs": [{**r, "summary": _run_summary(out / r["name"]) if r["status"] == "done" else None} for r in runs],
    }


def _clustering(summary: dict | None) -> str:
    """A run's t_clustered for the report: the mean over its members that clustered, and how many did."""
    times = (summary or {}).get("t_clustered")
    if not isinstance(times, list) or not times:
        return "–"
    reached = [t for t in times if isinstance(t, (int, float))]
    if not reached:
        return f"never (0/{len(times)})"
    mean = format_number(sum(reached) / len(reached))
    return mean if len(reached) == len(times) else f"{mean} ({len(reached)}/{len(times)})"


def print_report(name: str, out: Path, runs: list[dict]) -> None:
    """The sweep on stdout, as ``attnflow run`` reports a run: where its runs went, how many are done,
    reused, failed, and a line per run (its grid point's name, status, t_clustered, steps; or the error)."""
    out = Path(out)
    counts = {status: sum(r["status"] == status for r in runs) for status in store.STATUSES}
    reused = getattr(runs, "reused", 0)
    tally = f"{counts['done']} done" + (f" ({reused} reused)" if reused else "") + f", {counts['failed']} failed"
    if counts["pending"]:
        tally += f", {counts['pending']} pending"
    print(f"{name} sweep: {len(runs)} runs in {out}/: {tally}")
    rows, errors = [("run", "status", "t_clustered", "steps")], {}
    for r in runs:
        if r["status"] == "failed":
            errors[len(rows)] = shorten(str(r.get("error", "")), 100)
            rows.append((r["name"], "failed", "", ""))
            continue
        summary = _run_summary(out / r["name"]) if r["status"] == "done" else None
        steps = summary.get("steps") if summary else None
        rows.append((r["name"], r["status"], _clustering(summary), str(steps) if isinstance(steps, int) else "–"))
    widths = [max(len(row[k]) for row in rows) for k in range(4)]
    for i, row in enumerate(rows):
        line = "  ".join(cell.ljust(w) for cell, w in zip(row, widths))
        if i in errors:  # the error takes the place of the numbers
            line = "  ".join(cell.ljust(w) for cell, w in zip(row[:2], widths)) + "  " + errors[i]
        print("  " + line.rstrip())
