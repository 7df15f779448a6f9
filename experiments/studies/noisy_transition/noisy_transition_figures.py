"""The noise-driven phase transition of noisy USA tokens (arXiv 2606.05140): the order parameter along
noise sweeps down and up, with the predicted threshold and the mean field; the uniform phase's
susceptibility; the thresholds K_#^{(d)}(β) and β*^{(d)}."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from ...plots.style import (
    BETA_LABEL,
    DATA_COLOR,
    LEGEND_SIZE,
    SEQUENTIAL_CMAP,
    THEORY_COLOR,
    axis_values,
    despine,
    finish,
    new_figure,
    sequential_colors,
)

UP_COLOR = "#e08a00"  # the sweep up: orange, apart from the sweep down's blue and the theory's red
SWEEP_STYLE = {
    "down": dict(color=DATA_COLOR, marker="v", label=r"noise swept down (from uniform)"),
    "up": dict(color=UP_COLOR, marker="^", label=r"noise swept up (from gathered)"),
}


def _order_panel(ax, ratios, panel: dict) -> None:
    order = np.asarray(panel["order"], dtype=float)  # (seeds, 2, levels)
    if order.ndim != 3 or order.shape[1:] != (2, ratios.size):
        raise ValueError(f"order must be (seeds, 2, levels = {ratios.size}); got {order.shape}")
    ax.axvline(
        1.0, color=THEORY_COLOR, linewidth=1.2, linestyle=(0, (5, 3)), label=r"predicted $\sigma_\# = 1/\sqrt{K_\#}$"
    )
    offsets = {"down": -0.002, "up": 0.002}  # keep the two sweeps' error bars apart
    for s, name in enumerate(("down", "up")):
        mean = order[:, s].mean(axis=0)
        spread = order[:, s].std(axis=0, ddof=1) if order.shape[0] > 1 else np.zeros_like(mean)
        style = SWEEP_STYLE[name]
        ax.errorbar(
            ratios + offsets[name],
            mean,
            yerr=spread,
            color=style["color"],
            marker=style["marker"],
            markersize=5,
            linewidth=1.1,
            capsize=2,
            elinewidth=0.8,
            label=style["label"] + (f", {order.shape[0]} seeds" if s == 0 else ""),
        )
    mean_field = panel.get("meanfield")
    if mean_field is not None:
        mean_field = np.asarray(mean_field, dtype=float)
        ax.plot(
            ratios,
            mean_field[0],
            color="0.15",
            linewidth=1.0,
            linestyle=(0, (2, 2)),
            label=r"$n = \infty$ (mean field), down",
        )
        ax.plot(ratios, mean_field[1], color="0.15", linewidth=1.0, label=r"$n = \infty$ (mean field), up")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlim(ratios[0] - 0.02, ratios[-1] + 0.02)
    ax.set_xlabel(r"noise $\sigma / \sigma_\#$")
    continuous = panel["beta"] <= panel["beta_star"]
    kind = "continuous" if continuous else "discontinuous"
    sign = r"\leq" if continuous else ">"
    ax.set_title(
        rf"$d = {panel['d']}$, $\beta = {panel['beta']:g} {sign} \beta^* = {panel['beta_star']:.4f}$: "
        f"{kind}\n" + rf"$\sigma_\# = {panel['sigma_sharp']:.4g}$, $K_\# = {panel['coupling']:.4g}$",
        fontsize=LEGEND_SIZE + 1,
    )
    despine(ax)


def noise_sweep(ratios, panels: list[dict], *, n: int, title: str | None = None, path=None) -> Figure:
    """One panel per (d, β): the time-averaged order parameter ‖(1/n) Σ x_i‖ against σ/σ_# along the sweep
    down (from uniform tokens) and up (from gathered ones), seed mean ± spread, with the predicted threshold
    σ_# and, where given, the mean field's two sweeps. Last panel: 1/(n⟨r²⟩) in the uniform phase against
    K/K_# = (σ_#/σ)², with the prediction 1 − K/K_#.

    ``panels``: dicts with d, beta, beta_star, sigma_sharp, coupling (K_#), order (seeds, 2, levels; sweep 0
    down, 1 up), meanfield (2, levels) or None, susceptibility ((K/K_#,), (1/(n⟨r²⟩),)).
    """
    ratios = axis_values("ratios", ratios, "(levels,)")
    if not panels:
        raise ValueError("noise_sweep needs at least one panel")
    count = len(panels) + 1
    fig = new_figure(4.3 * count, 5.0)
    axes = fig.subplots(1, count, squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        _order_panel(ax, ratios, panel)
    axes[0].set_ylabel(r"order parameter $\|\frac{1}{n}\sum_i x_i\|$ (time average)")
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:-1]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(
        handles, labels, fontsize=LEGEND_SIZE, frameon=False, loc="outside lower center", ncols=min(len(handles), 5)
    )

    ax = axes[-1]
    grid = np.linspace(0.0, 1.0, 50)
    ax.plot(grid, 1.0 - grid, color=THEORY_COLOR, linewidth=1.5, label=r"$1 - K/K_\#$ (linear response)")
    from matplotlib import colormaps

    cmap = colormaps[SEQUENTIAL_CMAP]
    markers = "osDPX*"
    for k, panel in enumerate(panels):
        xs, ys = (np.asarray(a, dtype=float) for a in panel["susceptibility"])
        color = cmap(0.15 + 0.7 * k / max(len(panels) - 1, 1))
        ax.plot(
            xs,
            ys,
            linestyle="none",
            marker=markers[k % len(markers)],
            markersize=6,
            markerfacecolor="white",
            markeredgecolor=color,
            markeredgewidth=1.4,
            label=rf"$d = {panel['d']}$, $\beta = {panel['beta']:g}$",
        )
    ax.axhline(0.0, color="0.5", linewidth=0.8)
    ax.set_xlim(0.0, 1.05)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel(r"coupling $K / K_\# = (\sigma_\# / \sigma)^2$")
    ax.set_ylabel(r"$1 / (n \langle r^2 \rangle)$ in the uniform phase")
    ax.set_title(rf"uniform phase: $n\langle r^2\rangle = 1/(1 - K/K_\#)$, $n = {n}$", fontsize=LEGEND_SIZE + 1)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="upper right")
    despine(ax)
    fig.suptitle(title or f"Noisy USA tokens: the uniform state's phase transition (n = {n})")
    return finish(fig, path)


def transition_thresholds(curves: list[dict], betas, *, title: str | None = None, path=None) -> Figure:
    """K_#^{(d)}(β) against β for each d (``curves``: dicts with d, beta (grid), coupling (K_# on it),
    beta_star, coupling_star), solid where the transition is continuous (β ≤ β*), dashed where it is
    discontinuous; the run's β values as grey lines. Right axis: σ_# = 1/√K_#."""
    betas = np.asarray(betas, dtype=float)
    if not curves:
        raise ValueError("transition_thresholds needs at least one curve")
    from matplotlib import colormaps

    cmap = colormaps[SEQUENTIAL_CMAP]
    fig = new_figure(6.6, 4.5)
    ax = fig.add_subplot()
    for k, curve in enumerate(curves):
        grid = axis_values("beta", curve["beta"], "(B,)")
        K = np.asarray(curve["coupling"], dtype=float)
        color = cmap(0.1 + 0.75 * k / max(len(curves) - 1, 1))
        below = grid <= curve["beta_star"]
        ax.plot(grid[below], K[below], color=color, linewidth=1.8, label=rf"$d = {curve['d']}$")
        ax.plot(grid[~below], K[~below], color=color, linewidth=1.8, linestyle=(0, (5, 2.5)))
        ax.plot(
            [curve["beta_star"]],
            [curve["coupling_star"]],
            marker="o",
            markersize=6,
            color=color,
            markeredgecolor="white",
            zorder=3,
        )
        ax.annotate(
            rf"$\beta^* = {curve['beta_star']:.4f}$",
            (curve["beta_star"], curve["coupling_star"]),
            xytext=(6, 4),
            textcoords="offset points",
            fontsize=LEGEND_SIZE,
            color=color,
        )
    for b in betas:
        ax.axvline(b, color="0.55", linewidth=0.9, linestyle=(0, (1, 2)))
    ax.plot([], [], color="0.3", linewidth=1.8, label=r"$\beta \leq \beta^*$: continuous")
    ax.plot([], [], color="0.3", linewidth=1.8, linestyle=(0, (5, 2.5)), label=r"$\beta > \beta^*$: discontinuous")
    ax.plot([], [], color="0.55", linewidth=0.9, linestyle=(0, (1, 2)), label=r"this run's $\beta$")
    ax.set_yscale("log")
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel(r"$K_\#^{(d)}(\beta) = \beta^{d/2} / (2^{d/2}\Gamma(d/2) I_{d/2}(\beta)) = 1/\sigma_\#^2$")
    ax.legend(fontsize=LEGEND_SIZE, frameon=False, loc="lower left")
    despine(ax)
    fig.suptitle(title or "Linear-stability threshold of the uniform state, noisy USA (arXiv 2606.05140)")
    return finish(fig, path)


def bifurcation_diagram(
    panels: list[dict],
    *,
    model: str,
    path=None,
    title: str = "Stationary densities of the noisy mean field on the circle",
    ylabel: str = r"amplitude $\max_k |c_k|$  (order $r = |c_1|$)",
    threshold: str = "mode 1's threshold",
) -> Figure:
    """One panel per β (or per sphere: a panel's ``name`` heads its title): the amplitude max_k |c_k| of every
    branch of stationary densities against the coupling K/K_# on a log scale (stable solid, unstable dashed), the
    folds, and the particles' order parameter along the noise sweeps; one legend below the panels."""
    fig = new_figure(5.2 * len(panels) + 0.4, 4.6)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels):
        K0 = panel["coupling"]
        colors = ["0.3"] + sequential_colors(
            len(panel["branches"]) - 1
        )  # the uniform density grey, the modes in viridis
        for i, br in enumerate(panel["branches"]):
            K, amp, stable = (np.asarray(br[k], dtype=float) for k in ("K", "amplitude", "stable"))
            keep = np.isfinite(K)
            K, amp, stable = K[keep] / K0, amp[keep], stable[keep] > 0.5
            # a segment is stable when both its ends are; each run of equally stable segments is one line, so that
            # the dashes of an unstable run show however dense its points
            segment = stable[:-1] & stable[1:]
            start = 0
            for j in range(1, len(segment) + 1):
                if j == len(segment) or segment[j] != segment[start]:
                    ax.plot(
                        K[start : j + 1],
                        amp[start : j + 1],
                        linestyle="-" if segment[start] else (0, (4, 2.5)),
                        color=colors[i],
                        linewidth=2.0 if segment[start] else 1.3,
                    )
                    start = j
            ax.plot([], [], "-", color=colors[i], linewidth=2.0, label=br["label"])
            for f in br.get("folds", []):
                ax.plot(
                    [f[0] / K0],
                    [f[1]],
                    "o",
                    markersize=7,
                    markerfacecolor="white",
                    color="0.1",
                    zorder=4,
                    label="fold" if i == 1 else None,
                )
        ax.axvline(1.0, color=THEORY_COLOR, linestyle=(0, (5, 3)), linewidth=1.0, label=rf"$K_\#$: {threshold}")
        order = panel.get("order")
        if order is not None:
            Kp = 1.0 / np.asarray(panel["ratios"], dtype=float) ** 2
            for s, (name, marker, color) in enumerate(
                (("particles, noise swept down", "v", DATA_COLOR), ("particles, noise swept up", "^", "#e08a00"))
            ):
                ax.plot(
                    Kp,
                    np.asarray(order)[:, s].mean(axis=0),
                    marker,
                    color=color,
                    markersize=5.5,
                    markeredgecolor="white",
                    markeredgewidth=0.5,
                    zorder=5,
                    label=f"{name} (n = {panel['n']})",
                )
        mean_field = panel.get("meanfield")
        if mean_field is not None:
            Kp = 1.0 / np.asarray(panel["ratios"], dtype=float) ** 2
            for s, (name, marker) in enumerate(
                (
                    ("time-dependent mean field, noise swept down", "1"),
                    ("time-dependent mean field, noise swept up", "2"),
                )
            ):
                ax.plot(
                    Kp,
                    np.asarray(mean_field)[s],
                    marker,
                    color="0.1",
                    markersize=9,
                    markeredgewidth=1.3,
                    zorder=6,
                    label=name,
                )
        ax.set_xscale("log")
        ax.set_xlim(panel["xlim"])
        # plain numbers on the log axis (0.6, 1, 2 rather than 6×10⁻¹), minor ticks labelled where few majors show
        plain = mpl.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.xaxis.set_minor_formatter(plain if panel["xlim"][1] / panel["xlim"][0] < 20 else mpl.ticker.NullFormatter())
        if panel.get("xticks") is not None:  # a narrow range with no log tick between 1 and its end
            ax.set_xticks(panel["xticks"])
            ax.set_xticks([], minor=True)
        ax.set_ylim(-0.03, 1.02)
        ax.set_xlabel(r"coupling $K/K_\#$  ($K = 1/\sigma^2$, log scale)")
        kind = "supercritical" if panel["beta"] <= panel["beta_star"] else "subcritical"
        name = f"{panel['name']}, " if panel.get("name") else ""
        ax.set_title(rf"{name}$\beta = {panel['beta']:g}$: {kind} ($\beta^* = {panel['beta_star']:.4f}$)")
        despine(ax)
    axes[0].set_ylabel(ylabel)
    handles, labels = axes[-1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4, fontsize=LEGEND_SIZE, frameon=False)
    fig.suptitle(
        f"{title} ({model.upper()}): stable solid, unstable dashed",
        fontsize=11,
    )
    return finish(fig, path)
