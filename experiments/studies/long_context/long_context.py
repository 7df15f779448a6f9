"""``long-context``: one attention layer at β = γ log n as the context grows (arXiv 2510.05554, 2512.01868 §6).

n equiangular unit tokens (every ⟨y_i, y_j⟩ = ρ) pass through one Pre-LN attention layer
(``experiments/studies/long_context/long_context_theory.py``); the cosine between two outputs is computed exactly for every n and,
up to ``particle_max`` tokens, from the tokens themselves (y_i = √ρ e_0 + √(1 − ρ) e_{i+1} in R^{n+1},
float32, the attention blocked). As n → ∞ it tends to 1 for γ < γ_c = 1/(1 − ρ) (collapse), to ρ above
(the identity), and to 4ρ/(1 + 3ρ) at γ_c (0.8 at ρ = 1/2, γ = 2).

The sources state these limits for one layer of their simplified model, not for the continuous
dynamics: along the equiangular ODE (6.9) at β = γ_c log n the inner product moves at a rate of order
one and tends to 1 at any fixed t > 0, so the three regimes are those of the layer map.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ....solvers.progress import Counter
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .long_context_theory import (
    attention_layer,
    critical_gamma,
    equiangular_layer,
    equiangular_tokens,
    layer_limit,
)

draw = LazyModule(f"{__package__}.long_context_figures")  # this study's figures, imported on first use

CLOSED_FORM_LENGTHS = np.unique(np.round(np.logspace(1, 12, 45)).astype(np.int64))
"""Context lengths of the exact curves: 10 … 10¹²."""

_DIMS = ["d", "beta", "seed", "gamma"]
STAT_DIMENSIONS.update(
    layer_cosine=_DIMS + ["context"],
    layer_cosine_of_tokens=_DIMS + ["context"],
    layer_limit=_DIMS,
    layer_cosine_curve=_DIMS + ["curve_context"],
)


def _particle_cosine(n: int, rho: float, beta: float, residual: float) -> float:
    x = attention_layer(equiangular_tokens(n, rho, "float32"), beta, residual)
    out = np.asarray(x[:2], dtype=np.float64)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return float(out[0] @ out[1])


def run(config, *, progress=None) -> RunResult:
    """The exact cosines for every γ and n, and those from token arrays up to ``particle_max`` tokens."""
    start = time.perf_counter()
    rho, gammas, alpha = float(config.rho), np.asarray(config.gamma, dtype=float), float(config.residual)
    lengths = np.asarray(config.context_lengths, dtype=np.int64)

    def cosine(g, n):
        return float(equiangular_layer(rho, g * np.log(n), int(n), alpha))

    exact = np.array([[cosine(g, n) for n in CLOSED_FORM_LENGTHS] for g in gammas])
    at_lengths = np.array([[cosine(g, n) for n in lengths] for g in gammas])
    particles = np.full((gammas.size, lengths.size), np.nan)
    todo = [(i, k) for i in range(gammas.size) for k in range(lengths.size) if lengths[k] <= config.particle_max]
    show = bool(todo) and progress is not False and (progress or config.progress)
    with Counter(len(todo), label="long-context", unit="layers") if show else contextlib.nullcontext() as meter:
        for i, k in todo:
            n = int(lengths[k])
            particles[i, k] = _particle_cosine(n, rho, float(gammas[i] * np.log(n)), alpha)
            if meter is not None:
                meter.advance(1, label=f"long-context (n = {n})")

    def member(a):  # statistics carry the (d, β, seed) axes of every run, here of length one
        return np.asarray(a, dtype=float)[None, None, None]

    stats = {
        "layer_cosine": member(at_lengths),
        "layer_cosine_of_tokens": member(particles),
        "layer_limit": member(layer_limit(rho, gammas, alpha)),
        "layer_cosine_curve": member(exact),
    }
    # coordinates of the statistics' own axes (results.npz, af.load)
    extra = {
        "gamma": (gammas, ["gamma"]),
        "context": (lengths, ["context"]),
        "curve_context": (CLOSED_FORM_LENGTHS, ["curve_context"]),
    }
    return RunResult.of_statistics(config, stats, extra, start=start)


MAX_CONTEXT = 10**15
"""The longest context: n and β = γ log n stay exact in float64 (n < 2⁵³), with room for n − 1."""


def requires(config) -> None:
    """Equiangular tokens (0 ≤ ρ < 1) and context lengths an int64 and a float64 hold exactly."""
    if not 0.0 <= config.rho < 1.0:
        raise ConfigError(f"long-context needs equiangular tokens with 0 ≤ rho < 1, got rho = {config.rho:g}")
    if not config.context_lengths:
        raise ConfigError("long-context needs context_lengths, e.g. [10, 100, 1000]")
    if max(config.context_lengths) > MAX_CONTEXT:
        raise ConfigError(
            f"context_lengths must be ≤ 1e15 (n and log n exact in float64), got {max(config.context_lengths)}"
        )


def memory(config) -> dict:
    """The token arrays of the longest context computed from tokens: n × (n + 1) float32, a few copies."""
    n = max([k for k in config.context_lengths if k <= config.particle_max], default=0)
    return {"the token arrays of the longest context computed from tokens [particle_max]": 4 * 4 * n * (n + 1)}


def figures(result: RunResult) -> dict:
    """The cosine of two outputs against n, one curve per γ, with its limit."""
    c, s = result.config, result.stats
    return {
        "long_context": lambda p: draw.long_context_layer(
            CLOSED_FORM_LENGTHS,
            s["layer_cosine_curve"][0, 0, 0],
            np.asarray(c.context_lengths),
            s["layer_cosine_of_tokens"][0, 0, 0],
            np.asarray(c.gamma),
            s["layer_limit"][0, 0, 0],
            rho=c.rho,
            critical=critical_gamma(c.rho),
            residual=c.residual,
            path=p,
        )
    }


def checks(result: RunResult) -> list[Check]:
    """The token arrays give the exact cosine; the exact cosine tends to each regime's limit."""
    c, s = result.config, result.stats
    gammas, limit = np.asarray(c.gamma), s["layer_limit"][0, 0, 0]
    measured, exact = s["layer_cosine_of_tokens"][0, 0, 0], s["layer_cosine"][0, 0, 0]
    lengths = np.asarray(c.context_lengths)
    out = []
    have = np.isfinite(measured)
    if have.any():
        gap = float(np.max(np.abs(measured[have] - exact[have])))
        longest = int(lengths[have.any(axis=0)].max())
        out.append(
            Check(
                f"token arrays (n ≤ {longest}) against the exact cosine", "≤ 1e-5 (float32)", f"{gap:.1e}", gap <= 1e-5
            )
        )
    far = s["layer_cosine_curve"][0, 0, 0][:, -1]  # n = 10¹²
    gc = critical_gamma(c.rho)
    for g, lim, value in zip(gammas, limit, far):
        regime = "collapse" if g < gc - 1e-12 else "critical" if abs(g - gc) <= 1e-12 else "identity"
        out.append(
            Check(
                f"γ = {g:g} ({regime}): cosine at n = 10¹² → limit {lim:.4f}",
                "within 1e-3",
                f"{value:.6f}",
                abs(value - lim) <= 1e-3,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "long-context",
        "one attention layer at β = γ log n: collapse below γ_c = 1/(1 − ρ), identity above, 4ρ/(1 + 3ρ) at γ_c",
        "arXiv 2510.05554, 2512.01868 §6",
        dict(
            experiment="long-context",
            rho=0.5,
            gamma=[1.0, 2.0, 3.0],
            residual=0.0,
            context_lengths=[10, 30, 100, 300, 1000, 3000, 10000],
            particle_max=10_000,
            seeds=1,
            d=[2],
        ),
        dict(context_lengths=[10, 100, 1000], particle_max=1000),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("rho", "gamma", "residual", "context_lengths", "particle_max"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"one layer at β = γ log n for γ ∈ {list(c.gamma)}, ρ = {c.rho:g}, residual α = {c.residual:g}, "
            f"n ∈ {list(c.context_lengths)} (token arrays up to n = {c.particle_max})"
        ),
        runtime="45 s and 3 GB of memory (`--set particle_max=3000` for less)",
    )
)
