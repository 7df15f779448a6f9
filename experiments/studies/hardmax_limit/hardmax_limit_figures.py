"""The hardmax limit and the Frank–Wolfe view of attention (arXiv 2605.10931, 2508.09628): the dominance
cells with the hardmax paths, the distance to the limit against the rate, and the vertices' trapping times."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...plots.style import BETA_LABEL, DATA_COLOR, LEGEND_SIZE, THEORY_COLOR, axis_values, despine, finish, new_figure


def hardmax_cells(tokens, vertices: int, cells, *, paths: int = 48, title=None, path=None) -> Figure:
    """The convex hull of ``tokens`` (n, 2), whose first ``vertices`` rows are its vertices in angular order,
    shaded by dominance cell (argmax_v ⟨z, v⟩), and each interior token's hardmax path: the straight segment
    to its cell's vertex (``cells`` (n,), the vertex index of each token), drawn for ``paths`` of them."""
    from matplotlib import colormaps
    from matplotlib.path import Path

    x = np.asarray(tokens, dtype=float)
    cells = np.asarray(cells, dtype=int)
    if x.ndim != 2 or x.shape[1] != 2 or cells.shape != (x.shape[0],) or not 3 <= vertices <= x.shape[0]:
        raise ValueError(f"tokens must be (n, 2) with n ≥ vertices ≥ 3 and cells (n,); got {x.shape}, {cells.shape}")
    v = x[:vertices]
    fig = new_figure(5.6, 5.6)
    ax = fig.add_subplot()
    grid = np.linspace(-1.05, 1.05, 500)
    gx, gy = np.meshgrid(grid, grid)
    z = np.stack([gx.ravel(), gy.ravel()], axis=1)
    inside = Path(np.vstack([v, v[:1]])).contains_points(z)
    label = np.where(inside, np.argmax(z @ v.T, axis=1), -1).astype(float)
    label[label < 0] = np.nan
    cmap = colormaps["tab10"]
    colors = [cmap(i % 10) for i in range(vertices)]
    from matplotlib.colors import ListedColormap

    ax.imshow(
        label.reshape(gx.shape),
        origin="lower",
        extent=(grid[0], grid[-1], grid[0], grid[-1]),
        cmap=ListedColormap([(*c[:3], 0.22) for c in colors]),
        vmin=-0.5,
        vmax=vertices - 0.5,
        interpolation="nearest",
    )
    ax.plot(*np.vstack([v, v[:1]]).T, color="black", linewidth=1.0)
    interior = np.arange(vertices, x.shape[0])
    for i in interior[:: max(1, -(-interior.size // paths))]:
        end = v[cells[i]]
        ax.annotate(
            "",
            xy=end + 0.06 * (x[i] - end) / max(np.linalg.norm(x[i] - end), 1e-12),
            xytext=x[i],
            arrowprops=dict(arrowstyle="-|>", color=colors[cells[i]], linewidth=0.9, shrinkA=0, shrinkB=0),
        )
    dot = 3.5 if interior.size <= 100 else 2.0
    ax.plot(*x[vertices:].T, linestyle="none", marker="o", markersize=dot, color="0.15", label="interior tokens")
    ax.plot(
        *v.T,
        linestyle="none",
        marker="o",
        markersize=8,
        markerfacecolor="white",
        markeredgecolor="black",
        label="vertices (fixed)",
    )
    ax.set_aspect("equal")
    ax.set_axis_off()
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    fig.suptitle(
        title
        or "Hardmax with $Q^\\top K = I$: dominance cells, vertices fixed,\n"
        "each token on a straight line to its cell's vertex"
    )
    return finish(fig, path)


def hardmax_rate(
    betas, distance, worst, rate, t_c, t_c_predicted, fw_gap, *, t, floor=None, title=None, path=None
) -> Figure:
    """Three panels: the distance D(β) = (Σ_i |x_i^β − x_i^∞|²/n)^{1/2} between the attention and hardmax
    flows at time ``t`` and the largest token distance ``worst``, with the rate √(log(β+1)/β); the
    concentration time t_c(β) with log β − log u*; the Frank–Wolfe gap G_k of the hardmax steps
    h_k = 2/(k + 2) for QᵀK = −I, with a 1/k guide. ``floor``: the distance the solver resolves (a dotted line)."""
    betas = axis_values("betas", betas, "(B,)")
    distance, rate = np.asarray(distance, dtype=float), np.asarray(rate, dtype=float)
    worst = np.asarray(worst, dtype=float)
    t_c, t_c_predicted = np.asarray(t_c, dtype=float), np.asarray(t_c_predicted, dtype=float)
    fw_gap = np.asarray(fw_gap, dtype=float)
    if (
        not (distance.shape == worst.shape == rate.shape == t_c.shape == t_c_predicted.shape == betas.shape)
        or fw_gap.ndim != 1
    ):
        raise ValueError(
            f"distance, worst, rate, t_c and t_c_predicted must be (B,) = {betas.shape} and fw_gap 1-D; got "
            f"{distance.shape}, {worst.shape}, {rate.shape}, {t_c.shape}, {t_c_predicted.shape}, {fw_gap.shape}"
        )
    fig = new_figure(12.0, 4.0)
    a1, a2, a3 = fig.subplots(1, 3)
    fine = np.geomspace(betas.min(), betas.max(), 200)
    a1.loglog(
        betas,
        distance,
        marker="o",
        color=DATA_COLOR,
        label=r"$D(\beta) = (\frac{1}{n}\sum_i |x_i^\beta - x_i^\infty|^2)^{1/2}$",
    )
    a1.loglog(
        betas, worst, marker="s", markersize=4, color="0.45", linewidth=0.9, label=r"$\max_i |x_i^\beta - x_i^\infty|$"
    )
    a1.loglog(fine, np.sqrt(np.log1p(fine) / fine), color=THEORY_COLOR, label=r"$\sqrt{\log(\beta+1)/\beta}$")
    if floor is not None:
        a1.axhline(floor, color="0.5", linewidth=0.8, linestyle=":", label="solver's resolution")
        a1.set_ylim(bottom=floor / 100)
    a1.set_xlabel(BETA_LABEL)
    a1.set_ylabel(rf"distance to the hardmax flow at $t = {t:g}$")
    a1.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower left", bbox_to_anchor=(0.0, 0.18))
    ok = np.isfinite(t_c)
    a2.semilogx(
        betas[ok],
        t_c[ok],
        marker="o",
        linestyle="none",
        color=DATA_COLOR,
        label=r"$t_c$: a vertex's self-attention falls below $2/3$",
    )
    pos = t_c_predicted > 0
    a2.semilogx(betas[pos], t_c_predicted[pos], color=THEORY_COLOR, label=r"$\log\beta - \log u^*$")
    a2.set_xlabel(BETA_LABEL)
    a2.set_ylabel(r"concentration time $t_c$")
    a2.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper left")
    k = np.arange(fw_gap.size)
    pos = fw_gap > 0
    a3.loglog(k[pos] + 2, fw_gap[pos], color=DATA_COLOR, label=r"gap $G_k$, $Q^\top K = -I$")
    ref = k[pos][min(10, pos.sum() - 1)]
    a3.loglog(
        k[pos] + 2, fw_gap[ref] * (ref + 2) / (k[pos] + 2), color=THEORY_COLOR, linestyle="--", label=r"$\propto 1/k$"
    )
    a3.set_xlabel(r"Frank–Wolfe step $k + 2$")
    a3.set_ylabel(r"$G_k = \max_{i,j}\,\langle \nabla f(x_i), x_i - x_j\rangle$")
    a3.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower left")
    despine(a1, a2, a3)
    fig.suptitle(
        title or "The hardmax limit: distance against the rate, concentration at $t \\sim \\log\\beta$, Frank–Wolfe gap"
    )
    return finish(fig, path)


def trapping_times(betas, times, exponent: float, *, predicted=None, title=None, path=None) -> Figure:
    """The time T(β) until a vertex token leaves its vertex (log scale) against β, with the least-squares
    line and the slope ``exponent`` = c predicted (through the last point); ``predicted`` (B,), if given, as
    hollow markers (δ over the initial speed)."""
    betas = axis_values("betas", betas, "(B,)")
    times = np.asarray(times, dtype=float)
    if times.shape != betas.shape:
        raise ValueError(f"times must be (B,) = {betas.shape}, got {times.shape}")
    ok = np.isfinite(times) & (times > 0)
    fig = new_figure(6.4, 4.4)
    ax = fig.add_subplot()
    ax.semilogy(betas[ok], times[ok], marker="o", linestyle="none", color=DATA_COLOR, label=r"measured $T(\beta)$")
    if predicted is not None:
        ax.semilogy(
            betas,
            np.asarray(predicted, dtype=float),
            marker="o",
            markersize=10,
            linestyle="none",
            markerfacecolor="none",
            markeredgecolor=THEORY_COLOR,
            label=r"$\delta\,/\,$(initial speed of the fastest vertex)",
        )
    if ok.sum() >= 2:
        slope, icpt = np.polyfit(betas[ok], np.log(times[ok]), 1)
        ax.semilogy(
            betas, np.exp(icpt + slope * betas), color=DATA_COLOR, linewidth=1.0, label=rf"fit: $c = {slope:.4f}$"
        )
        last = np.nonzero(ok)[0][-1]
        ax.semilogy(
            betas,
            times[last] * np.exp(exponent * (betas - betas[last])),
            color=THEORY_COLOR,
            linestyle="--",
            label=rf"$e^{{c\beta}}$, $c = \min\langle v, v - v'\rangle = {exponent:.4f}$",
        )
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel("time until a vertex token moves by $10^{-3}$")
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper left")
    despine(ax)
    fig.suptitle(title or "Metastability at finite β: vertex tokens trapped for times $e^{c\\beta}$")
    return finish(fig, path)
