"""``selectivity``: when one query's attention over n uniform keys stops averaging and picks a key (arXiv 2605.08505).

For each d and each context length n, ``queries`` uniform queries meet the first n of one stream of uniform
keys on S^{d−1} (the contexts are nested, as a growing context is). The threshold β*_n(q) is the least β at
which the weight on q's nearest key reaches 1/2 (``experiments/studies/selectivity/selectivity_theory.py``); its median over queries
grows like n^{2/(d−1)}, and the fitted exponent of log median β*_n against log n, with its standard error
(a bootstrap over the queries), is written to summary.json as ``exponent`` and ``exponent_stderr``, one
value per d. At the longest context the layer is applied at β = β̄/100, β̄ and 100 β̄ (β̄: the median
threshold): the ordered attention weights and the outputs show the three regimes, a local average of the
keys around q shrunk to length A_d(β) = I_{d/2}(β)/I_{d/2−1}(β), a few nearest keys sharing the mass, and the
nearest key alone.

The median threshold in units of (c_d n)^{2/(d−1)} is compared with the median of its n → ∞ law, that of
the nearest keys as a Poisson process (``limit_thresholds``, docs/model.md §15).

The paper states the scale β*_n ≍ n^{2/(d−1)} without a constant, and a threshold "at which selectivity
emerges" without fixing a criterion: the criterion w_{k*} ≥ 1/2 is this experiment's, as is the median.
The standard errors resample the queries with the keys fixed: the queries of one d share one stream of
keys, so where queries outnumber the keys near each of them (n = 10², 256 queries) they understate the
key draw's own variation.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ....particles import init
from ....solvers.progress import Counter
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .selectivity_theory import (
    KEY_BLOCK,
    attention_output,
    cap_constant,
    critical_scale,
    limit_thresholds,
    local_average_norm,
    nearest_keys,
    selectivity_threshold,
    smallest_gaps,
)

draw = LazyModule(f"{__package__}.selectivity_figures")  # this study's figures, imported on first use

REGIMES = (0.01, 1.0, 100.0)
"""The layer's β at the longest context, as multiples of the median threshold β̄ there."""
RANKS = 32
"""Ordered attention weights kept per query."""
BOOTSTRAP = 400
"""Resamples of the queries behind an exponent's standard error."""
TOLERANCE = 0.05
"""The fitted exponent must lie within 5 % of 2/(d − 1)."""

STAT_DIMENSIONS.update(
    threshold=["d", "beta", "seed", "context", "query"],
    regime_beta=["d", "beta", "seed", "regime"],
    ordered_weights=["d", "beta", "seed", "regime", "query", "rank"],
    output_length=["d", "beta", "seed", "regime", "query"],
    output_along_query=["d", "beta", "seed", "regime", "query"],
    output_angle=["d", "beta", "seed", "regime", "query"],
    exponent_fit=["d", "beta", "seed", "fit"],
    prefactor=["d", "beta", "seed", "estimate"],
)
MAX_D = 6
"""The largest d whose n → ∞ law ``limit_thresholds`` samples with its default points per draw."""
LIMIT_DRAWS = 2000
"""Draws of the n → ∞ law of β*_n (c_d n)^{−2/(d−1)} behind its median."""


def _median_se(values: np.ndarray, rng: np.random.Generator) -> float:
    """The bootstrap standard error of the median of ``values``."""
    return float(
        np.std([np.median(values[rng.integers(0, values.size, values.size)]) for _ in range(BOOTSTRAP)], ddof=1)
    )


def _fit(lengths: np.ndarray, thresholds: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """(exponent, its standard error, log prefactor) of median β* ∝ n^p over the queries, the error from
    a bootstrap of the queries (the contexts share them, so the medians are correlated)."""
    x = np.log(lengths)

    def slope(sample):
        return np.polyfit(x, np.log(np.median(sample, axis=1)), 1)

    p, c = slope(thresholds)
    q = thresholds.shape[1]
    boot = [slope(thresholds[:, rng.integers(0, q, q)])[0] for _ in range(BOOTSTRAP)]
    return float(p), float(np.std(boot, ddof=1)), float(c)


def run(config, *, progress=None) -> RunResult:
    """β*_n(q) for every d, n and query; the three regimes' weights and outputs at the longest context."""
    start = time.perf_counter()
    dims, lengths, m = list(config.d), np.asarray(config.context_lengths, dtype=np.int64), int(config.queries)
    longest = int(lengths.max())
    thresholds = np.zeros((len(dims), lengths.size, m))
    regime_beta = np.zeros((len(dims), len(REGIMES)))
    weights = np.zeros((len(dims), len(REGIMES), m, RANKS))
    length, along, angle = (np.zeros((len(dims), len(REGIMES), m)) for _ in range(3))
    fit = np.zeros((len(dims), 3))
    prefactor = np.zeros((len(dims), 4))
    show = progress is not False and (progress or config.progress)
    total = len(dims) * (lengths.size + 1)
    with Counter(total, label="selectivity", unit="steps") if show else contextlib.nullcontext() as meter:
        for a, d in enumerate(dims):
            keys = init.uniform(init.derived_seed(config.seed, 2 * a), longest, d)
            queries = init.uniform(init.derived_seed(config.seed, 2 * a + 1), m, d)
            for b, n in enumerate(lengths):
                beta, _ = selectivity_threshold(queries, keys, int(n))
                thresholds[a, b] = np.asarray(beta)
                if meter is not None:
                    meter.advance(1, label=f"selectivity (d = {d}, n = {n})")
            fit[a] = _fit(lengths, thresholds[a], np.random.default_rng(config.seed + a))
            median = float(np.median(thresholds[a, int(np.argmax(lengths))]))
            # the median threshold in units of (c_d n)^{2/(d−1)} against the median of its n → ∞ law
            rng = np.random.default_rng(config.seed + a)
            scaled = thresholds[a, int(np.argmax(lengths))] / critical_scale(cap_constant(d) * longest, d)
            limit = limit_thresholds(d, LIMIT_DRAWS, seed=config.seed + a)
            prefactor[a] = np.median(scaled), _median_se(scaled, rng), np.median(limit), _median_se(limit, rng)
            regime_beta[a] = np.asarray(REGIMES) * median
            q = np.asarray(queries)
            nearest = np.asarray(keys)[np.asarray(nearest_keys(queries, keys)[1])]
            gaps = np.asarray(smallest_gaps(queries, keys, ranks=RANKS))
            y, w = (np.asarray(v) for v in attention_output(queries, keys, regime_beta[a]))
            weights[a] = w[:, :, None] * np.exp(-regime_beta[a][:, None, None] * gaps[None])
            length[a] = np.linalg.norm(y, axis=-1)
            along[a] = np.sum(y * q, axis=-1)
            angle[a] = _angle(y, q) / np.maximum(_angle(nearest, q), 1e-300)
            if meter is not None:
                meter.advance(1, label=f"selectivity (d = {d}, outputs)")

    def member(arr):  # the d axis is the run's own; β and seed have length one
        return np.asarray(arr, dtype=float)[:, None, None]

    stats = {
        "threshold": member(thresholds),
        "regime_beta": member(regime_beta),
        "ordered_weights": member(weights),
        "output_length": member(length),
        "output_along_query": member(along),
        "output_angle": member(angle),
        "exponent_fit": member(fit),
        "prefactor": member(prefactor),
    }
    extra = {"context": (lengths, ["context"]), "regime": (np.asarray(REGIMES), ["regime"])}
    return RunResult.of_statistics(config, stats, extra, start=start, members=(len(dims), 1, 1))


def _angle(u: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The angle between each row of u (any length) and the unit row of q, accurate near 0."""
    unit = u / np.linalg.norm(u, axis=-1, keepdims=True)
    return 2.0 * np.arcsin(np.clip(np.linalg.norm(unit - q, axis=-1) / 2.0, 0.0, 1.0))


def requires(config) -> None:
    """At least three context lengths, each at least two keys, d ≤ 6, and enough queries for a median."""
    if len(set(config.context_lengths)) < 3:
        raise ConfigError(
            f"selectivity fits an exponent: it needs at least three distinct context_lengths, got {list(config.context_lengths)}"
        )
    if max(config.d) > MAX_D:
        raise ConfigError(
            f"selectivity samples the threshold's n → ∞ law for d ≤ {MAX_D} only, got d = {list(config.d)}"
        )
    if config.queries < 16:
        raise ConfigError(f"selectivity needs at least 16 queries for its medians, got queries = {config.queries}")
    if max(config.context_lengths) > 10**8:
        raise ConfigError(
            f"selectivity draws every key: context_lengths must be ≤ 1e8, got {max(config.context_lengths)}"
        )


def memory(config) -> dict:
    """The keys of the longest context, one block of logits per query, and what the run keeps per query."""
    n, m, d, dims = max(config.context_lengths), config.queries, max(config.d), len(config.d)
    kept = len(config.context_lengths) + len(REGIMES) * (RANKS + 3)
    return {
        "the keys of the longest context [context_lengths, d]": 8 * n * d,
        "one block of logits per query, a few copies [queries]": 4 * 8 * m * min(n, KEY_BLOCK),
        "the thresholds, weights and outputs of every query [queries, context_lengths, d]": 8 * dims * m * kept,
    }


def _summary(result: RunResult) -> dict:
    fit = result.stats["exponent_fit"][:, 0, 0]
    return {
        "d": [int(d) for d in result.config.d],
        "exponent": [float(v) for v in fit[:, 0]],
        "exponent_stderr": [float(v) for v in fit[:, 1]],
        "exponent_theory": [2.0 / (d - 1) for d in result.config.d],
    }


def figures(result: RunResult) -> dict:
    """The median threshold against n with its fit; the ordered weights and the outputs in the three regimes."""
    c, s = result.config, result.stats
    dims, lengths = list(c.d), np.asarray(c.context_lengths)
    return {
        "threshold_scaling": lambda p: draw.selectivity_thresholds(
            lengths,
            s["threshold"][:, 0, 0],
            s["exponent_fit"][:, 0, 0],
            [m * cap_constant(d) ** (2 / (d - 1)) for m, d in zip(s["prefactor"][:, 0, 0, 2], dims)],
            dims=dims,
            path=p,
        ),
        "attention_profiles": lambda p: draw.selectivity_profiles(
            s["ordered_weights"][:, 0, 0],
            s["regime_beta"][:, 0, 0],
            dims=dims,
            n=int(lengths.max()),
            factors=REGIMES,
            path=p,
        ),
        "layer_output": lambda p: draw.selectivity_outputs(
            s["output_angle"][:, 0, 0],
            s["output_length"][:, 0, 0],
            np.array([1.0 - local_average_norm(b, d) for b, d in zip(s["regime_beta"][:, 0, 0], dims)]),
            dims=dims,
            n=int(lengths.max()),
            factors=REGIMES,
            path=p,
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """Per d: the exponent against 2/(d − 1); the median threshold's constant against the n → ∞ law's; the
    averaging regime's bias against A_d(β); the selecting regime's weight on the nearest key."""
    c, s = result.config, result.stats
    lengths = np.asarray(c.context_lengths)
    out = []
    for a, d in enumerate(c.d):
        p, se, _ = s["exponent_fit"][a, 0, 0]
        want = 2.0 / (d - 1)
        out.append(
            Check(
                f"d = {d}: median β*_n ∝ n^p for n = {lengths.min()} … {lengths.max()}",
                f"p = 2/(d − 1) = {want:.4f} within 5 %",
                f"p = {p:.4f} ± {se:.4f} ({100 * (p / want - 1):+.1f} %)",
                abs(p / want - 1) <= TOLERANCE,
            )
        )
    for a, d in enumerate(c.d):
        measured, se, want, want_se = s["prefactor"][a, 0, 0]
        error = np.hypot(se, want_se)
        out.append(
            Check(
                f"d = {d}: median β*_n / (c_d n)^{{2/(d−1)}} at n = {lengths.max()}",
                f"the n → ∞ (Poisson) law's median {want:.3f} ± {want_se:.3f}, within 3 standard errors + 3 %",
                f"{measured:.3f} ± {se:.3f} ({100 * (measured / want - 1):+.1f} %)",
                abs(measured - want) <= 3 * error + 0.03 * want,
            )
        )
    for a, d in enumerate(c.d):
        beta = s["regime_beta"][a, 0, 0, 0]
        bias = np.median(1.0 - s["output_along_query"][a, 0, 0, 0])
        want = float(1.0 - local_average_norm(beta, d))
        out.append(
            Check(
                f"d = {d}: averaging at β = β̄/100 = {beta:.4g}: 1 − ⟨y, q⟩ (median over queries)",
                f"1 − A_d(β) = {want:.4g} within 10 %",
                f"{bias:.4g} ({100 * (bias / want - 1):+.1f} %)",
                abs(bias / want - 1) <= 0.10,
            )
        )
    for a, d in enumerate(c.d):
        w = s["ordered_weights"][a, 0, 0, 2, :, 0]
        scale = float(s["regime_beta"][a, 0, 0, 2] / critical_scale(lengths.max(), d))
        out.append(
            Check(
                f"d = {d}: selecting at β = 100 β̄ ({scale:.3g} n^{{2/(d−1)}}): weight on the nearest key",
                "median ≥ 0.99",
                f"median {np.median(w):.6f}, 10 % quantile {np.quantile(w, 0.1):.4f}",
                float(np.median(w)) >= 0.99,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "selectivity",
        "one query among n uniform keys: the weight on the nearest key reaches 1/2 at β*_n ∝ n^{2/(d−1)}",
        "arXiv 2605.08505",
        dict(
            experiment="selectivity",
            d=[3, 4, 5],
            context_lengths=[100, 316, 1000, 3162, 10_000, 31_623, 100_000, 316_228, 1_000_000],
            queries=256,
            seeds=1,
        ),
        dict(context_lengths=[100, 316, 1000, 3162, 10_000], queries=512),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("d", "context_lengths", "queries", "seed"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"β*_n of {c.queries} queries among n ∈ {list(c.context_lengths)} uniform keys on S^(d−1), d = {list(c.d)}"
        ),
        summary=_summary,
        runtime="3.9 min cold on 2 CPU cores shared with other work (1.7 min of CPU time)",
    )
)
