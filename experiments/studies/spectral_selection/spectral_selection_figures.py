"""Spectral selection for a symmetric V: the basin fractions over β, n and the spectrum classes, the basin maps on S²,
and the mixed three-group states' scalar equation with its zeros."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ...plots.style import BETA_LABEL, LEGEND_SIZE, THEORY_COLOR, despine, finish, new_figure

__all__ = ["outcome_colors", "basin_fractions", "basin_maps", "mixed_equations"]


def outcome_colors(count: int) -> list:
    """Consensus and split on each e_p as a dark and a light shade of one hue; the last outcome ("other") grey."""
    cmap = colormaps["tab20"]
    return [cmap(i) for i in range(count - 1)] + [(0.75, 0.75, 0.75, 1.0)]


def _spectrum(lam) -> str:
    return r"$\lambda = (" + ", ".join(f"{v:g}" for v in lam) + ")$"


def basin_fractions(betas, sizes, spectra, fraction, outcomes, *, title=None, path=None) -> Figure:
    """Stacked fractions of the outcomes over β, one panel per (spectrum class, n); ``fraction`` (B, C, N, O)."""
    fraction = np.asarray(fraction, dtype=float)
    if fraction.shape != (len(betas), len(spectra), len(sizes), len(outcomes)):
        raise ValueError(
            f"fraction must be (B, C, N, O) = {(len(betas), len(spectra), len(sizes), len(outcomes))}, "
            f"got {fraction.shape}"
        )
    colors = outcome_colors(len(outcomes))
    fig = new_figure(max(2.6 * len(sizes) + 2.4, 7.0), 2.2 * len(spectra) + 0.8)
    axes = np.atleast_2d(fig.subplots(len(spectra), len(sizes), sharex=True, sharey=True, squeeze=False))
    x = np.arange(len(betas))
    for c, lam in enumerate(spectra):
        for j, n in enumerate(sizes):
            ax = axes[c, j]
            bottom = np.zeros(len(betas))
            for o, color in enumerate(colors):
                ax.bar(x, fraction[:, c, j, o], bottom=bottom, color=color, width=0.8)
                bottom += fraction[:, c, j, o]
            ax.set_xticks(x, [f"{b:g}" for b in betas])
            ax.set_ylim(0, 1)
            if c == 0:
                ax.set_title(rf"$n = {n}$")
            if j == 0:
                ax.set_ylabel(_spectrum(lam) + "\nfraction of starts", fontsize=8.5)
            if c == len(spectra) - 1:
                ax.set_xlabel(BETA_LABEL)
            despine(ax)
    handles = [Patch(color=col, label=name) for col, name in zip(colors, outcomes)]
    fig.legend(handles=handles, loc="outside right center", fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle(title or r"Uniform starts end in consensus or a split on an eigenvector of $V$, or neither")
    return finish(fig, path)


def basin_maps(betas, spectra, basin, pair, outcomes, *, n, title=None, path=None) -> Figure:
    """The outcome against the start y ∈ S² (latitude–longitude), one row per spectrum class: the first token of n
    (the others fixed) at the smallest and largest β, and the antipodal pair (y, −y) at the largest β;
    ``basin``, ``pair`` (B, C, lat, lon) of outcome codes."""
    basin, pair = np.asarray(basin, dtype=float), np.asarray(pair, dtype=float)
    if basin.shape != pair.shape or basin.shape[:2] != (len(betas), len(spectra)) or basin.ndim != 4:
        raise ValueError(f"basin and pair must be (B, C, lat, lon) with (B, C) = {(len(betas), len(spectra))}")
    cmap = ListedColormap(outcome_colors(len(outcomes)))
    norm = BoundaryNorm(np.arange(len(outcomes) + 1) - 0.5, len(outcomes))
    columns = [(0, basin, f"first of $n = {n}$ tokens"), (-1, basin, f"first of $n = {n}$ tokens"), (-1, pair, "pair")]
    fig = new_figure(10.0, 1.9 * len(spectra) + 1.0)
    axes = fig.subplots(len(spectra), 3, squeeze=False)
    extent = (0, 360, -90, 90)
    for c, lam in enumerate(spectra):
        for col, (b, data, what) in enumerate(columns):
            ax = axes[c, col]
            ax.imshow(data[b, c][::-1], cmap=cmap, norm=norm, extent=extent, aspect="auto", interpolation="nearest")
            if c == 0:
                ax.set_title(rf"{what} (antipodal $\pm y$)" if data is pair else rf"{what}, $\beta = {betas[b]:g}$")
            ax.set_xticks([0, 90, 180, 270, 360])
            ax.set_yticks([-90, 0, 90])
            if col == 0:
                ax.set_ylabel(_spectrum(lam) + "\nlatitude (°)", fontsize=8.5)
            if c == len(spectra) - 1:
                ax.set_xlabel("longitude of the start (°)")
    handles = [Patch(color=cmap(i), label=name) for i, name in enumerate(outcomes)]
    fig.legend(handles=handles, loc="outside right center", fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle(title or r"Basin maps on $S^2$: the outcome against one token's start $y$")
    return finish(fig, path)


def mixed_equations(sets, grids, values, roots, index, *, title=None, path=None) -> Figure:
    """g(q) of each mixed parameter set [a, b, β, m, k] (scaled by its largest magnitude), its zeros marked with
    their number of unstable directions; ``roots``, ``index`` (sets, MAX_ROOTS), NaN-padded."""
    roots, index = np.asarray(roots, dtype=float), np.asarray(index, dtype=float)
    fig = new_figure(6.8, 4.4)
    ax = fig.add_subplot()
    cmap = colormaps["viridis"]
    for i, (row, q, g) in enumerate(zip(sets, grids, values)):
        color = cmap(0.1 + 0.75 * i / max(len(sets) - 1, 1))
        scale = max(float(np.max(np.abs(g))), 1e-300)
        a, b, beta, m, k = row
        ax.plot(
            q,
            np.asarray(g) / scale,
            color=color,
            linewidth=1.3,
            label=rf"$a={a:g}, b={b:g}, \beta={beta:g}, m={m:g}, k={k:g}$",
        )
        found = np.isfinite(roots[i])
        ax.plot(roots[i][found], np.zeros(found.sum()), "o", color=color, markersize=6, markeredgecolor="black")
        for q0, u in zip(roots[i][found], index[i][found]):
            ax.annotate(f"{int(u)}", (q0, 0), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    ax.axhline(0, color=THEORY_COLOR, linewidth=0.8)
    ax.set_xlabel(r"$q$: the side groups at $q\,e_1 \pm \sqrt{1-q^2}\,e_2$")
    ax.set_ylabel(r"$g(q)/\max|g|$")
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="best")
    despine(ax)
    fig.suptitle(title or "Mixed three-group rest points: the zeros of g (labels: unstable directions)")
    return finish(fig, path)
