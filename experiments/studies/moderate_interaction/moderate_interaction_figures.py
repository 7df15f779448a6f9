"""The moderate-interaction regime β = c·n: one member's three phases over time, and every member's phase times
against β."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...plots.style import DATA_COLOR, THEORY_COLOR, finish, new_figure


def moderate_phases(
    ts,
    min_eigenvalue,
    band_power,
    cluster_count,
    *,
    laplace=None,
    theory=None,
    k_star=None,
    phase_times=(),
    title="",
    path=None,
) -> Figure:
    """Three stacked panels over time for one member: λ_min of the second moment (with the Laplace limit
    ``laplace`` = (ts, values), if given), the power of the unstable band (with the linear theory
    ``theory`` = (ts, values)) and the number of clusters (with k*); vertical lines at the detected ``phase_times`` (name, t)."""
    ts = np.asarray(ts, dtype=float)
    ok = np.isfinite(ts)
    ts = ts[ok]
    lam, energy, count = (np.asarray(a, dtype=float)[ok] for a in (min_eigenvalue, band_power, cluster_count))
    fig = new_figure(6.4, 7.2)
    axes = fig.subplots(3, 1, sharex=True)
    positive = ts > 0
    axes[0].loglog(ts[positive], np.maximum(lam[positive], 1e-30), color=DATA_COLOR, label=r"$\lambda_{\min}(M)$")
    if laplace is not None:
        lt, lv = laplace
        axes[0].loglog(
            lt[lt > 0],
            lv[lt > 0],
            color=THEORY_COLOR,
            linestyle="--",
            label=r"Laplace limit at the rate $\coth\beta - 1/\beta$",
        )
    axes[0].set_ylabel(r"smallest eigenvalue of $M$")
    # below 1e-16 the heights z ~ 1e-8 are at the mercy of rounding (z² of rounding errors floors near 1e-31)
    axes[0].set_ylim(bottom=max(1e-16, float(np.nanmin(lam[positive])) / 3), top=1.0)
    axes[0].legend(frameon=False)
    axes[1].loglog(ts[positive], energy[positive], color=DATA_COLOR, label=r"$\sum_{k} |\hat\rho_k|^2$, unstable modes")
    if theory is not None:
        tt, tv = (np.asarray(v, dtype=float) for v in theory)
        keep = (tt > 0) & (tv <= 2 * energy[positive].max())
        axes[1].loglog(
            tt[keep], tv[keep], color=THEORY_COLOR, linestyle="--", label=r"linear theory $\sum_k e^{2\lambda_k t}$"
        )
    axes[1].set_ylabel("power of the unstable band")
    axes[1].legend(frameon=False)
    axes[2].semilogx(ts[positive], count[positive], color=DATA_COLOR, drawstyle="steps-post", label="clusters")
    if k_star is not None:
        axes[2].axhline(k_star, color=THEORY_COLOR, linestyle="--", label=rf"$k^*(\beta) = {k_star}$")
    axes[2].set_ylabel("number of clusters")
    axes[2].set_xlabel(r"time $t$")
    axes[2].legend(frameon=False)
    for name, t in phase_times:
        if np.isfinite(t) and t > 0:
            for ax in axes:
                ax.axvline(t, color="0.55", linewidth=0.8, linestyle=":")
            axes[0].annotate(
                name,
                (t, 1.0),
                xycoords=("data", "axes fraction"),
                rotation=90,
                va="top",
                ha="right",
                fontsize=7.5,
                color="0.35",
            )
    if title:
        axes[0].set_title(title)
    return finish(fig, path)


PHASE_COLORS = {"collapse": "#31688e", "clusters": "#35b779", "first merge": "#d1495b"}
GEOMETRY_MARKERS = {"circle": "o", "S²": "s"}


def moderate_times(betas, times, *, labels, title="", path=None) -> Figure:
    """Every member's phase times against β = c·n on log-log axes. ``times`` maps a label "phase, MODEL, geometry"
    (phase: collapse, clusters or first merge; MODEL: SA or USA; geometry: circle or S²) to an array of times of the
    shape of ``betas``: colour by phase, marker by geometry, filled for SA and open for USA, each series joined in
    order of β."""
    from matplotlib import ticker

    betas = np.asarray(betas, dtype=float)
    fig = new_figure(7.6, 4.6)
    ax = fig.add_subplot()
    for label in labels:
        phase, model, geometry = (part.strip() for part in label.split(","))
        t = np.asarray(times[label], dtype=float)
        ok = np.isfinite(t) & (t > 0)
        if not ok.any():
            continue
        color = PHASE_COLORS.get(phase, DATA_COLOR)
        order = np.argsort(betas[ok], kind="stable")
        ax.plot(
            betas[ok][order],
            t[ok][order],
            linestyle=(0, (3, 3)) if model == "USA" else "-",
            linewidth=0.6,
            alpha=0.6,
            color=color,
            marker=GEOMETRY_MARKERS.get(geometry, "o"),
            markersize=5.5,
            markerfacecolor=color if model == "SA" else "white",
            markeredgecolor=color,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis,):
        axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(r"$\beta = c\,n$")
    ax.set_ylabel("phase time (each model's own time)")
    ax.legend(frameon=False, fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5))
    if title:
        ax.set_title(title)
    return finish(fig, path)
