"""The Gaussian closure of attention without layer norm (arXiv 2501.18322 §5): closure against particles as n grows,
the collapse of the covariance onto ker A, and the histograms of the limit ranks."""

from __future__ import annotations

import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from ...plots.style import (
    DATA_COLOR,
    LEGEND_SIZE,
    THEORY_COLOR,
    TIME_LABEL,
    as_array,
    axis_values,
    despine,
    finish,
    new_figure,
    title_text,
)


def closure_rate(sizes, errors, ts, *, d=None, beta=None, title=None, path=None) -> Figure:
    """Left: the relative covariance error ‖Σ̂_n(t1) − Σ(t1)‖_F/‖Σ(t1)‖_F of n particles against the closure, per
    replica (dots) and RMS (line), with its fitted slope and n^{−1/2}. Right: the RMS error against time, one curve
    per n. ``errors`` (N, R, T) at ``sizes`` (N,) and ``ts`` (T,)."""
    sizes = axis_values("sizes", sizes, "(N,)")
    ts = axis_values("ts", ts, "(T,)")
    errors = as_array("errors", errors, "(N, R, T)", 3)
    if errors.shape[0] != sizes.size or errors.shape[2] != ts.size:
        raise ValueError(f"errors must have shape (N, R, T) = ({sizes.size}, R, {ts.size}); got {errors.shape}")
    from matplotlib import colormaps

    rms = np.sqrt(np.mean(errors**2, axis=1))
    fig = new_figure(10.4, 4.3)
    left, right = fig.subplots(1, 2)
    final = errors[:, :, -1]
    for n, row in zip(sizes, final):
        left.plot(np.full(row.size, n), row, linestyle="none", marker="o", markersize=3, color=DATA_COLOR, alpha=0.35)
    left.plot(
        sizes,
        rms[:, -1],
        color=DATA_COLOR,
        marker="o",
        markersize=5,
        linewidth=1.5,
        label=rf"RMS over {errors.shape[1]} replicas",
    )
    slope, intercept = np.polyfit(np.log(sizes), np.log(rms[:, -1]), 1)
    grid = np.geomspace(sizes[0], sizes[-1], 50)
    left.plot(
        grid, np.exp(intercept) * grid**slope, color=THEORY_COLOR, linewidth=1.2, label=f"fit: slope {slope:+.2f}"
    )
    anchor = rms[0, -1] * np.sqrt(sizes[0])
    left.plot(
        grid, anchor / np.sqrt(grid), color="0.35", linewidth=1.0, linestyle=(0, (4, 3)), label=r"$\propto n^{-1/2}$"
    )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xticks(sizes, [f"{n:g}" for n in sizes])
    left.xaxis.set_minor_locator(ticker.NullLocator())
    left.set_xlabel(r"particles $n$")
    left.set_ylabel(rf"$\|\hat\Sigma_n - \Sigma\|_F / \|\Sigma\|_F$ at $t = {ts[-1]:g}$")
    left.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper right")
    despine(left)
    cmap = colormaps["viridis"]
    for k, (n, curve) in enumerate(zip(sizes, rms)):
        right.plot(ts, curve, color=cmap(0.85 * k / max(sizes.size - 1, 1)), linewidth=1.5, label=rf"$n = {n:g}$")
    right.set_yscale("log")
    right.set_xlim(ts[0], ts[-1])
    right.set_xlabel(TIME_LABEL)
    right.set_ylabel("RMS relative covariance error")
    right.legend(fontsize=LEGEND_SIZE, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    despine(right)
    params = {"d": d} if d is not None else {}
    if beta is not None:
        params["beta"] = round(float(beta), 4)
    fig.suptitle(title_text("Gaussian closure against particles without layer norm", title, **params))
    return finish(fig, path)


def closure_collapse(ts, particles, closure, *, n=None, title=None, path=None) -> Figure:
    """The eigenvalues of the covariance against time (log-log), of the particles (dots) and of the closure (lines):
    the direction of range A collapses like 1/t. ``particles``, ``closure`` (T, d) at ``ts`` (T,), ts[0] = 0 allowed
    (not drawn)."""
    ts = axis_values("ts", ts, "(T,)")
    particles = as_array("particles", particles, "(T, d)", 2)
    closure = as_array("closure", closure, "(T, d)", 2)
    if particles.shape != closure.shape or particles.shape[0] != ts.size:
        raise ValueError(
            f"particles and closure must both have shape (T, d) with T = {ts.size}; got "
            f"{particles.shape}, {closure.shape}"
        )
    from matplotlib import colormaps

    keep = ts > 0
    cmap = colormaps["viridis"]
    d = closure.shape[1]
    fig = new_figure(6.6, 4.5)
    ax = fig.add_subplot()
    for k in range(d):
        color = cmap(0.8 * k / max(d - 1, 1))
        ax.plot(ts[keep], closure[keep, k], color=color, linewidth=1.6)
        ax.plot(
            ts[keep],
            particles[keep, k],
            linestyle="none",
            marker="o",
            markersize=4,
            markerfacecolor="white",
            markeredgecolor=color,
            markeredgewidth=1.1,
        )
    t = ts[keep]
    late = t >= t[-1] / 10
    ref = closure[keep, 0][late][0] * t[late][0] / t[late]
    ax.plot(t[late], 0.5 * ref, color=THEORY_COLOR, linewidth=1.0, linestyle=(0, (4, 3)), label=r"$\propto 1/t$")
    ax.plot([], [], color="0.3", linewidth=1.6, label="closure")
    ax.plot(
        [],
        [],
        linestyle="none",
        marker="o",
        markerfacecolor="white",
        markeredgecolor="0.3",
        label="particles" + (f" ($n = {n}$)" if n else ""),
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(t[0], t[-1])
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(r"eigenvalues of $\Sigma_t$")
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower left")
    despine(ax)
    fig.suptitle(
        title_text("Collapse onto ker A without layer norm", title)
        + "\n"
        + r"$K = -Q$ ($Q$: $1\times d$), $V$ random positive definite"
    )
    return finish(fig, path)


def limit_rank_histograms(
    dims, counts, bounds, *, failed=None, value_labels=("V = I", "V random"), title=None, path=None
) -> Figure:
    """One panel per value matrix (rows) and dimension (columns): how many random draws end at each rank, with the
    bound d − rank A (dashed) and the draws whose covariance had not settled by t = 10⁶ (grey bar, "n.s.").
    ``counts`` (D, rows, max d + 2): ranks 0 … max d, then the unsettled ones. ``failed`` (D, rows), if given: the
    draws whose solve failed (no limit, so in no bar of ``counts``): a red bar "fail", and their total in the title."""
    dims = axis_values("dims", dims, "(D,)").astype(int)
    counts = as_array("counts", counts, "(D, rows, max d + 2)", 3)
    bounds = as_array("bounds", bounds, "(D,)", 1)
    if counts.shape[0] != dims.size or counts.shape[1] != len(value_labels) or bounds.shape != dims.shape:
        raise ValueError(
            f"counts must be (D, rows, ·) = ({dims.size}, {len(value_labels)}, ·) and bounds (D,); got "
            f"{counts.shape} and {bounds.shape}"
        )
    if failed is not None:
        failed = as_array("failed", failed, "(D, rows)", 2)
        if failed.shape != counts.shape[:2]:
            raise ValueError(f"failed must be (D, rows) = {counts.shape[:2]}, got {failed.shape}")
    rows = counts.shape[1]
    fig = new_figure(3.0 * dims.size + 0.6, 2.7 * rows + 0.6)
    axes = fig.subplots(rows, dims.size, squeeze=False)
    for j in range(rows):
        for i, d in enumerate(dims):
            ax = axes[j, i]
            ranks = np.arange(d + 1)
            ax.bar(ranks, counts[i, j, : d + 1], width=0.7, color=DATA_COLOR)
            ax.bar([d + 1.2], [counts[i, j, -1]], width=0.7, color="0.65")
            extra, labels = [d + 1.2], ["n.s."]
            if failed is not None:
                ax.bar([d + 2.4], [failed[i, j]], width=0.7, color=THEORY_COLOR)
                extra, labels = extra + [d + 2.4], labels + ["fail"]
            ax.axvline(
                bounds[i],
                color=THEORY_COLOR,
                linewidth=1.2,
                linestyle=(0, (4, 3)),
                label=r"$d - \mathrm{rank}\,A$" if (i, j) == (0, 0) else None,
            )
            ax.set_xticks(list(ranks) + extra, [str(r) for r in ranks] + labels)
            ax.yaxis.set_major_locator(ticker.MaxNLocator(nbins=5, integer=True))
            top = max(counts[i, j].max(), 0 if failed is None else failed[i, j])
            ax.set_ylim(0, 1.15 * top if top > 0 else 1)
            if j == 0:
                ax.set_title(rf"$d = {d}$")
            if j == rows - 1:
                ax.set_xlabel("rank of the limit covariance")
            if i == 0:
                ax.set_ylabel(f"{value_labels[j]}\ndraws")
            despine(ax)
    axes[0, 0].legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper left")
    note = "" if failed is None else f"; fail: solve failed ({int(failed.sum())} draws)"
    fig.suptitle(
        title_text("Limit ranks of the Gaussian closure", title)
        + "\n"
        + r"$K = -Q$, $Q$: $\lfloor d/2\rfloor \times d$ Gaussian; n.s.: not settled by $t = 10^6$"
        + note
    )
    return finish(fig, path)
