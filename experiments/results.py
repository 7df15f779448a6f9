"""From a finished run to its directory: summary, arrays, figures; and back, to redraw figures."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import numpy as np

from . import builtin, runner, store
from .config import load_config


def check_writable(out: Path, *, overwrite: bool = False) -> None:
    """Refuse, before any work, an output path that cannot become a run directory: a file, a link,
    a directory holding anything but an attnflow run, or (unless ``overwrite``) an existing run."""
    if "\0" in str(out):
        raise ValueError(f"--out {str(out)!r} contains a NUL character")
    given = str(out)
    out = Path(os.path.abspath(out))
    store.check_entry_name("--out directory", out.name)  # what the store would refuse after the run
    if out.is_symlink():
        raise ValueError(f"--out {given!r} is a symbolic link (to {os.readlink(out)!r}); attnflow writes only "
                         "into real directories: give the directory itself, or another --out")
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {given!r} is a file, not a directory")
    if store.is_run(out):
        if not overwrite:
            raise ValueError(f"--out {given!r} already holds an attnflow run; pass --overwrite to replace it "
                             "(files attnflow did not write are kept), or choose another --out")
    elif out.is_dir() and any(out.iterdir()):
        raise ValueError(f"--out {given!r} is a non-empty directory that is not an attnflow run; "
                         "choose another --out")
    parent = out.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"cannot create {str(out)!r}: {str(parent)!r} is a file")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot write to {str(parent)!r} (permission denied)")
    # permissions do not tell everything (read-only mounts, root on special file systems): try
    probe = parent / f".attnflow-probe-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        os.mkdir(probe)
    except OSError as err:
        raise ValueError(f"cannot write to {str(parent)!r} ({err.strerror or err})") from None
    os.rmdir(probe)


def execute(config) -> runner.RunResult:
    return runner.run(config)


def figures(result: runner.RunResult, experiment: builtin.Experiment, kinds=None) -> dict:
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


def save(out: Path, result: runner.RunResult, experiment: builtin.Experiment, *, plot: bool = True,
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


def print_report(result: runner.RunResult, experiment: builtin.Experiment, out: Path) -> None:
    """A short human-readable account of a run on stdout: where it went, what the theory says."""
    c = result.config
    members = int(np.prod(result.steps.shape))
    print(f"{experiment.name}: {members} member(s), n = {c.n}, d = {list(c.d)}, "
          f"{len(c.beta)} β value(s), t1 = {c.t1:g}, {c.solver}; {result.wall_time_s:.1f} s")
    changed = builtin.changed_model_keys(c, experiment)
    if changed:
        print(f"  theory checks skipped: they hold for {experiment.name}'s own model, and this run sets "
              + ", ".join(changed))
    else:
        for check in experiment.checks(result):
            mark = "ok  " if check.passed else "FAIL"
            print(f"  [{mark}] {check.name}: expected {check.expected}, measured {check.measured}")
    print(f"results in {out}/")
    for p in sorted(Path(out).iterdir()):
        if p.suffix in (".png", ".gif"):
            print(f"  {p.name}")


def load_result(run_dir: Path) -> tuple[runner.RunResult, builtin.Experiment]:
    """Rebuild a RunResult from a run directory (arrays read without unpickling)."""
    if not store.is_complete(run_dir):
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow run (config.toml, summary.json, results.npz)")
    table = store.read_config(run_dir / store.CONFIG_FILE)
    try:
        config = load_config(table)
    except ValueError as err:
        raise ValueError(f"{str(run_dir / store.CONFIG_FILE)!r} is not a valid attnflow configuration: {err}") from None
    summary = store.read_summary(run_dir / store.SUMMARY_FILE)
    arrs, _ = store.read_arrays(run_dir / store.RESULTS_FILE)
    missing = [] if isinstance(summary, dict) and "times" in summary else [f"{store.SUMMARY_FILE}: times"]
    missing += [f"{store.RESULTS_FILE}: {k}" for k in ("steps", "t_clustered") if k not in arrs]
    if missing:
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow run: it lacks {', '.join(missing)}")
    stats = {k: arrs[k] for k in arrs if k not in ("d", "beta", "seed", "steps", "t_clustered", "xs")
             and arrs[k].ndim >= 4}
    result = runner.RunResult(config=config, ts=np.asarray(summary["times"], dtype=float), stats=stats,
                              xs=arrs.get("xs"), steps=arrs["steps"],
                              t_event=np.where(np.isnan(arrs["t_clustered"]), np.inf, arrs["t_clustered"]),
                              wall_time_s=float(summary.get("wall_time_s", 0.0)))
    return result, builtin.resolve(config.experiment)


def write_figures(directory: Path, writers: dict) -> list[Path]:
    """Draw figures into ``directory``, each to a temporary name first and renamed when complete,
    and add them to the directory's list of attnflow's files. A file of the same name that attnflow
    did not write is never replaced: it is an error, before anything is drawn."""
    targets = {name: directory / (name if name.endswith((".png", ".gif")) else f"{name}.png") for name in writers}
    owned = store.owned_files(directory)
    for target in targets.values():
        if os.path.lexists(target) and target.name not in owned:
            raise ValueError(f"{str(target)!r} was not written by attnflow; move it away to draw this figure")
    written = []
    for name, draw in writers.items():
        target = targets[name]
        tmp = target.with_name(f".{target.name}.tmp{target.suffix}")
        try:
            draw(tmp)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        written.append(target)
        store.record_files(directory, [target.name])
    return written


def replot(path: Path, kinds=None) -> list[Path]:
    """Redraw the figures of a run, or of every complete run of a sweep, in place."""
    if (path / store.MANIFEST_FILE).is_file():
        runs = [path / r["name"] for r in store.read_manifest(path)["runs"] if store.is_complete(path / r["name"])]
    elif path.is_dir():
        runs = [path]
    else:
        raise ValueError(f"{str(path)!r} is not a run or sweep directory")
    from . import hist

    written = []
    for run_dir in runs:
        if hist.is_hist_run(run_dir):  # written by attnflow hist
            written += hist.replot(run_dir, kinds)
            continue
        result, experiment = load_result(run_dir)
        written += write_figures(run_dir, figures(result, experiment, kinds))
    if not written:
        print("no figures to draw", file=sys.stderr)
    return written
