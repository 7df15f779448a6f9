"""The moderate-interaction regime β = c·n: one member's three phases over time, and every member's phase times
against β."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import DATA_COLOR, THEORY_COLOR, finish, new_figure

PHASE_MARKERS = {"collapse": "v", "clusters": "o", "first merge": "s"}


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
        axes[0].loglog(lt[lt > 0], lv[lt > 0], color=THEORY_COLOR, linestyle="--", label="Laplace limit (β → ∞)")
    axes[0].set_ylabel(r"smallest eigenvalue of $M$")
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


def moderate_times(betas, times, *, labels, title="", path=None) -> Figure:
    """Every member's phase times against β = c·n on log-log axes: ``times`` maps a series label (phase, model,
    geometry) to an array of times, the same shape as ``betas``."""
    from matplotlib import colormaps

    betas = np.asarray(betas, dtype=float)
    fig = new_figure(6.4, 4.6)
    ax = fig.add_subplot()
    cmap = colormaps["viridis"]
    for k, label in enumerate(labels):
        t = np.asarray(times[label], dtype=float)
        ok = np.isfinite(t) & (t > 0)
        if not ok.any():
            continue
        marker = next((m for name, m in PHASE_MARKERS.items() if label.startswith(name)), "o")
        color = cmap(0.9 * k / max(len(labels) - 1, 1))
        ax.loglog(
            betas[ok],
            t[ok],
            linestyle="none",
            marker=marker,
            markersize=5,
            color=color,
            label=label,
            markerfacecolor="white" if "USA" in label else color,
        )
    ax.set_xlabel(r"$\beta = c\,n$")
    ax.set_ylabel(r"phase time (each model's own time)")
    ax.legend(frameon=False, fontsize=7.5, ncol=2)
    if title:
        ax.set_title(title)
    return finish(fig, path)
