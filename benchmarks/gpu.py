"""attnflow on one GPU: a GPU test subset, then the paper's whole Fig. 3 and Fig. 5 through the command line,
cold and warm, against the authors' scheme in PyTorch on the same GPU; the compilations of each figure (count and
seconds, from its summary.json), Fig. 5's arithmetic rate against the device's float32 rate, the fused Pallas
step against the XLA step, and CPU and GPU compared on one configuration.

    bash benchmarks/gpu.sh                  # on a GPU machine: sets up, then runs this (≈ 8 minutes)
    python benchmarks/gpu.py --quick        # anywhere: shrunk figures, to check the script itself

Every part runs under a share of one time budget (``--budget``, seconds): a part that would not fit is
skipped and says so, a part that runs out of time is stopped and reported as "> its limit", so a lease
of fixed length always ends with a table. The figures are fresh processes of the ``attnflow`` program
(progress and plots on, the compilation cache in a temporary directory: "cold" is the first run, "warm"
the same command again).

The baseline is the authors' scheme as their phase-diagram script runs it on a GPU: PyTorch, float64,
explicit Euler dt = 0.1 with the unprojected velocity then renormalization, the ensemble batched, β
looped, the clustered-pairs fraction at 200 checkpoints (``baseline.py`` is the same scheme in NumPy).
It is timed on a sample, as ``figures.py`` does on CPUs: two β of each row over the row's 1024 seeds,
the first 30 of its 300 steps, scaled to the row's 90 β and 300 steps; for Fig. 5, one β of each
ensemble with its own random Q, K, V over 1024 seeds. The output says so.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import baseline  # noqa: E402

FIG3, FIG5 = "fig3-phase-diagram", "fig5-random-matrices"
SAMPLE_STEPS = 30
PARTS = ("tests", "baseline", "fig5", "fig5-warm", "fig3", "fig3-warm", "cell", "agree", "pallas")
TESTS = [
    "tests/particles/test_blocked.py",
    "tests/solvers/test_dense.py",
    "tests/solvers/test_device_loops.py",
    "tests/solvers/test_pallas_step.py",
    "tests/solvers/test_precision.py",
    "tests/experiments/run/test_device_plan.py",
]
FLOAT32_RATE = 67e12
"""The H200's dense float32 rate (flop/s, without tensor cores), against which Fig. 5's arithmetic is measured."""


class Clock:
    """The time left of one budget, handed out to the parts in turn."""

    def __init__(self, budget: float):
        self.end = time.perf_counter() + budget

    def left(self) -> float:
        return self.end - time.perf_counter()


def say(line: str) -> None:
    print(line, flush=True)


def run(args: list[str], limit: float, log: str, env: dict | None = None) -> tuple[float, str]:
    """Wall time of a subprocess (its output appended to ``log``) and its outcome: "ok", "failed (rc N)" or
    "> limit"."""
    start = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"\n$ {' '.join(args)}\n")
        f.flush()
        try:
            done = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=max(limit, 1.0))
            outcome = "ok" if done.returncode == 0 else f"failed (rc {done.returncode})"
        except subprocess.TimeoutExpired:
            outcome = f"> {limit:.0f} s (stopped)"
    return time.perf_counter() - start, outcome


def attnflow(args: list[str], cache: str, out: str, limit: float, log: str) -> tuple[float, str]:
    env = dict(os.environ, ATTNFLOW_CACHE_DIR=cache, MPLBACKEND="Agg")
    cli = [sys.executable, "-m", "attnflow.experiments.commands.cli"]
    return run([*cli, *args, "--out", out, "--overwrite"], limit, log, env)


# -- the authors' scheme in PyTorch ---------------------------------------------------------------


def torch_euler(torch, x, beta: float, steps: int, total: int, *, M=None, Vt=None, delta: float = 1e-3) -> float:
    """Seconds for the first ``steps`` of ``total`` Euler steps of the authors' scheme (float64, synchronized),
    with the checkpoints in the same proportion (200 of ``total``)."""
    b, n, _ = x.shape
    record = set(np.linspace(0, steps, max(2, round(200 * steps / total)), dtype=int).tolist())
    off = ~torch.eye(n, dtype=torch.bool, device=x.device)
    fractions = []
    if x.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for k in range(steps + 1):
        xt = x.transpose(1, 2)
        if k in record:
            fractions.append(((x @ xt)[:, off] > 1.0 - delta).double().mean(dim=1))
        if k == steps:
            break
        w = torch.exp(beta * ((x if M is None else x @ M) @ xt))
        w = w / w.sum(dim=2, keepdim=True)
        y = w @ x
        if Vt is not None:
            y = y @ Vt
        x = x + baseline.DT * y
        x = x / torch.linalg.norm(x, dim=2, keepdim=True)
    torch.stack(fractions).sum().item()  # waits for the device
    return time.perf_counter() - start


def uniform(torch, device, seeds: int, n: int, d: int):
    """Uniform initial conditions on the sphere, (seeds, n, d) float64, drawn where the scheme runs (the scheme's
    cost does not depend on the draw: it never stops a member)."""
    x = torch.randn(seeds, n, d, dtype=torch.float64, device=device)
    return x / torch.linalg.norm(x, dim=2, keepdim=True)


def baseline_fig3(torch, device, config, seeds: int) -> dict:
    """Seconds per member of the authors' scheme at each d of the figure, on a sample (see the module)."""
    betas = np.asarray(config.beta)
    sample = betas[[len(betas) // 3, 2 * len(betas) // 3]]
    total = int(round(config.t1 / baseline.DT))
    out = {}
    for d in config.d:
        x0 = uniform(torch, device, seeds, config.n, d)
        torch_euler(torch, x0, float(sample[0]), 2, total)  # warm-up: kernels loaded, handles made
        spent = sum(torch_euler(torch, x0, float(b), SAMPLE_STEPS, total) for b in sample)
        out[d] = spent / (SAMPLE_STEPS / total) / (len(sample) * seeds)
    return out


def baseline_fig5(torch, device, config, seeds: int) -> float:
    """Seconds per member of the authors' scheme on Fig. 5's members: their script draws QᵀK and V for every
    ensemble, so a step costs the logits' x M xᵀ and the values' (A x) Vᵀ whatever the ensemble's law."""
    d, n = int(np.ravel(config.d)[0]), int(config.n)
    total = int(round(config.t1 / baseline.DT))
    x = uniform(torch, device, seeds, n, d)
    M = torch.randn(seeds, d, d, dtype=torch.float64, device=device) / d
    Vt = torch.randn(seeds, d, d, dtype=torch.float64, device=device) / np.sqrt(d)
    torch_euler(torch, x, 4.0, 2, total, M=M, Vt=Vt)
    return torch_euler(torch, x, 4.0, SAMPLE_STEPS, total, M=M, Vt=Vt) / (SAMPLE_STEPS / total) / seeds


# -- the parts --------------------------------------------------------------------------------------


def compilations(out: str) -> dict | None:
    """The compilations a run recorded in its summary.json (``solvers/compilations.py``), None without one."""
    try:
        with open(os.path.join(out, "summary.json")) as f:
            return json.load(f).get("compilations")
    except (OSError, ValueError):
        return None


def fig5_flop() -> float:
    """Fig. 5's arithmetic: per member and RK4 stage the logits (x M) xᵀ and the values A (x V), n·d² + n²·d
    multiply-adds each (QᵀK formed once per member), 4 stages per step, t1/dt steps."""
    from attnflow.experiments.builtin import EXPERIMENTS
    from attnflow.experiments.config import load_config

    c = load_config(None, [], base=EXPERIMENTS[FIG5].defaults)
    n, d = int(c.n), int(np.ravel(c.d)[0])
    members = 4 * len(np.asarray(c.beta)) * int(c.seeds)
    per_stage = 2 * 2 * (n * d * d + n * n * d)
    return float(members * per_stage * 4 * round(c.t1 / c.dt))


def agreement(cache: str, work: str, limit: float, log: str) -> list[tuple[str, str, str]]:
    """The same configuration on the GPU and on the CPU (``JAX_PLATFORMS=cpu``): Fig. 3's d = 8 row at 256 seeds
    (clustered fractions within 4 binomial standard errors) and 4 members' states at t = 3 in float32 (within
    float32 rounding, 1e-5)."""
    if limit < 30:
        return [("CPU and GPU on the same configuration", "—", "skipped (no time left)")]
    row = ["--set", "d=[8]", "--set", "seeds=256", "--no-plot"]
    states = [
        "--set",
        "d=[8]",
        "--set",
        "seeds=4",
        "--set",
        "t1=3",
        "--set",
        "n_save=4",
        "--set",
        "beta=[1,4]",
        "--set",
        "save_states=yes",
        "--no-plot",
    ]
    outs = {}
    start = time.perf_counter()
    for where in ("gpu", "cpu"):
        env_cpu = where == "cpu"
        for name, extra in (("row", row), ("states", states)):
            out = os.path.join(work, f"agree-{name}-{where}")
            env = dict(os.environ, ATTNFLOW_CACHE_DIR=cache + where, MPLBACKEND="Agg")
            if env_cpu:
                env["JAX_PLATFORMS"] = "cpu"
            cli = [sys.executable, "-m", "attnflow.experiments.commands.cli", "run", FIG3, *extra, "--out", out]
            _, outcome = run(
                [*cli, "--overwrite", "--quiet"], max(1.0, limit - (time.perf_counter() - start)), log, env
            )
            if outcome != "ok":
                return [("CPU and GPU on the same configuration", f"{time.perf_counter() - start:.0f} s", outcome)]
            outs[name, where] = out
    from attnflow import load

    g, c = load(outs["row", "gpu"]), load(outs["row", "cpu"])
    pg, pc = (r["clustered_fraction"] for r in (g, c))
    pg, pc = (f.mean("seed").values if "seed" in f.dims else f.values for f in (pg, pc))
    p = 0.5 * (pg + pc)
    se = np.sqrt(np.maximum(p * (1 - p), 1e-12) / 256)
    worst = float(np.nanmax(np.abs(pg - pc) / (se + 1e-12)))
    xs_g, xs_c = load(outs["states", "gpu"])["xs"].values, load(outs["states", "cpu"])["xs"].values
    gap = float(np.nanmax(np.abs(xs_g - xs_c)))
    wall = f"{time.perf_counter() - start:.0f} s"
    return [
        (
            "CPU and GPU: Fig. 3's d = 8 row at 256 seeds, clustered fractions",
            wall,
            f"largest gap {worst:.1f} binomial s.e. ({'ok' if worst <= 4 else 'DIFFERENT'})",
        ),
        (
            "CPU and GPU: 4 members' float32 states at t = 3",
            "",
            f"largest gap {gap:.1e} ({'ok' if gap <= 1e-5 else 'DIFFERENT'})",
        ),
    ]


def environment() -> dict:
    import jax

    info = dict(jax=jax.__version__, backend=jax.default_backend(), devices=[str(d) for d in jax.devices()])
    for name in ("jaxlib", "diffrax", "equinox", "xarray", "numpy", "torch"):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = None
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        info["gpu"] = smi.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        info["gpu"] = "none (no nvidia-smi)"
    return info


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=480.0, help="seconds for everything (default 480)")
    p.add_argument("--quick", action="store_true", help="the figures' --quick versions and 64 baseline seeds")
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-out"), help="folder for the log, table and figures")
    p.add_argument(
        "--parts",
        default=",".join(PARTS),
        help=f"the parts to run, in this order (default {','.join(PARTS)})",
    )
    args = p.parse_args(argv)
    parts = [q for q in args.parts.split(",") if q]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    clock = Clock(args.budget)
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "gpu.log")
    rows: list[tuple[str, str, str]] = []

    info = environment()
    say(f"machine: {info['gpu']}; jax {info['jax']} on {info['backend']} {info['devices']}")
    say("versions: " + ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("gpu", "backend", "devices")))

    work = tempfile.mkdtemp(prefix="attnflow-gpu-")
    cache = os.path.join(work, "cache")
    quick = ["--quick"] if args.quick else []
    try:
        # 1. the GPU test subset (the paths a GPU changes: dense and blocked attention, the loops)
        if "tests" in parts:
            limit = min(100.0, 0.2 * clock.left())
            wall, outcome = run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "4", "-x", *TESTS], limit, log
            )
            rows.append(("GPU test subset: " + ", ".join(os.path.basename(t) for t in TESTS), f"{wall:.0f} s", outcome))
            say(f"tests: {outcome} in {wall:.0f} s")

        # 2. the authors' scheme on this GPU (a sample, scaled)
        base3: dict = {}
        base5 = None
        try:
            if "baseline" not in parts:
                raise ImportError
            import torch

            from attnflow.experiments.builtin import EXPERIMENTS
            from attnflow.experiments.config import load_config

            device = "cuda" if torch.cuda.is_available() else "cpu"
            c3 = load_config(None, [], base=EXPERIMENTS[FIG3].defaults)
            seeds = 64 if args.quick else int(c3.seeds)
            t = time.perf_counter()
            base3 = baseline_fig3(torch, device, c3, seeds)
            base5 = baseline_fig5(torch, device, load_config(None, [], base=EXPERIMENTS[FIG5].defaults), seeds)
            members3 = len(np.asarray(c3.beta)) * int(c3.seeds)
            say(f"authors' scheme, PyTorch float64 on {device} ({time.perf_counter() - t:.0f} s to sample):")
            for d, s in base3.items():
                say(f"  Fig. 3 row d = {d}: {s * 1e3:.3f} ms per member → {s * members3:.0f} s for the row")
            say(f"  Fig. 5: {base5 * 1e3:.3f} ms per member")
        except ImportError:
            say("authors' scheme: not timed" + ("" if "baseline" not in parts else " (no PyTorch)"))

        # 3. the whole figures, cold then warm
        def figure(name: str, label: str, limit: float, extra=(), folder: str | None = None) -> float | None:
            if clock.left() < 20 or limit < 15:
                rows.append((label, "—", "skipped (no time left)"))
                return None
            out = os.path.join(work, folder or name)
            wall, outcome = attnflow(["run", name, *quick, *extra], cache, out, limit, log)
            rows.append((label, f"{wall:.1f} s", outcome))
            say(f"{label}: {wall:.1f} s, {outcome}")
            compiled = compilations(out)
            if compiled:
                rows.append(
                    (
                        f"  its compilations ({compiled['cached']} loaded from the cache)",
                        f"{compiled['seconds']:.1f} s",
                        f"{compiled['compiled']} programs",
                    )
                )
                say(
                    f"  compilations: {compiled['compiled']} programs in {compiled['seconds']:.1f} s, {compiled['cached']} loaded"
                )
                slowest = sorted(compiled["by_program"].items(), key=lambda kv: -kv[1]["seconds"])[:4]
                say("  slowest: " + ", ".join(f"{k} {v['compiled']}× {v['seconds']:.1f} s" for k, v in slowest))
            return wall if outcome == "ok" else None

        cold3 = cold5 = warm3 = warm5 = warm_cell = None
        cell = ["--set", "d=[2]", "--set", "seeds=2048"]
        for part in parts:
            if part == "fig3":
                cold3 = figure(FIG3, "Fig. 3 whole, cold", min(120.0, clock.left() - 20.0))
            elif part == "fig5":
                cold5 = figure(FIG5, "Fig. 5 whole, cold", min(150.0, clock.left() - 20.0))
            elif part == "fig5-warm":
                warm5 = figure(FIG5, "Fig. 5 whole, warm", min(100.0, clock.left() - 10.0))
            elif part == "agree":
                rows.extend(agreement(cache, work, min(90.0, clock.left() - 10.0), log))
            elif part == "pallas":
                limit = min(60.0, clock.left() - 5.0)
                bench = [
                    sys.executable,
                    os.path.join(os.path.dirname(__file__), "pallas_step.py"),
                    "--dtype",
                    "float32",
                ]
                wall, outcome = run(bench, limit, log)
                rows.append(
                    (
                        "fused Pallas RK4 step against XLA's (benchmarks/pallas_step.py, ratios in gpu.log)",
                        f"{wall:.0f} s",
                        outcome,
                    )
                )
            elif part == "fig3-warm":
                warm3 = figure(FIG3, "Fig. 3 whole, warm", min(150.0, clock.left() - 10.0))
            elif part == "cell":
                figure(FIG3, "Fig. 3 d = 2 cell (2048 seeds), cold", min(60.0, clock.left() - 30.0), cell, "cell")
                warm_cell = figure(
                    FIG3, "Fig. 3 d = 2 cell (2048 seeds), warm", min(60.0, clock.left() - 5.0), cell, "cell"
                )

        # 4. ratios against the authors' scheme on the same GPU
        if base3:
            from attnflow.experiments.builtin import EXPERIMENTS
            from attnflow.experiments.config import load_config

            c3 = load_config(None, [], base=EXPERIMENTS[FIG3].defaults)
            members3 = len(np.asarray(c3.beta)) * int(c3.seeds)
            whole3 = sum(base3.values()) * members3
            for label, wall in (("cold", cold3), ("warm", warm3)):
                if wall and not args.quick:
                    rows.append(
                        (
                            f"Fig. 3 whole {label} against the authors' scheme ({whole3:.0f} s)",
                            "",
                            f"{whole3 / wall:.1f}×",
                        )
                    )
            if warm_cell and not args.quick:
                cell_base = base3[2] * len(np.asarray(c3.beta)) * 2048
                rows.append(
                    (
                        f"d = 2 cell warm against the authors' scheme ({cell_base:.0f} s)",
                        "",
                        f"{cell_base / warm_cell:.1f}×",
                    )
                )
        if base5 is not None and not args.quick:
            members5 = 4 * 90 * 1024
            for label, wall in (("cold", cold5), ("warm", warm5)):
                if wall:
                    rows.append(
                        (
                            f"Fig. 5 whole {label} against the authors' scheme ({base5 * members5:.0f} s)",
                            "",
                            f"{base5 * members5 / wall:.1f}×",
                        )
                    )
        if warm5 and not args.quick:
            flop = fig5_flop()
            rate = flop / warm5
            rows.append(
                (
                    f"Fig. 5 warm: {flop:.2g} flop of attention products at {rate / 1e12:.1f} TFLOP/s",
                    "",
                    f"{FLOAT32_RATE / rate:.1f}× below the float32 rate ({FLOAT32_RATE / 1e12:.0f} TFLOP/s)",
                )
            )

        for name in (FIG3, FIG5):  # each figure's summary and its first plot, to look at
            folder = os.path.join(work, name)
            files = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
            pngs = [f for f in files if f.endswith(".png")]
            for f in (["summary.json"] if "summary.json" in files else []) + pngs[:1]:
                shutil.copy(os.path.join(folder, f), os.path.join(args.out, f"{name}-{f}"))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = [
        f"machine: {info['gpu']}; jax {info['jax']} ({info['backend']})",
        "",
        "| part | wall | outcome |",
        "|---|---|---|",
    ]
    table += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    text = "\n".join(table)
    say("\n" + text)
    with open(os.path.join(args.out, "gpu_table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "gpu.json"), "w") as f:
        json.dump(dict(info=info, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
