"""``fig4-circle``: trajectories on the circle at β = 4 and 9 and their cluster counts ([GLPR] Fig. 4)."""

from __future__ import annotations

import numpy as np

from ..analysis import dimensions, plots, tag
from ..registry import Check, Experiment, Figures, register
from ..run.runner import RunResult


def figures(result: RunResult) -> dict:
    """The first seed's trajectories per β (when the states were kept; the title names the seed) and the cluster
    counts over time."""
    c = result.config
    out: Figures = {}
    xs = result.states(c.d[0]) if result.has_states else None
    for j, beta in enumerate(c.beta):
        if xs is not None:
            out[f"trajectories_beta{tag(beta)}"] = lambda p, j=j, beta=beta: plots.circle_trajectories(
                result.ts, xs[j, 0], n_clusters=result.stats["n_clusters"][0, j, 0], beta=beta, seed=c.seed, path=p
            )
    counts = {float(b): result.stats["n_clusters"][0, j] for j, b in enumerate(c.beta)}
    out["cluster_counts"] = lambda p: plots.cluster_count_vs_time(result.ts, counts, n=c.n, d=2, path=p)
    return out


def checks(result: RunResult) -> list[Check]:
    """A few clusters at the last time for each β, more for larger β."""
    c = result.config
    final = np.median(result.stats["n_clusters"][0, :, :, -1], axis=1)
    out = []
    for beta, k in zip(c.beta, final):
        # Fig. 4: a few metastable clusters persist on the circle at t = 30 for β = 4 and 9
        out.append(
            Check(
                f"clusters at t = {result.ts[-1]:g}, β = {beta:g} (median over seeds)",
                "a few: 2 … 8",
                f"{k:g}",
                2 <= k <= 8,
            )
        )
    if len(c.beta) > 1:
        order = np.argsort(c.beta)
        monotone = bool(np.all(np.diff(final[order]) >= 0))
        out.append(
            Check("cluster count grows with β", "non-decreasing", " → ".join(f"{k:g}" for k in final[order]), monotone)
        )
    return out


EXPERIMENT = register(
    Experiment(
        "fig4-circle",
        "trajectories on the circle (d = 2) at β = 4 and 9 with cluster counts up to t = 30",
        "[GLPR] Fig. 4",
        dict(
            experiment="fig4-circle",
            model="sa",
            n=32,
            d=2,
            beta=[4.0, 9.0],
            seeds=32,
            init="uniform",
            t1=30.0,
            n_save=301,
            delta=1e-3,
            solver="tsit5",
            save_states="yes",
        ),
        dict(seeds=6, n_save=61),
        figures,
        checks,
        requires=dimensions(2, why="trajectories and cluster counts on the circle"),
        runtime="≈ 20 s cold, 6–11 s with a warm compilation cache (2 shared CPU cores)",
    )
)
