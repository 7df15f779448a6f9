"""Sweeps: the Cartesian product of ``--grid`` axes, one run directory per grid point.

Grid points that differ only in β share a compiled, vmapped call: their β values become the
members of one ensemble, and the result is split back into one run per point. Every run
directory is written atomically and the manifest is rewritten after each group, so a killed
sweep leaves only complete runs behind and ``--resume`` skips them.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from . import runner, store
from .config import Config, expand_grid, parse_grid
from .results import check_writable, save


def _group_key(config: Config) -> tuple:
    # everything but β decides the compiled shape and the initial conditions
    return tuple(sorted((k, repr(v)) for k, v in config.to_dict().items() if k != "beta"))


def split(result: runner.RunResult, configs: list[Config]) -> list[runner.RunResult]:
    """Cut a merged run (its β list the concatenation of the configs' β lists) into one run per config."""
    out, lo = [], 0
    total = sum(len(c.beta) for c in configs)
    for c in configs:
        hi = lo + len(c.beta)
        sl = slice(lo, hi)
        out.append(runner.RunResult(
            config=c, ts=result.ts, stats={k: v[:, sl] for k, v in result.stats.items()},
            xs=None if result.xs is None else result.xs[sl], steps=result.steps[:, sl],
            t_event=result.t_event[:, sl], wall_time_s=result.wall_time_s * (hi - lo) / total))
        lo = hi
    return out


def run_sweep(config: Config, experiment, grid_specs: list[str], out: Path, *, resume: bool = False,
              plot: bool = True) -> list[dict]:
    """Run every grid point not yet complete in ``out``; return the manifest's runs."""
    axes = []
    for spec in grid_specs:
        axes.append(parse_grid(spec))
    points = expand_grid(config, axes)  # validates every point before anything runs
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a file, not a directory")
    manifest_path = out / store.MANIFEST_FILE
    if out.is_dir() and any(out.iterdir()) and not manifest_path.is_file():
        raise ValueError(f"--out {str(out)!r} is a non-empty directory that is not an attnflow sweep")
    if manifest_path.is_file() and not resume:
        raise ValueError(f"{str(out)!r} already holds a sweep; pass --resume to complete it, or choose another --out")
    check_writable(out / "probe")

    names = [store.run_name(point) for point, _ in points]
    runs = [{"name": name, "point": point, "status": "done" if resume and store.is_complete(out / name)
             else "pending"} for name, (point, _) in zip(names, points)]
    axes_dict = {k: list(v) for k, v in axes}
    store.write_manifest(out, axes_dict, runs)

    todo = [i for i, r in enumerate(runs) if r["status"] != "done"]
    if resume and len(todo) < len(runs):
        print(f"sweep: {len(runs) - len(todo)} of {len(runs)} runs already complete", file=sys.stderr)
    groups: dict = {}
    for i in todo:
        groups.setdefault(_group_key(points[i][1]), []).append(i)
    start = time.perf_counter()
    done = len(runs) - len(todo)
    for members in groups.values():
        configs = [points[i][1] for i in members]
        merged = configs[0].replace(beta=[b for c in configs for b in c.beta])
        result = runner.run(merged)
        for i, part in zip(members, split(result, configs)):
            save(out / names[i], part, experiment, plot=plot)
            runs[i]["status"] = "done"
        store.write_manifest(out, axes_dict, runs)
        done += len(members)
        if config.progress:
            print(f"sweep: {done}/{len(runs)} runs complete ({time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return runs

