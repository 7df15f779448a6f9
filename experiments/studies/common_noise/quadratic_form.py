"""``quadratic-form``: synchronization by common noise under the random quadratic form (arXiv 2603.06187, 2608.16664).

dx_i = P_{x_i} ∘ dQ_t x_i + γ P_{x_i} ∘ dw_t, Q_t = (B_t + B_tᵀ)/√2, B and w common to the tokens
(``particles/random_depth.QuadraticForm``), pairs from the overlap R₀ = quadratic_r0 to t1 by Euler–Maruyama with
retraction, for γ = 0 and every γ of ``quadratic_gamma``. The theory (``common_noise_theory.py``, docs/model.md
§17): one token is a Brownian motion on the sphere, E⟨x₀, x_t⟩ = e^{−(1 + γ²)(d − 1)t/2}; at γ = 0 a pair ends
aligned with probability ½ + arcsin(R₀)/π, antipodal otherwise; for γ > 0 every pair ends aligned, after a time
near the antipodal state (R < −0.9) whose mean is the diffusion's occupation time, (s(1) − s(R₀)) ∫ m.
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

from ....particles.random_depth import QuadraticForm
from ....solvers.common_noise_paths import common_noise_paths
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.preflight import check_step_count
from ...run.runner import STAT_DIMENSIONS, RunResult
from .common_noise_theory import aligned_probability, antipodal_occupation, quadratic_rate

draw = LazyModule(f"{__package__}.common_noise_figures")

SETTLED = 0.99
"""A pair is aligned at t1 when R > SETTLED, antipodal when R < −SETTLED."""

PLATEAU = -0.9
"""The antipodal stage: the time with R < PLATEAU."""

SAVE_TIME = 0.1
"""The time between saved overlaps."""

SELF_TIME = 0.5
"""The time at which one token's mean overlap with its start is compared with e^{−ct}."""

OCCUPATION_SLACK = 0.08
"""The relative slack of the occupation check beyond 4 standard errors: the Riemann sum on the saves, the
scheme's O(dt) bias and the time beyond t1."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    quadratic_overlap=_DIMS + ["quadratic_gamma", "time"],
    quadratic_self_overlap=_DIMS + ["quadratic_gamma", "time"],
)


def gammas(config) -> np.ndarray:
    """γ = 0 first, then ``quadratic_gamma``."""
    return np.concatenate([[0.0], np.asarray(config.quadratic_gamma, dtype=float)])


def _save_every(config) -> int:
    return int(round(SAVE_TIME / config.quadratic_dt))


def run(config, *, progress=None) -> RunResult:
    """Every (γ, seed) pair from R₀ to t1; both tokens' overlaps saved every SAVE_TIME."""
    start = time.perf_counter()
    d, g = int(config.d[0]), gammas(config)
    every = _save_every(config)
    steps = every * int(round(config.t1 / SAVE_TIME))
    r0 = config.quadratic_r0
    e = np.eye(d)
    pair = np.stack([e[0], r0 * e[0] + np.sqrt(1.0 - r0**2) * e[1]])
    members = g.size * config.seeds
    x0 = jnp.asarray(np.broadcast_to(pair, (members, 2, d)))  # float64, as attnflow runs
    seeds = jnp.asarray(config.seed + np.arange(members))  # independent noise for every (γ, pair)
    xs = common_noise_paths(
        QuadraticForm(jnp.repeat(jnp.asarray(g), config.seeds)),
        x0,
        seeds,
        dt=config.quadratic_dt,
        steps=steps,
        save_every=every,
        scheme="euler-maruyama",
    )
    overlap = np.asarray(jnp.sum(xs[:, :, 0] * xs[:, :, 1], axis=-1))
    own = np.asarray(xs[:, :, 0, 0])

    def member(a):  # (γ, seed, time) → the (d, β, seed) axes of every run (d and β of length one), then (γ, time)
        return np.moveaxis(a.reshape(g.size, config.seeds, -1), 0, 1)[None, None]

    stats = {"quadratic_overlap": member(overlap), "quadratic_self_overlap": member(own)}
    ts = SAVE_TIME * np.arange(overlap.shape[-1])
    extra = {
        "quadratic_gamma": (g, ["quadratic_gamma"]),
        "time": (ts, ["time"]),
    }
    return RunResult.of_statistics(config, stats, extra, start=start, members=(1, 1, config.seeds), ts=ts)


def _overlaps(result: RunResult) -> np.ndarray:
    return np.moveaxis(result.stats["quadratic_overlap"][0, 0], 0, 1)  # (γ, pair, time)


def occupations(result: RunResult) -> np.ndarray:
    """Per (γ, pair): the time with R < PLATEAU in [0, t1] (the saves' Riemann sum)."""
    return (_overlaps(result)[:, :, 1:] < PLATEAU).sum(axis=-1) * SAVE_TIME


def plateau_fit(gamma, mean, se) -> dict:
    """Weighted least squares of the mean plateau against log(1/γ) and of its logarithm against log(1/γ)
    (a power γ^{−p}): slopes with standard errors."""
    x = np.log(1.0 / np.asarray(gamma, dtype=float))
    out = {}
    for name, y, s in (("log", mean, se), ("power", np.log(mean), se / mean)):
        w = 1.0 / np.asarray(s) ** 2
        a = np.stack([np.ones_like(x), x], axis=1)
        cov = np.linalg.inv(a.T @ (w[:, None] * a))
        coef = cov @ (a.T @ (w * y))
        out[name] = (float(coef[1]), float(np.sqrt(cov[1, 1])), float(coef[0]))
    return out


def _analysis(result: RunResult) -> dict:
    c = result.config
    d, g = int(c.d[0]), gammas(c)
    r, ts = _overlaps(result), result.ts
    k = int(round(SELF_TIME / SAVE_TIME))
    own = result.stats["quadratic_self_overlap"][0, 0, :, :, k].T  # (γ, pair)
    occ = occupations(result)[1:]
    occ_mean, occ_se = occ.mean(axis=1), occ.std(axis=1, ddof=1) / np.sqrt(occ.shape[1])
    theory = np.array([antipodal_occupation(c.quadratic_r0, PLATEAU, d, x) for x in g[1:]])
    return {
        "gamma": g,
        "self_overlap": own.mean(axis=1),
        "self_overlap_se": own.std(axis=1, ddof=1) / np.sqrt(own.shape[1]),
        "self_overlap_theory": np.exp(-quadratic_rate(d, g) * ts[k]),
        "aligned_fraction": (r[:, :, -1] > SETTLED).mean(axis=1),
        "antipodal_fraction": (r[:, :, -1] < -SETTLED).mean(axis=1),
        "aligned_probability": float(aligned_probability(c.quadratic_r0)),
        "occupation": occ_mean,
        "occupation_se": occ_se,
        "occupation_theory": theory,
        "fit": plateau_fit(g[1:], occ_mean, occ_se) if g.size > 2 else None,
    }


def requires(config) -> None:
    """One d ≥ 3; t1 a whole number of saves, each a whole number of steps."""
    if len(config.d) != 1 or config.d[0] < 3:
        raise ConfigError(f"quadratic-form runs one d ≥ 3, got d = {list(config.d)}")
    per_save = SAVE_TIME / config.quadratic_dt
    if abs(per_save - round(per_save)) > 1e-9 or round(per_save) < 1:
        raise ConfigError(f"quadratic_dt must divide the save interval {SAVE_TIME:g}, got {config.quadratic_dt:g}")
    saves = config.t1 / SAVE_TIME
    if abs(saves - round(saves)) > 1e-9 * saves or saves < SELF_TIME / SAVE_TIME:
        raise ConfigError(f"t1 must be a multiple of {SAVE_TIME:g} and ≥ {SELF_TIME:g}, got {config.t1:g}")
    check_step_count(
        config.t1 / config.quadratic_dt,
        config.max_steps,
        f"t1 / quadratic_dt = {config.t1 / config.quadratic_dt:.4g} steps",
    )


def memory(config) -> dict:
    """The members' tokens and their saved overlaps, float64."""
    members = (1 + len(config.quadratic_gamma)) * config.seeds
    d = config.d[0]
    saves = int(round(config.t1 / SAVE_TIME)) + 1
    return {
        "the pairs' tokens and increments [quadratic_gamma, seeds, d]": 8 * 8 * members * (2 * d + (d + 1) * d),
        "the saved states and overlaps [quadratic_gamma, seeds, t1]": 8 * members * saves * (2 * d + 2),
    }


def _summary(result: RunResult) -> dict:
    a = _analysis(result)
    out = {
        "quadratic_gamma": [float(x) for x in a["gamma"]],
        "self_overlap_at_0.5": [float(x) for x in a["self_overlap"]],
        "self_overlap_theory": [float(x) for x in a["self_overlap_theory"]],
        "aligned_fraction": [float(x) for x in a["aligned_fraction"]],
        "antipodal_fraction": [float(x) for x in a["antipodal_fraction"]],
        "aligned_probability_gamma0": a["aligned_probability"],
        "plateau_time": [float(x) for x in a["occupation"]],
        "plateau_time_se": [float(x) for x in a["occupation_se"]],
        "plateau_time_theory": [float(x) for x in a["occupation_theory"]],
    }
    if a["fit"] is not None:
        for name, (slope, se, _) in a["fit"].items():
            out[f"plateau_slope_{name}"], out[f"plateau_slope_{name}_se"] = slope, se
    return out


def figures(result: RunResult) -> dict:
    """The fraction of pairs near the antipodal state over time, per γ; the plateau against log(1/γ)."""
    c, a = result.config, _analysis(result)
    near = (_overlaps(result) < PLATEAU).mean(axis=1)
    return {
        "antipodal_stage": lambda p: draw.antipodal_stage(
            result.ts, a["gamma"], near, d=c.d[0], r0=c.quadratic_r0, members=c.seeds, path=p
        ),
        "plateau_length": lambda p: draw.plateau_length(
            a["gamma"][1:], a["occupation"], a["occupation_se"], a["occupation_theory"], a["fit"], d=c.d[0], path=p
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """One token: E⟨x₀, x_t⟩ = e^{−ct}; γ = 0: the aligned fraction ½ + arcsin(R₀)/π, the rest antipodal; γ > 0:
    every pair aligned at t1 where the mean plateau is under t1/10, and the plateau's mean against the
    occupation time of the two-point diffusion."""
    c, a = result.config, _analysis(result)
    out = []
    dev = np.abs(a["self_overlap"] - a["self_overlap_theory"]) / a["self_overlap_se"]
    out.append(
        Check(
            "[ES] one point is Brownian motion on the sphere: E⟨x₀, x_t⟩ = e^{−(1 + γ²)(d − 1)t/2}",
            f"|mean − theory| ≤ 4 s.e. + 0.01 at t = {SELF_TIME:g} for each γ",
            f"max {float(dev.max()):.2f} s.e.",
            bool(np.all(np.abs(a["self_overlap"] - a["self_overlap_theory"]) <= 4 * a["self_overlap_se"] + 0.01)),
        )
    )
    p, m = a["aligned_probability"], c.seeds
    se = np.sqrt(p * (1 - p) / m)
    al, an = float(a["aligned_fraction"][0]), float(a["antipodal_fraction"][0])
    out.append(
        Check(
            "[ES] γ = 0: pairs end aligned with probability ½ + arcsin(R₀)/π, else antipodal",
            f"aligned {p:.3f} ± {4 * se:.3f}, aligned + antipodal ≥ 0.98",
            f"aligned {al:.3f}, antipodal {an:.3f}",
            abs(al - p) <= 4 * se and al + an >= 0.98,
        )
    )
    settled = a["occupation_theory"] < c.t1 / 10
    if settled.any():
        least = float(a["aligned_fraction"][1:][settled].min())
        out.append(
            Check(
                "[Sh] γ > 0: full synchronization after the antipodal stage",
                f"aligned fraction ≥ 0.98 at t1 for the {int(settled.sum())} γ whose mean plateau is < t1/10",
                f"min {least:.3f}",
                least >= 0.98,
            )
        )
    bound = 4 * a["occupation_se"] + OCCUPATION_SLACK * a["occupation_theory"]
    err = np.abs(a["occupation"] - a["occupation_theory"])
    out.append(
        Check(
            "γ > 0: the time near the antipodal state (R < −0.9) is the diffusion's occupation time",
            f"|mean − theory| ≤ 4 s.e. + {OCCUPATION_SLACK:g}·theory for each γ",
            ", ".join(f"{x:.3g} ({y:.3g})" for x, y in zip(a["occupation"], a["occupation_theory"], strict=True)),
            bool(np.all(err <= bound)),
        )
    )
    return out


EXPERIMENT = register(
    Experiment(
        "quadratic-form",
        "random quadratic form: pairs synchronize by common noise, aligned or antipodal at γ = 0, fully for γ > 0",
        "arXiv 2603.06187, 2608.16664",
        dict(
            experiment="quadratic-form",
            d=[4],
            seeds=1000,
            t1=60.0,
            quadratic_gamma=[0.4, 0.28, 0.2, 0.14, 0.1],
            quadratic_r0=-0.5,
            quadratic_dt=0.01,
        ),
        dict(seeds=200, t1=20.0, quadratic_gamma=[0.4, 0.2]),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("d", "seeds", "seed", "t1", "quadratic_gamma", "quadratic_r0", "quadratic_dt", "max_steps"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"{c.seeds} pairs per γ ∈ {[0.0, *c.quadratic_gamma]}, d = {c.d[0]}, R₀ = {c.quadratic_r0:g}, "
            f"t1 = {c.t1:g}, Euler–Maruyama dt = {c.quadratic_dt:g}"
        ),
        summary=_summary,
        runtime="≈ 45 s on 2 shared CPU cores",
    )
)
