"""What several built-in experiments compute from a run: ensemble means, the equiangular solution,
figure names, the figures of the optional statistics, and the plots module loaded on first use."""

from __future__ import annotations

import numpy as np

from ..particles import equiangular_ode as eq
from .config import ConfigError
from .registry import Check
from .run.runner import RunResult

__all__ = [
    "LazyModule",
    "plots",
    "mean_over_seeds",
    "gamma_of_t",
    "tag",
    "statistics_figures",
    "particle_convergence_check",
    "dimensions",
]


class LazyModule:
    """A module imported when one of its names is first used: the figures' modules import matplotlib, which
    takes a third of a second and which runs without figures (``--no-plot``) need not spend.
    ``LazyModule(f"{__package__}.x_figures")`` is how a study's experiment reaches its own figures."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr):
        import importlib

        return getattr(importlib.import_module(self.name), attr)


plots = LazyModule(__name__.rsplit(".", 1)[0] + ".plots")
"""The core figures (``experiments.plots``), imported on first use."""


def dimensions(*allowed: int, why: str):
    """An ``Experiment.requires`` hook: the run has one d, one of ``allowed`` (``why``: what needs it)."""

    def requires(config) -> None:
        if len(config.d) != 1 or config.d[0] not in allowed:
            which = " or ".join(f"d = {d}" for d in allowed)
            raise ConfigError(
                f"experiment {config.experiment!r} runs one dimension, {which} ({why}); got d = {list(config.d)}"
            )

    return requires


def mean_over_seeds(result: RunResult, name: str) -> np.ndarray:
    """(len(d), len(β), T[, ...]) average of a statistic over the ensemble."""
    return np.nanmean(result.stats[name], axis=2)


def gamma_of_t(result: RunResult, beta: float) -> np.ndarray:
    """γ_β(t) at the run's save times: the inner product of the equiangular solution (6.9)/(6.10) of the
    run's model, from the run's ρ (0 unless it starts equiangular)."""
    c = result.config
    return np.asarray(eq.equiangular(beta, c.n, result.ts, c.rho if c.init == "equiangular" else 0.0, model=c.model))


def tag(value: float) -> str:
    """A number as part of a figure's file name: 4.5 → "4p5"."""
    return f"{value:g}".replace(".", "p")


def statistics_figures(result: RunResult) -> dict:
    """Figures of the optional statistics a run computed, whatever its experiment.

    "attention" (``statistics`` includes it): attended tokens and spectral gap of A(t) against time,
    and the stationary law at the last time (one figure per d when d is a list).
    """
    if "effective_tokens" not in result.stats:
        return {}
    c = result.config
    out = {}
    for i, d in enumerate(c.d):

        def draw(p, i=i, d=d):
            by_beta = {float(b): j for j, b in enumerate(c.beta)}
            return plots.attention_statistics(
                result.ts,
                {b: result.stats["effective_tokens"][i, j] for b, j in by_beta.items()},
                {b: result.stats["spectral_gap"][i, j] for b, j in by_beta.items()},
                {b: result.stats["stationary_distribution"][i, j, 0, -1] for b, j in by_beta.items()},
                n=c.n,
                d=d,
                logx=c.save_spacing == "log",
                path=p,
            )

        out["attention" if len(c.d) == 1 else f"attention_d{d}"] = draw
    return out


def particle_convergence_check(counts, distances, *, metric: str, t: float, fmt: str = ".3f") -> Check:
    """n particles → the density: the mean of ``distances`` (…, len(counts)) over members falls with n, and
    its fitted exponent α (least squares in log-log) lies in [−0.7, −0.3] (α ≈ −1/2, the i.i.d. rate)."""
    counts = np.asarray(counts)
    mean = np.nanmean(np.asarray(distances).reshape(-1, counts.size), axis=0)
    order = np.argsort(counts)
    alpha = float(np.polyfit(np.log(counts), np.log(mean), 1)[0]) if np.all(np.isfinite(mean)) else float("nan")
    decreasing = bool(np.all(np.diff(mean[order]) < 0))
    shown = " → ".join(f"{v:{fmt}}" for v in mean[order])
    return Check(
        f"particles → density: {metric} at t = {t:g} for n = " + ", ".join(str(n) for n in counts[order]),
        f"decreasing, {metric} ∝ n^α with −0.7 ≤ α ≤ −0.3 (α ≈ −1/2)",
        f"{shown}; α = {alpha:.2f}",
        decreasing and -0.7 <= alpha <= -0.3,
    )
