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
import baseline  # noqa: E402
import machine as _machine  # noqa: E402

import attnflow as af  # noqa: E402
from attnflow.experiments import builtin  # noqa: E402
from attnflow.experiments.builtin import EXPERIMENTS  # noqa: E402
from attnflow.experiments.config import load_config  # noqa: E402
from attnflow.experiments.run import runner  # noqa: E402

# the USA phase diagram's method: adaptive steps (grouped by stiffness), members stopping at consensus
USA_METHOD = ("solver=tsit5", "rtol=1e-6", "atol=1e-9", "dtype=float64", "stop_when_clustered=true", "coalesce=1e-10")


def machine() -> str:
    return _machine.describe()


def _fig3_config(seeds: int, n_betas: int, n: int, t1: float, extra=()):
    return load_config(
        None,
        [
            f"n={n}",
            "d=2",
            f"beta=0.1:9:{n_betas}",
            f"seeds={seeds}",
            f"t1={t1}",
            "n_save=200",
            "progress=false",
            "save_states=no",
            *extra,
        ],
        base=EXPERIMENTS["fig3-phase-diagram"].defaults,
    )


def _time_run(config) -> tuple[float, float, object]:
    """(steady wall, compile estimate, result): the run twice, the second one timed."""
    t = time.perf_counter()
    builtin.resolve(config.experiment).execute(config)
    first = time.perf_counter() - t
    t = time.perf_counter()
    result = builtin.resolve(config.experiment).execute(config)
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
    return dict(
        seeds=seeds,
        betas=n_betas,
        baseline_s=base_total,
        baseline_per_beta_s=base_per_beta,
        baseline_pair_steps=pair_steps,
        ours_s=ours,
        compile_s=compile_s,
        steps=float(np.mean(result.steps)),
        ratio=base_total / ours,
        full_s=full,
        full_ratio=full_ratio,
        full_members=small,
    )


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
    return dict(
        baseline_s=per_step * total_steps,
        baseline_steps=total_steps,
        ours_s=usa,
        compile_s=compile_s,
        sa_s=sa,
        steps=float(np.mean(result.steps)),
        max_steps=int(np.max(result.steps)),
        stopped=float(np.mean(np.isfinite(result.t_event))),
        baseline_sa_steps=n_betas * round(t1 / baseline.DT),
        sa_same_s=sa_same,
        sa_same_steps=float(np.mean(sa_result.steps)),
    )


def accuracy(n: int = 32, members: int = 64, t1: float = 30.0) -> dict:
    """Max and median error over members and 200 checkpoints against dopri8 at rtol 1e-12 (float64),
    d = 2, for β = 1, 4, 9, and the mean error of the figure's statistic (the clustered fraction at
    δ = 1e-3, over members and checkpoints): fig3's default method (RK4 in angles, d = 2), the same
    in the plane, Adams–Bashforth 4 at dt = 0.25 (as many evaluations), the general default (tsit5),
    attnflow's projected Euler and the authors' renormalized Euler at their dt = 0.1."""
    ts = np.linspace(0.0, t1, 200)
    out = {}
    for beta in (1.0, 4.0, 9.0):
        x0 = af.init.uniform(1, n, 2, batch=members)
        ref = np.asarray(af.simulate(af.SA(beta), x0, t1, ts=ts, solver="dopri8", rtol=1e-12, atol=1e-12).xs)
        fig3 = dict(solver="rk4", dt=0.75, dense=True, dtype="float32")
        runs = {
            "fig3 (rk4 dt 0.75 dense f32, angles)": af.from_angles(
                af.simulate(af.Circle(beta), af.to_angles(x0), t1, ts=ts, **fig3).xs
            ),
            "the same in the plane": af.simulate(af.SA(beta), x0, t1, ts=ts, **fig3).xs,
            "ab4 dt 0.25 f32, angles": af.from_angles(
                af.simulate(af.Circle(beta), af.to_angles(x0), t1, ts=ts, solver="ab4", dt=0.25, dtype="float32").xs
            ),
            "tsit5 rtol 1e-6": af.simulate(af.SA(beta), x0, t1, ts=ts).xs,
            "Euler dt 0.1 (projected)": af.simulate(af.SA(beta), x0, t1, ts=ts, solver="euler", dt=0.1).xs,
            "renormalized Euler dt 0.1 (authors)": af.simulate(
                af.SA(beta), x0, t1, ts=ts, solver="renormalized_euler", dt=0.1
            ).xs,
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
    method (coalesced), and with the authors' shrunk step their renormalized Euler and attnflow's projected one."""
    ts = np.linspace(0.0, t1, 51)
    out = {}
    for beta in (1.0, 4.0, 9.0):
        x0 = af.init.uniform(2, n, 2, batch=members)
        ref = af.simulate(af.USA(beta), x0, t1, ts=ts, solver="tsit5", rtol=1e-10, atol=1e-12, max_steps=2_000_000).xs
        runs = {
            "tsit5 rtol 1e-6, coalesce 1e-10": af.simulate(
                af.Coalesced(af.USA(beta), 1e-10), x0, t1, ts=ts, solver="tsit5", rtol=1e-6, atol=1e-9
            ).xs,
            "authors' Euler": af.simulate(
                af.USA(beta), x0, t1, ts=ts, solver="renormalized_euler", dt=baseline.usa_dt(beta)
            ).xs,
            "projected Euler, their step": af.simulate(
                af.USA(beta), x0, t1, ts=ts, solver="euler", dt=baseline.usa_dt(beta)
            ).xs,
        }
        out[beta] = {
            k: (float(np.max(e)), float(np.median(e)))
            for k, v in runs.items()
            for e in [np.max(np.abs(np.asarray(v) - np.asarray(ref)), axis=(1, 2, 3))]
        }
    return out


# -- fig5: random weights, d = 128 ------------------------------------------------------------

FIG5 = EXPERIMENTS["fig5-random-matrices"]
FIG5_ENSEMBLES = tuple(FIG5.grid["weights"])
# fig5's method in simulate's terms (its defaults: rk4 dt = 0.25 dense, float32, stopped at consensus δ/2)
FIG5_METHOD = dict(solver="rk4", dt=0.25, dense=True, dtype="float32", stop=True)
# candidates of the accuracy table: simulate's keywords, "stop" = stop_when_clustered at δ/2 as the runner does
FIG5_CANDIDATES = {
    # attnflow's projected Euler at the authors' step (their renormalized step lags the flow by up to 9%)
    "Euler dt 0.1 f64 (projected)": dict(solver="euler", dt=baseline.DT),
    "tsit5 rtol 1e-6 f64 (before)": dict(solver="tsit5"),
    "rk4 dt 0.75 dense f32 (fig3's)": dict(solver="rk4", dt=0.75, dense=True, dtype="float32"),
    "rk4 dt 0.5 dense f32": dict(solver="rk4", dt=0.5, dense=True, dtype="float32"),
    "rk4 dt 0.25 dense f32": dict(solver="rk4", dt=0.25, dense=True, dtype="float32"),
    "ab4 dt 0.25 f32": dict(solver="ab4", dt=0.25, dtype="float32"),
    "tsit5 rtol 1e-3 f32": dict(solver="tsit5", rtol=1e-3, atol=1e-6, dtype="float32"),
    "rk4 dt 0.3 dense f32, stop": dict(solver="rk4", dt=0.3, dense=True, dtype="float32", stop=True),
    "rk4 dt 0.25 dense f32, stop (fig5)": FIG5_METHOD,
}
# field evaluations per step (tsit5: accepted steps, FSAL; its rejected steps come on top)
_EVALS_PER_STEP = {"euler": 1, "renormalized_euler": 1, "rk4": 4, "ab4": 1, "tsit5": 6, "dopri5": 6}


def _fig5_config(weights: str, seeds: int, extra=()):
    return load_config(None, [f"weights={weights}", f"seeds={seeds}", "progress=false", *extra], base=FIG5.defaults)


def _fig5_members(weights: str, members: int, beta: float, d: int = 128):
    """fig5's first ``members`` seeds of one ensemble at one β, as the runner draws them: (x0 float64, field)."""
    c = _fig5_config(weights, members, ["dtype=float64"])
    seeds = c.seed + np.arange(members)
    return runner.initial_conditions(c, d), runner.build_field(c, np.full(members, beta), seeds, d)


def accuracy_fig5(members: int = 16, t1: float = 30.0, betas=(1.0, 4.0, 9.0), candidates=None) -> dict:
    """fig5's members (n = 32, d = 128, its random Q, K, V) against dopri8 at rtol 1e-11 (float64).

    Per ensemble and β: the max and median over members of max_t |x − x_ref| at fig5's 201 save
    times, the mean |Δ| of the clustered fraction at δ = 1e-3 over members and times, and the steps
    per member. Euler is saved on its own grid (every step of 0.1; at 201 save times it would shorten
    its steps to land on them) against the reference there. A method
    that stops a member at consensus holds its state from then on: its trajectory error is taken up
    to that time, its clustered fraction at every time.
    """
    candidates = FIG5_CANDIDATES if candidates is None else candidates
    ts = np.linspace(0.0, t1, FIG5.defaults["n_save"])
    te = np.arange(round(t1 / baseline.DT) + 1) * baseline.DT
    tall = np.union1d(ts, te)
    delta = FIG5.defaults["delta"]
    out = {}
    for w in FIG5_ENSEMBLES:
        for beta in betas:
            x0, field = _fig5_members(w, members, beta)
            ref_all = np.asarray(af.simulate(field, x0, t1, ts=tall, solver="dopri8", rtol=1e-11, atol=1e-13).xs)
            refs = {False: ref_all[:, np.searchsorted(tall, ts)], True: ref_all[:, np.searchsorted(tall, te)]}
            fracs = {k: np.asarray(af.clustered_fraction(v, delta)) for k, v in refs.items()}
            row = {}
            for name, kw in candidates.items():
                kw = dict(kw)
                stop = kw.pop("stop", False)
                own = kw["solver"] in ("euler", "renormalized_euler")
                grid = te if own else ts
                sol = af.simulate(field, x0, t1, ts=grid, stop_when_clustered=delta / 2 if stop else None, **kw)
                xs = np.asarray(sol.xs, dtype=np.float64)
                held = grid[None, :] > np.asarray(sol.t_event)[:, None]  # saves after a member stopped
                err = np.where(held[:, :, None, None], 0.0, np.abs(xs - refs[own])).max(axis=(1, 2, 3))
                frac = np.mean(np.abs(np.asarray(af.clustered_fraction(xs, delta)) - fracs[own]))
                steps = float(np.mean(sol.steps))
                row[name] = dict(
                    max=float(np.max(err)),
                    median=float(np.median(err)),
                    fraction=float(frac),
                    steps=steps,
                    evals=steps * _EVALS_PER_STEP.get(kw["solver"], np.nan),
                )
            out[(w, beta)] = row
    return out


def fig5_acceptable(table: dict, reference: str = "Euler dt 0.1 f64 (projected)") -> dict:
    """Per candidate: whether its max and median trajectory errors and its clustered-fraction error are
    no larger than those of Euler at dt = 0.1 in every (ensemble, β) of ``accuracy_fig5``."""
    names = next(iter(table.values())).keys()
    return {
        name: all(row[name][k] <= row[reference][k] for row in table.values() for k in ("max", "median", "fraction"))
        for name in names
    }


# methods timed through the runner (fig5's defaults with these keys changed), same members, alternated
FIG5_TIMED = {
    "fig5 (rk4 dt 0.25 f32, stop)": (),
    "the same without stopping": ("stop_when_clustered=false",),
    "rk4 dt 0.3 f32, stop": ("dt=0.3",),
    "the same in float64": ("dtype=float64",),
    "tsit5 rtol 1e-3 f32": (
        "solver=tsit5",
        "dense=false",
        "dt=0",
        "rtol=1e-3",
        "atol=1e-6",
        "stop_when_clustered=false",
    ),
    "before: tsit5 rtol 1e-6 f64, every statistic": (
        "solver=tsit5",
        "dense=false",
        "dt=0",
        "dtype=float64",
        "stop_when_clustered=false",
        "statistics=pairs,clusters,energy",
    ),
}


def speed_fig5_methods(seeds: int = 32, pairs=(0, 88), reps: int = 2, methods=None) -> dict:
    """Per method: ms per member through ``Experiment.execute`` on the same members (each ensemble, β pairs of
    the grid at the given indices × ``seeds``), calls alternated between methods, the minimum of ``reps``
    timed runs after one untimed (compiling) run; and the mean and largest steps per member."""
    methods = FIG5_TIMED if methods is None else methods
    grid = np.linspace(0.1, 9.0, 90)
    configs = {
        (m, w, i): _fig5_config(w, seeds, [f"beta=[{float(grid[i])!r},{float(grid[i + 1])!r}]", *extra])
        for m, extra in methods.items()
        for w in FIG5_ENSEMBLES
        for i in pairs
    }
    times = {k: [] for k in configs}
    steps = {k: builtin.resolve(c.experiment).execute(c).steps for k, c in configs.items()}
    for _ in range(reps):
        for k, c in configs.items():
            t = time.perf_counter()
            builtin.resolve(c.experiment).execute(c)
            times[k].append(time.perf_counter() - t)
    out = {}
    for m in methods:
        per = {w: float(np.mean([min(times[(m, w, i)]) for i in pairs]) / (2 * seeds) * 1e3) for w in FIG5_ENSEMBLES}
        out[m] = dict(
            per_ensemble=per,
            ms=float(np.mean(list(per.values()))),
            steps=float(np.mean([steps[(m, w, i)] for w in FIG5_ENSEMBLES for i in pairs])),
            max_steps=int(np.max([steps[(m, w, i)] for w in FIG5_ENSEMBLES for i in pairs])),
        )
    return out


def fig5_cell(seeds: int = 1024, pairs=(0, 30, 58, 88), baseline_seeds: int = 32) -> dict:
    """Target: fig5 through ``Experiment.execute`` with its defaults, against the authors' scheme on the same members.

    The sample is whole compiled calls of the real run: the runner takes fig5's members β by β, 2048
    (two neighbouring β × 1024 seeds) per call, and a call that stops its members at consensus ends
    with its slowest member, so each sampled pair (grid indices ``pairs``, each ensemble) runs with
    all ``seeds``; its per-member time stands for the grid around it. The first call of each
    ensemble runs twice (compile estimate = first − second). The baseline (NumPy float64, Euler
    dt = 0.1, its cost the same for every member) runs the first ``baseline_seeds`` seeds of each
    sample at its first β, with the very same initial conditions and Q, K, V; half of its samples
    before attnflow's calls, half after.
    """
    grid = np.linspace(0.1, 9.0, 90)
    d = FIG5.defaults["d"]
    samples = [(w, i) for w in FIG5_ENSEMBLES for i in pairs]
    configs = {
        k: _fig5_config(k[0], seeds, [f"beta=[{float(grid[k[1]])!r},{float(grid[k[1] + 1])!r}]"]) for k in samples
    }

    def base(ks):
        spent, count = 0.0, 0
        for w, i in ks:
            c = configs[(w, i)]
            x0 = np.asarray(runner.initial_conditions(c, d)[:baseline_seeds], dtype=np.float64)
            f = runner.build_field(c, np.full(baseline_seeds, grid[i]), c.seed + np.arange(baseline_seeds), d)
            t = time.perf_counter()
            baseline.weighted_euler(x0, float(grid[i]), c.t1, f.Q, f.K, f.V)
            spent += time.perf_counter() - t
            count += baseline_seeds
        return spent, count

    b1, n1 = base(samples[::2])
    ours, compile_s, steps = {}, 0.0, {}
    for k in samples:
        t = time.perf_counter()
        result = builtin.resolve(configs[k].experiment).execute(configs[k])
        first = time.perf_counter() - t
        if k[1] == pairs[0]:  # the ensemble's first call compiled: run it again
            t = time.perf_counter()
            result = builtin.resolve(configs[k].experiment).execute(configs[k])
            ours[k] = time.perf_counter() - t
            compile_s += max(first - ours[k], 0.0)
        else:
            ours[k] = first
        steps[k] = (float(np.mean(result.steps)), int(np.max(result.steps)))
    b2, n2 = base(samples[1::2])
    base_ms = (b1 + b2) / (n1 + n2) * 1e3
    per = {k: v / (2 * seeds) * 1e3 for k, v in ours.items()}
    ours_ms = float(np.mean(list(per.values())))
    members = len(FIG5_ENSEMBLES) * len(grid) * FIG5.defaults["seeds"]
    return dict(
        per_sample=per,
        steps=steps,
        ours_ms=ours_ms,
        baseline_ms=base_ms,
        ratio=base_ms / ours_ms,
        compile_s=compile_s,
        figure_members=members,
        ours_figure_min=ours_ms * members / 6e4,
        baseline_figure_h=base_ms * members / 3.6e6,
        seeds=seeds,
        pairs=tuple(pairs),
        betas={i: (float(grid[i]), float(grid[i + 1])) for i in pairs},
        baseline_members=n1 + n2,
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="shrunk cells (256 seeds, 18 β) and short field runs")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--betas", type=int, default=None)
    p.add_argument(
        "--only",
        choices=("cell", "usa", "accuracy", "field", "startup", "grouping", "fig5", "fig5-accuracy"),
        action="append",
        help="run only these parts (repeatable); fig5 and fig5-accuracy (several minutes each) run only so",
    )
    args = p.parse_args(argv)
    seeds = args.seeds or (256 if args.quick else 2048)
    n_betas = args.betas or (18 if args.quick else 90)
    parts = set(args.only or ("cell", "usa", "accuracy", "field", "startup", "grouping"))
    print(f"machine: {machine()}")

    if "cell" in parts:
        cell = phase_diagram_cell(seeds, n_betas, baseline_betas=4)
        print(
            f"\nphase-diagram cell: d = 2, n = 32, {cell['seeds']} seeds × {cell['betas']} β, t ≤ 30, 200 checkpoints"
        )
        print(
            f"  baseline (authors' scheme, NumPy f64, Euler dt = 0.1): {cell['baseline_s']:.1f} s "
            f"({cell['baseline_per_beta_s']:.2f} s per β, {cell['baseline_pair_steps']:.2e} pair-steps/s;"
            f" the authors' code: 5.4e7 on 2 cores)"
        )
        print(
            f"  attnflow fig3 defaults (rk4 dt = 0.75 in angles, dense output, f32, clustered fraction): "
            f"{cell['ours_s']:.2f} s "
            f"+ {cell['compile_s']:.1f} s compile, {cell['steps']:.0f} steps per member"
        )
        print(f"  speed-up over the baseline: {cell['ratio']:.1f}×")
        print(
            f"  with every statistic of the summary contract (cluster counts, energies) in float64, "
            f"{cell['full_members'][0]} seeds × {cell['full_members'][1]} β: {cell['full_s']:.2f} s, "
            f"{cell['full_ratio']:.1f}× the baseline's time for as many members"
        )

    if "usa" in parts:
        usa_seeds, usa_betas = 32, 18
        usa = usa_cell(usa_seeds, usa_betas)
        print(f"\nUSA phase diagram: d = 2, n = 32, {usa_seeds} seeds × {usa_betas} β, t ≤ 30")
        print(
            f"  baseline (authors' step shrinking, {usa['baseline_steps']:,} Euler steps, timed on 300 and scaled): "
            f"{usa['baseline_s']:.0f} s"
        )
        print(
            f"  attnflow ({', '.join(USA_METHOD)}): {usa['ours_s']:.2f} s + {usa['compile_s']:.1f} s compile; "
            f"steps per member mean {usa['steps']:.0f}, max {usa['max_steps']}; "
            f"{100 * usa['stopped']:.0f}% stopped at consensus"
        )
        print(
            f"  the SA cell of the same size with fig3's defaults: {usa['sa_s']:.2f} s → USA costs "
            f"{usa['ours_s'] / usa['sa_s']:.1f}× SA; {usa['baseline_s'] / usa['ours_s']:.0f}× faster than the baseline"
        )
        print(
            f"  SA with USA's method: {usa['sa_same_s']:.2f} s, {usa['sa_same_steps']:.0f} steps per member → USA "
            f"costs {usa['ours_s'] / usa['sa_same_s']:.1f}× SA like for like; in the authors' scheme "
            f"{usa['baseline_steps'] / usa['baseline_sa_steps']:.0f}× (their steps against SA's dt = 0.1)"
        )
        acc = accuracy_usa()
        print(
            "  accuracy, n = 32, 8 members, t ≤ 5 (max / median over members of max |x − x_ref|; "
            "ref: tsit5 rtol 1e-10, not coalesced)"
        )
        for beta, rows in acc.items():
            print(f"    β = {beta:g}: " + "   ".join(f"{k} {mx:.1e} / {md:.1e}" for k, (mx, md) in rows.items()))

    if "accuracy" in parts:
        acc = accuracy()
        print(
            "\naccuracy, d = 2, n = 32, 64 members, 200 checkpoints over t ≤ 30 (max / median over members of "
            "max |x − x_ref|; mean |Δ| of the clustered fraction at δ = 1e-3; ref: dopri8, rtol 1e-12)"
        )
        for beta, rows in acc.items():
            print(
                f"  β = {beta:g}: "
                + "   ".join(f"{k} {mx:.1e} / {md:.1e}, fraction {fr:.1e}" for k, (mx, md, fr) in rows.items())
            )

    if "fig5-accuracy" in parts:
        members = 8 if args.quick else 16
        table = accuracy_fig5(members=members)
        ok = fig5_acceptable(table)
        print(
            f"\nfig5 accuracy: n = 32, d = 128, {members} members (fig5's seeds, its Q, K, V) per ensemble and β, "
            "201 saves over t ≤ 30; max / median over members of max_t |x − x_ref|, mean |Δ| of the clustered "
            "fraction at δ = 1e-3, steps (field evaluations) per member; ref: dopri8 rtol 1e-11 f64"
        )
        for (w, beta), rows in table.items():
            print(f"  {w}, β = {beta:g}")
            for name, r in rows.items():
                print(
                    f"    {name:38s} {r['max']:.1e} / {r['median']:.1e}   fraction {r['fraction']:.1e}   "
                    f"{r['steps']:.0f} steps ({r['evals']:.0f} evaluations)"
                )
        print(
            "  no worse than Euler at dt = 0.1 (projected) everywhere (max, median, fraction): "
            + ", ".join(f"{name} {'yes' if good else 'no'}" for name, good in ok.items())
        )
        speed = speed_fig5_methods(seeds=16 if args.quick else 32)
        print(
            "  speed through Experiment.execute, same members (β pairs 0.1/0.2 and 8.9/9.0 of the grid, "
            f"{16 if args.quick else 32} seeds each; a call stops with its slowest member): ms per member"
        )
        for name, r in speed.items():
            print(
                f"    {name:46s} {r['ms']:6.2f}  ("
                + ", ".join(f"{w} {v:.2f}" for w, v in r["per_ensemble"].items())
                + f"; steps mean {r['steps']:.0f}, max {r['max_steps']})"
            )

    if "fig5" in parts:
        cell = fig5_cell(seeds=256 if args.quick else 1024, pairs=(0, 88) if args.quick else (0, 30, 58, 88))
        print(
            f"\nfig5-random-matrices: n = 32, d = 128, 201 saves, t ≤ 30; sampled calls of {2 * cell['seeds']} members "
            f"(β pairs {', '.join(f'{a:.1f}/{b:.1f}' for a, b in cell['betas'].values())}) for each ensemble"
        )
        for (w, i), ms in cell["per_sample"].items():
            mean, top = cell["steps"][(w, i)]
            print(
                f"  {w:13s} β {cell['betas'][i][0]:.1f}/{cell['betas'][i][1]:.1f}: {ms:.2f} ms per member "
                f"(steps mean {mean:.0f}, max {top})"
            )
        print(
            f"  attnflow, fig5 defaults (rk4 dt 0.25 dense f32, stopped at consensus, clustered fraction): "
            f"{cell['ours_ms']:.2f} ms per member + {cell['compile_s']:.1f} s compile"
        )
        print(
            f"  baseline (authors' scheme, NumPy f64, Euler dt = 0.1, {cell['baseline_members']} of the same members): "
            f"{cell['baseline_ms']:.1f} ms per member"
        )
        print(
            f"  speed-up over the baseline: {cell['ratio']:.1f}×; the whole figure ({cell['figure_members']:,} members): "
            f"attnflow ≈ {cell['ours_figure_min']:.0f} min, baseline ≈ {cell['baseline_figure_h']:.1f} h"
        )

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
