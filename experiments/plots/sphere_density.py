"""The mean-field density on S²: orthographic maps over time with the particles beside them, the growth rates
of the spherical-harmonic degrees, and the particles' distance to the density against their number."""

from __future__ import annotations

import math

import numpy as np
from matplotlib import colors as mcolors
from matplotlib.figure import Figure

from .style import (
    DATA_COLOR,
    DENSITY_CMAP,
    LEGEND_SIZE,
    THEORY_COLOR,
    as_array,
    axis_values,
    density_limits,
    despine,
    finish,
    new_figure,
    plain_log_colorbar,
    title_text,
    view_vector,
)

VIEW = (28.0, 35.0)  # elevation and azimuth (degrees) of the orthographic views
_MODEL_NAMES = {"sa": "SA", "usa": "USA", "usa-rescaled": "USA (rescaled time)"}


def _frame(view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    right = np.cross([0.0, 0.0, 1.0], view) if abs(view[2]) < 0.99 else np.array([0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    return right, np.cross(view, right)


def orthographic_image(theta, phi, values, view, size: int = 240) -> np.ndarray:
    """The hemisphere facing ``view`` as a (size, size) image of ``values`` (n_θ, n_φ) on the grid of colatitudes
    ``theta`` (increasing) and longitudes ``phi`` (uniform), bilinear in (θ, φ); NaN outside the disk."""
    right, up = _frame(view)
    u = np.linspace(-1.0, 1.0, size)
    x, y = np.meshgrid(u, -u)  # image rows from the top
    r2 = x * x + y * y
    inside = r2 <= 1.0
    z = np.sqrt(np.clip(1.0 - r2, 0.0, 1.0))
    p = x[..., None] * right + y[..., None] * up + z[..., None] * view
    colat = np.arccos(np.clip(p[..., 2], -1.0, 1.0))
    lon = np.mod(np.arctan2(p[..., 1], p[..., 0]), 2 * math.pi)
    # θ: between the nodes (held at the first and last ring towards the poles); φ: uniform, wrapping
    i = np.clip(np.searchsorted(theta, colat) - 1, 0, theta.size - 2)
    a = np.clip((colat - theta[i]) / (theta[i + 1] - theta[i]), 0.0, 1.0)
    step = 2 * math.pi / phi.size
    j = np.floor(lon / step).astype(int) % phi.size
    b = lon / step - np.floor(lon / step)
    j1 = (j + 1) % phi.size
    v = (1 - a) * ((1 - b) * values[i, j] + b * values[i, j1]) + a * (
        (1 - b) * values[i + 1, j] + b * values[i + 1, j1]
    )
    return np.where(inside, v, np.nan)


def sphere_density_maps(
    theta,
    phi,
    ts,
    density,
    particles=None,
    *,
    beta=None,
    model="sa",
    n=None,
    view=VIEW,
    limits=None,
    title=None,
    path=None,
) -> Figure:
    """The density 4πρ (uniform = 1, logarithmic colours) seen from one side of the sphere at the times ``ts``
    (``density`` (T, n_θ, n_φ)); below, when given, the particles (``particles`` (T, n, 3)) on the same side at the
    same times. ``limits``: the colour scale's (low, high) in units of 4πρ, by default ``style.density_limits`` of
    the densities drawn; the interactive globe takes the same scale (``style.density_limits`` of the member's
    density at every save time), so the caller passes those to both."""
    theta = axis_values("theta", theta, "(n_θ,)")
    phi = axis_values("phi", phi, "(n_φ,)")
    ts = axis_values("ts", ts)
    density = as_array("density", density, "(T, n_θ, n_φ)", 3)
    if density.shape != (ts.size, theta.size, phi.size):
        raise ValueError(f"density must be (T, n_θ, n_φ) = {(ts.size, theta.size, phi.size)}; got {density.shape}")
    if particles is not None:
        particles = as_array("particles", particles, "(T, n, 3)", 3)
        if particles.shape[0] != ts.size or particles.shape[-1] != 3:
            raise ValueError(f"particles must be (T, n, 3) with T = {ts.size}; got {particles.shape}")
    v = view_vector(*view)
    right, up = _frame(v)
    rows = 1 if particles is None else 2
    fig = new_figure(2.9 * ts.size + 1.2, 3.0 * rows + 0.7)
    axes = fig.subplots(rows, ts.size, squeeze=False)
    scaled = 4 * math.pi * density
    floor, top = density_limits(scaled) if limits is None else (float(limits[0]), float(limits[1]))
    if not 0 < floor < top:
        raise ValueError(f"limits must be (low, high) with 0 < low < high; got {limits!r}")
    norm = mcolors.LogNorm(vmin=floor, vmax=top)
    circle = np.linspace(0.0, 2 * math.pi, 361)
    image = None
    for k, t in enumerate(ts):
        ax = axes[0, k]
        picture = orthographic_image(theta, phi, np.maximum(scaled[k], floor), v)
        image = ax.imshow(picture, extent=(-1, 1, -1, 1), cmap=DENSITY_CMAP, norm=norm, interpolation="bilinear")
        ax.plot(np.cos(circle), np.sin(circle), color="0.35", linewidth=0.8)
        ax.set_title(f"t = {t:.3g}", fontsize=LEGEND_SIZE + 1)
        if particles is not None:
            ax2 = axes[1, k]
            p = particles[k]
            depth = p @ v
            front = depth >= 0
            ax2.plot(np.cos(circle), np.sin(circle), color="0.55", linewidth=0.8)
            ax2.scatter(p[front] @ right, p[front] @ up, s=2.5, color=DATA_COLOR, linewidths=0, alpha=0.75, zorder=2)
    for ax in axes.ravel():
        ax.set_xlim(-1.05, 1.05)
        ax.set_ylim(-1.05, 1.05)
        ax.set_aspect("equal")
        ax.set_axis_off()
    assert image is not None, "axis_values refuses an empty ts"
    bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6 if rows == 2 else 0.85, pad=0.02)
    plain_log_colorbar(bar, floor, top)
    bar.set_label(r"$4\pi\rho$ (uniform = 1)")
    head = f"Mean field of {_MODEL_NAMES.get(model, model)} on the sphere"
    if particles is not None:
        head += f"; below, {particles.shape[1]} particles sampled from ρ at t = {ts[0]:.3g} (the side in view)"
    fig.suptitle(title_text(head, title, beta=beta))
    return finish(fig, path)


def sphere_rates_and_convergence(
    degrees,
    measured,
    theory_degrees,
    theory,
    betas,
    counts=None,
    distance=None,
    *,
    t1=None,
    t_start=None,
    model="sa",
    title=None,
    path=None,
) -> Figure:
    """Left: the growth rates of the degrees ℓ measured from the solver (``measured`` (β, seeds, ℓ)) over the linear
    theory (``theory`` (β, L) at ``theory_degrees``), the fastest degree marked. Right, with ``distance``
    (β, seeds, len(counts)): the H^{−2} distance of n particles to the density at t1 against n, with n^{−1/2}."""
    degrees = axis_values("degrees", degrees, "(K,)")
    theory_degrees = axis_values("theory_degrees", theory_degrees, "(L,)")
    betas = axis_values("betas", betas, "(B,)")
    measured = as_array("measured", measured, "(B, seeds, K)", 3)
    theory = as_array("theory", theory, "(B, L)", 2)
    if (
        measured.shape[0] != betas.size
        or measured.shape[-1] != degrees.size
        or theory.shape != (betas.size, theory_degrees.size)
    ):
        raise ValueError(
            f"measured must be (B, seeds, K) and theory (B, L) with B = {betas.size}, K = {degrees.size}, "
            f"L = {theory_degrees.size}; got {measured.shape}, {theory.shape}"
        )
    panels = 2 if distance is not None else 1
    fig = new_figure(5.4 * panels + 0.6, 4.3)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    ax = axes[0]
    from matplotlib import colormaps

    cmap = colormaps["viridis"]
    for j, beta in enumerate(betas):
        color = cmap(0.15 + 0.7 * j / max(betas.size - 1, 1))
        ax.plot(theory_degrees, theory[j], color=color, linewidth=1.5, label=rf"theory, $\beta = {beta:g}$")
        for row in measured[j]:
            ax.plot(
                degrees,
                row,
                linestyle="none",
                marker="o",
                markersize=5,
                markerfacecolor="white",
                markeredgecolor=color,
                markeredgewidth=1.3,
            )
        top = int(theory_degrees[np.argmax(theory[j])])
        ax.axvline(top, color=color, linewidth=0.9, linestyle=(0, (4, 3)))
        ax.annotate(
            rf"$\ell^* = {top}$",
            (top, float(theory[j].max())),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=LEGEND_SIZE,
            color=color,
        )
    ax.plot([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="0.3", label="solver")
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xticks(np.arange(0, int(theory_degrees.max()) + 1, 2))
    ax.set_xlabel(r"degree $\ell$ of the spherical harmonic")
    ax.set_ylabel("growth rate at the uniform density")
    ax.set_title("linear instability of the uniform density", fontsize=LEGEND_SIZE + 1.5)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper right")
    if distance is not None:
        counts = axis_values("counts", counts, "(len(counts),)")
        distance = as_array("distance", distance, "(B, seeds, len(counts))", 3)
        ax = axes[1]
        mean = np.nanmean(distance.reshape(-1, counts.size), axis=0)
        for row in distance.reshape(-1, counts.size):
            ax.plot(counts, row, linestyle="none", marker="o", markersize=4, color=DATA_COLOR, alpha=0.35)
        ax.plot(counts, mean, color=DATA_COLOR, marker="o", markersize=6, linewidth=1.5, label="mean over members")
        if np.all(np.isfinite(mean)) and counts.size >= 2:
            slope, icpt = np.polyfit(np.log(counts), np.log(mean), 1)
            ax.plot(
                counts,
                np.exp(icpt) * counts**slope,
                color=THEORY_COLOR,
                linewidth=1.2,
                label=rf"fit $\propto n^{{{slope:.2f}}}$",
            )
            ax.plot(
                counts,
                mean[0] * (counts / counts[0]) ** -0.5,
                color="0.3",
                linewidth=1.0,
                linestyle=(0, (4, 3)),
                label=r"$\propto n^{-1/2}$",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(counts)
        ax.set_xticklabels([str(int(c)) for c in counts])
        ax.minorticks_off()
        ax.set_xlabel(r"particles $n$")
        ax.set_ylabel(r"$\|\mu_n(t_1) - \rho(t_1)\|_{H^{-2}}$")
        known = t_start is not None and t1 is not None
        when = f"sampled at t = {t_start:.3g}, compared at t = {t1:.3g}" if known else ""
        ax.set_title(when, fontsize=LEGEND_SIZE + 1)
        ax.legend(fontsize=LEGEND_SIZE, frameon=False)
    despine(*axes)
    fig.suptitle(
        title_text(f"Mean field of {_MODEL_NAMES.get(model, model)} on the sphere: linear rates and particles", title)
    )
    return finish(fig, path)
