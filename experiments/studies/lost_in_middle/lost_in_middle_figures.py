"""Lost in the middle (arXiv 2605.09213): the soft-accuracy profile, t_crit against β, and the tokens on the circle."""

from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure

from ...plots.style import (
    BETA_LABEL,
    DATA_COLOR,
    LEGEND_SIZE,
    THEORY_COLOR,
    as_array,
    axis_values,
    despine,
    finish,
    new_figure,
    title_text,
)

POSITION_LABEL = r"source position $s$ in the prompt"
GROUP_COLORS = ("#1f77b4", "#d1495b", "#3a9c4a", "#e8a33d", "#7b4fa0", "#5f6b73")


def retrieval_profiles(
    positions,
    fractions,
    curves,
    t_crit,
    times,
    time_curves,
    sources,
    estimate,
    error,
    curve_betas,
    critical_curve,
    *,
    beta,
    lam,
    classes,
    n=None,
    runs=None,
    marks=None,
    title=None,
    path=None,
) -> Figure:
    """Three panels. Left: the closed-form profiles S_t(s) (``curves`` (F, S) at ``positions``), each over its
    maximum, at the times ``fractions`` · t_crit, with their minima. Middle: the particle estimates
    (``estimate`` ± ``error``, (K, B) at the bin centres ``sources``) at ``times`` over S_t (``time_curves``
    (K, S)). Right: t_crit against β (``critical_curve`` at ``curve_betas``), with ``marks`` {β: t_crit}."""
    positions = axis_values("positions", positions, "(S,)")
    fractions = axis_values("fractions", fractions, "(F,)")
    times = axis_values("times", times, "(K,)")
    sources = axis_values("sources", sources, "(B,)")
    curve_betas = axis_values("curve_betas", curve_betas, "(C,)")
    curves = as_array("curves", curves, "(F, S)", 2)
    time_curves = as_array("time_curves", time_curves, "(K, S)", 2)
    estimate = as_array("estimate", estimate, "(K, B)", 2)
    error = as_array("error", error, "(K, B)", 2)
    critical_curve = as_array("critical_curve", critical_curve, "(C,)", 1)
    if (
        curves.shape != (fractions.size, positions.size)
        or time_curves.shape != (times.size, positions.size)
        or estimate.shape != (times.size, sources.size)
        or error.shape != estimate.shape
        or critical_curve.shape != curve_betas.shape
    ):
        raise ValueError(
            "curves must be (F, S), time_curves (K, S), estimate and error (K, B) and critical_curve "
            f"(C,); got {curves.shape}, {time_curves.shape}, {estimate.shape}, {error.shape}, "
            f"{critical_curve.shape}"
        )
    fig = new_figure(14.2, 4.5)
    left, middle, right = fig.subplots(1, 3, width_ratios=[1.1, 1.1, 0.9])
    cmap = colormaps["viridis"]
    for k, (f, curve) in enumerate(zip(fractions, curves)):
        color = cmap(0.9 * k / max(fractions.size - 1, 1))
        scaled = curve / curve.max()
        left.plot(positions, scaled, color=color, linewidth=1.5, label=rf"$t = {f:g}\,t_c$ ({f * t_crit:.3g})")
        i = int(np.argmin(scaled))
        left.plot(
            positions[i],
            scaled[i],
            marker="o",
            markersize=6,
            markerfacecolor="white",
            markeredgecolor=color,
            markeredgewidth=1.4,
            clip_on=False,
            zorder=4,
        )
    left.plot([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="0.3", label="minimum")
    left.set_xlim(0.0, 1.0)
    left.set_xlabel(POSITION_LABEL)
    left.set_ylabel(r"$S_t(s)\, /\, \max_s S_t(s)$")
    left.set_title(rf"closed form; $t_c = {t_crit:.4g}$", fontsize=LEGEND_SIZE + 1.5)
    left.legend(fontsize=LEGEND_SIZE - 0.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)

    for k, (t, curve, dots, bars) in enumerate(zip(times, time_curves, estimate, error)):
        color = cmap(0.15 + 0.7 * k / max(times.size - 1, 1))
        middle.plot(positions, curve, color=color, linewidth=1.5, label=rf"$S_t$, $t = {t:g}$")
        middle.errorbar(
            sources,
            dots,
            yerr=bars,
            linestyle="none",
            marker="o",
            markersize=5,
            markerfacecolor="white",
            markeredgecolor=color,
            ecolor=color,
            capsize=2.5,
            markeredgewidth=1.3,
            elinewidth=1.1,
        )
    middle.errorbar(
        [],
        [],
        yerr=[],
        linestyle="none",
        marker="o",
        markerfacecolor="white",
        markeredgecolor="0.3",
        ecolor="0.3",
        capsize=2.5,
        label="particles" + (f" ({runs} runs of n = {n})" if runs and n else "") + r", $\pm$1 s.e.",
    )
    middle.set_xlim(0.0, 1.0)
    middle.set_ylim(bottom=0.0)
    middle.set_xlabel(POSITION_LABEL)
    middle.set_ylabel(r"soft accuracy $S_t(s)$")
    middle.set_title("particles against the closed form", fontsize=LEGEND_SIZE + 1.5)
    middle.legend(fontsize=LEGEND_SIZE - 0.5, frameon=False, loc="lower right")

    right.plot(curve_betas, critical_curve, color=DATA_COLOR, linewidth=1.6)
    for b, value in (marks or {}).items():
        right.plot(
            b,
            value,
            linestyle="none",
            marker="o",
            markersize=6,
            markerfacecolor="white",
            markeredgecolor=THEORY_COLOR,
            markeredgewidth=1.4,
        )
        right.annotate(
            f"{value:.6f}", (b, value), textcoords="offset points", xytext=(7, 3), fontsize=LEGEND_SIZE - 0.5
        )
    right.set_yscale("log")
    right.set_xlabel(BETA_LABEL)
    right.set_ylabel(r"$t_c$: the minimum reaches the end")
    right.set_title(r"$t_c$ against $\beta$: past it, the end is worst", fontsize=LEGEND_SIZE + 1.5)
    despine(left, middle, right)
    fig.suptitle(
        title_text(
            r"Lost in the middle: the U-shaped retrieval profile of position-decayed attention",
            title,
            beta=beta,
            **{r"\lambda": lam, "M": classes},
        )
    )
    return finish(fig, path)


def decay_snapshots(ts, angles, groups, *, times=None, beta=None, lam=None, title=None, path=None) -> Figure:
    """The tokens of one run on the circle at four times (default: 0, t1/5, t1/2, t1): each token's path so far
    and its position (ring), coloured by its initial group; ``angles`` (T, n), ``groups`` (n,) integers."""
    ts = axis_values("ts", ts)
    angles = as_array("angles", angles, "(T, n)", 2)
    groups = np.asarray(groups, dtype=int)
    if angles.shape[0] != ts.size or groups.shape != (angles.shape[1],):
        raise ValueError(
            f"angles must be (T, n) with T = {ts.size} and groups (n,); got {angles.shape}, {groups.shape}"
        )
    if times is None:
        times = ts[-1] * np.array([0.0, 0.2, 0.5, 1.0])
    picks = sorted({int(np.argmin(np.abs(ts - t))) for t in times})
    fig = new_figure(3.0 * len(picks) + 0.3, 3.6)
    axes = fig.subplots(1, len(picks), squeeze=False)[0]
    colors = [GROUP_COLORS[g % len(GROUP_COLORS)] for g in groups]
    circle = np.linspace(0.0, 2.0 * np.pi, 361)
    path_angles = np.unwrap(angles, axis=0)
    for ax, k in zip(axes, picks):
        ax.plot(np.cos(circle), np.sin(circle), color="0.82", linewidth=0.9, zorder=1)
        for j in range(angles.shape[1]):
            th = path_angles[: k + 1, j]
            ax.plot(np.cos(th), np.sin(th), color=colors[j], linewidth=0.8, alpha=0.6, zorder=2)
        # the earlier tokens on top: the first one, which never moves, stays visible
        ax.scatter(
            np.cos(angles[k, ::-1]),
            np.sin(angles[k, ::-1]),
            s=18,
            facecolors="none",
            edgecolors=colors[::-1],
            linewidths=0.9,
            zorder=3,
        )
        for j, name, r in ((0, r"$\theta_1$", 0.78), (angles.shape[1] - 1, r"$\theta_N$", 0.62)):
            ax.text(
                r * np.cos(angles[k, j]),
                r * np.sin(angles[k, j]),
                name,
                color=colors[j],
                ha="center",
                va="center",
                fontsize=LEGEND_SIZE + 0.5,
            )
        ax.set_title(f"t = {ts[k]:g}", fontsize=LEGEND_SIZE + 1)
        ax.set_xlim(-1.12, 1.12)
        ax.set_ylim(-1.12, 1.12)
        ax.set_aspect("equal")
        ax.set_axis_off()
    fig.suptitle(
        title_text(
            "Position-decayed causal attention: four groups of consecutive tokens",
            title,
            beta=beta,
            **{r"\lambda": lam},
        )
    )
    return finish(fig, path)
