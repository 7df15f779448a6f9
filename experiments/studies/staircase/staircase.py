"""``staircase``: n = 5 on the circle at large β, the energy climbing a staircase in log time (arXiv 2410.06833)."""

from __future__ import annotations

import numpy as np

from ....particles import observables
from ...analysis import plots, tag
from ...registry import Check, Experiment, register
from ...run.runner import RunResult


def plateaus(result: RunResult, j: int):
    """Plateaus of the cluster count (first member at β index j), found on the log-time axis.

    Returns (t_start, t_end, median normalized energy, median Σ m_q²/n², cluster count) for each.
    """
    ts = result.ts[1:]
    counts = result.stats["n_clusters"][0, j, 0, 1:]
    energy = result.stats["normalized_energy"][0, j, 0, 1:]
    level = result.stats["cluster_level"][0, j, 0, 1:]
    out = []
    for a, b, k in observables.plateaus(np.log(ts), counts, min_duration=0.5):
        inside = (np.log(ts) >= a) & (np.log(ts) <= b)
        out.append(
            (
                float(np.exp(a)),
                float(np.exp(b)),
                float(np.median(energy[inside])),
                float(np.median(level[inside])),
                int(k),
            )
        )
    return out


def figures(result: RunResult) -> dict:
    """Energy and cluster count against log time per β, the plateaus shaded and their levels Σm²/n² marked."""
    c = result.config
    out = {}
    for j, beta in enumerate(c.beta):
        found = plateaus(result, j)
        bands = [(a, b, e) for a, b, e, _, _ in found]
        levels = sorted({round(lv, 4) for _, _, _, lv, _ in found})
        name = f"staircase_beta{tag(beta)}"
        out[name] = lambda p, j=j, beta=beta, bands=bands, levels=levels: plots.energy_and_clusters(
            result.ts[1:],
            result.stats["normalized_energy"][0, j, 0, 1:],
            result.stats["n_clusters"][0, j, 0, 1:],
            plateaus=bands,
            levels=[(v, f"Σm²/n² = {v:.2f}") for v in levels],
            logx=True,
            beta=beta,
            n=c.n,
            seed=c.seed,
            path=p,
        )
    return out


def checks(result: RunResult) -> list[Check]:
    """At least two plateaus after a merge per β, each at the energy Σm²/n² of its clusters."""
    out = []
    n = result.config.n
    for j, beta in enumerate(result.config.beta):
        # the first plateau is the start itself (single tokens still interacting); the later ones
        # are tight clusters, whose normalized energy is Σ m_q²/n² (arXiv 2410.06833)
        merged = [(e, lv) for a, b, e, lv, k in plateaus(result, j) if k < n and b >= 10 * a]
        worst = max((abs(e - lv) for e, lv in merged), default=float("nan"))
        out.append(
            Check(
                f"staircase at β = {beta:g}: plateau energies vs Σm²/n²",
                "≥ 2 plateaus (a decade long) after a merge, |E − Σm²/n²| ≤ 0.01",
                f"{len(merged)} plateaus, worst {worst:.1e}",
                len(merged) >= 2 and worst <= 0.01,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "staircase",
        "n = 5 on the circle at large β: normalized energy vs log time climbs a staircase",
        "arXiv 2410.06833",
        # merges of clusters at angle θ take times ~ e^{βθ²/2}; past β ≈ 600 the force between the
        # last two clusters (e^{-βθ²/2} ≈ 1e-16) drowns in float64 rounding, hence β ≤ 500 here.
        # Tight clusters contract at rate O(1) while merges take 10⁶: an implicit method is needed.
        dict(
            experiment="staircase",
            model="usa-rescaled",
            n=5,
            d=2,
            beta=[300.0, 400.0, 500.0],
            seeds=1,
            init="angles",
            angles=[0.0, 0.06, 0.15, 0.27, 0.42],
            t1=1e12,
            n_save=281,
            save_spacing="log",
            log_decades=14.0,
            solver="kvaerno5",
            rtol=1e-8,
            atol=1e-12,
            delta=1e-6,
            stop_when_clustered=True,
            save_states="no",
        ),
        dict(beta=[500.0], n_save=141),
        figures,
        checks,
    )
)
