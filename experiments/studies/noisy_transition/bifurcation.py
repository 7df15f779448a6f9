"""``bifurcation``: the noisy mean field's branches of stationary densities on the circle (docs/model.md §13.3).

For each β the uniform density is continued in the noise σ (``StationaryCircle``, ``continuation``) across the
linear thresholds σ_k of the modes k in ``branches``; at each branch point the branch of k-fold symmetric
densities is switched onto and followed through its folds (``modes`` Fourier modes), with the stability of
every point from the spectrum of the linearized equation. Around it:

* the branch points against the thresholds σ_k² = 2 rate_k/k² of ``growth_rates`` (USA: 2I_k(β)/β);
* the mode-1 branch's curvature at its branch point, dK/dc_1² (``pitchfork_coefficient``), against its closed
  form K_#(1 − 2ρ)/(2(1 − ρ)), ρ = I_2(β)/I_1(β) (docs/model.md §13.3): positive (a supercritical pitchfork,
  continuous transition) below β*(2) = 2.4469, the root of ρ = 1/2 (``critical_beta``), and negative
  (subcritical, with a fold at σ_fold > σ_#) above it; where the configuration's β lie on both sides, the
  coefficient's root is found and compared with β*;
* β_*^{(d)} of the circle and of the spheres S^{d−1}, d in ``sphere_dims`` (zonal densities, ``StationarySphere``),
  three ways (``beta_star``): the sign change of the pitchfork coefficient computed from the nonlinear stationary
  densities, the closed form (the root of I_{d/2+1}/I_{d/2} = 1/d), and the folds of the branches continued at
  β_* + ``FOLD_OFFSETS`` extrapolated to the branch point (docs/model.md §13.6); summary.json's ``beta_star`` (the
  first, keyed by d), ``beta_star_closed_form`` and ``beta_star_fold``;
* the linearized spectrum against the time-dependent solver: the mode-1 state at the middle of its branch
  (its unstable part when there is one) is perturbed along its leading eigenvector and ``meanfield_circle`` run
  for two e-foldings; the perturbation's measured rate against the eigenvalue;
* the particles (``noisy-transition``'s sweeps of σ/σ_# down from uniform tokens and up from gathered ones, n
  tokens, on this run's keys): above β* their hysteresis loop lies between the threshold σ_# and the fold
  σ_fold; with ``meanfield_time`` > 0 the same sweeps of the time-dependent mean field, drawn beside the branches,
  whose sweep up keeps its order until the fold (n = ∞ has no fluctuations to leave the branch earlier);
* the same particle sweeps on the spheres S^{d−1} of ``sphere_dims`` at β = ``sphere_beta`` (above their β_*), with
  the degree-1 zonal branch continued from σ_# through its fold (``degree_one_branch``): the loop again lies
  between the threshold σ_#^{(d)} = 1/√K_#^{(d)} and σ_fold, within 3 standard errors of the seeds' crossings and
  the levels' spacing.

Statistics (dimensions (d, beta, seed, ...); the mean field repeated along the seeds): ``branch_sigma``,
``branch_amplitude``, ``branch_stable`` on (…, branch, point) with branch 0 the uniform density and then the
modes of ``branches``; ``branch_point`` (the located σ of each mode on the uniform branch), ``fold_sigma`` and
``fold_amplitude`` (the first fold of each branch) on (…, branch); ``pitchfork``, ``rate_predicted``,
``rate_measured`` on (…, check); ``beta_star`` on (…, dimension, method), the dimensions 2 and ``sphere_dims``;
the sweeps' ``order``, ``order_sq`` and ``meanfield_order`` (…, sweep, level) as in
noisy-transition; on the spheres ``sphere_order``, ``sphere_order_sq`` (…, sphere, sweep, level),
``sphere_branch_sigma``, ``sphere_branch_order``, ``sphere_branch_stable`` (…, sphere, sphere_point) and ``sphere_fold``
(…, sphere, fold_quantity: σ_fold/σ_#, m₁ there), repeated along β and, but for the particles, the seeds.
"""

from __future__ import annotations

import time

import numpy as np

from ....solvers import circle_meanfield as mf
from ....solvers.continuation import Branch, SpecialPoint, continuation
from ....solvers.stationary import StationaryCircle, branch_threshold, pitchfork_coefficient
from ....solvers.stationary_sphere import StationarySphere, sphere_branch_threshold, sphere_critical_beta
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from . import noisy_transition as nt
from .noisy_transition_theory import bessel_ratio, critical_beta, critical_noise

draw = LazyModule(f"{__package__}.noisy_transition_figures")  # this study's figures, imported on first use

RATE_TOL = 0.05
"""Relative agreement of the linearized rate with the time-dependent solver's."""
LOOP_TOL = nt.THRESHOLD_TOLERANCE
"""How far (relative) the particles' crossings may lie outside [σ_#, σ_fold]: finite n and finite levels."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    branch_sigma=_DIMS + ["branch", "point"],
    branch_amplitude=_DIMS + ["branch", "point"],
    branch_stable=_DIMS + ["branch", "point"],
    branch_point=_DIMS + ["branch"],
    fold_sigma=_DIMS + ["branch"],
    fold_amplitude=_DIMS + ["branch"],
    pitchfork=_DIMS + ["check"],
    rate_predicted=_DIMS + ["check"],
    rate_measured=_DIMS + ["check"],
    beta_star=_DIMS + ["dimension", "method"],
    sphere_order=_DIMS + ["sphere", "sweep", "level"],
    sphere_order_sq=_DIMS + ["sphere", "sweep", "level"],
    sphere_branch_sigma=_DIMS + ["sphere", "sphere_point"],
    sphere_branch_order=_DIMS + ["sphere", "sphere_point"],
    sphere_branch_stable=_DIMS + ["sphere", "sphere_point"],
    sphere_fold=_DIMS + ["sphere", "fold_quantity"],
)

BETA_BRACKET = (0.5, 8.0)
"""Where the pitchfork coefficient's sign change β_* is sought, for every d (supercritical at 0.5, subcritical at 8)."""
FOLD_OFFSETS = (0.005, 0.01, 0.02)
"""β − β_* of the three continued branches whose folds are extrapolated to the branch point."""
BETA_STAR_TOL = 1e-6
"""Agreement of the coefficient's sign change with the closed form, and of the folds' extrapolation with both."""
SPHERE_BRANCH_POINTS = 400
"""Points of a sphere's degree-1 branch continued at ``sphere_beta`` from σ_# through its fold to the lowest level."""
SPHERE_BRANCH_MODES = 96
"""The least Gegenbauer degrees of the spheres' branches at ``sphere_beta`` (more where ``modes`` says so): the
ordered densities down to the lowest level are concentrated (at β = 4, 48 degrees end the branch at 0.94 σ_# on
S², 96 follow it to 0.76 σ_#; the fold is the same to 1e-13)."""


def _switched(system: StationaryCircle, point: SpecialPoint) -> SpecialPoint:
    """A branch point of the uniform branch (all modes) in the coordinates of a k-symmetric system."""
    keep = system.ks - 1
    tangent = np.append(point.tangent[:-1][keep], point.tangent[-1])
    return SpecialPoint("branch", point.p, point.u[keep], 0, 1, tangent / np.linalg.norm(tangent), 0.0)


def branches_at(beta: float, config) -> dict:
    """The uniform branch and the branch of every mode in ``branches``, continued in σ."""
    ks = sorted(int(k) for k in config.branches)
    sigmas = {k: float(branch_threshold(beta, k, config.model)) for k in ks}
    hi, lo = 1.3 * sigmas[ks[0]], sigmas[ks[-1]] / np.sqrt(1.4)
    uniform = continuation(
        StationaryCircle(beta, config.model, modes=config.modes),
        None,
        1.25 * sigmas[ks[0]],
        p_range=(lo, hi),
        direction=-1,
        ds=0.02 * sigmas[ks[0]],
        ds_max=0.04 * sigmas[ks[0]],
    )
    modes: dict[int, tuple[SpecialPoint | None, Branch | None]] = {}
    out = {"uniform": uniform, "sigmas": sigmas, "modes": modes}
    for k in ks:
        near = [bp for bp in uniform.branch_points if abs(bp.p - sigmas[k]) <= 1e-6 * sigmas[k]]
        if not near:
            modes[k] = (None, None)
            continue
        system = StationaryCircle(beta, config.model, modes=config.modes, symmetry=k)
        # down to the noise where the figure's couplings end (1.4 K_k of the last mode), the amplitude ≤ 1
        branch = continuation(
            system,
            _switched(system, near[0]),
            p_range=(lo, 2.0 * hi),
            direction=1,
            ds=0.01 * sigmas[k],
            ds_min=1e-5 * sigmas[k],
            ds_max=max(0.04 * sigmas[k], 0.05),
            max_points=250,
        )
        modes[k] = (near[0], branch)
    return out


def _stationary_system(beta: float, d: int, model: str, modes: int):
    """The stationary densities of d (the circle's, or a sphere's zonal ones) and degree 1's threshold σ_#."""
    if d == 2:
        return StationaryCircle(beta, model, modes=modes), float(branch_threshold(beta, 1, model))
    return StationarySphere(beta, d, model, modes=modes), sphere_branch_threshold(beta, d, 1, model)


def degree_one_branch(
    beta: float, d: int, model: str = "usa", modes: int = 32, lowest: float = 0.99, max_points: int = 200
) -> tuple[Branch, float]:
    """(the degree-1 branch of stationary densities, σ_#): continued in σ from its branch point on the uniform
    density at σ_# (the circle's, or a sphere's zonal ones) within (``lowest`` σ_#, 2 σ_#), increasing σ first,
    as far as ``modes`` resolve it."""
    system, s1 = _stationary_system(beta, d, model, modes)
    # the branch point, known exactly: the uniform density at σ_#, where the uniform branch runs along σ alone
    unknowns = system.start(None, s1).size
    along_p = np.append(np.zeros(unknowns), 1.0)
    point = SpecialPoint("branch", s1, np.zeros(unknowns), 0, 1, along_p, 0.0)
    branch = continuation(
        system,
        point,
        p_range=(lowest * s1, 2.0 * s1),  # above β_* the fold lies beyond σ_#
        direction=1,
        ds=0.002 * s1,
        ds_min=1e-7 * s1,
        ds_max=0.02 * s1,
        max_points=max_points,
    )
    return branch, s1


def degree_one_fold(beta: float, d: int, model: str = "usa", modes: int = 32) -> tuple[float, float] | None:
    """(σ_fold/σ_#, the order parameter there) of the degree-1 branch's first fold, continued in σ from its branch
    point on the uniform density; None where the branch ends without one: a supercritical pitchfork, or a branch
    that leaves what ``modes`` resolve (a concentrated density at large β) or (0.99 σ_#, 2 σ_#) before its fold."""
    branch, s1 = degree_one_branch(beta, d, model, modes)
    return (branch.folds[0].p / s1, branch.folds[0].measure) if branch.folds else None


def sphere_dims(config) -> list[int]:
    """The spheres' dimensions d of ``sphere_dims``, each once, increasing."""
    return sorted({int(d) for d in config.sphere_dims})


def sphere_sweep_config(config):
    """This run's configuration for noisy-transition's particle sweeps on the spheres: d = ``sphere_dims``,
    β = ``sphere_beta``, no mean field (the circle's alone)."""
    return config.replace(d=sphere_dims(config), beta=[float(config.sphere_beta)], meanfield_time=0.0)


def sphere_sweeps(config, *, progress=None) -> dict:
    """The particles' sweeps on the spheres at ``sphere_beta`` and each sphere's degree-1 zonal branch through its
    fold down to 0.95 × the lowest noise level: the statistics ``sphere_*`` of the module docstring, without the
    leading (d, beta, seed) axes but for the particles' seed axis first."""
    dims, ratios = sphere_dims(config), np.asarray(config.noise_ratios, dtype=float)
    beta, P = float(config.sphere_beta), SPHERE_BRANCH_POINTS
    sigma, order, stable = (np.full((len(dims), P), np.nan) for _ in range(3))
    fold = np.full((len(dims), 2), np.nan)
    for i, d in enumerate(dims):
        modes = max(int(config.modes), SPHERE_BRANCH_MODES)
        branch, s1 = degree_one_branch(beta, d, config.model, modes, 0.95 * float(ratios.min()), P)
        m = len(branch.p)
        sigma[i, :m], order[i, :m], stable[i, :m] = branch.p, branch.measure, branch.stable
        if branch.folds:
            fold[i] = branch.folds[0].p / s1, branch.folds[0].measure
    particles = nt.run(sphere_sweep_config(config), progress=progress).stats  # (sphere, 1, seeds, sweep, level)
    return {
        "sphere_order": np.moveaxis(particles["order"][:, 0], 0, 1),
        "sphere_order_sq": np.moveaxis(particles["order_sq"][:, 0], 0, 1),
        "sphere_branch_sigma": sigma,
        "sphere_branch_order": order,
        "sphere_branch_stable": stable,
        "sphere_fold": fold,
    }


def beta_star_dims(config) -> list[int]:
    """The dimensions whose β_* a run locates: the circle's, 2, and ``sphere_dims`` (each once, increasing)."""
    return [2] + sorted({int(d) for d in config.sphere_dims})


def beta_star(d: int, model: str = "usa", modes: int = 32) -> tuple[float, float, float]:
    """β_*^{(d)} three ways: the sign change of the pitchfork coefficient computed from the nonlinear stationary
    densities (Brent on ``BETA_BRACKET``), the closed form (the root of I_{d/2+1}/I_{d/2} = 1/d), and the continued
    branches' folds at β_* + ``FOLD_OFFSETS``: their order parameter², which vanishes linearly at β_*, extrapolated
    to zero by the quadratic through the three."""
    if d == 2:
        from scipy.optimize import brentq

        root = float(
            brentq(lambda b: pitchfork_coefficient(b, model, 1, modes=modes, amplitude=5e-3), *BETA_BRACKET, xtol=1e-12)
        )
    else:
        root = sphere_critical_beta(d, model, modes=modes, bracket=BETA_BRACKET)
    x = np.asarray(FOLD_OFFSETS)
    folds = [degree_one_fold(root + h, d, model, modes) for h in FOLD_OFFSETS]
    orders = [f[1] for f in folds if f is not None]
    if len(orders) < len(folds):
        return root, critical_beta(d), float("nan")
    a2, a1, a0 = np.polyfit(x, np.square(orders), 2)
    roots = np.roots([a2, a1, a0])
    real = roots[np.isreal(roots)].real
    return root, critical_beta(d), float(root + real[np.argmin(np.abs(real))]) if real.size else float("nan")


def _rates(beta: float, config, branch) -> tuple[float, float]:
    """(the leading eigenvalue, the rate measured by ``meanfield_circle``) at the mode-1 branch's middle point of its
    unstable part, or of the whole branch when every point is stable."""
    unstable = np.nonzero(branch.unstable > 0)[0]
    pick = unstable[len(unstable) // 2] if unstable.size else len(branch.p) // 2
    system, a, sigma = branch.system, branch.u[pick], float(branch.p[pick])
    J, G = system.linearization(a, sigma)
    values, vectors = np.linalg.eig(J)
    mask = np.ones(values.size, bool)
    if G.shape[1]:
        mask &= np.abs(vectors.conj().T @ G[:, 0]) < 0.5  # not the rotation
    j = np.nonzero(mask)[0][np.argmax(values[mask].real)]
    v = vectors[:, j] / vectors[np.argmax(np.abs(vectors[:, j])), j]  # a real eigenvalue's eigenvector, made real
    lam, v = float(values[j].real), v.real
    rho = system.state(a, sigma)
    K = system.modes
    c = np.zeros(K, complex)
    c[1:] = v[: K - 1] + 1j * v[K - 1 :]
    theta = mf.theta_grid(K)
    bump = np.real(np.exp(1j * np.outer(theta, np.arange(K))) @ c) / np.pi  # the eigenvector as a density
    eps = 1e-7 / max(float(np.max(np.abs(bump))), 1e-300)
    t1 = 2.0 / max(abs(lam), 1e-12)
    ts = np.linspace(0.0, t1, 21)
    sol = mf.meanfield_circle(
        rho + eps * bump, beta, t1, ts=ts, model=config.model, noise=sigma, rtol=1e-12, atol=1e-15
    )
    gap = np.linalg.norm(sol.rho - rho[None], axis=-1)
    slope = np.polyfit(ts[5:], np.log(gap[5:]), 1)[0]
    return lam, float(slope)


def sphere_stats(spheres: dict, betas: int, seeds: int) -> dict:
    """``sphere_sweeps``' arrays with the statistics' leading (d, beta, seed) axes: repeated along the ``betas`` of
    the circle and, but for the particles' own, along the seeds."""
    out = {}
    for name, value in spheres.items():
        per_seed = name in ("sphere_order", "sphere_order_sq")
        value = value if per_seed else np.repeat(value[None], seeds, axis=0)
        out[name] = np.repeat(value[None, None], betas, axis=1)
    return out


def run(config, *, progress=None) -> RunResult:
    """The branches of every β, the checks' numbers, and the particles' sweeps (module docstring)."""
    start = time.perf_counter()
    betas = np.asarray(config.beta, dtype=float)
    ks = sorted(int(k) for k in config.branches)
    nb, nk = betas.size, len(ks) + 1
    found = [branches_at(float(b), config) for b in betas]
    points = max(  # the uniform branch, and every mode's branch that bifurcates from it
        max([len(f["uniform"].p)] + [len(br.p) for _, br in f["modes"].values() if br is not None]) for f in found
    )
    sigma, amp, stable = (np.full((nb, nk, points), np.nan) for _ in range(3))
    bpoint, fsig, famp = (np.full((nb, nk), np.nan) for _ in range(3))
    pitch, lam, rate = (np.full((nb, 2), np.nan) for _ in range(3))
    for b, f in enumerate(found):
        all_branches = [f["uniform"]] + [f["modes"][k][1] for k in ks]
        for i, br in enumerate(all_branches):
            if br is None:
                continue
            m = len(br.p)
            sigma[b, i, :m], amp[b, i, :m], stable[b, i, :m] = br.p, br.measure, br.stable
            if br.folds:
                fsig[b, i], famp[b, i] = br.folds[0].p, br.folds[0].measure
            if i > 0 and f["modes"][ks[i - 1]][0] is not None:
                bpoint[b, i] = f["modes"][ks[i - 1]][0].p
        pitch[b, 0] = pitchfork_coefficient(float(betas[b]), config.model, 1, modes=config.modes, amplitude=5e-3)
        if 1 in ks and f["modes"][1][1] is not None:
            lam[b, 0], rate[b, 0] = _rates(float(betas[b]), config, f["modes"][1][1])
    if config.model == "usa" and np.any(betas < critical_beta(2)) and np.any(betas > critical_beta(2)):
        from scipy.optimize import brentq  # here: scipy costs a third of a second to import

        below, above = float(betas[betas < critical_beta(2)].max()), float(betas[betas > critical_beta(2)].min())
        pitch[:, 1] = brentq(
            lambda x: pitchfork_coefficient(x, config.model, 1, modes=config.modes, amplitude=5e-3),
            below,
            above,
            xtol=1e-12,
        )
    dims = beta_star_dims(config)
    stars = np.array([beta_star(d, config.model, config.modes) for d in dims])  # (dimension, method)
    particles = nt.run(config, progress=progress)  # noisy-transition's sweeps, on this run's own keys
    seeds = config.seeds
    spheres = sphere_sweeps(config, progress=progress) if config.sphere_beta > 0 and config.sphere_dims else None

    def member(a):
        return np.repeat(np.asarray(a, dtype=float)[None, :, None], seeds, axis=2)

    stats = {
        "branch_sigma": member(sigma),
        "branch_amplitude": member(amp),
        "branch_stable": member(stable),
        "branch_point": member(bpoint),
        "fold_sigma": member(fsig),
        "fold_amplitude": member(famp),
        "pitchfork": member(pitch),
        "rate_predicted": member(lam),
        "rate_measured": member(rate),
        "beta_star": np.broadcast_to(stars, (1, nb, seeds) + stars.shape).copy(),
        "order": particles.stats["order"],
        "order_sq": particles.stats["order_sq"],
        "meanfield_order": particles.stats["meanfield_order"],
    }
    if spheres is not None:
        stats.update(sphere_stats(spheres, nb, seeds))
    return RunResult(
        config=config,
        ts=np.zeros(1),
        stats=stats,
        xs=None,
        steps=particles.steps,
        t_event=particles.t_event,
        wall_time_s=time.perf_counter() - start,
    )


PARTICLE_KEYS: tuple[str, ...] = nt.EXPERIMENT.keys or ()
"""The keys of noisy-transition's sweeps, which this run passes on as they are."""


def requires(config) -> None:
    """USA (either clock), the circle (d = 2), β > 0, modes ≥ 16 and ≥ 4 × the largest branch mode; the sweeps' own
    refusals (noisy-transition's); ``sphere_beta`` 0 or above β_*^{(d)} of every sphere."""
    if config.model not in ("usa", "usa-rescaled"):
        raise ConfigError(
            f"bifurcation compares with the theory of noisy USA (β*, the particles' sweeps): model must "
            f"be 'usa' or 'usa-rescaled', got {config.model!r}"
        )
    if list(config.d) != [2]:
        raise ConfigError(f"bifurcation is the circle's: d must be [2], got {list(config.d)}")
    if any(b <= 0 for b in config.beta):
        raise ConfigError("bifurcation needs β > 0")
    if config.modes < max(16, 4 * max(config.branches)):
        raise ConfigError(
            f"modes must be ≥ 16 and ≥ 4 × the largest branch mode ({max(config.branches)}), got {config.modes}"
        )
    nt.requires(config)
    if config.sphere_beta > 0 and config.sphere_dims:
        below = [d for d in sphere_dims(config) if config.sphere_beta <= critical_beta(d)]
        if below:
            raise ConfigError(
                f"sphere_beta = {config.sphere_beta:g} is not above β_*^{{(d)}} of d = {below} "
                f"({', '.join(f'{critical_beta(d):.4f}' for d in below)}): the spheres' sweeps test the hysteresis "
                "loop of the subcritical side; raise sphere_beta, or set it to 0 for no sweeps"
            )
        nt.requires(sphere_sweep_config(config))


def memory(config) -> dict:
    """The branches' Jacobians (2·modes)² per point, and the sweeps' (noisy-transition's estimate)."""
    out = {"the linearized equation per branch point [modes]": 8 * 6 * (2 * config.modes) ** 2}
    out.update(nt.memory(config))
    if config.sphere_beta > 0 and config.sphere_dims:  # run one after the other: the larger of each part
        for part, size in nt.memory(sphere_sweep_config(config)).items():
            out[part] = max(out.get(part, 0), size)
    return out


# -- checks and figures ------------------------------------------------------------------------------------


def _one(s, name):
    return np.asarray(s[name])[0, :, 0]


def checks(result: RunResult) -> list[Check]:
    """Branch points at the thresholds, the pitchfork's side and β*, the spectrum against the time-dependent solver,
    the particles' loop between the threshold and the fold."""
    c, s = result.config, result.stats
    betas = np.asarray(c.beta, dtype=float)
    ks = sorted(int(k) for k in c.branches)
    bpoint = _one(s, "branch_point")
    want = np.array([[float(branch_threshold(b, k, c.model)) for k in ks] for b in betas])
    gap = float(np.nanmax(np.abs(bpoint[:, 1:] - want))) if np.all(np.isfinite(bpoint[:, 1:])) else float("inf")
    out = [
        Check(
            f"branch points of the modes k = {ks} on the uniform density at σ_k² = 2 rate_k/k² (growth_rates)",
            "|σ − σ_k| ≤ 1e-8 for every β and k",
            f"{gap:.1e}",
            bool(gap <= 1e-8),
        )
    ]
    pitch, fsig = _one(s, "pitchfork"), _one(s, "fold_sigma")
    sigma1 = want[:, ks.index(1)] if 1 in ks else None
    for b, beta in enumerate(betas):
        sub = beta > critical_beta(2)
        kind = "subcritical (a fold beyond σ_#)" if sub else "supercritical (no fold, ordered below σ_#)"
        if c.model != "usa":
            out.append(
                Check.not_applicable(
                    f"β = {beta:g}: mode 1 {kind}",
                    "β* of USA's [GLPR] clock",
                    f"model {c.model!r}: β* is stated for 'usa'",
                )
            )
            continue
        ok = (pitch[b, 0] < 0) == sub
        if sigma1 is not None:
            ok = ok and ((np.isfinite(fsig[b, 1]) and fsig[b, 1] > sigma1[b]) if sub else not np.isfinite(fsig[b, 1]))
        out.append(
            Check(
                f"[MR] β = {beta:g} {'>' if sub else '≤'} β* = {critical_beta(2):.4f}: mode 1 {kind}",
                "dK/dc_1² " + ("< 0" if sub else "> 0"),
                f"{pitch[b, 0]:+.3e}"
                + (f", σ_fold/σ_# = {fsig[b, 1] / sigma1[b]:.4f}" if sub and sigma1 is not None else ""),
                bool(ok),
            )
        )
    ratio = bessel_ratio(betas, 2)  # I_2(β)/I_1(β)
    closed = (1.0 / critical_noise(betas, 2, c.model) ** 2) * (1 - 2 * ratio) / (2 * (1 - ratio))
    err = float(np.max(np.abs(pitch[:, 0] / closed - 1)))
    out.append(
        Check(
            "mode 1's curvature dK/dc_1² vs the closed form K_#(1 − 2ρ)/(2(1 − ρ)), ρ = I_2(β)/I_1(β)",
            "relative difference ≤ 1e-6",
            f"{err:.1e}",
            bool(err <= 1e-6),
        )
    )
    root = pitch[0, 1]
    if np.isfinite(root):
        out.append(
            Check(
                "[MR] the pitchfork's curvature changes sign at β* = root of I_2/I_1 = 1/2 (critical_beta)",
                "|β_root − β*| ≤ 1e-6",
                f"{abs(root - critical_beta(2)):.1e}",
                bool(abs(root - critical_beta(2)) <= 1e-6),
            )
        )
    else:
        out.append(
            Check.not_applicable(
                "[MR] the pitchfork's curvature changes sign at β*",
                "a root between the β",
                "needs model 'usa' and β on both sides of β*",
            )
        )
    lam, rate = _one(s, "rate_predicted")[:, 0], _one(s, "rate_measured")[:, 0]
    err = float(np.nanmax(np.abs(rate / lam - 1))) if np.any(np.isfinite(lam)) else float("nan")
    out.append(
        Check(
            "mode-1 stationary state: leading eigenvalue vs the rate of meanfield_circle from it",
            f"relative difference ≤ {RATE_TOL:g}",
            f"{err:.1e} (λ = {', '.join(f'{v:.4g}' for v in lam)})",
            bool(err <= RATE_TOL),
        )
    )
    out.extend(_beta_star_checks(result))
    ratios = np.asarray(c.noise_ratios, dtype=float)
    for b, beta in enumerate(betas):
        if beta <= critical_beta(2) or sigma1 is None:
            continue
        label = f"[MR] β = {beta:g}, n = ∞: the time-dependent density swept up stays ordered until the fold"
        mean_field = s["meanfield_order"][0, b, 0]
        fold = fsig[b, 1] / sigma1[b]
        if not np.all(np.isnan(mean_field)):  # meanfield_time > 0
            up = nt.crossing(ratios, mean_field[1], 0.5 * (np.nanmax(mean_field) + np.nanmin(mean_field)))
            j = int(np.clip(np.searchsorted(ratios, fold), 1, ratios.size - 1))
            spacing = float(ratios[j] - ratios[j - 1])
            out.append(
                Check(
                    label,
                    f"|σ_up − σ_fold| ≤ the levels' spacing there ({spacing:g} σ_#)",
                    f"σ_up = {up:.4f} σ_#, σ_fold = {fold:.4f} σ_#",
                    bool(abs(up - fold) <= spacing),
                )
            )
        cross = nt.sweep_crossings(ratios, s["order"][0, b])[:, -1]  # in σ/σ_#, the seeds' mean
        ok = bool(cross[0] >= 1.0 - LOOP_TOL and cross[1] <= fold * (1.0 + LOOP_TOL) and cross[1] > cross[0])
        out.append(
            Check(
                f"[MR] β = {beta:g}: the particles' hysteresis loop lies between σ_# and the fold σ_fold",
                f"σ_# (1 − {LOOP_TOL:g}) ≤ σ_down < σ_up ≤ σ_fold (1 + {LOOP_TOL:g}), σ_fold = {fold:.4f} σ_#",
                f"σ_down = {cross[0]:.4f} σ_#, σ_up = {cross[1]:.4f} σ_#",
                ok,
            )
        )
    out.extend(_sphere_checks(result))
    return out


def spacing_at(ratios: np.ndarray, value: float) -> float:
    """The spacing of the increasing levels ``ratios`` around ``value``: of the interval holding it, the larger of
    the two beside it where it is a level (the nearest end's interval beyond them)."""
    sides = [np.searchsorted(ratios, value, side) for side in ("left", "right")]
    return max(float(ratios[j] - ratios[j - 1]) for j in np.clip(sides, 1, ratios.size - 1))


def loop_bounds(ratios: np.ndarray, order: np.ndarray, fold: float) -> dict:
    """The particles' hysteresis loop (``order`` (seeds, sweep, level) over the levels σ/σ_# ``ratios``) against
    [σ_#, σ_fold] (``fold`` = σ_fold/σ_#): the seeds' mean crossings, each sweep's standard error over the seeds
    (0 for one seed), the tolerances 3 standard errors + the levels' spacing at the bound, and whether
    σ_# − tol_down ≤ σ_down, σ_up ≤ σ_fold + tol_up and the width σ_up − σ_down exceeds 3 × its standard error."""
    cross = nt.sweep_crossings(ratios, order)
    seeds = order.shape[0]
    se = np.array([np.nanstd(cross[s, :-1], ddof=1) for s in range(2)]) / np.sqrt(seeds) if seeds > 1 else np.zeros(2)
    down, up = float(cross[0, -1]), float(cross[1, -1])
    tol_down = 3.0 * se[0] + spacing_at(ratios, 1.0)
    tol_up = 3.0 * se[1] + spacing_at(ratios, fold)
    width_se = float(np.hypot(*se))
    ok = bool(
        np.isfinite(fold)
        and down >= 1.0 - tol_down
        and up <= fold + tol_up
        and up - down > 3.0 * width_se
        and up > down
    )
    return dict(down=down, up=up, se=se, tol_down=tol_down, tol_up=tol_up, width_se=width_se, ok=ok)


def _sphere_checks(result: RunResult) -> list[Check]:
    """On each sphere of ``sphere_dims`` at ``sphere_beta``: the particles' loop between σ_# and the zonal fold."""
    c, s = result.config, result.stats
    if not (c.sphere_beta > 0 and c.sphere_dims) or "sphere_order" not in s:
        return []
    ratios = np.asarray(c.noise_ratios, dtype=float)
    out = []
    for i, d in enumerate(sphere_dims(c)):
        order = np.asarray(s["sphere_order"])[0, 0, :, i]
        fold = float(np.asarray(s["sphere_fold"])[0, 0, 0, i, 0])
        label = (
            f"[MR] S^{d - 1}, β = {c.sphere_beta:g} > β_*^({d}) = {critical_beta(d):.4f}: the particles' hysteresis "
            "loop lies between σ_# and the zonal branch's fold σ_fold"
        )
        if not np.isfinite(fold):
            out.append(
                Check(
                    label,
                    "a fold on the continued degree-1 branch",
                    "none: the branch ended before one (raise modes, or lower sphere_beta)",
                    False,
                )
            )
            continue
        b = loop_bounds(ratios, order, fold)
        out.append(
            Check(
                label,
                f"σ_# − tol ≤ σ_down < σ_up ≤ σ_fold + tol (tol: 3 standard errors of the {c.seeds} seeds' crossings "
                f"+ the levels' spacing), σ_fold = {fold:.4f} σ_#",
                f"σ_down = {b['down']:.4f} σ_# (tol {b['tol_down']:.3f}), σ_up = {b['up']:.4f} σ_# "
                f"(tol {b['tol_up']:.3f}), width {b['up'] - b['down']:.3f} ± {b['width_se']:.3f}",
                b["ok"],
            )
        )
    return out


def _beta_star_checks(result: RunResult) -> list[Check]:
    c = result.config
    dims = beta_star_dims(c)
    stars = np.asarray(result.stats["beta_star"])[0, 0, 0]
    out = []
    for d, (root, closed, fold) in zip(dims, stars):
        where = "the circle" if d == 2 else f"S^{d - 1} (zonal densities)"
        out.append(
            Check(
                f"[MR] β_*^({d}) on {where}: the pitchfork coefficient's sign change vs the root of "
                f"I_{{d/2+1}}/I_{{d/2}} = 1/d",
                f"|Δβ| ≤ {BETA_STAR_TOL:g}",
                f"{root:.10f} vs {closed:.10f} ({abs(root - closed):.1e})",
                bool(abs(root - closed) <= BETA_STAR_TOL),
            )
        )
        out.append(
            Check(
                f"[MR] β_*^({d}): the continued branches' folds at β_* + {list(FOLD_OFFSETS)} extrapolated to the "
                "branch point",
                f"|Δβ| ≤ {BETA_STAR_TOL:g}",
                f"{fold:.10f} ({abs(fold - closed):.1e})",
                bool(abs(fold - closed) <= BETA_STAR_TOL),
            )
        )
    return out


def _summary(result: RunResult) -> dict:
    """``beta_star`` keyed by d: the sign change of the pitchfork coefficient of the stationary densities; beside
    it the closed form and the folds' extrapolation, keyed the same way."""
    c = result.config
    dims = beta_star_dims(c)
    stars = np.asarray(result.stats["beta_star"])[0, 0, 0]
    return {
        "beta_star": {str(d): float(v[0]) for d, v in zip(dims, stars)},
        "beta_star_closed_form": {str(d): float(v[1]) for d, v in zip(dims, stars)},
        "beta_star_fold": {str(d): float(v[2]) for d, v in zip(dims, stars)},
    }


def figures(result: RunResult) -> dict:
    """The bifurcation diagram, one panel per β, with the particles' sweeps."""
    c, s = result.config, result.stats
    betas = np.asarray(c.beta, dtype=float)
    ks = sorted(int(k) for k in c.branches)
    sigma, amp, stable = _one(s, "branch_sigma"), _one(s, "branch_amplitude"), _one(s, "branch_stable")
    fsig, famp = _one(s, "fold_sigma"), _one(s, "fold_amplitude")
    ratios = np.asarray(c.noise_ratios, dtype=float)
    panels = []
    for b, beta in enumerate(betas):
        s1 = float(branch_threshold(beta, 1, c.model))
        branches = []
        for i, label in enumerate(["uniform density"] + [f"mode k = {k}" for k in ks]):
            folds = [(1.0 / fsig[b, i] ** 2, famp[b, i])] if np.isfinite(fsig[b, i]) else []
            branches.append(
                dict(K=1.0 / sigma[b, i] ** 2, amplitude=amp[b, i], stable=stable[b, i], label=label, folds=folds)
            )
        kmax = float(branch_threshold(beta, ks[-1], c.model))
        panels.append(
            dict(
                beta=float(beta),
                beta_star=critical_beta(2),
                coupling=1.0 / s1**2,
                branches=branches,
                order=s["order"][0, b],
                ratios=ratios,
                n=c.n,
                meanfield=None if np.all(np.isnan(s["meanfield_order"][0, b, 0])) else s["meanfield_order"][0, b, 0],
                xlim=(0.5, 1.4 * (s1 / kmax) ** 2),
            )
        )
    out = {"bifurcation": lambda p: draw.bifurcation_diagram(panels, model=c.model, path=p)}
    if "sphere_order" in s:
        out["bifurcation_spheres"] = lambda p: draw.bifurcation_diagram(
            _sphere_panels(result),
            model=c.model,
            path=p,
            title="Zonal stationary densities of the noisy mean field on the spheres",
            ylabel=r"order parameter $m_1 = \|\int x\,\rho\|$  (particles: $r$)",
            threshold="degree 1's threshold",
        )
    return out


def _sphere_panels(result: RunResult) -> list[dict]:
    """One panel per sphere at ``sphere_beta``: the uniform density (stable below K_#), the degree-1 zonal branch
    with its fold, and the particles' sweeps."""
    c, s = result.config, result.stats
    ratios = np.asarray(c.noise_ratios, dtype=float)
    sigma, order = np.asarray(s["sphere_branch_sigma"])[0, 0, 0], np.asarray(s["sphere_branch_order"])[0, 0, 0]
    stable, fold = np.asarray(s["sphere_branch_stable"])[0, 0, 0], np.asarray(s["sphere_fold"])[0, 0, 0]
    beta, panels = float(c.sphere_beta), []
    for i, d in enumerate(sphere_dims(c)):
        s1 = float(sphere_branch_threshold(beta, d, 1, c.model))
        xlim = (0.9 / ratios.max() ** 2, 1.1 / ratios.min() ** 2)
        K = np.geomspace(*xlim, 200) / s1**2
        folds = [(1.0 / (fold[i, 0] * s1) ** 2, fold[i, 1])] if np.isfinite(fold[i, 0]) else []
        panels.append(
            dict(
                name=f"$S^{d - 1}$",
                beta=beta,
                beta_star=critical_beta(d),
                coupling=1.0 / s1**2,
                branches=[
                    dict(K=K, amplitude=np.zeros_like(K), stable=K * s1**2 < 1.0, label="uniform density"),
                    dict(K=1.0 / sigma[i] ** 2, amplitude=order[i], stable=stable[i], label="degree 1", folds=folds),
                ],
                order=np.asarray(s["sphere_order"])[0, 0, :, i],
                ratios=ratios,
                n=c.n,
                meanfield=None,
                xlim=xlim,
                xticks=[t for t in (0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.4, 1.6, 2.0) if xlim[0] <= t <= xlim[1]],
            )
        )
    return panels


SWEEP_DEFAULTS = ("n", "seeds", "noise_ratios", "t1", "dt", "n_save", "burn_in", "solver", "dtype", "meanfield_time")

EXPERIMENT = register(
    Experiment(
        "bifurcation",
        "noisy mean field on the circle: branches of stationary densities from the uniform one, through their folds, "
        "with the particles' hysteresis; β_* and the hysteresis on S² and S³",
        "arXiv 2606.05140, 2604.16288, 2510.20094",
        dict(
            experiment="bifurcation",
            model="usa",
            d=[2],
            beta=[1.0, 8.0],
            modes=64,
            branches=[1, 2, 3],
            sphere_dims=[3, 4],
            # the particles' and the time-dependent density's sweeps: noisy-transition's own
            **{key: nt.EXPERIMENT.defaults[key] for key in SWEEP_DEFAULTS},
        ),
        dict(
            modes=48,
            n=128,
            seeds=4,
            noise_ratios=[0.8, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3],
            t1=10.0,
            meanfield_time=0.0,
        ),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("branches", "sphere_dims", "sphere_beta") + PARTICLE_KEYS,
        memory=memory,
        requires=requires,
        summary=_summary,
        headline=lambda c: (
            f"{c.model.upper()} + noise on the circle, β = {list(c.beta)}: branches of modes "
            f"{list(c.branches)} ({c.modes} Fourier modes), particles n = {c.n}, {c.seeds} seeds, "
            f"σ/σ_# ∈ {list(c.noise_ratios)} down and up"
            + (
                f"; on S^{{d−1}}, d = {sphere_dims(c)}, at β = {c.sphere_beta:g} too"
                if c.sphere_beta > 0 and c.sphere_dims
                else ""
            )
        ),
        runtime=(
            "7.6 min of CPU on 2 shared CPU cores, 17 min of wall time beside other runs (mostly the sweeps: n = 512 "
            "particles on the circle, S² and S³ and the mean field, both ways; β_* of d = 2, 3, 4 about a minute)"
        ),
    )
)
