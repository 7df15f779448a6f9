"""One attention layer over a long context at β = γ log n (arXiv 2510.05554)."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...plots.style import (
    LEGEND_SIZE,
    axis_values,
    despine,
    finish,
    new_figure,
)


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
