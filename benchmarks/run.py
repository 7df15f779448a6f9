"""attnflow against the authors' scheme, in one process: speed ratios, accuracy, throughput.

    python benchmarks/run.py            # the default phase-diagram cell (several minutes on 2 cores)
    python benchmarks/run.py --quick    # a shrunk cell, for a first look

Every speed figure is printed beside the baseline's from the same run (machines are noisy), with
compile time separately, and every speed claim beside its accuracy against a tight float64 reference.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import attnflow as af  # noqa: E402
from attnflow.experiments import runner  # noqa: E402
from attnflow.experiments.config import load_config  # noqa: E402

import baseline  # noqa: E402


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    dev = jax.devices()[0]
    return (f"{cpu}, {os.cpu_count()} cores; jax {jax.__version__} on {dev.platform} "
            f"({getattr(dev, 'device_kind', dev.platform)})")


def timed(fn, *args, repeat: int = 1):
    """(result, best wall seconds) over ``repeat`` calls, blocking on JAX results."""
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return out, best


def phase_diagram_cell(seeds: int, n_betas: int, baseline_betas: int, n: int = 32, t1: float = 30.0) -> dict:
    """Target 1: the default fig3 cell (d = 2) end to end, attnflow's whole β grid in one run."""
    betas = np.linspace(0.1, 9.0, n_betas)
    x0 = np.asarray(af.init.uniform(0, n, 2, batch=seeds))
    # the baseline loops over β; time a few values spread over the grid and scale to the whole grid
    sample = betas[np.linspace(0, n_betas - 1, baseline_betas).astype(int)]
    t = time.perf_counter()
    baseline.phase_diagram(x0, sample, t1=t1)
    base_per_beta = (time.perf_counter() - t) / len(sample)
    base_total = base_per_beta * n_betas

    config = load_config(None, [f"n={n}", "d=2", f"beta=0.1:9:{n_betas}", f"seeds={seeds}", f"t1={t1}",
                                "n_save=200", "progress=false", "save_states=no"],
                         base={"experiment": "fig3-phase-diagram"})
    t = time.perf_counter()
    runner.run(config)
    first = time.perf_counter() - t
    t = time.perf_counter()
    result = runner.run(config)
    ours = time.perf_counter() - t
    steps = float(np.mean(result.steps))
    pair_steps = seeds * n_betas * n * n * 300 / base_total  # the baseline's 300 Euler steps
    return dict(seeds=seeds, betas=n_betas, baseline_s=base_total, baseline_per_beta_s=base_per_beta,
                baseline_pair_steps=pair_steps, ours_s=ours, compile_s=max(first - ours, 0.0), steps=steps,
                ratio=base_total / ours)


def accuracy(n: int = 32, members: int = 8, t1: float = 30.0) -> dict:
    """Max error over members and checkpoints against dopri8 at rtol 1e-12 (float64), for β = 1, 4, 9."""
    ts = np.linspace(0.0, t1, 31)
    out = {}
    for beta in (1.0, 4.0, 9.0):
        x0 = af.init.uniform(1, n, 2, batch=members)
        ref = af.simulate(af.SA(beta), x0, t1, ts=ts, solver="dopri8", rtol=1e-12, atol=1e-12).xs
        ours = af.simulate(af.SA(beta), x0, t1, ts=ts).xs  # attnflow's default: tsit5, rtol 1e-6
        theirs = af.simulate(af.SA(beta), x0, t1, ts=ts, solver="euler", dt=0.1).xs  # the authors' scheme
        out[beta] = (float(jnp.max(jnp.abs(ours - ref))), float(jnp.max(jnp.abs(theirs - ref))))
    return out


def roofline(n: int = 4096, d: int = 128) -> dict:
    """Machine bounds (f32 matmul and exp throughput) and the field evaluation's share of them."""
    a = jax.random.normal(jax.random.key(0), (4096, 4096), jnp.float32)
    mm = jax.jit(lambda a: a @ a)
    mm(a).block_until_ready()
    _, t = timed(mm, a, repeat=3)
    matmul = 2 * 4096**3 / t
    e = jax.random.normal(jax.random.key(1), (1 << 24,), jnp.float32)
    ex = jax.jit(jnp.exp)
    ex(e).block_until_ready()
    _, t = timed(ex, e, repeat=3)
    exp_rate = e.size / t
    x = af.init.uniform(2, n, d, dtype="float32")
    field = jax.jit(lambda x: af.SA(jnp.float32(1.0))(0.0, x))
    field(x).block_until_ready()
    _, t = timed(field, x, repeat=3)
    flops = 4 * n * n * d  # logits and the weighted sum, two n×n×d products
    return dict(matmul_flops=matmul, exp_per_s=exp_rate, field_s=t, field_flops=flops / t,
                field_fraction=flops / t / matmul, exp_bound_s=n * n / exp_rate, n=n, d=d)


def scaling(ns=(128, 512, 2048, 4096), d: int = 3) -> list[tuple[int, float]]:
    """Wall time of one field evaluation (float64, dense) against n."""
    rows = []
    for n in ns:
        x = af.init.uniform(3, n, d)
        f = jax.jit(lambda x: af.SA(1.0)(0.0, x))
        f(x).block_until_ready()
        _, t = timed(f, x, repeat=3)
        rows.append((n, t))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a shrunk cell: 256 seeds, 18 β")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--betas", type=int, default=None)
    args = p.parse_args(argv)
    seeds = args.seeds or (256 if args.quick else 2048)
    n_betas = args.betas or (18 if args.quick else 90)
    print(f"machine: {machine()}")

    cell = phase_diagram_cell(seeds, n_betas, baseline_betas=3)
    print(f"\nphase-diagram cell: d = 2, n = 32, {cell['seeds']} seeds × {cell['betas']} β, t ≤ 30, 200 checkpoints")
    print(f"  baseline (authors' scheme, NumPy f64, Euler dt = 0.1): {cell['baseline_s']:.1f} s "
          f"({cell['baseline_per_beta_s']:.2f} s per β, {cell['baseline_pair_steps']:.2e} pair-steps/s;"
          f" the authors' code: 5.4e7 on 2 cores)")
    print(f"  attnflow (tsit5, rtol 1e-6, f64, whole grid in one run): {cell['ours_s']:.1f} s "
          f"+ {cell['compile_s']:.1f} s compile, {cell['steps']:.0f} steps per member")
    print(f"  speed-up over the baseline: {cell['ratio']:.2f}× (below 1: slower)")

    acc = accuracy()
    print("\naccuracy at t ≤ 30 (max |x − x_ref| over members and checkpoints; ref: dopri8, rtol 1e-12)")
    for beta, (ours, theirs) in acc.items():
        print(f"  β = {beta:g}: attnflow default {ours:.1e}   authors' Euler dt = 0.1 {theirs:.1e}")

    roof = roofline()
    print(f"\nroofline: f32 matmul {roof['matmul_flops'] / 1e9:.1f} GFLOP/s, exp {roof['exp_per_s'] / 1e9:.2f} G/s")
    print(f"  SA field, n = {roof['n']}, d = {roof['d']}, f32: {roof['field_s'] * 1e3:.1f} ms = "
          f"{roof['field_flops'] / 1e9:.1f} GFLOP/s = {100 * roof['field_fraction']:.0f}% of matmul "
          f"(exp alone needs {roof['exp_bound_s'] * 1e3:.1f} ms)")

    print("\nscaling: one field evaluation (f64, d = 3, dense)")
    for n, t in scaling():
        print(f"  n = {n:5d}: {t * 1e3:8.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
