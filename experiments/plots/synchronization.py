"""Synchronization against β of either sign (arXiv 2507.22857), and one layer over a long context at β = γ log n
(arXiv 2510.05554): the regimes of temperature the 2024–26 papers study."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import (
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


def long_context_layer(
    curve_n, curve_cosine, token_n, token_cosine, gammas, limits, *, rho, critical, residual=0.0, title=None, path=None
) -> Figure:
    """The cosine between two outputs of one attention layer at β = γ log n against the context length n:
    one exact curve per γ (``curve_cosine`` (G, N) at ``curve_n``), the values from token arrays as dots
    (``token_cosine`` (G, K) at ``token_n``, NaN where not computed) and each γ's limit as n → ∞."""
    curve_n = axis_values("curve_n", curve_n, "(N,)")
    token_n = axis_values("token_n", token_n, "(K,)")
    gammas = axis_values("gammas", gammas, "(G,)")
    curve_cosine = np.asarray(curve_cosine, dtype=float)
    token_cosine = np.asarray(token_cosine, dtype=float)
    limits = np.asarray(limits, dtype=float)
    if (
        curve_cosine.shape != (gammas.size, curve_n.size)
        or token_cosine.shape != (gammas.size, token_n.size)
        or limits.shape != gammas.shape
    ):
        raise ValueError(
            f"curve_cosine must be (G, N) = {(gammas.size, curve_n.size)}, token_cosine (G, K) = "
            f"{(gammas.size, token_n.size)} and limits (G,); got {curve_cosine.shape}, "
            f"{token_cosine.shape}, {limits.shape}"
        )
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    fig = new_figure(6.8, 4.5)
    ax = fig.add_subplot()
    span = max(float(gammas.max() - gammas.min()), 1e-12)
    for g, curve, dots, lim in zip(gammas, curve_cosine, token_cosine, limits):
        color = cmap(0.85 * (g - gammas.min()) / span)
        regime = "collapse" if g < critical - 1e-12 else "critical" if abs(g - critical) <= 1e-12 else "identity"
        ax.plot(curve_n, curve, color=color, linewidth=1.6, label=rf"$\gamma = {g:g}$ ({regime})")
        ok = np.isfinite(dots)
        ax.plot(
            token_n[ok],
            dots[ok],
            linestyle="none",
            marker="o",
            markersize=5,
            markerfacecolor="white",
            markeredgecolor=color,
            markeredgewidth=1.3,
        )
        ax.axhline(lim, color=color, linewidth=0.9, linestyle=(0, (4, 3)))
    ax.plot(
        [],
        [],
        linestyle="none",
        marker="o",
        markerfacecolor="white",
        markeredgecolor="0.3",
        label="from token arrays (d = n + 1)",
    )
    ax.plot([], [], color="0.3", linewidth=0.9, linestyle=(0, (4, 3)), label=r"limit $n \to \infty$")
    ax.set_xscale("log")
    ax.set_xlabel(r"context length $n$")
    ax.set_ylabel(r"$\cos(x'_i, x'_j)$ after one layer, $\beta = \gamma \log n$")
    despine(ax)
    # between the critical curve and the identity's limit, where the curves have settled
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower right", bbox_to_anchor=(1.0, 0.15))
    head = rf"One attention layer over a long context: $\gamma_c = 1/(1-\rho) = {critical:g}$"
    extra = rf"$\rho = {rho:g}$" + (rf", residual $\alpha = {residual:g}$" if residual else "")
    fig.suptitle((title or head) + "\n" + extra)
    return finish(fig, path)
