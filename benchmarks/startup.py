"""Start-up of ``attnflow run``: what a run spends before its first step, with the compilation cache, and the
time to a first result of a warm run against JAX's own floor.

    python benchmarks/startup.py            # the start-up table, then the warm targets and the d = 2 cell
    python benchmarks/startup.py --quick    # first and repeated run only, then the warm targets (no cell)
    python benchmarks/startup.py --api      # the README's Python example only: a second process against the floor

Each run is a fresh process of ``attnflow run fig4-circle --quick --no-plot`` (the program's own
entry point, with its compilation cache in an empty temporary directory). The process records
JAX's compilation events; stepping starts when the integration loop's executable is compiled or
loaded, so "before stepping" is the time from launching the process to that moment: interpreter
and imports, configuration and initial conditions, tracing, lowering, and compiling or loading
from the cache.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import machine as _machine
import numpy as np

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "README.md")

EXPERIMENT = ["run", "fig4-circle", "--quick", "--no-plot"]

# the child: attnflow's own entry point, plus listeners for JAX's compilation events
CHILD = r"""
import json, sys, time
launched = float(sys.argv.pop(1))
import jax.monitoring
spans, counts = [], {}
jax.monitoring.register_event_time_span_listener(
    lambda event, start, end, **kw: spans.append((event.rsplit("/", 1)[-1], kw.get("fun_name", ""), start, end)))
jax.monitoring.register_event_listener(
    lambda event, **kw: counts.__setitem__(event.rsplit("/", 1)[-1], counts.get(event.rsplit("/", 1)[-1], 0) + 1))
from attnflow.experiments.commands import cli
imported = time.time()
sys.argv[0] = "attnflow"
rc = 1
try:
    rc = cli.main()
finally:
    sys.stderr.write("\nSTARTUP " + json.dumps(dict(launched=launched, imported=imported, done=time.time(), rc=rc,
                                                     spans=spans, counts=counts)) + "\n")
sys.exit(rc)
"""

# the executables that integrate: stepping starts when the last of them is ready
LOOPS = ("run_adaptive", "run_fixed", "run_dense")


def machine() -> str:
    return f"{_machine.cpu()}, Python {platform.python_version()}"


def launch(args: list[str], cache: str, out: str) -> dict:
    """One fresh ``attnflow`` process; its phases in seconds."""
    env = dict(os.environ, ATTNFLOW_CACHE_DIR=cache)
    start, launched = time.perf_counter(), time.time()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, repr(launched), *args, "--out", out], env=env, capture_output=True, text=True
    )
    wall = time.perf_counter() - start
    lines = [line for line in proc.stderr.splitlines() if line.startswith("STARTUP ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"attnflow {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rec = json.loads(lines[-1][len("STARTUP ") :])
    spans = rec["spans"]

    def total(kind):
        return sum(end - start for name, _, start, end in spans if name == kind)

    compiles = [s for s in spans if s[0] == "backend_compile_duration"]
    loops = [s for s in compiles if any(loop in s[1] for loop in LOOPS)] or compiles
    stepping = max(end for _, _, _, end in loops) if loops else rec["done"]
    return dict(
        wall=wall,
        before=stepping - launched,
        imports=rec["imported"] - launched,
        trace=total("jaxpr_trace_duration"),
        lower=total("jaxpr_to_mlir_module_duration"),
        compile=total("backend_compile_duration"),
        hits=rec["counts"].get("cache_hits", 0),
        misses=rec["counts"].get("cache_misses", 0),
        entries=len(os.listdir(cache)) if os.path.isdir(cache) else 0,
    )


def run(quick: bool = False) -> None:
    print(f"machine: {machine()}")
    print(f"attnflow {' '.join(EXPERIMENT)}: fresh processes, compilation cache in an empty temporary directory")
    plan = [("first run", []), ("repeated", [])]
    if not quick:
        plan += [("--quiet, first", ["--quiet"]), ("--quiet, repeated", ["--quiet"]), ("--no-cache", ["--no-cache"])]
    header = (
        f"{'':<18} {'wall':>6} {'before stepping':>16} {'imports':>8} {'trace':>6} {'lower':>6} "
        f"{'compile/load':>13} {'cache hits/misses':>18} {'entries':>8}"
    )
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        for i, (label, extra) in enumerate(plan):
            r = launch(EXPERIMENT + extra, cache, os.path.join(tmp, f"run{i}"))
            print(
                f"{label:<18} {r['wall']:5.2f}s {r['before']:15.2f}s {r['imports']:7.2f}s {r['trace']:5.2f}s "
                f"{r['lower']:5.2f}s {r['compile']:12.2f}s {r['hits']:>9d}/{r['misses']:<8d} {r['entries']:8d}"
            )
    print(
        "before stepping: from launching the process to the integration loop's executable being ready;"
        " imports: to `attnflow.experiments.commands.cli` imported.\nProgress bars (on unless --quiet) call back into"
        " Python from the loop, and JAX never caches such programs: the loop is compiled again."
    )


# -- the time to a first result: warm runs against JAX's floor ----------------------------------------------

FLOOR = [sys.executable, "-c", "import jax, jax.numpy as jnp; jnp.zeros(1).block_until_ready()"]
"""JAX's own floor: a fresh process that imports JAX and runs one operation."""

WARM = ("fig4-circle", "fig3-phase-diagram", "meanfield-circle")
CELL = ["run", "fig3-phase-diagram", "--set", "d=[2]", "--set", "seeds=2048"]

# the child that draws a run's figures again, timing the drawing alone (plots and matplotlib imported in it)
DRAW = r"""
import json, sys, tempfile, time
from pathlib import Path
from attnflow.experiments.results import figures, runs
result, experiment = runs.load_result(Path(sys.argv[1]))
start = time.perf_counter()
with tempfile.TemporaryDirectory() as tmp:
    figures.write(Path(tmp), figures.writers(result, experiment))
print(json.dumps(time.perf_counter() - start))
"""


def _wall(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return wall


def _attnflow(args: list[str], cache: str, out: str) -> list[str]:
    return [sys.executable, "-m", "attnflow.experiments.commands.cli", *args, "--out", out, "--overwrite"]


def _compute(out: str) -> float:
    """The run's own wall time (its compiled calls and what the runner does around them), from its summary."""
    with open(os.path.join(out, "summary.json")) as f:
        return float(json.load(f)["wall_time_s"])


def warm_targets(reps: int, cache: str, work: str) -> list[dict]:
    """Per experiment: the warm ``--quick --no-plot --quiet`` run and the warm run with figures, each repeated
    ``reps`` times between measurements of JAX's floor (the same moments of the machine), with the figures'
    own drawing time measured apart."""
    env = dict(os.environ, ATTNFLOW_CACHE_DIR=cache, MPLBACKEND="Agg")
    rows = []
    for name in WARM:
        quiet = ["run", name, "--quick", "--no-plot", "--quiet"]
        plotted = ["run", name, "--quick", "--quiet"]
        out = os.path.join(work, name)
        cold = _wall(_attnflow(quiet, cache, out), env)  # fills the caches
        _wall(_attnflow(plotted, cache, out), env)
        floors, walls, with_figures, draws, computes = [], [], [], [], []
        for _ in range(reps):
            floors.append(_wall(FLOOR, env))
            walls.append(_wall(_attnflow(quiet, cache, out), env))
            computes.append(_compute(out))
            floors.append(_wall(FLOOR, env))
            with_figures.append(_wall(_attnflow(plotted, cache, out), env))
            draw = subprocess.run([sys.executable, "-c", DRAW, out], env=env, capture_output=True, text=True)
            draws.append(json.loads(draw.stdout.strip().splitlines()[-1]))
        rows.append(
            dict(
                name=name,
                cold=cold,
                floor=float(np.median(floors)),
                wall=float(np.median(walls)),
                best=min(walls),
                compute=float(np.median(computes)),
                figures=float(np.median(with_figures)),
                draw=float(np.median(draws)),
            )
        )
    return rows


def cell(cache: str, work: str) -> dict:
    """The default d = 2 cell of Fig. 3 end to end through the command line (progress and figure on), cold and
    warm, against the authors' scheme sampled in the same run (``figures.py``'s sampling: 4 β over the cell's
    2048 seeds, 30 of 300 steps, half before attnflow's runs and half after, scaled to 90 β)."""
    import figures as _figures

    from attnflow.experiments.builtin import EXPERIMENTS
    from attnflow.experiments.config import load_config

    experiment = EXPERIMENTS["fig3-phase-diagram"]
    config = load_config({**experiment.defaults, "d": [2], "seeds": 2048})
    betas = np.asarray(config.beta, dtype=float)
    sample = betas[np.linspace(0, len(betas) - 1, 4).round().astype(int)]
    env = dict(os.environ, ATTNFLOW_CACHE_DIR=cache, MPLBACKEND="Agg")
    out = os.path.join(work, "cell")
    first = _figures.baseline_per_member(2, sample[:2], config, config.seeds)
    cold = _wall(_attnflow(CELL, cache, out), env)
    warm = _wall(_attnflow(CELL, cache, out), env)
    compute = _compute(out)
    second = _figures.baseline_per_member(2, sample[2:], config, config.seeds)
    baseline = (first + second) / 2 * len(betas) * config.seeds
    written = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    return dict(cold=cold, warm=warm, compute=compute, baseline=baseline, written=written)


def targets(quick: bool = False) -> None:
    reps = 2 if quick else 3
    print(f"\nthe time to a first result, warm (median of {reps}; JAX's floor measured between the runs):")
    print(
        f"{'':<20} {'floor':>6} {'cold':>6} {'warm':>6} {'× floor':>8} {'run itself':>11} "
        f"{'with figures':>13} {'drawing':>8} {'× floor + drawing':>18}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        for r in warm_targets(reps, cache, tmp):
            print(
                f"{r['name']:<20} {r['floor']:5.2f}s {r['cold']:5.2f}s {r['wall']:5.2f}s {r['wall'] / r['floor']:7.2f}× "
                f"{r['compute']:10.2f}s {r['figures']:12.2f}s {r['draw']:7.2f}s "
                f"{(r['figures'] - r['draw']) / r['floor']:17.2f}×"
            )
        print(
            "run itself: the runner's wall time (summary.json's wall_time_s: its compiled calls and their inputs);"
            " × floor + drawing: (with figures − drawing) / floor"
        )
        if quick:
            return
        c = cell(cache, tmp)
        print(
            f"\nd = 2 cell (`attnflow {' '.join(CELL[1:])}`, progress and figure on): cold {c['cold']:.1f} s, "
            f"warm {c['warm']:.1f} s (the run itself {c['compute']:.1f} s), {c['written'] / 1e6:.2f} MB written; "
            f"the authors' scheme {c['baseline']:.0f} s (sampled in the same run): "
            f"{c['baseline'] / c['cold']:.1f}× cold, {c['baseline'] / c['warm']:.1f}× warm, "
            f"{c['baseline'] / c['compute']:.1f}× the run itself"
        )


# -- the Python API: the README's example in a second process ------------------------------------------------


def readme_example() -> str:
    """The README's Python example, as written there: its first ``python`` code block."""
    with open(README, encoding="utf-8") as f:
        text = f.read()
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


def api(reps: int) -> dict:
    """The README's Python example as a user runs it (``python example.py``, the compilation cache at its default
    place, here an empty temporary directory given by ATTNFLOW_CACHE_DIR): a first process (cold), then ``reps``
    more, each between two measurements of JAX's floor."""
    code = readme_example()
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "example.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        env = dict(os.environ, ATTNFLOW_CACHE_DIR=os.path.join(tmp, "cache"))
        example = [sys.executable, script]
        start = time.perf_counter()
        first = subprocess.run(example, env=env, capture_output=True, text=True)
        cold = time.perf_counter() - start
        if first.returncode != 0:
            raise RuntimeError(f"the README's example failed ({first.returncode}):\n{first.stderr[-2000:]}")
        floors, walls = [_wall(FLOOR, env)], []
        for _ in range(reps):
            walls.append(_wall(example, env))
            floors.append(_wall(FLOOR, env))
        stored = os.listdir(os.path.join(tmp, "cache", "programs"))
    # each warm run against the mean of the floors measured just before and just after it
    ratios = [wall / ((floors[i] + floors[i + 1]) / 2) for i, wall in enumerate(walls)]
    return dict(
        printed=first.stdout.strip(),
        cold=cold,
        floors=floors,
        walls=walls,
        ratios=ratios,
        stored=len(stored),
    )


def api_table(quick: bool = False) -> None:
    reps = 2 if quick else 3
    r = api(reps)
    print(
        f"\nthe README's Python example (`python example.py`, fresh processes, the cache in an empty directory; it "
        f"printed {r['printed']!r}, {r['stored']} stored program(s)): first {r['cold']:.2f} s, then"
    )
    print(f"{'floor before':>13} {'warm':>7} {'floor after':>12} {'× floor':>8}")
    for i, (wall, ratio) in enumerate(zip(r["walls"], r["ratios"])):
        print(f"{r['floors'][i]:12.2f}s {wall:6.2f}s {r['floors'][i + 1]:11.2f}s {ratio:7.2f}×")
    print(f"median {float(np.median(r['ratios'])):.2f}× JAX's floor (the target: ≤ 2×)")


def run_all(quick: bool = False) -> None:
    run(quick=quick)
    targets(quick=quick)
    api_table(quick=quick)


def main(argv=None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="first and repeated run only, no d = 2 cell")
    p.add_argument("--api", action="store_true", help="the README's Python example only (with --quick: 2 repetitions)")
    args = p.parse_args(argv)
    if args.api:
        api_table(quick=args.quick)
    else:
        run_all(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
