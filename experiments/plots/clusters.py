"""Cluster counts over time: under the energy staircase (arXiv 2410.06833), and per β with quartile bands."""

from __future__ import annotations

from collections.abc import Mapping

import matplotlib as mpl
import numpy as np
from matplotlib.artist import Artist
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .style import (
    BAND_COLOR,
    DATA_COLOR,
    SEQUENTIAL_CMAP,
    TICK_SIZE,
    TIME_LABEL,
    TITLE_SIZE,
    as_array,
    as_series,
    axis_values,
    cluster_count_panel,
    despine,
    finish,
    integer_axis,
    new_figure,
    seed_text,
    set_range,
    title_text,
)


def _levels(levels):
    out = []
    for item in levels:
        if isinstance(item, (tuple, list)):
            if len(item) != 2:
                raise ValueError(f"levels entries must be numbers or (value, label) pairs; got {item!r}")
            value, label = float(item[0]), str(item[1])
        else:
            try:
                value = float(item)
            except (TypeError, ValueError):
                raise ValueError(f"levels entries must be numbers or (value, label) pairs; got {item!r}") from None
            label = f"{value:.3g}"
        out.append((value, label))
    return sorted(out)


def _plateaus(plateaus):
    out = []
    for item in plateaus:
        try:
            t0, t1, value = (float(v) for v in item)
        except (TypeError, ValueError):
            raise ValueError(f"plateaus entries must be (t_start, t_end, value) triples; got {item!r}") from None
        if not t1 >= t0:
            raise ValueError(f"plateaus entry {item!r} has t_end < t_start")
        out.append((t0, t1, value))
    return out


def energy_and_clusters(
    ts,
    energy,
    n_clusters,
    *,
    plateaus=None,
    levels=None,
    xlabel=TIME_LABEL,
    logx=False,
    beta=None,
    n=None,
    seed=None,
    title=None,
    path=None,
) -> Figure:
    """Normalized energy (top) and cluster count (bottom) against a shared time axis; ``seed``, the member drawn
    when the curves are one member's, is named in the title.

    energy (T,): typically (1/n²) Σ_ij e^{β(⟨x_i,x_j⟩−1)} (docs/model.md §1.3). n_clusters (T,) or None.
    plateaus: [(t_start, t_end, value), ...] shaded as bands (saddle-to-saddle staircase of
    arXiv 2410.06833). levels: numbers or (value, label) pairs drawn as labelled guide lines,
    e.g. the theoretical Σ_q m_q²/n² of cluster sizes m_q. logx: logarithmic time axis.
    """
    ts = axis_values("ts", ts)
    energy = as_series("energy", energy, ts)
    if n_clusters is not None:
        n_clusters = as_series("n_clusters", n_clusters, ts)
    plateaus = _plateaus(plateaus or [])
    levels = _levels(levels or [])

    fig = new_figure(7.2, 5.6 if n_clusters is not None else 3.9)
    if n_clusters is not None:
        ax_e, ax_c = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    else:
        ax_e, ax_c = fig.add_subplot(), None
    handles: list[Artist] = []
    for t0, t1, value in plateaus:
        for ax in (ax_e, ax_c):
            if ax is not None:
                ax.axvspan(t0, t1, color=BAND_COLOR, alpha=0.28, linewidth=0, zorder=0)
        ax_e.plot([t0, t1], [value, value], color=BAND_COLOR, linewidth=5, alpha=0.8, solid_capstyle="butt", zorder=1)
    if plateaus:
        handles.append(Patch(color=BAND_COLOR, alpha=0.5, label="plateau"))
    for value, _ in levels:
        ax_e.axhline(value, color="0.45", linewidth=0.8, linestyle=(0, (4, 3)), zorder=1)
    if levels:
        handles.append(
            Line2D([], [], color="0.45", linewidth=0.8, linestyle=(0, (4, 3)), label=r"level $\sum_q m_q^2/n^2$")
        )
    (line,) = ax_e.plot(ts, energy, color=DATA_COLOR, linewidth=1.6, zorder=3, label="energy", gid="energy")
    handles.insert(0, line)
    set_range(ax_e, ts, logx=logx)
    finite = energy[np.isfinite(energy)]
    span = [finite.min(), finite.max()] if finite.size else [0.0, 1.0]
    span += [v for v, _ in levels] + [v for *_, v in plateaus]
    lo, hi = min(span), max(span)
    pad = 0.06 * max(hi - lo, 1e-3)
    ax_e.set_ylim(lo - pad, hi + pad)
    _label_levels(ax_e, levels)
    ax_e.set_ylabel("normalized energy\n" + r"$2\beta e^{-\beta} E_\beta$")
    fig.suptitle(title_text("Energy and clusters", title, member=seed_text(seed), n=n, beta=beta), fontsize=TITLE_SIZE)
    ax_e.legend(
        handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=len(handles), frameon=False, borderaxespad=0.2
    )
    despine(ax_e)
    if ax_c is not None:
        cluster_count_panel(ax_c, ts, n_clusters, xlabel)
    else:
        ax_e.set_xlabel(xlabel)
    return finish(fig, path)


def _label_levels(ax, levels) -> None:
    """Labels of guide lines in the right margin, nudged apart so they never overlap."""
    if not levels:
        return
    lo, hi = ax.get_ylim()
    pos = [(v - lo) / (hi - lo) for v, _ in levels]
    gap = 0.075
    for k in range(1, len(pos)):
        pos[k] = max(pos[k], pos[k - 1] + gap)
    for (_, label), y in zip(levels, pos):
        ax.annotate(
            label,
            xy=(1.0, y),
            xycoords="axes fraction",
            xytext=(4, 0),
            textcoords="offset points",
            ha="left",
            va="center",
            fontsize=TICK_SIZE,
            color="0.3",
            annotation_clip=False,
        )


def cluster_count_vs_time(ts, counts_by_beta, *, logx=False, n=None, d=None, title=None, path=None) -> Figure:
    """Metastability: median and interquartile band of the cluster count over time, per β.

    counts_by_beta maps β to an array (members, T) of cluster counts (a (T,) array is one
    member). logx: logarithmic time axis, where the slow merges of [GLPR] §6.3 show up.
    """
    ts = axis_values("ts", ts)
    if not isinstance(counts_by_beta, Mapping) or len(counts_by_beta) == 0:
        raise ValueError("counts_by_beta must be a non-empty mapping {beta: array (members, T)}")
    series = []
    for key in sorted(counts_by_beta, key=float):
        arr = as_array(f"counts_by_beta[{key!r}]", counts_by_beta[key], "(members, T)")
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] != ts.size:
            raise ValueError(
                f"counts_by_beta[{key!r}] must have shape (members, T) with T = len(ts) = {ts.size}; got {arr.shape}"
            )
        series.append((float(key), arr))
    colors = mpl.colormaps[SEQUENTIAL_CMAP](np.linspace(0.05, 0.85, len(series)))
    fig = new_figure(7.2, 4.4)
    ax = fig.add_subplot()
    top = 1.0
    for (beta, arr), color in zip(series, colors):
        q1, med, q3 = np.percentile(arr, [25, 50, 75], axis=0)
        ax.fill_between(ts, q1, q3, step="post", color=color, alpha=0.22, linewidth=0)
        ax.step(
            ts, med, where="post", color=color, linewidth=1.8, label=rf"$\beta = {beta:g}$", gid=f"median_beta_{beta:g}"
        )
        top = max(top, float(np.nanmax(q3)))
    set_range(ax, ts, logx=logx)
    integer_axis(ax, np.array([top]))
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("number of clusters")
    members = ", ".join(sorted({str(a.shape[0]) for _, a in series}))
    ax.set_title(title_text(f"Cluster count: median and interquartile range over {members} runs", title, d=d, n=n))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, borderaxespad=0.2)
    despine(ax)
    return finish(fig, path)
