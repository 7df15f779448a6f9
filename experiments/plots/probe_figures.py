"""``attnflow probe``: a model's token states measured against depth, one figure per family of statistics.

Each takes the run's arrays as ``af.probe`` writes them (``run``: ``layer``, and per statistic its raw value and
the layer-normed one under the name with ``_normed``), and draws the raw tokens as solid lines, the layer-normed
ones dashed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib import ticker
from matplotlib.figure import Figure

from .style import BAND_COLOR, DATA_COLOR, FRACTION_LABEL, LEGEND_SIZE, THEORY_COLOR, despine, finish, new_figure

__all__ = ["probe_geometry", "probe_energy", "probe_rank", "probe_knn", "probe_sinks"]

_STYLES: dict[str, dict[str, Any]] = {
    "": {"color": DATA_COLOR, "linestyle": "-", "marker": "o", "label": "raw tokens (x / ‖x‖)"},
    "_normed": {"color": THEORY_COLOR, "linestyle": (0, (5, 3)), "marker": "s", "label": "layer-normed tokens"},
}
_LAYER = r"layer $\ell$"


def _log_y(ax) -> None:
    """A logarithmic y axis labelled in plain numbers (1, 2, 5 per decade), which read better over a few decades."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def _line(ax, x, y, suffix: str, **extra) -> None:
    style = dict(_STYLES[suffix]) | extra
    ax.plot(x, y, markersize=4, linewidth=1.6, **style)


def _layer_axis(ax, layers) -> None:
    ax.set_xlabel(_LAYER)
    if len(layers) <= 16:
        ax.set_xticks(layers)
    despine(ax)


def _title(fig: Figure, head: str, source, **params) -> None:
    extra = ", ".join(f"{k} = {v:.4g}" if isinstance(v, float) else f"{k} = {v}" for k, v in params.items())
    fig.suptitle(head + (f": {source}" if source else "") + (f"\n{extra}" if extra else ""))


def probe_geometry(run: dict, *, source=None, path=None) -> Figure:
    """Anisotropy (the mean cosine over pairs), the clustered fraction and the mean cluster count at δ per layer."""
    layers = np.asarray(run["layer"])
    fig = new_figure(11.5, 3.9)
    axes = fig.subplots(1, 3)
    panels = (
        ("mean_inner_product", r"mean cosine $\langle x_i, x_j\rangle$, $i \neq j$ (anisotropy)", None),
        ("clustered_fraction", FRACTION_LABEL, None),
        ("n_clusters", r"clusters at threshold $\delta$ (mean over prompts)", "log"),
    )
    for ax, (name, label, scale) in zip(axes, panels):
        for suffix in _STYLES:
            values = np.asarray(run[name + suffix], dtype=float)
            _line(ax, layers, values.mean(axis=1) if values.ndim == 2 else values, suffix)
        ax.set_ylabel(label)
        if scale:
            _log_y(ax)
        _layer_axis(ax, layers)
    axes[0].legend(fontsize=LEGEND_SIZE, frameon=False)
    _title(fig, "Clustering of the tokens across layers", source, δ=float(run["delta"]))
    return finish(fig, path)


_TREND_LABELS = {
    "energy_excess": r"increment of $E_\beta$ (as $\frac{1}{2\beta n^2}\sum_{i\neq j}(e^{\beta\langle x_i, x_j\rangle}-1)$)",
    "log_pair_energy": r"increment of $\log \frac{1}{2\beta n^2}\sum_{i\neq j} e^{\beta\langle x_i, x_j\rangle}$",
}


def _signed_y(ax, values) -> None:
    """A y axis for numbers of either sign, with the zero line drawn (and so in view): linear, or where the
    |values| that are not zero span more than two decades, linear within the smallest and logarithmic beyond
    (symlog)."""
    finite = np.abs(values[np.isfinite(values)])
    small = finite[finite > 0]
    if small.size and small.max() > 100 * small.min():
        ax.set_yscale("symlog", linthresh=float(small.min()), linscale=0.5)
    ax.axhline(0.0, color="0.45", linewidth=1.0, linestyle=":")


def probe_energy(run: dict, *, source=None, path=None) -> Figure:
    """E_β per layer (the mean over prompts and the band from the least to the largest prompt), and its increments
    from layer to layer on a signed axis, of either sign: the gradient flow (SA, USA with V = I) keeps them ≥ 0.
    The increments are those the trend is decided on (``energy_increment_min``/``median``/``max`` of the summary,
    of ``energy_excess`` or, where E_β overflows, of ``log_pair_energy``); E_β's own values are drawn where finite,
    on a logarithmic axis where they are all positive."""
    layers = np.asarray(run["layer"])
    fig = new_figure(11.5, 4.4)
    left, right = fig.subplots(1, 2)
    finite, positive = True, True
    for suffix, style in _STYLES.items():
        e = np.asarray(run["energy" + suffix], dtype=float)
        finite &= bool(np.all(np.isfinite(e)))
        positive &= bool(np.all(e > 0))
        e = np.where(np.isfinite(e), e, np.nan)
        if e.shape[1] > 1:
            left.fill_between(
                layers,
                np.nanmin(e, axis=1) if np.any(np.isfinite(e)) else e[:, 0],
                np.nanmax(e, axis=1) if np.any(np.isfinite(e)) else e[:, 0],
                color=style["color"],
                alpha=0.18,
                linewidth=0,
                label=f"{style['label']}: prompts' range",
            )
        _line(left, layers, e.mean(axis=1), suffix)
    drawable = any(np.isfinite(np.asarray(run["energy" + suffix], dtype=float)).any() for suffix in _STYLES)
    if finite and positive:
        _log_y(left)
    if not drawable:
        left.set_yticks([])
    if not finite:
        left.text(
            0.5,
            0.5,
            f"$E_\\beta$ overflows float64 at β = {float(run['beta']):.4g}\n(where not drawn): its trend, right,\n"
            "is decided on the log of its pairs' part",
            transform=left.transAxes,
            ha="center",
            va="center",
            fontsize=LEGEND_SIZE,
            color="0.3",
        )
    left.set_ylabel(r"interaction energy $E_\beta$ (mean over prompts)")
    _layer_axis(left, layers)
    if drawable:
        left.legend(fontsize=LEGEND_SIZE, frameon=False)
    left.set_title(r"$E_\beta = \frac{1}{2\beta n^2}\sum_{i,j} e^{\beta\langle x_i, x_j\rangle}$", fontsize=LEGEND_SIZE)
    transitions = np.asarray(run["transition"]) if "transition" in run else layers[1:]
    drawn, labels = [], set()
    for family, suffix in (("raw", ""), ("normed", "_normed")):
        summary = run.get(family)
        if not summary or not transitions.size:
            continue
        style = _STYLES[suffix]
        low, mid, high = (np.asarray(summary[f"energy_increment_{k}"], dtype=float) for k in ("min", "median", "max"))
        right.fill_between(transitions, low, high, color=style["color"], alpha=0.18, linewidth=0)
        verdict = "never decreases" if summary["energy_monotone"] else "decreases"
        _line(right, transitions, mid, suffix, label=f"{style['label']}: median ({verdict})")
        drawn.append(np.concatenate([low, mid, high]))
        labels.add(summary.get("energy_trend_of", "energy_excess"))
    if drawn:
        _signed_y(right, np.concatenate(drawn))
        which = labels.pop() if len(labels) == 1 else "energy_excess"
        right.set_ylabel(_TREND_LABELS.get(which, "increment of the energy's trend"))
        right.legend(fontsize=LEGEND_SIZE, frameon=False)
    right.set_xlabel(r"layer $\ell$ (against the layer $\ell'$ before it)")
    if len(transitions) <= 16:
        right.set_xticks(transitions)
    despine(right)
    right.set_title("increments (band: prompts' range); the flow keeps them ≥ 0", fontsize=LEGEND_SIZE)
    fitted = " (fitted)" if run.get("beta_source") == "fit" else ""
    _title(fig, "Interaction energy across layers", source, **{f"β{fitted}": float(run["beta"])})
    return finish(fig, path)


def probe_rank(run: dict, *, source=None, path=None) -> Figure:
    """The effective rank of the centred token matrix (mean over prompts) and the TwoNN intrinsic dimension with
    its standard error, per layer."""
    layers = np.asarray(run["layer"])
    fig = new_figure(10.0, 4.0)
    left, right = fig.subplots(1, 2)
    for suffix in _STYLES:
        _line(left, layers, np.asarray(run["effective_rank" + suffix], dtype=float).mean(axis=1), suffix)
        dim = np.asarray(run["intrinsic_dimension" + suffix], dtype=float)
        err = np.asarray(run["intrinsic_dimension_error" + suffix], dtype=float)
        style = dict(_STYLES[suffix])
        right.errorbar(layers, dim, yerr=err, capsize=3, markersize=4, linewidth=1.6, **style)
    left.set_ylabel("effective rank (Roy–Vetterli) of the centred tokens")
    _log_y(left)
    right.set_ylabel("intrinsic dimension (TwoNN, ± 1 s.e.)")
    for ax in (left, right):
        _layer_axis(ax, layers)
    left.legend(fontsize=LEGEND_SIZE, frameon=False)
    _title(fig, "Rank and intrinsic dimension across layers", source)
    return finish(fig, path)


def probe_knn(run: dict, *, source=None, path=None) -> Figure:
    """The mean overlap of each token's k nearest neighbours between consecutive layers, against chance."""
    transitions = np.asarray(run["transition"])
    fig = new_figure(6.8, 4.2)
    ax = fig.add_subplot()
    for suffix in _STYLES:
        _line(ax, transitions, np.asarray(run["knn_overlap" + suffix], dtype=float), suffix)
    chance = float(run["knn_chance"])
    ax.axhline(chance, color="0.45", linewidth=1.0, linestyle=":", label=rf"chance $k/(n-1) = {chance:.3g}$")
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel(r"$|N_k^{\ell'}(i) \cap N_k^{\ell}(i)|\,/\,k$, mean over tokens")
    ax.set_xlabel(r"layer $\ell$ (against the layer $\ell'$ before it)")
    if len(transitions) <= 16:
        ax.set_xticks(transitions)
    despine(ax)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False)
    _title(fig, "Stability of each token's neighbourhood", source, k=int(run["k"]))
    return finish(fig, path)


def probe_sinks(run: dict, *, source=None, path=None) -> Figure:
    """The sink rate per block (the fraction of heads whose mean attention to the first token exceeds ε) with the
    mean attention to the first token, and the first token's norm against the median of the others' per layer."""
    blocks = np.asarray(run["block"])
    fig = new_figure(10.0, 4.0)
    left, right = fig.subplots(1, 2)
    alpha = np.asarray(run["first_token_attention"], dtype=float)
    eps = float(run["epsilon"])
    left.plot(
        blocks,
        np.asarray(run["sink_rate"], dtype=float),
        color=DATA_COLOR,
        marker="o",
        markersize=4,
        linewidth=1.8,
        label=rf"sink rate: heads with $\alpha_1 > \varepsilon = {eps:g}$",
    )
    left.plot(
        blocks,
        alpha.mean(axis=(1, 2)),
        color=THEORY_COLOR,
        marker="^",
        markersize=4,
        linewidth=1.3,
        linestyle=(0, (4, 3)),
        label=r"mean attention to the first token $\alpha_1$",
    )
    left.set_ylim(-0.02, 1.02)
    left.set_ylabel("fraction")
    left.set_xlabel(r"block $\ell$ (layer $\ell - 1 \to \ell$)")
    if len(blocks) <= 16:
        left.set_xticks(blocks)
    despine(left)
    left.legend(fontsize=LEGEND_SIZE, frameon=False)
    layers = np.asarray(run["layer"])
    ratio = np.asarray(run["first_token_norm_ratio"], dtype=float)
    right.plot(
        layers,
        np.median(ratio, axis=1),
        color=DATA_COLOR,
        marker="o",
        markersize=4,
        linewidth=1.8,
        label="median over prompts",
    )
    if ratio.shape[1] > 1:
        right.fill_between(
            layers,
            ratio.min(axis=1),
            ratio.max(axis=1),
            color=BAND_COLOR,
            alpha=0.4,
            linewidth=0,
            label="prompts' range",
        )
    right.axhline(1.0, color="0.45", linewidth=1.0, linestyle=":")
    _log_y(right)
    right.set_ylabel(r"$\|x_1\|$ / median$_{j \geq 2}\,\|x_j\|$ (states as given)")
    _layer_axis(right, layers)
    right.legend(fontsize=LEGEND_SIZE, frameon=False)
    _title(fig, "Attention sinks on the first token", source)
    return finish(fig, path)
