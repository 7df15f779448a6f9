"""Rényi centres under a causal mask (arXiv 2411.04990 Fig. 2): snapshots on the circle, and counts over time."""

from __future__ import annotations

import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from ...plots.style import (
    DATA_COLOR,
    LEGEND_SIZE,
    THEORY_COLOR,
    TIME_LABEL,
    as_array,
    axis_values,
    despine,
    finish,
    new_figure,
    title_text,
)

CENTRE_COLOR = "black"
STRONG_COLOR = THEORY_COLOR


def renyi_snapshots(ts, states, centres, strong, *, times, beta=None, delta=None, title=None, path=None) -> Figure:
    """The tokens of one run on the circle at a few ``times``: every token as a dot coloured by its
    position in the sequence, Rényi centres as black rings, strong Rényi centres as red dots.

    states (T, n, 2); centres and strong: masks (T, n) computed at each save time."""
    ts = axis_values("ts", ts)
    states = as_array("states", states, "(T, n, 2)", 3)
    centres = np.asarray(centres, bool)
    strong = np.asarray(strong, bool)
    if (
        states.shape[0] != ts.size
        or states.shape[-1] != 2
        or centres.shape != states.shape[:2]
        or strong.shape != states.shape[:2]
    ):
        raise ValueError(
            f"states must be (T, n, 2) and centres, strong (T, n) with T = {ts.size}; got "
            f"{states.shape}, {centres.shape}, {strong.shape}"
        )
    picks = sorted({int(np.argmin(np.abs(ts - t))) for t in times})
    fig = new_figure(3.0 * len(picks) + 0.4, 3.7)
    axes = fig.subplots(1, len(picks), squeeze=False)[0]
    n = states.shape[1]
    order = np.linspace(0.0, 1.0, n)
    circle = np.linspace(0.0, 2 * np.pi, 361)
    for ax, k in zip(axes, picks):
        ax.plot(np.cos(circle), np.sin(circle), color="0.8", linewidth=0.9, zorder=1)
        x = states[k] / np.linalg.norm(states[k], axis=-1, keepdims=True)
        ax.scatter(x[:, 0], x[:, 1], c=order, cmap="Blues", vmin=-0.3, vmax=1.0, s=9, linewidths=0, zorder=2)
        c = centres[k]
        ax.scatter(
            1.1 * x[c, 0],
            1.1 * x[c, 1],
            facecolors="none",
            edgecolors=CENTRE_COLOR,
            s=36,
            linewidths=1.1,
            zorder=3,
            label="Rényi centres" if k == picks[0] else None,
        )
        s = strong[k]
        ax.scatter(
            1.1 * x[s, 0],
            1.1 * x[s, 1],
            color=STRONG_COLOR,
            s=13,
            zorder=4,
            label="strong Rényi centres" if k == picks[0] else None,
        )
        ax.set_title(f"t = {ts[k]:g}: {int(c.sum())} centres, {int(s.sum())} strong", fontsize=LEGEND_SIZE + 0.5)
        ax.set_xlim(-1.25, 1.25)
        ax.set_ylim(-1.25, 1.25)
        ax.set_aspect("equal")
        ax.set_axis_off()
    fig.legend(loc="outside lower center", ncol=2, fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle(
        title_text("Causal attention: tokens (darker = later) and their Rényi centres", title, beta=beta, delta=delta)
    )
    return finish(fig, path)


def centre_counts(
    ts, centres, strong, clusters, *, prediction=None, beta=None, delta=None, members=None, title=None, path=None
) -> Figure:
    """Mean numbers of Rényi centres, strong centres and clusters over time (each (T,)), with the parking
    prediction c_R · 2π/δ for the centres of uniform tokens as a horizontal line."""
    ts = axis_values("ts", ts)
    series = {
        name: as_array(name, v, "(T,)", 1)
        for name, v in (("centres", centres), ("strong", strong), ("clusters", clusters))
    }
    for name, v in series.items():
        if v.shape != ts.shape:
            raise ValueError(f"{name} must have one value per save time, shape {ts.shape}; got {v.shape}")
    fig = new_figure(6.6, 4.3)
    ax = fig.add_subplot()
    ax.plot(ts, series["clusters"], color="0.45", linewidth=1.3, label="clusters")
    ax.plot(
        ts,
        series["centres"],
        color=CENTRE_COLOR,
        linewidth=1.6,
        marker="o",
        markevery=[0],
        markersize=5,
        label="Rényi centres (dot: t = 0)",
    )
    ax.plot(ts, series["strong"], color=STRONG_COLOR, linewidth=1.6, label="strong Rényi centres")
    if prediction is not None:
        ax.axhline(
            prediction,
            color=DATA_COLOR,
            linewidth=1.1,
            linestyle=(0, (4, 3)),
            label=rf"parking: $c_R \cdot 2\pi/\delta$ = {prediction:.2f}",
        )
    ax.set_xlim(ts[0], ts[-1])
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("mean count" + (f" over {members} runs" if members else ""))
    despine(ax)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle(title_text("Metastable clusters under a causal mask", title, beta=beta, delta=delta))
    return finish(fig, path)
