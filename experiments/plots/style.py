"""Shared look of every figure: style constants, figure creation and saving, input checks, axes, colours, the sphere."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Literal

import matplotlib as mpl
import numpy as np
from matplotlib import colors as mcolors
from matplotlib import patheffects, ticker
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Text

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
DENSITY_CMAP = "magma"  # a density on S², in the figures and the interactive globe alike

DATA_COLOR = "#31688e"  # viridis blue
THEORY_COLOR = "#d1495b"  # red, distinct from every viridis hue
BAND_COLOR = "#9fb8cc"
SPHERE_COLOR = "#dfe6ee"

TIME_LABEL = r"time $t$"
BETA_LABEL = r"inverse temperature $\beta$"
INNER_LABEL = r"$\langle x_i, x_j\rangle$"
FRACTION_LABEL = r"fraction of pairs with $\langle x_i, x_j\rangle \geq 1-\delta$"
GAMMA_CURVE_LABEL = r"$\Gamma_{\infty,\delta}$: $\gamma_\beta(t) = 1-\delta$ (limit $d\to\infty$)"


def outlined(width: float, color: str = "black", alpha: float = 0.55):
    """Path effects drawing a thin dark halo so a line reads on both dark and light pixels."""
    return [patheffects.Stroke(linewidth=width, foreground=color, alpha=alpha), patheffects.Normal()]


def new_figure(
    width: float, height: float, *, layout: Literal["constrained", "compressed", "tight"] | None = "constrained"
) -> Figure:
    """A figure of width × height inches at DPI on its own Agg canvas (no pyplot)."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def apply_style(fig: Figure) -> None:
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


def despine(*axes) -> None:
    """Light grid behind the data; top and right spines hidden when the figure is finished."""
    for ax in axes:
        ax._attnflow_despine = True
        ax.grid(True, color="0.9", linewidth=0.6)
        ax.set_axisbelow(True)


def save(fig: Figure, path) -> None:
    """Write fig to path (format from its extension, else PNG), creating its folder; nothing if path is None."""
    if path is None:
        return
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    ext = os.path.splitext(path)[1].lower().lstrip(".")
    fmt = ext if ext in fig.canvas.get_supported_filetypes() else "png"
    fig.savefig(path, dpi=DPI, format=fmt)


def finish(fig: Figure, path) -> Figure:
    """Apply the shared look, save to path (if given) and return the figure."""
    apply_style(fig)
    save(fig, path)
    return fig


def fmt_number(value: float) -> str:
    """Mathtext for a parameter value: 10^{-3} for powers of ten, else a short decimal."""
    value = float(value)
    if value > 0:
        exponent = math.log10(value)
        if abs(exponent - round(exponent)) < 1e-9 and abs(exponent) >= 3:
            return rf"10^{{{int(round(exponent))}}}"
    return f"{value:g}"


def params_text(**values) -> str:
    """Mathtext list of the given parameters, e.g. "$d = 2$, $\\beta = 4$"; None values are left out."""
    symbols = {"d": "d", "n": "n", "beta": r"\beta", "delta": r"\delta", "R0": "R_0"}
    counts = {"members", "seeds"}  # counts read as words: "32 members"
    parts = [
        f"{fmt_number(val)} {key}" if key in counts else rf"${symbols.get(key, key)} = {fmt_number(val)}$"
        for key, val in values.items()
        if val is not None
    ]
    return ", ".join(parts)


def title_text(head: str, title: str | None, *, member: str | None = None, **params) -> str:
    """title (or head when None), with a second line of the parameters given and, when given, the ensemble member
    drawn (e.g. "seed 0"), so that a figure of one member says which."""
    text = title if title is not None else head
    extra = ", ".join(p for p in (params_text(**params), member) if p)
    return f"{text}\n{extra}" if extra else text


def seed_text(seed) -> str | None:
    """The member a figure of one ensemble member draws, as its title names it: "seed 0" (None: no member)."""
    return None if seed is None else f"seed {int(seed)}"


# ---------------------------------------------------------------------------------------------
# Input checks. Every error names the argument and the expected shape.


def as_array(name: str, value, shape_doc: str, ndim: int | None = None) -> np.ndarray:
    """value as a float array, with ndim dimensions when given."""
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a numeric array of shape {shape_doc}; got {type(value).__name__}") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape_doc} ({ndim}-D); got shape {arr.shape}")
    return arr


def axis_values(name: str, value, shape_doc: str = "(T,)") -> np.ndarray:
    """A 1-D, finite, strictly increasing coordinate array (times, betas)."""
    arr = as_array(name, value, shape_doc, 1)
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    if np.any(np.diff(arr) <= 0):
        raise ValueError(f"{name} must be strictly increasing")
    return arr


def as_series(name: str, value, ts: np.ndarray, *, allow_nan: bool = True) -> np.ndarray:
    """A (T,) array of one value per time in ts."""
    arr = as_array(name, value, "(T,) with T = len(ts)", 1)
    if arr.shape[0] != ts.shape[0]:
        raise ValueError(f"{name} must have shape (T,) with T = len(ts) = {ts.shape[0]}; got shape {arr.shape}")
    if not allow_nan and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return arr


def as_states(name: str, value, ts: np.ndarray, *, d=None) -> np.ndarray:
    """Particle states xs of shape (T, n, d) matching ts."""
    arr = as_array(name, value, "(T, n, d)", 3)
    if arr.shape[0] != ts.shape[0]:
        raise ValueError(f"{name} must have shape (T, n, d) with T = len(ts) = {ts.shape[0]}; got shape {arr.shape}")
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


def keyed_2d(name: str, value, key: str, convert, shape: str, axis: int, size: int, size_name: str) -> list:
    """A non-empty mapping {key: 2-D array of ``shape``} as (convert(key), array) pairs sorted by key;
    the array's ``axis`` must have ``size`` entries, and a 1-D array gains the other axis."""
    if not isinstance(value, Mapping) or len(value) == 0:
        raise ValueError(f"{name} must be a non-empty mapping {{{key}: array {shape}}}")
    out = []
    for k in sorted(value, key=convert):
        arr = as_array(f"{name}[{k!r}]", value[k], shape)
        if arr.ndim == 1:
            arr = np.expand_dims(arr, 1 - axis)
        if arr.ndim != 2 or arr.shape[axis] != size:
            raise ValueError(f"{name}[{k!r}] must have shape {shape} with {size_name} = {size}; got {arr.shape}")
        out.append((convert(k), arr.astype(float)))
    return out


# ---------------------------------------------------------------------------------------------
# Axes, legends and colours used by several families of figures


def centers_to_edges(c: np.ndarray) -> np.ndarray:
    """Cell edges (len(c) + 1,) around increasing cell centres c, for pcolormesh."""
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = 0.5 * (c[1:] + c[:-1])
    return np.concatenate([[2 * c[0] - mid[0]], mid, [2 * c[-1] - mid[-1]]])


def set_range(ax, ts: np.ndarray, *, logx: bool = False) -> None:
    """Time axis spanning ts exactly (its positive part on a logarithmic axis)."""
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


def integer_axis(ax, values: np.ndarray) -> None:
    """Integer y ticks from 0 to just above the largest finite value."""
    ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=4, integer=True, min_n_ticks=2))
    finite = values[np.isfinite(values)]
    top = float(finite.max()) if finite.size else 1.0
    ax.set_ylim(0, top + max(0.6, 0.08 * top))


def grid_shape(count: int, max_cols: int = 3) -> tuple[int, int]:
    """Rows × columns for ``count`` panels, at most ``max_cols`` wide: the fewest rows that hold them, then the
    fewest columns that hold them in those rows (4 → 2 × 2, 5 → 2 × 3, 6 → 2 × 3, 7 → 3 × 3)."""
    if int(count) < 1 or int(max_cols) < 1:
        raise ValueError(f"grid_shape needs a positive panel count and column limit; got {count!r}, {max_cols!r}")
    rows = math.ceil(int(count) / int(max_cols))
    return rows, math.ceil(int(count) / rows)


DENSITY_FLOOR = (0.05, 0.5)
"""The lower end of a density's logarithmic colour scale (in units of the uniform density) lies in this range:
the smallest positive value, raised to 0.05 (emptier is drawn as 0.05) and at most 0.5 (below the uniform 1)."""


def density_limits(scaled) -> tuple[float, float]:
    """The limits of the logarithmic colour scale of a density in units of the uniform one (4πρ on S²), shared
    by the figure and the interactive globe: from the smallest positive value (within ``DENSITY_FLOOR``) to the
    largest, at least 2."""
    values = np.asarray(scaled, dtype=float)
    positive = values[np.isfinite(values) & (values > 0)]
    lo, hi = DENSITY_FLOOR
    floor = max(min(float(positive.min()), hi), lo) if positive.size else hi
    top = float(positive.max()) if positive.size else 1.0
    return floor, max(top, 2.0)


def plain_log_ticks(lo: float, hi: float) -> np.ndarray:
    """Ticks of a logarithmic scale on [lo, hi] written as plain numbers: 1, 2, 5 times the powers of ten within
    it where that gives at most 9 ticks, else the powers of ten alone (every second or third where they are many)."""
    lo, hi = float(lo), float(hi)
    if not (0 < lo < hi and math.isfinite(hi)):
        raise ValueError(f"a logarithmic scale needs 0 < lo < hi; got [{lo:g}, {hi:g}]")
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))

    def within(mantissas) -> list[float]:
        ticks = (float(f"{m}e{e}") for e in range(e0, e1 + 1) for m in mantissas)  # exact decimals: 0.05, 1e-05
        return [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]

    ticks = within((1, 2, 5))
    if 2 <= len(ticks) <= 9:
        return np.array(ticks)
    powers = within((1,))
    if len(powers) < 2:
        return np.array(ticks if len(ticks) >= 2 else [lo, hi])
    return np.array(powers[:: math.ceil(len(powers) / 8)])


def plain_number(value: float) -> str:
    """A tick label without exponents: 0.05, 0.5, 1, 20, 1000 (at most 4 significant digits)."""
    value = float(value)
    text = f"{value:.4g}"
    if "e" in text:
        text = f"{value:.{max(0, -math.floor(math.log10(abs(value))) + 3)}f}".rstrip("0").rstrip(".")
    return text


def plain_log_colorbar(cbar, lo: float, hi: float) -> None:
    """A logarithmic colour bar on [lo, hi] labelled in plain numbers (0.1, 0.2, 0.5, 1, 2, 5), never 4×10^0: the
    ticks of :func:`plain_log_ticks`, no minor labels."""
    ticks = plain_log_ticks(lo, hi)
    cbar.set_ticks(ticks, labels=[plain_number(t) for t in ticks])
    axis = cbar.ax.yaxis if cbar.orientation == "vertical" else cbar.ax.xaxis
    axis.set_minor_formatter(ticker.NullFormatter())


def subsample(count: int, limit: int) -> np.ndarray:
    """At most limit indices of range(count), evenly spread, first and last kept."""
    if count <= limit:
        return np.arange(count)
    return np.unique(np.round(np.linspace(0, count - 1, limit)).astype(int))


def curve_legend(fig, line) -> None:
    """Legend for a light line drawn over a heat map: the swatch gets a dark background."""
    from matplotlib.legend_handler import HandlerTuple

    swatch = Patch(facecolor="0.3", edgecolor="none")
    # Outside the axes: inside, any legend would hide part of the heat map.
    fig.legend(
        handles=[(swatch, line)],
        labels=[line.get_label()],
        loc="outside lower center",
        frameon=False,
        handler_map={tuple: HandlerTuple(ndivide=1, pad=0)},
        handlelength=3.0,
    )


def cluster_count_panel(ax, ts, n_clusters, xlabel) -> None:
    """The lower panel shared by trajectory and energy plots: cluster count as an integer step plot."""
    ax.step(ts, n_clusters, where="post", color=DATA_COLOR, linewidth=1.6, gid="n_clusters")
    integer_axis(ax, n_clusters)
    ax.set_ylabel("clusters")
    ax.set_xlabel(xlabel)
    despine(ax)


def angle_ticks(ax, lo: float, hi: float) -> None:
    """y ticks at multiples of π/2 (or of π, 2π, ... on long ranges) labelled in π."""
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


def sequential_colors(count: int) -> list:
    """``count`` colours spread along the sequential colour map (viridis, without its palest end)."""
    cmap = mpl.colormaps[SEQUENTIAL_CMAP]
    return [cmap(v) for v in np.linspace(0.05, 0.85, max(count, 1))]


def cyclic_colors(angles: np.ndarray) -> np.ndarray:
    """Twilight colours of angles, with its near-white ends darkened to read on white paper."""
    rgba = mpl.colormaps[CYCLIC_CMAP](mcolors.Normalize(-math.pi, math.pi)(np.angle(np.exp(1j * angles))))
    return darken(rgba)


def darken(rgba: np.ndarray, max_luminance: float = 0.62) -> np.ndarray:
    """Colours scaled down to a luminance of at most max_luminance."""
    rgba = np.array(rgba, dtype=float)
    lum = rgba[..., :3] @ np.array([0.2126, 0.7152, 0.0722])
    scale = np.minimum(1.0, max_luminance / np.maximum(lum, 1e-12))
    rgba[..., :3] *= scale[..., None]
    return rgba


def cyclic_cmap():
    """The cyclic colour map with its light ends darkened, as in cyclic_colors."""
    base = mpl.colormaps[CYCLIC_CMAP]
    return mcolors.ListedColormap(darken(base(np.linspace(0, 1, 256))), name="twilight_dark")


def particle_colors(values: np.ndarray) -> np.ndarray:
    """One viridis colour per particle from values (e.g. initial heights), scaled to their range."""
    # Upper end of viridis stops short of yellow: yellow lines vanish on the light sphere.
    spread = np.ptp(values)
    scaled = (values - values.min()) / spread if spread > 0 else np.full_like(values, 0.5)
    return mpl.colormaps[SEQUENTIAL_CMAP](0.05 + 0.75 * scaled)


# ---------------------------------------------------------------------------------------------
# The unit sphere S² in 3-D axes


def view_vector(elev: float, azim: float) -> np.ndarray:
    """Unit vector from the origin towards the viewer of a 3-D axes with this elev/azim."""
    e, a = np.radians(elev), np.radians(azim)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def auto_view(points: np.ndarray, elev, azim) -> tuple[float, float]:
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


def draw_sphere(ax, elev: float, azim: float, *, resolution: int = 72) -> None:
    """Shaded unit sphere (zorder 2), its silhouette and a faint equator; no 3-D box.

    Only faces turned to the viewer are drawn, opaque and without antialiasing: translucent
    polygons show every shared edge as a seam. Translucency is emulated by the callers, who
    draw what lies behind the sphere above it (zorder > 2) but faint. Lambertian shading,
    lit from the upper left of the view.
    """
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    view = view_vector(elev, azim)
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
    rgba = np.concatenate([np.clip(base[None] * shade[:, None], 0, 1), np.ones((len(quads), 1))], axis=1)
    ax.add_collection3d(
        Poly3DCollection(
            quads, facecolors=rgba, edgecolors="none", linewidths=0, antialiased=False, zorder=2, gid="sphere"
        ),
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
        ax.plot(
            *np.where(mask[:, None], eq, np.nan).T,
            color="0.45",
            linewidth=0.6,
            linestyle=(0, (3, 3)),
            alpha=alpha,
            zorder=3,
        )
    ax.set_xlim(-1, 1)
    ax.set_ylim(-1, 1)
    ax.set_zlim(-1, 1)
    ax.set_box_aspect((1, 1, 1), zoom=1.4)
    ax.set_axis_off()
    ax.computed_zorder = False


def depth_faded(colors: np.ndarray, points: np.ndarray, view: np.ndarray | None) -> np.ndarray:
    """Colours of points with alpha lowered behind the sphere (as seen through a shell).

    Done by hand: matplotlib's depthshade rescales by the spread of depths, so a single tight
    cluster (every point at one depth) would come out washed out.
    """
    rgba = np.array(colors, dtype=float, copy=True)
    if view is not None:
        rgba[:, 3] = 0.25 + 0.75 * np.clip((points @ view + 0.15) / 0.3, 0.0, 1.0)
    return rgba
