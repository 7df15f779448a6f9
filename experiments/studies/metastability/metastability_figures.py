"""The law of metastable clusters: cluster count of the first metastable state and its lifetime against β."""

from __future__ import annotations

import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from ...plots.style import (
    BETA_LABEL,
    DATA_COLOR,
    THEORY_COLOR,
    axis_values,
    despine,
    finish,
    fmt_number,
    keyed_2d,
    new_figure,
    title_text,
)

D_COLORS = {2: DATA_COLOR, 3: "#35b779"}  # viridis blue and green


def _counts_by_d(name: str, value, betas: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """A mapping {d: array (len(betas), members)} as a list sorted by d, each array 2-D."""
    return keyed_2d(name, value, "d", int, "(len(betas), members)", 0, betas.size, "len(betas)")


def _nan_quantiles(arr: np.ndarray, qs) -> np.ndarray:
    """Percentiles over members (axis 1) ignoring NaN (members without a plateau); NaN where all are."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows are expected
        return np.nanpercentile(arr, qs, axis=1)


def _plain_log_ticks(axis) -> None:
    """Log axis ticks at 1, 2, 5 × 10^k written as plain numbers."""
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())


def metastable_counts(
    betas, counts_by_d, *, kstar=None, lstar=None, n=None, delta=None, title=None, path=None
) -> Figure:
    """The law of metastable clusters: clusters of the first metastable state vs β, on log-log axes.

    counts_by_d maps d to an array (len(betas), members) of counts (NaN where a member had no
    plateau): each d is drawn as its median over members with the interquartile band. kstar:
    (β grid, k*(β)), the fastest linearly unstable mode on the circle, drawn as a staircase, with
    its large-β asymptote √(2β). lstar: (β grid, ℓ*(β)) on S², drawn (when d = 3 is present) as
    ℓ*(ℓ*+1)/(2√3), the mean number of maxima of a random spherical harmonic of degree ℓ*.
    """
    betas = axis_values("betas", betas, "(len(betas),)")
    if np.any(betas <= 0):
        raise ValueError("betas must be positive for a logarithmic β axis")
    series = _counts_by_d("counts_by_d", counts_by_d, betas)
    fig = new_figure(6.4, 4.6)
    ax = fig.add_subplot()
    lo, hi = float(betas.min()), float(betas.max())
    grid = np.geomspace(lo, hi, 200)
    top = 1.0
    if kstar is not None:
        kb, kk = (np.asarray(a, dtype=float) for a in kstar)
        ax.plot(
            kb,
            kk,
            drawstyle="steps-post",
            color=THEORY_COLOR,
            linewidth=1.6,
            label=r"$k^*(\beta) = \mathrm{argmax}_k\, k^2 I_k(\beta)$ (circle)",
            zorder=3,
        )
        top = max(top, float(kk.max()))
    ax.plot(
        grid, np.sqrt(2 * grid), color="0.25", linewidth=1.1, linestyle=(0, (4, 3)), label=r"$\sqrt{2\beta}$", zorder=3
    )
    for d, arr in series:
        color = D_COLORS.get(d, "0.4")
        q1, med, q3 = _nan_quantiles(arr, [25, 50, 75])
        members = arr.shape[1]
        ax.fill_between(betas, q1, q3, color=color, alpha=0.25, linewidth=0)
        ax.plot(
            betas,
            med,
            color=color,
            marker="o",
            markersize=4.5,
            linewidth=1.4,
            zorder=4,
            label=rf"$d = {d}$: median and interquartile range ({members} runs)",
            gid=f"median_d{d}",
        )
        if np.isfinite(q3).any():
            top = max(top, float(np.nanmax(q3)))
        if d == 3 and lstar is not None:
            lb, ll = (np.asarray(a, dtype=float) for a in lstar)
            ax.plot(
                lb,
                ll * (ll + 1) / (2 * np.sqrt(3)),
                color=color,
                linewidth=1.2,
                linestyle=(0, (1, 2)),
                label=r"$S^2$: $\ell^*(\ell^*+1)/2\sqrt{3}$ (maxima of a degree-$\ell^*$ harmonic)",
            )
            top = max(top, float((ll * (ll + 1)).max() / (2 * np.sqrt(3))))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo / 1.15, hi * 1.15)
    ax.set_ylim(0.8, top * 1.5)
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel("clusters of the first metastable state")
    ax.set_title(title_text("The law of metastable clusters", title, n=n, delta=delta))
    ax.legend(loc="upper left", frameon=False, borderaxespad=0.3)
    despine(ax)
    return finish(fig, path)


def plateau_lifetimes(
    betas, lifetimes_by_d, censored_by_d=None, *, t1=None, fits=None, n=None, title=None, path=None
) -> Figure:
    """Lifetime T₂ of the first metastable state vs β on semilog axes (log T₂ against β).

    lifetimes_by_d maps d to an array (len(betas), members) of T₂ (NaN: no plateau); censored_by_d
    the same shape of booleans: members still on their plateau at the end of the run (T₂ = t1),
    drawn as open triangles at t1. Every other member is a dot; the line is the median over all
    members, censored ones counted as t1 (a lower bound where they are half or more), drawn where
    at least half the members have a lifetime (NaN: none, e.g. no metastable state). fits maps d
    to (a, b) of the least-squares line log T₂ = a + b β (fitted by the caller, usually on the
    uncensored members), drawn dashed with b in the legend.
    """
    betas = axis_values("betas", betas, "(len(betas),)")
    series = _counts_by_d("lifetimes_by_d", lifetimes_by_d, betas)
    censored = {}
    for d, arr in series:
        cens = (
            np.zeros(arr.shape, dtype=bool)
            if censored_by_d is None or d not in censored_by_d
            else np.asarray(censored_by_d[d], dtype=bool).reshape(arr.shape)
        )
        censored[d] = cens
    fig = new_figure(6.4, 4.4)
    ax = fig.add_subplot()
    span = float(betas.max() - betas.min()) or 1.0
    offsets = {d: (k - (len(series) - 1) / 2) * 0.006 * span for k, (d, _) in enumerate(series)}
    any_censored = False
    for d, arr in series:
        color = D_COLORS.get(d, "0.4")
        cens = censored[d]
        x = np.broadcast_to(betas[:, None] + offsets[d], arr.shape)
        ok = np.isfinite(arr) & ~cens
        ax.scatter(x[ok], arr[ok], s=11, color=color, alpha=0.45, linewidth=0, zorder=3)
        done = np.isfinite(arr) & cens
        if done.any():
            any_censored = True
            ax.scatter(x[done], arr[done], s=26, marker="^", facecolor="none", edgecolor=color, linewidth=0.9, zorder=3)
        (med,) = _nan_quantiles(arr, [50])
        med[2 * np.isfinite(arr).sum(axis=1) < arr.shape[1]] = np.nan
        ax.plot(
            betas + offsets[d],
            med,
            color=color,
            linewidth=1.4,
            marker="o",
            markersize=4,
            zorder=4,
            label=rf"$d = {d}$: median (censored runs at $t_1$)",
        )
        if fits and d in fits and fits[d] is not None and np.all(np.isfinite(fits[d])):
            a, b = fits[d]
            grid = np.linspace(float(betas.min()), float(betas.max()), 100)
            ax.plot(
                grid,
                np.exp(a + b * grid),
                color=THEORY_COLOR if len(series) == 1 else color,
                linewidth=1.3,
                linestyle=(0, (4, 3)),
                zorder=4,
                label=rf"fit $\log T_2 = a + b\beta$, $b = {b:+.3g}$" + ("" if len(series) == 1 else f" (d = {d})"),
            )
    if any_censored:
        ax.scatter(
            [],
            [],
            s=26,
            marker="^",
            facecolor="none",
            edgecolor="0.3",
            linewidth=0.9,
            label="still on the plateau at " + (r"$t_1$" if t1 is None else rf"$t_1 = {fmt_number(t1)}$"),
        )
    ax.set_yscale("log")
    _plain_log_ticks(ax.yaxis)
    finite = np.concatenate([a[np.isfinite(a)] for _, a in series])
    if finite.size:
        ax.set_ylim(float(finite.min()) / 1.6, float(finite.max()) * 4.0)
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel(r"lifetime $T_2$ (time of the first merge)")
    ax.set_title(title_text("Lifetime of the first metastable state", title, n=n))
    ax.legend(loc="upper right", frameon=False, borderaxespad=0.3)
    despine(ax)
    return finish(fig, path)
