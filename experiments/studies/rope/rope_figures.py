"""SA with rotary positions (arXiv 2607.24502): the twisted rings' spectra against their closed form, the
hemisphere's margin and the contraction of non-obtuse data against its bound, and the rings' abscissae over β."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...plots.style import LEGEND_SIZE, despine, finish, new_figure

__all__ = ["ring_spectra", "flows", "ordering"]


def _colors(count: int) -> list:
    cmap = colormaps["viridis"]
    return [cmap(0.1 + 0.7 * i / max(count - 1, 1)) for i in range(count)]


def ring_spectra(eigen, closed, *, dims, rings, path=None) -> Figure:
    """Per d, each ring's eigenvalues (``eigen`` (D, R, N), NaN-padded) as dots over the closed form's (lines)."""
    eigen = np.asarray(eigen, dtype=float)
    if eigen.shape[:2] != (len(dims), len(rings)):
        raise ValueError(f"eigen must be (D, R, N) with (D, R) = {(len(dims), len(rings))}, got {eigen.shape}")
    fig = new_figure(4.2 * len(dims), 4.0)
    axes = fig.subplots(1, len(dims), squeeze=False)[0]
    for ax, d, found, want in zip(axes, dims, eigen, closed):
        for r, ((q, s), color) in enumerate(zip(rings, _colors(len(rings)))):
            values = found[r][np.isfinite(found[r])]
            ax.plot(np.arange(values.size), values, "o", color=color, markersize=4, label=f"q = {q}, s = {s}")
            ax.plot(np.arange(len(want[r])), want[r], "-", color=color, linewidth=0.8)
        ax.axhline(0.0, color="0.5", linewidth=0.6)
        ax.set_title(rf"$d = {d}$")
        ax.set_xlabel("eigenvalue rank")
        despine(ax)
    axes[0].set_ylabel("eigenvalue of the tangent Jacobian")
    axes[0].legend(fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle("Twisted rings: equilibrium's spectra (dots) and the Bessel-aliasing closed form (lines)")
    return finish(fig, path)


def flows(ts, margin, inner, bound, *, dims, path=None) -> Figure:
    """min_i ⟨e_0, x_i(t)⟩ from the closed hemisphere, and min ⟨x_i, x_j⟩ of non-obtuse data with its bound."""
    fig = new_figure(9.0, 3.8)
    left, right = fig.subplots(1, 2)
    for d, color, m, y, b in zip(dims, _colors(len(dims)), margin, inner, bound):
        left.plot(ts, m, color=color, label=rf"$d = {d}$")
        right.plot(ts, y, color=color, label=rf"$d = {d}$: measured")
        right.plot(ts, b, color=color, linestyle=":", label=rf"$d = {d}$: bound $\tanh(2at + \mathrm{{artanh}}\,m_0)$")
    left.axhline(0.0, color="0.5", linewidth=0.6)
    left.set_xlabel("time t")
    left.set_ylabel(r"$\min_i \langle e_0, x_i(t)\rangle$")
    right.set_xlabel("time t")
    right.set_ylabel(r"$\min_{i \neq j} \langle x_i, x_j\rangle$")
    despine(left, right)
    left.legend(fontsize=LEGEND_SIZE, frameon=False)
    right.legend(fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle("Rotary positions: the closed hemisphere is invariant; non-obtuse data contract")
    return finish(fig, path)


def ordering(grid, table, *, n, path=None) -> Figure:
    """For each winding q, the resonance s of least phase abscissa against β (``table`` (q, s, β))."""
    table = np.asarray(table, dtype=float)
    fig = new_figure(7.2, 4.2)
    ax = fig.add_subplot()
    for q, (rows, color) in enumerate(zip(table, _colors(len(table)))):
        best = np.argmin(rows, axis=0) + 1
        ax.plot(grid, best + 0.06 * (q - len(table) / 2), drawstyle="steps-mid", color=color, label=f"q = {q}")
    ax.set_xlabel(r"$\beta$")
    ax.set_ylabel(r"most stable resonance $s$ ($\theta = 2\pi s/n$)")
    despine(ax)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.suptitle(rf"Rings of $n = {n}$: which frequency is most stable depends on $\beta$")
    return finish(fig, path)
