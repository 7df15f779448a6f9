"""The ``meanfield-sphere`` experiment: the density of infinitely many tokens on S², and particles beside it.

One run solves ∂_t ρ + div(ρ X[ρ]) = (σ²/2)Δρ of SA or USA on S² (``solvers/sphere_meanfield.py``, degree
``degree``) for every β and ``seeds`` perturbed uniform starts (``perturbation`` ε on every degree ≤ 16,
drawn from seed + s) up to t1, and around it:

* growth rates: the same starts with ε = 1e-8 over one e-folding time of the fastest degree; the slope
  of log Σ_m |ρ_ℓm|² / 2 for every degree ℓ ≤ ``GROWTH_DEGREES`` against the linear theory's rates from scipy's
  Bessel functions (``bessel_rates``; the solver's kernel comes from ``mode_growth_rates(β, d=3)``);
* clusters: the local maxima of the density above the uniform level when its peak first reaches
  ``FORMED`` times the uniform density, against those of the linearly evolved start
  ρ_ℓm(0) e^{rate_ℓ t} at the same time (the pattern the linear theory selects);
* particles: ``particle_counts`` tokens sampled i.i.d. from the density at the onset of clustering
  (max |4πρ − 1| ≥ 1/2) and moved by ``simulate`` with SA/USA in d = 3 up to t1; the H^{−2} distance of
  their empirical measure to the density at t1 should fall like n^{−1/2}. (From the nearly uniform
  start the sampling noise would be amplified as much as ε, as on the circle.)

A density that clusters narrows exponentially fast: past the time it outgrows the degree, the solver
stops and names that time (raise ``degree`` or lower t1).
"""

from __future__ import annotations

import math
import time

import jax.numpy as jnp
import numpy as np

from ...particles import fields
from ...particles.models import MODELS
from ...particles.modes import fastest_rate
from ...solvers import harmonics, simulate
from ...solvers import sphere_meanfield as ms
from ...solvers.spectral_steps import check_horizon
from ..analysis import particle_convergence_check, plots
from ..config import ConfigError
from ..registry import Check, Experiment, register
from ..run.field_config import simulate_arguments
from ..run.runner import STAT_DIMENSIONS, RunResult, save_times

GROWTH_DEGREES = 10
GROWTH_AMPLITUDE = 1e-8
PERTURBED_DEGREES = 16
ONSET = 0.5  # particles start where max |4πρ − 1| first reaches this
FORMED = 4.0  # the clusters are counted when the peak density first reaches FORMED / 4π
SNAPSHOTS = 4  # density maps (and particles) drawn between the onset and t1
_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    sphere_density=_DIMS + ["time", "colatitude", "longitude"],
    sphere_growth_rate=_DIMS + ["degree"],
    sphere_distance=_DIMS + ["particles"],
    sphere_maxima=_DIMS + ["theory"],
    sphere_particles=_DIMS + ["snapshot", "particle", "coord"],
)


def run(config, *, progress=None) -> RunResult:
    """The densities, the linear rates, the clusters against the linear pattern, and the particles."""
    start = time.perf_counter()
    betas, seeds, L = np.asarray(config.beta, dtype=float), config.seeds, config.degree
    beta_m = np.repeat(betas, seeds)
    seed_m = np.tile(config.seed + np.arange(seeds), betas.size)
    ts = save_times(config)
    c0 = np.stack([ms.perturbed_uniform_sphere(s, L, config.perturbation, PERTURBED_DEGREES) for s in seed_m])
    solve = dict(model=config.model, L=L, noise=config.noise, rtol=config.rtol, atol=config.atol)
    try:
        sol = ms.meanfield_sphere(c0, beta_m, config.t1, ts=ts, **solve)
    except ms.SphereMeanFieldError as err:
        raise ConfigError(f"{err}; e.g. --set degree={2 * L} or --set t1={0.9 * err.t:.3g}") from None

    # linear regime: tiny perturbations over one e-folding time of each member's fastest degree
    fastest = ms.sphere_growth_rates(np.arange(1, L + 1), beta_m[:, None], config.model, config.noise).max(axis=1)
    window = np.linspace(0.0, 1.0, 9) / fastest.max()
    tiny = np.stack([ms.perturbed_uniform_sphere(s, L, GROWTH_AMPLITUDE, PERTURBED_DEGREES) for s in seed_m])
    lin = ms.meanfield_sphere(tiny, beta_m, float(window[-1]), ts=window, **{**solve, "rtol": 1e-11, "atol": 1e-16})
    power = _degree_power(lin.coefficients)[..., 1 : GROWTH_DEGREES + 1]  # (B, T, ℓ)
    w = window - window.mean()
    logs = np.log(power) / 2  # log of the amplitude of each degree
    rates = np.einsum("t,btk->bk", w, logs - logs.mean(axis=1, keepdims=True)) / np.sum(w * w)

    coefficients = sol.coefficients
    maxima = np.array([_maxima_against_linear(sol, c0[m], beta_m[m], m, config) for m in range(len(beta_m))])
    lowest = sol.rho.min(axis=(-2, -1)) / sol.rho.max(axis=(-2, -1))
    stats = {
        "sphere_density": sol.rho,
        "mass": sol.mass,
        "min_density": lowest,
        "energy": sol.energy(),
        "normalized_energy": sol.energy(normalized=True),
        "n_clusters": sol.clusters(),
        "sphere_growth_rate": rates,
        "sphere_maxima": maxima,
    }
    if config.particle_counts:
        stats["sphere_distance"], stats["sphere_particles"] = _particles(config, sol, coefficients, beta_m, seed_m)

    def shaped(a):
        return a.reshape((1, betas.size, seeds) + a.shape[1:])

    stats = {k: shaped(np.asarray(v)) for k, v in stats.items()}
    steps = shaped(np.asarray(sol.steps))
    grid = harmonics.sphere_grid(L)  # the density's grid: coordinates of its last two dimensions
    return RunResult(
        config=config,
        ts=ts,
        stats=stats,
        xs=None,
        steps=steps,
        t_event=np.full(steps.shape, np.inf),
        wall_time_s=time.perf_counter() - start,
        extra={"colatitude": (grid.theta, ["colatitude"]), "longitude": (grid.phi, ["longitude"])},
    )


def requires(config) -> None:
    """S² (d = 3), SA or USA, β > 0, more degrees than the perturbed ones, deterministic particles, and a horizon
    the adaptive steps resolve."""
    if tuple(config.d) != (3,):
        raise ConfigError(f"meanfield-sphere solves the density on S² (d = 3); got d = {list(config.d)}")
    if not MODELS[config.model].circle:
        raise ConfigError(
            f"meanfield-sphere solves SA or USA: model must be 'sa', 'usa' or 'usa-rescaled', got {config.model!r}"
        )
    if any(b <= 0 for b in config.beta):
        raise ConfigError("meanfield-sphere needs β > 0")
    if config.degree <= PERTURBED_DEGREES:
        raise ConfigError(f"degree must exceed the {PERTURBED_DEGREES} perturbed degrees, got {config.degree}")
    if not config.perturbation * math.sqrt(PERTURBED_DEGREES) < 0.3:  # ms.perturbed_uniform_sphere's bound
        raise ConfigError(
            f"perturbation ε must be < 0.3/√{PERTURBED_DEGREES} = {0.3 / math.sqrt(PERTURBED_DEGREES):g} on S² "
            f"(so that ρ0 > 0 over the degrees ≤ {PERTURBED_DEGREES} it perturbs), got {config.perturbation:g}"
        )
    if config.noise > 0 and config.particle_counts:
        raise ConfigError(
            "particle_counts compares deterministic particles with the density: with noise > 0 set particle_counts = []"
        )
    try:
        check_horizon(config.t1, fastest_rate(config.beta, 3, model=config.model), "meanfield-sphere")
    except ValueError as err:
        raise ConfigError(str(err)) from None


def memory(config) -> dict:
    """The transform's tables, the densities (grid) and coefficients at every save time, and the particles."""
    members, L = len(config.beta) * config.seeds, config.degree
    n_theta, n_phi = (3 * L + 3) // 2 + 1, 3 * L + 3
    times = len(config.save_times) or config.n_save
    largest = max(config.particle_counts, default=0)
    return {
        "the spherical-harmonic tables [degree]": 8 * 3 * (L + 1) ** 2 * n_theta,
        "the densities at every save time [degree, n_save, seeds, beta]": 8
        * members
        * times
        * (3 * n_theta * n_phi + 2 * 2 * (L + 1) ** 2),
        "the particles [particle_counts, seeds, beta]": 8 * members * largest * 3 * (12 + 2 * SNAPSHOTS),
    }


def _degree_power(c: np.ndarray) -> np.ndarray:
    """Σ_{|m| ≤ ℓ} |ρ_ℓm|² per degree (..., L + 1) from the stored m ≥ 0 coefficients (..., L + 1, L + 1)."""
    return np.sum(np.where(np.arange(c.shape[-1]) == 0, 1.0, 2.0) * np.abs(c) ** 2, axis=-1)


def _maxima_against_linear(sol, c0, beta, m, config) -> tuple[float, float]:
    """(maxima of ρ, maxima of the linear pattern) above 1/4π when max ρ first reaches FORMED/4π (NaN if never)."""
    peak = sol.rho[m].max(axis=(-2, -1)) * 4 * np.pi
    reached = np.nonzero(peak >= FORMED)[0]
    if not reached.size:
        return (np.nan, np.nan)
    k = int(reached[0])
    L = config.degree
    rates = ms.sphere_growth_rates(np.arange(L + 1), beta, config.model, config.noise)
    linear = c0 * np.exp(rates * sol.ts[k])[:, None]
    linear[0, 0] = c0[0, 0]
    grid = harmonics.sphere_grid(L)
    level = 1.0 / (4 * np.pi)
    return (
        float(ms.sphere_density_maxima(sol.rho[m, k], level)),
        float(ms.sphere_density_maxima(np.asarray(harmonics.synthesis(grid, jnp.asarray(linear))), level)),
    )


def onset_index(ts: np.ndarray, density: np.ndarray) -> int | None:
    """First save index at which every member's density (…, T, n_θ, n_φ) deviates from uniform by ONSET."""
    reached = np.abs(4 * np.pi * density - 1).max(axis=(-2, -1)).reshape(-1, len(ts)) >= ONSET
    if not reached.any(axis=1).all():
        return None
    first = int(np.max(np.argmax(reached, axis=1)))
    return first if first < len(ts) - 1 else None


def _particles(config, sol, coefficients, beta_m, seed_m) -> tuple[np.ndarray, np.ndarray]:
    """H^{−2} distances (members, counts) at t1, and the largest n's states at ``SNAPSHOTS`` times after the onset."""
    counts = list(config.particle_counts)
    i0 = onset_index(sol.ts, sol.rho)
    largest = max(counts)
    snaps = np.full((len(beta_m), SNAPSHOTS, largest, 3), np.nan)
    if i0 is None:
        return np.full((len(beta_m), len(counts)), np.nan), snaps
    t0 = float(sol.ts[i0])
    picks = snapshot_indices(sol.ts, i0)
    rel = jnp.asarray(sol.ts[picks] - t0)
    arguments = simulate_arguments(config, rel, method_only=True)
    field = fields.make(config.model, jnp.asarray(beta_m))
    out = np.empty((len(beta_m), len(counts)))
    for j, n in enumerate(counts):  # one ensemble of all members per particle count
        x0 = np.stack(
            [ms.sample_sphere_density(1_000_003 * int(s) + n, coefficients[m, i0], n) for m, s in enumerate(seed_m)]
        )
        xs = np.asarray(simulate(field, jnp.asarray(x0), config.t1 - t0, **arguments).xs)
        out[:, j] = [ms.sobolev_distance(xs[m, -1], coefficients[m, -1]) for m in range(len(beta_m))]
        if n == largest:
            snaps = xs
    return out, snaps


def snapshot_indices(ts: np.ndarray, i0: int) -> np.ndarray:
    """``SNAPSHOTS`` save indices from the onset i0 to the last save, evenly spaced in time."""
    targets = np.linspace(ts[i0], ts[-1], SNAPSHOTS)
    return np.array([int(np.argmin(np.abs(ts - t))) for t in targets])


def figures(result: RunResult) -> dict:
    """The density maps with the particles beside them, and the rates with the particles' convergence."""
    c, s = result.config, result.stats
    grid = harmonics.sphere_grid(c.degree)
    density = s["sphere_density"][0, 0, 0]
    i0 = onset_index(result.ts, s["sphere_density"])
    picks = snapshot_indices(result.ts, 0 if i0 is None else i0)
    particles = s["sphere_particles"][0, 0, 0] if "sphere_particles" in s and i0 is not None else None
    out = {
        "meanfield_sphere": lambda p: plots.sphere_density_maps(
            grid.theta,
            grid.phi,
            result.ts[picks],
            density[picks],
            particles,
            beta=float(c.beta[0]),
            model=c.model,
            n=max(c.particle_counts) if particles is not None else None,
            limits=plots.style.density_limits(4 * np.pi * density),  # the interactive globe's scale too
            path=p,
        )
    }
    theory_l = np.arange(1, max(GROWTH_DEGREES, 20) + 1)
    out["meanfield_sphere_rates"] = lambda p: plots.sphere_rates_and_convergence(
        np.arange(1, GROWTH_DEGREES + 1),
        s["sphere_growth_rate"][0],
        theory_l,
        ms.sphere_growth_rates(theory_l, np.asarray(c.beta, dtype=float)[:, None], c.model, c.noise),
        np.asarray(c.beta, dtype=float),
        np.asarray(c.particle_counts),
        s["sphere_distance"][0] if "sphere_distance" in s else None,
        t1=float(result.ts[-1]),
        t_start=None if i0 is None else float(result.ts[i0]),
        model=c.model,
        path=p,
    )
    return out


def bessel_rates(ell, beta, model: str = "sa", noise: float = 0.0) -> np.ndarray:
    """The linear theory's growth rates of the degrees ``ell`` at the uniform density on S² from scipy's Bessel
    functions, apart from the recurrence of ``particles.modes`` that gives the solver its kernel:
    ℓ(ℓ+1) I_{ℓ+1/2}(β)/(β I_{1/2}(β)) (SA), ℓ(ℓ+1) √(π/2β) I_{ℓ+1/2}(β)/β (USA; × e^{−β} rescaled), minus
    (σ²/2) ℓ(ℓ+1). ``ell`` and ``beta`` broadcast."""
    from scipy.special import ive  # here: scipy costs a third of a second to import

    ell, beta = np.broadcast_arrays(np.asarray(ell, dtype=float), np.asarray(beta, dtype=float))
    scaled = ive(ell + 0.5, beta)  # I_{ℓ+1/2}(β) e^{−β}
    if model == "sa":
        kernel = scaled / ive(0.5, beta)
    else:
        with np.errstate(over="ignore"):
            kernel = np.sqrt(np.pi / (2.0 * beta)) * scaled * (np.exp(beta) if model == "usa" else 1.0)
    return ell * (ell + 1.0) * (kernel / beta - 0.5 * noise**2)


def checks(result: RunResult) -> list[Check]:
    """Rates against the linear theory, the fastest degree, mass, positivity, energy, clusters and particles.

    The rates and the fastest degree are compared with scipy's Bessel functions (``bessel_rates``), not with
    ``mode_growth_rates``, whose values the solver's kernel is built from."""
    c, s = result.config, result.stats
    out = []
    betas = np.asarray(c.beta, dtype=float)
    ell = np.arange(1, GROWTH_DEGREES + 1)
    theory = bessel_rates(ell, betas[:, None], c.model, c.noise)  # (β, ℓ)
    measured = s["sphere_growth_rate"][0]  # (β, seeds, ℓ)
    err = float(np.max(np.abs(measured / theory[:, None, :] - 1)))
    formula = {"sa": "ℓ(ℓ+1) I_{ℓ+1/2}(β)/(β I_{1/2}(β))"}.get(c.model, "ℓ(ℓ+1) √(π/2β) I_{ℓ+1/2}(β)/β")
    out.append(
        Check(
            f"growth rates of degrees ℓ = 1…{GROWTH_DEGREES} vs {formula}{' − σ²ℓ(ℓ+1)/2' if c.noise else ''} (scipy)",
            "relative error ≤ 1%",
            f"{err:.1e}",
            err <= 0.01,
        )
    )
    for j, beta in enumerate(betas):
        # the argmax of those rates over degrees well past ℓ* ≈ √(2β) (the noise only moves it down)
        degrees = np.arange(1, GROWTH_DEGREES + int(4 * np.sqrt(beta)) + 10)
        want = int(degrees[np.argmax(bessel_rates(degrees, beta, c.model, c.noise))])
        got = sorted({int(v) for v in np.argmax(measured[j], axis=-1) + 1})
        if want <= GROWTH_DEGREES:
            out.append(
                Check(
                    f"β = {beta:g}: the fastest degree of the solver",
                    f"the argmax of the rates from scipy's Bessel functions = {want}",
                    ", ".join(map(str, got)),
                    got == [want],
                )
            )
    drift = float(np.max(np.abs(s["mass"] - 1)))
    out.append(Check("mass ∫ρ conserved", "|mass − 1| ≤ 1e-12", f"{drift:.1e}", drift <= 1e-12))
    low = float(np.min(s["min_density"]))
    out.append(Check("density non-negative", "min ρ / max ρ ≥ −1e-6", f"{low:.1e}", low >= -1e-6))
    if c.noise == 0:
        worst = float(np.min(np.diff(s["normalized_energy"], axis=-1)))
        out.append(Check("energy E[ρ] non-decreasing", "min increment ≥ −1e-12", f"{worst:.1e}", worst >= -1e-12))
    maxima = s["sphere_maxima"][0].reshape(-1, 2)
    shown = ", ".join(f"{int(a)}/{int(b)}" if np.isfinite(a) else "never" for a, b in maxima)
    out.append(
        Check(
            f"clusters when the peak reaches {FORMED:g}× uniform: maxima of ρ / of the linear pattern",
            "equal for every member",
            shown,
            bool(np.all(maxima[:, 0] == maxima[:, 1])),
        )
    )
    if "sphere_distance" in s and len(c.particle_counts) >= 2:
        out.append(
            particle_convergence_check(
                c.particle_counts, s["sphere_distance"][0], metric="H^−2 distance", t=result.ts[-1], fmt=".2e"
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "meanfield-sphere",
        "the n → ∞ density on S² at β = 20: spherical-harmonic growth rates, the fastest degree, clusters, particles",
        "docs/model.md §1.4; [GLPR] §4",
        dict(
            experiment="meanfield-sphere",
            model="sa",
            d=[3],
            beta=[20.0],
            seeds=1,
            t1=9.0,
            n_save=37,
            degree=64,
            perturbation=1e-3,
            rtol=1e-7,
            atol=1e-9,
            solver="rk4",
            dt=0.02,
            particle_counts=[250, 1000, 4000],
            save_states="no",
        ),
        dict(degree=32, t1=8.25, n_save=34, particle_counts=[250, 1000]),
        figures,
        checks,
        run=run,
        keys=(
            "model",
            "d",
            "beta",
            "seeds",
            "seed",
            "t1",
            "n_save",
            "save_times",
            "save_spacing",
            "log_decades",
            "degree",
            "perturbation",
            "rtol",
            "atol",
            "noise",
            "particle_counts",
            "solver",
            "dt",
            "max_steps",
        ),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"density on S² of degree ≤ {c.degree}, {c.model.upper()} at β ∈ {list(c.beta)}, {c.seeds} "
            f"perturbed start(s) (ε = {c.perturbation:g}), t1 = {c.t1:g}; particles n ∈ "
            f"{list(c.particle_counts)}"
        ),
        runtime="28 s",
    )
)
