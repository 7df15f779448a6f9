"""``fig3-phase-diagram``: the clustered fraction over (t, β) for d from 2 to 1024, with Γ_∞,δ ([GLPR] Fig. 3)."""

from __future__ import annotations

import numpy as np

from ...particles import equiangular_ode as eq
from ..analysis import mean_over_seeds, plots
from ..registry import Check, Experiment, register
from ..run.runner import RunResult


def gamma(result: RunResult):
    """The boundary Γ_∞,δ(β) of the d → ∞ phase diagram at the run's β values, and those values."""
    c = result.config
    betas = np.asarray(c.beta, dtype=float)
    return np.asarray(eq.gamma_curve(betas, c.n, c.delta, model=c.model)), betas


def crossing_times(ts: np.ndarray, fraction: np.ndarray, level: float = 0.5) -> np.ndarray:
    """For each row, the first time the curve reaches ``level`` (linear interpolation), NaN if never."""
    out = np.full(fraction.shape[0], np.nan)
    for i, row in enumerate(fraction):
        above = np.nonzero(row >= level)[0]
        if above.size == 0:
            continue
        k = above[0]
        if k == 0:
            out[i] = ts[0]
        else:
            f0, f1 = row[k - 1], row[k]
            out[i] = ts[k - 1] + (level - f0) / (f1 - f0) * (ts[k] - ts[k - 1])
    return out


def figures(result: RunResult) -> dict:
    """The phase diagram per d with Γ_∞,δ; cluster counts over time when the run has one β."""
    c = result.config
    frac = mean_over_seeds(result, "clustered_fraction")
    betas = np.asarray(c.beta, dtype=float)
    curve = gamma(result) if c.model in ("sa", "usa", "usa-rescaled") else None
    if len(betas) == 1:
        return {
            "clustered_fraction": lambda p: plots.cluster_count_vs_time(
                result.ts, {float(betas[0]): result.stats["n_clusters"][0, 0]}, n=c.n, d=c.d[0], path=p
            )
        }
    by_d = {int(d): frac[i] for i, d in enumerate(c.d)}
    return {
        "phase_diagram": lambda p: plots.phase_diagram_grid(result.ts, betas, by_d, curve, n=c.n, delta=c.delta, path=p)
    }


GAMMA_CHECK_MIN_D = 32
"""Γ_∞,δ is the d → ∞ boundary: it is compared with runs whose largest d is at least this (the quick run's)."""


def checks(result: RunResult) -> list[Check]:
    """The boundary (clustered fraction 1/2) at the largest d against Γ_∞,δ (not applicable below d = 32)."""
    c = result.config
    i = int(np.argmax(c.d))
    if c.d[i] < GAMMA_CHECK_MIN_D:
        return [
            Check.not_applicable(
                f"phase boundary (fraction 1/2) vs Γ_∞,δ at d = {c.d[i]}",
                "relative gap ≤ 0.25",
                f"Γ_∞,δ is the d → ∞ boundary: compared from d = {GAMMA_CHECK_MIN_D} on",
            )
        ]
    t_star, betas = gamma(result)
    frac = mean_over_seeds(result, "clustered_fraction")
    crossing = crossing_times(result.ts, frac[i])
    ok = np.isfinite(crossing) & np.isfinite(t_star) & (t_star < result.ts[-1])
    if not ok.any():
        return [Check(f"Γ boundary at d = {c.d[i]}", "crossings inside [0, t1]", "none", False)]
    err = float(np.median(np.abs(crossing[ok] - t_star[ok]) / t_star[ok]))
    # finite d blurs the d → ∞ boundary by O(√(log d / d)) in the inner products
    tol = 0.25 if c.d[i] < 64 else 0.1
    return [
        Check(
            f"phase boundary (fraction 1/2) vs Γ_∞,δ at d = {c.d[i]}", f"relative gap ≤ {tol}", f"{err:.3f}", err <= tol
        )
    ]


EXPERIMENT = register(
    Experiment(
        "fig3-phase-diagram",
        "phase diagram (t, β) ↦ fraction of clustered pairs for d ∈ {2…1024}, with Γ_∞,δ",
        "[GLPR] Fig. 3",
        dict(
            experiment="fig3-phase-diagram",
            model="sa",
            n=32,
            d=[2, 8, 32, 128, 512, 1024],
            beta="0.1:9:90",
            seeds=1024,
            init="uniform",
            t1=30.0,
            n_save=201,
            delta=1e-3,
            solver="rk4",
            dt=0.75,
            dense=True,
            dtype="float32",
            statistics=["clustered"],
            save_states="no",
            circle="auto",
        ),
        dict(d=[2, 32], beta="0.5:6:12", seeds=8, n_save=61),
        figures,
        checks,
        # one β draws cluster counts instead of a phase diagram
        needs=lambda config: ("clustered",) if len(config.beta) > 1 else ("clustered", "clusters"),
        runtime="3.2 min cold, 3.0 min with a warm compilation cache (2 CPU cores)",
        # the phase diagram reads the clustered fraction's means over the seeds; one β draws each seed's count
        figures_read_members=lambda config: len(config.beta) == 1,
    )
)
