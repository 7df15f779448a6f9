"""The (β, d) diagram of antipodal pairs under common noise, with the closed-form threshold cosh 2β = d − 2."""

from __future__ import annotations

import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.figure import Figure

from ...plots.style import (
    BETA_LABEL,
    DATA_COLOR,
    THEORY_COLOR,
    TIME_LABEL,
    centers_to_edges,
    despine,
    finish,
    new_figure,
    sequential_colors,
    title_text,
)


def antipodal_diagram(
    betas, dims, fraction, *, threshold_curve, n: int, members: int, t1: float, title=None, path=None
) -> Figure:
    """The fraction of members with an antipodal pair at t1 over (β, d), ``fraction`` of shape (len(dims),
    len(betas)), with the curve ``threshold_curve`` = (d grid, β*(d)) where antipodal pairs start to attract."""
    betas, dims = np.asarray(betas, dtype=float), np.asarray(dims, dtype=float)
    fraction = np.asarray(fraction, dtype=float)
    if fraction.shape != (dims.size, betas.size):
        raise ValueError(f"fraction must have shape (len(dims), len(betas)) = {(dims.size, betas.size)}")
    fig = new_figure(6.4, 4.6)
    ax = fig.subplots()
    mesh: ScalarMappable
    if betas.size > 1 and dims.size > 1:
        mesh = ax.pcolormesh(
            centers_to_edges(betas), centers_to_edges(dims), fraction, cmap="viridis", vmin=0.0, vmax=1.0
        )
    else:
        bb, dd = np.meshgrid(betas, dims)
        mesh = ax.scatter(bb.ravel(), dd.ravel(), c=fraction.ravel(), cmap="viridis", vmin=0.0, vmax=1.0, s=120)
    fig.colorbar(mesh, ax=ax, label="antipodal fraction at t1")
    grid, curve = threshold_curve
    ax.plot(curve, grid, color=THEORY_COLOR, lw=2, label="cosh 2β = d − 2 (λ_antipodal = 0)")
    ax.set_xlim(betas.min() - 0.1, betas.max() + 0.1)
    ax.set_ylim(dims.min() - 0.5, dims.max() + 0.5)
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel("d")
    ax.legend(loc="upper left")
    despine(ax)
    ax.set_title(title_text("antipodal pairs under common noise", title, n=n, members=members, t1=t1))
    return finish(fig, path)


def exponents_against_beta(betas, dims, exponents, *, sigma: float, title=None, path=None) -> Figure:
    """The Lyapunov exponents at the aligned (left) and antipodal (right) states against β, one colour per d:
    simulated (markers, ± 2 s.e.) and in closed form (lines). ``exponents``: state → (simulated, s.e., closed
    form), each of shape (len(dims), len(betas))."""
    betas = np.asarray(betas, dtype=float)
    fig = new_figure(10.0, 4.2)
    axes = fig.subplots(1, 2)
    colors = sequential_colors(len(dims))
    grid = np.linspace(betas.min(), betas.max(), 200)
    for ax, state in zip(axes, ("aligned", "antipodal"), strict=True):
        sim, se, theory = (np.asarray(a, dtype=float) for a in exponents[state])
        for k, (d, color) in enumerate(zip(dims, colors, strict=True)):
            ax.errorbar(betas, sim[k], yerr=2 * se[k], fmt="o", ms=4, color=color, capsize=2, label=f"d = {d}")
            if state == "antipodal":
                c2 = np.cosh(2 * grid)
                ax.plot(grid, 2 * sigma**2 * (d - 2 - c2) / (d * (1 + c2)), color=color, lw=1.3)
            else:
                ax.plot(betas, theory[k], color=color, lw=1.3)
        ax.axhline(0.0, color="0.5", lw=0.8)
        ax.set_xlabel(BETA_LABEL)
        ax.set_title(f"at the {state} state", fontsize=10)
        despine(ax)
    axes[0].set_ylabel(r"Lyapunov exponent $\lambda$")
    axes[1].legend(loc="upper right", fontsize=8)
    head = title_text("two tokens under common noise: the Lyapunov exponents", title)
    fig.suptitle(f"{head}\nσ = {sigma:g}; markers: simulated pairs (± 2 s.e.), lines: closed form")
    return finish(fig, path)


def antipodal_stage(ts, gammas, near, *, d: int, r0: float, members: int, title=None, path=None) -> Figure:
    """The fraction of pairs with R < −0.9 against time, ``near`` of shape (len(gammas), T), one curve per γ."""
    ts, gammas, near = np.asarray(ts), np.asarray(gammas, dtype=float), np.asarray(near, dtype=float)
    if near.shape != (gammas.size, ts.size):
        raise ValueError(f"near must have shape (len(gammas), len(ts)) = {(gammas.size, ts.size)}")
    fig = new_figure(6.4, 4.2)
    ax = fig.subplots()
    for g, row, color in zip(gammas, near, sequential_colors(gammas.size), strict=True):
        ax.plot(ts, row, color=color, lw=1.6, label=f"γ = {g:g}")
    ax.set_xlabel(TIME_LABEL)
    ax.set_ylabel(r"fraction of pairs with $\langle x_1, x_2\rangle < -0.9$")
    ax.set_ylim(-0.02, 1.0)
    ax.legend(loc="upper right")
    despine(ax)
    ax.set_title(title_text("the metastable antipodal stage", title, d=d, R0=r0, members=members))
    return finish(fig, path)


def plateau_length(gammas, mean, se, theory, fit, *, d: int, title=None, path=None) -> Figure:
    """The mean time near the antipodal state against log(1/γ): measured (± 2 s.e.), the diffusion's occupation
    time, and the least-squares line of ``fit`` (``quadratic_form.plateau_fit``) when given."""
    x = np.log(1.0 / np.asarray(gammas, dtype=float))
    fig = new_figure(6.4, 4.2)
    ax = fig.subplots()
    ax.errorbar(x, mean, yerr=2 * np.asarray(se), fmt="o", color=DATA_COLOR, label="simulated (± 2 s.e.)")
    ax.plot(x, theory, "s--", color=THEORY_COLOR, mfc="none", label="occupation time of the two-point diffusion")
    if fit is not None:
        slope, slope_se, intercept = fit["log"]
        grid = np.linspace(x.min(), x.max(), 50)
        ax.plot(grid, intercept + slope * grid, color="0.4", lw=1, label=f"line: slope {slope:.2f} ± {slope_se:.2f}")
    ax.set_xlabel(r"$\log(1/\gamma)$")
    ax.set_ylabel(r"mean time with $\langle x_1, x_2\rangle < -0.9$")
    ax.legend(loc="upper left")
    despine(ax)
    ax.set_title(title_text("the antipodal plateau against log(1/γ)", title, d=d))
    return finish(fig, path)


def homogenized_flow(ts, gamma0, dims, analysis, *, n: int, beta: float, members: int, title=None, path=None):
    """Left: the mean overlap per d against the homogenized flow γ(t) and γ + δ/d. Right: the mean deviation
    max_ij |⟨x_i, x_j⟩ − γ| at t1 against d, with the line ∝ d^{−1/2} through the first point. ``analysis`` is
    ``homogenized_flow._analysis``'s dictionary."""
    a, dims = analysis, np.asarray(dims, dtype=float)
    times = np.concatenate([[0.0], a["times"]])
    fig = new_figure(15.0, 4.4)
    left, right, third = fig.subplots(1, 3)
    random = a.get("random", False)
    left.plot(times, np.concatenate([[gamma0], a["gamma"]]), color=THEORY_COLOR, lw=2, label="γ̇ = b(γ)")
    for d, row, color in zip(dims, a["mean"], sequential_colors(dims.size), strict=True):
        left.plot(times, np.concatenate([[gamma0], row]), "o", color=color, ms=4, label=f"d = {d:g}")
        if a["delta"] is not None:
            left.plot(times, np.concatenate([[gamma0], a["gamma"] + a["delta"] / d]), "--", color=color, lw=1)
    left.set_xlabel(TIME_LABEL)
    left.set_ylabel(
        r"mean $\langle x_i, x_j\rangle$" + ("" if a["delta"] is None else r" (dashed: $\gamma + \delta/d$)")
    )
    left.legend(loc="lower right")
    right.errorbar(dims, a["deviation"], yerr=2 * a["deviation_se"], fmt="o", color=DATA_COLOR, label="simulated")
    right.plot(dims, a["deviation"][0] * np.sqrt(dims[0] / dims), color=THEORY_COLOR, label=r"$\propto d^{-1/2}$")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xlabel("d")
    right.set_ylabel(r"mean of $\max_{ij} |\langle x_i, x_j\rangle - \gamma|$ at $t_1$")
    right.legend(loc="upper right")
    grid, b = a["drift_grid"], a["drift"]
    lo, hi = min(gamma0, a["mean"].min()) - 0.05, max(a["gamma"].max(), a["mean"].max()) + 0.05
    keep = (grid >= lo) & (grid <= hi)
    third.plot(
        grid[keep], b[keep], color=THEORY_COLOR, lw=2, label="Monte Carlo over Q, K" if random else "b(γ), QᵀK = I"
    )
    if random:
        third.fill_between(
            grid[keep],
            (b - 2 * a["drift_se"])[keep],
            (b + 2 * a["drift_se"])[keep],
            color=THEORY_COLOR,
            alpha=0.25,
            lw=0,
        )
        third.plot(grid[keep], a["drift_identity"][keep], color="0.45", lw=1.2, ls="--", label="b(γ), QᵀK = I")
    for k, (d, color) in enumerate(zip(dims, sequential_colors(dims.size), strict=True)):
        third.errorbar(
            a["ensemble_drift_at"][k],
            a["ensemble_drift"][k],
            yerr=2 * a["ensemble_drift_se"][k],
            fmt="o",
            ms=4,
            color=color,
            capsize=2,
            label=f"d = {d:g}: Δ mean / Δt",
        )
    third.set_xlabel(r"mean overlap $\gamma$")
    third.set_ylabel(r"drift $\sigma^2 b(\gamma)$")
    third.legend(loc="lower left", fontsize=8)
    despine(left, right, third)
    what = "random Q, K per layer" if random else "QᵀK = I"
    fig.suptitle(title_text(f"the homogenized flow at finite d ({what})", title, n=n, beta=beta, members=members))
    return finish(fig, path)


def coercive_decay(ts, dims, gammas, analysis, *, n: int, beta: float, members: int, title=None, path=None):
    """One row per d: left, the pairs' mean E(1 − R_t) per γ (markers, ±2 s.e.) with the Kolmogorov solution (line)
    and the bound e^{−γ²(d − 3)t} (dashed); right, the mean interaction energy of the n tokens per γ."""
    ts, dims, gammas = np.asarray(ts, dtype=float), list(dims), np.asarray(gammas, dtype=float)
    fig = new_figure(10.0, 3.4 * len(dims) + 0.8)
    axes = np.atleast_2d(fig.subplots(len(dims), 2, squeeze=False))
    colors = sequential_colors(gammas.size)
    stride = max(1, ts.size // 15)
    for row, d in enumerate(dims):
        left, right = axes[row]
        for b, (gamma, color) in enumerate(zip(gammas, colors, strict=True)):
            mean, se = analysis["gap"][row, b], analysis["gap_se"][row, b]
            left.errorbar(
                ts[::stride],
                mean[::stride],
                yerr=2 * se[::stride],
                fmt="o",
                ms=3.5,
                color=color,
                capsize=2,
                label=f"γ = {gamma:g}",
            )
            left.plot(ts, analysis["gap_theory"][row, b], color=color, lw=1.4)
            left.plot(ts, analysis["bound"][row, b], color=color, lw=1.0, ls="--")
            e, ese = analysis["energy"][row, b], analysis["energy_se"][row, b]
            right.plot(ts, e, color=color, lw=1.6, label=f"γ = {gamma:g}")
            right.fill_between(ts, e - 2 * ese, e + 2 * ese, color=color, alpha=0.2, lw=0)
        left.plot([], [], color="0.3", lw=1.4, label="Kolmogorov equation")
        left.plot([], [], color="0.3", lw=1.0, ls="--", label=r"bound $e^{-\gamma^2 (d - 3)\, t}$")
        left.set_yscale("log")
        right.set_yscale("log")
        left.set_ylabel("E(1 − ⟨x₁, x₂⟩), pairs")
        right.set_ylabel(f"mean energy 1 − |m|², n = {n}")
        for ax in (left, right):
            ax.set_title(f"d = {d}", fontsize=10)
            despine(ax)
        if row == len(dims) - 1:
            left.set_xlabel(TIME_LABEL)
            right.set_xlabel(TIME_LABEL)
        if row == 0:
            left.legend(loc="lower left", fontsize=8)
            right.legend(loc="lower left", fontsize=8)
    fig.suptitle(
        title_text("synchronization by a common Brownian motion", title, beta=beta, members=members),
    )
    return finish(fig, path)


def _grid(dims, betas, *, width: float = 3.6, height: float = 2.9):
    fig = new_figure(width * len(betas) + 0.8, height * len(dims) + 1.0)
    axes = np.atleast_2d(fig.subplots(len(dims), len(betas), squeeze=False, sharex=True, sharey=True))
    return fig, axes


def _panel_title(ax, d, beta, lam) -> None:
    ax.set_title(f"d = {d:g}, β = {beta:g}: λ_antipodal = {lam:+.3f}", fontsize=9)


def cluster_fractions(
    ts, analysis, *, dims, betas, tokens, members: int, exponents, tolerance: float, title=None, path=None
):
    """Uniform random tokens: per (d, β) panel, the fraction of members in two antipodal groups (solid) and in one
    cluster (dashed) against time (log axis), one colour per n. ``analysis``: ``antipodal_persistence._analysis``."""
    ts = np.asarray(ts, dtype=float)
    fig, axes = _grid(dims, betas)
    colors = sequential_colors(len(tokens))
    for a, d in enumerate(dims):
        for b, beta in enumerate(betas):
            ax = axes[a, b]
            for k, (n, color) in enumerate(zip(tokens, colors, strict=True)):
                ax.plot(ts[1:], analysis["two_groups"][a, b, k, 1:], color=color, lw=1.8, label=f"n = {n}")
                ax.plot(ts[1:], analysis["one_cluster"][a, b, k, 1:], color=color, lw=1.2, ls="--")
            ax.set_xscale("log")
            ax.set_ylim(-0.03, 1.03)
            _panel_title(ax, d, beta, exponents[a, b])
            despine(ax)
            if a == len(dims) - 1:
                ax.set_xlabel(TIME_LABEL)
            if b == 0:
                ax.set_ylabel("fraction of members")
    axes[0, 0].plot([], [], color="0.3", lw=1.8, label="two antipodal groups")
    axes[0, 0].plot([], [], color="0.3", lw=1.2, ls="--", label="one cluster")
    axes[0, 0].legend(loc="upper left", fontsize=7.5)
    head = title_text("n uniform tokens under random layer weights", title, members=members)
    fig.suptitle(f"{head}\ntogether: ⟨x_i, x_j⟩ > 1 − ε, antipodal: < −(1 − ε), ε = {tolerance:g}")
    return finish(fig, path)


def antipodal_persistence(
    ts, analysis, *, dims, betas, tokens, members: int, exponents, tolerance: float, angle: float, title=None, path=None
):
    """The perturbed balanced antipodal start: per (d, β) panel, the fraction of members still in two antipodal
    groups (markers per n, ± 2 binomial s.e.) against the linearized two-cluster prediction (line, log time axis)."""
    ts = np.asarray(ts, dtype=float)
    fig, axes = _grid(dims, betas)
    colors = sequential_colors(len(tokens))
    shift = np.exp(np.linspace(-0.04, 0.04, len(tokens)))  # the n's markers side by side
    for a, d in enumerate(dims):
        for b, beta in enumerate(betas):
            ax = axes[a, b]
            ax.plot(
                ts[1:],
                analysis["predicted"][a, b, 1:],
                color=THEORY_COLOR,
                lw=2,
                label="Φ((log ε − log(1 + R₀) − λt)/√(vt))",
            )
            for k, (n, color) in enumerate(zip(tokens, colors, strict=True)):
                p = analysis["persistent"][a, b, k, 1:]
                ax.errorbar(
                    ts[1:] * shift[k],
                    p,
                    yerr=2 * np.sqrt(np.maximum(p * (1 - p), 0.0) / members),
                    fmt="o",
                    ms=3,
                    color=color,
                    capsize=1.5,
                    lw=0.8,
                    label=f"n = {n}",
                )
            ax.set_xscale("log")
            ax.set_ylim(-0.03, 1.05)
            _panel_title(ax, d, beta, exponents[a, b])
            despine(ax)
            if a == len(dims) - 1:
                ax.set_xlabel(TIME_LABEL)
            if b == 0:
                ax.set_ylabel("fraction still in two antipodal groups")
    axes[-1, 0].legend(loc="lower left", fontsize=7.5)
    head = title_text("balanced antipodal groups, perturbed", title, members=members)
    fig.suptitle(f"{head}\nn/2 tokens at each pole, centres {angle:g} rad from antipodal, ε = {tolerance:g}")
    return finish(fig, path)
