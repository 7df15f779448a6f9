"""Interactive views of a run: self-contained HTML pages drawn with plotly, turned and scrubbed in a browser.

Three pages, each from plain NumPy arrays: the particles on the sphere S² (or the circle) with a time
slider, coloured by cluster (:func:`particles_page`); a density on S² as a globe with a time slider
(:func:`globe_page`); and a phase diagram over (t, β) with its values on hover (:func:`phase_page`).
Every page carries plotly.js itself (``include_plotlyjs=True``, about 4.7 MB), so it works offline and
from a file; the data are kept small: at most ``MAX_FRAMES`` frames and ``FRAME_NUMBERS`` numbers in all
the frames of a page, in float32, the page saying when it shows fewer save times than the run has.

plotly is an optional dependency (``pip install -e ".[views]"``): it is imported when a page is drawn,
and :func:`require_plotly` raises :class:`MissingPlotly`, one line naming the install command, where it
is not installed.
"""

from __future__ import annotations

import math
import os

import numpy as np

__all__ = [
    "MissingPlotly",
    "require_plotly",
    "frame_indices",
    "time_label",
    "cluster_colors",
    "cluster_sizes",
    "marker_sizes",
    "particles_page",
    "globe_page",
    "phase_page",
    "facing",
    "CAMERA",
    "CAMERA_DISTANCE",
    "MAX_FRAMES",
    "FRAME_NUMBERS",
    "SLIDER_LABELS",
    "CLUSTER_COLORS",
    "ALONE_COLOR",
    "MARKER_SIZE",
    "MAX_SIZE_RATIO",
    "GAMMA_CURVE_NAME",
]

MAX_FRAMES = 201
"""At most this many time frames on a page (save times beyond are thinned evenly, first and last kept)."""
FRAME_NUMBERS = 2_000_000
"""At most this many numbers in all the frames of a page (≈ 8 MB as float32 before base64)."""

# a qualitative palette (Tableau 10): the clusters in order of decreasing size, then again
CLUSTER_COLORS = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#17becf",
)
ALONE_COLOR = "#9aa3ad"  # a particle in no cluster (a cluster of one)
SPHERE_COLOR = "#dfe6ee"
FONT = dict(family="Helvetica, Arial, sans-serif", size=13, color="#2a3f5f")
PAGE_HEIGHT = 660


class MissingPlotly(ImportError):
    """plotly, which draws the interactive views, is not installed."""


def require_plotly():
    """The ``plotly.graph_objects`` module, or :class:`MissingPlotly` naming the install command."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise MissingPlotly(
            'interactive views need plotly, an optional dependency: pip install -e ".[views]" (or pip install plotly)'
        ) from None
    return go


def frame_indices(n_times: int, numbers_per_frame: int) -> np.ndarray:
    """The save indices shown as frames: all of them when they fit ``MAX_FRAMES`` and ``FRAME_NUMBERS``, else
    evenly spaced ones, the first and last always among them."""
    fit = max(2, min(MAX_FRAMES, FRAME_NUMBERS // max(1, numbers_per_frame)))
    if n_times <= fit:
        return np.arange(n_times)
    return np.unique(np.round(np.linspace(0, n_times - 1, fit)).astype(int))


def time_label(t: float) -> str:
    """A save time as the slider shows it: four significant digits, plain decimals where they are short."""
    t = float(t)
    if t == 0:
        return "0"
    text = f"{t:.4g}"
    if "e" in text and 1e-3 <= abs(t) < 1e5:
        text = f"{t:.{max(3 - math.floor(math.log10(abs(t))), 0)}f}"
    return text


def _write(fig, path, *, title: str) -> None:
    """The page: the figure with plotly.js inlined, a title of its own, responsive width."""
    html = fig.to_html(
        include_plotlyjs=True,
        full_html=True,
        div_id="attnflow-view",
        config={"displaylogo": False, "responsive": True, "toImageButtonOptions": {"scale": 2}},
        auto_play=False,
    )
    html = html.replace("<head>", f'<head><meta charset="utf-8"><title>{_escape(title)}</title>', 1)
    with open(os.fspath(path), "w", encoding="utf-8") as f:
        f.write(html)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


SLIDER_INDENT = 112
"""Pixels left of the slider, where the play and pause buttons are."""
SLIDER_LABELS = 16
"""The slider labels at most this many of its steps with their times (evenly spaced, the last included)."""


def _time_controls(labels: list[str], *, redraw: bool, y: float = -0.02) -> tuple[list, list]:
    """A slider over the frames (named "0", "1", …) and play / pause buttons. The slider reads the frames'
    times, at most ``SLIDER_LABELS`` of them written under it; the frame's own time is in the title. The page
    opens at the last frame (the slider's ``active`` step), where the dynamics has happened; ▶ plays from the
    start."""
    step = {"frame": {"duration": 0, "redraw": redraw}, "mode": "immediate", "transition": {"duration": 0}}
    every = max(1, math.ceil((len(labels) - 1) / (SLIDER_LABELS - 1))) if len(labels) > SLIDER_LABELS else 1
    shown = [
        label if (i % every == 0 and len(labels) - 1 - i >= every / 2) or i == len(labels) - 1 else ""
        for i, label in enumerate(labels)
    ]
    slider = dict(
        active=len(labels) - 1,
        x=0.0,
        len=1.0,
        y=y,
        yanchor="top",
        pad=dict(t=10, b=10, l=SLIDER_INDENT, r=20),  # in pixels: clear of the buttons at any width
        currentvalue=dict(visible=False),
        font=dict(size=11),
        ticklen=4,
        minorticklen=2,
        steps=[dict(method="animate", label=text, value=str(i), args=[[str(i)], step]) for i, text in enumerate(shown)],
    )
    play = dict(
        type="buttons",
        direction="left",
        x=0.0,
        y=y,
        xanchor="left",
        yanchor="top",
        pad=dict(t=4, r=8),
        showactive=False,
        buttons=[
            dict(
                label="▶",
                method="animate",
                args=[
                    [str(i) for i in range(len(labels))],
                    {**step, "frame": {"duration": 120, "redraw": redraw}, "fromcurrent": False},
                ],
            ),
            dict(label="❚❚", method="animate", args=[[None], step]),
        ],
    )
    return [slider], [play]


def _titled(title: str, t: str) -> dict:
    """The title of a frame: the page's, and the frame's time."""
    return dict(title=dict(text=f"{title}<br><span style='font-size:14px'>t = {t}</span>"))


def cluster_colors(labels: np.ndarray) -> np.ndarray:
    """A colour index per frame and particle from cluster labels (frames, n), each cluster labelled by one of its
    particles (``observables.clusters``): −1 for a particle alone, else the index in ``CLUSTER_COLORS`` of its
    cluster, given to clusters in the order they form and kept by the cluster its label names, so that a
    cluster keeps its colour while it grows and when others merge into it."""
    labels = np.asarray(labels)
    out = np.full(labels.shape, -1, dtype=np.int64)
    given: dict[int, int] = {}
    for f, row in enumerate(labels):
        values, inverse, counts = np.unique(row, return_inverse=True, return_counts=True)
        for k in np.argsort(-counts, kind="stable"):
            if counts[k] > 1:
                color = given.setdefault(int(values[k]), len(given) % len(CLUSTER_COLORS))
                out[f, inverse == k] = color
    return out


MARKER_SIZE = {2: 10.0, 3: 5.5}
"""The marker diameter (pixels) of a particle alone, on the circle (d = 2) and on the sphere (d = 3)."""
MAX_SIZE_RATIO = 4.0
"""A cluster's marker is √(its size) times a lone particle's across, at most this many times (16 tokens and more),
so that a cluster of 20 tokens, drawn as one dot where they coincide, reads as 20."""


def cluster_sizes(labels: np.ndarray) -> np.ndarray:
    """The size of each particle's cluster (1 for a particle alone) from cluster labels (…, n)."""
    labels = np.asarray(labels)
    flat = labels.reshape(-1, labels.shape[-1])
    out = np.empty(flat.shape, dtype=np.int64)
    for f, row in enumerate(flat):
        _, inverse, counts = np.unique(row, return_inverse=True, return_counts=True)
        out[f] = counts[inverse.ravel()]
    return out.reshape(labels.shape)


def marker_sizes(sizes, base: float) -> np.ndarray:
    """Marker diameters for clusters of ``sizes`` tokens: ``base`` · √size, at most ``MAX_SIZE_RATIO`` · base (the
    marker's area grows with the number of tokens it stands for)."""
    return base * np.minimum(np.sqrt(np.asarray(sizes, dtype=float)), MAX_SIZE_RATIO)


def _colorscale() -> list:
    """A discrete colour scale on [−1, len(CLUSTER_COLORS) − 1]: grey, then the palette."""
    colors = [ALONE_COLOR, *CLUSTER_COLORS]
    scale = []
    for k, color in enumerate(colors):
        scale += [[k / len(colors), color], [(k + 1) / len(colors), color]]
    return scale


def _note(text: str) -> dict:
    return dict(
        text=text,
        xref="paper",
        yref="paper",
        x=0.0,
        y=1.0,
        yshift=6,
        xanchor="left",
        yanchor="bottom",
        showarrow=False,
        align="left",
        font=dict(size=11, color="#5b6b7f"),
    )


def _guides(go, sphere: bool) -> list:
    """What the particles are drawn on: the translucent sphere with its equator and a meridian, or the circle."""
    if not sphere:
        angle = np.linspace(0, 2 * np.pi, 361)
        return [
            go.Scatter(
                x=np.cos(angle),
                y=np.sin(angle),
                mode="lines",
                line=dict(color="#c3ccd6", width=2),
                hoverinfo="skip",
                showlegend=False,
            )
        ]
    u, v = np.meshgrid(np.linspace(0, 2 * np.pi, 61), np.linspace(0, np.pi, 31))
    angle = np.linspace(0, 2 * np.pi, 181)
    zero = np.zeros_like(angle)
    line = dict(color="#aab6c4", width=2)
    return [
        go.Surface(
            x=np.cos(u) * np.sin(v),
            y=np.sin(u) * np.sin(v),
            z=np.cos(v),
            colorscale=[[0, SPHERE_COLOR], [1, SPHERE_COLOR]],
            showscale=False,
            opacity=0.3,
            hoverinfo="skip",
            lighting=dict(ambient=0.85, diffuse=0.35, specular=0.05),
        ),
        go.Scatter3d(x=np.cos(angle), y=np.sin(angle), z=zero, mode="lines", line=line, hoverinfo="skip"),
        go.Scatter3d(x=np.cos(angle), y=zero, z=np.sin(angle), mode="lines", line=line, hoverinfo="skip"),
    ]


CAMERA = dict(x=1.0, y=1.0, z=0.55)
"""The camera of a sphere whose particles have no side of their own (plotly's eye, the scene's centre at 0)."""
CAMERA_DISTANCE = float(np.linalg.norm(list(CAMERA.values())))


def facing(x) -> dict:
    """The camera's eye facing the particles ``x`` (n, 3) where they gather: on the side of their mean
    direction, raised by 20° so the equator reads as an ellipse; ``CAMERA`` when their mean is near 0."""
    mean = np.asarray(x, dtype=float).mean(axis=0)
    if not np.all(np.isfinite(mean)) or np.linalg.norm(mean) < 0.2:
        return dict(CAMERA)
    u = mean / np.linalg.norm(mean)
    azimuth, elevation = math.atan2(u[1], u[0]), math.asin(float(np.clip(u[2], -1.0, 1.0)))
    elevation = float(np.clip(elevation, -math.pi / 3, math.pi / 3)) + math.radians(20)
    elevation = min(elevation, math.radians(75))
    r = CAMERA_DISTANCE
    return dict(
        x=r * math.cos(elevation) * math.cos(azimuth),
        y=r * math.cos(elevation) * math.sin(azimuth),
        z=r * math.sin(elevation),
    )


def particles_page(
    ts,
    xs,
    labels,
    members: list[str],
    *,
    title: str,
    note: str = "",
    path,
) -> None:
    """The particles of ``members`` on the sphere (d = 3) or the circle (d = 2), one frame per save time.

    ``xs`` (members, T, n, d) are the states at the save times ``ts`` (T,) shown (thinned by the caller);
    ``labels`` (members, T, n) the particles' clusters at those times (``observables.clusters``), which
    colour them (:func:`cluster_colors`: a colour per cluster as it forms, grey for a particle alone) and size
    them (:func:`marker_sizes`: a cluster's marker grows with its number of tokens, which coincide);
    ``members`` names each member in the menu that picks which one is shown. The page opens at the last save
    time. A sphere is seen from the side where the first member's particles end (:func:`facing`).
    """
    go = require_plotly()
    xs = np.asarray(xs, dtype=np.float32)
    ts = np.asarray(ts, dtype=float)
    n_members, T, n, d = xs.shape
    if d not in (2, 3) or len(members) != n_members or len(ts) != T or np.shape(labels) != (n_members, T, n):
        raise ValueError(
            f"particles_page draws d = 2 or 3 with one name and one (T, n) array of labels per member: got xs of "
            f"shape {xs.shape}, labels of shape {np.shape(labels)} and {len(members)} names"
        )
    sphere = d == 3
    Scatter = go.Scatter3d if sphere else go.Scatter
    colors = np.stack([cluster_colors(labels[m]) for m in range(n_members)]).astype(np.float32)
    sizes = marker_sizes(cluster_sizes(labels), MARKER_SIZE[d]).astype(np.float32)
    last = T - 1
    traces = _guides(go, sphere)
    fixed = len(traces)
    marker = dict(
        cmin=-1,
        cmax=len(CLUSTER_COLORS) - 1,
        colorscale=_colorscale(),
        line=dict(width=0.6, color="#1f2a36"),
    )
    index = np.arange(n)
    for m, name in enumerate(members):
        traces.append(
            Scatter(
                **dict(zip("xyz", (xs[m, last, :, j] for j in range(d)))),
                mode="markers",
                marker={**marker, "color": colors[m, last], "size": sizes[m, last]},
                customdata=index,
                hovertemplate="particle %{customdata}<extra></extra>",
                name=name,
                visible=m == 0,
                showlegend=False,
            )
        )
    times = [time_label(t) for t in ts]
    frames = [
        go.Frame(
            name=str(i),
            data=[
                Scatter(
                    **dict(zip("xyz", (xs[m, i, :, j] for j in range(d)))),
                    marker=dict(color=colors[m, i], size=sizes[m, i]),
                )
                for m in range(n_members)
            ],
            traces=list(range(fixed, fixed + n_members)),
            layout=_titled(title, times[i]),
        )
        for i in range(T)
    ]
    sliders, menus = _time_controls(times, redraw=sphere)
    if n_members > 1:
        ends = [int(np.sum(np.unique(labels[m][-1], return_counts=True)[1] > 1)) for m in range(n_members)]
        menus.append(
            dict(
                type="dropdown",
                x=1.0,
                y=1.0,
                xanchor="right",
                yanchor="bottom",
                pad=dict(b=6),
                active=0,
                buttons=[
                    dict(
                        label=f"{name} · {_clusters_text(ends[m])} at the end",
                        method="restyle",
                        args=[{"visible": [True] * fixed + [j == m for j in range(n_members)]}],
                    )
                    for m, name in enumerate(members)
                ],
            )
        )
    layout = dict(
        title=dict(x=0.5, xanchor="center", font=dict(size=16), **_titled(title, times[last])["title"]),
        font=FONT,
        height=PAGE_HEIGHT,
        margin=dict(l=10, r=10, t=100, b=90),
        sliders=sliders,
        updatemenus=menus,
        annotations=[_note(note)] if note else [],
        paper_bgcolor="white",
        showlegend=False,
    )
    if sphere:
        axis = dict(range=[-1.02, 1.02], visible=False)
        layout["scene"] = dict(
            xaxis=axis,
            yaxis=axis,
            zaxis=axis,
            aspectmode="cube",
            dragmode="turntable",
            camera=dict(eye=facing(xs[0, -1])),
        )
    else:
        axis = dict(range=[-1.12, 1.12], visible=False)
        layout["xaxis"] = {**axis, "constrain": "domain"}
        layout["yaxis"] = {**axis, "scaleanchor": "x", "scaleratio": 1}
        layout["plot_bgcolor"] = "white"
    fig = go.Figure(data=traces, frames=frames, layout=layout)
    _write(fig, path, title=_plain(title))


def globe_page(
    ts, theta, phi, density, *, title: str, note: str = "", colorbar: str, limits=None, log: bool = False, path
) -> None:
    """A density on S² as a globe, one frame per save time.

    ``density`` (T, n_θ, n_φ) on the colatitudes ``theta`` (n_θ, increasing from the north pole) and the
    longitudes ``phi`` (n_φ, from 0, equispaced and not repeating 2π) at the save times ``ts``; the colour
    scale is the same at every time: ``limits`` (low, high), by default from 0 (or the least value) to the largest
    value; ``log`` draws it logarithmic (values below ``low`` drawn as ``low``) with plain tick labels, as the
    figure ``sphere_density_maps`` does, whose limits the caller passes here too. The page opens at the last
    time; the globe is seen from the side of the density's maximum then (:func:`facing`).
    """
    from .style import DENSITY_CMAP, plain_log_ticks, plain_number

    go = require_plotly()
    density = np.asarray(density, dtype=float)
    theta, phi, ts = (np.asarray(a, dtype=float) for a in (theta, phi, ts))
    if density.shape != (len(ts), len(theta), len(phi)):
        raise ValueError(f"globe_page: density of shape {density.shape} is not (T, n_θ, n_φ) of the grid")
    # close the seam at longitude 2π, and the poles
    lon = np.concatenate([phi, [2 * np.pi]])
    lat = np.concatenate([[0.0], theta, [np.pi]])
    values = np.concatenate([density, density[..., :1]], axis=-1)
    north = values[:, :1].mean(axis=-1, keepdims=True).repeat(lon.size, axis=-1)
    south = values[:, -1:].mean(axis=-1, keepdims=True).repeat(lon.size, axis=-1)
    values = np.concatenate([north, values, south], axis=1).astype(np.float32)
    u, v = np.meshgrid(lon, lat)
    x, y, z = np.cos(u) * np.sin(v), np.sin(u) * np.sin(v), np.cos(v)
    if limits is None:
        top = float(np.nanmax(values)) if values.size else 1.0
        limits = (min(0.0, float(np.nanmin(values))) if values.size else 0.0, top)
    cmin, cmax = float(limits[0]), float(limits[1])
    if not cmin < cmax or (log and cmin <= 0):
        raise ValueError(
            f"globe_page: limits must be (low, high) with low < high (0 < low on a log scale); got {limits}"
        )
    peak = np.unravel_index(np.nanargmax(values[-1]), values[-1].shape) if values.size else (0, 0)
    bar = dict(title=dict(text=colorbar, side="right"), thickness=16, len=0.75)
    if log:
        ticks = plain_log_ticks(cmin, cmax)
        bar.update(tickvals=np.log10(ticks).tolist(), ticktext=[plain_number(t) for t in ticks])
        shown = np.log10(np.maximum(values, cmin)).astype(np.float32)
        cmin, cmax = float(np.log10(cmin)), float(np.log10(cmax))
    else:
        shown = values
    surface = dict(
        colorscale=DENSITY_CMAP,
        cmin=cmin,
        cmax=cmax,
        colorbar=bar,
        lighting=dict(ambient=0.9, diffuse=0.25, specular=0.05, roughness=0.9),
        hovertemplate=f"{colorbar} = %{{customdata:.3f}}<extra></extra>",
    )
    times = [time_label(t) for t in ts]
    last = len(times) - 1
    fig = go.Figure(
        data=[go.Surface(x=x, y=y, z=z, surfacecolor=shown[last], customdata=values[last], **surface)],
        frames=[
            go.Frame(
                name=str(i),
                data=[go.Surface(surfacecolor=shown[i], customdata=values[i])],
                traces=[0],
                layout=_titled(title, t),
            )
            for i, t in enumerate(times)
        ],
    )
    sliders, menus = _time_controls(times, redraw=True)
    axis = dict(range=[-1.02, 1.02], visible=False)
    fig.update_layout(
        title=dict(x=0.5, xanchor="center", font=dict(size=16), **_titled(title, times[last])["title"]),
        font=FONT,
        height=PAGE_HEIGHT,
        margin=dict(l=10, r=10, t=100, b=90),
        sliders=sliders,
        updatemenus=menus,
        annotations=[_note(note)] if note else [],
        scene=dict(
            xaxis=axis,
            yaxis=axis,
            zaxis=axis,
            aspectmode="cube",
            dragmode="turntable",
            camera=dict(eye=facing(np.stack([x, y, z], axis=-1)[peak][None])),
        ),
    )
    _write(fig, path, title=_plain(title))


GAMMA_CURVE_NAME = "Γ<sub>∞,δ</sub>: γ<sub>β</sub>(t) = 1 − δ (limit d → ∞)"
"""The legend of the boundary Γ_∞,δ of [GLPR] (6.12) on the interactive phase diagram (the figure's label)."""


def phase_page(
    ts,
    betas,
    fractions: dict,
    *,
    title: str,
    note: str = "",
    log_time: bool = False,
    gamma_curve=None,
    path,
) -> None:
    """The clustered fraction over (t, β) as heatmaps, a menu picking the d shown; values on hover.

    ``fractions``: d → array (len(betas), len(ts)) of the fraction of pairs within δ. ``gamma_curve`` = (t_star,
    betas_curve) overlays Γ_∞,δ = {(t, β): γ_β(t) = 1 − δ}, the d → ∞ boundary ([GLPR] (6.12)), over every d as
    the figure ``phase_diagram_grid`` does (a white dashed line on a dark one; a gap where t* is infinite); the
    time axis keeps the range of ``ts``.
    """
    go = require_plotly()
    ts, betas = np.asarray(ts, dtype=float), np.asarray(betas, dtype=float)
    keep = ts > 0 if log_time else np.ones(ts.shape, bool)
    dims = list(fractions)
    traces = []
    for j, d in enumerate(dims):
        z = np.asarray(fractions[d], dtype=float)
        if z.shape != (len(betas), len(ts)):
            raise ValueError(f"phase_page: the fractions of d = {d} have shape {z.shape}, not (β, t)")
        traces.append(
            go.Heatmap(
                x=ts[keep],
                y=betas,
                z=z[:, keep].astype(np.float32),
                zmin=0.0,
                zmax=1.0,
                colorscale="Viridis",
                colorbar=dict(title=dict(text="clustered fraction", side="right"), thickness=16),
                hovertemplate=f"d = {d}<br>t = %{{x:.4g}}<br>β = %{{y:.4g}}<br>clustered fraction = %{{z:.3f}}"
                "<extra></extra>",
                name=f"d = {d}",
                visible=j == 0,
            )
        )
    curve = []
    if gamma_curve is not None:
        t_star, curve_betas = (np.asarray(a, dtype=float).ravel() for a in gamma_curve)
        if t_star.shape != curve_betas.shape:
            raise ValueError(
                f"phase_page: gamma_curve must be a pair (t_star, betas) of equal length; got lengths "
                f"{t_star.size} and {curve_betas.size}"
            )
        t_star = np.where(np.isfinite(t_star), t_star, np.nan)
        line = dict(x=t_star, y=curve_betas, mode="lines", connectgaps=False)
        curve = [
            go.Scatter(
                **line,
                line=dict(color="rgba(0,0,0,0.55)", width=4.5),
                hoverinfo="skip",
                showlegend=False,
                name="outline",
            ),
            go.Scatter(
                **line,
                line=dict(color="white", width=2, dash="dash"),
                name=GAMMA_CURVE_NAME,
                showlegend=True,
                hovertemplate="Γ<sub>∞,δ</sub><br>t = %{x:.4g}<br>β = %{y:.4g}<extra></extra>",
            ),
        ]
    shown_t = ts[keep]
    x_range: dict = {}
    if shown_t.size > 1:
        ends = [float(shown_t[0]), float(shown_t[-1])]
        x_range = dict(range=[math.log10(e) for e in ends] if log_time else ends, autorange=False)
    menus = []
    if len(dims) > 1:
        menus.append(
            dict(
                type="buttons",
                direction="left",
                x=0.0,
                y=1.0,
                xanchor="left",
                yanchor="bottom",
                pad=dict(b=30),
                active=0,
                buttons=[
                    dict(
                        label=f"d = {d}",
                        method="restyle",
                        args=[{"visible": [i == j for i in range(len(dims))] + [True] * len(curve)}],
                    )
                    for j, d in enumerate(dims)
                ],
            )
        )
    fig = go.Figure(data=traces + curve)
    fig.update_layout(
        title=dict(text=title, x=0.5, xanchor="center", font=dict(size=16)),
        font=FONT,
        height=560 + (40 if curve else 0),
        margin=dict(l=70, r=20, t=120 if menus else 90, b=100 if curve else 60),
        updatemenus=menus,
        annotations=[_note(note)] if note else [],
        xaxis=dict(title="time t", type="log" if log_time else "linear", ticks="outside", **x_range),
        yaxis=dict(title="inverse temperature β", ticks="outside"),
        # the white line's legend on a dark swatch, below the axes, as in the figure
        legend=dict(
            orientation="h",
            x=0.5,
            xanchor="center",
            y=-0.14,
            yanchor="top",
            bgcolor="#3b4a5a",
            font=dict(color="white"),
        ),
        plot_bgcolor="white",
    )
    _write(fig, path, title=_plain(title))


def _clusters_text(count: int) -> str:
    return "no cluster" if count == 0 else f"{count} cluster{'s' if count != 1 else ''}"


def _plain(text: str) -> str:
    """A title without plotly's HTML tags, for the page's <title>."""
    for tag in ("<br>", "<sub>", "</sub>", "<sup>", "</sup>", "<i>", "</i>", "<b>", "</b>"):
        text = text.replace(tag, " ")
    return " ".join(text.split())
