"""Whole figures as users run them: ``attnflow run fig3-phase-diagram`` end to end, against the authors' scheme.

    python benchmarks/figures.py              # every row of Fig. 3, then the whole figure cold and warm
    python benchmarks/figures.py --quick      # 64 seeds per row, no whole figure
    python benchmarks/figures.py --rows-only  # the rows, not the whole figure

Each attnflow figure is a fresh process of the ``attnflow`` program (progress and plots on, the
compilation cache in a temporary directory: "cold" is its first run, "warm" the same command again).
A row is the figure at one d (``--set d=[D]``), with its 90 β and 1024 seeds, unless ``--seeds``
shrinks it. The baseline (``baseline.py``: the authors' Euler dt = 0.1 in NumPy float64, β looped,
200 checkpoints) is timed on a sample of each row: 4 β over the row's own seeds (the batch its loop
takes), the first 30 of its 300 steps, half before attnflow's run and half after, scaled to the row's
90 β and 300 steps; it says so in the output. (Timed on 64 seeds instead, it runs 2–4× faster per
member, its arrays fitting the cache: an unfair baseline.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import baseline  # noqa: E402
import machine as _machine  # noqa: E402

import attnflow as af  # noqa: E402
from attnflow.experiments.builtin import EXPERIMENTS  # noqa: E402
from attnflow.experiments.config import load_config  # noqa: E402

FIG3 = "fig3-phase-diagram"
SAMPLE_STEPS = 30


def _attnflow(args: list[str], cache: str, out: str) -> float:
    """Wall time of one ``attnflow`` process (its progress and plots on), from launch to exit."""
    env = dict(os.environ, ATTNFLOW_CACHE_DIR=cache, MPLBACKEND="Agg")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "attnflow.experiments.commands.cli", *args, "--out", out, "--overwrite"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"attnflow {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return wall


def baseline_per_member(d: int, betas: np.ndarray, config, seeds: int) -> float:
    """Seconds per member of the authors' scheme at dimension d, one β of ``betas`` at a time over
    ``seeds`` members (the batch the authors' loop takes for the row), from its first
    ``SAMPLE_STEPS`` Euler steps with checkpoints in the same proportion (200 of 300): every step
    costs the same, as the scheme never stops a member."""
    x0 = np.asarray(af.init.uniform(0, config.n, d, batch=seeds))
    total = int(round(config.t1 / baseline.DT))
    share = SAMPLE_STEPS / total
    start = time.perf_counter()
    for beta in betas:
        baseline.sa_euler(
            x0,
            float(beta),
            config.t1,
            checkpoints=max(2, round(200 * share)),
            delta=config.delta,
            max_steps=SAMPLE_STEPS,
        )
    return (time.perf_counter() - start) / share / (len(betas) * seeds)


def rows(seeds: int | None, cache: str, work: str) -> list[dict]:
    """Each d of Fig. 3 as its own figure: attnflow cold and warm against the scaled baseline."""
    config = load_config(EXPERIMENTS[FIG3].defaults)
    seeds = seeds or config.seeds
    betas = np.asarray(config.beta)
    sample = betas[np.linspace(0, len(betas) - 1, 4).astype(int)]
    out = []
    for d in config.d:
        before = baseline_per_member(d, sample[::2], config, seeds)
        args = ["run", FIG3, "--set", f"d=[{d}]", "--set", f"seeds={seeds}"]
        cold = _attnflow(args, cache, os.path.join(work, f"d{d}"))
        warm = _attnflow(args, cache, os.path.join(work, f"d{d}"))
        after = baseline_per_member(d, sample[1::2], config, seeds)
        members = len(betas) * seeds
        base = 0.5 * (before + after) * members
        row = dict(d=d, members=members, cold=cold, warm=warm, baseline=base)
        out.append(row)
        print(
            f"  d = {d:4d}: attnflow {cold:6.1f} s cold, {warm:6.1f} s warm; baseline {base:8.0f} s "
            f"(scaled from {len(sample)} β × {seeds} seeds × {SAMPLE_STEPS} steps) → {base / cold:6.1f}× cold, "
            f"{base / warm:6.1f}× warm",
            flush=True,
        )
    return out


def whole(cache: str, work: str, baseline_s: float | None) -> dict:
    """The whole figure with its defaults, one process, cold then warm; then its default d = 2 cell
    (2048 seeds) warm with progress on and with --quiet, which should cost the same."""
    args = ["run", FIG3]
    cold = _attnflow(args, cache, os.path.join(work, "fig3"))
    warm = _attnflow(args, cache, os.path.join(work, "fig3"))
    line = f"  whole figure ({FIG3} defaults): {cold:.1f} s cold, {warm:.1f} s warm"
    if baseline_s is not None:
        line += f"; baseline {baseline_s:.0f} s → {baseline_s / cold:.1f}× cold, {baseline_s / warm:.1f}× warm"
    print(line, flush=True)
    cell = ["run", FIG3, "--set", "d=[2]", "--set", "seeds=2048"]
    _attnflow(cell, cache, os.path.join(work, "cell"))  # fills the cache
    loud = _attnflow(cell, cache, os.path.join(work, "cell"))
    quiet = _attnflow(cell + ["--quiet"], cache, os.path.join(work, "cell"))
    print(
        f"  d = 2 cell, 2048 seeds × 90 β, warm: {loud:.1f} s with progress, {quiet:.1f} s with --quiet "
        f"({100 * (loud / quiet - 1):+.0f}%)",
        flush=True,
    )
    return dict(cold=cold, warm=warm, loud=loud, quiet=quiet)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="64 seeds per row and no whole figure")
    p.add_argument("--seeds", type=int, default=None, help="seeds per row (default: the figure's 1024)")
    p.add_argument("--rows-only", action="store_true", help="time the rows, not the whole figure")
    args = p.parse_args(argv)
    seeds = 64 if args.quick else args.seeds
    print(f"machine: {_machine.describe()}")
    work = tempfile.mkdtemp(prefix="attnflow-figures-")
    try:
        cache = os.path.join(work, "cache")
        print(f"{FIG3}, one row per d ({seeds or 'the default'} seeds; progress and plots on):", flush=True)
        measured = rows(seeds, cache, work)
        total = sum(r["baseline"] for r in measured)
        ours = sum(r["cold"] for r in measured)
        print(
            f"  rows together: attnflow {ours:.0f} s cold; baseline {total:.0f} s → {total / ours:.1f}×; "
            f"worst row {min(r['baseline'] / r['cold'] for r in measured):.1f}×"
        )
        if not (args.quick or args.rows_only):
            scale = 1024 / (seeds or 1024)  # the rows' baseline at the figure's own 1024 seeds
            whole(os.path.join(work, "cache-whole"), work, total * scale)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
