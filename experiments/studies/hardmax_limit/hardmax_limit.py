"""``hardmax-limit``: attention as β → ∞, and the hardmax step as Frank–Wolfe (arXiv 2605.10931, 2508.09628).

Tokens of the plane, without layer norm and with self-attention, in the model of arXiv 2508.09628
(``experiments/studies/hardmax_limit/hardmax_limit_theory.py``, docs/model.md §14): ``hull_vertices`` unit tokens at the vertices of a
jittered polygon and ``hull_interior`` tokens uniform inside it, seeded by ``seed``.

* SA → hardmax (QᵀK = I): the attention flow at each β of ``limit_beta`` (float64, dopri8, rtol 1e-10) against
  the hardmax flow's closed form (straight lines to the cells' vertices) at t = ``hardmax_time``: the
  distance D(β) = (Σ_i |x_i^β − x_i^∞|²/n)^{1/2} (which bounds the W₂ distance of the two empirical
  measures) and the largest token distance, against the rate √(log(β + 1)/β) of arXiv 2605.10931.
* concentration: the first time t_c(β) a vertex token's attention on itself drops below 2/3, when its
  cell's tokens come within ~1/β of it; predicted t_c = log β − log u* (``concentration_offset``).
* hardmax cells (QᵀK = I): the closed-form paths solve the hardmax field exactly: straight lines inside the
  dominance cells, vertices fixed.
* QᵀK = −I: ``frank_wolfe_steps`` hardmax steps h_k = 2/(k + 2); the Frank–Wolfe gap decays at least like 1/k.
* trapping: the vertex tokens alone at each β of ``trap_beta`` (dopri5, in the slow time e^{−cβ} t): the
  time T(β) until one moves by ``TRAP_DELTA``, log T fitted against β; predicted slope c = min ⟨v, v − v'⟩.

Statistics, on the axes (d, beta, seed) of length one: ``limit_distance``, ``limit_distance_max``,
``concentration_time`` and ``concentration_predicted`` (limit_beta), ``self_weight`` (limit_beta, flow_time),
``path_residual`` (flow_time), ``tokens`` (token, xy) and ``cells`` (token) at t = 0, ``fw_gap`` (fw_step),
``trap_time`` and ``trap_speed`` (trap_beta). Figures and checks read β grids from the configuration.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from ....solvers import simulate
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .hardmax_limit_theory import (
    SELF_WEIGHT,
    HullAttention,
    HullHardmax,
    concentration_offset,
    dominance_cells,
    frank_wolfe_steps,
    hardmax_paths,
    hull_tokens,
    limit_rate,
    trapping_exponent,
)

draw = LazyModule(f"{__package__}.hardmax_limit_figures")  # this study's figures, imported on first use

TRAP_DELTA = 1e-3
"""A vertex token has left its vertex once it has moved this far."""
DT = 0.02
"""Spacing of the saves of the attention flow (the resolution of t_c)."""
RTOL, ATOL = 1e-12, 1e-14
FLOOR = 1e-10
"""Distances below this are the solver's error (dopri8 at RTOL over t ≤ 10), left out of the fits."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    limit_distance=_DIMS + ["limit_beta"],
    limit_distance_max=_DIMS + ["limit_beta"],
    self_weight=_DIMS + ["limit_beta", "flow_time"],
    concentration_time=_DIMS + ["limit_beta"],
    concentration_predicted=_DIMS + ["limit_beta"],
    path_residual=_DIMS + ["flow_time"],
    tokens=_DIMS + ["token", "xy"],
    cells=_DIMS + ["token"],
    fw_gap=_DIMS + ["fw_step"],
    trap_time=_DIMS + ["trap_beta"],
    trap_speed=_DIMS + ["trap_beta"],
)


def fit_line(x, y) -> tuple[float, float, float, float]:
    """Least squares y = a x + b: (a, its standard error, b, its standard error)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if np.unique(x).size < 2:  # no line through fewer than two abscissae
        return (math.nan,) * 4
    A = np.stack([x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    dof = max(x.size - 2, 1)
    s2 = float(np.sum((y - A @ coef) ** 2)) / dof
    cov = s2 * np.linalg.inv(A.T @ A)
    return float(coef[0]), float(np.sqrt(cov[0, 0])), float(coef[1]), float(np.sqrt(cov[1, 1]))


def _self_weights(betas, xs, vertices: int) -> np.ndarray:
    """The smallest attention of a vertex token on itself, (B, T): softmax_j(β⟨v, x_j⟩) at j = v."""
    logits = betas[:, None, None, None] * np.einsum("btkd,btnd->btkn", xs[:, :, :vertices], xs)
    logits -= logits.max(axis=-1, keepdims=True)
    w = np.exp(logits)
    own = np.diagonal(w[..., :vertices], axis1=-2, axis2=-1) / w.sum(axis=-1)
    return own.min(axis=-1)


def _first_below(ts, series, level) -> float:
    """The first time ``series`` crosses below ``level``, linearly interpolated; NaN if it never does."""
    below = np.nonzero(series < level)[0]
    if below.size == 0 or below[0] == 0:
        return float("nan")
    j = below[0]
    return float(np.interp(level, [series[j], series[j - 1]], [ts[j], ts[j - 1]]))


def _trap_times(vertices, trap_betas) -> np.ndarray:
    """T(β): the first time a vertex token has moved by ``TRAP_DELTA`` (NaN where none does within the span).

    The flow runs in the slow time s = e^{−cβ} t (``HullAttention``'s rate e^{cβ}), where every β leaves its
    vertex at s ≈ δ/|v − v'|: one explicit solve with shared saves, stopped before the tokens gather (after which
    the flow would be stiff at that scale)."""
    c, i, j = trapping_exponent(vertices)
    s1 = 10 * TRAP_DELTA / np.linalg.norm(vertices[i] - vertices[j])
    ts = np.linspace(0.0, s1, 401)
    field = HullAttention(trap_betas, rate=np.exp(c * trap_betas))
    sol = simulate(field, vertices, float(s1), ts=ts, solver="dopri5", rtol=1e-9, atol=ATOL, dtype="float64")
    moved = np.max(np.linalg.norm(np.asarray(sol.xs) - vertices, axis=-1), axis=-1)  # (B, T)
    out = np.full(trap_betas.size, np.nan)
    for b, m in enumerate(moved):
        k = np.nonzero(m >= TRAP_DELTA)[0]
        if k.size and k[0] > 1:
            lo, hi = k[0] - 1, k[0]
            s_cross = np.exp(np.interp(np.log(TRAP_DELTA), np.log(m[[lo, hi]]), np.log(ts[[lo, hi]])))
            out[b] = s_cross * np.exp(c * trap_betas[b])
    return out


def run(config, *, progress=None) -> RunResult:
    """The attention flow over β against the hardmax flow, the hardmax paths, the Frank–Wolfe gaps, the trapping times."""
    start = time.perf_counter()
    k = int(config.hull_vertices)
    x0 = hull_tokens(k, int(config.hull_interior), seed=int(config.seed))
    betas = np.asarray(config.limit_beta, dtype=np.float64)
    t_star = float(config.hardmax_time)
    u_star = concentration_offset(x0, k)
    predicted = np.log(betas / u_star)
    t_end = max(float(predicted.max()) + 3.0, t_star)
    ts = np.union1d(np.arange(0.0, t_end + DT / 2, DT), [t_star])
    sol = simulate(
        HullAttention(betas), x0, float(ts[-1]), ts=ts, solver="dopri8", rtol=RTOL, atol=ATOL, dtype="float64"
    )
    xs = np.asarray(sol.xs)  # (B, T, n, 2)
    hard = hardmax_paths(x0, k, ts)
    at = int(np.argmin(np.abs(ts - t_star)))
    error = np.linalg.norm(xs[:, at] - hard[at], axis=-1)  # (B, n)
    distance = np.sqrt(np.mean(error**2, axis=-1))
    worst = np.max(error, axis=-1)
    weights = _self_weights(betas, xs, k)
    t_c = np.array([_first_below(ts, w, SELF_WEIGHT) for w in weights])
    # the closed-form paths x(t) = v + (x(0) − v) e^{−t} solve the hardmax field: ẋ = v − x along them
    target = x0[:k][dominance_cells(x0, x0[:k])]
    velocity = np.asarray(jax.vmap(lambda x: HullHardmax()(0.0, x))(jnp.asarray(hard)))
    residual = np.max(np.abs(velocity - (target - hard)), axis=(1, 2))  # at each save time
    gaps = frank_wolfe_steps(x0, -np.eye(2), int(config.frank_wolfe_steps))
    trap_betas = np.asarray(config.trap_beta, dtype=np.float64)
    trap = _trap_times(x0[:k], trap_betas)
    # the fastest vertex token's initial speed: a trapped token moves TRAP_DELTA at about this speed
    speed = np.array(
        [np.max(np.linalg.norm(np.asarray(HullAttention(b)(0.0, jnp.asarray(x0[:k]))), axis=-1)) for b in trap_betas]
    )

    def member(a):  # statistics carry the (d, β, seed) axes of every run, here of length one
        return np.asarray(a, dtype=float)[None, None, None]

    stats = {
        "limit_distance": member(distance),
        "limit_distance_max": member(worst),
        "self_weight": member(weights),
        "concentration_time": member(t_c),
        "concentration_predicted": member(predicted),
        "path_residual": member(residual),
        "tokens": member(x0),
        "cells": member(dominance_cells(x0, x0[:k])),
        "fw_gap": member(gaps),
        "trap_time": member(trap),
        "trap_speed": member(speed),
    }
    extra = {
        "limit_beta": (betas, ["limit_beta"]),
        "flow_time": (ts, ["flow_time"]),
        "fw_step": (np.arange(gaps.size), ["fw_step"]),
        "trap_beta": (trap_betas, ["trap_beta"]),
    }
    return RunResult.of_statistics(config, stats, extra, start=start)


def memory(config) -> dict:
    """The saved states of the attention flow (β × saves × tokens × 2 float64, a few copies) and the vertices'
    attention over them (β × saves × vertices × tokens, three arrays)."""
    k, n = int(config.hull_vertices), int(config.hull_vertices) + int(config.hull_interior)
    saves = (np.log(max(config.limit_beta)) + 3.0 + 2 * float(config.hardmax_time)) / DT + 2
    states = 4 * 8 * len(config.limit_beta) * saves * n * 2
    weights = 3 * 8 * len(config.limit_beta) * saves * k * n
    return {
        "the attention flow's saved states and the vertices' weights [limit_beta, hull_interior]": int(states + weights)
    }


def requires(config) -> None:
    """Grids of at least three distinct β for the fits (the keys bound their values)."""
    for name, what in (("limit_beta", "rates over β"), ("trap_beta", "log T against β")):
        values = config[name]
        if len(set(values)) < 3:
            repeated = f" ({len(values)} listed)" if len(values) != len(set(values)) else ""
            raise ConfigError(
                f"hardmax-limit fits {what}: {name} needs ≥ 3 distinct values, got {len(set(values))}{repeated}"
            )


def _series(result, name):
    return result.stats[name][0, 0, 0]


def _trap_exponent(result) -> float:
    """c = min ⟨v, v − v'⟩ over the run's vertex tokens."""
    return trapping_exponent(_series(result, "tokens")[: int(result.config.hull_vertices)])[0]


def figures(result: RunResult) -> dict:
    """The dominance cells with the hardmax paths; D(β) against the rate with t_c(β) and the Frank–Wolfe gaps; the trapping times."""
    c = result.config
    betas, trap_betas = np.asarray(c.limit_beta, dtype=float), np.asarray(c.trap_beta, dtype=float)
    k = int(c.hull_vertices)
    return {
        "hardmax_cells": lambda p: draw.hardmax_cells(_series(result, "tokens"), k, _series(result, "cells"), path=p),
        "hardmax_rate": lambda p: draw.hardmax_rate(
            betas,
            _series(result, "limit_distance"),
            _series(result, "limit_distance_max"),
            limit_rate(betas),
            _series(result, "concentration_time"),
            _series(result, "concentration_predicted"),
            _series(result, "fw_gap"),
            t=c.hardmax_time,
            floor=FLOOR,
            path=p,
        ),
        "hardmax_trapping": lambda p: draw.trapping_times(
            trap_betas,
            _series(result, "trap_time"),
            _trap_exponent(result),
            predicted=TRAP_DELTA / _series(result, "trap_speed"),
            path=p,
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """The limit's rate, concentration at log β, the hardmax paths, the Frank–Wolfe rate, the trapping exponent."""
    out = []
    betas = np.asarray(result.config.limit_beta, dtype=float)
    D = _series(result, "limit_distance")
    rate = limit_rate(betas)
    ratio = float(np.max(D / rate))
    out.append(
        Check(
            f"SA → hardmax at t = {result.config.hardmax_time:g}: D(β) ≤ √(log(β+1)/β) on the whole β grid",
            "max D/rate ≤ 1",
            f"{ratio:.3f}",
            ratio <= 1.0,
        )
    )
    above = D > FLOOR
    if above.sum() < 2:
        out.append(
            Check.not_applicable(
                "exponent of D(β) over the β grid", "≤ −0.5", f"fewer than 2 β with D above the solver's {FLOOR:g}"
            )
        )
        return out + _other_checks(result)
    p, se = fit_line(np.log(betas[above]), np.log(D[above]))[:2]
    out.append(
        Check(
            f"exponent of D(β) over the {int(above.sum())} β with D > {FLOOR:g} (the rate's: −1/2 up to the logarithm)",
            "≤ −0.5",
            f"{p:.2f} ± {se:.2f}",
            p <= -0.5,
        )
    )
    return out + _other_checks(result)


def _other_checks(result: RunResult) -> list[Check]:
    """Concentration at log β, the hardmax paths, the Frank–Wolfe rate, the trapping exponent."""
    out = []
    betas = np.asarray(result.config.limit_beta, dtype=float)
    t_c = _series(result, "concentration_time")
    pred = _series(result, "concentration_predicted")
    ok = np.isfinite(t_c) & (pred > 1.0)
    if ok.sum() >= 3:
        a, sa, b, sb = fit_line(np.log(betas[ok]), t_c[ok])
        out.append(
            Check(
                "concentration at t_c ~ log β: slope of t_c against log β",
                "1 within 5 %",
                f"{a:.3f} ± {sa:.3f}",
                abs(a - 1.0) <= 0.05,
            )
        )
        gap = float(np.max(np.abs(t_c[ok] - pred[ok])))
        out.append(
            Check(
                "t_c against log β − log u* (hardmax paths, self-weight 2/3)",
                "within 0.1",
                f"largest gap {gap:.3f}",
                gap <= 0.1,
            )
        )
    else:
        out.append(
            Check.not_applicable(
                "concentration at t_c ~ log β", "slope 1", "fewer than 3 β with log(β/u*) > 1 that concentrate"
            )
        )
    residual = float(np.max(_series(result, "path_residual")))
    out.append(
        Check(
            "QᵀK = I hardmax: straight lines to the cell's vertex solve the flow, vertices fixed",
            "residual ≤ 1e-12",
            f"{residual:.1e}",
            residual <= 1e-12,
        )
    )
    gaps = _series(result, "fw_gap")
    steps = np.arange(gaps.size)
    use = (steps >= 10) & (gaps > 1e-300)
    q, sq, *_ = fit_line(np.log(steps[use] + 2.0), np.log(gaps[use]))
    out.append(
        Check(
            "QᵀK = −I, Frank–Wolfe steps 2/(k+2): exponent of the gap against k (O(1/k): ≤ −1)",
            "≤ −1",
            f"{q:.2f} ± {sq:.2f}",
            q <= -1.0,
        )
    )
    trap = _series(result, "trap_time")
    tb = np.asarray(result.config.trap_beta, dtype=float)
    c_pred = _trap_exponent(result)
    fine = np.isfinite(trap)
    if fine.sum() >= 3:
        c_fit, sc, *_ = fit_line(tb[fine], np.log(trap[fine]))
        out.append(
            Check(
                f"trapping time T ~ e^{{cβ}}: c against min ⟨v, v − v'⟩ = {c_pred:.4f}",
                "within 5 %",
                f"{c_fit:.4f} ± {sc:.4f}",
                abs(c_fit - c_pred) <= 0.05 * c_pred,
            )
        )
        ratio = trap[fine] * _series(result, "trap_speed")[fine] / TRAP_DELTA
        worst = float(ratio[np.argmax(np.abs(ratio - 1.0))])
        out.append(
            Check(
                f"trapped: T(β) · (initial speed) / δ, δ = {TRAP_DELTA:g} (the token keeps its speed ~ e^{{−cβ}})",
                "1 within 10 %",
                f"{worst:.3f} (farthest from 1)",
                abs(worst - 1.0) <= 0.1,
            )
        )
    else:
        out.append(Check("trapping time T ~ e^{cβ}", "≥ 3 β leave their vertex", f"{int(fine.sum())}", False))
    return out


EXPERIMENT = register(
    Experiment(
        "hardmax-limit",
        "attention as β → ∞: distance to the hardmax flow, concentration at t ~ log β, Frank–Wolfe cells, "
        "the O(1/k) gap for QᵀK ⪯ 0, vertices trapped for times e^{cβ}",
        "arXiv 2605.10931; arXiv 2508.09628 (code: borjanG/2025-transformers-frank-wolfe)",
        dict(
            experiment="hardmax-limit",
            limit_beta=[10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0, 10000.0],
            seeds=1,
            d=[2],
            hull_vertices=6,
            hull_interior=400,
            hardmax_time=1.0,
            trap_beta=[15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0],
            frank_wolfe_steps=1000,
        ),
        dict(
            limit_beta=[30.0, 300.0, 3000.0, 10000.0],
            hull_interior=40,
            trap_beta=[30.0, 40.0, 50.0],
            frank_wolfe_steps=200,
        ),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("limit_beta", "seed", "hull_vertices", "hull_interior", "hardmax_time", "trap_beta", "frank_wolfe_steps"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"{c.hull_vertices} hull vertices + {c.hull_interior} interior tokens, SA at β ∈ {list(c.limit_beta)} against "
            f"hardmax at t = {c.hardmax_time:g}, trapping at β ∈ {list(c.trap_beta)}, {c.frank_wolfe_steps} "
            "Frank–Wolfe steps"
        ),
        runtime="35 s cold on 2 shared CPU cores (about 1 GB of memory)",
    )
)
