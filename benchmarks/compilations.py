"""Every compilation of a whole figure, cold: how many programs XLA compiles and how long each takes.

    python benchmarks/compilations.py                         # Fig. 3 and Fig. 5, cold, through the command line
    python benchmarks/compilations.py --figures fig3-phase-diagram --repeat 3
    python benchmarks/compilations.py --against ../old/attnflow   # alternated with another checkout (a folder named
                                                                  # attnflow), compile seconds pair by pair

Each run is a fresh ``attnflow run FIGURE --set t1=T`` process with an empty compilation cache and JAX's own
compile log on (``JAX_LOG_COMPILES=1``: one "Finished XLA compilation of NAME in S sec" line per program, the
same for every version of attnflow). ``t1`` is shortened (default 1): the figure's shapes, chunks and programs
are those of its full run (the step count is data, not a shape), so the compilations are the full figure's while
its arithmetic takes seconds. With ``--against DIR`` the same command runs from that checkout (its parent folder
put first on PYTHONPATH), alternated with this one, and the table gives both and their ratio: compile times on a
shared machine drift, so only the pairs are compared.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINE = re.compile(r"Finished XLA compilation of (\S+) in ([0-9.eE+-]+) sec")
HERE = Path(__file__).resolve().parent.parent


def cold_run(figure: str, t1: float, checkout: Path, extra: list[str]) -> tuple[float, dict[str, list[float]]]:
    """(wall seconds, program name → compile seconds of each of its compilations) of one cold run."""
    with tempfile.TemporaryDirectory(prefix="attnflow-compile-") as tmp:
        env = dict(os.environ, ATTNFLOW_CACHE_DIR=os.path.join(tmp, "cache"), JAX_LOG_COMPILES="1", MPLBACKEND="Agg")
        env["PYTHONPATH"] = os.pathsep.join([str(checkout.parent), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        args = [sys.executable, "-m", "attnflow.experiments.commands.cli", "run", figure, "--set", f"t1={t1:g}"]
        args += [*extra, "--no-plot", "--quiet", "--out", os.path.join(tmp, "out")]
        start = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=tmp)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed (rc {done.returncode}):\n{done.stderr[-2000:]}")
    programs: dict[str, list[float]] = collections.defaultdict(list)
    for name, seconds in LINE.findall(done.stderr):
        programs[name].append(float(seconds))
    return wall, programs


def totals(programs: dict[str, list[float]]) -> tuple[int, float]:
    return sum(len(v) for v in programs.values()), sum(sum(v) for v in programs.values())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--figures", default="fig3-phase-diagram,fig5-random-matrices", help="comma-separated experiments")
    p.add_argument("--t1", type=float, default=1.0, help="the runs' t1 (default 1: the full figure's programs)")
    p.add_argument("--repeat", type=int, default=2, help="cold runs of each (default 2)")
    p.add_argument("--against", type=Path, help="another attnflow checkout to alternate with (its root folder)")
    p.add_argument("--top", type=int, default=6, help="programs listed by compile seconds (default 6)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="more overrides for every run")
    args = p.parse_args(argv)
    checkouts = {"this": HERE}
    if args.against is not None:
        checkouts["other"] = args.against.resolve()
    for figure in [f for f in args.figures.split(",") if f]:
        runs: dict[str, list[tuple[float, dict]]] = {k: [] for k in checkouts}
        for _ in range(args.repeat):
            for which, root in checkouts.items():
                runs[which].append(cold_run(figure, args.t1, root, [a for kv in args.set for a in ("--set", kv)]))
        sets = "".join(f", {kv}" for kv in args.set)
        print(f"\n{figure} (t1 = {args.t1:g}{sets}), cold, {args.repeat} run(s) each")
        print("| checkout | programs compiled | compile seconds (each run) | wall (each run) |")
        print("|---|---|---|---|")
        for which, rs in runs.items():
            counts = {totals(r[1])[0] for r in rs}
            secs = ", ".join(f"{totals(r[1])[1]:.2f}" for r in rs)
            walls = ", ".join(f"{r[0]:.1f}" for r in rs)
            print(f"| {which} ({checkouts[which]}) | {'/'.join(map(str, sorted(counts)))} | {secs} | {walls} |")
        if "other" in runs:
            ratios = [totals(a[1])[1] / totals(b[1])[1] for a, b in zip(runs["this"], runs["other"])]
            print("compile seconds this/other, pair by pair: " + ", ".join(f"{r:.2f}" for r in ratios))
        last = runs["this"][-1][1]
        print(f"the slowest programs of the last run here (name: compilations, seconds), of {len(last)}:")
        for name, secs in sorted(last.items(), key=lambda kv: -sum(kv[1]))[: args.top]:
            print(f"  {name}: {len(secs)}, {sum(secs):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
