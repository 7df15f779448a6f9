"""``antipodal-persistence``: n = 8 … 32 tokens under random layer weights, two antipodal groups over time (arXiv 2601.21942).

The random-depth model of ``common-noise`` (QᵀK = I, V_ℓ = σ G_ℓ/√d per layer, residual L^{−1/2}) with n tokens,
n in ``persistence_n``, at each (d, β). Three kinds of members per (n, d, β):

- uniform random tokens: at each save, whether they form one cluster (every pair ⟨x_i, x_j⟩ > 1 − ε) or two
  antipodal groups (every pair |⟨x_i, x_j⟩| > 1 − ε, both signs occurring), ε = ``TOLERANCE``;
- the balanced antipodal state {±u} (n/2 tokens at each pole) exactly: it is invariant, R stays ±1 to rounding;
- the same state perturbed: each group's tokens spread by ``SPREAD`` about its centre, the centres at angle
  ``ANGLE`` from antipodal. The attention sees only the groups' masses, so the centres' overlap is the n = 2 pair
  diffusion, whose exponent λ_antipodal decides: near R = −1, log(1 + R) is a Brownian motion with drift
  λ_antipodal and variance rate v, and a member stays in two antipodal groups with probability
  Φ((log ε − log(1 + R₀) − λt)/√(vt)) (``common_noise_theory.antipodal_persistence``); the split of a group
  contracts at the exponent −σ²(d − 1) tanh²β/d < 0 (``split_exponent``).

From a uniform start the groups are unbalanced: a group of mass w is pushed off R = −1 by μ_w(−1) > 0
(``antipodal_push``) and hovers at 1 + R ≈ μ_w(−1)/|λ| until it leaves; two antipodal groups persist where that
level is below ε.
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

from ....particles.random_depth import Attention, RandomDepth
from ....solvers.common_noise_paths import common_noise_paths
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.preflight import check_step_count
from ...run.runner import STAT_DIMENSIONS, RunResult
from .common_noise import ESCAPE_FOLDS, MARGIN, uniform_tokens
from .common_noise_theory import antipodal_exponent, antipodal_persistence, antipodal_push

draw = LazyModule(f"{__package__}.common_noise_figures")

TOLERANCE = 0.01
"""ε: two tokens are together when ⟨x_i, x_j⟩ > 1 − ε, antipodal when ⟨x_i, x_j⟩ < −(1 − ε)."""

ANGLE = 0.01
"""The perturbed start's centres sit at this angle from antipodal: 1 + R₀ = 1 − cos(ANGLE) ≈ 5·10⁻⁵."""

SPREAD = 1e-4
"""The perturbed start's tokens: each group's centre plus SPREAD times a standard normal vector, normalized."""

SAVES = 20
"""Saves after the start, evenly spaced up to t1."""

PERSISTENCE_SLACK = 0.05
"""The persistence check allows 4 binomial standard errors plus this: the linearization at R = −1 up to the level
ε and the discrete model's O(1/L) bias."""

INVARIANCE_TOL = 1e-12
"""The largest |⟨x_i, x_j⟩| − 1 the exact balanced start may show at any save (rounding, float64)."""

REPELLED_MAX = 0.01
"""Where the antipodal state repels, the largest fraction of uniform members in two antipodal groups at t1."""

PUSH_MASS = 0.25
"""The uniform start's persistence check takes the (d, β) where groups of masses ¼ and ¾ are pushed to a level
μ_w(−1)/|λ| below ε/10: more balanced groups are pushed less."""

KINDS = ("uniform", "exact", "perturbed")
"""The members' starts (module docstring)."""

_OFFSET = {"uniform": 0, "exact": 1_000_003, "perturbed": 2_000_003}
"""Each start's noise seeds are seed + this + 10 007·n: independent across kinds and n."""

_DIMS = ["d", "beta", "seed", "token_count", "time"]
STAT_DIMENSIONS.update(
    cluster_state=_DIMS,  # 0 neither, 1 one cluster, 2 two antipodal groups
    perturbed_antipodal=_DIMS,  # 1 while the perturbed balanced start is still two antipodal groups
    exact_antipodal_error=["d", "beta", "token_count", "time"],
)


def save_times(config) -> np.ndarray:
    return np.linspace(0.0, config.t1, SAVES + 1)


def classify(xs) -> np.ndarray:
    """0, 1 or 2 for each state of ``xs`` (..., n, d): neither, one cluster, two antipodal groups (both signs)."""
    g = np.einsum("...id,...jd->...ij", xs, xs)
    one = (g > 1 - TOLERANCE).all(axis=(-2, -1))
    two = (np.abs(g) > 1 - TOLERANCE).all(axis=(-2, -1)) & (g < 0).any(axis=(-2, -1))
    return np.where(one, 1, np.where(two, 2, 0))


def balanced_start(n: int, d: int, members: int, seed: int, angle: float, spread: float) -> np.ndarray:
    """(members, n, d): n/2 tokens about e₀ and n/2 about −(cos θ e₀ + sin θ e₁), each spread by ``spread``."""
    e = np.eye(d)
    centres = np.stack([e[0]] * (n // 2) + [-(np.cos(angle) * e[0] + np.sin(angle) * e[1])] * (n // 2))
    x = centres[None] + spread * np.random.default_rng(seed).normal(size=(members, n, d))
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _steps(config) -> int:
    return int(round(config.t1 / config.depth_dt))


def run(config, *, progress=None) -> RunResult:
    """Per (d, n): one ensemble of all β, the three starts side by side."""
    start = time.perf_counter()
    betas, ns = np.asarray(config.beta, dtype=float), [int(n) for n in config.persistence_n]
    m, nb = config.seeds, betas.size
    steps = _steps(config)
    shape = (len(config.d), nb, m, len(ns), SAVES + 1)
    state, kept = np.empty(shape, dtype=np.int8), np.empty(shape)
    exact = np.empty((len(config.d), nb, len(ns), SAVES + 1))
    for a, d in enumerate(config.d):
        d = int(d)
        for k, n in enumerate(ns):
            ids = config.seed + np.arange(nb * m)
            x0 = np.concatenate(
                [
                    np.asarray(uniform_tokens(jnp.asarray(ids), n, d)),
                    balanced_start(n, d, nb, config.seed, 0.0, 0.0),
                    balanced_start(n, d, nb * m, config.seed + n, ANGLE, SPREAD),
                ]
            )
            noise = (
                np.concatenate(
                    [
                        ids + _OFFSET["uniform"],
                        config.seed + np.arange(nb) + _OFFSET["exact"],
                        ids + _OFFSET["perturbed"],
                    ]
                )
                + 10_007 * n
            )
            beta_of = np.concatenate([np.repeat(betas, m), betas, np.repeat(betas, m)])
            model = RandomDepth(Attention(jnp.asarray(beta_of), d), sigma=config.value_sigma)
            xs = np.asarray(
                common_noise_paths(
                    model,
                    jnp.asarray(x0),
                    jnp.asarray(noise),
                    dt=config.depth_dt,
                    steps=steps,
                    save_every=steps // SAVES,
                )
            )
            uni, ex, per = xs[: nb * m], xs[nb * m : nb * m + nb], xs[nb * m + nb :]
            state[a, :, :, k] = classify(uni).reshape(nb, m, SAVES + 1)
            kept[a, :, :, k] = (classify(per) == 2).reshape(nb, m, SAVES + 1)
            g = np.einsum("bsid,bsjd->bsij", ex, ex)
            exact[a, :, k] = np.abs(np.abs(g) - 1).max(axis=(-2, -1))
    stats = {"cluster_state": state, "perturbed_antipodal": kept, "exact_antipodal_error": exact}
    extra = {"token_count": (np.asarray(ns, dtype=float), ["token_count"])}
    return RunResult.of_statistics(config, stats, extra, start=start, members=shape[:3], ts=save_times(config))


def _analysis(result: RunResult) -> dict:
    c, ts = result.config, result.ts
    state, kept = result.stats["cluster_state"], result.stats["perturbed_antipodal"]
    m = state.shape[2]
    lam = np.array([[antipodal_exponent(b, d, c.value_sigma) for b in c.beta] for d in c.d])
    predicted = np.array(
        [
            [antipodal_persistence(ts, 1 - np.cos(ANGLE), TOLERANCE, b, int(d), c.value_sigma) for b in c.beta]
            for d in c.d
        ]
    )  # (d, β, time)
    level = np.array([[antipodal_push(b, d, PUSH_MASS, c.value_sigma) for b in c.beta] for d in c.d]) / np.abs(lam)
    return {
        "two_groups": (state == 2).mean(axis=2),  # (d, β, n, time)
        "one_cluster": (state == 1).mean(axis=2),
        "persistent": kept.mean(axis=2),
        "predicted": predicted,
        "predicted_se": np.sqrt(predicted * (1 - predicted) / m),
        "exponent": lam,
        "push_level": level,
        "exact_error": result.stats["exact_antipodal_error"].max(axis=-1),  # (d, β, n)
    }


def requires(config) -> None:
    """Even n ≥ 2 (the balanced start), d ≥ 3, t1 a whole multiple of SAVES layers."""
    odd = [int(n) for n in config.persistence_n if int(n) % 2]
    if odd:
        raise ConfigError(f"persistence_n must hold even token counts (n/2 at each pole), got {odd}")
    if min(config.d) < 3:
        raise ConfigError(f"antipodal-persistence needs d ≥ 3 (the exponents of S^(d−1)), got d = {list(config.d)}")
    layers = config.t1 / config.depth_dt
    check_step_count(layers, config.max_steps, f"t1 / depth_dt = {layers:.4g} random layers")
    if abs(layers - round(layers)) > 1e-9 * layers or round(layers) % SAVES or round(layers) < SAVES:
        raise ConfigError(f"t1 / depth_dt must be a whole multiple of {SAVES} layers, got {layers:g}")


def memory(config) -> dict:
    """Each (d, n) ensemble's saved states, float64."""
    members = len(config.beta) * (2 * config.seeds + 1)
    n, d = max(int(v) for v in config.persistence_n), max(config.d)
    return {"one (d, n) ensemble's saved states [members, saves, n, d]": 8 * 2 * members * (SAVES + 1) * n * d}


def _summary(result: RunResult) -> dict:
    c, a = result.config, _analysis(result)

    def rows(x):
        return np.round(np.asarray(x, dtype=float), 6).tolist()

    return {
        "tokens": [int(n) for n in c.persistence_n],
        "d": [int(d) for d in c.d],
        "beta": [float(b) for b in c.beta],
        "antipodal_exponent": rows(a["exponent"]),
        "push_level_quarter": rows(a["push_level"]),
        "two_antipodal_groups_fraction": rows(a["two_groups"]),
        "one_cluster_fraction": rows(a["one_cluster"]),
        "two_groups_at_t1": rows(a["two_groups"][..., -1]),
        "one_cluster_at_t1": rows(a["one_cluster"][..., -1]),
        "perturbed_persistent_fraction": rows(a["persistent"]),
        "perturbed_persistent_predicted": rows(a["predicted"]),
        "exact_antipodal_max_error": float(a["exact_error"].max()),
    }


def figures(result: RunResult) -> dict:
    """The uniform members' states over time; the perturbed balanced start against its prediction."""
    c, a = result.config, _analysis(result)
    common = dict(dims=c.d, betas=c.beta, tokens=c.persistence_n, members=c.seeds, exponents=a["exponent"])
    return {
        "cluster_fractions": lambda p: draw.cluster_fractions(result.ts, a, tolerance=TOLERANCE, path=p, **common),
        "antipodal_persistence": lambda p: draw.antipodal_persistence(
            result.ts, a, tolerance=TOLERANCE, angle=ANGLE, path=p, **common
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """Invariance of the balanced state; the perturbed start against Φ(…); the uniform start's groups."""
    c, a = result.config, _analysis(result)
    worst = float(a["exact_error"].max())
    out = [
        Check(
            "the balanced antipodal state {±u} is invariant under the random layers",
            f"max over saves, pairs, n, (d, β) of ||⟨x_i, x_j⟩| − 1| ≤ {INVARIANCE_TOL:g}",
            f"{worst:.2e}",
            worst <= INVARIANCE_TOL,
        )
    ]
    pred, se = a["predicted"][:, :, None, :], a["predicted_se"][:, :, None, :]
    dev = np.abs(a["persistent"] - pred)
    out.append(
        Check(
            "[FSEML] two antipodal groups persist iff λ_antipodal < 0: the perturbed balanced start",
            f"|fraction − Φ((log ε − log(1 + R₀) − λt)/√(vt))| ≤ 4 s.e. + {PERSISTENCE_SLACK:g} at every save, n, (d, β)",
            f"max |difference| {float(dev.max()):.3f}; at t1 {', '.join(f'{x:.2f}' for x in a['persistent'][..., -1].ravel())}",
            bool(np.all(dev <= 4 * se + PERSISTENCE_SLACK)),
        )
    )
    scale = MARGIN * c.value_sigma**2
    repel = a["exponent"] >= max(scale, ESCAPE_FOLDS / c.t1)
    if repel.any():
        most = float(a["two_groups"][repel][..., -1].max())
        out.append(
            Check(
                "cosh 2β < d − 2: no uniform members in two antipodal groups",
                f"fraction at t1 ≤ {REPELLED_MAX} at each of {int(repel.sum())} (β, d) with λ ≥ {scale:g}, every n",
                f"max {most:.3f}",
                most <= REPELLED_MAX,
            )
        )
    hold = (a["exponent"] <= -scale) & (a["push_level"] <= TOLERANCE / 10)
    if hold.any():
        least = float(a["two_groups"][hold][..., -1].min())
        out.append(
            Check(
                "[FSEML] antipodal formations persist for n > 2 tokens from a uniform start",
                f"fraction in two antipodal groups at t1 > 0 at each of {int(hold.sum())} (β, d) with λ ≤ −{scale:g} "
                f"and push level μ_¼(−1)/|λ| ≤ ε/10, every n",
                f"min {least:.3f}",
                least > 0,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "antipodal-persistence",
        "random layer weights, n = 8 … 32 tokens: two antipodal groups persist iff λ_antipodal < 0",
        "arXiv 2601.21942",
        dict(
            experiment="antipodal-persistence",
            persistence_n=[8, 16, 32],
            d=[4, 8],
            beta=[0.5, 1.0, 2.0, 3.0],
            seeds=100,
            t1=40.0,
            depth_dt=0.02,
            value_sigma=1.0,
        ),
        dict(d=[8], beta=[0.5, 3.0], seeds=32, t1=20.0),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("persistence_n", "d", "beta", "seeds", "seed", "t1", "depth_dt", "value_sigma", "max_steps"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"{c.seeds} members per start, n ∈ {[int(n) for n in c.persistence_n]}, d ∈ {list(c.d)}, "
            f"β ∈ {[round(b, 3) for b in c.beta]}, {_steps(c)} random layers (L = {1 / c.depth_dt:g} per unit time), "
            f"σ = {c.value_sigma:g}"
        ),
        summary=_summary,
        runtime="≈ 4 min on 2 CPU cores",
    )
)
