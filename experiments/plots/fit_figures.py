"""``attnflow fit``: the fitted particle model's error per layer against the identity map and the best linear map."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .style import DATA_COLOR, LEGEND_SIZE, THEORY_COLOR, as_array, despine, finish, new_figure, title_text

_NAMES = {"sa": "SA", "usa": "USA"}


def fit_errors(
    layer_error,
    identity_error,
    linear_error,
    rollout_error=None,
    *,
    beta=None,
    model="sa",
    held_out=0,
    source=None,
    title=None,
    path=None,
) -> Figure:
    """Mean squared distance between predicted and observed tokens for each layer transition ℓ → ℓ + 1: the fitted
    model one layer ahead (from the observed layer ℓ), the identity map, the best linear map per layer, and the
    fitted model run freely from layer 0 (``rollout_error``), all (L − 1,), on a logarithmic scale."""
    series = {
        name: as_array(name, v, "(L − 1,)", 1)
        for name, v in (
            ("layer_error", layer_error),
            ("identity_error", identity_error),
            ("linear_error", linear_error),
        )
    }
    size = series["layer_error"].size
    if any(v.size != size for v in series.values()):
        raise ValueError("layer_error, identity_error and linear_error need one value per layer transition")
    transitions = np.arange(1, size + 1)
    fig = new_figure(6.8, 4.4)
    ax = fig.add_subplot()
    name = _NAMES.get(model, model)
    ax.plot(
        transitions,
        series["identity_error"],
        color="0.55",
        marker="s",
        markersize=5,
        linewidth=1.3,
        label="identity map",
    )
    ax.plot(
        transitions,
        series["linear_error"],
        color=THEORY_COLOR,
        marker="^",
        markersize=5,
        linewidth=1.3,
        label="best linear map per layer",
    )
    ax.plot(
        transitions,
        series["layer_error"],
        color=DATA_COLOR,
        marker="o",
        markersize=6,
        linewidth=1.8,
        label=f"fitted {name}, one layer ahead",
    )
    if rollout_error is not None:
        rollout = as_array("rollout_error", rollout_error, "(L − 1,)", 1)
        ax.plot(
            transitions,
            rollout,
            color=DATA_COLOR,
            linestyle=(0, (4, 3)),
            linewidth=1.3,
            label=f"fitted {name}, run from layer 0",
        )
    ax.set_yscale("log")
    ax.set_xticks(transitions)
    ax.set_xlabel(r"layer transition $\ell - 1 \to \ell$")
    where = f" ({held_out} held-out prompts)" if held_out else " (in sample)"
    ax.set_ylabel(r"mean $\|\hat x - x\|^2$ per token" + where)
    ax.legend(fontsize=LEGEND_SIZE, frameon=False)
    despine(ax)
    head = "Particle model fitted to token states" + (f": {source}" if source else "")
    fig.suptitle(title_text(head, title, beta=beta))
    return finish(fig, path)
