"""``sphere-movie``: 64 particles on S² at β = 1 up to t = 15, drawn and animated ([GLPR] movies)."""

from __future__ import annotations

import numpy as np

from ..analysis import dimensions, plots
from ..registry import Check, Experiment, register
from ..run.runner import RunResult


def figures(result: RunResult) -> dict:
    """The first member's trajectories and its animation (when the states were kept)."""
    c = result.config
    if not result.has_states:
        return {}
    xs = result.states(c.d[0])[0, 0]
    return {
        "trajectories": lambda p: plots.trajectories(result.ts, xs, beta=c.beta[0], path=p),
        "movie.gif": lambda p: plots.animate_sphere(result.ts, xs, beta=c.beta[0], path=p),
    }


def checks(result: RunResult) -> list[Check]:
    """The energy E_β never decreases along the flow."""
    e = result.stats["normalized_energy"]
    worst = float(np.min(np.diff(e, axis=-1)))
    # SA and USA with V = I are gradient ascent flows of E_β ([GLPR] §3): E never decreases
    return [Check("energy E_β non-decreasing along the flow", "min increment ≥ −1e-9", f"{worst:.1e}", worst >= -1e-9)]


EXPERIMENT = register(
    Experiment(
        "sphere-movie",
        "n = 64 particles on S² at β = 1 up to t = 15, as an animated GIF",
        "[GLPR] movies",
        dict(
            experiment="sphere-movie",
            model="sa",
            n=64,
            d=3,
            beta=1.0,
            seeds=1,
            init="uniform",
            t1=15.0,
            n_save=151,
            solver="tsit5",
            save_states="yes",
        ),
        dict(n=16, n_save=31),
        figures,
        checks,
        requires=dimensions(2, 3, why="the animation draws the circle or the sphere S²"),
    )
)
