"""``metastability``: the cluster count over time on the circle for a grid of β ([GLPR] §6.3, arXiv 2410.23228)."""

from __future__ import annotations

import numpy as np

from ...analysis import plots
from ...registry import Check, Experiment, register
from ...run.runner import RunResult


def figures(result: RunResult) -> dict:
    """The cluster counts of every β against log time."""
    c = result.config
    counts = {float(b): result.stats["n_clusters"][0, j] for j, b in enumerate(c.beta)}
    return {
        "cluster_counts": lambda p: plots.cluster_count_vs_time(result.ts, counts, logx=True, n=c.n, d=c.d[0], path=p)
    }


def checks(result: RunResult) -> list[Check]:
    """The median cluster count at the last time grows with β."""
    c = result.config
    counts = result.stats["n_clusters"][0]  # (β, seeds, T)
    medians = np.median(counts[:, :, -1], axis=1)
    order = np.argsort(c.beta)
    # larger β: more metastable clusters, living longer ([GLPR] §6.3; their number grows like √β)
    return [
        Check(
            f"metastable cluster count at t = {result.ts[-1]:.3g} grows with β",
            "non-decreasing in β",
            " → ".join(f"{m:g}" for m in medians[order]),
            bool(np.all(np.diff(medians[order]) >= 0)),
        )
    ]


EXPERIMENT = register(
    Experiment(
        "metastability",
        "cluster count vs time on the circle for a β grid: how many clusters, for how long",
        "[GLPR] §6.3, arXiv 2410.23228",
        dict(
            experiment="metastability",
            model="sa",
            n=64,
            d=2,
            beta=[1.0, 4.0, 9.0, 16.0, 25.0],
            seeds=32,
            init="uniform",
            t1=1e4,
            n_save=161,
            save_spacing="log",
            log_decades=4.0,
            solver="tsit5",
            save_states="no",
        ),
        dict(n=32, beta=[1.0, 9.0, 25.0], seeds=6, t1=300.0, n_save=61),
        figures,
        checks,
    )
)
