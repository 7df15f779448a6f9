"""Pairwise inner products of a simulation against the equiangular ODE γ(t), [GLPR] (6.9)."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from .style import (
    BAND_COLOR,
    DATA_COLOR,
    INNER_LABEL,
    THEORY_COLOR,
    TIME_LABEL,
    TITLE_SIZE,
    as_array,
    as_series,
    axis_values,
    despine,
    finish,
    new_figure,
    set_range,
    subsample,
    title_text,
)


def _pairs(name: str, value, ts: np.ndarray) -> np.ndarray:
    arr = as_array(name, value, "(T, P) or (T, n, n)")
    if arr.ndim == 3 and arr.shape[1] == arr.shape[2]:
        iu = np.triu_indices(arr.shape[1], 1)
        arr = arr[:, iu[0], iu[1]]
    if arr.ndim != 2:
        raise ValueError(f"{name} must have shape (T, P) (pairs) or (T, n, n) (Gram matrices); got {arr.shape}")
    if arr.shape[0] != ts.shape[0]:
        raise ValueError(f"{name} must have T = len(ts) = {ts.shape[0]} rows; got shape {arr.shape}")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} holds no pairs")
    return arr


def inner_product_vs_ode(
    ts,
    inner_products,
    gamma,
    *,
    d=None,
    n=None,
    beta=None,
    max_lines=300,
    title=None,
    path=None,
) -> Figure:
    """Pairwise inner products of a simulation against the equiangular ODE γ(t), [GLPR] (6.9).

    inner_products (T, P) for P pairs, or (T, n, n) Gram matrices (pairs i < j are taken).
    Top: each pair as a thin grey line with the min–max band and γ(t) in bold. Bottom: max and
    mean |⟨x_i,x_j⟩ − γ(t)| on a log axis; with d given, the scale √(log d / d) of Thm 6.9.
    """
    ts = axis_values("ts", ts)
    ips = _pairs("inner_products", inner_products, ts)
    gamma = as_series("gamma", gamma, ts)
    fig = new_figure(7.0, 5.8)
    ax, ax_err = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    lo, hi = ips.min(axis=1), ips.max(axis=1)
    ax.fill_between(ts, lo, hi, color=BAND_COLOR, alpha=0.45, linewidth=0, label="min–max over pairs")
    shown = ips[:, subsample(ips.shape[1], int(max_lines))]
    ax.add_collection(
        LineCollection(
            [np.column_stack([ts, c]) for c in shown.T], colors="0.35", linewidths=0.35, alpha=0.35, gid="pairs"
        )
    )
    ax.plot([], [], color="0.35", linewidth=0.6, label=r"pairs $\langle x_i(t), x_j(t)\rangle$")
    ax.plot(ts, gamma, color=THEORY_COLOR, linewidth=2.2, label=r"ODE $\gamma(t)$", gid="gamma")
    set_range(ax, ts)
    both = np.concatenate([lo, hi, gamma])
    both = both[np.isfinite(both)]
    pad = 0.04 * max(np.ptp(both), 1e-3)
    ax.set_ylim(both.min() - pad, both.max() + pad)
    ax.set_ylabel(INNER_LABEL)
    fig.suptitle(
        title_text("Inner products against the equiangular ODE", title, d=d, n=n, beta=beta), fontsize=TITLE_SIZE
    )
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=3, frameon=False, borderaxespad=0.2)
    despine(ax)

    err = np.abs(ips - gamma[:, None])
    for values, label, style in ((err.max(axis=1), "max over pairs", "-"), (err.mean(axis=1), "mean over pairs", "--")):
        ax_err.plot(
            ts, np.where(values > 0, values, np.nan), color=DATA_COLOR, linestyle=style, linewidth=1.4, label=label
        )
    if d is not None and d > 1:
        ax_err.axhline(
            math.sqrt(math.log(d) / d), color="0.4", linewidth=0.9, linestyle=":", label=r"$\sqrt{\log d\,/\,d}$"
        )
    ax_err.set_yscale("log")
    ax_err.set_ylabel(r"$|\langle x_i, x_j\rangle - \gamma(t)|$")
    ax_err.set_xlabel(TIME_LABEL)
    ax_err.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, borderaxespad=0.2)
    despine(ax_err)
    return finish(fig, path)
