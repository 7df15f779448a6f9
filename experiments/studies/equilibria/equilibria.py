"""``equilibria``: rest points of SA and USA, how unstable each is, and where that changes (docs/model.md §13).

Four parts, every rest point found by ``equilibrium`` (Newton on the product of spheres) and every index read
off its tangent Jacobian with the rotations' zero modes taken out:

* regular configurations (``particles/polytopes.py``: the simplex of d + 1 tokens, the triangle in R^d, the
  cross-polytope of d antipodal pairs, the hypercube for d = 3, 4, the pentagon and hexagon on the circle) at
  every β and d of the configuration: their index, zero modes and Morse index, and the simplex's whole spectrum
  against its closed form;
* continuation in β (``continuation``) of the triangle (n = 3, d = 2) and of the tetrahedron (n = 4, d = 3)
  across the configuration's β range: the branch points where their eigenvalues cross zero, against the
  closed forms β_3 = −2/3 (``synchronization.NO_SYNC_BETA``, the triangle's μ(β)) and β_4 = −3/2, and β = 0 where
  μ_2 = 2βe^{−β/(n−1)}/(n − 1) crosses;
* the energy staircase of n tokens on the circle (arXiv 2410.06833) at β = ``saddle_beta`` (USA, rescaled time,
  started from angles whose gaps merge one after the other): every plateau of its normalized energy located at
  the saddle of the energy with the plateau's cluster sizes (k clusters balanced around the circle), whose
  Morse index is k − 1 (the clusters' relative positions, the only directions that raise the energy);
* the four-token energy extremizers of arXiv 2501.03096 (``experiments/studies/equilibria/equilibria_theory.py``) for D = diag(1, τ),
  τ in ``extremizer_tau`` (both signs: definite and indefinite D), against the authors' package, and the
  two-token states of their Figure 7 for D = diag(−1, τ).

Statistics (dimensions (d, beta, seed, ...); the parts that do not depend on (d, β) are repeated along them):
``polytope_index``, ``polytope_zero_modes``, ``polytope_neutral``, ``polytope_morse`` and ``closed_form_error``
on (…, polytope); the continuation paths ``path_beta`` (…, path, point), ``path_eigen`` (…, path, point, eigen),
``path_branch_beta`` and ``path_branch_multiplicity`` (…, path, crossing); the saddles ``saddle_energy``,
``saddle_level``, ``saddle_index``, ``saddle_clusters`` (…, partition), the staircase's ``plateau_energy``,
``plateau_saddle`` (…, plateau), ``staircase_energy`` (…, step) at ``staircase_time``; the extremizers
``extremizer_energy``, ``extremizer_index`` (…, tau, candidate) and ``extremizer_ratio`` (…, tau); the two-token
states' ``pair_energy`` (…, pair_tau, pair_state) at the authors' τ.
"""

from __future__ import annotations

import itertools
import math
import time

import jax.numpy as jnp
import numpy as np

from ....particles import observables
from ....particles.circle import from_angles
from ....particles.energy import normalized_energy
from ....particles.fields import USA, make
from ....particles.polytopes import (
    cross_polytope,
    hypercube,
    regular_polygon,
    simplex,
    simplex_spectrum,
    simplex_threshold,
)
from ....particles.synchronization import NO_SYNC_BETA, triangle_rate
from ....solvers import simulate
from ....solvers.continuation import Branch, continuation
from ....solvers.equilibrium import equilibrium
from ....solvers.rest_points import RestPoints
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .equilibria_theory import (
    AUTHORS_PAIRS,
    AUTHORS_RATIO,
    CANDIDATES,
    candidate,
    kernel_energy,
    rectangle_ratio,
)

draw = LazyModule(f"{__package__}.equilibria_figures")  # this study's figures, imported on first use

POLYTOPES = ("simplex", "triangle", "cross-polytope", "hypercube", "pentagon", "hexagon")
"""The regular configurations, by name; NaN where one does not exist in a d (or is another one there)."""
PATHS = (("triangle", 3, 2), ("tetrahedron", 4, 3))
"""The continuation paths in β: (name, n, d) of a simplex spanning R^d."""
CLOSED_FORM_TOL = 1e-10
SADDLE_TOL = 0.01
"""|plateau energy − saddle energy| allowed (the staircase experiment's tolerance on Σm²/n²)."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    polytope_index=_DIMS + ["polytope"],
    polytope_zero_modes=_DIMS + ["polytope"],
    polytope_neutral=_DIMS + ["polytope"],
    polytope_morse=_DIMS + ["polytope"],
    closed_form_error=_DIMS + ["polytope"],
    path_beta=_DIMS + ["path", "point"],
    path_eigen=_DIMS + ["path", "point", "eigen"],
    path_branch_beta=_DIMS + ["path", "crossing"],
    path_branch_multiplicity=_DIMS + ["path", "crossing"],
    saddle_energy=_DIMS + ["partition"],
    saddle_level=_DIMS + ["partition"],
    saddle_index=_DIMS + ["partition"],
    saddle_clusters=_DIMS + ["partition"],
    saddle_neutral=_DIMS + ["partition"],
    plateau_energy=_DIMS + ["plateau"],
    plateau_saddle=_DIMS + ["plateau"],
    staircase_energy=_DIMS + ["step"],
    staircase_time=_DIMS + ["step"],
    extremizer_energy=_DIMS + ["tau", "candidate"],
    extremizer_index=_DIMS + ["tau", "candidate"],
    extremizer_ratio=_DIMS + ["tau"],
    pair_energy=_DIMS + ["pair_tau", "pair_state"],
)


# -- the configurations --------------------------------------------------------------------------------------


def polytope(name: str, d: int) -> np.ndarray | None:
    """The configuration ``name`` in R^d, or None where it does not exist or is another entry of POLYTOPES."""
    if name == "simplex":
        return simplex(d + 1, d)
    if name == "triangle":
        return simplex(3, d) if d >= 3 else None
    if name == "cross-polytope":
        return cross_polytope(d)
    if name == "hypercube":
        return hypercube(d) if 3 <= d <= 4 else None
    n = {"pentagon": 5, "hexagon": 6}[name]
    return regular_polygon(n) if d == 2 else None


def zero_modes(x: np.ndarray) -> int:
    """d(d − 1)/2 − (d − r)(d − r − 1)/2 for tokens spanning r dimensions of R^d: the rotations that move them."""
    d = x.shape[1]
    r = int(np.linalg.matrix_rank(x, tol=1e-9))
    return d * (d - 1) // 2 - (d - r) * (d - r - 1) // 2


def closed_form(beta: float, n: int, d: int, model: str) -> np.ndarray:
    """The simplex's eigenvalues, largest first, from ``simplex_spectrum``."""
    values, mult = simplex_spectrum(beta, n, d, model)
    return np.sort(np.repeat(values, mult))[::-1]


def partitions(n: int) -> list[tuple[int, ...]]:
    """The partitions of n, largest part first, fewest parts first."""
    out = set()
    for k in range(1, n + 1):
        for combo in itertools.combinations_with_replacement(range(1, n + 1), k):
            if sum(combo) == n:
                out.add(tuple(sorted(combo, reverse=True)))
    return sorted(out, key=lambda p: (len(p), [-m for m in p]))


def staircase_angles(n: int, beta: float) -> np.ndarray:
    """Start angles whose successive gaps g_j have β(1 − cos g_j) = 2 + 2.5 j: pairs that merge one after another,
    each about e^{2.5} times later than the last (USA, rescaled time)."""
    levels = (2.0 + 2.5 * np.arange(n - 1)) / beta
    gaps = np.arccos(1.0 - np.minimum(levels, 1.9))
    return np.concatenate([[0.0], np.cumsum(gaps)])


# -- the parts ------------------------------------------------------------------------------------------------


def _polytopes(config) -> dict:
    D, B, P = len(config.d), len(config.beta), len(POLYTOPES)
    out = {
        k: np.full((D, B, P), np.nan)
        for k in ("polytope_index", "polytope_zero_modes", "polytope_neutral", "polytope_morse", "closed_form_error")
    }
    for a, d in enumerate(config.d):
        for b, beta in enumerate(config.beta):
            field = make(config.model, float(beta))
            for p, name in enumerate(POLYTOPES):
                x = polytope(name, int(d))
                if x is None:
                    continue
                r = equilibrium(field, x)
                out["polytope_index"][a, b, p] = r.unstable
                out["polytope_zero_modes"][a, b, p] = r.zero_modes
                out["polytope_neutral"][a, b, p] = r.neutral
                out["polytope_morse"][a, b, p] = np.nan if r.morse_index is None else r.morse_index
                if name in ("simplex", "triangle"):
                    exact = closed_form(float(beta), x.shape[0], int(d), config.model)
                    found = np.sort(r.eigenvalues.real)[::-1]
                    scale = max(float(np.max(np.abs(exact))), 1e-300)
                    out["closed_form_error"][a, b, p] = float(np.max(np.abs(found - exact))) / scale
    return out


def _paths(config) -> dict:
    betas = np.asarray(config.beta, dtype=float)
    lo, hi = float(betas.min()), float(betas.max())
    results: list[Branch | None] = []
    for _, n, d in PATHS:
        x = simplex(n, d)
        if hi <= lo:
            results.append(None)
            continue
        system = RestPoints(lambda b: make(config.model, b), x, hi)
        span = hi - lo
        results.append(
            continuation(
                system,
                x,
                hi,
                p_range=(lo - 1e-9 * span, hi + 1e-9 * span),
                direction=-1,
                ds=span / 40,
                ds_max=span / 20,
                max_points=400,
            )
        )
    points = max((len(br.p) for br in results if br is not None), default=1)
    eigen = max(n * (d - 1) for _, n, d in PATHS)
    path_beta = np.full((len(PATHS), points), np.nan)
    path_eigen = np.full((len(PATHS), points, eigen), np.nan)
    crossing = np.full((len(PATHS), 4), np.nan)
    mult = np.full((len(PATHS), 4), np.nan)
    for i, br in enumerate(results):
        if br is None:
            continue
        path_beta[i, : len(br.p)] = br.p
        for j, values in enumerate(br.eigenvalues):
            path_eigen[i, j, : values.size] = np.sort(values.real)[::-1]
        for j, bp in enumerate(br.branch_points[:4]):
            crossing[i, j], mult[i, j] = bp.p, bp.multiplicity
    return dict(path_beta=path_beta, path_eigen=path_eigen, path_branch_beta=crossing, path_branch_multiplicity=mult)


def _saddles(config) -> dict:
    n, beta = int(config.n), float(config.saddle_beta)
    parts = partitions(n)
    energy, level, index, neutral, clusters = (np.full(len(parts), np.nan) for _ in range(5))
    field = make(config.model, beta)  # the same rest points and indices in every clock and for SA (Sylvester)
    for i, part in enumerate(parts):
        angles = np.repeat(2 * np.pi * np.arange(len(part)) / len(part), part)
        r = equilibrium(field, np.asarray(from_angles(jnp.asarray(angles)[:, None])))
        energy[i] = float(normalized_energy(jnp.asarray(r.x), beta))
        level[i] = sum(m * m for m in part) / n**2
        index[i], neutral[i], clusters[i] = r.unstable, r.neutral, len(part)
    # the staircase: n tokens whose gaps merge in turn, in rescaled time, the plateaus of the cluster count
    ts = np.logspace(-2, 8, int(config.n_save))
    x0 = from_angles(jnp.asarray(staircase_angles(n, beta))[:, None])
    sol = simulate(USA(beta, time="rescaled"), x0, float(ts[-1]), ts=ts, solver="kvaerno5", rtol=1e-10, atol=1e-12)
    xs = np.asarray(sol.xs)
    stair = np.asarray(normalized_energy(jnp.asarray(xs), beta))
    counts = np.asarray(observables.n_clusters(jnp.asarray(xs), config.delta))
    plateau_energy, plateau_saddle = [], []
    for a, b, k in observables.plateaus(np.log(ts), counts, min_duration=1.0):
        if k >= n:
            continue  # the start itself, single tokens still interacting
        inside = (np.log(ts) >= a) & (np.log(ts) <= b)
        mid = xs[np.nonzero(inside)[0][np.count_nonzero(inside) // 2]]
        sizes = np.bincount(np.asarray(observables.cluster_labels(jnp.asarray(mid), config.delta)))
        part = tuple(int(m) for m in sorted(sizes[sizes > 0], reverse=True))
        plateau_energy.append(float(np.median(stair[inside])))
        plateau_saddle.append(parts.index(part) if part in parts else np.nan)
    pad = [np.nan] * (n - len(plateau_energy))
    return dict(
        saddle_energy=energy,
        saddle_level=level,
        saddle_index=index,
        saddle_neutral=neutral,
        saddle_clusters=clusters,
        plateau_energy=np.asarray(plateau_energy + pad),
        plateau_saddle=np.asarray(plateau_saddle + pad, dtype=float),
        staircase_energy=stair,
        staircase_time=ts,
    )


def _extremizers(config) -> dict:
    taus = np.asarray(config.extremizer_tau, dtype=float)
    energy = np.full((taus.size, len(CANDIDATES)), np.nan)
    index = np.full_like(energy, np.nan)
    ratio = np.full(taus.size, np.nan)
    for i, tau in enumerate(taus):
        D = jnp.diag(jnp.asarray([1.0, tau]))
        field = USA(1.0, K=D, V=-D)  # lowers E_D
        for j, name in enumerate(CANDIDATES):
            r = equilibrium(field, candidate(name, float(tau)), strict=False)
            if not r.converged:
                continue
            energy[i, j], index[i, j] = kernel_energy(r.x, D), r.morse_index
            if name == "rectangle":
                ratio[i] = rectangle_ratio(r.x, float(tau))
    pair_tau = np.asarray([row[0] for row in AUTHORS_PAIRS])
    e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    states = (np.stack([e2, e2]), np.stack([e1, -e1]), np.stack([e2, -e2]))
    pair_energy = np.array([[kernel_energy(x, np.diag([-1.0, tau])) for x in states] for tau in pair_tau])
    return dict(extremizer_energy=energy, extremizer_index=index, extremizer_ratio=ratio, pair_energy=pair_energy)


def run(config, *, progress=None) -> RunResult:
    """Every part of the module docstring, in float64."""
    start = time.perf_counter()
    D, B = len(config.d), len(config.beta)
    stats = _polytopes(config)
    for part in (_paths(config), _saddles(config), _extremizers(config)):
        stats.update(
            {k: np.broadcast_to(np.asarray(v, dtype=float), (D, B) + np.shape(v)).copy() for k, v in part.items()}
        )
    stats = {k: v[:, :, None] for k, v in stats.items()}
    steps = np.zeros((D, B, 1), dtype=np.int64)
    return RunResult(
        config=config,
        ts=np.zeros(1),
        stats=stats,
        xs=None,
        steps=steps,
        t_event=np.full(steps.shape, np.inf),
        wall_time_s=time.perf_counter() - start,
    )


# -- refusals, memory, checks, figures --------------------------------------------------------------------------


def requires(config) -> None:
    """SA or USA (β ≥ 0 in the rescaled time), 2 ≤ d ≤ 8, 3 ≤ n ≤ 8 tokens for the saddles, τ ≠ 0."""
    if config.model not in ("sa", "usa", "usa-rescaled"):
        raise ConfigError(
            f"equilibria studies SA and USA: model must be 'sa', 'usa' or 'usa-rescaled', got {config.model!r}"
        )
    if config.model == "usa-rescaled" and min(config.beta) < 0:
        raise ConfigError("model 'usa-rescaled' takes β ≥ 0 (its time e^β t); use model 'usa' for β < 0")
    if any(not 2 <= d <= 8 for d in config.d):
        raise ConfigError(f"equilibria draws its configurations for 2 ≤ d ≤ 8, got d = {list(config.d)}")
    if not 3 <= config.n <= 8:
        raise ConfigError(f"equilibria's saddles and staircase take 3 ≤ n ≤ 8 tokens, got n = {config.n}")
    if any(t == 0 or not math.isfinite(t) for t in config.extremizer_tau):
        raise ConfigError(f"extremizer_tau must hold finite nonzero values, got {list(config.extremizer_tau)}")


def memory(config) -> dict:
    """The largest Jacobian (the hypercube in the largest d) and the staircase's states."""
    d = max(config.d)
    N = max(2**d if d <= 4 else 0, 2 * d, d + 1) * (d - 1)
    return {
        "the rest points' Jacobians [d]": 8 * 12 * N * N,
        "the staircase's states [n, n_save]": 8 * 4 * config.n * 2 * config.n_save,
    }


def _member(stats, name):
    return np.asarray(stats[name])[0, 0, 0]


def sylvester(morse, index) -> Check:
    """Sylvester's law at the regular configurations: the Morse index of −E_β, counted from the energy's Hessian
    (``Equilibrium.morse_index``; NaN where there is no energy), equals the number of unstable eigenvalues of the
    velocity's Jacobian (``Equilibrium.unstable``), since J = W⁻¹ Hess E_β. Two independent counts: a wrong sign
    or scale of the Hessian, or a Jacobian that is not the flow's, makes them differ."""
    morse, index = np.asarray(morse, dtype=float), np.asarray(index, dtype=float)
    known = np.isfinite(morse)
    return Check(
        "Morse index of −E_β (from Hess E_β) = number of unstable eigenvalues (from J; Sylvester: J = W⁻¹ Hess E_β)",
        "equal wherever β ≠ 0",
        f"{int(np.sum(morse[known] != index[known]))} mismatches of {int(known.sum())}",
        bool(np.all(morse[known] == index[known])),
    )


def checks(result: RunResult) -> list[Check]:
    """The closed forms, the zero modes, Sylvester, the thresholds, the saddles and the extremizers (docstring)."""
    c, s = result.config, result.stats
    out = []
    err = float(np.nanmax(s["closed_form_error"])) if np.any(np.isfinite(s["closed_form_error"])) else float("nan")
    out.append(
        Check(
            "simplex spectrum (n = d + 1 and the triangle in R^d) vs the closed form μ_1, μ_2, μ_3, 0",
            f"max relative error ≤ {CLOSED_FORM_TOL:g}",
            f"{err:.1e}",
            bool(err <= CLOSED_FORM_TOL),
        )
    )
    wrong = 0
    for a, d in enumerate(c.d):
        for p, name in enumerate(POLYTOPES):
            x = polytope(name, int(d))
            if x is not None:
                wrong += int(np.sum(s["polytope_zero_modes"][a, :, 0, p] != zero_modes(x)))
    out.append(
        Check(
            "zero modes = d(d−1)/2 − (d−r)(d−r−1)/2 from the rotations' generators",
            "every configuration",
            f"{wrong} mismatches",
            wrong == 0,
        )
    )
    out.append(sylvester(s["polytope_morse"], s["polytope_index"]))
    if 2 in c.d:
        a = list(c.d).index(2)
        rate = triangle_rate(np.asarray(c.beta), "sa" if c.model == "sa" else "usa")
        away = np.abs(np.asarray(c.beta) - NO_SYNC_BETA) > 1e-9
        expected = np.where(rate > 0, 2, 0)
        got = s["polytope_index"][a, :, 0, POLYTOPES.index("simplex")]
        out.append(
            Check(
                "triangle's index vs the sign of μ(β) = e^{−β/2}(1/2 + 3β/4) (synchronization.triangle_rate)",
                "2 where μ > 0, 0 where μ < 0",
                f"{int(np.sum(got[away] != expected[away]))} mismatches",
                bool(np.all(got[away] == expected[away])),
            )
        )
    bad = 0
    for a, d in enumerate(c.d):
        threshold = simplex_threshold(int(d) + 1)
        got = s["polytope_index"][a, :, 0, POLYTOPES.index("simplex")]
        away = np.abs(np.asarray(c.beta) - threshold) > 1e-9
        bad += int(np.sum((got[away] == 0) != (np.asarray(c.beta)[away] < threshold)))
    out.append(
        Check(
            "the simplex spanning R^d is stable exactly for β < −(n−1)(n−2)/n (n = d + 1)",
            "index 0 iff β below the threshold, every d",
            f"{bad} mismatches",
            bad == 0,
        )
    )
    out += _path_checks(c, s) + _saddle_checks(c, s) + _extremizer_checks(c, s)
    return out


def _path_checks(c, s) -> list[Check]:
    out = []
    lo, hi = min(c.beta), max(c.beta)
    crossing, mult = _member(s, "path_branch_beta"), _member(s, "path_branch_multiplicity")
    expect = {0: [(NO_SYNC_BETA, 2)], 1: [(simplex_threshold(4), 3), (0.0, 2)]}
    for i, (name, n, d) in enumerate(PATHS):
        for where, m in expect[i]:
            label = f"continuation of the {name} (n = {n}, d = {d}) in β: branch point at β = {where:.6g}"
            if not lo < where < hi:
                out.append(Check.not_applicable(label, "a crossing of multiplicity m", "β range does not cross it"))
                continue
            hits = np.isfinite(crossing[i]) & (np.abs(crossing[i] - where) < 1e-3)
            found = crossing[i][hits]
            gap = float(np.min(np.abs(found - where))) if found.size else float("inf")
            ok = bool(found.size and gap <= 1e-8 and mult[i][hits][0] == m)
            out.append(
                Check(
                    label,
                    f"|β − {where:.6g}| ≤ 1e-8, multiplicity {m}",
                    f"{gap:.1e}, multiplicity {int(mult[i][hits][0]) if found.size else 0}",
                    ok,
                )
            )
    return out


def _saddle_checks(c, s) -> list[Check]:
    parts = partitions(c.n)
    index, neutral, k = _member(s, "saddle_index"), _member(s, "saddle_neutral"), _member(s, "saddle_clusters")
    out = [
        Check(
            f"n = {c.n} cluster saddles at β = {c.saddle_beta:g}: Morse index k − 1 (the clusters' relative positions)",
            f"every one of the {len(parts)} partitions, no neutral direction",
            f"{int(np.sum((index != k - 1) | (neutral != 0)))} mismatches",
            bool(np.all(index == k - 1) and np.all(neutral == 0)),
        )
    ]
    energy, saddle = _member(s, "plateau_energy"), _member(s, "plateau_saddle")
    found = np.isfinite(energy) & np.isfinite(saddle)
    gaps = [abs(e - _member(s, "saddle_energy")[int(j)]) for e, j in zip(energy[found], saddle[found])]
    worst = max(gaps, default=float("nan"))
    out.append(
        Check(
            f"staircase (n = {c.n}, β = {c.saddle_beta:g}): each plateau at the saddle of its clusters",
            f"≥ 2 plateaus, |E − E_saddle| ≤ {SADDLE_TOL:g}",
            f"{len(gaps)} plateaus, worst {worst:.1e}",
            bool(len(gaps) >= 2 and worst <= SADDLE_TOL),
        )
    )
    return out


def _extremizer_checks(c, s) -> list[Check]:
    out = []
    taus = np.asarray(c.extremizer_tau, dtype=float)
    energy, index = _member(s, "extremizer_energy"), _member(s, "extremizer_index")
    ratio = _member(s, "extremizer_ratio")
    rect, e2 = CANDIDATES.index("rectangle"), CANDIDATES.index("cluster on e2")
    pos, neg = taus > 0, taus < 0
    if pos.any():
        lowest = np.array([np.nanmin(np.where(index[i] == 0, energy[i], np.nan)) for i in np.nonzero(pos)[0]])
        ok = bool(
            np.all(index[pos, rect] == 0)
            and np.allclose(energy[pos, rect], lowest, rtol=1e-12, atol=0)
            and np.all(np.abs(ratio[pos] / taus[pos] - 1) <= 1e-9)
        )
        worst = float(np.max(np.abs(ratio[pos] / taus[pos] - 1)))
        out.append(
            Check(
                "[2501.03096] D = diag(1, τ), τ > 0: the minimizer is the rectangle with tanh(x_1²)/tanh(τx_2²) = τ",
                "Morse index 0, lowest energy, ratio = τ to 1e-9",
                f"ratio error {worst:.1e}",
                bool(ok),
            )
        )
        theirs = AUTHORS_RATIO[5e-4]
        common = [i for i in np.nonzero(pos)[0] if float(taus[i]) in theirs]
        if common:
            dev = max(abs(ratio[i] - theirs[float(taus[i])]) / taus[i] for i in common)
            out.append(
                Check(
                    "[2501.03096] the rectangle's ratio vs the authors' package (flow of step 5e-4)",
                    "relative difference ≤ 1e-3",
                    f"{dev:.1e} at τ = {[float(taus[i]) for i in common]}",
                    bool(dev <= 1e-3),
                )
            )
        pair = CANDIDATES.index("pair on e2")
        stuck = [i for i in np.nonzero(pos)[0] if AUTHORS_RATIO[5e-2].get(float(taus[i])) == 0.0]
        if stuck:
            out.append(
                Check(
                    "[2501.03096] the authors' ratio 0 at τ ≥ 6 (step 5e-2) is the pair on e_2: not a minimizer",
                    "Morse index > 0 there",
                    f"indices {[int(index[i, pair]) for i in stuck]}",
                    bool(all(index[i, pair] > 0 for i in stuck)),
                )
            )
    if neg.any():
        ok = bool(
            np.all(index[neg, rect] > 0)
            and np.all(index[neg, e2] == 0)
            and np.allclose(energy[neg, e2], np.exp(taus[neg]), rtol=1e-12, atol=0)
            and all(energy[i, e2] == np.nanmin(np.where(index[i] == 0, energy[i], np.nan)) for i in np.nonzero(neg)[0])
        )
        out.append(
            Check(
                "[2501.03096] D = diag(1, τ) indefinite (τ < 0): the rectangle is a saddle, the minimizer "
                "one cluster on e_2",
                "rectangle index > 0; cluster index 0, energy e^τ, the lowest",
                f"rectangle indices {index[neg, rect].astype(int).tolist()}",
                bool(ok),
            )
        )
    got = _member(s, "pair_energy")
    want = np.asarray([row[1:] for row in AUTHORS_PAIRS])
    dev = float(np.max(np.abs(got / want - 1)))
    out.append(
        Check(
            "[2501.03096 Fig. 7] two tokens, D = diag(−1, τ): energies of the three states vs the authors' maxid.csv",
            "relative difference ≤ 1e-6 (their float32)",
            f"{dev:.1e}",
            bool(dev <= 1e-6),
        )
    )
    return out


def figures(result: RunResult) -> dict:
    """The indices over β per d, the continuation paths, the saddles under the staircase, the extremizers."""
    c, s = result.config, result.stats
    betas = np.asarray(c.beta, dtype=float)
    paths = []
    for i, (name, n, d) in enumerate(PATHS):
        grid = np.linspace(betas.min(), betas.max(), 300)
        values = np.stack([closed_form_curve(b, n, d, c.model) for b in grid])
        paths.append(
            dict(
                name=name,
                n=n,
                d=d,
                beta=_member(s, "path_beta")[i],
                eigen=_member(s, "path_eigen")[i],
                crossings=_member(s, "path_branch_beta")[i],
                grid=grid,
                theory=values,
                threshold=simplex_threshold(n),
            )
        )
    return {
        "indices": lambda p: draw.rest_point_indices(
            betas,
            list(c.d),
            list(POLYTOPES),
            s["polytope_index"][:, :, 0],
            thresholds=[simplex_threshold(int(d) + 1) for d in c.d],
            model=c.model,
            path=p,
        ),
        "continuation": lambda p: draw.continuation_paths(paths, model=c.model, path=p),
        "staircase_saddles": lambda p: draw.staircase_saddles(
            _member(s, "staircase_time"),
            _member(s, "staircase_energy"),
            partitions(c.n),
            _member(s, "saddle_energy"),
            _member(s, "saddle_index"),
            _member(s, "plateau_energy"),
            _member(s, "plateau_saddle"),
            n=c.n,
            beta=c.saddle_beta,
            path=p,
        ),
        "extremizers": lambda p: draw.extremizer_sweep(
            np.asarray(c.extremizer_tau, dtype=float),
            _member(s, "extremizer_ratio"),
            _member(s, "extremizer_energy"),
            _member(s, "extremizer_index"),
            list(CANDIDATES),
            AUTHORS_RATIO,
            path=p,
        ),
    }


def closed_form_curve(beta: float, n: int, d: int, model: str) -> np.ndarray:
    """μ_1 and μ_2 of ``simplex_spectrum`` at β (the eigenvalues that cross zero along the path)."""
    values, _ = simplex_spectrum(beta, n, d, model)
    return values[:2]


EXPERIMENT = register(
    Experiment(
        "equilibria",
        "rest points of SA and USA: regular configurations' indices over β, the triangle's and tetrahedron's "
        "branch points by continuation, the staircase's saddles, the four-token extremizers",
        "[GLPR] arXiv 2312.10794; arXiv 2507.22857, 2410.06833, 2501.03096",
        dict(
            experiment="equilibria",
            model="usa",
            d=[2, 3, 4],
            beta="-3:3:25",
            seeds=1,
            n=5,
            saddle_beta=10.0,
            n_save=121,
            delta=1e-4,
            extremizer_tau=[-10.0, -5.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0],
        ),
        dict(d=[2], beta=[-2.0, -1.0, -0.5, 0.5, 1.0], n_save=81, extremizer_tau=[-2.0, 0.5, 2.0, 8.0]),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("model", "d", "beta", "n", "saddle_beta", "n_save", "delta", "extremizer_tau"),
        memory=memory,
        requires=requires,
        negative_beta=True,
        headline=lambda c: (
            f"{c.model.upper()}: regular configurations for d = {list(c.d)} at {len(c.beta)} β in "
            f"[{min(c.beta):g}, {max(c.beta):g}], their continuation in β, n = {c.n} saddles at "
            f"β = {c.saddle_beta:g}, {len(c.extremizer_tau)} extremizer τ"
        ),
        runtime="41 s cold, 13 s with a warm compilation cache (2 shared CPU cores)",
    )
)
