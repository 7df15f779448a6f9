"""One query among n keys (arXiv 2605.08505): the selectivity threshold against n, and the attention weights and
the layer's output below, at and above it."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...plots.style import LEGEND_SIZE, axis_values, despine, finish, new_figure

__all__ = ["selectivity_thresholds", "selectivity_profiles", "selectivity_outputs", "dimension_colors"]


def dimension_colors(dims) -> list:
    """One viridis colour per dimension d, dark to light."""
    cmap = colormaps["viridis"]
    return [cmap(0.1 + 0.7 * i / max(len(dims) - 1, 1)) for i in range(len(dims))]


def _plain(value: float) -> str:
    """A β for a legend: three significant digits, whole numbers above 100 (with thin-space thousands)."""
    if value >= 100:
        return f"{value:,.0f}".replace(",", r"\,")
    return f"{value:.3g}"


def _regime_names(factors) -> list[str]:
    names = []
    for f in factors:
        if f < 1:
            names.append(rf"averaging: $\beta = \bar\beta/{1 / f:g}$")
        elif f > 1:
            names.append(rf"selecting: $\beta = {f:g}\,\bar\beta$")
        else:
            names.append(r"at the threshold: $\beta = \bar\beta$")
    return names


def selectivity_thresholds(lengths, thresholds, fits, limits, *, dims, title=None, path=None) -> Figure:
    """Median β*_n(q) over queries against n, one colour per d, with the quartiles as a band, the fitted
    power law and the median of the n → ∞ law, ``limits`` (D,) × n^{2/(d−1)} (dotted); ``thresholds``
    (D, N, queries), ``fits`` (D, 3) = (exponent, standard error, log prefactor)."""
    lengths = axis_values("lengths", lengths, "(N,)")
    thresholds = np.asarray(thresholds, dtype=float)
    fits = np.asarray(fits, dtype=float)
    limits = np.asarray(limits, dtype=float)
    if (
        thresholds.shape[:2] != (len(dims), lengths.size)
        or fits.shape != (len(dims), 3)
        or limits.shape != (len(dims),)
    ):
        raise ValueError(
            f"thresholds must be (D, N, queries) with (D, N) = {(len(dims), lengths.size)}, fits (D, 3) and limits (D,); "
            f"got {thresholds.shape}, {fits.shape} and {limits.shape}"
        )
    fig = new_figure(6.6, 4.6)
    ax = fig.add_subplot()
    grid = np.geomspace(lengths.min(), lengths.max(), 100)
    for d, color, beta, (p, se, c), limit in zip(dims, dimension_colors(dims), thresholds, fits, limits):
        lo, med, hi = np.quantile(beta, [0.25, 0.5, 0.75], axis=1)
        ax.fill_between(lengths, lo, hi, color=color, alpha=0.15, linewidth=0)
        ax.plot(lengths, med, linestyle="none", marker="o", markersize=5, color=color)
        ax.plot(
            grid,
            np.exp(c) * grid**p,
            color=color,
            linewidth=1.3,
            label=rf"$d = {d}$: slope ${p:.3f} \pm {se:.3f}$, theory $2/(d-1) = {2 / (d - 1):.3f}$",
        )
        ax.plot(grid, limit * grid ** (2 / (d - 1)), color=color, linewidth=1.0, linestyle=":")
    ax.plot([], [], color="0.4", linestyle="none", marker="o", label="median over queries (band: quartiles)")
    ax.plot([], [], color="0.4", linewidth=1.0, linestyle=":", label=r"median of the $n \to \infty$ (Poisson) law")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(r"number of keys $n$")
    ax.set_ylabel(r"threshold $\beta^*_n(q)$: weight on the nearest key $= 1/2$")
    despine(ax)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper left")
    fig.suptitle(title or r"Selectivity threshold of one query among $n$ uniform keys on $S^{d-1}$")
    return finish(fig, path)


def selectivity_profiles(weights, betas, *, dims, n, factors, title=None, path=None) -> Figure:
    """The ordered attention weights w_(1) ≥ w_(2) ≥ … (mean over queries, quartile band) against their rank,
    one panel per regime; ``weights`` (D, regimes, queries, ranks), ``betas`` (D, regimes)."""
    weights = np.asarray(weights, dtype=float)
    betas = np.asarray(betas, dtype=float)
    if weights.ndim != 4 or weights.shape[:2] != (len(dims), len(factors)) or betas.shape != weights.shape[:2]:
        raise ValueError(
            f"weights must be (D, regimes, queries, ranks) and betas (D, regimes) with (D, regimes) = "
            f"{(len(dims), len(factors))}; got {weights.shape} and {betas.shape}"
        )
    ranks = np.arange(1, weights.shape[-1] + 1)
    fig = new_figure(11.0, 3.9)
    axes = fig.subplots(1, len(factors), sharey=True)
    for r, (ax, name) in enumerate(zip(axes, _regime_names(factors))):
        for a, (d, color) in enumerate(zip(dims, dimension_colors(dims))):
            w = np.maximum(weights[a, r], 1e-300)
            lo, hi = np.quantile(w, [0.25, 0.75], axis=0)
            ax.fill_between(ranks, lo, hi, color=color, alpha=0.15, linewidth=0)
            label = rf"$d = {d}$: $\beta = {_plain(betas[a, r])}$"
            ax.plot(ranks, w.mean(axis=0), color=color, marker="o", markersize=2.5, linewidth=1.2, label=label)
        ax.axhline(0.5, color="0.5", linewidth=0.8, linestyle=(0, (4, 3)))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(1e-6, 1.5)
        ax.set_title(name)
        ax.set_xlabel("rank of the key by its weight")
        despine(ax)
        ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower left")
    axes[0].set_ylabel("attention weight (mean over queries)")
    count = f"{n:,}".replace(",", r"{,}")
    fig.suptitle(title or rf"Ordered attention weights of one query among $n = {count}$ keys")
    return finish(fig, path)


FLOOR = 1e-9
"""Shrinkages below this are drawn on it (the selecting regime's outputs are keys to rounding)."""


def selectivity_outputs(angles, lengths, shrink, *, dims, n, factors, title=None, path=None) -> Figure:
    """Where the layer's output y = Σ_j w_j k_j lies, per query: its angle to q in units of the nearest key's
    angle (0: along q, 1: as far as the nearest key) against its shrinkage 1 − |y|, one panel per regime,
    with the n → ∞ local average's shrinkage 1 − A_d(β) (``shrink``, (D, regimes)) in the averaging panels;
    ``angles``, ``lengths`` (D, regimes, queries)."""
    angles = np.asarray(angles, dtype=float)
    lengths = np.asarray(lengths, dtype=float)
    shrink = np.asarray(shrink, dtype=float)
    if (
        angles.ndim != 3
        or angles.shape != lengths.shape
        or angles.shape[:2] != (len(dims), len(factors))
        or shrink.shape != angles.shape[:2]
    ):
        raise ValueError(
            f"angles and lengths must be (D, regimes, queries) and shrink (D, regimes) with (D, regimes) = "
            f"{(len(dims), len(factors))}; got {angles.shape}, {lengths.shape} and {shrink.shape}"
        )
    fig = new_figure(11.0, 3.9)
    axes = fig.subplots(1, len(factors))
    for r, (ax, name, f) in enumerate(zip(axes, _regime_names(factors), factors)):
        for a, (d, color) in enumerate(zip(dims, dimension_colors(dims))):
            ax.plot(
                angles[a, r],
                np.maximum(1.0 - lengths[a, r], FLOOR),
                linestyle="none",
                marker="o",
                markersize=2.2,
                alpha=0.55,
                color=color,
                label=rf"$d = {d}$",
            )
            if f < 1:
                ax.axhline(shrink[a, r], color=color, linewidth=1.0, linestyle=(0, (4, 2)))
        if f < 1:
            ax.plot(
                [], [], color="0.4", linewidth=1.0, linestyle=(0, (4, 2)), label=r"$1 - A_d(\beta)$, $n \to \infty$"
            )
        ax.axvline(1.0, color="0.5", linewidth=0.8, linestyle=":")
        ax.set_yscale("log")
        ax.set_ylim(FLOOR / 3, 1.5)
        ax.set_title(name)
        ax.set_xlabel(r"$\angle(y, q)\,/\,\angle(k^*, q)$")
        despine(ax)
    axes[0].set_ylabel(rf"$1 - |y|$ (below $10^{{{int(np.log10(FLOOR))}}}$: drawn on it)")
    axes[0].legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower right", markerscale=2.5)
    count = f"{n:,}".replace(",", r"{,}")
    head = rf"One layer's output $y = \sum_j w_j k_j$ ($V = I$), $n = {count}$ keys"
    fig.suptitle(title or head + r": a local average around $q$, then the nearest key $k^*$")
    return finish(fig, path)
