"""Plots and animations of attnflow runs: phase diagrams, trajectories, histograms, energies.

Every function takes plain NumPy arrays (anything ``np.asarray`` accepts, JAX arrays included),
draws on a ``matplotlib.figure.Figure`` attached to the Agg canvas, returns that figure and, when
``path`` is given, writes it there (PNG; a GIF for ``animate_sphere``). Nothing here uses pyplot:
no global figure state, no windows, safe to call from worker threads. Styling is set on each
artist (``_style``), never through rcParams; text is mathtext, never LaTeX, even when a user's
rcParams ask for ``text.usetex``.

The figures follow [GLPR] (arXiv 2312.10794) §6.3 and the metastability paper (arXiv 2410.06833):
phase diagram (Fig. 3), circle trajectories (Fig. 4), histograms of pairwise inner products
against the equiangular ODE (6.9), and the energy staircase.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

import matplotlib as mpl
import numpy as np
from matplotlib import colors as mcolors
from matplotlib import patheffects, ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text

__all__ = [
    "animate_sphere",
    "attention_statistics",
    "circle_trajectories",
    "cluster_count_vs_time",
    "energy_and_clusters",
    "histogram_over_time",
    "histogram_ridges",
    "inner_product_vs_ode",
    "layer_distances",
    "layer_histograms",
    "metastable_counts",
    "pca_trajectories",
    "phase_diagram",
    "phase_diagram_grid",
    "plateau_lifetimes",
    "sphere_trajectories",
    "trajectories",
]

# ---------------------------------------------------------------------------------------------
# Style. Set on each artist rather than through rcParams so that nothing global is touched.

DPI = 150
TITLE_SIZE = 11
LABEL_SIZE = 10
TICK_SIZE = 8.5
LEGEND_SIZE = 8.5

SEQUENTIAL_CMAP = "viridis"
HISTOGRAM_CMAP = "magma"
CYCLIC_CMAP = "twilight"

DATA_COLOR = "#31688e"  # viridis blue
THEORY_COLOR = "#d1495b"  # red, distinct from every viridis hue
BAND_COLOR = "#9fb8cc"
SPHERE_COLOR = "#dfe6ee"

TIME_LABEL = r"time $t$"
BETA_LABEL = r"inverse temperature $\beta$"
INNER_LABEL = r"$\langle x_i, x_j\rangle$"
FRACTION_LABEL = r"fraction of pairs with $\langle x_i, x_j\rangle \geq 1-\delta$"
GAMMA_CURVE_LABEL = r"$\Gamma_{\infty,\delta}$: $\gamma_\beta(t) = 1-\delta$ (limit $d\to\infty$)"


def _outlined(width: float, color: str = "black", alpha: float = 0.55):
    """Path effects drawing a thin dark halo so a line reads on both dark and light pixels."""
    return [patheffects.Stroke(linewidth=width, foreground=color, alpha=alpha), patheffects.Normal()]


def _new_figure(width: float, height: float, *, layout: str | None = "constrained") -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def _style(fig: Figure) -> None:
    """The shared look: font sizes of titles, labels, ticks and legends; 2-D spines trimmed."""
    for ax in fig.axes:
        ax.title.set_fontsize(TITLE_SIZE)
        axes_names = ("xaxis", "yaxis", "zaxis") if ax.name == "3d" else ("xaxis", "yaxis")
        for name in axes_names:
            getattr(ax, name).label.set_fontsize(LABEL_SIZE)
        ax.tick_params(labelsize=TICK_SIZE)
        legend = ax.get_legend()
        if legend is not None:
            for text in legend.get_texts():
                text.set_fontsize(LEGEND_SIZE)
        if getattr(ax, "_attnflow_despine", False):
            ax.spines[["top", "right"]].set_visible(False)
    for legend in fig.legends:
        for text in legend.get_texts():
            text.set_fontsize(LEGEND_SIZE)
    for text in fig.findobj(Text):
        text.set_usetex(False)


def _despine(*axes) -> None:
    for ax in axes:
        ax._attnflow_despine = True
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.set_axisbelow(True)


def _save(fig: Figure, path) -> None:
    if path is None:
        return
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    fmt = ext if ext in fig.canvas.get_supported_filetypes() else "png"
    fig.savefig(path, dpi=DPI, format=fmt)


def _finish(fig: Figure, path) -> Figure:
    _style(fig)
    _save(fig, path)
    return fig


def _fmt_number(value: float) -> str:
    """Mathtext for a parameter value: 10^{-3} for powers of ten, else a short decimal."""
    value = float(value)
    if value > 0:
        exponent = math.log10(value)
        if abs(exponent - round(exponent)) < 1e-9 and abs(exponent) >= 3:
            return rf"10^{{{int(round(exponent))}}}"
    return f"{value:g}"


def _params(**values) -> str:
    symbols = {"d": "d", "n": "n", "beta": r"\beta", "delta": r"\delta"}
    parts = [
        rf"${symbols.get(key, key)} = {_fmt_number(val)}$"
        for key, val in values.items()
        if val is not None
    ]
    return ", ".join(parts)


def _title(head: str, title: str | None, **params) -> str:
    text = title if title is not None else head
    extra = _params(**params)
    return f"{text}\n{extra}" if extra else text


# ---------------------------------------------------------------------------------------------
# Input checks. Every error names the argument and the expected shape.


def _array(name: str, value, shape_doc: str, ndim: int | None = None) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(
            f"{name} must be a numeric array of shape {shape_doc}; got {type(value).__name__}"
        ) from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape_doc} ({ndim}-D); got shape {arr.shape}")
    return arr


def _axis_values(name: str, value, shape_doc: str = "(T,)") -> np.ndarray:
    """A 1-D, finite, strictly increasing coordinate array (times, betas)."""
    arr = _array(name, value, shape_doc, 1)
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if np.any(np.diff(arr) <= 0):
        raise ValueError(f"{name} must be strictly increasing")
    return arr


def _series(name: str, value, ts: np.ndarray, *, allow_nan: bool = True) -> np.ndarray:
    arr = _array(name, value, "(T,) with T = len(ts)", 1)
    if arr.shape[0] != ts.shape[0]:
        raise ValueError(
            f"{name} must have shape (T,) with T = len(ts) = {ts.shape[0]}; got shape {arr.shape}"
        )
    if not allow_nan and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _states(name: str, value, ts: np.ndarray, *, d=None) -> np.ndarray:
    """Particle states xs of shape (T, n, d) matching ts."""
    arr = _array(name, value, "(T, n, d)", 3)
    if arr.shape[0] != ts.shape[0]:
        raise ValueError(
            f"{name} must have shape (T, n, d) with T = len(ts) = {ts.shape[0]}; "
            f"got shape {arr.shape}"
        )
    if arr.shape[1] == 0:
        raise ValueError(f"{name} holds no particles (n = 0)")
    if d is not None and arr.shape[2] not in np.atleast_1d(d):
        wanted = " or ".join(str(k) for k in np.atleast_1d(d))
        raise ValueError(
            f"{name} must hold points in dimension d = {wanted}, shape (T, n, {wanted}); "
            f"got d = {arr.shape[2]} (shape {arr.shape})"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def _fraction(name: str, value, betas: np.ndarray, ts: np.ndarray) -> np.ndarray:
    expected = (betas.shape[0], ts.shape[0])
    arr = _array(name, value, f"(len(betas), len(ts)) = {expected}", 2)
    if arr.shape != expected:
        hint = " (transposed? rows are betas, columns are times)" if arr.shape == expected[::-1] else ""
        raise ValueError(
            f"{name} must have shape (len(betas), len(ts)) = {expected}; got {arr.shape}{hint}"
        )
    finite = arr[np.isfinite(arr)]
    if finite.size and (finite.min() < -1e-9 or finite.max() > 1 + 1e-9):
        raise ValueError(
            f"{name} holds fractions and must lie in [0, 1]; "
            f"got values in [{finite.min():.3g}, {finite.max():.3g}]"
        )
    return arr


def _gamma_curve(value, name: str = "gamma_curve") -> tuple[np.ndarray, np.ndarray]:
    try:
        t_star, betas = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (t_star, betas) of 1-D arrays of equal length") from None
    t_star = _array(f"{name}[0] (t_star)", t_star, "(K,)", 1)
    betas = _array(f"{name}[1] (betas)", betas, "(K,)", 1)
    if t_star.shape != betas.shape:
        raise ValueError(
            f"{name} must be a pair (t_star, betas) of equal length; "
            f"got lengths {t_star.shape[0]} and {betas.shape[0]}"
        )
    # t* = inf where γ never reaches 1 − δ; a gap in the line says so.
    return np.where(np.isfinite(t_star), t_star, np.nan), betas


def _centers_to_edges(c: np.ndarray) -> np.ndarray:
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = 0.5 * (c[1:] + c[:-1])
    return np.concatenate([[2 * c[0] - mid[0]], mid, [2 * c[-1] - mid[-1]]])


def _set_range(ax, ts: np.ndarray, *, logx: bool = False) -> None:
    if logx:
        positive = ts[ts > 0]
        if positive.size == 0:
            raise ValueError("ts must contain positive times for a logarithmic time axis (logx=True)")
        ax.set_xscale("log")
        lo, hi = positive[0], positive[-1]
    else:
        lo, hi = ts[0], ts[-1]
    if hi > lo:
        ax.set_xlim(lo, hi)


def _integer_axis(ax, values: np.ndarray) -> None:
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=4, integer=True, min_n_ticks=2))
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 1.0
    ax.set_ylim(0, top + max(0.6, 0.08 * top))


def _subsample(count: int, limit: int) -> np.ndarray:
    if count <= limit:
        return np.arange(count)
    return np.unique(np.round(np.linspace(0, count - 1, limit)).astype(int))


# ---------------------------------------------------------------------------------------------
# Phase diagrams ([GLPR] Fig. 3)


def _phase_panel(ax, ts, betas, fraction, curve):
    mesh = ax.pcolormesh(
        _centers_to_edges(ts),
        _centers_to_edges(betas),
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
            path_effects=_outlined(3.2),
            gid="gamma_curve",
        )
    if ts.size > 1:
        ax.set_xlim(ts[0], ts[-1])
    if betas.size > 1:
        ax.set_ylim(betas[0], betas[-1])
    return mesh, line


def _curve_legend(fig, line) -> None:
    """Legend for a light line drawn over a heat map: the swatch gets a dark background."""
    from matplotlib.legend_handler import HandlerTuple

    swatch = Patch(facecolor="0.3", edgecolor="none")
    # Outside the axes: inside, any legend would hide part of the heat map.
    fig.legend(handles=[(swatch, line)], labels=[line.get_label()], loc="outside lower center",
               frameon=False, handler_map={tuple: HandlerTuple(ndivide=1, pad=0)},
               handlelength=3.0)


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
    ts = _axis_values("ts", ts)
    betas = _axis_values("betas", betas, "(B,)")
    fraction = _fraction("fraction", fraction, betas, ts)
    curve = None if gamma_curve is None else _gamma_curve(gamma_curve)

    fig = _new_figure(6.4, 4.9)
    ax = fig.add_subplot()
    mesh, line = _phase_panel(ax, ts, betas, fraction, curve)
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(BETA_LABEL)
    ax.set_title(_title("Clustering phase diagram", title, d=d, n=n, delta=delta))
    _fraction_colorbar(fig, mesh, ax)
    if line is not None:
        _curve_legend(fig, line)
    return _finish(fig, path)


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

    fractions_by_d maps d to a (B, T) array as in ``phase_diagram`` (panels sorted by d), or
    panel titles (strings, kept in order) to such arrays, e.g. the weight ensembles of Fig. 5.
    gamma_curve is one pair (t_star, betas) drawn in every panel, or a mapping key → pair.
    """
    ts = _axis_values("ts", ts)
    betas = _axis_values("betas", betas, "(B,)")
    if not isinstance(fractions_by_d, Mapping) or len(fractions_by_d) == 0:
        raise ValueError("fractions_by_d must be a non-empty mapping {d: array (len(betas), len(ts))}")
    labelled = all(isinstance(k, str) for k in fractions_by_d)
    panels = []
    for key in (list(fractions_by_d) if labelled else sorted(fractions_by_d)):
        if not labelled:
            try:
                key = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"fractions_by_d keys must be dimensions d (integers) or panel titles "
                                 f"(strings); got {key!r}") from None
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

    ncols = min(int(ncols), len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = _new_figure(3.3 * ncols + 1.1, 2.75 * nrows + 1.0)
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
        _title("Clustering phase diagrams" + ("" if labelled else " by dimension"), title, n=n, delta=delta),
        fontsize=TITLE_SIZE,
    )
    if line is not None:
        _curve_legend(fig, line)
    return _finish(fig, path)


# ---------------------------------------------------------------------------------------------
# Trajectories


def _cluster_count_panel(ax, ts, n_clusters, xlabel) -> None:
    """The lower panel shared by trajectory and energy plots: cluster count as an integer step plot."""
    ax.step(ts, n_clusters, where="post", color=DATA_COLOR, linewidth=1.6, gid="n_clusters")
    _integer_axis(ax, n_clusters)
    ax.set_ylabel("clusters")
    ax.set_xlabel(xlabel)
    _despine(ax)


def _angle_ticks(ax, lo: float, hi: float) -> None:
    step = math.pi / 2
    while (hi - lo) / step > 8:
        step *= 2

    def label(y, _pos):
        k = int(round(y / (math.pi / 2)))
        if abs(y - k * math.pi / 2) > 1e-6:
            return f"{y:.2g}"
        if k == 0:
            return "0"
        if k % 2 == 0:
            m = k // 2
            return {1: r"$\pi$", -1: r"$-\pi$"}.get(m, rf"${m}\pi$")
        return {1: r"$\pi/2$", -1: r"$-\pi/2$"}.get(k, rf"${k}\pi/2$")

    ax.yaxis.set_major_locator(ticker.MultipleLocator(step))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(label))


def unwrapped_angles(xs) -> np.ndarray:
    """Angles θ_i(t) of points x_i(t) = (cos θ_i, sin θ_i), continuous in time: (T, n) from (T, n, 2).

    Unwrapping fixes each θ_i up to a multiple of 2π; it is chosen so that the final angles lie
    in one window (c, c + 2π] whose cut c sits in the widest gap between final angles, so a
    cluster is never split into two bands at ±π.
    """
    xs = np.asarray(xs, dtype=float)
    theta = np.unwrap(np.arctan2(xs[..., 1], xs[..., 0]), axis=0)
    final = np.mod(theta[-1], 2 * np.pi)
    if final.size > 1:
        ordered = np.sort(final)
        gaps = np.diff(np.concatenate([ordered, [ordered[0] + 2 * np.pi]]))
        k = int(np.argmax(gaps))
        cut = float(np.angle(np.exp(1j * (ordered[k] + gaps[k] / 2))))  # in (−π, π]
        # Of the two windows bounded by the cut, the one whose centre lies in [−π, π].
        window_start = cut - 2 * np.pi if cut > 0 else cut
    else:
        window_start = -np.pi
    shift = 2 * np.pi * np.floor((window_start + 2 * np.pi - theta[-1]) / (2 * np.pi))
    return theta + shift


def _cyclic_colors(angles: np.ndarray) -> np.ndarray:
    """Twilight colours of angles, with its near-white ends darkened to read on white paper."""
    rgba = mpl.colormaps[CYCLIC_CMAP](mcolors.Normalize(-math.pi, math.pi)(np.angle(np.exp(1j * angles))))
    return _darken(rgba)


def _darken(rgba: np.ndarray, max_luminance: float = 0.62) -> np.ndarray:
    rgba = np.array(rgba, dtype=float)
    lum = rgba[..., :3] @ np.array([0.2126, 0.7152, 0.0722])
    scale = np.minimum(1.0, max_luminance / np.maximum(lum, 1e-12))
    rgba[..., :3] *= scale[..., None]
    return rgba


def _cyclic_cmap():
    base = mpl.colormaps[CYCLIC_CMAP]
    return mcolors.ListedColormap(_darken(base(np.linspace(0, 1, 256))), name="twilight_dark")


def circle_trajectories(ts, xs, *, n_clusters=None, beta=None, title=None, path=None) -> Figure:
    """Angles θ_i(t) of particles on the circle (d = 2) against time, [GLPR] Fig. 4.

    xs (T, n, 2). Each line is one particle's unwrapped angle, coloured by its final angle on
    a cyclic colour map, so particles ending in the same cluster share a colour. n_clusters (T,)
    adds a lower panel with the cluster count as a step plot.
    """
    ts = _axis_values("ts", ts)
    xs = _states("xs", xs, ts, d=2)
    if n_clusters is not None:
        n_clusters = _series("n_clusters", n_clusters, ts)
    theta = unwrapped_angles(xs)  # (T, n)
    cmap = _cyclic_cmap()
    norm = mcolors.Normalize(-math.pi, math.pi)

    fig = _new_figure(7.4, 5.6 if n_clusters is not None else 4.4)
    if n_clusters is not None:
        ax, ax_count = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    else:
        ax, ax_count = fig.add_subplot(), None
    lines = LineCollection(
        [np.column_stack([ts, theta[:, i]]) for i in range(theta.shape[1])],
        colors=_cyclic_colors(theta[-1]),
        linewidths=0.9 if theta.shape[1] <= 64 else 0.5,
        gid="trajectories",
    )
    ax.add_collection(lines)
    lo, hi = float(theta.min()), float(theta.max())
    pad = 0.04 * max(hi - lo, 1e-3)
    ax.set_ylim(lo - pad, hi + pad)
    _set_range(ax, ts)
    _angle_ticks(ax, lo, hi)
    ax.set_ylabel(r"angle $\theta_i(t)$ (unwrapped)")
    ax.set_title(_title("Particles on the circle", title, n=xs.shape[1], beta=beta))
    _despine(ax)
    cbar = fig.colorbar(ScalarMappable(norm, cmap), ax=ax, aspect=25, pad=0.015)
    cbar.set_ticks([-math.pi, -math.pi / 2, 0, math.pi / 2, math.pi])
    cbar.set_ticklabels([r"$-\pi$", r"$-\pi/2$", "0", r"$\pi/2$", r"$\pi$"])
    cbar.set_label(r"final angle $\theta_i(T)$ mod $2\pi$", fontsize=LABEL_SIZE)
    if ax_count is not None:
        _cluster_count_panel(ax_count, ts, n_clusters, TIME_LABEL)
        # Keep the two time axes aligned although only the top one has a colour bar.
        fig.colorbar(ScalarMappable(norm, cmap), ax=ax_count, aspect=25, pad=0.015).ax.set_visible(False)
    else:
        ax.set_xlabel(TIME_LABEL)
    return _finish(fig, path)


def _view_vector(elev: float, azim: float) -> np.ndarray:
    """Unit vector from the origin towards the viewer of a 3-D axes with this elev/azim."""
    e, a = np.radians(elev), np.radians(azim)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def _auto_view(points: np.ndarray, elev, azim) -> tuple[float, float]:
    """Camera angles (degrees) looking at the centroid of points, a little off-centre.

    Where the particles end is where the picture happens; the default camera of matplotlib
    would as often put it on the rim or behind the sphere. Given angles are kept.
    """
    m = points.mean(axis=0)
    if np.linalg.norm(m) < 0.2:  # no dominant direction: a generic oblique view
        auto_elev, auto_azim = 22.0, -55.0
    else:
        m = m / np.linalg.norm(m)
        auto_azim = math.degrees(math.atan2(m[1], m[0])) + 25.0
        auto_elev = float(np.clip(math.degrees(math.asin(np.clip(m[2], -1, 1))) + 12.0, -60, 60))
    return (auto_elev if elev is None else float(elev)), (auto_azim if azim is None else float(azim))


def _draw_sphere(ax, elev: float, azim: float, *, resolution: int = 72) -> None:
    """Shaded unit sphere (zorder 2), its silhouette and a faint equator; no 3-D box.

    Only faces turned to the viewer are drawn, opaque and without antialiasing: translucent
    polygons show every shared edge as a seam. Translucency is emulated by the callers, who
    draw what lies behind the sphere above it (zorder > 2) but faint. Lambertian shading,
    lit from the upper left of the view.
    """
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    view = _view_vector(elev, azim)
    lon = np.linspace(-np.pi, np.pi, 2 * resolution + 1)
    lat = np.linspace(-np.pi / 2, np.pi / 2, resolution + 1)
    lo, la = np.meshgrid(lon, lat, indexing="ij")
    grid = np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=-1)
    quads = np.stack([grid[:-1, :-1], grid[1:, :-1], grid[1:, 1:], grid[:-1, 1:]], axis=2)
    quads = quads.reshape(-1, 4, 3)
    normals = quads.mean(axis=1)
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    front = normals @ view > -0.02
    quads, normals = quads[front], normals[front]
    right = np.cross([0.0, 0.0, 1.0], view) if abs(view[2]) < 0.99 else np.array([0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(view, right)
    light = view + 0.8 * up - 0.6 * right
    light /= np.linalg.norm(light)
    lambert = np.clip(normals @ light, 0.0, 1.0)
    shade = 0.72 + 0.28 * lambert + 0.08 * lambert**12  # ambient + diffuse + a soft highlight
    base = np.array(mcolors.to_rgb(SPHERE_COLOR))
    rgba = np.concatenate([np.clip(base[None] * shade[:, None], 0, 1),
                           np.ones((len(quads), 1))], axis=1)
    ax.add_collection3d(
        Poly3DCollection(quads, facecolors=rgba, edgecolors="none", linewidths=0,
                         antialiased=False, zorder=2, gid="sphere"),
        autolim=False,
    )
    # Silhouette: the great circle orthogonal to the viewing direction.
    a = np.cross(view, [0.0, 0.0, 1.0] if abs(view[2]) < 0.9 else [1.0, 0.0, 0.0])
    a /= np.linalg.norm(a)
    b = np.cross(view, a)
    s = np.linspace(0, 2 * np.pi, 200)
    rim = np.outer(np.cos(s), a) + np.outer(np.sin(s), b)
    ax.plot(rim[:, 0], rim[:, 1], rim[:, 2], color="0.55", linewidth=0.8, zorder=5)
    eq = np.column_stack([np.cos(s), np.sin(s), np.zeros_like(s)])
    front = eq @ view >= 0
    for mask, alpha in ((front, 0.55), (~front, 0.15)):
        ax.plot(*np.where(mask[:, None], eq, np.nan).T, color="0.45", linewidth=0.6,
                linestyle=(0, (3, 3)), alpha=alpha, zorder=3)
    ax.set_xlim(-1, 1)
    ax.set_ylim(-1, 1)
    ax.set_zlim(-1, 1)
    ax.set_box_aspect((1, 1, 1), zoom=1.4)
    ax.set_axis_off()
    ax.computed_zorder = False


def _trajectory_segments_3d(ax, xs, colors, view, *, linewidth):
    """Per-particle 3-D polylines; parts behind the sphere are drawn faint, as if seen through it."""
    from mpl_toolkits.mplot3d.art3d import Line3DCollection

    seg = np.stack([xs[:-1], xs[1:]], axis=2)  # (T-1, n, 2, 3)
    mid_depth = seg.mean(axis=2) @ view  # (T-1, n)
    rgba = np.broadcast_to(colors[None], seg.shape[:2] + (4,)).copy()
    front = mid_depth >= 0
    for is_front, alpha, zorder in ((False, 0.2, 3), (True, 0.9, 4)):
        mask = front == is_front
        if not mask.any():
            continue
        c = rgba[mask]
        c[:, 3] = alpha
        ax.add_collection3d(
            Line3DCollection(seg[mask], colors=c, linewidths=linewidth, zorder=zorder,
                             gid="trajectories_front" if is_front else "trajectories_back")
        )


def _particle_colors(values: np.ndarray) -> np.ndarray:
    # Upper end of viridis stops short of yellow: yellow lines vanish on the light sphere.
    spread = np.ptp(values)
    scaled = (values - values.min()) / spread if spread > 0 else np.full_like(values, 0.5)
    return mpl.colormaps[SEQUENTIAL_CMAP](0.05 + 0.75 * scaled)


def _depth_faded(colors: np.ndarray, points: np.ndarray, view: np.ndarray | None) -> np.ndarray:
    """Colours of points with alpha lowered behind the sphere (as seen through a shell).

    Done by hand: matplotlib's depthshade rescales by the spread of depths, so a single tight
    cluster (every point at one depth) would come out washed out.
    """
    rgba = np.array(colors, dtype=float, copy=True)
    if view is not None:
        rgba[:, 3] = 0.25 + 0.75 * np.clip((points @ view + 0.15) / 0.3, 0.0, 1.0)
    return rgba


def _endpoint_markers(ax, start, end, colors, *, size=14.0, view=None):
    """Hollow markers at the initial points, filled ones at the final points (2-D or 3-D)."""
    three_d = start.shape[1] == 3
    kw = dict(depthshade=False) if three_d else {}
    ax.scatter(*start.T, s=size, facecolors="none", edgecolors=_depth_faded(colors, start, view),
               linewidths=0.8, zorder=5, label="initial position", gid="initial", **kw)
    ax.scatter(*end.T, s=size * 1.6, c=_depth_faded(colors, end, view),
               edgecolors=_depth_faded(np.tile(mcolors.to_rgba("0.15"), (len(end), 1)), end, view),
               linewidths=0.4, zorder=6, label="final position", gid="final", **kw)


def sphere_trajectories(ts, xs, *, beta=None, elev=None, azim=None, title=None, path=None) -> Figure:
    """Trajectories of particles on S² (d = 3) over a shaded sphere.

    xs (T, n, 3). Lines are coloured by the particle's initial height; hollow markers are the
    initial points, filled markers the final ones. Parts behind the sphere are drawn faint, as
    through a translucent shell. elev/azim (degrees): camera; by default it faces the final
    centroid, slightly off-centre.
    """
    ts = _axis_values("ts", ts)
    xs = _states("xs", xs, ts, d=3)
    elev, azim = _auto_view(xs[-1], elev, azim)
    fig = _new_figure(5.6, 5.6)
    ax = fig.add_subplot(projection="3d")
    ax.view_init(elev=elev, azim=azim)
    _draw_sphere(ax, elev, azim)
    colors = _particle_colors(xs[0, :, 2])
    view = _view_vector(elev, azim)
    _trajectory_segments_3d(ax, xs, colors, view, linewidth=0.9 if xs.shape[1] <= 128 else 0.5)
    _endpoint_markers(ax, xs[0], xs[-1], colors, view=view)
    ax.set_title(
        _title(rf"Particles on the sphere $S^2$, $t \in [{ts[0]:g}, {ts[-1]:g}]$", title,
               n=xs.shape[1], beta=beta),
        pad=0,
    )
    _endpoint_legend(fig, ts)
    return _finish(fig, path)


def _endpoint_legend(fig: Figure, ts: np.ndarray) -> None:
    """Legend for the hollow (initial) and filled (final) markers of the trajectory plots."""
    handles = [
        Line2D([], [], marker="o", linestyle="", markerfacecolor="none", markeredgecolor="0.3",
               label=f"initial ($t = {ts[0]:g}$)"),
        Line2D([], [], marker="o", linestyle="", markerfacecolor="0.3", markeredgecolor="0.15",
               label=f"final ($t = {ts[-1]:g}$)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=2, frameon=False)


def _principal_components(points: np.ndarray, k: int):
    """Top-k principal directions of points (m, d) and their explained variance ratios."""
    centered = points - points.mean(axis=0)
    cov = centered.T @ centered / max(points.shape[0] - 1, 1)
    evals, evecs = np.linalg.eigh(cov)
    order = np.argsort(evals)[::-1]
    evals, evecs = np.clip(evals[order], 0, None), evecs[:, order]
    total = evals.sum()
    ratio = evals / total if total > 0 else np.zeros_like(evals)
    # Fix the sign of each direction (eigh leaves it arbitrary) for reproducible pictures.
    signs = np.sign(evecs[np.argmax(np.abs(evecs), axis=0), np.arange(evecs.shape[1])])
    evecs = evecs * np.where(signs == 0, 1, signs)
    return points.mean(axis=0), evecs[:, :k], ratio[:k]


def pca_trajectories(ts, xs, *, n_components=2, beta=None, title=None, path=None) -> Figure:
    """Trajectories in d > 3 projected on the top principal components of all states stacked.

    xs (T, n, d). Axes are labelled with the share of variance each component explains.
    n_components: 2 (flat plot) or 3 (3-D axes).
    """
    ts = _axis_values("ts", ts)
    xs = _states("xs", xs, ts)
    if n_components not in (2, 3):
        raise ValueError(f"n_components must be 2 or 3; got {n_components!r}")
    T, n, d = xs.shape
    if d < n_components:
        raise ValueError(f"xs has d = {d} < n_components = {n_components}")
    mean, directions, ratio = _principal_components(xs.reshape(T * n, d), n_components)
    proj = (xs - mean) @ directions  # (T, n, k)
    colors = _particle_colors(proj[0, :, 0])
    labels = [f"PC{k + 1} ({100 * r:.1f}% of variance)" for k, r in enumerate(ratio)]
    head = rf"Particles in $d = {d}$: top principal components"
    if n_components == 2:
        fig = _new_figure(6.0, 5.6)
        ax = fig.add_subplot()
        ax.add_collection(
            LineCollection([proj[:, i] for i in range(n)], colors=colors, alpha=0.85,
                           linewidths=0.9 if n <= 128 else 0.5, gid="trajectories")
        )
        _endpoint_markers(ax, proj[0], proj[-1], colors)
        ax.set_aspect("equal", adjustable="datalim")
        ax.autoscale_view()
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        _despine(ax)
    else:
        from mpl_toolkits.mplot3d.art3d import Line3DCollection

        fig = _new_figure(6.0, 6.0)
        ax = fig.add_subplot(projection="3d")
        ax.add_collection3d(Line3DCollection([proj[:, i] for i in range(n)], colors=colors,
                                             linewidths=0.8, gid="trajectories"))
        _endpoint_markers(ax, proj[0], proj[-1], colors)
        lo, hi = proj.min(axis=(0, 1)), proj.max(axis=(0, 1))
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_zlim(lo[2], hi[2])
        ax.set_box_aspect(tuple(np.maximum(hi - lo, 1e-9)), zoom=0.9)
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        ax.set_zlabel(labels[2])
    ax.set_title(_title(head, title, n=n, beta=beta))
    _endpoint_legend(fig, ts)
    return _finish(fig, path)


def trajectories(ts, xs, **kw) -> Figure:
    """Trajectory plot chosen by dimension: circle (d = 2), sphere (d = 3), PCA (d > 3).

    Keywords pass through (beta, title, path, ...); n_clusters is used only for d = 2.
    """
    xs_arr = _array("xs", xs, "(T, n, d)", 3)
    d = xs_arr.shape[2]
    if d == 2:
        return circle_trajectories(ts, xs_arr, **kw)
    kw.pop("n_clusters", None)
    if d == 3:
        return sphere_trajectories(ts, xs_arr, **kw)
    if d > 3:
        return pca_trajectories(ts, xs_arr, **kw)
    raise ValueError(f"xs must hold points in dimension d >= 2; got d = {d}")


# ---------------------------------------------------------------------------------------------
# Histograms of pairwise inner products ([GLPR] Fig. 1, Thm 6.9)


def _histogram_inputs(ts, edges, counts):
    ts = _axis_values("ts", ts)
    edges = _axis_values("edges", edges, "(bins + 1,)")
    if edges.size < 2:
        raise ValueError("edges must hold at least two bin edges")
    counts = _array("counts", counts, "(T, bins) = (len(ts), len(edges) - 1)", 2)
    expected = (ts.size, edges.size - 1)
    if counts.shape != expected:
        raise ValueError(
            f"counts must have shape (len(ts), len(edges) - 1) = {expected}; got {counts.shape}"
        )
    if not np.all(np.isfinite(counts)) or counts.min() < 0:
        raise ValueError("counts must be finite and non-negative")
    return ts, edges, counts


def histogram_over_time(
    ts, edges, counts, *, gamma=None, normalize=True, log=True, beta=None, n=None, d=None,
    title=None, path=None,
) -> Figure:
    """Histogram of pairwise inner products over time as a heat map (t horizontal).

    counts (T, bins) with bin edges (bins + 1,). normalize: divide each time's column by its
    total (fraction of pairs per bin); log: logarithmic colour scale. gamma (T,) overlays the
    equiangular solution γ_β(t) of [GLPR] (6.9), around which the histogram concentrates as
    d → ∞ (Thm 6.9).
    """
    ts, edges, counts = _histogram_inputs(ts, edges, counts)
    if gamma is not None:
        gamma = _series("gamma", gamma, ts)
    values = counts.copy()
    if normalize:
        totals = values.sum(axis=1, keepdims=True)
        values = np.divide(values, totals, out=np.zeros_like(values), where=totals > 0)
    cmap = mpl.colormaps[HISTOGRAM_CMAP]
    cmap = cmap.with_extremes(bad=cmap(0.0), under=cmap(0.0))
    vmax = float(values.max()) if values.max() > 0 else 1.0
    if log:
        positive = values[values > 0]
        vmin = max(float(positive.min()), vmax * 1e-5) if positive.size else vmax * 1e-5
        norm = mcolors.LogNorm(vmin=vmin, vmax=vmax)
        shown = np.ma.masked_less_equal(values, 0)
    else:
        norm = mcolors.Normalize(vmin=0, vmax=vmax)
        shown = values

    fig = _new_figure(7.0, 4.6)
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(_centers_to_edges(ts), edges, shown.T, cmap=cmap, norm=norm,
                         shading="flat", rasterized=True)
    if ts.size > 1:
        ax.set_xlim(ts[0], ts[-1])
    ax.set_ylim(edges[0], edges[-1])
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(INNER_LABEL + r", $i < j$")
    ax.set_title(_title("Pairwise inner products over time", title, d=d, n=n, beta=beta))
    cbar = fig.colorbar(mesh, ax=ax, aspect=30, pad=0.02)
    cbar.set_label("fraction of pairs in bin" if normalize else "number of pairs", fontsize=LABEL_SIZE)
    if gamma is not None:
        (line,) = ax.plot(ts, gamma, color="#56d4ff", linewidth=1.4, linestyle=(0, (5, 2.5)),
                          path_effects=_outlined(2.8), gid="gamma",
                          label=r"equiangular ODE $\gamma_\beta(t)$, [GLPR] (6.9)")
        _curve_legend(fig, line)
    return _finish(fig, path)


def histogram_ridges(
    ts, edges, counts, *, times=None, n_ridges=6, gamma=None, title=None, path=None
) -> Figure:
    """Ridge plot: the inner-product histogram at a handful of times, stacked upwards in time.

    times: the times to show (nearest saved time is used); else n_ridges evenly spaced ones.
    Each ridge is normalized to unit height; gamma (T,) marks γ_β(t) on each ridge.
    """
    ts, edges, counts = _histogram_inputs(ts, edges, counts)
    if gamma is not None:
        gamma = _series("gamma", gamma, ts)
    if times is None:
        idx = _subsample(ts.size, max(int(n_ridges), 1))
    else:
        wanted = _array("times", times, "(k,)", 1)
        idx = np.unique([int(np.argmin(np.abs(ts - t))) for t in wanted])
    centers = 0.5 * (edges[1:] + edges[:-1])
    spacing = 0.75
    colors = mpl.colormaps[SEQUENTIAL_CMAP](np.linspace(0.15, 0.9, idx.size))

    fig = _new_figure(6.4, 1.2 + 0.55 * idx.size + 1.2)
    ax = fig.add_subplot()
    for k, i in enumerate(idx):
        row = counts[i]
        height = row / row.max() if row.max() > 0 else row
        base = k * spacing
        z = 2 * (idx.size - k)  # lower ridges in front of the ones above
        ax.fill_between(centers, base, base + height, step="mid", color=colors[k], linewidth=0,
                        zorder=z)
        ax.step(centers, base + height, where="mid", color="0.15", linewidth=0.7, zorder=z + 1)
        ax.axhline(base, color="0.15", linewidth=0.5, zorder=z + 1)
        ax.text(edges[0] - 0.02 * (edges[-1] - edges[0]), base + 0.05, f"$t = {ts[i]:g}$",
                ha="right", va="bottom", fontsize=TICK_SIZE)
        if gamma is not None:
            # Above every ridge, and short, so it is never hidden by the ridge in front.
            ax.plot([gamma[i]] * 2, [base, base + 0.6 * spacing], color=THEORY_COLOR,
                    linewidth=1.6, solid_capstyle="butt", zorder=3 * idx.size + 10,
                    path_effects=_outlined(3.0, "white", 0.9), gid=f"gamma_{k}")
    ax.set_xlim(edges[0], edges[-1])
    ax.set_ylim(0, spacing * (idx.size - 1) + 1.15)
    ax.set_yticks([])
    ax.spines[["left", "top", "right"]].set_visible(False)
    ax.set_xlabel(INNER_LABEL + r", $i < j$")
    ax.set_title(title if title is not None else "Pairwise inner products at selected times")
    if gamma is not None:
        fig.legend(handles=[Line2D([], [], color=THEORY_COLOR, linewidth=1.6,
                                   label=r"$\gamma_\beta(t)$, [GLPR] (6.9)")],
                   loc="outside lower center", frameon=False)
    return _finish(fig, path)


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
    ticks = []
    for t in sorted((m * 10.0**e for e in range(-6, 1) for m in (1, 2, 5)), reverse=True):
        if t <= top * (1 + 1e-9) and math.sqrt(t) >= gap and (not ticks or math.sqrt(ticks[-1]) - math.sqrt(t) >= gap):
            ticks.append(t)
    return [0.0] + ticks[::-1]


def layer_histograms(
    layers, edges, counts, *, simulated=None, sim_layers=None, betas=None, start=None, model=None,
    source=None, max_panels=30, title=None, path=None,
) -> Figure:
    """[GLPR] Fig. 1: the histogram of ⟨x_i, x_j⟩ (i < j) of a model's token states, one small panel per layer.

    counts (L, bins) per layer with bin edges (bins + 1,), shown as fractions of pairs on one y-scale
    shared by every panel. simulated (len(betas), K, bins): the simulation started from layer
    ``start``, drawn as outlines over the model's histograms at sim_layers (K,). At most
    ``max_panels`` layers are drawn (evenly spread, first, last and start kept).
    """
    layers = _array("layers", layers, "(L,)", 1).astype(int)
    edges = _axis_values("edges", edges, "(bins + 1,)")
    counts = _array("counts", counts, "(L, bins)", 2)
    if counts.shape != (layers.size, edges.size - 1):
        raise ValueError(f"counts must have shape (len(layers), len(edges) - 1) = {(layers.size, edges.size - 1)}; "
                         f"got {counts.shape}")
    fractions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    sim = {}
    colors = []
    if simulated is not None:
        sim_layers = _array("sim_layers", sim_layers, "(K,)", 1).astype(int)
        betas = list(np.atleast_1d(betas))
        simulated = _array("simulated", simulated, "(len(betas), K, bins)", 3)
        if simulated.shape != (len(betas), sim_layers.size, edges.size - 1):
            raise ValueError(f"simulated must have shape (len(betas), len(sim_layers), bins) = "
                             f"{(len(betas), sim_layers.size, edges.size - 1)}; got {simulated.shape}")
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

    fig = _new_figure(1.1 + 1.6 * ncols, 1.0 + 1.25 * nrows + (0.3 if sim else 0.0))
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
        handles = [Patch(color=DATA_COLOR, alpha=0.8, label="model")]
        handles += [Line2D([], [], color=c, linewidth=1.4,
                           label=f"{_model_label(model)} from layer {start}, $\\beta = {_fmt_number(b)}$")
                    for c, b in zip(colors, betas)]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4), frameon=False)
    _finish(fig, None)
    for ax in axes.flat:
        ax.title.set_fontsize(TICK_SIZE + 0.5)  # small multiples: titles the size of tick labels
    _save(fig, path)
    return fig


def layer_distances(
    layers, distances, betas, *, start=None, layer_time=1.0, model=None, source=None, title=None, path=None,
) -> Figure:
    """W1 between the model's and the simulation's inner-product distributions, per layer and β.

    distances (len(betas), K) at layers (K,); layer ℓ is time t = (ℓ − start)·layer_time of the
    simulation (a second x-axis on top).
    """
    layers = _axis_values("layers", layers, "(K,)")
    betas = list(np.atleast_1d(betas))
    distances = _array("distances", distances, "(len(betas), K)", 2)
    if distances.shape != (len(betas), layers.size):
        raise ValueError(f"distances must have shape (len(betas), len(layers)) = {(len(betas), layers.size)}; "
                         f"got {distances.shape}")
    fig = _new_figure(5.6, 3.6)
    ax = fig.add_subplot()
    _despine(ax)
    for color, beta, row in zip(_beta_colors(len(betas)), betas, distances):
        ax.plot(layers, row, color=color, marker="o", markersize=3.5, linewidth=1.4,
                label=rf"$\beta = {_fmt_number(beta)}$")
    ax.set_xlabel("layer $\\ell$")
    ax.set_ylabel(r"$W_1$(model, simulation)")
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    if start is not None:
        tau = float(layer_time)
        top = ax.secondary_xaxis("top", functions=(lambda l: (l - start) * tau, lambda t: start + t / tau))
        top.set_xlabel(TIME_LABEL + f" of {_model_label(model)}", fontsize=LABEL_SIZE)
        top.tick_params(labelsize=TICK_SIZE)
    ax.legend(frameon=False, loc="best")
    head = "Distance between the model's and the simulated inner products"
    ax.set_title(title if title is not None else head + (f"\n{source}" if source else ""))
    return _finish(fig, path)


# ---------------------------------------------------------------------------------------------
# Energy staircase and metastability (arXiv 2410.06833)


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
    ts, energy, n_clusters, *, plateaus=None, levels=None, xlabel=TIME_LABEL, logx=False,
    beta=None, n=None, title=None, path=None,
) -> Figure:
    """Normalized energy (top) and cluster count (bottom) against a shared time axis.

    energy (T,): typically (1/n²) Σ_ij e^{β(⟨x_i,x_j⟩−1)} (MODEL.md §1.3). n_clusters (T,) or None.
    plateaus: [(t_start, t_end, value), ...] shaded as bands (saddle-to-saddle staircase of
    arXiv 2410.06833). levels: numbers or (value, label) pairs drawn as labelled guide lines,
    e.g. the theoretical Σ_q m_q²/n² of cluster sizes m_q. logx: logarithmic time axis.
    """
    ts = _axis_values("ts", ts)
    energy = _series("energy", energy, ts)
    if n_clusters is not None:
        n_clusters = _series("n_clusters", n_clusters, ts)
    plateaus = _plateaus(plateaus or [])
    levels = _levels(levels or [])

    fig = _new_figure(7.2, 5.6 if n_clusters is not None else 3.9)
    if n_clusters is not None:
        ax_e, ax_c = fig.subplots(2, 1, sharex=True, height_ratios=(2, 1))
    else:
        ax_e, ax_c = fig.add_subplot(), None
    handles = []
    for t0, t1, value in plateaus:
        for ax in (ax_e, ax_c):
            if ax is not None:
                ax.axvspan(t0, t1, color=BAND_COLOR, alpha=0.28, linewidth=0, zorder=0)
        ax_e.plot([t0, t1], [value, value], color=BAND_COLOR, linewidth=5, alpha=0.8,
                  solid_capstyle="butt", zorder=1)
    if plateaus:
        handles.append(Patch(color=BAND_COLOR, alpha=0.5, label="plateau"))
    for value, _ in levels:
        ax_e.axhline(value, color="0.45", linewidth=0.8, linestyle=(0, (4, 3)), zorder=1)
    if levels:
        handles.append(Line2D([], [], color="0.45", linewidth=0.8, linestyle=(0, (4, 3)),
                              label=r"level $\sum_q m_q^2/n^2$"))
    (line,) = ax_e.plot(ts, energy, color=DATA_COLOR, linewidth=1.6, zorder=3, label="energy",
                        gid="energy")
    handles.insert(0, line)
    _set_range(ax_e, ts, logx=logx)
    finite = energy[np.isfinite(energy)]
    span = [finite.min(), finite.max()] if finite.size else [0.0, 1.0]
    span += [v for v, _ in levels] + [v for *_, v in plateaus]
    lo, hi = min(span), max(span)
    pad = 0.06 * max(hi - lo, 1e-3)
    ax_e.set_ylim(lo - pad, hi + pad)
    _label_levels(ax_e, levels)
    ax_e.set_ylabel("normalized energy\n" + r"$2\beta e^{-\beta} E_\beta$")
    fig.suptitle(_title("Energy and clusters", title, n=n, beta=beta), fontsize=TITLE_SIZE)
    ax_e.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncols=len(handles),
                frameon=False, borderaxespad=0.2)
    _despine(ax_e)
    if ax_c is not None:
        _cluster_count_panel(ax_c, ts, n_clusters, xlabel)
    else:
        ax_e.set_xlabel(xlabel)
    return _finish(fig, path)


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
        ax.annotate(label, xy=(1.0, y), xycoords="axes fraction", xytext=(4, 0),
                    textcoords="offset points", ha="left", va="center", fontsize=TICK_SIZE,
                    color="0.3", annotation_clip=False)


def _pairs(name: str, value, ts: np.ndarray) -> np.ndarray:
    arr = _array(name, value, "(T, P) or (T, n, n)")
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
    ts, inner_products, gamma, *, d=None, n=None, beta=None, max_lines=300, title=None, path=None,
) -> Figure:
    """Pairwise inner products of a simulation against the equiangular ODE γ(t), [GLPR] (6.9).

    inner_products (T, P) for P pairs, or (T, n, n) Gram matrices (pairs i < j are taken).
    Top: each pair as a thin grey line with the min–max band and γ(t) in bold. Bottom: max and
    mean |⟨x_i,x_j⟩ − γ(t)| on a log axis; with d given, the scale √(log d / d) of Thm 6.9.
    """
    ts = _axis_values("ts", ts)
    ips = _pairs("inner_products", inner_products, ts)
    gamma = _series("gamma", gamma, ts)
    fig = _new_figure(7.0, 5.8)
    ax, ax_err = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    lo, hi = ips.min(axis=1), ips.max(axis=1)
    ax.fill_between(ts, lo, hi, color=BAND_COLOR, alpha=0.45, linewidth=0, label="min–max over pairs")
    shown = ips[:, _subsample(ips.shape[1], int(max_lines))]
    ax.add_collection(LineCollection([np.column_stack([ts, c]) for c in shown.T], colors="0.35",
                                     linewidths=0.35, alpha=0.35, gid="pairs"))
    ax.plot([], [], color="0.35", linewidth=0.6, label=r"pairs $\langle x_i(t), x_j(t)\rangle$")
    ax.plot(ts, gamma, color=THEORY_COLOR, linewidth=2.2, label=r"ODE $\gamma(t)$", gid="gamma")
    _set_range(ax, ts)
    both = np.concatenate([lo, hi, gamma])
    both = both[np.isfinite(both)]
    pad = 0.04 * max(np.ptp(both), 1e-3)
    ax.set_ylim(both.min() - pad, both.max() + pad)
    ax.set_ylabel(INNER_LABEL)
    fig.suptitle(_title("Inner products against the equiangular ODE", title, d=d, n=n, beta=beta),
                 fontsize=TITLE_SIZE)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=3, frameon=False, borderaxespad=0.2)
    _despine(ax)

    err = np.abs(ips - gamma[:, None])
    for values, label, style in ((err.max(axis=1), "max over pairs", "-"),
                                 (err.mean(axis=1), "mean over pairs", "--")):
        ax_err.plot(ts, np.where(values > 0, values, np.nan), color=DATA_COLOR, linestyle=style,
                    linewidth=1.4, label=label)
    if d is not None and d > 1:
        ax_err.axhline(math.sqrt(math.log(d) / d), color="0.4", linewidth=0.9, linestyle=":",
                       label=r"$\sqrt{\log d\,/\,d}$")
    ax_err.set_yscale("log")
    ax_err.set_ylabel(r"$|\langle x_i, x_j\rangle - \gamma(t)|$")
    ax_err.set_xlabel(TIME_LABEL)
    ax_err.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, borderaxespad=0.2)
    _despine(ax_err)
    return _finish(fig, path)


def cluster_count_vs_time(
    ts, counts_by_beta, *, logx=False, n=None, d=None, title=None, path=None
) -> Figure:
    """Metastability: median and interquartile band of the cluster count over time, per β.

    counts_by_beta maps β to an array (members, T) of cluster counts (a (T,) array is one
    member). logx: logarithmic time axis, where the slow merges of [GLPR] §6.3 show up.
    """
    ts = _axis_values("ts", ts)
    if not isinstance(counts_by_beta, Mapping) or len(counts_by_beta) == 0:
        raise ValueError("counts_by_beta must be a non-empty mapping {beta: array (members, T)}")
    series = []
    for key in sorted(counts_by_beta, key=float):
        arr = _array(f"counts_by_beta[{key!r}]", counts_by_beta[key], "(members, T)")
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] != ts.size:
            raise ValueError(
                f"counts_by_beta[{key!r}] must have shape (members, T) with T = len(ts) = {ts.size}; "
                f"got {arr.shape}"
            )
        series.append((float(key), arr))
    colors = mpl.colormaps[SEQUENTIAL_CMAP](np.linspace(0.05, 0.85, len(series)))
    fig = _new_figure(7.2, 4.4)
    ax = fig.add_subplot()
    top = 1.0
    for (beta, arr), color in zip(series, colors):
        q1, med, q3 = np.percentile(arr, [25, 50, 75], axis=0)
        ax.fill_between(ts, q1, q3, step="post", color=color, alpha=0.22, linewidth=0)
        ax.step(ts, med, where="post", color=color, linewidth=1.8, label=rf"$\beta = {beta:g}$",
                gid=f"median_beta_{beta:g}")
        top = max(top, float(np.nanmax(q3)))
    _set_range(ax, ts, logx=logx)
    _integer_axis(ax, np.array([top]))
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel("number of clusters")
    members = ", ".join(sorted({str(a.shape[0]) for _, a in series}))
    ax.set_title(_title(f"Cluster count: median and interquartile range over {members} runs",
                        title, d=d, n=n))
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, borderaxespad=0.2)
    _despine(ax)
    return _finish(fig, path)


# ---------------------------------------------------------------------------------------------
# The attention matrix as a random walk


def _keyed_2d(name: str, value, key: str, convert, shape: str, axis: int, size: int, size_name: str) -> list:
    """A non-empty mapping {key: 2-D array of ``shape``} as (convert(key), array) pairs sorted by key;
    the array's ``axis`` must have ``size`` entries, and a 1-D array gains the other axis."""
    if not isinstance(value, Mapping) or len(value) == 0:
        raise ValueError(f"{name} must be a non-empty mapping {{{key}: array {shape}}}")
    out = []
    for k in sorted(value, key=convert):
        arr = _array(f"{name}[{k!r}]", value[k], shape)
        if arr.ndim == 1:
            arr = np.expand_dims(arr, 1 - axis)
        if arr.ndim != 2 or arr.shape[axis] != size:
            raise ValueError(f"{name}[{k!r}] must have shape {shape} with {size_name} = {size}; got {arr.shape}")
        out.append((convert(k), arr.astype(float)))
    return out


def _by_beta(name: str, value, ts: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """A mapping {β: array (members, T)} as a list sorted by β, each array 2-D."""
    return _keyed_2d(name, value, "beta", float, "(members, T)", 1, ts.size, "T = len(ts)")


def _mean_band(ax, ts, series, colors, lo, hi) -> None:
    """Mean over members per β, with a band of ± one standard deviation clipped to [lo, hi]."""
    for (beta, arr), color in zip(series, colors):
        mean = np.nanmean(arr, axis=0)
        if arr.shape[0] > 1:
            sd = np.nanstd(arr, axis=0)
            ax.fill_between(ts, np.clip(mean - sd, lo, hi), np.clip(mean + sd, lo, hi), color=color, alpha=0.2,
                            linewidth=0)
        ax.plot(ts, mean, color=color, linewidth=1.7, label=rf"$\beta = {beta:g}$")


def attention_statistics(
    ts, effective_tokens, spectral_gap, stationary, *, n=None, d=None, logx=False, title=None, path=None,
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
    ts = _axis_values("ts", ts)
    eff = _by_beta("effective_tokens", effective_tokens, ts)
    gap = _by_beta("spectral_gap", spectral_gap, ts)
    if not isinstance(stationary, Mapping) or len(stationary) == 0:
        raise ValueError("stationary must be a non-empty mapping {beta: array (n,)}")
    pis = [(float(k), _array(f"stationary[{k!r}]", stationary[k], "(n,)", 1)) for k in sorted(stationary, key=float)]
    n_tokens = pis[0][1].size
    if any(p.size != n_tokens for _, p in pis):
        raise ValueError("stationary laws must all have the same number of tokens n")
    n = n_tokens if n is None else n
    colors = [DATA_COLOR] if len(eff) == 1 else mpl.colormaps[SEQUENTIAL_CMAP](np.linspace(0.05, 0.85, len(eff)))

    fig = _new_figure(10.5, 6.4)
    grid = fig.add_gridspec(2, 2, width_ratios=(1.55, 1.0))
    ax_eff = fig.add_subplot(grid[0, 0])
    ax_gap = fig.add_subplot(grid[1, 0], sharex=ax_eff)
    ax_pi = fig.add_subplot(grid[:, 1])

    _mean_band(ax_eff, ts, eff, colors, 1.0, float(n))
    ax_eff.axhline(n, color="0.45", linewidth=0.9, linestyle=(0, (4, 3)))
    ax_eff.annotate(r"$n$: uniform attention", xy=(0.99, n), xycoords=("axes fraction", "data"),
                    xytext=(0, -3), textcoords="offset points", ha="right", va="top", fontsize=TICK_SIZE,
                    color="0.3")
    ax_eff.set_ylim(0.0, n * 1.06)
    ax_eff.set_ylabel("attended tokens\n" + r"mean over $i$ of $e^{H_i}$")
    ax_eff.tick_params(labelbottom=False)
    ax_eff.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncols=min(len(eff), 5), frameon=False,
                  borderaxespad=0.2)
    _despine(ax_eff)

    _mean_band(ax_gap, ts, gap, colors, 0.0, 1.0)
    _set_range(ax_gap, ts, logx=logx)
    ax_gap.set_ylim(-0.03, 1.03)
    ax_gap.set_ylabel("spectral gap\n" + r"$1 - |\lambda_2(A)|$")
    ax_gap.set_xlabel(TIME_LABEL)
    _despine(ax_gap)

    tokens = np.arange(1, n_tokens + 1)
    # token 1 always labelled: a causal mask puts all of π there
    step = next((s for s in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000) if n_tokens // s <= 12), n_tokens // 10)
    token_ticks = np.unique([1, *range(step, n_tokens + 1, step)])
    if len(pis) == 1:
        beta, pi = pis[0]
        ax_pi.bar(tokens, pi, width=0.8, color=DATA_COLOR, linewidth=0)
        ax_pi.axhline(1.0 / n_tokens, color=THEORY_COLOR, linewidth=1.1, linestyle=(0, (4, 3)),
                      label=r"uniform $1/n$")
        ax_pi.set_xlim(0.4, n_tokens + 0.6)
        ax_pi.set_ylim(0.0, max(1.15 * float(np.nanmax(pi)), 1.5 / n_tokens))
        ax_pi.set_xlabel(r"token $i$")
        ax_pi.set_ylabel(r"stationary law $\pi_i$")
        ax_pi.legend(loc="upper right", frameon=False)
        ax_pi.set_title(rf"stationary law $\pi$ at $t = {ts[-1]:g}$" + "\n" + rf"($\beta = {beta:g}$, first seed)")
        ax_pi.set_xticks(token_ticks)
        _despine(ax_pi)
    else:
        betas = np.array([b for b, _ in pis])
        mesh = ax_pi.pcolormesh(_centers_to_edges(tokens.astype(float)), np.arange(len(pis) + 1),
                                np.stack([p for _, p in pis]), cmap=SEQUENTIAL_CMAP, shading="flat",
                                vmin=0.0)
        ax_pi.set_yticks(np.arange(len(pis)) + 0.5, [f"{b:g}" for b in betas])
        ax_pi.set_ylabel(r"$\beta$")
        ax_pi.set_xlabel(r"token $i$")
        ax_pi.set_xticks(token_ticks)
        ax_pi.set_title(rf"stationary law $\pi$ at $t = {ts[-1]:g}$" + "\n" + r"(first seed of each $\beta$)")
        fig.colorbar(mesh, ax=ax_pi, label=r"$\pi_i$", shrink=0.9)
    fig.suptitle(_title("Attention as a random walk on the tokens", title, n=n, d=d), fontsize=TITLE_SIZE)
    return _finish(fig, path)


# ---------------------------------------------------------------------------------------------
# The law of metastable clusters

D_COLORS = {2: DATA_COLOR, 3: "#35b779"}  # viridis blue and green


def _counts_by_d(name: str, value, betas: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """A mapping {d: array (len(betas), members)} as a list sorted by d, each array 2-D."""
    return _keyed_2d(name, value, "d", int, "(len(betas), members)", 0, betas.size, "len(betas)")


def _nan_quantiles(arr: np.ndarray, qs) -> np.ndarray:
    """Percentiles over members (axis 1) ignoring NaN (members without a plateau); NaN where all are."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows are expected
        return np.nanpercentile(arr, qs, axis=1)


def _plain_log_ticks(axis) -> None:
    """Log axis ticks at 1, 2, 5 × 10^k written as plain numbers."""
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def metastable_counts(betas, counts_by_d, *, kstar=None, lstar=None, n=None, delta=None, title=None,
                      path=None) -> Figure:
    """The law of metastable clusters: clusters of the first metastable state vs β, on log-log axes.

    counts_by_d maps d to an array (len(betas), members) of counts (NaN where a member had no
    plateau): each d is drawn as its median over members with the interquartile band. kstar:
    (β grid, k*(β)), the fastest linearly unstable mode on the circle, drawn as a staircase, with
    its large-β asymptote √(2β). lstar: (β grid, ℓ*(β)) on S², drawn (when d = 3 is present) as
    ℓ*(ℓ*+1)/(2√3), the mean number of maxima of a random spherical harmonic of degree ℓ*.
    """
    betas = _axis_values("betas", betas, "(len(betas),)")
    if np.any(betas <= 0):
        raise ValueError("betas must be positive for a logarithmic β axis")
    series = _counts_by_d("counts_by_d", counts_by_d, betas)
    fig = _new_figure(6.4, 4.6)
    ax = fig.add_subplot()
    lo, hi = float(betas.min()), float(betas.max())
    grid = np.geomspace(lo, hi, 200)
    top = 1.0
    if kstar is not None:
        kb, kk = (np.asarray(a, dtype=float) for a in kstar)
        ax.plot(kb, kk, drawstyle="steps-post", color=THEORY_COLOR, linewidth=1.6,
                label=r"$k^*(\beta) = \mathrm{argmax}_k\, k^2 I_k(\beta)$ (circle)", zorder=3)
        top = max(top, float(kk.max()))
    ax.plot(grid, np.sqrt(2 * grid), color="0.25", linewidth=1.1, linestyle=(0, (4, 3)),
            label=r"$\sqrt{2\beta}$", zorder=3)
    for d, arr in series:
        color = D_COLORS.get(d, "0.4")
        q1, med, q3 = _nan_quantiles(arr, [25, 50, 75])
        members = arr.shape[1]
        ax.fill_between(betas, q1, q3, color=color, alpha=0.25, linewidth=0)
        ax.plot(betas, med, color=color, marker="o", markersize=4.5, linewidth=1.4, zorder=4,
                label=rf"$d = {d}$: median and interquartile range ({members} runs)", gid=f"median_d{d}")
        if np.isfinite(q3).any():
            top = max(top, float(np.nanmax(q3)))
        if d == 3 and lstar is not None:
            lb, ll = (np.asarray(a, dtype=float) for a in lstar)
            ax.plot(lb, ll * (ll + 1) / (2 * np.sqrt(3)), color=color, linewidth=1.2, linestyle=(0, (1, 2)),
                    label=r"$S^2$: $\ell^*(\ell^*+1)/2\sqrt{3}$ (maxima of a degree-$\ell^*$ harmonic)")
            top = max(top, float((ll * (ll + 1)).max() / (2 * np.sqrt(3))))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo / 1.15, hi * 1.15)
    ax.set_ylim(0.8, top * 1.5)
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel("clusters of the first metastable state")
    ax.set_title(_title("The law of metastable clusters", title, n=n, delta=delta))
    ax.legend(loc="upper left", frameon=False, borderaxespad=0.3)
    _despine(ax)
    return _finish(fig, path)


def plateau_lifetimes(betas, lifetimes_by_d, censored_by_d=None, *, t1=None, fits=None, n=None, title=None,
                      path=None) -> Figure:
    """Lifetime T₂ of the first metastable state vs β on semilog axes (log T₂ against β).

    lifetimes_by_d maps d to an array (len(betas), members) of T₂ (NaN: no plateau); censored_by_d
    the same shape of booleans: members still on their plateau at the end of the run (T₂ = t1),
    drawn as open triangles at t1. Every other member is a dot; the line is the median over all
    members, censored ones counted as t1 (a lower bound where they are half or more), drawn where
    at least half the members have a lifetime (NaN: none, e.g. no metastable state). fits maps d
    to (a, b) of the least-squares line log T₂ = a + b β (fitted by the caller, usually on the
    uncensored members), drawn dashed with b in the legend.
    """
    betas = _axis_values("betas", betas, "(len(betas),)")
    series = _counts_by_d("lifetimes_by_d", lifetimes_by_d, betas)
    censored = {}
    for d, arr in series:
        cens = np.zeros(arr.shape, dtype=bool) if censored_by_d is None or d not in censored_by_d else \
            np.asarray(censored_by_d[d], dtype=bool).reshape(arr.shape)
        censored[d] = cens
    fig = _new_figure(6.4, 4.4)
    ax = fig.add_subplot()
    span = float(betas.max() - betas.min()) or 1.0
    offsets = {d: (k - (len(series) - 1) / 2) * 0.006 * span for k, (d, _) in enumerate(series)}
    any_censored = False
    for d, arr in series:
        color = D_COLORS.get(d, "0.4")
        cens = censored[d]
        x = np.broadcast_to(betas[:, None] + offsets[d], arr.shape)
        ok = np.isfinite(arr) & ~cens
        ax.scatter(x[ok], arr[ok], s=11, color=color, alpha=0.45, linewidth=0, zorder=3)
        done = np.isfinite(arr) & cens
        if done.any():
            any_censored = True
            ax.scatter(x[done], arr[done], s=26, marker="^", facecolor="none", edgecolor=color, linewidth=0.9,
                       zorder=3)
        (med,) = _nan_quantiles(arr, [50])
        med[2 * np.isfinite(arr).sum(axis=1) < arr.shape[1]] = np.nan
        ax.plot(betas + offsets[d], med, color=color, linewidth=1.4, marker="o", markersize=4, zorder=4,
                label=rf"$d = {d}$: median (censored runs at $t_1$)")
        if fits and d in fits and fits[d] is not None and np.all(np.isfinite(fits[d])):
            a, b = fits[d]
            grid = np.linspace(float(betas.min()), float(betas.max()), 100)
            ax.plot(grid, np.exp(a + b * grid), color=THEORY_COLOR if len(series) == 1 else color,
                    linewidth=1.3, linestyle=(0, (4, 3)), zorder=4,
                    label=rf"fit $\log T_2 = a + b\beta$, $b = {b:+.3g}$" + ("" if len(series) == 1 else f" (d = {d})"))
    if any_censored:
        ax.scatter([], [], s=26, marker="^", facecolor="none", edgecolor="0.3", linewidth=0.9,
                   label="still on the plateau at " + (r"$t_1$" if t1 is None else rf"$t_1 = {_fmt_number(t1)}$"))
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    finite = np.concatenate([a[np.isfinite(a)] for _, a in series])
    if finite.size:
        ax.set_ylim(float(finite.min()) / 1.6, float(finite.max()) * 4.0)
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel(r"lifetime $T_2$ (time of the first merge)")
    ax.set_title(_title("Lifetime of the first metastable state", title, n=n))
    ax.legend(loc="upper right", frameon=False, borderaxespad=0.3)
    _despine(ax)
    return _finish(fig, path)


# ---------------------------------------------------------------------------------------------
# Animation


def _gif_palette(frames, key_colors, backgrounds):
    """One 256-colour palette for all frames, with room for the particles' colours.

    Pillow's default per-frame adaptive palette spends its entries on the sphere's shading, so
    a small cluster of coloured markers comes out grey. Here the palette is cut from sampled
    frames plus a swatch of the key colours (pure and blended into the backgrounds, as faded
    markers and trails are), weighted to a third of the sample.
    """
    from PIL import Image

    sample = [np.asarray(frames[k]) for k in _subsample(len(frames), 6)]
    stack = np.concatenate(sample, axis=0)
    key = np.asarray(key_colors, dtype=float)[:, :3]
    tones = [key]
    for bg in backgrounds:
        bg = np.asarray(mcolors.to_rgb(bg))
        tones += [a * key + (1 - a) * bg for a in (0.25, 0.5, 0.75)]
    tones = np.unique(np.round(np.concatenate(tones) * 255).astype(np.uint8), axis=0)
    width = stack.shape[1]
    rows = max(1, stack.shape[0] // 2)
    reps = max(1, rows * width // (len(tones) * 16))
    swatch = np.repeat(tones, reps * 16, axis=0)
    swatch = np.resize(swatch, (rows * width, 3)).reshape(rows, width, 3)
    composite = Image.fromarray(np.concatenate([stack, swatch], axis=0), "RGB")
    # Exact entries for paper, text and the greys of the chrome, so none of them shifts hue.
    fixed = [(255, 255, 255), (0, 0, 0)] + [(g, g, g) for g in (38, 115, 128, 140, 153)]
    cut = composite.quantize(colors=256 - len(fixed), method=Image.Quantize.MEDIANCUT,
                             dither=Image.Dither.NONE)
    learned = np.array(cut.getpalette()[: 3 * (256 - len(fixed))]).reshape(-1, 3)
    # Drop learned near-duplicates of the fixed entries: Pillow's palette lookup is
    # approximate and could otherwise turn white paper into 252-grey.
    near = np.abs(learned[:, None, :] - np.array(fixed)[None]).max(axis=2).min(axis=1) <= 8
    entries = [v for rgb in fixed for v in rgb] + learned[~near].ravel().tolist()
    palette = Image.new("P", (1, 1))
    palette.putpalette(entries + [0] * (768 - len(entries)))
    return palette


def _gif_writer_class():
    from matplotlib.animation import AbstractMovieWriter

    class GifWriter(AbstractMovieWriter):
        """PillowWriter with one shared palette (see _gif_palette) and no dithering."""

        def __init__(self, fps, key_colors, backgrounds):
            super().__init__(fps=fps)
            self._key_colors, self._backgrounds = key_colors, backgrounds

        def setup(self, fig, outfile, dpi=None):
            super().setup(fig, outfile, dpi=dpi)
            self._frames = []

        def grab_frame(self, **savefig_kwargs):
            from io import BytesIO

            from PIL import Image

            buf = BytesIO()
            self.fig.savefig(buf, **{**savefig_kwargs, "format": "rgba", "dpi": self.dpi})
            rgba = Image.frombuffer("RGBA", self.frame_size, buf.getbuffer(), "raw", "RGBA", 0, 1)
            white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
            self._frames.append(Image.alpha_composite(white, rgba).convert("RGB"))

        def finish(self):
            from PIL import Image

            if not self._frames:  # drawing failed; let that error surface, not this one
                return
            palette = _gif_palette(self._frames, self._key_colors, self._backgrounds)
            frames = [f.quantize(palette=palette, dither=Image.Dither.NONE) for f in self._frames]
            frames[0].save(self.outfile, save_all=True, append_images=frames[1:],
                           duration=max(int(round(1000 / self.fps)), 20), loop=0)

    return GifWriter


def animate_sphere(
    ts, xs, *, path, fps=15, beta=None, max_frames=150, dpi=100, trail=8, elev=None, azim=None,
) -> Figure:
    """Animated GIF of particles moving on the shaded sphere (d = 3) or on the circle (d = 2).

    xs (T, n, d). At most max_frames frames (evenly subsampled), the time in the title, short
    fading trails of the last ``trail`` frames. Returns the figure showing the last frame.
    """
    from matplotlib.animation import FuncAnimation

    ts = _axis_values("ts", ts)
    xs = _states("xs", xs, ts, d=(2, 3))
    if path is None:
        raise ValueError("path is required: animate_sphere writes a GIF")
    if int(max_frames) < 1 or float(fps) <= 0:
        raise ValueError("max_frames must be >= 1 and fps > 0")
    frames = _subsample(ts.size, int(max_frames))
    d = xs.shape[2]
    three_d = d == 3
    n = xs.shape[1]
    if three_d:
        colors = _particle_colors(xs[0, :, 2])
    else:
        colors = _cyclic_colors(np.arctan2(xs[-1, :, 1], xs[-1, :, 0]))

    fig = _new_figure(4.6, 4.6, layout=None)  # fixed layout: no jitter between frames
    if three_d:
        elev, azim = _auto_view(xs[-1], elev, azim)
        view = _view_vector(elev, azim)
        ax = fig.add_axes((0.0, 0.0, 1.0, 0.9), projection="3d")
        ax.view_init(elev=elev, azim=azim)
        _draw_sphere(ax, elev, azim, resolution=36)
    else:
        ax = fig.add_axes((0.08, 0.06, 0.84, 0.82))
        s = np.linspace(0, 2 * np.pi, 400)
        ax.plot(np.cos(s), np.sin(s), color="0.6", linewidth=1.0, zorder=1)
        ax.set_xlim(-1.15, 1.15)
        ax.set_ylim(-1.15, 1.15)
        ax.set_aspect("equal")
        ax.set_axis_off()
    head = _title("Particles on the sphere" if three_d else "Particles on the circle", None,
                  n=n, beta=beta)
    title = fig.text(0.5, 0.97, "", ha="center", va="top", fontsize=TITLE_SIZE)
    if three_d:
        from mpl_toolkits.mplot3d.art3d import Line3DCollection

        trail_lines = Line3DCollection(np.zeros((1, 2, 3)), linewidths=1.2, zorder=3)
        ax.add_collection3d(trail_lines, autolim=False)
    else:
        trail_lines = LineCollection(np.zeros((1, 2, 2)), linewidths=2.0, zorder=2)
        ax.add_collection(trail_lines, autolim=False)
    state = {"points": None}

    def draw(frame_number):
        k = int(frames[frame_number])
        history = frames[max(0, frame_number - int(trail)): frame_number + 1]
        if history.size > 1:
            segs = np.stack([xs[history[:-1]], xs[history[1:]]], axis=2).reshape(-1, 2, d)
            rgba = np.tile(colors, (history.size - 1, 1))
            rgba[:, 3] = np.repeat(np.linspace(0.1, 0.8, history.size - 1), n)
            if three_d:
                rgba[:, 3] *= _depth_faded(rgba, segs[:, 1], view)[:, 3]
        else:
            segs, rgba = np.zeros((1, 2, d)), np.zeros((1, 4))
        trail_lines.set_segments(segs)
        trail_lines.set_color(rgba)
        if state["points"] is not None:
            state["points"].remove()
        pts = xs[k]
        if three_d:
            state["points"] = ax.scatter(
                pts[:, 0], pts[:, 1], pts[:, 2], s=26, c=_depth_faded(colors, pts, view),
                edgecolors=_depth_faded(np.tile(mcolors.to_rgba("0.15"), (n, 1)), pts, view),
                linewidths=0.4, depthshade=False, zorder=6, gid="particles")
        else:
            state["points"] = ax.scatter(pts[:, 0], pts[:, 1], s=34, c=colors, edgecolors="0.15",
                                         linewidths=0.5, zorder=3, gid="particles")
        title.set_text(f"{head.splitlines()[0]}\n{_params(n=n, beta=beta)}   $t = {ts[k]:.2f}$")
        return [state["points"], trail_lines, title]

    anim = FuncAnimation(fig, draw, frames=len(frames), interval=1000 / fps, blit=False, repeat=False)
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    _style(fig)
    writer = _gif_writer_class()(fps, colors, ["white", SPHERE_COLOR, "0.6"])
    anim.save(path, writer=writer, dpi=dpi)
    draw(len(frames) - 1)
    return fig
