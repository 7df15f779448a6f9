"""A statistic of a sweep's runs against one of its axes, one curve per value of the other axes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .style import DATA_COLOR, SEQUENTIAL_CMAP, despine, finish, new_figure


def sweep_curves(
    x_values: Sequence,
    curves: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    path=None,
) -> Figure:
    """``curves`` (label → one value per x) against ``x_values``: numbers on a linear axis in increasing
    order, anything else (strings, lists) as categories in the given order. A missing value (NaN) leaves a
    gap (the axis still spans every x value, and a note says so); one curve has no legend, several have one
    with their labels."""
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x_values)
    positions = np.asarray(x_values, dtype=float) if numeric else np.arange(len(x_values), dtype=float)
    order = np.argsort(positions, kind="stable")
    fig = new_figure(7.4 if len(curves) > 1 else 6.2, 4.2)  # room for the legend beside the axes
    ax = fig.add_subplot()
    cmap = mpl.colormaps[SEQUENTIAL_CMAP]
    many = len(curves) > 1
    for k, (label, ys) in enumerate(curves.items()):
        values = np.asarray(ys, dtype=float)
        if values.shape != positions.shape:
            raise ValueError(f"curve {label!r} has {values.size} values for {positions.size} x values")
        color = cmap(0.1 + 0.75 * k / max(1, len(curves) - 1)) if many else DATA_COLOR
        ax.plot(positions[order], values[order], "o-", color=color, lw=1.6, ms=4.5, label=label or None)
    if not numeric:
        ax.set_xticks(positions, [str(v) for v in x_values])
    elif all(float(v).is_integer() for v in x_values):  # d, n, seeds: whole numbers on the axis
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if positions.size > 1:  # every x value on the axis, those without a number too
        pad = 0.05 * float(np.ptp(positions))
        ax.set_xlim(float(positions.min()) - pad, float(positions.max()) + pad)
    if any(np.isnan(np.asarray(ys, dtype=float)).any() for ys in curves.values()):
        ax.text(
            1.0,
            1.0,
            "no point: no value there",
            transform=ax.transAxes,
            ha="right",
            va="bottom",
            fontsize="small",
            color="0.4",
        )
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if many:
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the curves, not on them
    despine(ax)
    return finish(fig, path)
