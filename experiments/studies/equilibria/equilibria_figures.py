"""Rest points and their stability (docs/model.md §13): indices of regular configurations over β, eigenvalues
along a continuation in β with the branch points, the energy staircase's plateaus at the saddles, the four-token
extremizers of arXiv 2501.03096; and the noisy mean field's bifurcation diagram on the circle."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ...plots.style import (
    BETA_LABEL,
    DATA_COLOR,
    LEGEND_SIZE,
    THEORY_COLOR,
    despine,
    finish,
    new_figure,
    sequential_colors,
)

MARKERS = ("o", "s", "D", "^", "v", "P", "X")


def rest_point_indices(betas, ds, names, index, *, thresholds, model: str, path=None) -> Figure:
    """One panel per d: the index (unstable directions, rotations excluded) of each configuration against β as
    steps (an integer, constant between its jumps), the simplex's stability threshold −(n−1)(n−2)/n dashed.
    index: (len(ds), len(betas), len(names)), NaN where a configuration does not exist."""
    betas = np.asarray(betas, dtype=float)
    index = np.asarray(index, dtype=float)
    fig = new_figure(max(3.6 * len(ds) + 0.4, 7.5), 4.3)
    axes = fig.subplots(1, len(ds), squeeze=False)[0]
    colors = sequential_colors(len(names))
    legend: dict = {}
    for a, (ax, d) in enumerate(zip(axes, ds)):
        shown = 0
        for p, name in enumerate(names):
            y = index[a, :, p]
            if not np.any(np.isfinite(y)):
                continue
            # an index is an integer: it jumps between grid points (steps half-way), never slopes;
            # overlapping values stay visible: each configuration's markers smaller than the last one's
            ax.plot(
                betas, y, "-", color=colors[p], linewidth=0.9, alpha=0.5, drawstyle="steps-mid", gid=f"steps {name}"
            )
            (line,) = ax.plot(
                betas,
                y,
                MARKERS[p % len(MARKERS)],
                color=colors[p],
                markersize=9 - 1.4 * shown,
                markeredgecolor="white",
                markeredgewidth=0.6,
            )
            legend.setdefault(name, line)
            shown += 1
        line = ax.axvline(thresholds[a], color=THEORY_COLOR, linestyle=(0, (5, 3)), linewidth=1.1)
        legend.setdefault(r"$\beta_n = -(n-1)(n-2)/n$ (simplex, $n = d + 1$)", line)
        ax.annotate(
            rf"$\beta_{{{d + 1}}} = {thresholds[a]:.4g}$",
            (thresholds[a], 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            color=THEORY_COLOR,
            fontsize=LEGEND_SIZE,
        )
        ax.yaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel(BETA_LABEL)
        ax.set_title(rf"$d = {d}$ ({model.upper()})")
        despine(ax)
    axes[0].set_ylabel("unstable directions (index)")
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="outside lower center",
        ncol=min(len(legend), 4),
        fontsize=LEGEND_SIZE,
        frameon=False,
    )
    fig.suptitle("Regular configurations as rest points: index over β", fontsize=11)
    return finish(fig, path)


def continuation_paths(paths: list[dict], *, model: str, path=None) -> Figure:
    """One panel per continued path: the eigenvalues along the branch (points) against β, the closed forms μ_1, μ_2
    (lines), and the located branch points (vertical lines)."""
    fig = new_figure(4.3 * len(paths) + 0.3, 4.2)
    axes = fig.subplots(1, len(paths), squeeze=False)[0]
    for ax, p in zip(axes, paths):
        beta = np.asarray(p["beta"], dtype=float)
        eigen = np.asarray(p["eigen"], dtype=float)
        keep = np.isfinite(beta)
        labelled = False
        for j in range(eigen.shape[1]):
            y = eigen[keep, j]
            moving = np.isfinite(y) & (y != 0.0)  # the rotations' zero modes are exact zeros: left out
            if not moving.any():
                continue
            ax.plot(
                beta[keep][moving],
                y[moving],
                "o",
                color=DATA_COLOR,
                markersize=3.5,
                alpha=0.7,
                label=None if labelled else "continuation: eigenvalues along the branch",
            )
            labelled = True
        theory = np.asarray(p["theory"])
        for j, (label, style) in enumerate(((r"$\mu_1(\beta)$", "-"), (r"$\mu_2(\beta)$", "--"))):
            if j == 1 and p["n"] < 4:
                continue
            ax.plot(p["grid"], theory[:, j], style, color=THEORY_COLOR, linewidth=1.1, label=label + " (closed form)")
        ax.axhline(0.0, color="0.4", linewidth=0.7)
        for k, b in enumerate(np.asarray(p["crossings"], dtype=float)):
            if np.isfinite(b):
                ax.axvline(b, color="0.2", linestyle=":", linewidth=1.0)
                ax.annotate(
                    f"branch point\nβ = {round(b, 10) + 0.0:.10g}",
                    (b, 0),
                    xytext=(4, -30 - 26 * k),
                    textcoords="offset points",
                    fontsize=LEGEND_SIZE - 1,
                )
        ax.set_xlim(float(np.min(p["grid"])), float(np.max(p["grid"])))
        ax.set_xlabel(BETA_LABEL)
        ax.set_title(rf"{p['name']}, $n = {p['n']}$, $d = {p['d']}$ ({model.upper()})")
        despine(ax)
    axes[0].set_ylabel("eigenvalue (rotations excluded)")
    # one legend for the panels, below them: inside, it would cover a branch
    legend: dict = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(
        list(legend.values()), list(legend), loc="outside lower center", ncol=3, fontsize=LEGEND_SIZE, frameon=False
    )
    fig.suptitle("Continuation in β: eigenvalues crossing zero at the branch points", fontsize=11)
    return finish(fig, path)


def _partition_text(part) -> str:
    return "(" + ",".join(str(m) for m in part) + ")"


def staircase_saddles(
    ts, energy, parts, saddle_energy, saddle_index, plateau_energy, plateau_saddle, *, n: int, beta: float, path=None
) -> Figure:
    """Left: the normalized energy against log time (the staircase) with the saddles its plateaus sit at; right:
    every cluster saddle's normalized energy by its number of clusters, labelled by its Morse index."""
    ts, energy = np.asarray(ts, dtype=float), np.asarray(energy, dtype=float)
    saddle_energy, saddle_index = np.asarray(saddle_energy, dtype=float), np.asarray(saddle_index, dtype=float)
    fig = new_figure(9.6, 3.8)
    left, right = fig.subplots(1, 2, width_ratios=[1.35, 1.0])
    left.semilogx(ts, energy, color=DATA_COLOR, linewidth=1.6, label="normalized energy")
    visited = [int(j) for j in np.asarray(plateau_saddle, dtype=float) if np.isfinite(j)]
    for j in dict.fromkeys(visited):
        left.axhline(saddle_energy[j], color=THEORY_COLOR, linestyle=(0, (4, 3)), linewidth=0.9)
        left.annotate(
            f"saddle {_partition_text(parts[j])}, index {int(saddle_index[j])}",
            (ts[0], saddle_energy[j]),
            xytext=(2, 3),
            textcoords="offset points",
            fontsize=LEGEND_SIZE - 1,
            color=THEORY_COLOR,
        )
    left.set_xlabel(r"time $t$ (rescaled, log scale)")
    left.set_ylabel(r"$\frac{1}{n^2}\sum_{ij} e^{\beta(\langle x_i,x_j\rangle - 1)}$")
    left.set_ylim(0, 1.08)
    left.set_title(rf"energy staircase, $n = {n}$, $\beta = {beta:g}$ (USA)")
    despine(left)
    k = np.array([len(p) for p in parts])
    right.scatter(k, saddle_energy, color=THEORY_COLOR, zorder=3, s=22)
    for j, part in enumerate(parts):
        right.annotate(
            f"{_partition_text(part)}: {int(saddle_index[j])}",
            (k[j], saddle_energy[j]),
            xytext=(5, -3),
            textcoords="offset points",
            fontsize=LEGEND_SIZE - 1,
        )
    right.set_xlabel("clusters $k$")
    right.set_ylabel("saddle's normalized energy")
    right.set_xlim(0.5, n + 1.3)
    right.set_xticks(range(1, n + 1))
    right.set_title("saddles (cluster sizes): Morse index")
    despine(right)
    return finish(fig, path)


def extremizer_sweep(taus, ratio, energy, index, candidates, authors: dict, *, path=None) -> Figure:
    """Left: tanh(x_1²)/tanh(τx_2²) at the stationary rectangle against τ > 0, with the authors' flows; right: the
    energy E_D of each four-token rest point against τ, filled where it is a minimizer (Morse index 0)."""
    taus, ratio = np.asarray(taus, dtype=float), np.asarray(ratio, dtype=float)
    energy, index = np.asarray(energy, dtype=float), np.asarray(index, dtype=float)
    fig = new_figure(9.6, 4.6)
    left, right = fig.subplots(1, 2)
    pos = taus > 0
    grid = np.linspace(0, max(10.5, float(taus.max()) + 0.5), 50)
    left.plot(grid, grid, color="0.6", linewidth=0.8, label=r"$\tau$ (the paper's condition)")
    left.plot(taus[pos], ratio[pos], "o", color=DATA_COLOR, markersize=6, label="attnflow: Newton, index 0")
    styles = {5e-4: ("x", "#e08a00"), 5e-2: ("+", THEORY_COLOR)}
    for step, values in authors.items():
        t = np.asarray(sorted(values))
        marker, color = styles.get(step, ("*", "0.3"))
        left.plot(
            t,
            [values[v] for v in t],
            marker,
            color=color,
            markersize=8,
            markeredgewidth=1.5,
            label=f"authors' package, explicit step {step:g}",
        )
    left.set_xlabel(r"$\tau$, $D = \mathrm{diag}(1, \tau)$")
    left.set_ylabel(r"$\tanh(x_1^2)/\tanh(\tau x_2^2)$")
    left.set_title("four tokens: the minimizing rectangle")
    left.legend(loc="upper left", fontsize=LEGEND_SIZE - 1, frameon=False)
    despine(left)
    colors = sequential_colors(len(candidates))
    for j, name in enumerate(candidates):
        ok = np.isfinite(energy[:, j])
        stable = ok & (index[:, j] == 0)
        right.plot(taus[ok], energy[ok, j], "-", color=colors[j], linewidth=0.8, alpha=0.6)
        right.plot(
            taus[stable], energy[stable, j], MARKERS[j % len(MARKERS)], color=colors[j], markersize=6, label=name
        )
        right.plot(
            taus[ok & ~stable],
            energy[ok & ~stable, j],
            MARKERS[j % len(MARKERS)],
            markersize=6,
            markerfacecolor="none",
            color=colors[j],
        )
    right.set_yscale("log")
    right.set_xlabel(r"$\tau$")
    right.set_ylabel(r"$E_D = \frac{1}{n^2}\sum_{ij} e^{\langle x_i, D x_j\rangle}$")
    right.set_title("rest points: filled = minimizer (index 0)")
    handles, labels = right.get_legend_handles_labels()
    handles.append(Line2D([], [], marker="o", markerfacecolor="none", color="0.3", linestyle="none"))
    labels.append("open: saddle or maximizer")
    # below the panels: inside, the legend would cover the rest points' curves
    fig.legend(handles, labels, loc="outside lower right", fontsize=LEGEND_SIZE - 1, frameon=False, ncol=3)
    despine(right)
    return finish(fig, path)
