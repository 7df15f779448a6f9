"""The built-in experiments: the papers' figures as configurations, plots and theory checks.

Each experiment is a set of default keys (full size, as in the paper), a ``quick`` set of
overrides that shrinks it to seconds (used by the tests and ``attnflow validate --quick``),
the figures it draws from a finished run, and the checks that compare the run with a number
the theory predicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..particles import equiangular_ode as eq
from ..particles import observables
from . import meanfield as _meanfield
from .runner import RunResult


class _Plots:
    """The ``plots`` module, imported when a figure is first drawn: matplotlib takes a third of a
    second to import, which runs without figures (``--no-plot``) need not spend."""

    def __getattr__(self, name):
        from . import plots

        return getattr(plots, name)


plots = _Plots()


@dataclass(frozen=True)
class Check:
    """One comparison of a run with the theory: what, the expected and measured values, pass or fail."""

    name: str
    expected: str
    measured: str
    passed: bool


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    reference: str
    defaults: dict
    quick: dict
    figures: Callable[[RunResult], dict]
    checks: Callable[[RunResult], list[Check]] = field(default=lambda result: [])
    # experiments made of several runs: the grid they sweep, and the figures and checks of the whole
    grid: dict | None = None
    grid_figures: Callable[[dict], dict] | None = None
    grid_checks: Callable[[dict], list[Check]] | None = None
    # the statistics groups (runner.GROUPS) its figures and checks read, given the configuration;
    # a run computes these whatever its ``statistics`` key says
    needs: Callable[[object], tuple[str, ...]] = field(default=lambda config: ("pairs", "clusters", "energy"))
    # experiments that are not a particle ensemble: their own runner, config -> RunResult
    run: Callable | None = None


# keys that change the dynamics itself: an experiment's theory checks hold for its own model only
MODEL_KEYS = ("model", "heads", "mask", "norm", "weights", "value", "layer_tau", "weights_file", "ff_width", "noise")


def changed_model_keys(config, experiment: "Experiment") -> list[str]:
    """The model keys whose values differ from the experiment's (so its theory checks do not apply)."""
    from .config import KEYS

    out = []
    for key in MODEL_KEYS:
        if key in KEYS:
            expected = KEYS[key].coerce(experiment.defaults[key]) if key in experiment.defaults else KEYS[key].default
            if config[key] != expected:
                out.append(f"{key} = {config[key]!r}")
    return out


def _mean_over_seeds(result: RunResult, name: str) -> np.ndarray:
    """(len(d), len(β), T[, ...]) average of a statistic over the ensemble."""
    return np.nanmean(result.stats[name], axis=2)


def _model(result: RunResult) -> str:
    return result.config.model


def _crossing_times(ts: np.ndarray, fraction: np.ndarray, level: float = 0.5) -> np.ndarray:
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


# -- fig3-phase-diagram ----------------------------------------------------------------------


def _gamma(result: RunResult):
    c = result.config
    betas = np.asarray(c.beta, dtype=float)
    return np.asarray(eq.gamma_curve(betas, c.n, c.delta, model=_model(result))), betas


def _fig3_figures(result: RunResult) -> dict:
    c = result.config
    frac = _mean_over_seeds(result, "clustered_fraction")
    betas = np.asarray(c.beta, dtype=float)
    curve = _gamma(result) if c.model in ("sa", "usa", "usa-rescaled") else None
    if len(betas) == 1:
        return {"clustered_fraction": lambda p: plots.cluster_count_vs_time(
            result.ts, {float(betas[0]): result.stats["n_clusters"][0, 0]}, n=c.n, d=c.d[0], path=p)}
    by_d = {int(d): frac[i] for i, d in enumerate(c.d)}
    return {"phase_diagram": lambda p: plots.phase_diagram_grid(result.ts, betas, by_d, curve, n=c.n, delta=c.delta,
                                                                 path=p)}


def _fig3_checks(result: RunResult) -> list[Check]:
    c = result.config
    t_star, betas = _gamma(result)
    frac = _mean_over_seeds(result, "clustered_fraction")
    i = int(np.argmax(c.d))
    crossing = _crossing_times(result.ts, frac[i])
    ok = np.isfinite(crossing) & np.isfinite(t_star) & (t_star < result.ts[-1])
    if not ok.any():
        return [Check(f"Γ boundary at d = {c.d[i]}", "crossings inside [0, t1]", "none", False)]
    err = float(np.median(np.abs(crossing[ok] - t_star[ok]) / t_star[ok]))
    # finite d blurs the d → ∞ boundary by O(√(log d / d)) in the inner products
    tol = 0.25 if c.d[i] < 64 else 0.1
    return [Check(f"phase boundary (fraction 1/2) vs Γ_∞,δ at d = {c.d[i]}", f"relative gap ≤ {tol}",
                  f"{err:.3f}", err <= tol)]


# -- fig4-circle ------------------------------------------------------------------------------


def _fig4_figures(result: RunResult) -> dict:
    c = result.config
    out = {}
    for j, beta in enumerate(c.beta):
        tag = f"{beta:g}".replace(".", "p")
        if result.xs is not None:
            out[f"trajectories_beta{tag}"] = (lambda p, j=j, beta=beta: plots.circle_trajectories(
                result.ts, result.xs[j, 0], n_clusters=result.stats["n_clusters"][0, j, 0], beta=beta, path=p))
    counts = {float(b): result.stats["n_clusters"][0, j] for j, b in enumerate(c.beta)}
    out["cluster_counts"] = lambda p: plots.cluster_count_vs_time(result.ts, counts, n=c.n, d=2, path=p)
    return out


def _fig4_checks(result: RunResult) -> list[Check]:
    c = result.config
    final = np.median(result.stats["n_clusters"][0, :, :, -1], axis=1)
    checks = []
    for beta, k in zip(c.beta, final):
        # Fig. 4: a few metastable clusters persist on the circle at t = 30 for β = 4 and 9
        checks.append(Check(f"clusters at t = {result.ts[-1]:g}, β = {beta:g} (median over seeds)",
                            "a few: 2 … 8", f"{k:g}", 2 <= k <= 8))
    if len(c.beta) > 1:
        order = np.argsort(c.beta)
        monotone = bool(np.all(np.diff(final[order]) >= 0))
        checks.append(Check("cluster count grows with β", "non-decreasing", " → ".join(f"{k:g}" for k in final[order]),
                            monotone))
    return checks


# -- highdim-histogram ------------------------------------------------------------------------


def _gamma_of_t(result: RunResult, beta: float) -> np.ndarray:
    c = result.config
    return np.asarray(eq.equiangular(beta, c.n, result.ts, c.rho if c.init == "equiangular" else 0.0,
                                     model=_model(result)))


def _hist_figures(result: RunResult) -> dict:
    c = result.config
    edges = np.asarray(observables.histogram_edges(c.histogram_bins))
    out = {}
    for i, d in enumerate(c.d):
        counts = result.stats["histogram"][i, 0].sum(axis=0)
        gamma = _gamma_of_t(result, c.beta[0])
        out[f"histogram_d{d}"] = (lambda p, counts=counts, d=d, gamma=gamma: plots.histogram_over_time(
            result.ts, edges, counts, gamma=gamma, beta=c.beta[0], n=c.n, d=d, path=p))
    return out


def _deviation(result: RunResult) -> np.ndarray:
    """Per d: max over members, pairs and times of |⟨x_i,x_j⟩ − γ_β(t)| (β = the run's first)."""
    gamma = _gamma_of_t(result, result.config.beta[0])
    hi = np.abs(result.stats["max_inner_product"][:, 0] - gamma)
    lo = np.abs(result.stats["min_inner_product"][:, 0] - gamma)
    return np.maximum(hi, lo).max(axis=(1, 2))


def _hist_checks(result: RunResult) -> list[Check]:
    c = result.config
    dev = _deviation(result)
    ds = np.asarray(c.d, dtype=float)
    if len(ds) < 2:
        return []
    slope = float(np.polyfit(np.log(ds), np.log(dev), 1)[0])
    # Thm 6.9: deviations are O(√(log d / d)), a log-log slope of −1/2 + 1/(2 ln d) ≈ −0.4
    return [Check("Thm 6.9: max |⟨x_i,x_j⟩ − γ_β(t)| vs d (log-log slope)", "≈ −0.5 (−0.7 … −0.3)", f"{slope:.2f}",
                  -0.7 <= slope <= -0.3)]


# -- orthogonal-ode ---------------------------------------------------------------------------


def _ode_figures(result: RunResult) -> dict:
    c = result.config
    out = {}
    if result.xs is None:
        return out
    for j, beta in enumerate(c.beta):
        gram = np.einsum("tid,tjd->tij", result.xs[j, 0], result.xs[j, 0])
        tag = f"{beta:g}".replace(".", "p")
        out[f"inner_products_beta{tag}"] = (lambda p, gram=gram, beta=beta: plots.inner_product_vs_ode(
            result.ts, gram, _gamma_of_t(result, beta), n=c.n, beta=beta, path=p))
    return out


def _ode_checks(result: RunResult) -> list[Check]:
    c = result.config
    checks = []
    for j, beta in enumerate(c.beta):
        gamma = _gamma_of_t(result, beta)
        dev = max(float(np.max(np.abs(result.stats["max_inner_product"][0, j] - gamma))),
                  float(np.max(np.abs(result.stats["min_inner_product"][0, j] - gamma))))
        checks.append(Check(f"Thm 6.8: pairs follow (6.9) at β = {beta:g}", "max error ≤ 1e-6", f"{dev:.1e}",
                            dev <= 1e-6))
    return checks


# -- sphere-movie -----------------------------------------------------------------------------


def _movie_figures(result: RunResult) -> dict:
    c = result.config
    if result.xs is None:
        return {}
    xs = result.xs[0, 0]
    return {
        "trajectories": lambda p: plots.trajectories(result.ts, xs, beta=c.beta[0], path=p),
        "movie.gif": lambda p: plots.animate_sphere(result.ts, xs, beta=c.beta[0], path=p),
    }


def _energy_checks(result: RunResult) -> list[Check]:
    e = result.stats["normalized_energy"]
    worst = float(np.min(np.diff(e, axis=-1)))
    # SA and USA with V = I are gradient ascent flows of E_β ([GLPR] §3): E never decreases
    return [Check("energy E_β non-decreasing along the flow", "min increment ≥ −1e-9", f"{worst:.1e}", worst >= -1e-9)]


# -- staircase --------------------------------------------------------------------------------


def _rescaled_time(result: RunResult, beta: float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(np.maximum(result.ts, 1e-300)) / beta


def _staircase_plateaus(result: RunResult, j: int):
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
        out.append((float(np.exp(a)), float(np.exp(b)), float(np.median(energy[inside])),
                    float(np.median(level[inside])), int(k)))
    return out


def _staircase_figures(result: RunResult) -> dict:
    c = result.config
    out = {}
    for j, beta in enumerate(c.beta):
        found = _staircase_plateaus(result, j)
        bands = [(a, b, e) for a, b, e, _, _ in found]
        levels = sorted({round(lv, 4) for _, _, _, lv, _ in found})
        tag = f"{beta:g}".replace(".", "p")
        out[f"staircase_beta{tag}"] = (lambda p, j=j, beta=beta, bands=bands, levels=levels: plots.energy_and_clusters(
            result.ts[1:], result.stats["normalized_energy"][0, j, 0, 1:], result.stats["n_clusters"][0, j, 0, 1:],
            plateaus=bands, levels=[(v, f"Σm²/n² = {v:.2f}") for v in levels], logx=True, beta=beta, n=c.n,
            path=p))
    return out


def _staircase_checks(result: RunResult) -> list[Check]:
    checks = []
    n = result.config.n
    for j, beta in enumerate(result.config.beta):
        # the first plateau is the start itself (single tokens still interacting); the later ones
        # are tight clusters, whose normalized energy is Σ m_q²/n² (arXiv 2410.06833)
        merged = [(e, lv) for a, b, e, lv, k in _staircase_plateaus(result, j) if k < n and b >= 10 * a]
        worst = max((abs(e - lv) for e, lv in merged), default=float("nan"))
        checks.append(Check(f"staircase at β = {beta:g}: plateau energies vs Σm²/n²",
                            "≥ 2 plateaus (a decade long) after a merge, |E − Σm²/n²| ≤ 0.01",
                            f"{len(merged)} plateaus, worst {worst:.1e}", len(merged) >= 2 and worst <= 0.01))
    return checks


# -- metastability ----------------------------------------------------------------------------


def _meta_figures(result: RunResult) -> dict:
    c = result.config
    counts = {float(b): result.stats["n_clusters"][0, j] for j, b in enumerate(c.beta)}
    return {"cluster_counts": lambda p: plots.cluster_count_vs_time(result.ts, counts, logx=True, n=c.n, d=c.d[0],
                                                                     path=p)}


def _meta_checks(result: RunResult) -> list[Check]:
    c = result.config
    counts = result.stats["n_clusters"][0]  # (β, seeds, T)
    medians = np.median(counts[:, :, -1], axis=1)
    order = np.argsort(c.beta)
    # larger β: more metastable clusters, living longer ([GLPR] §6.3; their number grows like √β)
    return [Check(f"metastable cluster count at t = {result.ts[-1]:.3g} grows with β",
                  "non-decreasing in β", " → ".join(f"{m:g}" for m in medians[order]),
                  bool(np.all(np.diff(medians[order]) >= 0)))]


# -- metastable-count -------------------------------------------------------------------------

# tight clusters: the normalized energy (1/n²)ΣΣ e^{β(⟨x_i,x_j⟩−1)} is within this fraction of Σ_q m_q²/n²
# over the δ-clusters, its value for point clusters (MODEL.md §1.3); before the collapse it is far above
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
        raise ValueError(f"ts, counts and tight must have the same shape, got {ts.shape}, {counts.shape}, "
                         f"{tight.shape}")
    if min_ratio < 1:
        raise ValueError(f"min_ratio must be ≥ 1, got {min_ratio}")
    keep = ts > 0
    ts, counts, tight = ts[keep], counts[keep], tight[keep]
    log_t = np.log(ts)
    for a, b, value in observables.plateaus(log_t, counts, min_duration=float(np.log(min_ratio))):
        i, j = np.searchsorted(log_t, a), np.searchsorted(log_t, b)
        if not tight[i:j + 1].any():
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
        out["count"][idx], out["t_start"][idx], out["t_end"][idx], out["censored"][idx] = \
            count, t_start, t_end, censored
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


def _metacount_figures(result: RunResult) -> dict:
    from ..particles.modes import fastest_mode

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
        "cluster_count_vs_beta": lambda p: plots.metastable_counts(
            betas, counts, kstar=kstar, lstar=lstar, n=c.n, delta=c.delta, path=p),
        "plateau_lifetime": lambda p: plots.plateau_lifetimes(
            betas, lifetimes, censored, t1=c.t1, fits=fits, n=c.n, path=p),
    }


def _metacount_checks(result: RunResult) -> list[Check]:
    from ..particles.modes import fastest_mode

    c = result.config
    if 2 not in c.d:
        return []
    i = list(c.d).index(2)
    states = metastable_states(result)
    betas = np.asarray(c.beta, dtype=float)
    kstar = np.asarray(fastest_mode(betas))
    checks = []
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
            checks.append(Check(name, expected, f"{counts.size} of {c.seeds} runs reached a plateau", False))
            continue
        q1, med, q3 = np.percentile(counts, [25, 50, 75])
        spread = q3 - q1
        checks.append(Check(name, expected, f"{med:g} (IQR {spread:g})", bool(abs(med - kstar[j]) <= max(1.0, spread))))
    medians = np.array([np.median(row[np.isfinite(row)]) if np.isfinite(row).any() else np.nan
                        for row in states["count"][i]])
    large = (betas >= SQRT_CHECK_BETA) & np.isfinite(medians)
    if large.sum() >= 3:
        slope = float(np.polyfit(np.log(betas[large]), np.log(medians[large]), 1)[0])
        # k*(β) ≈ √(2β): the count grows like √β (arXiv 2410.23228, 2512.01868 §5.3)
        checks.append(Check(f"clusters ~ β^p for β ≥ {SQRT_CHECK_BETA:g} (d = 2, log-log slope of the medians)",
                            "p ≈ 1/2: 0.35 … 0.65", f"{slope:.2f}", 0.35 <= slope <= 0.65))
    fit, used = _lifetime_fit(betas, *_lifetimes(states, i))
    # arXiv 2410.06833: log T₂ ~ β for clusters a fixed angle θ apart; the first metastable clusters are
    # only ≈ 2π/k* ≈ π√(2/β) apart, so β(1 − cos θ) ≈ π² and the slope is close to 0
    checks.append(Check("first metastable state: slope b of log T₂ = a + bβ (d = 2, uncensored, ≥ 2 clusters)",
                        "reported",
                        "no two β with an uncensored run" if fit is None else f"{fit[1]:+.3g} per unit β ({used} runs)",
                        fit is not None))
    return checks


# -- fig5-random-matrices ---------------------------------------------------------------------

FIG5_PANELS = {
    "ginibre": "(a) Q, K, V Ginibre",
    "wigner-psd": "(b) QᵀK Wigner, V ⪰ 0",
    "ginibre-v-qk": "(c) Q, K Ginibre, V = QᵀK",
    "wigner-v-qk": "(d) QᵀK Wigner, V = QᵀK",
}


def _fig5_figures(results: dict) -> dict:
    first = next(iter(results.values()))
    c = first.config
    betas = np.asarray(c.beta, dtype=float)
    panels = {FIG5_PANELS.get(w, w): _mean_over_seeds(r, "clustered_fraction")[0] for w, r in results.items()}
    return {"phase_diagrams": lambda p: plots.phase_diagram_grid(
        first.ts, betas, panels, ncols=2, n=c.n, delta=c.delta, title=f"random weights, d = {c.d[0]}", path=p)}


def _fig5_checks(results: dict) -> list[Check]:
    checks = []
    r = results.get("wigner-v-qk")
    if r is not None and "log_energy" in r.stats:
        e = r.stats["log_energy"]
        worst = float(np.min(np.diff(e, axis=-1)))
        # float32 rounds log E itself to ~1e-6 (steps of 8 ulp seen at |log E| ≈ 15): 64 ulp of its largest value
        tol = 1e-9 if r.config.dtype == "float64" else 64 * float(np.finfo(np.float32).eps) * max(
            1.0, float(np.max(np.abs(e))))
        # QᵀK symmetric and V = QᵀK: SA is a gradient flow of E_β with kernel QᵀK ([GLPR] §3.2)
        checks.append(Check("(d) V = QᵀK symmetric: energy of the QᵀK kernel non-decreasing",
                            f"min increment of log E ≥ −{'1e-9' if tol == 1e-9 else f'{tol:.1e}'} ({r.config.dtype})",
                            f"{worst:.1e}", worst >= -tol))
    return checks


# -- the registry -----------------------------------------------------------------------------

EXPERIMENTS: dict[str, Experiment] = {}


def _register(e: Experiment) -> None:
    EXPERIMENTS[e.name] = e


_register(Experiment(
    "fig3-phase-diagram",
    "phase diagram (t, β) ↦ fraction of clustered pairs for d ∈ {2…1024}, with Γ_∞,δ",
    "[GLPR] Fig. 3",
    dict(experiment="fig3-phase-diagram", model="sa", n=32, d=[2, 8, 32, 128, 512, 1024], beta="0.1:9:90",
         seeds=1024, init="uniform", t1=30.0, n_save=201, delta=1e-3, solver="rk4", dt=0.75, dense=True,
         dtype="float32", statistics=["clustered"], save_states="no", circle="auto"),
    dict(d=[2, 32], beta="0.5:6:12", seeds=8, n_save=61),
    _fig3_figures, _fig3_checks,
    # one β draws cluster counts instead of a phase diagram
    needs=lambda config: ("clustered",) if len(config.beta) > 1 else ("clustered", "clusters"),
))
_register(Experiment(
    "fig5-random-matrices",
    "phase diagrams with random Q, K, V: the four ensembles of Fig. 5 (d = 128)",
    "[GLPR] Fig. 5",
    # rk4 dt = 0.25 on a uniform grid, float32, a member stopped once one cluster (docs/numerics.md,
    # "Fig. 5's method"); --quick keeps float64, where the gradient-flow check holds to 1e-9
    dict(experiment="fig5-random-matrices", model="sa", n=32, d=128, beta="0.1:9:90", seeds=1024,
         init="uniform", t1=30.0, n_save=201, delta=1e-3, solver="rk4", dt=0.25, dense=True, dtype="float32",
         stop_when_clustered=True, statistics=["clustered"], save_states="no"),
    dict(d=16, beta="0.5:6:8", seeds=4, n_save=41, dtype="float64"),
    lambda result: {}, lambda result: [],
    grid={"weights": list(FIG5_PANELS)}, grid_figures=_fig5_figures, grid_checks=_fig5_checks,
    # the figure reads the clustered fraction; the check of panel (d), the log-energy
    needs=lambda config: ("clustered", "energy") if config.weights == "wigner-v-qk" else ("clustered",),
))
_register(Experiment(
    "fig4-circle",
    "trajectories on the circle (d = 2) at β = 4 and 9 with cluster counts up to t = 30",
    "[GLPR] Fig. 4",
    dict(experiment="fig4-circle", model="sa", n=32, d=2, beta=[4.0, 9.0], seeds=32, init="uniform", t1=30.0,
         n_save=301, delta=1e-3, solver="tsit5", save_states="yes"),
    dict(seeds=6, n_save=61),
    _fig4_figures, _fig4_checks,
))
_register(Experiment(
    "highdim-histogram",
    "histograms of pairwise inner products over time for growing d, against γ_β(t)",
    "[GLPR] Thm 6.9",
    dict(experiment="highdim-histogram", model="sa", n=32, d=[16, 64, 256, 1024], beta=1.0, seeds=16,
         init="uniform", t1=10.0, n_save=101, histogram_bins=80, solver="tsit5", save_states="no"),
    dict(d=[16, 64, 256], seeds=4, n_save=41),
    _hist_figures, _hist_checks,
))
_register(Experiment(
    "orthogonal-ode",
    "orthogonal start (d = n): every pair follows the equiangular ODE (6.9)",
    "[GLPR] Thm 6.8",
    dict(experiment="orthogonal-ode", model="sa", n=32, d=32, beta=[1.0, 4.0], seeds=1, init="orthogonal",
         t1=10.0, n_save=101, solver="dopri8", rtol=1e-10, atol=1e-12, save_states="yes"),
    dict(n=8, d=8, n_save=41),
    _ode_figures, _ode_checks,
))
_register(Experiment(
    "sphere-movie",
    "n = 64 particles on S² at β = 1 up to t = 15, as an animated GIF",
    "[GLPR] movies",
    dict(experiment="sphere-movie", model="sa", n=64, d=3, beta=1.0, seeds=1, init="uniform", t1=15.0,
         n_save=151, solver="tsit5", save_states="yes"),
    dict(n=16, n_save=31),
    _movie_figures, _energy_checks,
))
_register(Experiment(
    "staircase",
    "n = 5 on the circle at large β: normalized energy vs log time climbs a staircase",
    "arXiv 2410.06833",
    # merges of clusters at angle θ take times ~ e^{βθ²/2}; past β ≈ 600 the force between the
    # last two clusters (e^{-βθ²/2} ≈ 1e-16) drowns in float64 rounding, hence β ≤ 500 here.
    # Tight clusters contract at rate O(1) while merges take 10⁶: an implicit method is needed.
    dict(experiment="staircase", model="usa-rescaled", n=5, d=2, beta=[300.0, 400.0, 500.0], seeds=1,
         init="angles", angles=[0.0, 0.06, 0.15, 0.27, 0.42], t1=1e12, n_save=281, save_spacing="log",
         log_decades=14.0, solver="kvaerno5", rtol=1e-8, atol=1e-12, delta=1e-6, stop_when_clustered=True,
         save_states="no"),
    dict(beta=[500.0], n_save=141),
    _staircase_figures, _staircase_checks,
))
_register(Experiment(
    "metastability",
    "cluster count vs time on the circle for a β grid: how many clusters, for how long",
    "[GLPR] §6.3, arXiv 2410.23228",
    dict(experiment="metastability", model="sa", n=64, d=2, beta=[1.0, 4.0, 9.0, 16.0, 25.0], seeds=32,
         init="uniform", t1=1e4, n_save=161, save_spacing="log", log_decades=4.0, solver="tsit5",
         save_states="no"),
    dict(n=32, beta=[1.0, 9.0, 25.0], seeds=6, t1=300.0, n_save=61),
    _meta_figures, _meta_checks,
))
_register(Experiment(
    "metastable-count",
    "clusters of the first metastable state vs β against the fastest unstable mode k*(β) and √β; their lifetime",
    "arXiv 2410.23228, 2512.01868 §5.3, 2410.06833",
    # n = 1024: the uniform start perturbs every Fourier mode by ~n^{-1/2}, which the instability must
    # amplify into clean clusters. δ = 1e-5 (angle √(2δ) ≈ 4.5e-3): ≥ 20× below the spacing 2π/k* of the
    # clusters at β ≤ 400, which contract at rate ≈ 1 once formed; βδ ≤ 4e-3 keeps the tightness test sharp.
    dict(experiment="metastable-count", model="sa", n=1024, d=2,
         beta=[1.0, 1.7, 3.0, 5.0, 9.0, 15.0, 26.0, 45.0, 78.0, 135.0, 230.0, 400.0], seeds=16, init="uniform",
         t1=1000.0, n_save=121, save_spacing="log", log_decades=3.0, delta=1e-5, solver="tsit5",
         statistics=["clusters", "energy"], save_states="no"),
    dict(n=256, beta=[2.0, 5.0, 9.0, 15.0], seeds=8, t1=100.0, n_save=61, log_decades=2.0),
    _metacount_figures, _metacount_checks,
    needs=lambda config: ("clusters", "energy"),
))
_register(Experiment(
    "meanfield-circle",
    "the n → ∞ density on the circle (spectral PDE solver): growth rates, clusters, particles converging in W1",
    "[GLPR] (3.1)–(3.4), MODEL.md §3",
    # t1: the clusters concentrate like e^{-t}; 2·modes grid points resolve them until about then
    dict(experiment="meanfield-circle", model="sa", d=2, beta=[5.0], seeds=4, t1=12.5, n_save=126, modes=1024,
         perturbation=1e-3, rtol=1e-8, atol=1e-10, solver="rk4", dt=0.05, particle_counts=[64, 256, 1024, 4096],
         save_states="no"),
    dict(modes=256, t1=11.5, n_save=47, particle_counts=[64, 256, 1024]),
    _meanfield.figures, _meanfield.checks, run=_meanfield.run,
))


def get(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        import difflib

        close = difflib.get_close_matches(name, EXPERIMENTS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown experiment {name!r}{hint} (built-in: {', '.join(EXPERIMENTS)})")
    return EXPERIMENTS[name]


def _generic_figures(result: RunResult) -> dict:
    c = result.config
    out = {}
    # a run of one's own computes only its ``statistics``: draw what it has
    clustered = "n_clusters" in result.stats
    if result.xs is not None and len(c.beta) >= 1:
        out["trajectories"] = lambda p: plots.trajectories(
            result.ts, result.xs[0, 0], n_clusters=result.stats["n_clusters"][0, 0, 0] if clustered else None,
            beta=c.beta[0], path=p)
    if clustered:
        counts = {float(b): result.stats["n_clusters"][0, j] for j, b in enumerate(c.beta)}
        out["cluster_counts"] = lambda p: plots.cluster_count_vs_time(result.ts, counts, n=c.n, d=c.d[0], path=p)
    return out


def statistics_figures(result: RunResult) -> dict:
    """Figures of the optional statistics a run computed, whatever its experiment.

    "attention" (``statistics`` includes it): attended tokens and spectral gap of A(t) against time,
    and the stationary law at the last time (one figure per d when d is a list).
    """
    if "effective_tokens" not in result.stats:
        return {}
    c = result.config
    out = {}
    for i, d in enumerate(c.d):
        def draw(p, i=i, d=d):
            by_beta = {float(b): j for j, b in enumerate(c.beta)}
            return plots.attention_statistics(
                result.ts, {b: result.stats["effective_tokens"][i, j] for b, j in by_beta.items()},
                {b: result.stats["spectral_gap"][i, j] for b, j in by_beta.items()},
                {b: result.stats["stationary_distribution"][i, j, 0, -1] for b, j in by_beta.items()},
                n=c.n, d=d, logx=c.save_spacing == "log", path=p)
        out["attention" if len(c.d) == 1 else f"attention_d{d}"] = draw
    return out


# a user's own configuration (experiment = "simulate"): trajectories and cluster counts
GENERIC = Experiment("simulate", "a configuration of your own", "", dict(experiment="simulate"), {},
                     _generic_figures)


def resolve(name: str) -> Experiment:
    """The experiment named by a configuration's ``experiment`` key."""
    return GENERIC if name == "simulate" else get(name)
