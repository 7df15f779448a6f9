"""``coercive-noise``: synchronization of self-attention by a common Brownian motion (arXiv 2604.26898).

dx_i = P_{x_i} y_i dt + γ P_{x_i} ∘ dw_t, y_i = Σ_j A_ij x_j (SA, QᵀK = V = I), w in R^d common to the tokens
(``particles/random_depth.CommonBrownian``, docs/model.md §17.3), by the Stratonovich Heun step with retraction,
for every d and every γ of ``coercive_gamma``: members of n uniform random tokens, and pairs started orthogonal.
The theory: the noise contracts every pair at the rate γ²(d − 3) at least, so a pair's E(1 − R_t) is at most
e^{−γ²(d − 3)t} and equals the Kolmogorov equation's solution; the interaction energy E = 1 − |m|² of n tokens
obeys Dynkin's formula E E(t) − E E(0) = ∫ E (L E) dt with the generator in closed form.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from ....particles.random_depth import Attention, CommonBrownian, member_axes
from ....solvers.common_noise_paths import common_noise_paths
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.preflight import check_step_count
from ...run.runner import STAT_DIMENSIONS, RunResult
from .common_noise import uniform_tokens
from .common_noise_theory import (
    brownian_pair_drift,
    brownian_pair_variance,
    energy_generator,
    kolmogorov_path,
    noise_contraction_rate,
)

draw = LazyModule(f"{__package__}.common_noise_figures")

SAVE_TIME = 0.05
"""The time between saves."""

INIT_STREAM = 2
"""The key of the tokens' initial conditions under a seed (the noise's is ``common_noise_paths.NOISE_STREAM``)."""

PAIR_SEED_OFFSET = 1_000_003
"""The pairs' noise seeds are the tokens' plus this: the two populations draw independent noise."""

DYNKIN_SLACK = 2e-3
"""Dynkin's check allows 4 standard errors plus this: the trapezoid rule on the saves and the scheme's O(dt)."""

PAIR_SLACK = 0.01
"""The pairs' check allows 4 standard errors plus this: the scheme's weak error O(dt) (at d = 6, γ = 1 and
dt = 0.005 about 0.003; it grows like γ⁴: 0.015 at γ = 1.5)."""

KOLMOGOROV_POINTS = 401
"""The grid of [−1, 1] on which the pair's Kolmogorov equation is solved: at d = 4, 6, γ = 1, β = 2 it agrees
with 1601 points to 2e-4 relative through t = 3 (E(1 − R) down to 6e-7)."""

_DIMS = ["d", "beta", "seed", "coercive_gamma", "time"]
STAT_DIMENSIONS.update(coercive_energy=_DIMS, coercive_energy_rate=_DIMS, coercive_pair_gap=_DIMS)


def _every(config) -> int:
    return int(round(SAVE_TIME / config.coercive_dt))


def run(config, *, progress=None) -> RunResult:
    """Every (d, γ, seed): n tokens and an orthogonal pair to t1; the energy, its generator and the pair's gap saved."""
    start = time.perf_counter()
    g = np.asarray(config.coercive_gamma, dtype=float)
    beta, every = float(config.beta[0]), _every(config)
    steps = every * int(round(config.t1 / SAVE_TIME))
    seeds = config.seed + np.arange(config.seeds)
    member_seeds = jnp.asarray(np.tile(seeds, g.size))
    gammas = jnp.repeat(jnp.asarray(g), config.seeds)
    shape = (len(config.d), 1, config.seeds, g.size, steps // every + 1)
    energy, rate, gap = np.empty(shape), np.empty(shape), np.empty(shape)
    for a, d in enumerate(int(d) for d in config.d):  # shapes differ by d: one compiled ensemble each
        system = CommonBrownian(Attention(jnp.full(gammas.shape, beta), d), gammas)
        xs = common_noise_paths(
            system,
            uniform_tokens(member_seeds, config.n, d, INIT_STREAM),
            member_seeds,
            dt=config.coercive_dt,
            steps=steps,
            save_every=every,
            scheme="heun",
        )  # (γ·seed, S, n, d)
        drift = jax.vmap(lambda sys_m, x_m: jax.vmap(sys_m.stratonovich_drift)(x_m), in_axes=(member_axes(system), 0))(
            system, xs
        )
        x, v = np.asarray(xs), np.asarray(drift)
        e = 1.0 - np.sum(x.mean(axis=2) ** 2, axis=-1)  # (γ·seed, S)
        per_state = np.repeat(np.asarray(gammas), x.shape[1])  # each saved state's γ
        gen = energy_generator(x.reshape(-1, config.n, d), v.reshape(-1, config.n, d), per_state).reshape(e.shape)
        eye = np.eye(d)
        pair = jnp.asarray(np.broadcast_to(np.stack([eye[0], eye[1]]), (member_seeds.size, 2, d)))
        ps = common_noise_paths(
            CommonBrownian(Attention(jnp.full(gammas.shape, beta), d), gammas),
            pair,
            member_seeds + PAIR_SEED_OFFSET,
            dt=config.coercive_dt,
            steps=steps,
            save_every=every,
            scheme="heun",
        )
        pg = 1.0 - np.asarray(jnp.sum(ps[:, :, 0] * ps[:, :, 1], axis=-1))

        def member(arr):  # (γ·seed, S) → (seed, γ, S)
            return np.moveaxis(arr.reshape(g.size, config.seeds, -1), 0, 1)

        energy[a, 0], rate[a, 0], gap[a, 0] = member(e), member(gen), member(pg)
    stats = {"coercive_energy": energy, "coercive_energy_rate": rate, "coercive_pair_gap": gap}
    ts = SAVE_TIME * np.arange(shape[-1])
    extra = {"coercive_gamma": (g, ["coercive_gamma"]), "time": (ts, ["time"])}
    return RunResult.of_statistics(config, stats, extra, start=start, members=(len(config.d), 1, config.seeds), ts=ts)


def _pair_theory(config) -> np.ndarray:
    """E(1 − R_t) of an orthogonal pair at each save, per (d, γ), by the Kolmogorov equation (d, γ, S)."""
    beta, saves = float(config.beta[0]), int(round(config.t1 / SAVE_TIME))
    return np.array(
        [
            [
                kolmogorov_path(
                    lambda r: 1 - r,
                    0.0,
                    SAVE_TIME,
                    saves,
                    lambda r, d=int(d), g=gamma: brownian_pair_drift(r, beta, d, g),
                    lambda r, g=gamma: brownian_pair_variance(r, g),
                    points=KOLMOGOROV_POINTS,
                )
                for gamma in config.coercive_gamma
            ]
            for d in config.d
        ]
    )


def _analysis(result: RunResult) -> dict:
    """Means and standard errors over members; Dynkin's residual per (d, γ); the pairs against the theory."""
    c = result.config
    e = result.stats["coercive_energy"][:, 0]  # (d, seed, γ, S)
    rate = result.stats["coercive_energy_rate"][:, 0]
    gap = result.stats["coercive_pair_gap"][:, 0]
    members = e.shape[1]
    h = SAVE_TIME
    integral = h * (rate[..., 1:] + rate[..., :-1]).sum(axis=-1) / 2  # (d, seed, γ)
    residual = (e[..., -1] - e[..., 0]) - integral
    return {
        "energy": e.mean(axis=1),
        "energy_se": e.std(axis=1, ddof=1) / np.sqrt(members),
        "gap": gap.mean(axis=1),
        "gap_se": gap.std(axis=1, ddof=1) / np.sqrt(members),
        "gap_theory": _pair_theory(c),
        "bound": np.exp(
            -np.asarray(noise_contraction_rate(np.asarray(c.d)[:, None], np.asarray(c.coercive_gamma)[None, :]))[
                ..., None
            ]
            * result.ts[None, None, :]
        ),
        "dynkin": residual.mean(axis=1),
        "dynkin_se": residual.std(axis=1, ddof=1) / np.sqrt(members),
        "change": (e[..., -1] - e[..., 0]).mean(axis=1),
    }


def requires(config) -> None:
    """d ≥ 3, n ≥ 2, one β; t1 a whole number of saves, each a whole number of steps."""
    if min(config.d) < 3:
        raise ConfigError(f"coercive-noise needs d ≥ 3 (the noise's rate is γ²(d − 3)), got d = {list(config.d)}")
    if config.n < 2:
        raise ConfigError(f"coercive-noise needs n ≥ 2 tokens, got n = {config.n}")
    if len(config.beta) != 1:
        raise ConfigError(f"coercive-noise runs one β, got {len(config.beta)}")
    per_save = SAVE_TIME / config.coercive_dt
    if abs(per_save - round(per_save)) > 1e-9 or round(per_save) < 1:
        raise ConfigError(f"coercive_dt must divide the save interval {SAVE_TIME:g}, got {config.coercive_dt:g}")
    saves = config.t1 / SAVE_TIME
    if abs(saves - round(saves)) > 1e-9 * saves or round(saves) < 2:
        raise ConfigError(f"t1 must be a multiple of {SAVE_TIME:g} and ≥ {2 * SAVE_TIME:g}, got {config.t1:g}")
    check_step_count(
        config.t1 / config.coercive_dt,
        config.max_steps,
        f"t1 / coercive_dt = {config.t1 / config.coercive_dt:.4g} Heun steps",
    )


def memory(config) -> dict:
    """The members' saved tokens and their drifts, float64."""
    members = len(config.coercive_gamma) * config.seeds
    saves = int(round(config.t1 / SAVE_TIME)) + 1
    d = max(config.d)
    return {
        "the saved tokens and drifts [coercive_gamma, seeds, t1, n, d]": 8 * 3 * members * saves * config.n * d,
        "the pairs' inner products [coercive_gamma, seeds, t1, n, n]": 8 * 2 * members * saves * config.n**2,
    }


def _summary(result: RunResult) -> dict:
    c, a = result.config, _analysis(result)
    return {
        "d": [int(d) for d in c.d],
        "coercive_gamma": [float(g) for g in c.coercive_gamma],
        "noise_contraction_rate": [[float(noise_contraction_rate(d, g)) for g in c.coercive_gamma] for d in c.d],
        "energy_start": a["energy"][..., 0].tolist(),
        "energy_end": a["energy"][..., -1].tolist(),
        "pair_gap_end": a["gap"][..., -1].tolist(),
        "pair_gap_theory_end": a["gap_theory"][..., -1].tolist(),
        "dynkin_residual": a["dynkin"].tolist(),
        "dynkin_residual_se": a["dynkin_se"].tolist(),
    }


def figures(result: RunResult) -> dict:
    """Per d: the pairs' E(1 − R_t) with the Kolmogorov solution and the bound, and the n tokens' mean energy."""
    c, a = result.config, _analysis(result)
    return {
        "coercive_noise": lambda p: draw.coercive_decay(
            result.ts, c.d, c.coercive_gamma, a, n=c.n, beta=float(c.beta[0]), members=c.seeds, path=p
        )
    }


def checks(result: RunResult) -> list[Check]:
    """The pairs against the Kolmogorov equation and under the bound e^{−γ²(d − 3)t}; Dynkin's formula for E."""
    a = _analysis(result)
    out = []
    later = slice(1, None)  # t = 0 is exact for both
    dev = np.abs(a["gap"] - a["gap_theory"])[..., later]
    se = a["gap_se"][..., later]
    out.append(
        Check(
            "two tokens under SA and the common noise: E(1 − R_t) solves the Kolmogorov equation",
            f"|mean − theory| ≤ 4 s.e. + {PAIR_SLACK:g} at every save, each (d, γ)",
            f"max |mean − theory| − 4 s.e. {float((dev - 4 * se).max()):+.4f}",
            bool(np.all(dev <= 4 * se + PAIR_SLACK)),
        )
    )
    ratio = (a["gap"] - 4 * a["gap_se"])[..., later] / a["bound"][..., later]
    out.append(
        Check(
            "[ABMSR] the common noise contracts pairs at the rate γ²(d − 3): E(1 − R_t) ≤ e^{−γ²(d − 3)t}",
            "(mean − 4 s.e.) / bound ≤ 1 at every save, each (d, γ)",
            f"max {float(ratio.max()):.3f}",
            bool(np.all(ratio <= 1)),
        )
    )
    dev = np.abs(a["dynkin"]) - 4 * a["dynkin_se"]
    out.append(
        Check(
            "Dynkin's formula for the interaction energy: E E(t1) − E E(0) = ∫ E (L E) dt",
            f"|residual| ≤ 4 s.e. + {DYNKIN_SLACK:g} for each (d, γ)",
            ", ".join(f"{x:+.4f} ± {y:.4f}" for x, y in zip(a["dynkin"].ravel(), a["dynkin_se"].ravel(), strict=True)),
            bool(np.all(dev <= DYNKIN_SLACK)),
        )
    )
    return out


EXPERIMENT = register(
    Experiment(
        "coercive-noise",
        "self-attention forced by a common Brownian motion: pairs contract at the rate γ²(d − 3), the energy decays",
        "arXiv 2604.26898",
        dict(
            experiment="coercive-noise",
            n=8,
            d=[4, 6],
            beta=[2.0],
            seeds=1000,
            t1=3.0,
            coercive_gamma=[0.25, 0.5, 1.0],
            coercive_dt=0.005,
        ),
        dict(d=[4], seeds=300, t1=1.0, coercive_gamma=[0.5, 1.0], coercive_dt=0.01),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("n", "d", "beta", "seeds", "seed", "t1", "coercive_gamma", "coercive_dt", "max_steps"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"{c.seeds} members of {c.n} tokens and {c.seeds} pairs per (d, γ), d ∈ {list(c.d)}, "
            f"γ ∈ {list(c.coercive_gamma)}, β = {float(c.beta[0]):g}, t1 = {c.t1:g}, Heun dt = {c.coercive_dt:g}"
        ),
        summary=_summary,
        runtime="≈ 30 s on 2 CPU cores",
    )
)
