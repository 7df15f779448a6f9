"""The attention matrix A(t) as a random walk on the tokens: attended tokens, spectral gap, stationary law."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from .style import (
    DATA_COLOR,
    SEQUENTIAL_CMAP,
    THEORY_COLOR,
    TICK_SIZE,
    TIME_LABEL,
    TITLE_SIZE,
    as_array,
    axis_values,
    centers_to_edges,
    despine,
    finish,
    keyed_2d,
    new_figure,
    set_range,
    title_text,
)


def _by_beta(name: str, value, ts: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """A mapping {β: array (members, T)} as a list sorted by β, each array 2-D."""
    return keyed_2d(name, value, "beta", float, "(members, T)", 1, ts.size, "T = len(ts)")


def _mean_band(ax, ts, series, colors, lo, hi) -> None:
    """Mean over members per β, with a band of ± one standard deviation clipped to [lo, hi]."""
    for (beta, arr), color in zip(series, colors):
        mean = np.nanmean(arr, axis=0)
        if arr.shape[0] > 1:
            sd = np.nanstd(arr, axis=0)
            ax.fill_between(
                ts, np.clip(mean - sd, lo, hi), np.clip(mean + sd, lo, hi), color=color, alpha=0.2, linewidth=0
            )
        ax.plot(ts, mean, color=color, linewidth=1.7, label=rf"$\beta = {beta:g}$")


def attention_statistics(
    ts,
    effective_tokens,
    spectral_gap,
    stationary,
    *,
    n=None,
    d=None,
    logx=False,
    title=None,
    path=None,
) -> Figure:
    """The attention matrix A(t) as a random walk on the tokens: how many tokens each one attends to,
    how fast the walk mixes, and where it settles.

    effective_tokens, spectral_gap: mappings {β: array (members, T)} of the mean over rows of
    exp(row entropy) H_i = −Σ_j A_ij log A_ij and of 1 − |λ₂(A)|, drawn as the mean over members
    with a ± 1 s.d. band.
    stationary: {β: array (n,)}, the stationary law π of one member at the last time, drawn as
    bars (one β) or as a heat map over (β, token). At consensus A = 11ᵀ/n: n tokens, gap 1,
    π uniform; k separated clusters close the gap; a causal mask puts all of π on token 1.
    """
    ts = axis_values("ts", ts)
    eff = _by_beta("effective_tokens", effective_tokens, ts)
    gap = _by_beta("spectral_gap", spectral_gap, ts)
    if not isinstance(stationary, Mapping) or len(stationary) == 0:
        raise ValueError("stationary must be a non-empty mapping {beta: array (n,)}")
    pis = [(float(k), as_array(f"stationary[{k!r}]", stationary[k], "(n,)", 1)) for k in sorted(stationary, key=float)]
    n_tokens = pis[0][1].size
    if any(p.size != n_tokens for _, p in pis):
        raise ValueError("stationary laws must all have the same number of tokens n")
    n = n_tokens if n is None else n
    colors = [DATA_COLOR] if len(eff) == 1 else mpl.colormaps[SEQUENTIAL_CMAP](np.linspace(0.05, 0.85, len(eff)))

    fig = new_figure(10.5, 6.4)
    grid = fig.add_gridspec(2, 2, width_ratios=(1.55, 1.0))
    ax_eff = fig.add_subplot(grid[0, 0])
    ax_gap = fig.add_subplot(grid[1, 0], sharex=ax_eff)
    ax_pi = fig.add_subplot(grid[:, 1])

    _mean_band(ax_eff, ts, eff, colors, 1.0, float(n))
    ax_eff.axhline(n, color="0.45", linewidth=0.9, linestyle=(0, (4, 3)))
    ax_eff.annotate(
        r"$n$: uniform attention",
        xy=(0.99, n),
        xycoords=("axes fraction", "data"),
        xytext=(0, -3),
        textcoords="offset points",
        ha="right",
        va="top",
        fontsize=TICK_SIZE,
        color="0.3",
    )
    ax_eff.set_ylim(0.0, n * 1.06)
    ax_eff.set_ylabel("attended tokens\n" + r"mean over $i$ of $e^{H_i}$")
    ax_eff.tick_params(labelbottom=False)
    ax_eff.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=min(len(eff), 5), frameon=False, borderaxespad=0.2)
    despine(ax_eff)

    _mean_band(ax_gap, ts, gap, colors, 0.0, 1.0)
    set_range(ax_gap, ts, logx=logx)
    ax_gap.set_ylim(-0.03, 1.03)
    ax_gap.set_ylabel("spectral gap\n" + r"$1 - |\lambda_2(A)|$")
    ax_gap.set_xlabel(TIME_LABEL)
    despine(ax_gap)

    tokens = np.arange(1, n_tokens + 1)
    # token 1 always labelled: a causal mask puts all of π there
    step = next((s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if n_tokens // s <= 12), n_tokens // 10)
    token_ticks = np.unique([1, *range(step, n_tokens + 1, step)])
    if len(pis) == 1:
        beta, pi = pis[0]
        ax_pi.bar(tokens, pi, width=0.8, color=DATA_COLOR, linewidth=0)
        ax_pi.axhline(1.0 / n_tokens, color=THEORY_COLOR, linewidth=1.1, linestyle=(0, (4, 3)), label=r"uniform $1/n$")
        ax_pi.set_xlim(0.4, n_tokens + 0.6)
        ax_pi.set_ylim(0.0, max(1.15 * float(np.nanmax(pi)), 1.5 / n_tokens))
        ax_pi.set_xlabel(r"token $i$")
        ax_pi.set_ylabel(r"stationary law $\pi_i$")
        ax_pi.legend(loc="upper right", frameon=False)
        ax_pi.set_title(rf"stationary law $\pi$ at $t = {ts[-1]:g}$" + "\n" + rf"($\beta = {beta:g}$, first seed)")
        ax_pi.set_xticks(token_ticks)
        despine(ax_pi)
    else:
        betas = np.array([b for b, _ in pis])
        mesh = ax_pi.pcolormesh(
            centers_to_edges(tokens.astype(float)),
            np.arange(len(pis) + 1),
            np.stack([p for _, p in pis]),
            cmap=SEQUENTIAL_CMAP,
            shading="flat",
            vmin=0.0,
        )
        ax_pi.set_yticks(np.arange(len(pis)) + 0.5, [f"{b:g}" for b in betas])
        ax_pi.set_ylabel(r"$\beta$")
        ax_pi.set_xlabel(r"token $i$")
        ax_pi.set_xticks(token_ticks)
        ax_pi.set_title(rf"stationary law $\pi$ at $t = {ts[-1]:g}$" + "\n" + r"(first seed of each $\beta$)")
        fig.colorbar(mesh, ax=ax_pi, label=r"$\pi_i$", shrink=0.9)
    fig.suptitle(title_text("Attention as a random walk on the tokens", title, n=n, d=d), fontsize=TITLE_SIZE)
    return finish(fig, path)
