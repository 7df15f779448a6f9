"""Synchronization against β of either sign (arXiv 2507.22857): the fraction of starts that synchronize, the
fraction stuck, and the rate, against the thresholds."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...plots.style import (
    BAND_COLOR,
    BETA_LABEL,
    DATA_COLOR,
    LEGEND_SIZE,
    THEORY_COLOR,
    axis_values,
    despine,
    finish,
    new_figure,
    title_text,
)


def _shares(name: str, value, betas: np.ndarray) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    if arr.shape != betas.shape:
        raise ValueError(f"{name} must have one value per β, shape {betas.shape}; got {arr.shape}")
    if np.any((arr < 0) | (arr > 1)):
        raise ValueError(f"{name} holds fractions of starts and must lie in [0, 1]")
    return arr


def synchronization_vs_beta(
    betas,
    synchronized,
    stuck,
    *,
    sync_beta: float,
    no_sync_beta: float,
    rate=None,
    n=None,
    members=None,
    stuck_label: str = "at the equilateral triangle",
    title=None,
    path=None,
) -> Figure:
    """Left: the share of starts that synchronize (end in one point) and of those ``stuck`` elsewhere,
    against β, with the proved regimes shaded (every start synchronizes for β ≥ ``sync_beta``; global
    synchronization fails below ``no_sync_beta``). Right, when ``rate`` = (β grid, μ(β)) is given: the
    linear rate at the configuration where the stuck starts end, negative where it attracts.
    """
    betas = axis_values("betas", betas, "(len(betas),)")
    synced = _shares("synchronized", synchronized, betas)
    stuck = _shares("stuck", stuck, betas)
    fig = new_figure(10.4 if rate is not None else 6.2, 4.3)
    axes = fig.subplots(1, 2 if rate is not None else 1, squeeze=False)[0]
    lo, hi = float(betas.min()), float(betas.max())
    pad = 0.03 * (hi - lo or 1.0)
    for ax in axes:
        ax.axvspan(lo - pad, no_sync_beta, color=THEORY_COLOR, alpha=0.08, linewidth=0)
        ax.axvspan(sync_beta, hi + pad, color=BAND_COLOR, alpha=0.35, linewidth=0)
        for b in (no_sync_beta, sync_beta):
            ax.axvline(b, color="0.35", linewidth=0.9, linestyle=(0, (4, 3)))
        ax.set_xlim(lo - pad, hi + pad)
        ax.set_xlabel(BETA_LABEL)
        despine(ax)
    ax = axes[0]
    ax.plot(betas, synced, color=DATA_COLOR, marker="o", markersize=4.5, linewidth=1.4, label="synchronized")
    ax.plot(
        betas,
        stuck,
        color=THEORY_COLOR,
        marker="s",
        markersize=4,
        markerfacecolor="white",
        linewidth=1.1,
        label=stuck_label,
    )
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("share of random starts" + (f" ({members} per β)" if members else ""))
    ax.text(
        no_sync_beta - pad / 2,
        0.5,
        r"$\beta < -2/3$: no global synchronization",
        rotation=90,
        va="center",
        ha="right",
        fontsize=LEGEND_SIZE,
        color="0.3",
    )
    ax.text(
        sync_beta + pad / 2,
        0.5,
        r"$\beta \geq -0.16$: every start synchronizes",
        rotation=90,
        va="center",
        ha="left",
        fontsize=LEGEND_SIZE,
        color="0.3",
    )
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower right")
    if rate is not None:
        grid, mu = (np.asarray(a, dtype=float) for a in rate)
        ax = axes[1]
        ax.axhline(0.0, color="0.5", linewidth=0.8)
        ax.plot(grid, mu, color=THEORY_COLOR, linewidth=1.6, label=r"$\mu(\beta) = e^{-\beta/2}\,(1/2 + 3\beta/4)$")
        ax.fill_between(
            grid, np.minimum(mu, 0.0), 0.0, color=THEORY_COLOR, alpha=0.18, linewidth=0, label="the triangle attracts"
        )
        ax.set_ylabel("linear rate at the equilateral triangle (n = 3)")
        ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper left")
    fig.suptitle(title_text("Synchronization on the circle for either sign of β", title, n=n))
    return finish(fig, path)
