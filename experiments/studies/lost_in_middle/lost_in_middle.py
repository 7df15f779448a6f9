"""``lost-in-the-middle``: position-decayed causal attention and the U-shaped retrieval profile (arXiv 2605.09213).

The tokens move by θ̇_i = −β Σ_{j<i} w_ij sin(θ_i − θ_j) e^{β cos(θ_i − θ_j)} with the position weights
w_ij ∝ e^{−(λ/n)(i − j)} (``USA(β, V=βI, mask="causal", positional="decay", alibi_slope=λ/n)``, d = 2).
A run computes, for every β:

* the closed-form soft-accuracy profile S_t(s) of ``experiments/studies/lost_in_middle/lost_in_middle_theory.py`` at fractions of t_crit,
  its minimum, and t_crit against β;
* the particle estimate of S_t at ``profile_times`` from ``profile_runs`` runs of n i.i.d. uniform tokens (the
  sources grouped in ``SOURCE_BINS`` bins of consecutive positions), with its standard error, the
  closed form and the finite-n linear response averaged over the same bins;
* the paper's reference run: four clusters of consecutive tokens (``cluster_start``) over [0, t1].
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from ....particles.fields import USA
from ....solvers.progress import Counter
from ....solvers.simulation import simulate
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult, save_times
from . import lost_in_middle_theory as lim

draw = LazyModule(f"{__package__}.lost_in_middle_figures")  # this study's figures, imported on first use

PROFILE_FRACTIONS = np.array([0.1, 0.25, 0.5, 0.75, 0.9, 1.25, 2.0])
"""Times of the closed-form profiles, as fractions of t_crit: the minimum inside before 1, at the end after."""
POSITIONS = np.linspace(0.02, 0.98, 400)
"""Relative source positions s of the closed-form profiles (the paper's range)."""
CRITICAL_BETAS = np.round(np.arange(1, 49) * 0.1, 10)
"""β of the t_crit curve (the paper's 0.1 … 4.8)."""
PAPER_CRITICAL_TIMES = {1.0: 2.457489, 2.0: 0.600716, 3.0: 0.174018}
"""t_crit at λ = 1, M = 8, n ≤ 20 as the paper states it."""
SOURCE_BINS = 7
"""The sources j = 1 … n − 1 are averaged over this many bins of consecutive positions."""
CHUNK = 4096
"""Members integrated per call: the dense n × n weights of 4096 runs of 64 tokens take 130 MB per evaluation."""
Z_LIMIT = 4.0
"""The particle estimate agrees with S_t when every bin is within this many standard errors."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    profile_curve=_DIMS + ["profile_fraction", "position"],
    profile_at_times=_DIMS + ["profile_time", "position"],
    profile_minimum=_DIMS + ["profile_fraction"],
    critical_curve=_DIMS + ["curve_beta"],
    soft_accuracy=_DIMS + ["profile_time", "source"],
    soft_accuracy_error=_DIMS + ["profile_time", "source"],
    soft_accuracy_theory=_DIMS + ["profile_time", "source"],
    soft_accuracy_linear=_DIMS + ["profile_time", "source"],
    reference_angles=_DIMS + ["reference_time", "token"],
)


def decay_field(beta: float, n: int, lam: float) -> USA:
    """The paper's dynamics for n tokens: USA with V = βI and the position weights e^{−(λ/n)(i − j)}."""
    return USA(beta, V=beta * np.eye(2), mask="causal", positional="decay", alibi_slope=lam / n)


def _angles(xs) -> np.ndarray:
    xs = np.asarray(xs, dtype=float)
    return np.arctan2(xs[..., 1], xs[..., 0])


def _bins(n: int) -> list[np.ndarray]:
    return np.array_split(np.arange(n - 1), min(SOURCE_BINS, n - 1))


def _estimate(config, beta: float, times: np.ndarray, bins, meter) -> tuple[np.ndarray, np.ndarray]:
    """The soft accuracy per bin at ``times`` from ``profile_runs`` runs of i.i.d. uniform starts, and its error."""
    n, runs = config.n, config.profile_runs
    field = decay_field(beta, n, config.decay_rate)
    theta0 = np.random.default_rng([config.seed, 1]).uniform(0.0, 2.0 * np.pi, (runs, n))
    ts = np.concatenate([[0.0], times])
    parts = []
    for lo in range(0, runs, CHUNK):  # chunks bound the memory of the dense weights
        th = theta0[lo : lo + CHUNK]
        x0 = np.stack([np.cos(th), np.sin(th)], axis=-1)
        sol = simulate(
            field,
            x0,
            float(times[-1]),
            ts=ts,
            solver=config.solver,
            dt=config.dt,
            rtol=config.rtol,
            atol=config.atol,
            dtype=config.dtype,
        )
        angles = _angles(sol.xs)  # (chunk, T, n)
        parts.append(np.stack([_per_run(angles[:, k], th, config.classes) for k in range(1, ts.size)], axis=1))
        if meter is not None:
            meter.advance(th.shape[0], label=f"lost-in-the-middle (β = {beta:g})")
    samples = np.concatenate(parts)  # (runs, times, sources)
    binned = np.stack([samples[..., b].mean(axis=-1) for b in bins], axis=-1)
    return binned.mean(axis=0), binned.std(axis=0, ddof=1) / np.sqrt(runs)


def _per_run(theta_t: np.ndarray, theta_0: np.ndarray, classes: float) -> np.ndarray:
    """Each run's N Σ_k ω_k [cos k(θ_N(t) − θ_j(0)) − cos k(θ_N(0) − θ_j(0))] (see ``lim.soft_accuracy``)."""
    w, k = lim.mode_weights(classes), np.arange(1, lim.N_MODES + 1)
    now = theta_t[:, -1:, None] - theta_0[:, :-1, None]
    then = theta_0[:, -1:, None] - theta_0[:, :-1, None]
    return theta_t.shape[-1] * np.sum(w * (np.cos(k * now) - np.cos(k * then)), axis=-1)


def run(config, *, progress=None) -> RunResult:
    """The closed-form profiles, the particle estimates and the reference run, for every β."""
    start = time.perf_counter()
    betas, lam, classes, n = np.asarray(config.beta, dtype=float), config.decay_rate, config.classes, config.n
    times = np.asarray(config.profile_times, dtype=float)
    bins = _bins(n)
    t_crit = np.array([lim.critical_time(b, lam, classes) for b in betas])
    curves = np.stack(
        [[lim.profile(POSITIONS, f * tc, b, lam, classes) for f in PROFILE_FRACTIONS] for b, tc in zip(betas, t_crit)]
    )
    minimum = POSITIONS[np.argmin(curves, axis=-1)]
    critical_curve = np.array([lim.critical_time(b, lam, classes) for b in CRITICAL_BETAS])
    sources = np.arange(1, n) / n
    at_times = np.stack([[lim.profile(POSITIONS, t, b, lam, classes) for t in times] for b in betas])

    def binned(a):
        return np.stack([a[..., b].mean(axis=-1) for b in bins], axis=-1)

    theory = np.stack([[binned(lim.profile(sources, t, b, lam, classes)) for t in times] for b in betas])
    linear = np.stack([[binned(lim.discrete_profile(n, t, b, lam, classes)) for t in times] for b in betas])

    show = progress is not False and (progress or config.progress)
    estimate, error = [], []
    with (
        Counter(betas.size * config.profile_runs, label="lost-in-the-middle", unit="runs")
        if show
        else contextlib.nullcontext() as meter
    ):
        for b in betas:  # a handful of temperatures; the runs of each are one vmapped ensemble per chunk
            m, e = _estimate(config, float(b), times, bins, meter)
            estimate.append(m)
            error.append(e)

    ref_ts = save_times(config)
    theta, _ = lim.cluster_start(n, config.seed)
    x0 = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    reference = np.stack(
        [
            _angles(
                simulate(
                    decay_field(float(b), n, lam),
                    x0,
                    config.t1,
                    ts=ref_ts,
                    solver=config.solver,
                    dt=config.dt,
                    rtol=config.rtol,
                    atol=config.atol,
                    dtype=config.dtype,
                ).xs
            )
            for b in betas
        ]
    )  # (β, T, n)

    def member(a):  # statistics carry the (d, β, seed) axes of every run: d and seed of length one
        return np.asarray(a, dtype=float)[None, :, None]

    stats = {
        "profile_curve": member(curves),
        "profile_at_times": member(at_times),
        "profile_minimum": member(minimum),
        "critical_curve": member(np.broadcast_to(critical_curve, (betas.size, critical_curve.size))),
        "soft_accuracy": member(estimate),
        "soft_accuracy_error": member(error),
        "soft_accuracy_theory": member(theory),
        "soft_accuracy_linear": member(linear),
        "reference_angles": member(reference),
    }
    extra = {
        "profile_fraction": (PROFILE_FRACTIONS, ["profile_fraction"]),
        "position": (POSITIONS, ["position"]),
        "curve_beta": (CRITICAL_BETAS, ["curve_beta"]),
        "profile_time": (times, ["profile_time"]),
        "source": (_sources(n), ["source"]),
        "reference_time": (ref_ts, ["reference_time"]),
        "token": (np.arange(1, n + 1), ["token"]),
    }
    return RunResult.of_statistics(config, stats, extra, start=start, members=(1, betas.size, 1))


def _sources(n: int) -> np.ndarray:
    """The relative positions (j + 1)/n of the bins' centres (0-based sources j = 0 … n − 2)."""
    return np.array([(b.mean() + 1.0) / n for b in _bins(n)])


def figures(result: RunResult) -> dict:
    """The profiles (closed form and particles) with t_crit against β, and the reference run on the circle."""
    c, s = result.config, result.stats
    beta = float(np.asarray(c.beta, dtype=float)[0])
    return {
        "lost_in_the_middle": lambda p: draw.retrieval_profiles(
            POSITIONS,
            PROFILE_FRACTIONS,
            s["profile_curve"][0, 0, 0],
            lim.critical_time(beta, c.decay_rate, c.classes),
            np.asarray(c.profile_times),
            s["profile_at_times"][0, 0, 0],
            _sources(c.n),
            s["soft_accuracy"][0, 0, 0],
            s["soft_accuracy_error"][0, 0, 0],
            CRITICAL_BETAS,
            s["critical_curve"][0, 0, 0],
            beta=beta,
            lam=c.decay_rate,
            classes=c.classes,
            n=c.n,
            runs=c.profile_runs,
            marks=PAPER_CRITICAL_TIMES if (c.decay_rate, c.classes) == (1.0, 8.0) else None,
            path=p,
        ),
        "lost_in_the_middle_particles": lambda p: draw.decay_snapshots(
            save_times(c),
            s["reference_angles"][0, 0, 0],
            lim.cluster_start(c.n, c.seed)[1],
            beta=beta,
            lam=c.decay_rate,
            path=p,
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """t_crit as the paper gives it; the minimum moving to the end; the particles against S_t; token 1 fixed."""
    c, s = result.config, result.stats
    out = []
    if c.decay_rate == 1.0 and c.classes == 8.0:
        for b, paper in PAPER_CRITICAL_TIMES.items():
            value = lim.critical_time(b, 1.0, 8.0)
            out.append(
                Check(
                    f"t_crit at β = {b:g} (λ = 1, M = 8, n ≤ 20)",
                    f"{paper:.6f}",
                    f"{value:.6f}",
                    abs(value - paper) <= 5e-7,
                )
            )
    end = POSITIONS[-1]
    for k, b in enumerate(np.asarray(c.beta, dtype=float)):
        minimum = s["profile_minimum"][0, k, 0]
        before, after = minimum[PROFILE_FRACTIONS < 1], minimum[PROFILE_FRACTIONS > 1]
        moves = bool(np.all(np.diff(before) > 0) and np.all(before < end) and np.all(after == end))
        out.append(
            Check(
                f"β = {b:g}: the profile's minimum moves to the end, reaching it past t_crit = "
                f"{lim.critical_time(b, c.decay_rate, c.classes):.4f}",
                "inside, increasing; then s = 0.98",
                ", ".join(f"{m:.2f}" for m in minimum),
                moves,
            )
        )
        z = (s["soft_accuracy"][0, k, 0] - s["soft_accuracy_theory"][0, k, 0]) / s["soft_accuracy_error"][0, k, 0]
        worst = float(np.max(np.abs(z)))
        out.append(
            Check(
                f"β = {b:g}: particle soft accuracy ({c.profile_runs} runs of n = {c.n}, t ∈ "
                f"{list(c.profile_times)}) against S_t",
                f"every bin within {Z_LIMIT:g} standard errors",
                f"largest {worst:.2f}, rms {float(np.sqrt(np.mean(z**2))):.2f}",
                worst <= Z_LIMIT,
            )
        )
        ref = s["reference_angles"][0, k, 0]
        moved = float(np.max(np.abs(ref[:, 0] - ref[0, 0])))
        out.append(Check(f"β = {b:g}: the first token never moves (reference run)", "0", f"{moved:.1e}", moved == 0.0))
    return out


MAX_DECAY_RATE = 700.0
"""The largest λ: the closed form holds e^λ, which overflows float64 beyond 709.8."""


def requires(config) -> None:
    """β > 0, three tokens at least, a decay rate whose e^λ is finite, at least one class, and increasing
    profile times within the reference run's [0, t1] (whose steps preflight counts)."""
    betas = np.asarray(config.beta, dtype=float)
    if np.any(betas <= 0):
        raise ConfigError(f"lost-in-the-middle needs beta > 0 (the rates n² I_n(β)), got {betas.tolist()}")
    if config.n < 3:
        raise ConfigError(
            f"lost-in-the-middle needs n ≥ 3 tokens (a source, a middle and the last), got n = {config.n}"
        )
    if config.decay_rate > MAX_DECAY_RATE:
        raise ConfigError(
            f"decay_rate must be ≤ {MAX_DECAY_RATE:g} (the closed form holds e^λ, which overflows "
            f"float64 beyond 709.8), got {config.decay_rate:g}"
        )
    if config.classes < 1:
        raise ConfigError(f"classes must be ≥ 1 (the number M of classes read off the circle), got {config.classes:g}")
    times = np.asarray(config.profile_times, dtype=float)
    if times.size == 0 or np.any(np.diff(times) <= 0):
        raise ConfigError(f"profile_times must be increasing and not empty, got {times.tolist()}")
    if times[-1] > config.t1:
        raise ConfigError(
            f"profile_times must lie within the reference run's [0, t1 = {config.t1:g}], got {times[-1]:g}"
        )


def memory(config) -> dict:
    """The runs' uniform starts and soft accuracies, and one chunk's dense n × n weights."""
    runs, n, size = config.profile_runs, config.n, 4 if config.dtype == "float32" else 8
    times = len(config.profile_times)
    return {
        "the uniform starts of every run [profile_runs, n]": 8 * 3 * runs * n,
        "the soft accuracy of every run [profile_runs, n, profile_times]": 8 * 3 * runs * (times + 1) * n,
        "one chunk's dense attention [n]": size * min(runs, CHUNK) * (3 * n * n + 8 * 2 * n),
    }


EXPERIMENT = register(
    Experiment(
        "lost-in-the-middle",
        "position-decayed causal attention: the U-shaped soft-accuracy profile against its closed form, t_crit",
        "arXiv 2605.09213",
        dict(
            experiment="lost-in-the-middle",
            model="usa",
            n=64,
            beta=[1.0],
            decay_rate=1.0,
            classes=8.0,
            profile_times=[0.5, 1.0],
            profile_runs=16384,
            seeds=1,
            seed=17,
            d=[2],
            solver="rk4",
            dt=0.025,
            t1=10.0,
            n_save=51,
        ),
        dict(profile_runs=2048),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=(
            "n",
            "beta",
            "seed",
            "decay_rate",
            "classes",
            "profile_runs",
            "profile_times",
            "t1",
            "n_save",
            "save_times",
            "save_spacing",
            "log_decades",
            "solver",
            "dt",
            "rtol",
            "atol",
            "dtype",
        ),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"n = {c.n} tokens, β ∈ {list(c.beta)}, λ = {c.decay_rate:g}, M = {c.classes:g}: "
            f"{c.profile_runs} runs from uniform starts at t ∈ {list(c.profile_times)}, "
            f"one reference run to t = {c.t1:g}"
        ),
        runtime="30 s",
    )
)
