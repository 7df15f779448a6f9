"""Histograms of pairwise inner products ⟨x_i, x_j⟩: over time ([GLPR] Thm 6.9) and per model layer (Fig. 1)."""

from __future__ import annotations

import math

import matplotlib as mpl
import numpy as np
from matplotlib import colors as mcolors
from matplotlib import ticker
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .style import (
    DATA_COLOR,
    HISTOGRAM_CMAP,
    INNER_LABEL,
    LABEL_SIZE,
    SEQUENTIAL_CMAP,
    THEORY_COLOR,
    TICK_SIZE,
    TIME_LABEL,
    TITLE_SIZE,
    as_array,
    as_series,
    axis_values,
    centers_to_edges,
    curve_legend,
    despine,
    finish,
    fmt_number,
    new_figure,
    outlined,
    plain_log_colorbar,
    save,
    subsample,
    title_text,
)


def _histogram_inputs(ts, edges, counts):
    ts = axis_values("ts", ts)
    edges = axis_values("edges", edges, "(bins + 1,)")
    if edges.size < 2:
        raise ValueError("edges must hold at least two bin edges")
    counts = as_array("counts", counts, "(T, bins) = (len(ts), len(edges) - 1)", 2)
    expected = (ts.size, edges.size - 1)
    if counts.shape != expected:
        raise ValueError(f"counts must have shape (len(ts), len(edges) - 1) = {expected}; got {counts.shape}")
    if not np.all(np.isfinite(counts)) or counts.min() < 0:
        raise ValueError("counts must be finite and non-negative")
    return ts, edges, counts


def histogram_over_time(
    ts,
    edges,
    counts,
    *,
    gamma=None,
    normalize=True,
    log=True,
    beta=None,
    n=None,
    d=None,
    title=None,
    path=None,
) -> Figure:
    """Histogram of pairwise inner products over time as a heat map (t horizontal).

    counts (T, bins) with bin edges (bins + 1,). normalize: divide each time's column by its
    total (fraction of pairs per bin); log: logarithmic colour scale. gamma (T,) overlays the
    equiangular solution γ_β(t) of [GLPR] (6.9), around which the histogram concentrates as
    d → ∞ (Thm 6.9).
    """
    ts, edges, counts = _histogram_inputs(ts, edges, counts)
    if gamma is not None:
        gamma = as_series("gamma", gamma, ts)
    values = counts.copy()
    if normalize:
        totals = values.sum(axis=1, keepdims=True)
        values = np.divide(values, totals, out=np.zeros_like(values), where=totals > 0)
    cmap = mpl.colormaps[HISTOGRAM_CMAP]
    cmap = cmap.with_extremes(bad=cmap(0.0), under=cmap(0.0))
    vmax = float(values.max()) if values.max() > 0 else 1.0
    norm: mcolors.Normalize
    if log:
        positive = values[values > 0]
        vmin = max(float(positive.min()), vmax * 1e-5) if positive.size else vmax * 1e-5
        norm = mcolors.LogNorm(vmin=vmin, vmax=vmax)
        shown = np.ma.masked_less_equal(values, 0)
    else:
        norm = mcolors.Normalize(vmin=0, vmax=vmax)
        shown = values

    fig = new_figure(7.0, 4.6)
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(centers_to_edges(ts), edges, shown.T, cmap=cmap, norm=norm, shading="flat", rasterized=True)
    if ts.size > 1:
        ax.set_xlim(ts[0], ts[-1])
    ax.set_ylim(edges[0], edges[-1])
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(INNER_LABEL + r", $i < j$")
    ax.set_title(title_text("Pairwise inner products over time", title, d=d, n=n, beta=beta))
    cbar = fig.colorbar(mesh, ax=ax, aspect=30, pad=0.02)
    if log and vmin < vmax:
        plain_log_colorbar(cbar, vmin, vmax)
    cbar.set_label("fraction of pairs in bin" if normalize else "number of pairs", fontsize=LABEL_SIZE)
    if gamma is not None:
        (line,) = ax.plot(
            ts,
            gamma,
            color="#56d4ff",
            linewidth=1.4,
            linestyle=(0, (5, 2.5)),
            path_effects=outlined(2.8),
            gid="gamma",
            label=r"equiangular ODE $\gamma_\beta(t)$, [GLPR] (6.9)",
        )
        curve_legend(fig, line)
    return finish(fig, path)


def histogram_ridges(ts, edges, counts, *, times=None, n_ridges=6, gamma=None, title=None, path=None) -> Figure:
    """Ridge plot: the inner-product histogram at a handful of times, stacked upwards in time.

    times: the times to show (nearest saved time is used); else n_ridges evenly spaced ones.
    Each ridge is normalized to unit height; gamma (T,) marks γ_β(t) on each ridge.
    """
    ts, edges, counts = _histogram_inputs(ts, edges, counts)
    if gamma is not None:
        gamma = as_series("gamma", gamma, ts)
    if times is None:
        idx = subsample(ts.size, max(int(n_ridges), 1))
    else:
        wanted = as_array("times", times, "(k,)", 1)
        idx = np.unique([int(np.argmin(np.abs(ts - t))) for t in wanted])
    centers = 0.5 * (edges[1:] + edges[:-1])
    spacing = 0.75
    colors = mpl.colormaps[SEQUENTIAL_CMAP](np.linspace(0.15, 0.9, idx.size))

    fig = new_figure(6.4, 1.2 + 0.55 * idx.size + 1.2)
    ax = fig.add_subplot()
    for k, i in enumerate(idx):
        row = counts[i]
        height = row / row.max() if row.max() > 0 else row
        base = k * spacing
        z = 2 * (idx.size - k)  # lower ridges in front of the ones above
        ax.fill_between(centers, base, base + height, step="mid", color=colors[k], linewidth=0, zorder=z)
        ax.step(centers, base + height, where="mid", color="0.15", linewidth=0.7, zorder=z + 1)
        ax.axhline(base, color="0.15", linewidth=0.5, zorder=z + 1)
        ax.text(
            edges[0] - 0.02 * (edges[-1] - edges[0]),
            base + 0.05,
            f"$t = {ts[i]:g}$",
            ha="right",
            va="bottom",
            fontsize=TICK_SIZE,
        )
        if gamma is not None:
            # Above every ridge, and short, so it is never hidden by the ridge in front.
            ax.plot(
                [gamma[i]] * 2,
                [base, base + 0.6 * spacing],
                color=THEORY_COLOR,
                linewidth=1.6,
                solid_capstyle="butt",
                zorder=3 * idx.size + 10,
                path_effects=outlined(3.0, "white", 0.9),
                gid=f"gamma_{k}",
            )
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0, spacing * (idx.size - 1) + 1.15)
    ax.set_yticks([])
    ax.spines[["left", "top", "right"]].set_visible(False)
    ax.set_xlabel(INNER_LABEL + r", $i < j$")
    ax.set_title(title if title is not None else "Pairwise inner products at selected times")
    if gamma is not None:
        fig.legend(
            handles=[Line2D([], [], color=THEORY_COLOR, linewidth=1.6, label=r"$\gamma_\beta(t)$, [GLPR] (6.9)")],
            loc="outside lower center",
            frameon=False,
        )
    return finish(fig, path)


def _beta_colors(count: int) -> list:
    """One colour per simulated β, each distinct from the data blue: the theory red first."""
    if count <= 4:
        return [THEORY_COLOR, "#e8a33d", "#3b8f4f", "#7b3f98"][:count]
    return list(mpl.colormaps["plasma"](np.linspace(0.12, 0.78, count)))


def _model_label(model) -> str:
    return {"sa": "SA", "usa": "USA", "usa-rescaled": "USA (rescaled)"}.get(model, model or "simulation")


def _sqrt_scale(y):
    return np.sqrt(np.maximum(y, 0.0))


def _sqrt_ticks(top: float) -> list:
    """Ticks 1, 2, 5 × 10^k up to ``top`` on a square-root axis, at least a fifth of the axis apart."""
    gap = 0.2 * math.sqrt(top)
    ticks: list[float] = []
    for t in sorted((m * 10.0**e for e in range(-6, 1) for m in (1, 2, 5)), reverse=True):
        if t <= top * (1 + 1e-9) and math.sqrt(t) >= gap and (not ticks or math.sqrt(ticks[-1]) - math.sqrt(t) >= gap):
            ticks.append(t)
    return [0.0] + ticks[::-1]


def layer_histograms(
    layers,
    edges,
    counts,
    *,
    simulated=None,
    sim_layers=None,
    betas=None,
    start=None,
    model=None,
    source=None,
    max_panels=30,
    title=None,
    path=None,
) -> Figure:
    """[GLPR] Fig. 1: the histogram of ⟨x_i, x_j⟩ (i < j) of a model's token states, one small panel per layer.

    counts (L, bins) per layer with bin edges (bins + 1,), shown as fractions of pairs on one y-scale
    shared by every panel. simulated (len(betas), K, bins): the simulation started from layer
    ``start``, drawn as outlines over the model's histograms at sim_layers (K,). At most
    ``max_panels`` layers are drawn (evenly spread, first, last and start kept).
    """
    layers = as_array("layers", layers, "(L,)", 1).astype(int)
    edges = axis_values("edges", edges, "(bins + 1,)")
    counts = as_array("counts", counts, "(L, bins)", 2)
    if counts.shape != (layers.size, edges.size - 1):
        raise ValueError(
            f"counts must have shape (len(layers), len(edges) - 1) = {(layers.size, edges.size - 1)}; "
            f"got {counts.shape}"
        )
    fractions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    sim = {}
    colors = []
    if simulated is not None:
        sim_layers = as_array("sim_layers", sim_layers, "(K,)", 1).astype(int)
        betas = list(np.atleast_1d(betas))
        simulated = as_array("simulated", simulated, "(len(betas), K, bins)", 3)
        if simulated.shape != (len(betas), sim_layers.size, edges.size - 1):
            raise ValueError(
                f"simulated must have shape (len(betas), len(sim_layers), bins) = "
                f"{(len(betas), sim_layers.size, edges.size - 1)}; got {simulated.shape}"
            )
        sim_fractions = simulated / np.maximum(simulated.sum(axis=2, keepdims=True), 1)
        sim = {int(l): sim_fractions[:, k] for k, l in enumerate(sim_layers) if start is None or l != start}
        colors = _beta_colors(len(betas))
    stride = -(-layers.size // max(int(max_panels), 1))  # every layer, or every 2nd, 3rd, ...
    shown = np.union1d(np.arange(0, layers.size, stride), [layers.size - 1])
    if start is not None and start in layers:
        shown = np.union1d(shown, np.flatnonzero(layers == start))
    count = shown.size
    ncols = count if count <= 4 else min((6, 5, 4), key=lambda c: -count % c)
    nrows = -(-count // ncols)
    top = max(float(fractions[shown].max()), max((float(f.max()) for f in sim.values()), default=0.0))

    fig = new_figure(1.1 + 1.6 * ncols, 1.0 + 1.25 * nrows + (0.3 if sim else 0.0))
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    for k, ax in enumerate(axes.flat):
        if k >= count:
            ax.set_visible(False)
            continue
        i = shown[k]
        layer = int(layers[i])
        ax.stairs(fractions[i], edges, fill=True, color=DATA_COLOR, alpha=0.8, linewidth=0)
        for j, f in enumerate(sim.get(layer, ())):
            ax.stairs(f, edges, color=colors[j], linewidth=1.1, gid=f"sim_{layer}_{j}")
        ax.set_title(f"layer {layer}" + (" (start)" if layer == start and sim else ""), pad=2)
        ax.set_xlim(edges[0], edges[-1])
        # one square-root scale for every panel: a layer whose pairs spread over many bins stays
        # visible next to one whose pairs all sit in a single bin near 1
        ax.set_yscale("function", functions=(_sqrt_scale, np.square))
        ylim = min(1.0, 1.1 * top) if top > 0 else 1.0
        ax.set_ylim(0, ylim)
        ax.set_yticks(_sqrt_ticks(ylim))
        ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
        ticks = ax.set_xticks([-1, 0, 1], labels=["−1", "0", "1"])
        ticks[0].label1.set_horizontalalignment("left")  # neighbouring panels' −1 and 1 do not touch
        ticks[-1].label1.set_horizontalalignment("right")
        ax.spines[["top", "right"]].set_visible(False)
        if k % ncols == 0:
            ax.set_ylabel("fraction of pairs\n(square-root scale)" if k == ncols * (nrows // 2) else "")
        if k // ncols == nrows - 1 or k + ncols >= count:
            ax.set_xlabel(INNER_LABEL)
            ax.xaxis.set_tick_params(labelbottom=True)
    head = "Pairwise inner products of the normalized tokens, per layer"
    fig.suptitle(title if title is not None else head + (f"\n{source}" if source else ""), fontsize=TITLE_SIZE)
    if sim:
        handles: list[Artist] = [Patch(color=DATA_COLOR, alpha=0.8, label="model")]
        handles += [
            Line2D(
                [],
                [],
                color=c,
                linewidth=1.4,
                label=f"{_model_label(model)} from layer {start}, $\\beta = {fmt_number(b)}$",
            )
            for c, b in zip(colors, betas)
        ]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False)
    finish(fig, None)
    for ax in axes.flat:
        ax.title.set_fontsize(TICK_SIZE + 0.5)  # small multiples: titles the size of tick labels
    save(fig, path)
    return fig


def layer_distances(
    layers,
    distances,
    betas,
    *,
    start=None,
    layer_time=1.0,
    model=None,
    source=None,
    title=None,
    path=None,
) -> Figure:
    """W1 between the model's and the simulation's inner-product distributions, per layer and β.

    distances (len(betas), K) at layers (K,); layer ℓ is time t = (ℓ − start)·layer_time of the
    simulation (a second x-axis on top).
    """
    layers = axis_values("layers", layers, "(K,)")
    betas = list(np.atleast_1d(betas))
    distances = as_array("distances", distances, "(len(betas), K)", 2)
    if distances.shape != (len(betas), layers.size):
        raise ValueError(
            f"distances must have shape (len(betas), len(layers)) = {(len(betas), layers.size)}; got {distances.shape}"
        )
    fig = new_figure(5.6, 3.6)
    ax = fig.add_subplot()
    despine(ax)
    for color, beta, row in zip(_beta_colors(len(betas)), betas, distances):
        ax.plot(
            layers, row, color=color, marker="o", markersize=3.5, linewidth=1.4, label=rf"$\beta = {fmt_number(beta)}$"
        )
    ax.set_xlabel("layer $\\ell$")
    ax.set_ylabel(r"$W_1$(model, simulation)")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    if start is not None:
        tau = float(layer_time)
        top = ax.secondary_xaxis(
            "top", functions=(lambda l: (np.asarray(l) - start) * tau, lambda t: start + np.asarray(t) / tau)
        )
        top.set_xlabel(TIME_LABEL + f" of {_model_label(model)}", fontsize=LABEL_SIZE)
        top.tick_params(labelsize=TICK_SIZE)
    ax.legend(frameon=False, loc="best")
    head = "Distance between the model's and the simulated inner products"
    ax.set_title(title if title is not None else head + (f"\n{source}" if source else ""))
    return finish(fig, path)
