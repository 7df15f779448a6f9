"""``twisted-states``: SA with rotary positions (``positional="rope"``, Q = K = V = I), arXiv 2607.24502, 2512.03058.

Four parts, none of which depends on the β and seed axes of the run's arrays (each spans the β range itself,
the flows take the minimum over their seeds; repeated along those axes); closed forms in
``experiments/studies/rope/rope_theory.py``, docs/model.md §19:

* twisted states: for each pair (q, s) of ``twist_q``, ``twist_s`` the ring θ_k = 2πqk/n of n tokens in one
  rotation plane whose frequency is resonant, θ_p = 2πs/n (d = 2: ``rope_theta`` = (2πs/n,); d ≥ 4: plane 1,
  ``rope_base`` = (n/2πs)^{d/2}), found by ``equilibrium`` from a guess with perturbed phases at β = min β
  (from the ring itself where gcd(q + s, n) > 1: rest points then come in families along which Newton slides),
  its largest velocity (``ring_velocity``), its spectrum (``ring_eigen``) against the Bessel-aliasing closed form
  (``ring_spectrum_error``), its unstable and neutral counts;
* on the circle (d = 2) each ring continued in β over [min β, max β] (``continuation``): the velocity and the
  spectrum's error at every point (``twist_path_*``);
* ``seeds`` runs to t1 from tokens in the closed hemisphere ⟨e_0, x⟩ ≥ 0 (a quarter of them on its boundary):
  min_i ⟨e_0, x_i(t)⟩ (``hemisphere_margin``) stays ≥ 0 and never decreases; and ``seeds`` runs from pairwise
  non-obtuse data (a cap of angular radius π/4): min_{i≠j}⟨x_i, x_j⟩ (``twist_min_inner``) against the bound
  tanh(2at + artanh m₀), a = 1/(1 + (n − 1)e^{2β}) (``twist_min_inner_bound``), at β = min β and ``rope_base``;
* the phase spectral abscissa of every ring (q = 0 … n/2, s = 1 … n − 1) over β ∈ [0.1, 8] (``twist_abscissa``):
  which frequency makes a ring most stable changes with β, no ordering of the frequencies holds for all β.
"""

from __future__ import annotations

import math
import time

import jax.numpy as jnp
import numpy as np

from ....particles.fields import SA
from ....solvers import simulate
from ....solvers.continuation import continuation
from ....solvers.equilibrium import equilibrium
from ....solvers.rest_points import RestPoints
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .rope_theory import contraction_bound, resonant_theta, ring, spectral_abscissa, twisted_spectrum

draw = LazyModule(f"{__package__}.rope_figures")  # this study's figures, imported on first use

VELOCITY_TOL = 1e-10
"""A ring found by ``equilibrium`` or along a continuation is a rest point when its largest velocity is below."""
SPECTRUM_TOL = 1e-9
"""The eigenvalues against the closed form, relative to the largest."""
GUESS_NOISE = 1e-3
"""Phase perturbation of the guess handed to ``equilibrium``."""
MAX_POINTS = 40
"""Points of each continuation at most."""
GRID = 41
"""β values of the abscissa grid."""
ORDER_BETA = (0.1, 8.0)
"""The abscissa grid's β range: closed forms, cheap over any range, so the same for every configuration."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    ring_velocity=_DIMS + ["ring"],
    ring_spectrum_error=_DIMS + ["ring"],
    ring_unstable=_DIMS + ["ring"],
    ring_neutral=_DIMS + ["ring"],
    ring_eigen=_DIMS + ["ring", "eigen"],
    twist_path_beta=_DIMS + ["ring", "point"],
    twist_path_velocity=_DIMS + ["ring", "point"],
    twist_path_error=_DIMS + ["ring", "point"],
    hemisphere_margin=_DIMS + ["twist_step"],
    twist_min_inner=_DIMS + ["twist_step"],
    twist_min_inner_bound=_DIMS + ["twist_step"],
    twist_time=_DIMS + ["twist_step"],
    twist_abscissa=_DIMS + ["winding", "resonance", "grid"],
)


def ring_field(beta, n: int, s: int, d: int) -> SA:
    """SA with rotary positions whose ring plane (0 for d = 2, 1 otherwise) turns by 2πs/n per position."""
    if d == 2:
        return SA(beta, positional="rope", rope_theta=np.array([resonant_theta(n, s)]))
    return SA(beta, positional="rope", rope_base=(n / (2.0 * np.pi * s)) ** (d / 2.0))


def _velocity(field, x) -> float:
    return float(np.max(np.linalg.norm(np.asarray(field(0.0, jnp.asarray(x))), axis=-1)))


def _error(eigenvalues, beta, n, q, s, d) -> float:
    want = twisted_spectrum(beta, n, q, s, d)
    got = np.sort(np.asarray(eigenvalues).real)[::-1]
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-300))


def _rings(config, d: int, rng) -> dict:
    n, beta = config.n, float(min(config.beta))
    pairs = list(zip(config.twist_q, config.twist_s))
    size = n * (max(config.d) - 1)
    out = {k: np.full(len(pairs), np.nan) for k in ("velocity", "error", "unstable", "neutral")}
    eigen = np.full((len(pairs), size), np.nan)
    plane = 0 if d == 2 else 1
    for r, (q, s) in enumerate(pairs):
        field = ring_field(beta, n, s, d)
        x = ring(n, q, d, plane)
        if math.gcd(q + s, n) == 1:
            phi = 2.0 * np.pi * q * np.arange(n) / n + GUESS_NOISE * rng.normal(size=n)
            x[:, 2 * plane], x[:, 2 * plane + 1] = np.cos(phi), np.sin(phi)
        found = equilibrium(field, x, max_iter=60, strict=False)
        out["velocity"][r] = _velocity(field, found.x)
        out["error"][r] = _error(found.eigenvalues, beta, n, q, s, d)
        out["unstable"][r], out["neutral"][r] = found.unstable, found.neutral
        eigen[r, : found.eigenvalues.size] = np.sort(found.eigenvalues.real)[::-1]
    return dict(
        ring_velocity=out["velocity"],
        ring_spectrum_error=out["error"],
        ring_unstable=out["unstable"],
        ring_neutral=out["neutral"],
        ring_eigen=eigen,
    )


def _paths(config) -> dict:
    n, lo, hi = config.n, float(min(config.beta)), float(max(config.beta))
    pairs = list(zip(config.twist_q, config.twist_s))
    p, v, e = (np.full((len(pairs), MAX_POINTS), np.nan) for _ in range(3))
    if hi <= lo:
        return dict(twist_path_beta=p, twist_path_velocity=v, twist_path_error=e)
    for r, (q, s) in enumerate(pairs):
        if math.gcd(q + s, n) != 1:  # a family of rest points: no isolated branch to follow
            continue
        system = RestPoints(lambda b, s=s: ring_field(b, n, s, 2), ring(n, q, 2), lo)
        branch = continuation(
            system, ring(n, q, 2), lo, p_range=(lo - 1e-9, hi + 1e-9), ds=0.1, ds_max=0.25, max_points=MAX_POINTS
        )
        for i, beta in enumerate(branch.p[:MAX_POINTS]):
            x = branch.state(i)
            p[r, i] = beta
            v[r, i] = _velocity(ring_field(float(beta), n, s, 2), x)
            e[r, i] = _error(branch.eigenvalues[i], float(beta), n, q, s, 2)
    return dict(twist_path_beta=p, twist_path_velocity=v, twist_path_error=e)


def _flows(config, d: int, ts) -> dict:
    """The hemisphere's margin and the contraction of non-obtuse data, min over ``seeds`` runs."""
    n, beta = config.n, float(min(config.beta))  # where the floor a, hence the bound, is largest
    rng = np.random.default_rng(config.seed + d)
    field = SA(beta, positional="rope", rope_base=config.rope_base)
    x = rng.normal(size=(config.seeds, n, d))
    x[..., 0] = np.abs(x[..., 0])
    x[:, : max(1, n // 4), 0] = 0.0  # on the boundary ⟨e_0, x⟩ = 0
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    xs = np.asarray(simulate(field, jnp.asarray(x), config.t1, ts=jnp.asarray(ts), rtol=1e-10, atol=1e-12).xs)
    margin = np.min(xs[..., 0], axis=(0, 2))
    # a cap of angular radius π/4 around e_0: every pair within π/2
    y = rng.normal(size=(config.seeds, n, d))
    y[..., 0] = 0.0
    y /= np.linalg.norm(y, axis=-1, keepdims=True)
    angle = (np.pi / 4) * np.sqrt(rng.uniform(size=(config.seeds, n, 1)))
    y = np.cos(angle) * np.eye(d)[0] + np.sin(angle) * y
    ys = np.asarray(simulate(field, jnp.asarray(y), config.t1, ts=jnp.asarray(ts), rtol=1e-10, atol=1e-12).xs)
    gram = np.einsum("btid,btjd->btij", ys, ys) + 2.0 * np.eye(n)
    inner = np.min(gram, axis=(-2, -1))  # (seeds, T)
    bound = np.min([contraction_bound(beta, n, m0, ts) for m0 in inner[:, 0]], axis=0)
    worst = int(np.argmin(inner[:, -1] - np.array([contraction_bound(beta, n, m, ts)[-1] for m in inner[:, 0]])))
    return dict(
        hemisphere_margin=margin,
        twist_min_inner=inner[worst],
        twist_min_inner_bound=contraction_bound(beta, n, inner[worst, 0], ts),
        twist_time=np.asarray(ts),
        _bound_all=bound,
    )


def abscissae(config) -> tuple[np.ndarray, np.ndarray]:
    """(β grid, the phase abscissa of the ring (q, s) for q = 0 … n/2, s = 1 … n − 1 on it)."""
    n = config.n
    grid = np.linspace(*ORDER_BETA, GRID)
    table = np.array([[[spectral_abscissa(b, n, q, s) for b in grid] for s in range(1, n)] for q in range(n // 2 + 1)])
    return grid, table


def run(config, *, progress=None) -> RunResult:
    """Every part of the module docstring, in float64."""
    start = time.perf_counter()
    ts = np.linspace(0.0, config.t1, config.n_save)
    per_d = []
    rng = np.random.default_rng(config.seed)
    for d in config.d:
        stats = _rings(config, d, rng)
        stats.update(_flows(config, d, ts))
        stats.pop("_bound_all")
        per_d.append(stats)
    paths = _paths(config) if 2 in config.d else None
    _, table = abscissae(config)
    D, B, S = len(config.d), len(config.beta), config.seeds  # repeated along β and seed (module docstring)

    def along(v, per_dimension: bool):
        v = np.asarray(v, dtype=float)
        shape = (D, B, S) + (v.shape[1:] if per_dimension else v.shape)
        return np.broadcast_to(v[:, None, None] if per_dimension else v, shape).copy()

    stats = {k: along(np.stack([s[k] for s in per_d]), True) for k in per_d[0]}
    if paths is None:
        paths = {k: np.full((len(config.twist_q), MAX_POINTS), np.nan) for k in _paths_keys()}
    stats.update({k: along(v, False) for k, v in paths.items()})
    stats["twist_abscissa"] = along(table, False)
    extra = {
        "ring": (np.arange(len(config.twist_q)), ["ring"]),
        "winding": (np.arange(config.n // 2 + 1), ["winding"]),
        "resonance": (np.arange(1, config.n), ["resonance"]),
    }
    return RunResult.of_statistics(config, stats, extra, start=start, members=(D, B, S))


def _paths_keys():
    return ("twist_path_beta", "twist_path_velocity", "twist_path_error")


def requires(config) -> None:
    """Rotary positions, even d ≤ 8, 4 ≤ n ≤ 24, paired twist_q and twist_s with 0 < s < n, β > 0."""
    if config.positional != "rope":
        raise ConfigError(
            f"twisted-states studies rotary positions: positional must be 'rope', got {config.positional!r}"
        )
    if any(d % 2 or not 2 <= d <= 8 for d in config.d):
        raise ConfigError(f"twisted-states needs even d from 2 to 8 (rotary planes), got d = {list(config.d)}")
    if not 4 <= config.n <= 24:
        raise ConfigError(f"twisted-states puts 4 ≤ n ≤ 24 tokens on its rings, got n = {config.n}")
    if len(config.twist_q) != len(config.twist_s) or not config.twist_q:
        raise ConfigError(
            f"twist_q and twist_s pair the rings: give as many of each (got {len(config.twist_q)} and "
            f"{len(config.twist_s)})"
        )
    bad = [s for s in config.twist_s if not 0 < s < config.n]
    if bad:
        raise ConfigError(f"twist_s must lie in 1 … n − 1 = {config.n - 1} (θ = 2πs/n), got {bad[0]}")
    if min(config.beta) <= 0:
        raise ConfigError(f"twisted-states takes β > 0, got {min(config.beta):g}")


def memory(config) -> dict:
    """The rings' Jacobians and the two ensembles' trajectories."""
    N = config.n * (max(config.d) - 1)
    return {
        "the rings' Jacobians [n, d]": 8 * 12 * N * N,
        "the runs' states [seeds, n, d, n_save]": 8 * 2 * config.seeds * config.n * max(config.d) * config.n_save,
    }


def _summary(result: RunResult) -> dict:
    s, c = result.stats, result.config
    return {
        "d": [int(d) for d in c.d],
        "rings": [[int(q), int(v)] for q, v in zip(c.twist_q, c.twist_s)],
        "ring_velocity": [[float(v) for v in row] for row in s["ring_velocity"][:, 0, 0]],
        "ring_spectrum_error": [[float(v) for v in row] for row in s["ring_spectrum_error"][:, 0, 0]],
        "hemisphere_margin": [float(np.min(v)) for v in s["hemisphere_margin"][:, 0, 0]],
        "ordering_changes": ordering_changes(s["twist_abscissa"][0, 0, 0]),
    }


def ordering_changes(table: np.ndarray, margin: float = 1e-9) -> list[list[int]]:
    """[q, s at the least β, s at the largest] for every winding q whose most stable resonance differs at the two
    ends of the grid, each strictly (by ``margin``) more stable than the other at its end: no tie decides it."""
    out = []
    for q, rows in enumerate(table):
        first, last = int(np.argmin(rows[:, 0])), int(np.argmin(rows[:, -1]))
        if rows[last, 0] - rows[first, 0] > margin and rows[first, -1] - rows[last, -1] > margin:
            out.append([q, first + 1, last + 1])
    return out


def figures(result: RunResult) -> dict:
    """The rings' spectra against the closed form, the flows' margins against the bound, the abscissae."""
    c, s = result.config, result.stats
    grid = np.linspace(*ORDER_BETA, GRID)
    return {
        "ring_spectra": lambda p: draw.ring_spectra(
            s["ring_eigen"][:, 0, 0],
            [[twisted_spectrum(float(min(c.beta)), c.n, q, v, d) for q, v in zip(c.twist_q, c.twist_s)] for d in c.d],
            dims=list(c.d),
            rings=list(zip(c.twist_q, c.twist_s)),
            path=p,
        ),
        "hemisphere_contraction": lambda p: draw.flows(
            s["twist_time"][0, 0, 0],
            s["hemisphere_margin"][:, 0, 0],
            s["twist_min_inner"][:, 0, 0],
            s["twist_min_inner_bound"][:, 0, 0],
            dims=list(c.d),
            path=p,
        ),
        "frequency_ordering": lambda p: draw.ordering(grid, s["twist_abscissa"][0, 0, 0], n=c.n, path=p),
    }


def checks(result: RunResult) -> list[Check]:
    """The rings at rest and their spectra; the continuation's; the hemisphere; the contraction bound; the ordering."""
    c, s = result.config, result.stats
    out = []
    for a, d in enumerate(c.d):
        v, e = s["ring_velocity"][a, 0, 0], s["ring_spectrum_error"][a, 0, 0]
        out.append(
            Check(
                f"d = {d}: the {len(v)} resonant rings found by equilibrium at β = {min(c.beta):g}",
                f"velocity ≤ {VELOCITY_TOL:g}, spectrum = Bessel-aliasing closed form to {SPECTRUM_TOL:g}",
                f"velocity ≤ {np.max(v):.2g}, spectrum's error ≤ {np.max(e):.2g}",
                bool(np.max(v) <= VELOCITY_TOL and np.max(e) <= SPECTRUM_TOL),
            )
        )
    if 2 in c.d and max(c.beta) > min(c.beta):
        a = list(c.d).index(2)
        pv, pe = s["twist_path_velocity"][a, 0, 0], s["twist_path_error"][a, 0, 0]
        points = int(np.sum(np.isfinite(pv)))  # over every ring
        if points:
            out.append(
                Check(
                    f"d = 2: the rings continued in β over [{min(c.beta):g}, {max(c.beta):g}] ({points} points in all)",
                    f"velocity ≤ {VELOCITY_TOL:g} and spectrum = closed form to {SPECTRUM_TOL:g} at every point",
                    f"velocity ≤ {np.nanmax(pv):.2g}, error ≤ {np.nanmax(pe):.2g}",
                    bool(np.nanmax(pv) <= VELOCITY_TOL and np.nanmax(pe) <= SPECTRUM_TOL),
                )
            )
    for a, d in enumerate(c.d):
        m = s["hemisphere_margin"][a, 0, 0]
        out.append(
            Check(
                f"d = {d}: {c.seeds} runs from the closed hemisphere ⟨e_0, x⟩ ≥ 0 (β = {min(c.beta):g})",
                "min_i ⟨e_0, x_i(t)⟩ ≥ 0 and non-decreasing (to 1e-9)",
                f"min {np.min(m):.3g}, largest decrease {max(0.0, float(-np.min(np.diff(m)))):.2g}",
                bool(np.min(m) >= -1e-9 and np.min(np.diff(m)) >= -1e-9),
            )
        )
        inner, bound = s["twist_min_inner"][a, 0, 0], s["twist_min_inner_bound"][a, 0, 0]
        out.append(
            Check(
                f"d = {d}: min ⟨x_i, x_j⟩ of non-obtuse data (the run nearest its bound)",
                "≥ tanh(2at + artanh m₀), a = 1/(1 + (n − 1)e^{2β}), at every save time",
                f"least margin {np.min(inner - bound):.3g} (at t1: {inner[-1]:.4f} ≥ {bound[-1]:.4f})",
                bool(np.min(inner - bound) >= -1e-9),
            )
        )
    changes = ordering_changes(s["twist_abscissa"][0, 0, 0])
    out.append(
        Check(
            f"n = {c.n}: the most stable resonance s of each winding q at β = {ORDER_BETA[0]:g} and {ORDER_BETA[1]:g}",
            "changes with β for some q (no ordering of the frequencies is universal)",
            ", ".join(f"q = {q}: s = {a} → {b}" for q, a, b in changes) or "no change on this β range",
            bool(changes),
        )
    )
    return out


EXPERIMENT = register(
    Experiment(
        "twisted-states",
        "SA with rotary positions: resonant twisted rings as rest points, their Bessel-aliasing spectra and "
        "continuation in β, closed hemispheres, the contraction of non-obtuse data, no universal frequency order",
        "arXiv 2607.24502, 2512.03058",
        dict(
            experiment="twisted-states",
            d=[2, 4],
            n=12,
            beta="0.5:6:12",
            seeds=8,
            t1=20.0,
            n_save=41,
            positional="rope",
            twist_q=[1, 2, 3, 1, 2],
            twist_s=[4, 3, 2, 5, 2],
        ),
        dict(d=[2], n=8, beta=[0.5, 2.0], seeds=2, t1=2.0, n_save=5, twist_q=[1, 2], twist_s=[2, 1]),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("d", "n", "beta", "seed", "seeds", "t1", "n_save", "positional", "rope_base", "twist_q", "twist_s"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"SA with rotary positions: {len(c.twist_q)} twisted rings of n = {c.n} for d = {list(c.d)}, "
            f"β ∈ [{min(c.beta):g}, {max(c.beta):g}]"
        ),
        summary=_summary,
        runtime="4.2 min cold on 2 CPU cores shared with other work (119 compilations)",
    )
)
