"""``homogenized-flow``: equiangular tokens under common noise against the homogenized flow (arXiv 2604.01978).

n tokens with pairwise overlap γ₀ move by the common-noise SDE of ``particles/random_depth.CommonNoise``
(QᵀK = I, V̄ = 0, σ = value_sigma, Euler–Maruyama with retraction) at each d of the configuration. As d → ∞ the
Gram matrix follows the scalar ODE γ̇ = σ² b(γ), b(γ) = γ + (1 − γ) g − γ(γ + (1 − γ) f); at finite d the mean
overlap is γ + δ/d + O(d⁻²), the variance of an entry C/d, both from the linear noise approximation of the Gram
diffusion (``common_noise_theory.homogenized_bias``, docs/model.md §17.2); the deviation from γ scales as d^{−1/2}.
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

from ....particles.random_depth import Attention, CommonNoise, RandomDepth
from ....solvers.common_noise_paths import common_noise_paths
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.preflight import check_step_count
from ...run.runner import RunResult
from .common_noise_theory import (
    DRIFT_GRID,
    homogenized_bias,
    homogenized_drift,
    random_attention_drift,
    random_homogenized_flow,
)

draw = LazyModule(f"{__package__}.common_noise_figures")

SAVES = 4
"""Saves after the start, evenly spaced up to t1."""

VARIANCE_RANGE = (0.75, 1.4)
"""The range the check allows for d · Var(⟨x₁, x₂⟩(t1)) / C(t1): the linear noise approximation's variance is
exact as d → ∞, with O(1/d) corrections (measured: 1.24, 1.16, 1.08 at d = 8, 16, 32)."""


EXTRAPOLATION_SLACK = 0.004
"""The random-attention check allows 4 standard errors plus this between the ensembles' mean overlap at t1,
extrapolated linearly in 1/d to d = ∞, and γ(t1): the layers' O(1/L) bias (L = 1/homogenized_dt) and the O(1/d²)
terms the line leaves out."""

MC_SEED = 7
"""The seed of the Monte Carlo draws of the random attention's logits (``common_noise_theory.logit_matrices``)."""


def _random(config) -> bool:
    return config.attention_weights == "random"


def _flow(config, ts):
    """γ(ts) of the homogenized flow and its standard error (0 for the closed form with QᵀK = I)."""
    beta, g0 = float(config.beta[0]), config.homogenized_gamma0
    if _random(config):
        return random_homogenized_flow(
            g0, beta, config.n, ts, config.value_sigma, samples=config.homogenized_samples, seed=MC_SEED
        )
    return homogenized_bias(g0, beta, config.n, ts, config.value_sigma)[0], np.zeros(len(ts))


def _initial(n: int, d: int, gamma0: float) -> np.ndarray:
    e = np.eye(d)
    return np.sqrt(gamma0) * e[0] + np.sqrt(1.0 - gamma0) * e[1 : n + 1]


def save_times(config) -> np.ndarray:
    return np.linspace(0.0, config.t1, SAVES + 1)


def run(config, *, progress=None) -> RunResult:
    """Every (d, seed) member from the equiangular start to t1; its Gram matrix at the saves."""
    start = time.perf_counter()
    n, beta, g0 = config.n, float(config.beta[0]), config.homogenized_gamma0
    steps = int(round(config.t1 / config.homogenized_dt))
    ts = save_times(config)
    gam = np.concatenate([[g0], _flow(config, ts[1:])[0]])
    i, j = np.triu_indices(n, 1)
    shape = (len(config.d), 1, config.seeds, SAVES + 1)
    mean, first, dev = np.empty(shape), np.empty(shape), np.empty(shape)
    for a, d in enumerate(config.d):  # shapes differ by d: one compiled ensemble each
        x0 = jnp.asarray(np.broadcast_to(_initial(n, int(d), g0), (config.seeds, n, int(d))))
        if _random(config):  # the layers themselves, Q and K drawn per layer: L = 1/homogenized_dt
            system: RandomDepth | CommonNoise = RandomDepth(
                Attention(beta, int(d)), sigma=config.value_sigma, random_attention=True
            )
        else:
            system = CommonNoise(Attention(beta, int(d)), sigma=config.value_sigma)
        xs = common_noise_paths(
            system,
            x0,
            config.seed + np.arange(config.seeds),
            dt=config.homogenized_dt,
            steps=steps,
            save_every=steps // SAVES,
            scheme="depth" if _random(config) else "euler-maruyama",
        )
        v = np.asarray(jnp.einsum("bsid,bsjd->bsij", xs, xs))[:, :, i, j]  # (seeds, saves, pairs)
        mean[a, 0], first[a, 0] = v.mean(axis=-1), v[..., 0]
        dev[a, 0] = np.abs(v - gam[None, :, None]).max(axis=-1)
    stats = {"homogenized_overlap": mean, "homogenized_pair_overlap": first, "homogenized_deviation": dev}
    return RunResult.of_statistics(config, stats, {}, start=start, members=shape[:3], ts=ts)


def _analysis(result: RunResult) -> dict:
    c = result.config
    dims = np.asarray(c.d, dtype=float)
    beta = float(c.beta[0])
    if _random(c):
        gam, gam_se = _flow(c, result.ts[1:])
        delta = var = None
        b, b_se = random_attention_drift(DRIFT_GRID, beta, c.n, c.homogenized_samples, seed=MC_SEED)
    else:
        gam, delta, var = homogenized_bias(c.homogenized_gamma0, beta, c.n, result.ts[1:], c.value_sigma)
        gam_se = np.zeros_like(gam)
        b, b_se = homogenized_drift(DRIFT_GRID, beta, c.n), np.zeros(DRIFT_GRID.size)
    mean = result.stats["homogenized_overlap"][:, 0, :, 1:]  # (d, seed, time)
    pair = result.stats["homogenized_pair_overlap"][:, 0, :, -1]
    dev = result.stats["homogenized_deviation"][:, 0, :, -1]
    m = c.seeds
    full = np.concatenate([np.full((dims.size, c.seeds, 1), c.homogenized_gamma0), mean], axis=2)
    steps = np.diff(full, axis=2) / np.diff(result.ts)[None, None, :]  # each member's mean drift between saves
    scaled_bias = dims[:, None] * (mean.mean(axis=1) - gam[None, :])
    # the mean at t1 against 1/d, a weighted line: its value at 1/d = 0 and that value's standard error
    w = 1.0 / (mean[:, :, -1].std(axis=1, ddof=1) ** 2 / m)
    design = np.stack([np.ones_like(dims), 1.0 / dims], axis=1)
    cov_line = np.linalg.inv(design.T @ (w[:, None] * design))
    line = cov_line @ (design.T @ (w * mean[:, :, -1].mean(axis=1)))
    scaled_se = dims[:, None] * mean.std(axis=1, ddof=1) / np.sqrt(m)
    scaled_var = dims * pair.var(axis=1, ddof=1)
    dev_mean, dev_se = dev.mean(axis=1), dev.std(axis=1, ddof=1) / np.sqrt(m)
    if dims.size > 1:
        w = (dev_mean / dev_se) ** 2
        a = np.stack([np.ones_like(dims), np.log(dims)], axis=1)
        cov = np.linalg.inv(a.T @ (w[:, None] * a))
        coef = cov @ (a.T @ (w * np.log(dev_mean)))
        slope = (float(coef[1]), float(np.sqrt(cov[1, 1])))
    else:
        slope = None
    return {
        "times": result.ts[1:],
        "gamma": gam,
        "gamma_se": gam_se,
        "random": _random(c),
        "drift_grid": DRIFT_GRID,
        "drift": c.value_sigma**2 * b,
        "drift_se": c.value_sigma**2 * b_se,
        "drift_identity": homogenized_drift(DRIFT_GRID, beta, c.n, c.value_sigma),
        "ensemble_drift": steps.mean(axis=1),
        "ensemble_drift_se": steps.std(axis=1, ddof=1) / np.sqrt(m),
        "ensemble_drift_at": 0.5 * (full[:, :, 1:] + full[:, :, :-1]).mean(axis=1),
        "extrapolated": (float(line[0]), float(np.sqrt(cov_line[0, 0]))),
        "delta": delta,
        "variance": var,
        "mean": mean.mean(axis=1),
        "scaled_bias": scaled_bias,
        "scaled_bias_se": scaled_se,
        "scaled_variance": scaled_var,
        "scaled_variance_se": scaled_var * np.sqrt(2.0 / (m - 1)),
        "deviation": dev_mean,
        "deviation_se": dev_se,
        "deviation_slope": slope,
    }


def requires(config) -> None:
    """One β; n ≥ 2 tokens and d > n (room for the equiangular start); t1 a whole number of steps per save."""
    if len(config.beta) != 1:
        raise ConfigError(f"homogenized-flow runs one β, got beta = {list(config.beta)}")
    if config.n < 2 or min(config.d) <= config.n:
        raise ConfigError(f"homogenized-flow needs n ≥ 2 and every d > n, got n = {config.n}, d = {list(config.d)}")
    steps = config.t1 / config.homogenized_dt
    if abs(steps - round(steps)) > 1e-9 * steps or round(steps) % SAVES:
        raise ConfigError(f"t1 / homogenized_dt must be a whole multiple of {SAVES} steps, got {steps:g}")
    check_step_count(steps, config.max_steps, f"t1 / homogenized_dt = {steps:.4g} steps")


def memory(config) -> dict:
    """The members' tokens, their increments and the saved states, float64."""
    d = max(config.d)
    return {
        "the members' tokens and increments [seeds, n, d]": 8 * 8 * config.seeds * (config.n * d + d * d),
        "the saved states [seeds, n, d]": 8 * config.seeds * (SAVES + 1) * config.n * d,
    }


def _summary(result: RunResult) -> dict:
    a, c = _analysis(result), result.config
    out = {
        "attention_weights": c.attention_weights,
        "save_times": [float(t) for t in a["times"]],
        "homogenized_gamma": [float(x) for x in a["gamma"]],
        "homogenized_gamma_se": [float(x) for x in a["gamma_se"]],
        "mean_overlap": [[float(x) for x in row] for row in a["mean"]],
        "mean_at_t1_extrapolated_to_infinite_d": a["extrapolated"][0],
        "mean_at_t1_extrapolated_se": a["extrapolated"][1],
        "drift_gamma_grid": [float(x) for x in a["drift_grid"]],
        "drift_b": [float(x) for x in a["drift"]],
        "drift_b_se": [float(x) for x in a["drift_se"]],
        "bias_times_d": [[float(x) for x in row] for row in a["scaled_bias"]],
        "bias_times_d_se": [[float(x) for x in row] for row in a["scaled_bias_se"]],
        "variance_times_d": [float(x) for x in a["scaled_variance"]],
        "deviation_at_t1": [float(x) for x in a["deviation"]],
        "deviation_times_sqrt_d_over_t1": [float(x) for x in a["deviation"] * np.sqrt(np.asarray(c.d) / c.t1)],
    }
    if a["delta"] is not None:
        out["bias_times_d_theory"] = [float(x) for x in a["delta"]]
        out["variance_times_d_theory"] = float(a["variance"][-1])
    if a["deviation_slope"] is not None:
        out["deviation_slope_in_d"], out["deviation_slope_in_d_se"] = a["deviation_slope"]
    return out


def figures(result: RunResult) -> dict:
    """The mean overlap against the homogenized flow (and its 1/d correction with QᵀK = I); the deviation against
    d; the drift b(γ) against the ensembles' mean drift between saves."""
    c, a = result.config, _analysis(result)
    return {
        "homogenized_flow": lambda p: draw.homogenized_flow(
            result.ts, c.homogenized_gamma0, c.d, a, n=c.n, beta=float(c.beta[0]), members=c.seeds, path=p
        )
    }


def checks(result: RunResult) -> list[Check]:
    """QᵀK = I: d·(mean − γ) against δ at every save and d, d·Var against C at t1; random attention: the mean at t1
    extrapolated to d = ∞ against the Monte Carlo flow; both: the deviation's slope in log d."""
    a, c = _analysis(result), result.config
    out = []
    if a["random"]:
        value, se = a["extrapolated"]
        gap = abs(value - a["gamma"][-1])
        bound = 4 * np.hypot(se, a["gamma_se"][-1]) + EXTRAPOLATION_SLACK
        out.append(
            Check(
                "[KGR] random attention weights: the scalar ODE with b(γ) a Monte Carlo mean over Q, K",
                f"|mean overlap at t1, extrapolated in 1/d to d = ∞, − γ(t1)| ≤ 4 s.e. + {EXTRAPOLATION_SLACK:g}",
                f"{value:.4f} ± {se:.4f} against γ(t1) = {a['gamma'][-1]:.4f} ± {a['gamma_se'][-1]:.4f} "
                f"(QᵀK = I: {homogenized_bias(c.homogenized_gamma0, float(c.beta[0]), c.n, [c.t1], c.value_sigma)[0][0]:.4f})",
                bool(gap <= bound),
            )
        )
        for name in ("the scalar ODE γ̇ = b(γ) holds up to an O(1/d) bias δ(t)/d", "fluctuations O(d^{−1/2})"):
            out.append(
                Check.not_applicable(
                    name, "the linear noise approximation", "QᵀK = I only (attention_weights = identity)"
                )
            )
    else:
        err = np.abs(a["scaled_bias"] - a["delta"][None, :])
        bound = 4 * a["scaled_bias_se"] + 0.15
        out.append(
            Check(
                "[KGR] the scalar ODE γ̇ = b(γ) holds up to an O(1/d) bias δ(t)/d",
                "|d·(mean overlap − γ) − δ| ≤ 4 s.e. + 0.15 at every save and d",
                f"d·bias at t1 {', '.join(f'{x:.3f}' for x in a['scaled_bias'][:, -1])} (δ = {a['delta'][-1]:.3f})",
                bool(np.all(err <= bound)),
            )
        )
        ratio = a["scaled_variance"] / a["variance"][-1]
        out.append(
            Check(
                "fluctuations O(d^{−1/2}): d · Var⟨x₁, x₂⟩(t1) against the linear noise approximation's C(t1)",
                f"ratio in [{VARIANCE_RANGE[0]:g}, {VARIANCE_RANGE[1]:g}] at every d",
                ", ".join(f"{x:.3f}" for x in ratio),
                bool(np.all((ratio >= VARIANCE_RANGE[0]) & (ratio <= VARIANCE_RANGE[1]))),
            )
        )
    if a["deviation_slope"] is not None:
        slope, se = a["deviation_slope"]
        out.append(
            Check(
                "[KGR] the deviation from the scalar ODE scales as √(T/d)",
                "slope of log E max_ij |⟨x_i, x_j⟩(t1) − γ(t1)| against log d: −0.5 ± (4 s.e. + 0.1)",
                f"{slope:.3f} ± {se:.3f}",
                abs(slope + 0.5) <= 4 * se + 0.1,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "homogenized-flow",
        "common noise on equiangular tokens: the homogenized scalar ODE, its O(1/d) bias and √(T/d) deviations",
        "arXiv 2604.01978",
        dict(
            experiment="homogenized-flow",
            n=4,
            d=[8, 16, 32, 64],
            beta=1.0,
            seeds=2000,
            t1=1.0,
            value_sigma=1.0,
            homogenized_gamma0=0.3,
            homogenized_dt=0.01,
        ),
        dict(d=[8, 16], seeds=400),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=(
            "n",
            "d",
            "beta",
            "seeds",
            "seed",
            "t1",
            "value_sigma",
            "homogenized_gamma0",
            "homogenized_dt",
            "attention_weights",
            "homogenized_samples",
            "max_steps",
        ),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"{c.seeds} members of {c.n} equiangular tokens (γ₀ = {c.homogenized_gamma0:g}) per d ∈ {list(c.d)}, "
            f"β = {float(c.beta[0]):g}, σ = {c.value_sigma:g}, t1 = {c.t1:g}, "
            + (
                f"Q, K drawn per layer, L = {1 / c.homogenized_dt:g} layers per unit time, "
                f"b(γ) from {c.homogenized_samples} draws"
                if _random(c)
                else f"Euler–Maruyama dt = {c.homogenized_dt:g}"
            )
        ),
        summary=_summary,
        runtime="≈ 2 min on 2 shared CPU cores",
    )
)
