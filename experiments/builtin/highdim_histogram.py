"""``highdim-histogram``: histograms of pairwise inner products as d grows, against γ_β(t) ([GLPR] Thm 6.9)."""

from __future__ import annotations

import numpy as np

from ...particles import observables
from ..analysis import gamma_of_t, plots
from ..registry import Check, Experiment, register
from ..run.runner import RunResult


def figures(result: RunResult) -> dict:
    """One histogram over time per d (all members of the first β pooled), with γ_β(t)."""
    c = result.config
    edges = np.asarray(observables.histogram_edges(c.histogram_bins))
    out = {}
    for i, d in enumerate(c.d):
        counts = result.stats["histogram"][i, 0].sum(axis=0)
        gamma = gamma_of_t(result, c.beta[0])
        out[f"histogram_d{d}"] = lambda p, counts=counts, d=d, gamma=gamma: plots.histogram_over_time(
            result.ts, edges, counts, gamma=gamma, beta=c.beta[0], n=c.n, d=d, path=p
        )
    return out


def deviation(result: RunResult) -> np.ndarray:
    """Per d: max over members, pairs and times of |⟨x_i,x_j⟩ − γ_β(t)| (β = the run's first)."""
    gamma = gamma_of_t(result, result.config.beta[0])
    hi = np.abs(result.stats["max_inner_product"][:, 0] - gamma)
    lo = np.abs(result.stats["min_inner_product"][:, 0] - gamma)
    return np.maximum(hi, lo).max(axis=(1, 2))


def checks(result: RunResult) -> list[Check]:
    """The deviation from γ_β(t) falls like d^{−1/2} (up to a log)."""
    c = result.config
    dev = deviation(result)
    ds = np.asarray(c.d, dtype=float)
    if len(ds) < 2:
        return []
    slope = float(np.polyfit(np.log(ds), np.log(dev), 1)[0])
    # Thm 6.9: deviations are O(√(log d / d)), a log-log slope of −1/2 + 1/(2 ln d) ≈ −0.4
    return [
        Check(
            "Thm 6.9: max |⟨x_i,x_j⟩ − γ_β(t)| vs d (log-log slope)",
            "≈ −0.5 (−0.7 … −0.3)",
            f"{slope:.2f}",
            -0.7 <= slope <= -0.3,
        )
    ]


EXPERIMENT = register(
    Experiment(
        "highdim-histogram",
        "histograms of pairwise inner products over time for growing d, against γ_β(t)",
        "[GLPR] Thm 6.9",
        dict(
            experiment="highdim-histogram",
            model="sa",
            n=32,
            d=[16, 64, 256, 1024],
            beta=1.0,
            seeds=16,
            init="uniform",
            t1=10.0,
            n_save=101,
            histogram_bins=80,
            solver="tsit5",
            save_states="no",
        ),
        dict(d=[16, 64, 256], seeds=4, n_save=41),
        figures,
        checks,
    )
)
