"""``gaussian-closure``: Gaussian tokens without layer norm stay Gaussian (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322
§5), and their covariance collapses onto ker A.

Three parts, all in attnflow's convention A = β KᵀQ (the paper's A = KᵀQ/√d at β = 1/√d,
``experiments/studies/gaussian_closure/gaussian_closure_theory.py``):

1. **Closure vs particles.** n tokens drawn from N(m0, Σ0) in R^d move by attnflow's SA without layer norm
   (``NoLN(SA(β, Q, K, V))``, RK4 at step ``dt``); their empirical covariance is compared with the closure
   Σ̇ = VΣAΣ + (VΣAΣ)ᵀ started from the exact Σ0 (``solve_closure``, error-controlled to rtol = 1e-8), for each
   n of ``particle_counts`` and ``replicas`` samples. The relative error at t1 falls like n^{−1/2} (the
   fluctuation of n samples). Weights drawn once from ``seed``:
   Q = 0.35 G, K = −Q + 0.175 G', V = I + G''/2 with G, G', G'' standard Gaussian (generic, not
   symmetric, no blow-up up to t1).
2. **Collapse of the particles.** With K = −Q (Q of shape 1 × d) and V random positive definite, the covariance of
   n particles (a sample symmetric under x → −x, so that the mean stays at 0) loses the direction of range A like
   1/t, as the closure does, up to ``collapse_time``.
3. **Limit ranks** (the paper's histograms of ranks): for each d of ``rank_dims``, ``rank_draws`` draws of Q
   (⌊d/2⌋ × d Gaussian), K = −Q, S0 (Wishart), with V = I and with V = MᵀM/d random; the closure runs to t = 10⁶
   (``solve_covariance``: one implicit error-controlled solve per draw) and the rank of the limit is read off the
   eigenvalues that persist between 10⁵ and 10⁶. Theory: every limit has A_sΣ* = 0, rank ≤ d − rank A = ⌈d/2⌉,
   with equality for V = I (the exact limit P(PᵀΣ0⁻¹P)⁻¹Pᵀ). A draw whose solve fails (``on_failure="mask"``:
   never the case in the default runs) is counted apart, as failed, never as "not settled".
"""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np

from ....particles.fields import SA
from ....particles.layernorm import NoLN
from ....solvers.problem import check_steps
from ....solvers.simulation import simulate
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from . import gaussian_closure_theory as gc
from .gaussian_closure_solver import solve_closure, solve_covariance

draw = LazyModule(f"{__package__}.gaussian_closure_figures")  # this study's figures, imported on first use

RANK_TIMES = (50.0, 1e5, 1e6)
"""The closure's save times for the limit ranks (one solve from t = 0); the ranks compare the last two."""

VALUE_KINDS = ("identity", "random")
"""The value matrices of the rank histograms: V = I and V = MᵀM/d."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    closure_error=_DIMS + ["size", "replica", "time"],
    closure_mean_error=_DIMS + ["size", "replica", "time"],
    collapse_particles=_DIMS + ["collapse_time", "eigen"],
    collapse_closure=_DIMS + ["collapse_time", "eigen"],
    rank_counts=_DIMS + ["rank_dim", "value", "rank_bin"],
    rank_failed=_DIMS + ["rank_dim", "value"],
    rank_bound=_DIMS + ["rank_dim"],
    identity_limit_error=_DIMS + ["rank_dim"],
)


def rate_times(config) -> np.ndarray:
    """Save times of the closure-vs-particles runs: ``n_save`` points on [0, t1]."""
    return np.linspace(0.0, float(config.t1), int(config.n_save))


def collapse_times(config) -> np.ndarray:
    """Save times of the collapse run: 0 and ``n_save`` log-spaced multiples of dt up to ``collapse_time``."""
    dt, top = float(config.dt), float(config.collapse_time)
    steps = np.unique(np.round(np.geomspace(1.0, top / dt, int(config.n_save))).astype(np.int64))
    return np.concatenate([[0.0], steps * dt])


def rate_weights(d: int, seed: int):
    """(m0, S0, Q, K, V) of the closure-vs-particles runs, drawn from ``seed``."""
    rng = np.random.default_rng([seed, 1])
    S0 = gc.random_covariance(rng, d)
    m0 = 0.5 * rng.standard_normal(d)
    Q = 0.35 * rng.standard_normal((d, d))  # tilts ΣAx of a few σ at most: samples of n ≥ 64 resolve them
    K = -Q + 0.175 * rng.standard_normal((d, d))
    V = np.eye(d) + 0.5 * rng.standard_normal((d, d))
    return m0, S0, Q, K, V


def collapse_weights(d: int, seed: int):
    """(S0, Q, V) of the collapse run: Q (1, d), V = MᵀM/d + I/2 (positive definite, not the identity)."""
    rng = np.random.default_rng([seed, 2])
    M = rng.standard_normal((d, d))
    return gc.random_covariance(rng, d), rng.standard_normal((1, d)), M.T @ M / d + 0.5 * np.eye(d)


def fitted_slope(sizes, errors) -> float:
    """The slope of log(RMS over replicas of ``errors`` (N, R)) against log n."""
    rms = np.sqrt(np.mean(np.asarray(errors) ** 2, axis=1))
    return float(np.polyfit(np.log(np.asarray(sizes, dtype=float)), np.log(rms), 1)[0])


def _moments_save(t, x):
    m = jnp.mean(x, axis=0)
    c = x - m
    return {"mean": m, "cov": c.T @ c / x.shape[0]}


def _rate_part(config, d, beta):
    m0, S0, Q, K, V = rate_weights(d, config.seed)
    ts = rate_times(config)
    closure = solve_closure(m0, S0, ts, beta, Q, K, V)
    scale = np.linalg.norm(closure.cov, axis=(-1, -2))
    sizes = list(config.particle_counts)
    cov_err = np.zeros((len(sizes), config.replicas, ts.size))
    mean_err = np.zeros_like(cov_err)
    field = NoLN(SA(beta, Q, K, V))
    for i, n in enumerate(sizes):
        x0 = gc.gaussian_sample(np.random.default_rng([config.seed, 3, n]), n, m0, S0, (config.replicas,))
        sol = simulate(
            field,
            x0,
            float(config.t1),
            ts=ts,
            solver="rk4",
            dt=float(config.dt),
            save=_moments_save,
            dtype=config.dtype,
        )
        cov = np.asarray(sol.stats["cov"], dtype=np.float64)
        mean = np.asarray(sol.stats["mean"], dtype=np.float64)
        cov_err[i] = np.linalg.norm(cov - closure.cov, axis=(-1, -2)) / scale
        mean_err[i] = np.linalg.norm(mean - closure.mean, axis=-1) / np.sqrt(np.trace(closure.cov, axis1=-2, axis2=-1))
    return cov_err, mean_err


def _collapse_part(config, d, beta):
    S0, Q, V = collapse_weights(d, config.seed)
    ts = collapse_times(config)
    closure = solve_closure(np.zeros(d), S0, ts, beta, Q, -Q, V)
    half = gc.gaussian_sample(np.random.default_rng([config.seed, 4]), max(1, config.n // 2), np.zeros(d), S0)
    x0 = np.concatenate([half, -half])  # symmetric under x → −x: the mean stays 0 (V would make it grow)
    sol = simulate(
        NoLN(SA(beta, Q, -Q, V)),
        x0,
        float(config.collapse_time),
        ts=ts,
        solver="rk4",
        dt=float(config.dt),
        save=_moments_save,
        dtype=config.dtype,
    )
    particles = np.linalg.eigvalsh(np.asarray(sol.stats["cov"], dtype=np.float64))
    return particles, np.linalg.eigvalsh(closure.cov)


def _rank_part(config):
    dims = list(config.rank_dims)
    top = max(dims)
    counts = np.zeros((len(dims), len(VALUE_KINDS), top + 2))  # ranks 0 … max d, then "not settled"
    failed = np.zeros((len(dims), len(VALUE_KINDS)))  # solves that failed: no limit, counted apart
    bound = np.zeros(len(dims))
    identity_error = np.zeros(len(dims))
    for i, d in enumerate(dims):
        rng = np.random.default_rng([config.seed, 5, d])
        draws = config.rank_draws
        S0 = gc.random_covariance(rng, d, (draws,))
        Q = rng.standard_normal((draws, d // 2, d)) if d // 2 else np.zeros((draws, 1, d))
        beta = gc.paper_beta(d)
        A = np.stack([gc.attention_kernels(beta, q, -q) for q in Q])
        M = rng.standard_normal((draws, d, d))
        values = {"identity": None, "random": (np.swapaxes(M, -1, -2) @ M / d)[:, None]}
        kernels = np.array([gc.kernel_dimension(a) for a in A])
        if np.any(kernels != kernels[0]):
            raise ConfigError("gaussian-closure: the draws of Q do not all have the same rank")
        bound[i] = kernels[0]
        for j, kind in enumerate(VALUE_KINDS):
            solved = solve_covariance(S0, A, values[kind], times=RANK_TIMES, on_failure="mask")
            kept = ~solved.failed
            S = solved.cov[kept]
            rank, settled = gc.settled_rank(S[:, -2], S[:, -1])
            counts[i, j, : top + 1] = np.bincount(rank[settled], minlength=top + 1)[: top + 1]
            counts[i, j, -1] = np.sum(~settled)
            failed[i, j] = np.sum(solved.failed)
            if kind == "identity" and kept.any():
                exact = np.stack([gc.identity_value_limit(s, a) for s, a in zip(S0[kept], A[kept])])
                gap = np.abs(S[:, -1] - exact).max(axis=(-1, -2)) / np.abs(exact).max(axis=(-1, -2))
                identity_error[i] = float(np.max(np.where(settled, gap, 0.0), initial=0.0))
    return counts, failed, bound, identity_error


def run(config, *, progress=None) -> RunResult:
    """Closure vs particles at every n, the collapse run, and the limit ranks (module docstring)."""
    start = time.perf_counter()
    d, beta = int(config.d[0]), float(config.beta[0])
    cov_err, mean_err = _rate_part(config, d, beta)
    particles, closure = _collapse_part(config, d, beta)
    counts, failed, bound, identity_error = _rank_part(config)

    def member(a):  # statistics carry the (d, β, seed) axes of every run, here of length one
        return np.asarray(a, dtype=float)[None, None, None]

    stats = {
        "closure_error": member(cov_err),
        "closure_mean_error": member(mean_err),
        "collapse_particles": member(particles),
        "collapse_closure": member(closure),
        "rank_counts": member(counts),
        "rank_failed": member(failed),
        "rank_bound": member(bound),
        "identity_limit_error": member(identity_error),
    }
    extra = {
        "size": (np.asarray(config.particle_counts), ["size"]),
        "time": (rate_times(config), ["time"]),
        "collapse_time": (collapse_times(config), ["collapse_time"]),
        "rank_dim": (np.asarray(config.rank_dims), ["rank_dim"]),
    }
    return RunResult.of_statistics(config, stats, extra, start=start, ts=rate_times(config))


def requires(config) -> None:
    """One d and one β, particle counts to compare, and fixed steps of dt that reach t1 and collapse_time."""
    if len(config.d) != 1 or len(config.beta) != 1:
        raise ConfigError("gaussian-closure runs one d and one beta (the closure-vs-particles dimension and β)")
    if not config.particle_counts:
        raise ConfigError("gaussian-closure needs particle_counts, e.g. [64, 256, 1024]")
    for name in ("t1", "collapse_time"):  # the particles step rk4 with dt over both
        horizon = config[name]
        if horizon < config.dt:
            raise ConfigError(
                f"{name} = {horizon:g} must be ≥ dt = {config.dt:g}: the particles step rk4 with dt up to it "
                f"(and save at multiples of dt)"
            )
        try:
            check_steps("the particles' rk4", 0.0, horizon, config.dt, horizon / config.dt, 1_000_000, config.dtype)
        except ValueError as err:
            raise ConfigError(str(err)) from None


def memory(config) -> dict:
    """The particles of the largest count (replicas of them) and of the collapse run, their rk4 stages and
    moments; the draws of the limit ranks."""
    d = config.d[0]
    largest = max(config.particle_counts, default=0) * config.replicas
    times = config.n_save
    return {
        "the particles' states and rk4 stages [particle_counts, replicas, n]": 8 * 7 * (largest + config.n) * d,
        "the particles' attention [particle_counts, n]": 8
        * 3
        * max(config.n, max(config.particle_counts, default=0)) ** 2,
        "the draws of the limit ranks [rank_draws, rank_dims]": 8
        * 12
        * config.rank_draws
        * sum(k * k for k in config.rank_dims)
        * len(VALUE_KINDS),
        "the moments at every save time [n_save, replicas]": 8 * 2 * times * config.replicas * (d * d + d),
    }


def figures(result: RunResult) -> dict:
    """The n^{−1/2} rate, the collapse of the particles onto ker A, and the histograms of limit ranks."""
    c, s = result.config, result.stats
    sizes = np.asarray(c.particle_counts)
    return {
        "closure_rate": lambda p: draw.closure_rate(
            sizes, s["closure_error"][0, 0, 0], rate_times(c), d=c.d[0], beta=c.beta[0], path=p
        ),
        "closure_collapse": lambda p: draw.closure_collapse(
            collapse_times(c), s["collapse_particles"][0, 0, 0], s["collapse_closure"][0, 0, 0], n=c.n, path=p
        ),
        "limit_ranks": lambda p: draw.limit_rank_histograms(
            np.asarray(c.rank_dims),
            s["rank_counts"][0, 0, 0],
            s["rank_bound"][0, 0, 0],
            failed=s["rank_failed"][0, 0, 0] if "rank_failed" in s else None,
            value_labels=(r"$V = I$", r"$V = M^\top M/d$ random"),
            path=p,
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """The n^{−1/2} rate; the collapse run against the closure; the limit ranks against d − rank A."""
    c, s = result.config, result.stats
    sizes = np.asarray(c.particle_counts)
    err = s["closure_error"][0, 0, 0]
    out = []
    if sizes.size >= 2:
        slope = fitted_slope(sizes, err[:, :, -1])
        out.append(
            Check(
                f"covariance error at t = {c.t1:g} against n = {sizes.min()} … {sizes.max()}: fitted slope",
                "−0.5 ± 0.25",
                f"{slope:+.3f}",
                abs(slope + 0.5) <= 0.25,
            )
        )
    rms = np.sqrt(np.mean(err[-1] ** 2, axis=0))
    worst = float(rms.max() * np.sqrt(sizes[-1]))
    out.append(
        Check(
            f"n = {sizes[-1]}: √n × RMS relative covariance error over [0, {c.t1:g}]",
            "≤ 3",
            f"{worst:.2f}",
            worst <= 3.0,
        )
    )
    part, clos = s["collapse_particles"][0, 0, 0], s["collapse_closure"][0, 0, 0]
    gap = float(np.max(np.abs(part[-1] - clos[-1]) / clos[-1].max()))
    out.append(
        Check(
            f"collapse (n = {c.n}, t = {c.collapse_time:g}): particle eigenvalues against the closure",
            "within 0.1 of the largest",
            f"{gap:.3f}",
            gap <= 0.1,
        )
    )
    fall = float(clos[-1, 0] / clos[-1, -1])
    out.append(
        Check(
            "collapse: the direction of range A shrinks (closure, smallest/largest eigenvalue)",
            "≤ 0.05",
            f"{fall:.4f}",
            fall <= 0.05,
        )
    )
    counts, bound = s["rank_counts"][0, 0, 0], s["rank_bound"][0, 0, 0]
    failed = s["rank_failed"][0, 0, 0] if "rank_failed" in s else None  # absent from results stored without it
    if failed is not None:
        out.append(
            Check(
                f"limit ranks: closure solves that failed (of {failed.size * c.rank_draws}; counted apart, "
                "not as unsettled)",
                "0",
                f"{int(failed.sum())}",
                failed.sum() == 0,
            )
        )

    def of(i, j):
        return "" if failed is None else f", {int(failed[i, j])} failed"

    for i, d in enumerate(c.rank_dims):
        b = int(bound[i])
        ident, rand = counts[i, 0], counts[i, 1]
        settled = int(ident[:-1].sum())
        out.append(
            Check(
                f"d = {d}, V = I: settled limits of rank d − rank A = {b}",
                "all, ≥ 90% of the draws settled",
                f"{int(ident[b])} of {settled} settled ({c.rank_draws} draws{of(i, 0)})",
                ident[b] == settled and settled >= 0.9 * c.rank_draws,
            )
        )
        above = int(rand[b + 1 : -1].sum())
        out.append(
            Check(
                f"d = {d}, V random: settled limits of rank > {b}",
                "0",
                f"{above} ({int(rand[:-1].sum())} of {c.rank_draws} settled{of(i, 1)})",
                above == 0 and rand[:-1].sum() > 0,
            )
        )
    gap = float(np.max(s["identity_limit_error"][0, 0, 0]))
    out.append(
        Check(
            "V = I: closure at t = 10⁶ against the exact limit P(PᵀΣ0⁻¹P)⁻¹Pᵀ (relative)",
            "≤ 1e-3",
            f"{gap:.1e}",
            gap <= 1e-3,
        )
    )
    return out


EXPERIMENT = register(
    Experiment(
        "gaussian-closure",
        "Gaussian tokens without layer norm: the covariance closure Σ̇ = VΣAΣ + (VΣAΣ)ᵀ against particles (n^-1/2), "
        "and its limit ranks d − rank A",
        "arXiv 2501.18322 §5",
        dict(
            experiment="gaussian-closure",
            norm="none",
            d=[3],
            beta=[float(gc.paper_beta(3))],
            seed=0,
            seeds=1,
            replicas=8,
            particle_counts=[128, 256, 512, 1024, 2048, 4096],
            t1=2.0,
            n_save=21,
            dt=0.05,
            solver="rk4",
            n=2048,
            collapse_time=20.0,
            rank_dims=[3, 4, 5],
            rank_draws=100,
            dtype="float64",
        ),
        dict(particle_counts=[64, 128, 256, 512], replicas=6, n=512, rank_draws=30),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=(
            "d",
            "beta",
            "seed",
            "replicas",
            "particle_counts",
            "t1",
            "n_save",
            "dt",
            "n",
            "collapse_time",
            "rank_dims",
            "rank_draws",
            "dtype",
        ),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"closure vs particles in d = {c.d[0]} for n ∈ {list(c.particle_counts)} ({c.replicas} replicas, "
            f"t ≤ {c.t1:g}), collapse of n = {c.n} to t = {c.collapse_time:g}, limit ranks for "
            f"d ∈ {list(c.rank_dims)} ({c.rank_draws} draws each)"
        ),
        runtime="≈ 2.5 min",
    )
)
