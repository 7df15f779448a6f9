"""``moderate-interaction``: β = c·n, the collapse, the clusters and their merging (arXiv 2509.25040).

n i.i.d. uniform tokens on the circle (d = 2) and on S² (d = 3), SA and USA (rescaled time), β = c·n for
each n of ``token_counts`` and c of ``interaction_c``, ``seeds`` starts each, V = diag(1, …, 1, λ) with
λ = ``collapse_eigenvalue`` on S² (V = I on the circle), the attention blocked past a few thousand tokens.
Each member's three phases are read from its saved states (``moderate_interaction_theory.py``): the collapse onto
the great circle (S² only) when the smallest eigenvalue of the second moment falls to e^{−2}/3, the
clusters when the power of the unstable Fourier band reaches 1/2 (its exponential rise before gives the
growth rate, compared with the linear theory), the merging when the number of clusters first falls. USA is
saved on a grid in units of ``usa_time_unit(β, 2)`` (its kernel's mean at the uniform density on the circle,
where its tokens gather, also on S²) and reported in its own time.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ....particles import fields, init
from ....particles.modes import BETA_MAX, fastest_mode, fastest_rate
from ....solvers.progress import Counter
from ....solvers.simulation import simulate
from ...analysis import LazyModule
from ...config import FIXED_STEP_SOLVERS, ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .moderate_interaction_theory import (
    COLLAPSE_LEVEL,
    angular_speeds,
    band_growth,
    band_power,
    cluster_count,
    cluster_gap,
    collapse_moment,
    collapse_time,
    first_crossing,
    line_fit,
    plane_angles,
    second_moment_spectrum,
    sphere_resultant,
    unstable_band,
    usa_time_unit,
)

draw = LazyModule(f"{__package__}.moderate_interaction_figures")  # this study's figures, imported on first use

ADAPTIVE = ("tsit5", "dopri5", "dopri8", "kvaerno5")
"""Solvers that take rtol and atol."""

MODELS = ("sa", "usa")
"""SA, and USA in the rescaled time of arXiv 2410.06833 (kernel e^{β(⟨x, y⟩ − 1)}: no overflow at β = c·n)."""

LINEAR_SAVES = 120
"""Saves on the linear part of the grid, which resolves the collapse and the clusters' exponential growth."""

LOG_SAVES = 60
"""Saves on the geometric part of the grid, from the linear part's end to t1, where the clusters merge."""

_MEMBER = ["d", "beta", "seed", "usa", "token_count", "c"]
_SERIES = ("min_eigenvalue", "kinetic_energy", "band_power", "cluster_count")
_PHASES = (
    "t_collapse",
    "t_clusters",
    "t_linear",
    "band_growth_rate",
    "band_growth_error",
    "band_growth_theory",
    "clusters",
    "t_first_merge",
    "t_half",
)
STAT_DIMENSIONS.update(
    min_eigenvalue=_MEMBER + ["save_index"],
    kinetic_energy=_MEMBER + ["save_index"],
    band_power=_MEMBER + ["save_index"],
    cluster_count=_MEMBER + ["save_index"],
    save_time=_MEMBER + ["save_index"],
    **{name: list(_MEMBER) for name in _PHASES},
)


def linear_end(n: int, c: float) -> float:
    """End of the linear part of the save grid (SA units): twice the clusters' expected formation time
    log(n/c)/(4λ*) + the collapse's e-folding times, at least 8."""
    rate = fastest_rate(c * n, 2, model="sa")
    return max(8.0, 2.0 * (math.log(n / c) / (4.0 * rate) + 3.0))


def save_grid(n: int, c: float, t1: float) -> np.ndarray:
    """Save times in SA units: LINEAR_SAVES up to ``linear_end``, then LOG_SAVES geometric to t1."""
    end = min(linear_end(n, c), t1)
    lin = np.linspace(0.0, end, LINEAR_SAVES + 1)
    if t1 <= end * (1 + 1e-9):
        return lin
    return np.concatenate([lin, np.geomspace(end, t1, LOG_SAVES + 1)[1:]])


def _field(model: str, beta: float, d: int, lam: float, unit: float = 1.0):
    """SA, or USA (rescaled time) run in units of ``unit``: its drift is linear in V, so V·unit is USA in the time t/unit."""
    V = unit * jnp.diag(jnp.asarray([1.0] * (d - 1) + [lam if d > 2 else 1.0]))
    if model == "sa":
        return fields.SA(beta, V=None if d == 2 else V)
    return fields.USA(beta, V=V, time="rescaled")


@eqx.filter_jit
def _velocity(field, x):
    return field(0.0, x)


def _observe(field, xs: np.ndarray, beta: float) -> dict:
    """Per save of one member's states (T, n, d): λ_min(M), the angular kinetic energy, the power of the unstable
    band, the cluster count."""
    lam_min, energy, power, count = [], [], [], []
    gap = cluster_gap(beta)
    modes, _ = unstable_band(beta)
    for x in xs:
        v = np.asarray(_velocity(field, jnp.asarray(x)))
        theta = plane_angles(x)
        lam_min.append(second_moment_spectrum(x)[0])
        energy.append(float(np.mean(angular_speeds(x, v) ** 2)))
        power.append(band_power(theta, modes))
        count.append(cluster_count(theta, gap))
    return dict(
        min_eigenvalue=np.array(lam_min),
        kinetic_energy=np.array(energy),
        band_power=np.array(power),
        cluster_count=np.array(count),
    )


GROWTH_TO = 0.05
"""The band's exponential growth is fitted from the start (after the collapse on S²) to where its power first
reaches this fraction of its largest value (≈ 1 once the clusters have formed): past it the clusters saturate it."""


CLUSTER_POWER = 0.5
"""The clusters have formed when the unstable band's power reaches this level (uniform tokens: (modes)/n; k*
clusters: of order one)."""


def phases(ts, series: dict, d: int, rates: np.ndarray, n: int) -> dict:
    """The three phases of one member from its observables (``_observe``) at save times ``ts`` (its own time).

    collapse   (S²) when λ_min(M) first falls to e^{−2}/3.
    clusters   when the power of the unstable band first reaches CLUSTER_POWER (``t_linear``: when the linear
               theory Σ_k e^{2λ_k t}/n does, on the circle); its growth rate is
               the slope of log(power)/2 from the start to GROWTH_TO × its largest,
               ``band_growth_theory`` the linear theory's over the same window (``rates``: the band's λ_k).
    merging    the first time after the clusters formed that there are fewer of them; ``t_half`` when half
               of them are left.
    """
    ts = np.asarray(ts, dtype=float)
    out = dict.fromkeys(_PHASES, math.nan)
    start = 0
    if d >= 3:
        out["t_collapse"] = first_crossing(ts, series["min_eigenvalue"], COLLAPSE_LEVEL / d)
        if math.isfinite(out["t_collapse"]):
            start = min(int(np.searchsorted(ts, out["t_collapse"])), len(ts) - 1)
    power, count = np.asarray(series["band_power"]), np.asarray(series["cluster_count"])
    top = start + int(np.argmax(power[start:]))
    reached = np.nonzero(power >= CLUSTER_POWER)[0]
    half = int(reached[0]) if reached.size else top
    # the power rises to the level where its inverse falls to the inverse level (log-linear interpolation); from
    # t = 0, since USA's clusters can form on S² before the collapse
    out["t_clusters"] = first_crossing(ts, 1.0 / power, 1.0 / CLUSTER_POWER) if reached.size else math.nan
    if d == 2:
        from scipy.optimize import brentq  # here: scipy costs a third of a second to import

        excess = lambda t: float(band_growth(t, rates, n)) - CLUSTER_POWER  # noqa: E731
        # so many unstable modes (k* ≈ √(2cn) against n) that the uniform start's band is already past the level
        out["t_linear"] = 0.0 if excess(0.0) >= 0 else float(brentq(excess, 0.0, 1e3 / rates.max()))
    first = start
    last = start + int(np.nonzero(power[start : top + 1] >= GROWTH_TO * power[top])[0][0])
    if last - first >= 3:
        window = ts[first : last + 1]
        slope, error, _ = line_fit(window, np.log(power[first : last + 1]))
        out["band_growth_rate"], out["band_growth_error"] = slope / 2.0, error / 2.0
        theory = np.log(band_growth(window - ts[start], rates, 1))
        out["band_growth_theory"] = line_fit(window, theory)[0] / 2.0
    formed = half + int(np.argmax(count[half:]))
    most = int(count[formed])
    out["clusters"] = float(most)
    later = np.nonzero(count[formed:] < most)[0]
    if later.size:
        out["t_first_merge"] = float(ts[formed + later[0]])
    halved = np.nonzero(count[formed:] <= most / 2)[0]
    if halved.size and most >= 2:
        out["t_half"] = float(ts[formed + halved[0]])
    return out


def run(config, *, progress=None) -> RunResult:
    """Every (d, model, n, c) member's observables and phases."""
    start = time.perf_counter()
    dims, ns, cs, seeds = list(config.d), list(config.token_counts), list(config.interaction_c), int(config.seeds)
    grids = {n: save_grid(n, min(cs), float(config.t1)) for n in ns}
    T = max(len(g) for g in grids.values())
    shape = (len(dims), 1, seeds, len(MODELS), len(ns), len(cs))
    stats = {name: np.full(shape + (T,), np.nan) for name in _SERIES}
    stats.update({name: np.full(shape, np.nan) for name in _PHASES})
    times = np.full(shape + (T,), np.nan)
    steps = np.zeros(shape[:3], dtype=np.int64)
    todo = [
        (a, m, i, j)
        for a in range(len(dims))
        for m in range(len(MODELS))
        for i in range(len(ns))
        for j in range(len(cs))
    ]
    step: dict[str, Any] = dict(dt=float(config.dt)) if config.dt > 0 else {}
    step["max_steps"] = int(config.max_steps)
    tolerances = dict(rtol=config.rtol, atol=config.atol)  # read whatever the solver, as keys= declares them
    if config.solver in ADAPTIVE:
        step.update(tolerances)
    show = progress is not False and (progress or config.progress)
    with Counter(len(todo), label="moderate-interaction", unit="runs") if show else contextlib.nullcontext() as meter:
        for a, m, i, j in todo:
            d, model, n, c = dims[a], MODELS[m], ns[i], cs[j]
            beta = c * n
            # USA's unit of the circle also on S²: its tokens gather on a circle, where the steps must resolve it
            unit = 1.0 if model == "sa" else usa_time_unit(beta, 2)
            tau = grids[n]
            rates = unstable_band(beta, "sa" if model == "sa" else "usa-rescaled")[1]
            ts = tau * unit
            field = _field(model, beta, d, float(config.collapse_eigenvalue), unit)
            x0 = init.uniform(jax.random.PRNGKey(init.derived_seed(config.seed, 1000 * a + i)), n, d, batch=seeds)
            sol = simulate(field, x0, float(tau[-1]), ts=jnp.asarray(tau), solver=config.solver, **step)
            xs = np.asarray(sol.xs)
            for s in range(seeds):
                seen = _observe(field, xs[s], beta)
                seen["kinetic_energy"] = seen["kinetic_energy"] / unit**2  # per unit of the model's own time
                at = (a, 0, s, m, i, j)
                for name, series in seen.items():
                    stats[name][at][: len(ts)] = series
                times[at][: len(ts)] = ts
                for name, value in phases(ts, seen, d, rates, n).items():
                    stats[name][at] = value
            if meter is not None:
                meter.advance(1, label=f"moderate-interaction (d = {d}, {model}, n = {n}, c = {c:g})")
    stats["save_time"] = times
    extra = {
        "usa": (np.array([m == "usa" for m in MODELS]), ["usa"]),
        "token_count": (np.array(ns), ["token_count"]),
        "c": (np.array(cs, dtype=float), ["c"]),
        "save_index": (np.arange(T), ["save_index"]),
    }
    return RunResult(
        config=config,
        ts=np.arange(T, dtype=float),
        stats=stats,
        xs=None,
        steps=steps,
        t_event=np.full(shape[:3], np.inf),
        wall_time_s=time.perf_counter() - start,
        extra=extra,
    )


def _members(result: RunResult, name: str, d: int, model: str) -> np.ndarray:
    """A phase statistic of one geometry and model, shape (seeds, N, C)."""
    a = list(result.config.d).index(d)
    return result.stats[name][a, 0, :, MODELS.index(model)]


def _betas(result: RunResult) -> np.ndarray:
    """β = c·n of every member, shape (1, N, C) (broadcast over seeds)."""
    c = result.config
    return (np.asarray(c.token_counts, dtype=float)[:, None] * np.asarray(c.interaction_c, dtype=float)[None, :])[None]


def exponents(result: RunResult, name: str, d: int, model: str) -> dict:
    """log t = a + p_n log n + p_c log c fitted over every member: {"n": (p_n, se), "c": (p_c, se), "beta": (p, se)}
    (the last with t ∝ β^p, for β = c·n alone); NaN where too few finite members."""
    t = _members(result, name, d, model)
    n = np.broadcast_to(np.asarray(result.config.token_counts, dtype=float)[None, :, None], t.shape)
    c = np.broadcast_to(np.asarray(result.config.interaction_c, dtype=float)[None, None, :], t.shape)
    ok = np.isfinite(t) & (t > 0)
    out = {"n": (math.nan, math.nan), "c": (math.nan, math.nan), "beta": (math.nan, math.nan)}
    y, ln, lc = np.log(t[ok]), np.log(n[ok]), np.log(c[ok])
    p, se, _ = line_fit(ln + lc, y)
    out["beta"] = (p, se)
    if y.size >= 4 and np.ptp(ln) > 0 and np.ptp(lc) > 0:
        A = np.column_stack([np.ones_like(y), ln, lc])
        coef, *_ = np.linalg.lstsq(A, y, rcond=None)
        resid = y - A @ coef
        cov = float(resid @ resid) / max(y.size - 3, 1) * np.linalg.pinv(A.T @ A)
        out["n"] = (float(coef[1]), float(math.sqrt(max(cov[1, 1], 0.0))))
        out["c"] = (float(coef[2]), float(math.sqrt(max(cov[2, 2], 0.0))))
    return out


PREDICTED_EXPONENT = {
    ("t_collapse", "sa"): 0.0,
    ("t_collapse", "usa"): 1.0,
}
"""t ∝ β^p at leading order: SA's collapse takes a time of order one, USA's is slowed down by its kernel's mean
1/(2β) at the uniform density (docs/model.md §16)."""

EXPONENT_TOL = 0.2
"""An exponent passes within max(3 standard errors, this) of its leading-order prediction. USA's collapse is slowed
by its kernel's mean 1/(2β) while the tokens are spread and by a cluster's mass ∝ 1/β once clusters have formed on
S² (for USA they can form first): both ∝ 1/β but with different constants, and at β = 10 … 80 the runs straddle the
crossover, which steepens log t against log β by up to this much (1.17 ± 0.04 measured at β = 10 … 40)."""

COLLAPSE_TOL = 0.1
"""SA's collapse time agrees with the Laplace limit (at the uniform density's rate) within this relative error: the
density's gradients add O(1/β) terms as the tokens gather, and λ_min(M) lies below the height's mean square by the
second moment's n^{−1/2} fluctuations (−4 % at n = 600)."""

RATE_TOL = 0.15
"""The fitted growth rate agrees with λ*(β) within this relative error: the kinetic energy sums the modes near
k*, which grow a little slower than the fastest one, and the window is a few e-foldings."""

CLUSTER_TOL = 0.35
"""The number of clusters formed agrees with k*(β) within this relative error: the clusters form from random
phases, and neighbours closer than 2/√β count as one."""


def checks(result: RunResult) -> list[Check]:
    """The collapse time against the Laplace limit; the exponents of the collapse time in β; the growth rate and
    the number of clusters against the fastest mode; the three phases in order."""
    c = result.config
    beta = _betas(result)
    out: list[Check] = []
    if 3 in c.d:
        rate = 1.0 - float(c.collapse_eigenvalue)
        want = np.vectorize(lambda b: collapse_time(rate * sphere_resultant(b)))(beta)
        ratio = (_members(result, "t_collapse", 3, "sa") / want).ravel()
        ratio = ratio[np.isfinite(ratio)]
        mean, se = float(np.mean(ratio)), float(np.std(ratio) / math.sqrt(max(ratio.size, 1)))
        out.append(
            Check(
                f"SA on S²: collapse time (λ_min(M) = e⁻²/3) against the Laplace limit at the rate (1 − λ)(coth β − 1/β)"
                f" ({collapse_time(rate):.3f}/(1 − 1/β + …))",
                f"ratio 1 within {COLLAPSE_TOL:.0%}",
                f"{mean:.3f} ± {se:.3f}",
                abs(mean - 1.0) <= COLLAPSE_TOL,
            )
        )
        for model in MODELS:
            if np.unique(beta).size < 2:
                out.append(Check.not_applicable(f"{model.upper()} on S²: collapse time ∝ β^p", "p", "a single β = c·n"))
                continue
            p, se = exponents(result, "t_collapse", 3, model)["beta"]
            want = PREDICTED_EXPONENT[("t_collapse", model)]
            out.append(
                Check(
                    f"{model.upper()} on S²: collapse time ∝ β^p, fitted over n and c",
                    f"p = {want:g} ± max(3 se, {EXPONENT_TOL})",
                    f"{p:.3f} ± {se:.3f}" if np.isfinite(se) else f"{p:.3f} (two values of β: no error)",
                    bool(np.isfinite(p) and abs(p - want) <= max(3 * (se if np.isfinite(se) else 0.0), EXPONENT_TOL)),
                )
            )
    else:
        out.append(
            Check.not_applicable("collapse onto a great circle", "S² (d = 3)", "the circle has no collapse phase")
        )
    for d in c.d:
        for model in MODELS if d == 2 else ():  # on S² the band grows during the collapse, not from i.i.d. tokens
            got = _members(result, "band_growth_rate", d, model)
            ratio = got / _members(result, "band_growth_theory", d, model)
            ok = np.isfinite(ratio)
            name = f"{model.upper()} on {'the circle' if d == 2 else 'S²'}: growth rate of the unstable band"
            if not ok.any():
                out.append(Check.not_applicable(name, "the linear theory's", "no exponential rise resolved"))
                continue
            mean = float(np.mean(ratio[ok]))
            se = float(np.std(ratio[ok]) / math.sqrt(ok.sum()))
            out.append(
                Check(
                    f"{name} against the linear theory Σ_k e^(2λ_k t) ({int(ok.sum())} members)",
                    f"ratio 1 within {RATE_TOL:.0%}",
                    f"{mean:.3f} ± {se:.3f}",
                    abs(mean - 1.0) <= RATE_TOL,
                )
            )
        if d == 2:
            out.extend(_formation_checks(result))
        k = np.asarray(fastest_mode(beta.ravel(), 2), dtype=float).reshape(beta.shape)
        # on S² USA's count in M's top plane means something only once its clusters have reached the great circle
        models = MODELS if d == 2 else ("sa",)
        formed = np.concatenate([_members(result, "clusters", d, model) / k for model in models]).ravel()
        formed = formed[np.isfinite(formed)]
        mean = float(np.mean(formed))
        out.append(
            Check(
                f"{'circle' if d == 2 else 'S² (SA)'}: clusters formed against the fastest mode k*(β) ≈ √(2β)",
                f"count / k* = 1 within {CLUSTER_TOL:.0%}",
                f"{mean:.3f} ± {float(np.std(formed) / math.sqrt(formed.size)):.3f}",
                abs(mean - 1.0) <= CLUSTER_TOL,
            )
        )
    out.append(_order_check(result))
    return out


FORMATION_RANGE = (1.0, 1.5)
"""The clusters (band power CLUSTER_POWER) form no earlier than the linear theory says and at most this much later:
the band's growth saturates before it reaches the level (1.13 … 1.35 measured at β = 10 … 40)."""


def _formation_checks(result: RunResult) -> list[Check]:
    """On the circle: the clusters' formation time against the linear theory's. (Its fitted exponents in n and c,
    ``exponents``, exceed the linear theory's: the saturation lengthens with β, docs/model.md §16.)"""
    out = []
    for model in MODELS:
        got, lin = _members(result, "t_clusters", 2, model), _members(result, "t_linear", 2, model)
        ratio = got / lin
        lo, hi = FORMATION_RANGE
        out.append(
            Check(
                f"{model.upper()} on the circle: clusters form (band power {CLUSTER_POWER:g}) after the linear theory's time",
                f"ratio in [{lo:g}, {hi:g}]",
                f"{np.nanmin(ratio):.3f} … {np.nanmax(ratio):.3f}",
                bool(np.all((ratio >= lo) & (ratio <= hi))),
            )
        )
    return out


def _order_check(result: RunResult) -> Check:
    """Every member's phases in order: SA's collapse before its clusters on S² (USA's clusters can form first,
    docs/model.md §16), and the clusters before their first merge wherever one happened before t1."""
    good = total = 0
    for d in result.config.d:
        for model in MODELS:
            t1, t2, t3 = (_members(result, key, d, model) for key in ("t_collapse", "t_clusters", "t_first_merge"))
            if d >= 3 and model == "sa":
                good, total = good + int(np.sum(t1 < t2)), total + t1.size
            merged = np.isfinite(t3)
            good, total = good + int(np.sum((t2 < t3)[merged])), total + int(merged.sum())
    return Check(
        "phases in order (SA on S²: collapse < clusters; every merged member: clusters < first merge)",
        "every such member",
        f"{good}/{total}",
        total > 0 and good == total,
    )


def figures(result: RunResult) -> dict:
    """Per geometry, SA's first member at the largest n and c over time; every member's phase times against β."""
    c = result.config
    beta = _betas(result)
    out: dict[str, Callable] = {}
    for a, d in enumerate(c.d):
        where = "circle" if d == 2 else "sphere"
        for m, model in enumerate(MODELS):
            at = (a, 0, 0, m, len(c.token_counts) - 1, len(c.interaction_c) - 1)
            b = float(beta[0, -1, -1])
            ts = result.stats["save_time"][at]
            laplace = None
            if d == 3 and model == "sa":
                grid = ts[np.isfinite(ts)]
                laplace = (grid, collapse_moment(grid, (1.0 - float(c.collapse_eigenvalue)) * sphere_resultant(b)))
            rates = unstable_band(b, "sa" if model == "sa" else "usa-rescaled")[1]
            power = result.stats["band_power"][at]
            k0 = 0
            if d == 3 and np.isfinite(result.stats["t_collapse"][at]):
                k0 = int(np.searchsorted(ts, result.stats["t_collapse"][at]))
            span = ts[k0:][np.isfinite(ts[k0:])]
            curve = band_growth(span - span[0], rates, 1)
            # on S² USA's clusters can form before the collapse: no linear theory from there
            theory = (span, power[k0] * curve / curve[0]) if d == 2 or model == "sa" else None
            phase_times = [
                (name, result.stats[key][at])
                for name, key in (
                    ("collapse", "t_collapse"),
                    ("clusters", "t_clusters"),
                    ("first merge", "t_first_merge"),
                )
            ]
            n, cc = c.token_counts[-1], c.interaction_c[-1]

            def phases(
                p,
                at=at,
                ts=ts,
                laplace=laplace,
                theory=theory,
                b=b,
                phase_times=phase_times,
                model=model,
                n=n,
                cc=cc,
                d=d,
            ):
                return draw.moderate_phases(
                    ts,
                    result.stats["min_eigenvalue"][at],
                    result.stats["band_power"][at],
                    result.stats["cluster_count"][at],
                    laplace=laplace,
                    theory=theory,
                    k_star=int(fastest_mode(b, 2)),
                    phase_times=phase_times,
                    title=f"{model.upper()} on {'the circle' if d == 2 else 'S²'}: n = {n}, β = {cc:g}·n = {b:g}",
                    path=p,
                )

            out[f"phases_{where}_{model}"] = phases
    labels, times = [], {}
    for d in c.d:
        for model in MODELS:
            for name, key in (("collapse", "t_collapse"), ("clusters", "t_clusters"), ("first merge", "t_first_merge")):
                if key == "t_collapse" and d == 2:
                    continue
                label = f"{name}, {model.upper()}, {'circle' if d == 2 else 'S²'}"
                labels.append(label)
                times[label] = _members(result, key, d, model)
    betas = np.broadcast_to(beta, _members(result, "t_clusters", c.d[0], "sa").shape)
    out["phase_times"] = lambda p: draw.moderate_times(
        betas, times, labels=labels, title="phase times against β = c·n", path=p
    )
    return out


def requires(config) -> None:
    """The circle or S², steps within max_steps, β = c·n within the growth rates' range (the keys themselves refuse
    empty lists, c ≤ 0 or past 1e4, and V's last eigenvalue outside [−10, 0.9])."""
    if any(d not in (2, 3) for d in config.d):
        raise ConfigError(f"moderate-interaction runs on the circle or S²: d must be 2 or 3, got {list(config.d)}")
    if config.solver in FIXED_STEP_SOLVERS and config.dt > 0 and config.t1 / config.dt > config.max_steps:
        raise ConfigError(
            f"t1 = {config.t1:g} with dt = {config.dt:g} needs {config.t1 / config.dt:.3g} steps of solver "
            f"{config.solver!r} per run, more than max_steps = {config.max_steps}: lower t1, raise dt, or raise max_steps"
        )
    top = max(config.interaction_c) * max(config.token_counts)
    if top > BETA_MAX:
        raise ConfigError(
            f"interaction_c × token_counts = β must be ≤ {BETA_MAX:g} (the largest β of the growth rates); got "
            f"c = {max(config.interaction_c):g} and n = {max(config.token_counts)}: β = {top:g}"
        )


def memory(config) -> dict:
    """The saved states of one (d, model, n, c) solve: seeds × saves × n × d float64, a few copies."""
    n, d = max(config.token_counts), max(config.d)
    saves = LINEAR_SAVES + LOG_SAVES + 2
    return {"the saved states of the largest solve [token_counts, seeds, d]": 3 * 8 * config.seeds * saves * n * d}


EXPERIMENT = register(
    Experiment(
        "moderate-interaction",
        "β = c·n: collapse onto a great circle, clusters of the fastest mode, merging; each phase's time against n and c",
        "arXiv 2509.25040",
        dict(
            experiment="moderate-interaction",
            d=[2, 3],
            token_counts=[1000, 2000],
            interaction_c=[0.01, 0.02],
            collapse_eigenvalue=0.0,
            seeds=1,
            t1=100.0,
            solver="ab4",
            dt=0.05,
        ),
        dict(token_counts=[600], interaction_c=[0.02, 0.04], seeds=1, t1=15.0, solver="ab4", dt=0.05),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=(
            "d",
            "seeds",
            "seed",
            "t1",
            "solver",
            "dt",
            "max_steps",
            "rtol",
            "atol",
            "token_counts",
            "interaction_c",
            "collapse_eigenvalue",
        ),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"β = c·n for n ∈ {list(c.token_counts)}, c ∈ {list(c.interaction_c)}, d ∈ {list(c.d)}, SA and USA, "
            f"{c.seeds} seed(s), t1 = {c.t1:g} (SA units)"
        ),
        runtime="6 min and 0.7 GB on 2 CPU cores shared with other work (n = 10⁴ on S² at c = 0.01 to t1 = 15: 5 min)",
    )
)
