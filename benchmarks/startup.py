"""Start-up of ``attnflow run``: what a run spends before its first step, with the compilation cache.

    python benchmarks/startup.py            # first run, repeated run, --quiet, --no-cache
    python benchmarks/startup.py --quick    # first and repeated run only

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


def main(argv=None) -> int:
    return _machine.script_main(run, __doc__, "first and repeated run only", argv)


if __name__ == "__main__":
    sys.exit(main())
