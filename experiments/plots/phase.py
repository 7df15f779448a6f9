"""Clustering phase diagrams over (t, β), [GLPR] Fig. 3: one panel, or one per dimension d."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from matplotlib.figure import Figure

from .style import (
    BETA_LABEL,
    FRACTION_LABEL,
    GAMMA_CURVE_LABEL,
    LABEL_SIZE,
    SEQUENTIAL_CMAP,
    TIME_LABEL,
    TITLE_SIZE,
    as_array,
    axis_values,
    centers_to_edges,
    curve_legend,
    finish,
    grid_shape,
    new_figure,
    outlined,
    title_text,
)


def _fraction(name: str, value, betas: np.ndarray, ts: np.ndarray) -> np.ndarray:
    expected = (betas.shape[0], ts.shape[0])
    arr = as_array(name, value, f"(len(betas), len(ts)) = {expected}", 2)
    if arr.shape != expected:
        hint = " (transposed? rows are betas, columns are times)" if arr.shape == expected[::-1] else ""
        raise ValueError(f"{name} must have shape (len(betas), len(ts)) = {expected}; got {arr.shape}{hint}")
    finite = arr[np.isfinite(arr)]
    if finite.size and (finite.min() < -1e-9 or finite.max() > 1 + 1e-9):
        raise ValueError(
            f"{name} holds fractions and must lie in [0, 1]; got values in [{finite.min():.3g}, {finite.max():.3g}]"
        )
    return arr


def _gamma_curve(value, name: str = "gamma_curve") -> tuple[np.ndarray, np.ndarray]:
    try:
        t_star, betas = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (t_star, betas) of 1-D arrays of equal length") from None
    t_star = as_array(f"{name}[0] (t_star)", t_star, "(K,)", 1)
    betas = as_array(f"{name}[1] (betas)", betas, "(K,)", 1)
    if t_star.shape != betas.shape:
        raise ValueError(
            f"{name} must be a pair (t_star, betas) of equal length; got lengths {t_star.shape[0]} and {betas.shape[0]}"
        )
    # t* = inf where γ never reaches 1 − δ; a gap in the line says so.
    return np.where(np.isfinite(t_star), t_star, np.nan), betas


def _phase_panel(ax, ts, betas, fraction, curve):
    mesh = ax.pcolormesh(
        centers_to_edges(ts),
        centers_to_edges(betas),
        fraction,
        cmap=SEQUENTIAL_CMAP,
        vmin=0.0,
        vmax=1.0,
        shading="flat",
        rasterized=True,
    )
    line = None
    if curve is not None:
        (line,) = ax.plot(
            curve[0],
            curve[1],
            color="white",
            linewidth=1.6,
            linestyle=(0, (5, 2.5)),
            label=GAMMA_CURVE_LABEL,
            path_effects=outlined(3.2),
            gid="gamma_curve",
        )
    if ts.size > 1:
        ax.set_xlim(ts[0], ts[-1])
    if betas.size > 1:
        ax.set_ylim(betas[0], betas[-1])
    return mesh, line


def _fraction_colorbar(fig, mesh, axes):
    cbar = fig.colorbar(mesh, ax=axes, ticks=np.linspace(0, 1, 6), aspect=30, pad=0.02)
    cbar.set_label(FRACTION_LABEL, fontsize=LABEL_SIZE)
    return cbar


def phase_diagram(
    ts,
    betas,
    fraction,
    *,
    gamma_curve=None,
    d=None,
    n=None,
    delta=None,
    title=None,
    path=None,
) -> Figure:
    """Heat map of the fraction of clustered pairs over (t, β), [GLPR] Fig. 3.

    ts (T,), betas (B,), fraction (B, T) in [0, 1]: the fraction of pairs i ≠ j with
    ⟨x_i(t), x_j(t)⟩ ≥ 1 − δ at inverse temperature β. gamma_curve = (t_star, betas_curve)
    overlays Γ_{∞,δ} = {(t, β): γ_β(t) = 1 − δ} of [GLPR] (6.12), the d → ∞ boundary.
    """
    ts = axis_values("ts", ts)
    betas = axis_values("betas", betas, "(B,)")
    fraction = _fraction("fraction", fraction, betas, ts)
    curve = None if gamma_curve is None else _gamma_curve(gamma_curve)

    fig = new_figure(6.4, 4.9)
    ax = fig.add_subplot()
    mesh, line = _phase_panel(ax, ts, betas, fraction, curve)
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(BETA_LABEL)
    ax.set_title(title_text("Clustering phase diagram", title, d=d, n=n, delta=delta))
    _fraction_colorbar(fig, mesh, ax)
    if line is not None:
        curve_legend(fig, line)
    return finish(fig, path)


def phase_diagram_grid(
    ts,
    betas,
    fractions_by_d,
    gamma_curve=None,
    *,
    n=None,
    delta=None,
    ncols=3,
    title=None,
    path=None,
) -> Figure:
    """One phase-diagram panel per dimension d with a shared colour bar, [GLPR] Fig. 3 (2×3).

    The panels fill rows of at most ``ncols`` (``style.grid_shape``: 4 panels on 2 × 2, 6 on 2 × 3), and every
    panel with none below it carries the time axis.

    fractions_by_d maps d to a (B, T) array as in ``phase_diagram`` (panels sorted by d), or
    panel titles (strings, kept in order) to such arrays, e.g. the weight ensembles of Fig. 5.
    gamma_curve is one pair (t_star, betas) drawn in every panel, or a mapping key → pair.
    """
    ts = axis_values("ts", ts)
    betas = axis_values("betas", betas, "(B,)")
    if not isinstance(fractions_by_d, Mapping) or len(fractions_by_d) == 0:
        raise ValueError("fractions_by_d must be a non-empty mapping {d: array (len(betas), len(ts))}")
    labelled = all(isinstance(k, str) for k in fractions_by_d)
    panels = []
    for key in list(fractions_by_d) if labelled else sorted(fractions_by_d):
        if not labelled:
            try:
                key = int(key)
            except (TypeError, ValueError):
                raise ValueError(
                    f"fractions_by_d keys must be dimensions d (integers) or panel titles (strings); got {key!r}"
                ) from None
        panels.append((key, _fraction(f"fractions_by_d[{key!r}]", fractions_by_d[key], betas, ts)))
    curves = {}
    if isinstance(gamma_curve, Mapping):
        for key, value in gamma_curve.items():
            curves[key if labelled else int(key)] = _gamma_curve(value, f"gamma_curve[{key!r}]")
    elif gamma_curve is not None:
        shared = _gamma_curve(gamma_curve)
        curves = {d: shared for d, _ in panels}
    if int(ncols) < 1:
        raise ValueError(f"ncols must be a positive integer; got {ncols!r}")

    nrows, ncols = grid_shape(len(panels), int(ncols))
    fig = new_figure(3.3 * ncols + 1.1, 2.75 * nrows + 1.0)
    grid = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False)
    used, line = [], None
    for k, ax in enumerate(grid.flat):
        if k >= len(panels):
            ax.set_visible(False)
            continue
        d, fraction = panels[k]
        mesh, panel_line = _phase_panel(ax, ts, betas, fraction, curves.get(d))
        line = line or panel_line
        ax.set_title(d if labelled else rf"$d = {d}$")
        row, col = divmod(k, ncols)
        if k + ncols >= len(panels):  # nothing below it: this panel carries the time axis
            ax.set_xlabel(TIME_LABEL)
            ax.xaxis.set_tick_params(labelbottom=True)
        if col == 0:
            ax.set_ylabel(BETA_LABEL)
        used.append(ax)
    _fraction_colorbar(fig, mesh, used)
    fig.suptitle(
        title_text("Clustering phase diagrams" + ("" if labelled else " by dimension"), title, n=n, delta=delta),
        fontsize=TITLE_SIZE,
    )
    if line is not None:
        curve_legend(fig, line)
    return finish(fig, path)
