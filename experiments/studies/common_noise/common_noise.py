"""``common-noise``: pairs of tokens under random layer weights, the antipodal fraction over (β, d) (arXiv 2601.21942).

The random-depth transformer of ``particles/random_depth.py`` with QᵀK = I (in every head), V_ℓ = V̄ + σ G_ℓ/√d
drawn per layer and shared by a member's tokens, residual L^{−α} and L = 1/depth_dt layers per unit time,
t1·L layers from uniform random tokens. A member ends antipodal when some pair has ⟨x_i, x_j⟩ < −0.99 at t1.
For n = 2 and α = 1/2, V̄ = 0 the depth limit moves R = ⟨x₁, x₂⟩ as a diffusion whose exponent at R = −1,
λ = 2σ²(d − 2 − cosh 2β)/(d(1 + cosh 2β)) (``common_noise_theory.py``), decides: antipodal pairs attract with
positive probability iff cosh 2β > d − 2; below, the pair leaves the antipodal state and aligns (λ at R = 1
is −σ²(d − 1)/d < 0 for every β).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from ....particles.random_depth import Attention, CommonNoise, RandomDepth
from ....particles.sphere import normalize
from ....solvers.common_noise_paths import common_noise_paths
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.preflight import check_step_count
from ...run.runner import STAT_DIMENSIONS, RunResult
from .common_noise_theory import aligned_exponent, antipodal_exponent, antipodal_threshold

draw = LazyModule(f"{__package__}.common_noise_figures")  # this study's figures, imported on first use

ANTIPODAL = -0.99
"""A member is antipodal at t1 when some pair has ⟨x_i, x_j⟩ below this."""

MARGIN = 0.05
"""The threshold check compares (β, d) with |λ_antipodal| ≥ MARGIN σ² only: near λ = 0 the pair moves too
slowly for t1 to decide."""

REPELLED_MAX = 0.01
"""Where the antipodal state repels, the largest antipodal fraction the check allows at t1 (transients)."""

ESCAPE_FOLDS = 5.0
"""The repelling check takes the (β, d) whose antipodal state repels fast enough for t1 to show it: λ·t1 ≥ this
many e-folds (a pair near the antipodal state leaves it like e^{λt}; at d = 4, β = 0.5, λ = 0.09 and t1 = 20
leave a few per cent still near it)."""

INIT_STREAM = 0
"""The key of the initial conditions under a seed (the noise's is ``solvers/common_noise_paths.NOISE_STREAM``)."""

EXPONENT_TIME, EXPONENT_DT, EXPONENT_EPS = 4.0, 0.01, 1e-5
"""The exponents' pairs: the SDE by Euler–Maruyama with this step to this time, from R = ±cos(ε)."""

EXPONENT_SLACK = 0.01
"""The exponents' check allows 3 standard errors plus this: Euler–Maruyama's O(dt) bias in the exponent."""

EXPONENT_SEED_OFFSET = 2_000_003
"""The exponents' pairs draw the noise of seed + this, independent of the antipodal fraction's members."""

STAT_DIMENSIONS.update(final_min_inner_product=["d", "beta", "seed", "time"])  # time: t1 alone
STAT_DIMENSIONS.update(pair_exponent=["d", "beta", "pair_state", "seed"])  # pair_state: R = 1, R = −1

STATES = ("aligned", "antipodal")
"""The two states of a pair whose exponents the run estimates, in the order of ``pair_state``."""


def _layers(config) -> int:
    return int(round(config.t1 / config.depth_dt))


def uniform_tokens(seeds, n: int, d: int, stream: int = INIT_STREAM):
    """Each seed's n tokens, uniform on S^{d−1}, from the key ``fold_in(PRNGKey(seed), stream)`` (B, n, d)."""

    def one(seed):
        return normalize(jax.random.normal(jax.random.fold_in(jax.random.PRNGKey(seed), stream), (n, d)))

    return jax.vmap(one)(seeds)


def run(config, *, progress=None) -> RunResult:
    """Every (d, β, seed) member through t1·L random layers; the smallest pair inner product at t1."""
    start = time.perf_counter()
    betas = np.asarray(config.beta, dtype=float)
    seeds = config.seed + np.arange(config.seeds)
    out = np.empty((len(config.d), betas.size, config.seeds))
    for a, d in enumerate(config.d):  # shapes differ by d: one compiled ensemble each
        model = RandomDepth(
            Attention(jnp.repeat(jnp.asarray(betas), config.seeds), int(d), heads=config.heads, mask=config.mask),
            sigma=config.value_sigma,
            vbar=config.value_mean,
            alpha=config.residual_exponent,
            per_head=config.head_noise == "per-head",
        )
        init_seeds = jnp.asarray(np.tile(seeds, betas.size))
        noise = jnp.full_like(init_seeds, config.seed) if config.same_noise else init_seeds
        xs = common_noise_paths(
            model, uniform_tokens(init_seeds, config.n, int(d)), noise, dt=config.depth_dt, steps=_layers(config)
        )[:, -1]
        gram = np.array(jnp.einsum("bid,bjd->bij", xs, xs))
        gram[:, np.arange(config.n), np.arange(config.n)] = np.inf
        out[a] = gram.min(axis=(1, 2)).reshape(betas.size, config.seeds)
    stats = {"final_min_inner_product": out[..., None]}  # a run read back keeps the arrays with a time axis
    extra = {}
    if _theory_applies(config):  # each pair's exponent at both states (R = 1, R = −1), from the depth limit
        stats["pair_exponent"] = np.stack(
            [
                np.stack(
                    [
                        simulated_exponents(
                            int(d),
                            betas,
                            state,
                            config.seeds,
                            sigma=config.value_sigma,
                            seed=config.seed + EXPONENT_SEED_OFFSET,
                        )
                        for state in STATES
                    ],
                    axis=1,
                )
                for d in config.d
            ]
        )  # (d, β, state, seed)
        extra["pair_state"] = (np.array([1.0, -1.0]), ["pair_state"])
    return RunResult.of_statistics(
        config, stats, extra, start=start, members=out.shape, ts=np.asarray([float(config.t1)])
    )


def simulated_exponents(d: int, betas, state: str, members: int, *, sigma: float = 1.0, seed: int = 0):
    """(β, members): each pair's estimate of the Lyapunov exponent at the aligned or antipodal state of the depth
    limit (``CommonNoise``), (log(1 ∓ R(t)) − log(1 ∓ R(0)))/t from R(0) = ±cos(ε); their mean is the exponent's
    estimate. 1 ∓ R is computed as |x₁ ∓ x₂|²/2, exact in float64 however close the pair comes."""
    if state not in ("aligned", "antipodal"):
        raise ValueError(f"state must be 'aligned' or 'antipodal', got {state!r}")
    betas = np.asarray(betas, dtype=float)
    e = np.eye(d)
    x2 = e[0] * np.cos(EXPONENT_EPS) + e[1] * np.sin(EXPONENT_EPS)
    pair = np.stack([e[0], x2 if state == "aligned" else -x2])
    x0 = jnp.asarray(np.broadcast_to(pair, (betas.size * members, 2, d)))
    seeds = np.tile(seed + np.arange(members), betas.size)
    sde = CommonNoise(Attention(jnp.repeat(jnp.asarray(betas), members), d), sigma=sigma)
    steps = int(round(EXPONENT_TIME / EXPONENT_DT))
    xs = common_noise_paths(sde, x0, seeds, dt=EXPONENT_DT, steps=steps, scheme="euler-maruyama")
    sign = -1.0 if state == "aligned" else 1.0
    gap = np.log(0.5 * np.sum(np.asarray(xs[:, :, 0] + sign * xs[:, :, 1]) ** 2, axis=-1))
    return ((gap[:, -1] - gap[:, 0]) / EXPONENT_TIME).reshape(betas.size, members)


def antipodal_fraction(result: RunResult) -> np.ndarray:
    """Per (d, β): the fraction of members with an antipodal pair at t1."""
    return (result.stats["final_min_inner_product"][..., -1] < ANTIPODAL).mean(axis=2)


def _theory_applies(config) -> bool:
    return config.n == 2 and config.residual_exponent == 0.5 and config.value_mean == 0.0 and config.heads == 1


def requires(config) -> None:
    """t1 a whole number of layers; α ∈ {1/2, 1}; centred values with α = 1/2 (else the layers diverge as L grows)."""
    if config.residual_exponent not in (0.5, 1.0):
        raise ConfigError(f"residual_exponent must be 0.5 or 1, got {config.residual_exponent:g}")
    if config.residual_exponent == 0.5 and config.value_mean != 0.0:
        raise ConfigError("value_mean must be 0 with residual_exponent = 0.5: the step L^(−1/2) V̄ has no depth limit")
    layers = config.t1 / config.depth_dt
    if abs(layers - round(layers)) > 1e-9 * layers or round(layers) < 1:
        raise ConfigError(f"t1 / depth_dt must be a whole number of layers ≥ 1, got {layers:g}")
    if config.n < 2:
        raise ConfigError(f"common-noise needs n ≥ 2 tokens (pairs), got n = {config.n}")
    check_step_count(layers, config.max_steps, f"t1 / depth_dt = {layers:.4g} random layers")


def memory(config) -> dict:
    """The members' tokens, their G and a few copies of each, float64."""
    members = len(config.beta) * config.seeds
    d = max(config.d)
    return {
        "the members' tokens and attention [beta, seeds, n, d]": 8 * 8 * members * config.n * (d + config.n),
        "one layer's G per member [beta, seeds, d, heads]": 3 * 8 * members * config.heads * d * d,
    }


def _summary(result: RunResult) -> dict:
    c = result.config
    frac = antipodal_fraction(result)
    return {
        "d": [int(d) for d in c.d],
        "beta": [float(b) for b in c.beta],
        "antipodal_fraction": [[float(v) for v in row] for row in frac],
        "antipodal_threshold_beta": [float(antipodal_threshold(d)) for d in c.d],
        "antipodal_exponent": [[float(antipodal_exponent(b, d, c.value_sigma)) for b in c.beta] for d in c.d],
    } | {f"{state}_exponent_simulated": sim.tolist() for state, (sim, _, _) in (_exponents(result) or {}).items()}


def _exponents(result: RunResult):
    """state → (simulated mean, its s.e., closed form), each (d, β); None where the run estimated none."""
    c, found = result.config, result.stats.get("pair_exponent")
    if found is None:
        return None
    theory = {
        "aligned": np.array([[aligned_exponent(d, c.value_sigma)] * len(c.beta) for d in c.d]),
        "antipodal": np.array([[antipodal_exponent(b, d, c.value_sigma) for b in c.beta] for d in c.d]),
    }
    members = found.shape[-1]
    return {
        state: (found[:, :, k].mean(axis=-1), found[:, :, k].std(axis=-1, ddof=1) / np.sqrt(members), theory[state])
        for k, state in enumerate(STATES)
    }


def figures(result: RunResult) -> dict:
    """The antipodal fraction over (β, d) with the closed-form threshold; the exponents against β."""
    c = result.config
    grid = np.linspace(min(c.d), max(c.d), 200)
    exps = _exponents(result)
    more = {}
    if exps is not None:
        more["exponents"] = lambda p: draw.exponents_against_beta(c.beta, c.d, exps, sigma=c.value_sigma, path=p)
    return {
        "antipodal_diagram": lambda p: draw.antipodal_diagram(
            c.beta,
            c.d,
            antipodal_fraction(result),
            threshold_curve=(grid, antipodal_threshold(grid)),
            n=c.n,
            members=c.seeds,
            t1=c.t1,
            path=p,
        )
    } | more


def checks(result: RunResult) -> list[Check]:
    """Where λ_antipodal < 0 some pairs end antipodal; where λ_antipodal > 0 (almost) none do."""
    c = result.config
    if not _theory_applies(c):
        return [
            Check.not_applicable(
                "antipodal threshold cosh 2β = d − 2",
                "antipodal fraction > 0 iff λ_antipodal < 0",
                "n = 2, one head, α = 1/2, V̄ = 0 only",
            )
        ]
    frac = antipodal_fraction(result)
    lam = np.array([[antipodal_exponent(b, d, c.value_sigma) for b in c.beta] for d in c.d])
    scale = MARGIN * c.value_sigma**2
    out = []
    attract, repel = lam <= -scale, lam >= max(scale, ESCAPE_FOLDS / c.t1)
    if attract.any():
        least = float(frac[attract].min())
        out.append(
            Check(
                "[FSEML] cosh 2β > d − 2: antipodal pairs attract with positive probability",
                f"antipodal fraction > 0 at each of {int(attract.sum())} (β, d) with λ ≤ −{scale:g}",
                f"min {least:.3f}",
                least > 0,
            )
        )
    exps = _exponents(result)
    if exps is not None:
        worst, excess = 0.0, []
        for sim, se, theory in exps.values():
            dev = np.abs(sim - theory)
            excess.append(dev - 3 * se)
            worst = max(worst, float(dev.max()))
        out.append(
            Check(
                "Lyapunov exponents at the aligned and antipodal states in closed form",
                f"|simulated − closed form| ≤ 3 s.e. + {EXPONENT_SLACK:g} at each (β, d), both states",
                f"max |simulated − closed form| {worst:.4f}",
                bool(all(np.all(x <= EXPONENT_SLACK) for x in excess)),
            )
        )
    if repel.any():
        most = float(frac[repel].max())
        out.append(
            Check(
                "cosh 2β < d − 2: the antipodal state repels, pairs align",
                f"antipodal fraction ≤ {REPELLED_MAX} at each of {int(repel.sum())} (β, d) with λ ≥ {scale:g}",
                f"max {most:.3f}",
                most <= REPELLED_MAX,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "common-noise",
        "random layer weights: two tokens end antipodal with positive probability iff cosh 2β > d − 2",
        "arXiv 2601.21942",
        dict(
            experiment="common-noise",
            n=2,
            d=[3, 4, 5, 6, 8, 10, 12],
            beta="0.25:3:12",
            seeds=200,
            t1=40.0,
            depth_dt=0.02,
            value_sigma=1.0,
            value_mean=0.0,
            residual_exponent=0.5,
        ),
        dict(d=[4, 8], beta=[0.5, 2.5], seeds=64, t1=20.0),
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
            "depth_dt",
            "value_sigma",
            "value_mean",
            "residual_exponent",
            "heads",
            "head_noise",
            "mask",
            "same_noise",
            "max_steps",
        ),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"{c.seeds} members of {c.n} tokens per (d, β), d ∈ {list(c.d)}, β ∈ {[round(b, 3) for b in c.beta]}, "
            f"{int(round(c.t1 / c.depth_dt))} random layers (L = {1 / c.depth_dt:g} per unit time), σ = {c.value_sigma:g}"
        ),
        summary=_summary,
        runtime="≈ 2 min 15 s on 2 CPU cores",
    )
)
