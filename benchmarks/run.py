"""attnflow against the authors' scheme, in one process: speed ratios, accuracy, throughput.

    python benchmarks/run.py            # the default phase-diagram cell (several minutes on 2 cores)
    python benchmarks/run.py --quick    # a shrunk cell, for a first look

Every speed figure is printed beside the baseline's from the same run (machines are noisy), with
compile time separately, and every speed claim beside its accuracy against a tight float64 reference.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import attnflow as af  # noqa: E402
from attnflow.experiments import runner  # noqa: E402
from attnflow.experiments.builtin import EXPERIMENTS  # noqa: E402
from attnflow.experiments.config import load_config  # noqa: E402

import baseline  # noqa: E402
import machine as _machine  # noqa: E402

# the USA phase diagram's method: adaptive steps (grouped by stiffness), members stopping at consensus
USA_METHOD = ("solver=tsit5", "rtol=1e-6", "atol=1e-9", "dtype=float64", "stop_when_clustered=true", "coalesce=1e-10")


def machine() -> str:
    return _machine.describe()


def _fig3_config(seeds: int, n_betas: int, n: int, t1: float, extra=()):
    return load_config(None, [f"n={n}", "d=2", f"beta=0.1:9:{n_betas}", f"seeds={seeds}", f"t1={t1}",
                              "n_save=200", "progress=false", "save_states=no", *extra],
                       base=EXPERIMENTS["fig3-phase-diagram"].defaults)


def _time_run(config) -> tuple[float, float, object]:
    """(steady wall, compile estimate, result): the run twice, the second one timed."""
    t = time.perf_counter()
    runner.run(config)
    first = time.perf_counter() - t
    t = time.perf_counter()
    result = runner.run(config)
    ours = time.perf_counter() - t
    return ours, max(first - ours, 0.0), result


def phase_diagram_cell(seeds: int, n_betas: int, baseline_betas: int, n: int = 32, t1: float = 30.0) -> dict:
    """Target 1: the default fig3 cell (d = 2) end to end, attnflow's whole β grid in one run."""
    betas = np.linspace(0.1, 9.0, n_betas)
    x0 = np.asarray(af.init.uniform(0, n, 2, batch=seeds))
    # the baseline loops over β; time a few values spread over the grid and scale to the whole grid,
    # half of them before attnflow's run and half after: the machine's speed drifts within a run
    sample = betas[np.linspace(0, n_betas - 1, baseline_betas).astype(int)]
    before, after = sample[::2], sample[1::2]
    t = time.perf_counter()
    baseline.phase_diagram(x0, before, t1=t1)
    base_s = time.perf_counter() - t

    # fig3's defaults: rk4 dt = 0.75 with dense output, float32, the clustered fraction at 200 times
    ours, compile_s, result = _time_run(_fig3_config(seeds, n_betas, n, t1))
    if len(after):
        t = time.perf_counter()
        baseline.phase_diagram(x0, after, t1=t1)
        base_s += time.perf_counter() - t
    base_per_beta = base_s / len(sample)
    base_total = base_per_beta * n_betas
    pair_steps = seeds * n_betas * n * n * round(t1 / baseline.DT) / base_total  # the baseline's Euler steps
    # every statistic of the summary contract (cluster counts, energies), float64, on at most 256 × 18
    # members; the baseline's cost scales with the number of members
    small = (min(seeds, 256), min(n_betas, 18))
    full, _, _ = _time_run(_fig3_config(*small, n, t1, ["statistics=pairs,clusters,energy", "dtype=float64"]))
    full_ratio = base_total * (small[0] * small[1]) / (seeds * n_betas) / full
    return dict(seeds=seeds, betas=n_betas, baseline_s=base_total, baseline_per_beta_s=base_per_beta,
                baseline_pair_steps=pair_steps, ours_s=ours, compile_s=compile_s,
                steps=float(np.mean(result.steps)), ratio=base_total / ours, full_s=full, full_ratio=full_ratio,
                full_members=small)


def usa_cell(seeds: int, n_betas: int, n: int = 32, t1: float = 30.0, baseline_steps: int = 300) -> dict:
    """Target 2: the USA phase diagram, against the authors' step-shrinking Euler scheme.

    Their step dt = 0.1 / max(√β e^{β−1/2}, 1) makes the grid cost Σ_β 30/dt(β) steps (1.46 M for the
    default grid); the baseline times ``baseline_steps`` of them and scales (its per-step cost does not
    depend on β).
    """
    betas = np.linspace(0.1, 9.0, n_betas)
    x0 = np.asarray(af.init.uniform(0, n, 2, batch=seeds))
    t = time.perf_counter()
    baseline.sa_euler(x0, 9.0, t1, baseline.usa_dt(9.0), model="usa", max_steps=baseline_steps)
    per_step = (time.perf_counter() - t) / baseline_steps
    total_steps = sum(int(round(t1 / baseline.usa_dt(b))) for b in betas)
    usa, compile_s, result = _time_run(_fig3_config(seeds, n_betas, n, t1, ["model=usa", *USA_METHOD]))
    sa, _, _ = _time_run(_fig3_config(seeds, n_betas, n, t1))
    # like for like: SA with USA's method (adaptive, float64, coalesced), the stiffness alone
    sa_same, _, sa_result = _time_run(_fig3_config(seeds, n_betas, n, t1, ["model=sa", *USA_METHOD]))
    return dict(baseline_s=per_step * total_steps, baseline_steps=total_steps, ours_s=usa, compile_s=compile_s,
                sa_s=sa, steps=float(np.mean(result.steps)), max_steps=int(np.max(result.steps)),
                stopped=float(np.mean(np.isfinite(result.t_event))),
                baseline_sa_steps=n_betas * round(t1 / baseline.DT), sa_same_s=sa_same,
                sa_same_steps=float(np.mean(sa_result.steps)))


def accuracy(n: int = 32, members: int = 64, t1: float = 30.0) -> dict:
    """Max and median error over members and 200 checkpoints against dopri8 at rtol 1e-12 (float64),
    d = 2, for β = 1, 4, 9, and the mean error of the figure's statistic (the clustered fraction at
    δ = 1e-3, over members and checkpoints): fig3's default method (RK4 in angles, d = 2), the same
    in the plane, Adams–Bashforth 4 at dt = 0.25 (as many evaluations), the general default (tsit5)
    and the authors' Euler."""
    ts = np.linspace(0.0, t1, 200)
    out = {}
    for beta in (1.0, 4.0, 9.0):
        x0 = af.init.uniform(1, n, 2, batch=members)
        ref = np.asarray(af.simulate(af.SA(beta), x0, t1, ts=ts, solver="dopri8", rtol=1e-12, atol=1e-12).xs)
        fig3 = dict(solver="rk4", dt=0.75, dense=True, dtype="float32")
        runs = {
            "fig3 (rk4 dt 0.75 dense f32, angles)": af.from_angles(
                af.simulate(af.Circle(beta), af.to_angles(x0), t1, ts=ts, **fig3).xs),
            "the same in the plane": af.simulate(af.SA(beta), x0, t1, ts=ts, **fig3).xs,
            "ab4 dt 0.25 f32, angles": af.from_angles(
                af.simulate(af.Circle(beta), af.to_angles(x0), t1, ts=ts, solver="ab4", dt=0.25, dtype="float32").xs),
            "tsit5 rtol 1e-6": af.simulate(af.SA(beta), x0, t1, ts=ts).xs,
            "Euler dt 0.1 (authors)": af.simulate(af.SA(beta), x0, t1, ts=ts, solver="euler", dt=0.1).xs,
        }
        frac_ref = np.asarray(af.clustered_fraction(ref, 1e-3))
        out[beta] = {}
        for k, v in runs.items():
            v = np.asarray(v, dtype=float)
            e = np.max(np.abs(v - ref), axis=(1, 2, 3))
            frac_err = float(np.mean(np.abs(np.asarray(af.clustered_fraction(v, 1e-3)) - frac_ref)))
            out[beta][k] = (float(np.max(e)), float(np.median(e)), frac_err)
    return out


def accuracy_usa(n: int = 32, members: int = 8, t1: float = 5.0) -> dict:
    """USA ([GLPR] time), d = 2: max and median over members of max |x − x_ref| at 51 times in [0, t1],
    reference tsit5 at rtol 1e-10 without coalescing (float64), for β = 1, 4, 9: the USA diagram's
    method (coalesced) and the authors' Euler with their shrunk step."""
    ts = np.linspace(0.0, t1, 51)
    out = {}
    for beta in (1.0, 4.0, 9.0):
        x0 = af.init.uniform(2, n, 2, batch=members)
        ref = af.simulate(af.USA(beta), x0, t1, ts=ts, solver="tsit5", rtol=1e-10, atol=1e-12,
                          max_steps=2_000_000).xs
        runs = {
            "tsit5 rtol 1e-6, coalesce 1e-10": af.simulate(af.Coalesced(af.USA(beta), 1e-10), x0, t1, ts=ts,
                                                           solver="tsit5", rtol=1e-6, atol=1e-9).xs,
            "authors' Euler": af.simulate(af.USA(beta), x0, t1, ts=ts, solver="euler", dt=baseline.usa_dt(beta)).xs,
        }
        out[beta] = {k: (float(np.max(e)), float(np.median(e)))
                     for k, v in runs.items()
                     for e in [np.max(np.abs(np.asarray(v) - np.asarray(ref)), axis=(1, 2, 3))]}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shrunk cells (256 seeds, 18 β) and short field runs")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--betas", type=int, default=None)
    p.add_argument("--only", choices=("cell", "usa", "accuracy", "field", "startup", "grouping"), action="append",
                   help="run only these parts (repeatable)")
    args = p.parse_args(argv)
    seeds = args.seeds or (256 if args.quick else 2048)
    n_betas = args.betas or (18 if args.quick else 90)
    parts = set(args.only or ("cell", "usa", "accuracy", "field", "startup", "grouping"))
    print(f"machine: {machine()}")

    if "cell" in parts:
        cell = phase_diagram_cell(seeds, n_betas, baseline_betas=4)
        print(f"\nphase-diagram cell: d = 2, n = 32, {cell['seeds']} seeds × {cell['betas']} β, t ≤ 30, 200 checkpoints")
        print(f"  baseline (authors' scheme, NumPy f64, Euler dt = 0.1): {cell['baseline_s']:.1f} s "
              f"({cell['baseline_per_beta_s']:.2f} s per β, {cell['baseline_pair_steps']:.2e} pair-steps/s;"
              f" the authors' code: 5.4e7 on 2 cores)")
        print(f"  attnflow fig3 defaults (rk4 dt = 0.75 in angles, dense output, f32, clustered fraction): "
              f"{cell['ours_s']:.2f} s "
              f"+ {cell['compile_s']:.1f} s compile, {cell['steps']:.0f} steps per member")
        print(f"  speed-up over the baseline: {cell['ratio']:.1f}×")
        print(f"  with every statistic of the summary contract (cluster counts, energies) in float64, "
              f"{cell['full_members'][0]} seeds × {cell['full_members'][1]} β: {cell['full_s']:.2f} s, "
              f"{cell['full_ratio']:.1f}× the baseline's time for as many members")

    if "usa" in parts:
        usa_seeds, usa_betas = 32, 18
        usa = usa_cell(usa_seeds, usa_betas)
        print(f"\nUSA phase diagram: d = 2, n = 32, {usa_seeds} seeds × {usa_betas} β, t ≤ 30")
        print(f"  baseline (authors' step shrinking, {usa['baseline_steps']:,} Euler steps, timed on 300 and scaled): "
              f"{usa['baseline_s']:.0f} s")
        print(f"  attnflow ({', '.join(USA_METHOD)}): {usa['ours_s']:.2f} s + {usa['compile_s']:.1f} s compile; "
              f"steps per member mean {usa['steps']:.0f}, max {usa['max_steps']}; "
              f"{100 * usa['stopped']:.0f}% stopped at consensus")
        print(f"  the SA cell of the same size with fig3's defaults: {usa['sa_s']:.2f} s → USA costs "
              f"{usa['ours_s'] / usa['sa_s']:.1f}× SA; {usa['baseline_s'] / usa['ours_s']:.0f}× faster than the baseline")
        print(f"  SA with USA's method: {usa['sa_same_s']:.2f} s, {usa['sa_same_steps']:.0f} steps per member → USA "
              f"costs {usa['ours_s'] / usa['sa_same_s']:.1f}× SA like for like; in the authors' scheme "
              f"{usa['baseline_steps'] / usa['baseline_sa_steps']:.0f}× (their steps against SA's dt = 0.1)")
        acc = accuracy_usa()
        print("  accuracy, n = 32, 8 members, t ≤ 5 (max / median over members of max |x − x_ref|; "
              "ref: tsit5 rtol 1e-10, not coalesced)")
        for beta, rows in acc.items():
            print(f"    β = {beta:g}: " + "   ".join(f"{k} {mx:.1e} / {md:.1e}" for k, (mx, md) in rows.items()))

    if "accuracy" in parts:
        acc = accuracy()
        print("\naccuracy, d = 2, n = 32, 64 members, 200 checkpoints over t ≤ 30 (max / median over members of "
              "max |x − x_ref|; mean |Δ| of the clustered fraction at δ = 1e-3; ref: dopri8, rtol 1e-12)")
        for beta, rows in acc.items():
            print(f"  β = {beta:g}: " + "   ".join(f"{k} {mx:.1e} / {md:.1e}, fraction {fr:.1e}"
                                                 for k, (mx, md, fr) in rows.items()))

    if "field" in parts:
        import field
        print()
        field.run(quick=args.quick)
    if "startup" in parts:
        import startup
        print()
        startup.run(quick=args.quick)
    if "grouping" in parts:
        import grouping
        print()
        grouping.run(quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
