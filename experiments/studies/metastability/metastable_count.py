"""``metastable-count``: the first metastable state on the circle, its clusters and lifetime against β.

Its cluster count is compared with the fastest unstable mode k*(β) and with √β growth; its lifetime
T₂ is fitted as log T₂ = a + bβ and drawn, with no value of b to check (arXiv 2410.23228, 2512.01868 §5.3,
2410.06833).
"""

from __future__ import annotations

import numpy as np

from ....particles import observables
from ...analysis import LazyModule
from ...registry import Check, Experiment, register
from ...run.runner import RunResult

draw = LazyModule(f"{__package__}.metastability_figures")  # this study's figures, imported on first use

# tight clusters: the normalized energy (1/n²)ΣΣ e^{β(⟨x_i,x_j⟩−1)} is within this fraction of Σ_q m_q²/n²
# over the δ-clusters, its value for point clusters (docs/model.md §1.3); before the collapse it is far above
TIGHT_TOLERANCE = 0.05
# a metastable state lasts at least this factor in time (t_end ≥ ratio · t_start): a shorter run of one
# count is clusters still forming, or a straggler leaving the unstable point between two clusters
PLATEAU_RATIO = 1.25
# the β of the check against k*(β) on the circle: k* ≥ 2, and at most ~7 clusters, so each holds ≳ n/10 tokens
COUNT_CHECK_BETAS = (2.0, 30.0)
# the β of the check of √β growth: k*(β) ≈ √(2β) from about here
SQRT_CHECK_BETA = 30.0


def first_metastable_plateau(ts, counts, tight=None, *, min_ratio: float = PLATEAU_RATIO):
    """The first metastable state of one member: (count, T₁, T₂, censored).

    Plateaus are the maximal runs of one cluster count (``observables.plateaus`` on log t; t = 0
    is left out). The first metastable state is the first plateau with a tight sample (``tight``,
    per save time; None: all are) that lasts t_end ≥ min_ratio · t_start. T₁ is its first save
    time and T₂ the first save time at which the count differs (the first merge); a plateau that
    lasts to the last save time is censored: T₂ = ts[-1], censored = True. Without one:
    (NaN, NaN, NaN, False).
    """
    ts = np.asarray(ts, dtype=float)
    counts = np.asarray(counts)
    tight = np.ones(ts.shape, dtype=bool) if tight is None else np.asarray(tight, dtype=bool)
    if counts.shape != ts.shape or tight.shape != ts.shape:
        raise ValueError(
            f"ts, counts and tight must have the same shape, got {ts.shape}, {counts.shape}, {tight.shape}"
        )
    if min_ratio < 1:
        raise ValueError(f"min_ratio must be ≥ 1, got {min_ratio}")
    keep = ts > 0
    ts, counts, tight = ts[keep], counts[keep], tight[keep]
    log_t = np.log(ts)
    for a, b, value in observables.plateaus(log_t, counts, min_duration=float(np.log(min_ratio))):
        i, j = np.searchsorted(log_t, a), np.searchsorted(log_t, b)
        if not tight[i : j + 1].any():
            continue
        censored = j == ts.size - 1
        return float(value), float(ts[i]), float(ts[-1] if censored else ts[j + 1]), bool(censored)
    return np.nan, np.nan, np.nan, False


def metastable_states(result: RunResult) -> dict[str, np.ndarray]:
    """The first metastable plateau of every member: "count", "t_start" (T₁), "t_end" (T₂), "censored",
    each of shape (len(d), len(β), seeds)."""
    counts = result.stats["n_clusters"]
    level = result.stats["cluster_level"]
    tight = np.abs(result.stats["normalized_energy"] - level) <= TIGHT_TOLERANCE * level
    out = {k: np.full(counts.shape[:3], np.nan) for k in ("count", "t_start", "t_end")}
    out["censored"] = np.zeros(counts.shape[:3], dtype=bool)
    for idx in np.ndindex(*counts.shape[:3]):
        count, t_start, t_end, censored = first_metastable_plateau(result.ts, counts[idx], tight[idx])
        out["count"][idx], out["t_start"][idx], out["t_end"][idx], out["censored"][idx] = (
            count,
            t_start,
            t_end,
            censored,
        )
    return out


def _lifetimes(states: dict, i: int) -> tuple[np.ndarray, np.ndarray]:
    """T₂ and censored (β, seeds) at the i-th d, NaN where the first state is one cluster: that is the
    final state (consensus), which never ends, not a metastable one."""
    return np.where(states["count"][i] > 1, states["t_end"][i], np.nan), states["censored"][i]


def _lifetime_fit(betas: np.ndarray, t_end: np.ndarray, censored: np.ndarray):
    """(a, b) of the least-squares line log T₂ = a + bβ over uncensored members (β, seeds), and their number."""
    ok = np.isfinite(t_end) & ~censored
    x = np.broadcast_to(betas[:, None], t_end.shape)[ok]
    if np.unique(x).size < 2:
        return None, int(ok.sum())
    b, a = np.polyfit(x, np.log(t_end[ok]), 1)
    return (float(a), float(b)), int(ok.sum())


def figures(result: RunResult) -> dict:
    """The first metastable state: its cluster count against β with k*(β), its lifetime T₂ with its fit."""
    from ....particles.modes import fastest_mode

    c = result.config
    states = metastable_states(result)
    betas = np.asarray(c.beta, dtype=float)
    grid = np.geomspace(betas.min(), betas.max(), 400)
    kstar = (grid, np.asarray(fastest_mode(grid)))
    lstar = (grid, np.asarray(fastest_mode(grid, 3))) if 3 in c.d else None
    counts = {int(d): states["count"][i] for i, d in enumerate(c.d)}
    lifetimes = {int(d): _lifetimes(states, i)[0] for i, d in enumerate(c.d)}
    censored = {int(d): _lifetimes(states, i)[1] for i, d in enumerate(c.d)}
    fits = {int(d): _lifetime_fit(betas, *_lifetimes(states, i))[0] for i, d in enumerate(c.d)}
    return {
        "cluster_count_vs_beta": lambda p: draw.metastable_counts(
            betas, counts, kstar=kstar, lstar=lstar, n=c.n, delta=c.delta, path=p
        ),
        "plateau_lifetime": lambda p: draw.plateau_lifetimes(
            betas, lifetimes, censored, t1=c.t1, fits=fits, n=c.n, path=p
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """At d = 2: the count against k*(β) for moderate β, and its √β growth for large β.

    The lifetime T₂ of the first state is drawn with its fit log T₂ = a + bβ (``figures``) but not checked: the
    theory gives no value of b to compare it with (clusters ≈ 2π/k* apart have β(1 − cos θ) ≈ π², a slope near 0
    only as β → ∞)."""
    from ....particles.modes import fastest_mode

    c = result.config
    if 2 not in c.d:
        return [
            Check.not_applicable(
                "metastable cluster count against k*(β)",
                "k*(β) = argmax k² I_k(β)",
                f"the theory is that of the circle, d = 2; this run has d = {list(c.d)}",
            )
        ]
    i = list(c.d).index(2)
    states = metastable_states(result)
    betas = np.asarray(c.beta, dtype=float)
    kstar = np.asarray(fastest_mode(betas))
    out = []
    lo, hi = COUNT_CHECK_BETAS
    for j, beta in enumerate(betas):
        if not lo <= beta <= hi:
            continue
        counts = states["count"][i, j]
        counts = counts[np.isfinite(counts)]
        name = f"first metastable state at β = {beta:g}: clusters vs k*(β) (d = 2, median over seeds)"
        expected = f"{kstar[j]} ± max(1, IQR)"
        # most members must reach a plateau for their median to mean anything
        if counts.size * 2 <= c.seeds:
            out.append(Check(name, expected, f"{counts.size} of {c.seeds} runs reached a plateau", False))
            continue
        q1, med, q3 = np.percentile(counts, [25, 50, 75])
        spread = q3 - q1
        out.append(Check(name, expected, f"{med:g} (IQR {spread:g})", bool(abs(med - kstar[j]) <= max(1.0, spread))))
    medians = np.array(
        [np.median(row[np.isfinite(row)]) if np.isfinite(row).any() else np.nan for row in states["count"][i]]
    )
    large = (betas >= SQRT_CHECK_BETA) & np.isfinite(medians)
    if large.sum() >= 3:
        slope = float(np.polyfit(np.log(betas[large]), np.log(medians[large]), 1)[0])
        # k*(β) ≈ √(2β): the count grows like √β (arXiv 2410.23228, 2512.01868 §5.3)
        out.append(
            Check(
                f"clusters ~ β^p for β ≥ {SQRT_CHECK_BETA:g} (d = 2, log-log slope of the medians)",
                "p ≈ 1/2: 0.35 … 0.65",
                f"{slope:.2f}",
                0.35 <= slope <= 0.65,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "metastable-count",
        "clusters of the first metastable state vs β against the fastest unstable mode k*(β) and √β; their lifetime",
        "arXiv 2410.23228, 2512.01868 §5.3, 2410.06833",
        # n = 1024: the uniform start perturbs every Fourier mode by ~n^{-1/2}, which the instability must
        # amplify into clean clusters. δ = 1e-5 (angle √(2δ) ≈ 4.5e-3): ≥ 20× below the spacing 2π/k* of the
        # clusters at β ≤ 400, which contract at rate ≈ 1 once formed; βδ ≤ 4e-3 keeps the tightness test sharp.
        dict(
            experiment="metastable-count",
            model="sa",
            n=1024,
            d=2,
            beta=[1.0, 1.7, 3.0, 5.0, 9.0, 15.0, 26.0, 45.0, 78.0, 135.0, 230.0, 400.0],
            seeds=16,
            init="uniform",
            t1=1000.0,
            n_save=121,
            save_spacing="log",
            log_decades=3.0,
            delta=1e-5,
            solver="tsit5",
            statistics=["clusters", "energy"],
            save_states="no",
        ),
        dict(n=256, beta=[2.0, 5.0, 9.0, 15.0], seeds=8, t1=100.0, n_save=61, log_decades=2.0),
        figures,
        checks,
        needs=lambda config: ("clusters", "energy"),
        runtime="≈ 10 min on 2 CPU cores",
    )
)
