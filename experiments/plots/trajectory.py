"""Particle trajectories: angles on the circle (d = 2), paths on S² (d = 3), principal components (d > 3)."""

from __future__ import annotations

import math

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .style import (
    LABEL_SIZE,
    TIME_LABEL,
    angle_ticks,
    as_array,
    as_series,
    as_states,
    auto_view,
    axis_values,
    cluster_count_panel,
    cyclic_cmap,
    cyclic_colors,
    depth_faded,
    despine,
    draw_sphere,
    finish,
    new_figure,
    particle_colors,
    seed_text,
    set_range,
    title_text,
    view_vector,
)


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


def circle_trajectories(ts, xs, *, n_clusters=None, beta=None, seed=None, title=None, path=None) -> Figure:
    """Angles θ_i(t) of particles on the circle (d = 2) against time, [GLPR] Fig. 4.

    xs (T, n, 2). Each line is one particle's unwrapped angle, coloured by its final angle on
    a cyclic colour map, so particles ending in the same cluster share a colour. n_clusters (T,)
    adds a lower panel with the cluster count as a step plot. seed: the member drawn, named in the title.
    """
    ts = axis_values("ts", ts)
    xs = as_states("xs", xs, ts, d=2)
    if n_clusters is not None:
        n_clusters = as_series("n_clusters", n_clusters, ts)
    theta = unwrapped_angles(xs)  # (T, n)
    cmap = cyclic_cmap()
    norm = mcolors.Normalize(-math.pi, math.pi)

    fig = new_figure(7.4, 5.6 if n_clusters is not None else 4.4)
    if n_clusters is not None:
        ax, ax_count = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    else:
        ax, ax_count = fig.add_subplot(), None
    lines = LineCollection(
        [np.column_stack([ts, theta[:, i]]) for i in range(theta.shape[1])],
        colors=cyclic_colors(theta[-1]),
        linewidths=0.9 if theta.shape[1] <= 64 else 0.5,
        gid="trajectories",
    )
    ax.add_collection(lines)
    lo, hi = float(theta.min()), float(theta.max())
    pad = 0.04 * max(hi - lo, 1e-3)
    ax.set_ylim(lo - pad, hi + pad)
    set_range(ax, ts)
    angle_ticks(ax, lo, hi)
    ax.set_ylabel(r"angle $\theta_i(t)$ (unwrapped)")
    ax.set_title(title_text("Particles on the circle", title, n=xs.shape[1], beta=beta, member=seed_text(seed)))
    despine(ax)
    cbar = fig.colorbar(ScalarMappable(norm, cmap), ax=ax, aspect=25, pad=0.015)
    cbar.set_ticks([-math.pi, -math.pi / 2, 0, math.pi / 2, math.pi])
    cbar.set_ticklabels([r"$-\pi$", r"$-\pi/2$", "0", r"$\pi/2$", r"$\pi$"])
    cbar.set_label(r"final angle $\theta_i(T)$ mod $2\pi$", fontsize=LABEL_SIZE)
    if ax_count is not None:
        cluster_count_panel(ax_count, ts, n_clusters, TIME_LABEL)
        # Keep the two time axes aligned although only the top one has a colour bar.
        fig.colorbar(ScalarMappable(norm, cmap), ax=ax_count, aspect=25, pad=0.015).ax.set_visible(False)
    else:
        ax.set_xlabel(TIME_LABEL)
    return finish(fig, path)


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
            Line3DCollection(
                seg[mask],
                colors=c,
                linewidths=linewidth,
                zorder=zorder,
                gid="trajectories_front" if is_front else "trajectories_back",
            )
        )


def _endpoint_markers(ax, start, end, colors, *, size=14.0, view=None):
    """Hollow markers at the initial points, filled ones at the final points (2-D or 3-D)."""
    three_d = start.shape[1] == 3
    kw = dict(depthshade=False) if three_d else {}
    ax.scatter(
        *start.T,
        s=size,
        facecolors="none",
        edgecolors=depth_faded(colors, start, view),
        linewidths=0.8,
        zorder=5,
        label="initial position",
        gid="initial",
        **kw,
    )
    ax.scatter(
        *end.T,
        s=size * 1.6,
        c=depth_faded(colors, end, view),
        edgecolors=depth_faded(np.tile(mcolors.to_rgba("0.15"), (len(end), 1)), end, view),
        linewidths=0.4,
        zorder=6,
        label="final position",
        gid="final",
        **kw,
    )


def sphere_trajectories(ts, xs, *, beta=None, seed=None, elev=None, azim=None, title=None, path=None) -> Figure:
    """Trajectories of particles on S² (d = 3) over a shaded sphere.

    xs (T, n, 3). Lines are coloured by the particle's initial height; hollow markers are the
    initial points, filled markers the final ones. Parts behind the sphere are drawn faint, as
    through a translucent shell. elev/azim (degrees): camera; by default it faces the final
    centroid, slightly off-centre.
    """
    ts = axis_values("ts", ts)
    xs = as_states("xs", xs, ts, d=3)
    elev, azim = auto_view(xs[-1], elev, azim)
    fig = new_figure(5.6, 5.6)
    ax = fig.add_subplot(projection="3d")
    ax.view_init(elev=elev, azim=azim)
    draw_sphere(ax, elev, azim)
    colors = particle_colors(xs[0, :, 2])
    view = view_vector(elev, azim)
    _trajectory_segments_3d(ax, xs, colors, view, linewidth=0.9 if xs.shape[1] <= 128 else 0.5)
    _endpoint_markers(ax, xs[0], xs[-1], colors, view=view)
    ax.set_title(
        title_text(
            rf"Particles on the sphere $S^2$, $t \in [{ts[0]:g}, {ts[-1]:g}]$",
            title,
            n=xs.shape[1],
            beta=beta,
            member=seed_text(seed),
        ),
        pad=0,
    )
    _endpoint_legend(fig, ts)
    return finish(fig, path)


def _endpoint_legend(fig: Figure, ts: np.ndarray) -> None:
    """Legend for the hollow (initial) and filled (final) markers of the trajectory plots."""
    handles = [
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markerfacecolor="none",
            markeredgecolor="0.3",
            label=f"initial ($t = {ts[0]:g}$)",
        ),
        Line2D(
            [],
            [],
            marker="o",
            linestyle="",
            markerfacecolor="0.3",
            markeredgecolor="0.15",
            label=f"final ($t = {ts[-1]:g}$)",
        ),
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


def pca_trajectories(ts, xs, *, n_components=2, beta=None, seed=None, title=None, path=None) -> Figure:
    """Trajectories in d > 3 projected on the top principal components of all states stacked.

    xs (T, n, d). Axes are labelled with the share of variance each component explains.
    n_components: 2 (flat plot) or 3 (3-D axes).
    """
    ts = axis_values("ts", ts)
    xs = as_states("xs", xs, ts)
    if n_components not in (2, 3):
        raise ValueError(f"n_components must be 2 or 3; got {n_components!r}")
    T, n, d = xs.shape
    if d < n_components:
        raise ValueError(f"xs has d = {d} < n_components = {n_components}")
    mean, directions, ratio = _principal_components(xs.reshape(T * n, d), n_components)
    proj = (xs - mean) @ directions  # (T, n, k)
    colors = particle_colors(proj[0, :, 0])
    labels = [f"PC{k + 1} ({100 * r:.1f}% of variance)" for k, r in enumerate(ratio)]
    head = rf"Particles in $d = {d}$: top principal components"
    if n_components == 2:
        fig = new_figure(6.0, 5.6)
        ax = fig.add_subplot()
        ax.add_collection(
            LineCollection(
                [proj[:, i] for i in range(n)],
                colors=colors,
                alpha=0.85,
                linewidths=0.9 if n <= 128 else 0.5,
                gid="trajectories",
            )
        )
        _endpoint_markers(ax, proj[0], proj[-1], colors)
        ax.set_aspect("equal", adjustable="datalim")
        ax.autoscale_view()
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        despine(ax)
    else:
        from mpl_toolkits.mplot3d.art3d import Line3DCollection

        fig = new_figure(6.0, 6.0)
        ax = fig.add_subplot(projection="3d")
        ax.add_collection3d(
            Line3DCollection([proj[:, i] for i in range(n)], colors=colors, linewidths=0.8, gid="trajectories")
        )
        _endpoint_markers(ax, proj[0], proj[-1], colors)
        lo, hi = proj.min(axis=(0, 1)), proj.max(axis=(0, 1))
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_zlim(lo[2], hi[2])
        ax.set_box_aspect(tuple(np.maximum(hi - lo, 1e-9)), zoom=0.9)
        ax.set_xlabel(labels[0])
        ax.set_ylabel(labels[1])
        ax.set_zlabel(labels[2])
    ax.set_title(title_text(head, title, n=n, beta=beta, member=seed_text(seed)))
    _endpoint_legend(fig, ts)
    return finish(fig, path)


def trajectories(ts, xs, **kw) -> Figure:
    """Trajectory plot chosen by dimension: circle (d = 2), sphere (d = 3), PCA (d > 3).

    Keywords pass through (beta, seed, title, path, ...); n_clusters is used only for d = 2.
    """
    xs_arr = as_array("xs", xs, "(T, n, d)", 3)
    d = xs_arr.shape[2]
    if d == 2:
        return circle_trajectories(ts, xs_arr, **kw)
    kw.pop("n_clusters", None)
    if d == 3:
        return sphere_trajectories(ts, xs_arr, **kw)
    if d > 3:
        return pca_trajectories(ts, xs_arr, **kw)
    raise ValueError(f"xs must hold points in dimension d >= 2; got d = {d}")
