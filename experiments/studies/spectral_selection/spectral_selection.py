"""``spectral-selection``: which eigendirection of a symmetric value matrix the tokens select (docs/model.md,
"Spectral selection"; arXiv 2604.26085, 2511.11553).

The field is ẋ_i = P⊥_{x_i} Σ_j softmax_j(β⟨x_i, V x_j⟩) V x_j, ``SA(β, K=V, V=V)``, V = diag(λ) in R³ for each row
λ of ``spectra`` (a spectrum class). Four parts:

* the pure-mode rest points x_i = ±e_p of every class, β and n of ``atlas_n`` (consensus, one token apart, the
  balanced split where n is even), found by ``equilibrium``: their unstable count and whole spectrum against the
  closed form (``spectral_selection_theory.pure_spectrum``), and the homogeneous, balanced-bipolar and split
  stability criteria;
* the mixed three-group rest points of each row [a, b, β, m, k] of ``mixed`` (V = diag(a, b) in R²): every zero q
  of the scalar equation g(q) = 0, its tangent velocity and its index (``mixed_q`` in summary.json);
* the basin atlas: ``starts`` uniform starts of n tokens per class, β and n, integrated by RK4 (step ``dt``) to
  ``t1`` in one vmapped ensemble per n, each end state classified as consensus or a split on an eigendirection e_p
  (every token within 1 − ``ALIGN_TOL`` of ±e_p) or "other"; every end on e_p checked stable by the closed form,
  an end the closed form calls unstable (a slow saddle at t1) continued for ``SADDLE_EFOLDS`` e-foldings of its
  unstable eigenvalue, which it must leave;
* the basin map on S²: the outcome as a function of the first token's start y (on a ``map_resolution`` × twice
  that latitude–longitude grid of cell centres, the other n − 1 tokens at fixed uniform starts, n the first of
  ``atlas_n``), and the antipodal pair (y, −y), whose outcome is known exactly: the pair stays antipodal and
  ⟨x, Vx⟩ keeps its sign (d/dt ⟨x, Vx⟩ = 2 tanh(β⟨x, Vx⟩) ‖P⊥_x V x‖²), so it splits on the top eigenvector
  where ⟨y, Vy⟩ > 0 and on the bottom one where ⟨y, Vy⟩ < 0 (in the full flow only where that pair is a stable
  rest point: elsewhere rounding, which breaks the antipodal symmetry, can carry it off).

Statistics (dimensions (d, beta, seed, ...), d = 3 and one seed entry; the mixed part, which has its own β, is
repeated along β): ``basin_fraction`` (…, spectrum, tokens, outcome), ``winner_fraction`` (…, spectrum, tokens,
direction: e_1, e_2, e_3, other), ``unstable_ends`` and ``unstable_kept`` (those still there after their
continuation) (…, spectrum, tokens), ``basin_map``, ``pair_map``,
``pair_map_theory`` (…, spectrum, lat, lon), ``pure_index``, ``pure_index_theory``, ``pure_spectrum_error``,
``pure_residual`` (…, spectrum, tokens, mode, split), ``mixed_q``, ``mixed_velocity``, ``mixed_index`` (…, set,
root).
"""

from __future__ import annotations

import math
import time

import jax.numpy as jnp
import numpy as np

from ....particles import init
from ....particles.fields import SA
from ....solvers import simulate
from ....solvers.equilibrium import equilibrium
from ...analysis import LazyModule
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import STAT_DIMENSIONS, RunResult
from .spectral_selection_theory import (
    bipolar_threshold,
    homogeneous_stable,
    mixed_equation,
    mixed_roots,
    mixed_state,
    pure_spectrum,
    pure_state,
    pure_unstable,
    split_stable,
    symmetric_field,
)

draw = LazyModule(f"{__package__}.spectral_selection_figures")  # this study's figures, imported on first use

D = 3
"""The atlas's dimension: V = diag(λ) in R³."""
OUTCOMES = tuple(f"{kind} e{p + 1}" for p in range(D) for kind in ("consensus", "split")) + ("other",)
"""An end state's class: code 2p consensus on e_p, 2p + 1 a split on ±e_p, 2d anything else."""
SPLITS = ("consensus", "one apart", "balanced")
"""The pure-mode states checked: n₊ = n, n − 1 and n/2 (n even) tokens at +e_p, the rest at −e_p."""
ALIGN_TOL = 1e-3
"""An end state lies on e_p when every token has |⟨x_i, e_p⟩| ≥ 1 − ALIGN_TOL."""
MAX_ROOTS = 4
REST_TOL = 1e-10
"""Largest tangent velocity of a rest point, and largest error of a spectrum against its closed form."""
SADDLE_EFOLDS = 40.0
"""An end on a pure-mode state that the closed form calls unstable is continued for this many e-foldings of its
largest unstable eigenvalue: an end that has not left by then contradicts the closed form, one that has was a slow
saddle at t1 (the split (3, 1) on e_1 of λ = (1, 0.6, 0.3) at β = 1 grows at 0.0169 only)."""
PAIR_MARGIN = 0.05
"""The antipodal pair's check skips starts with |⟨y, Vy⟩| below this (they leave the invariant cone slowly)."""

_DIMS = ["d", "beta", "seed"]
STAT_DIMENSIONS.update(
    basin_fraction=_DIMS + ["spectrum", "tokens", "outcome"],
    winner_fraction=_DIMS + ["spectrum", "tokens", "direction"],
    unstable_ends=_DIMS + ["spectrum", "tokens"],
    unstable_kept=_DIMS + ["spectrum", "tokens"],
    basin_map=_DIMS + ["spectrum", "lat", "lon"],
    pair_map=_DIMS + ["spectrum", "lat", "lon"],
    pair_map_theory=_DIMS + ["spectrum", "lat", "lon"],
    pure_index=_DIMS + ["spectrum", "tokens", "mode", "split"],
    pure_index_theory=_DIMS + ["spectrum", "tokens", "mode", "split"],
    pure_spectrum_error=_DIMS + ["spectrum", "tokens", "mode", "split"],
    pure_residual=_DIMS + ["spectrum", "tokens", "mode", "split"],
    mixed_q=_DIMS + ["set", "root"],
    mixed_velocity=_DIMS + ["set", "root"],
    mixed_index=_DIMS + ["set", "root"],
)


def split_sizes(n: int, split: str) -> tuple[int, int] | None:
    """(n₊, n₋) of a pure-mode state of ``SPLITS``; None for the balanced split of an odd n."""
    if split == "consensus":
        return n, 0
    if split == "one apart":
        return n - 1, 1
    return (n // 2, n // 2) if n % 2 == 0 else None


def classify(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(outcome codes, n₊) of end states x (M, n, d): 2p + (0 consensus, 1 split) where every token lies on ±e_p,
    2d otherwise; n₊ the tokens at +e_p (−1 for "other")."""
    x = np.asarray(x, dtype=float)
    d = x.shape[-1]
    aligned = np.min(np.abs(x), axis=1) >= 1 - ALIGN_TOL  # (M, d)
    on = aligned.any(axis=1)
    p = np.argmax(aligned, axis=1)
    comp = np.take_along_axis(x, p[:, None, None], axis=2)[..., 0]  # (M, n)
    plus = np.sum(comp > 0, axis=1)
    split = (plus > 0) & (plus < x.shape[1])
    # consensus on −e_p is consensus on e_p (the field is odd); n₊ counts the majority sign's tokens then
    plus = np.where(split, plus, x.shape[1])
    return np.where(on, 2 * p + split, 2 * d), np.where(on, plus, -1)


def grid_points(resolution: int) -> np.ndarray:
    """(resolution, 2 resolution, 3): cell centres of the latitude–longitude grid on S²."""
    theta = (np.arange(resolution) + 0.5) * np.pi / resolution
    phi = (np.arange(2 * resolution) + 0.5) * np.pi / resolution
    t, f = np.meshgrid(theta, phi, indexing="ij")
    return np.stack([np.sin(t) * np.cos(f), np.sin(t) * np.sin(f), np.cos(t)], axis=-1)


def pair_theory(points: np.ndarray, lam) -> np.ndarray:
    """The antipodal pair's outcome (``OUTCOMES`` code): a split on the top eigenvector where ⟨y, Vy⟩ > 0, on the
    bottom one where it is negative."""
    lam = np.asarray(lam, dtype=float)
    r = np.einsum("...i,i,...i->...", points, lam, points)
    return np.where(r > 0, 2 * int(np.argmax(lam)) + 1, 2 * int(np.argmin(lam)) + 1)


# -- the parts ------------------------------------------------------------------------------------------------


def _ensemble(spectra, betas, x0, config, t1: float | None = None) -> np.ndarray:
    """End states of one ensemble at ``t1`` (config.t1 by default), members ordered (spectrum, β, start):
    x0 (C·B·S, n, 3)."""
    C, B = len(spectra), len(betas)
    S = x0.shape[0] // (C * B)
    V = np.repeat(np.stack([np.diag(row) for row in spectra]), B * S, axis=0)
    beta = np.tile(np.repeat(np.asarray(betas, dtype=float), S), C)
    field = SA(jnp.asarray(beta), K=jnp.asarray(V), V=jnp.asarray(V))
    t1 = float(config.t1 if t1 is None else t1)
    sol = simulate(field, jnp.asarray(x0), t1, solver="rk4", dt=float(config.dt))
    return np.asarray(sol.xs)[:, -1]


def _kept(lam, beta: float, code: int, plus: int, x: np.ndarray, config) -> int:
    """How many of the end states x (M, n, 3) on the pure-mode state (``code``, n₊ = ``plus``), which the closed
    form calls unstable, are still there after ``SADDLE_EFOLDS`` e-foldings of its largest eigenvalue."""
    n = x.shape[1]
    rate = float(pure_spectrum(lam, code // 2, plus, n - plus, beta)[0])
    ends = _ensemble([lam], [beta], x.astype(np.float32), config, SADDLE_EFOLDS / rate)
    again, plus_again = classify(ends)
    return int(np.sum((again == code) & (plus_again == plus)))


def _atlas(config) -> dict:
    spectra, betas, S = config.spectra, config.beta, int(config.starts)
    C, B, N = len(spectra), len(betas), len(config.atlas_n)
    fraction = np.zeros((B, C, N, len(OUTCOMES)))
    winner = np.zeros((B, C, N, D + 1))
    unstable, kept = np.zeros((B, C, N)), np.zeros((B, C, N))
    for j, n in enumerate(config.atlas_n):
        x0 = np.asarray(init.uniform(int(config.seed) + j, int(n), D, batch=C * B * S), dtype=np.float32)
        ends = _ensemble(spectra, betas, x0, config)
        codes, plus = classify(ends)
        codes, plus, ends = codes.reshape(C, B, S), plus.reshape(C, B, S), ends.reshape(C, B, S, int(n), D)
        for c, lam in enumerate(spectra):
            for b, beta in enumerate(betas):
                counts = np.bincount(codes[c, b], minlength=len(OUTCOMES))
                fraction[b, c, j] = counts / S
                winner[b, c, j] = np.append(counts[:-1].reshape(D, 2).sum(axis=1), counts[-1]) / S
                for code, k in {(int(o), int(m)) for o, m in zip(codes[c, b], plus[c, b]) if o < 2 * D}:
                    if pure_unstable(lam, code // 2, k, int(n) - k, float(beta)) > 0:
                        there = (codes[c, b] == code) & (plus[c, b] == k)
                        unstable[b, c, j] += np.sum(there)
                        kept[b, c, j] += _kept(lam, float(beta), code, k, ends[c, b][there], config)
    return dict(basin_fraction=fraction, winner_fraction=winner, unstable_ends=unstable, unstable_kept=kept)


def _maps(config) -> dict:
    spectra, betas, res = config.spectra, config.beta, int(config.map_resolution)
    C, B = len(spectra), len(betas)
    points = grid_points(res)
    G = points.shape[0] * points.shape[1]
    n = int(config.atlas_n[0])
    others = np.asarray(init.uniform(int(config.seed) + 1000, n - 1, D), dtype=float)
    y = np.tile(points.reshape(G, 1, D), (C * B, 1, 1))
    many = np.concatenate([y, np.broadcast_to(others, (y.shape[0], n - 1, D))], axis=1).astype(np.float32)
    pair = np.concatenate([y, -y], axis=1).astype(np.float32)
    shape = (C, B, res, 2 * res)
    basin = classify(_ensemble(spectra, betas, many, config))[0].reshape(shape)
    pairs = classify(_ensemble(spectra, betas, pair, config))[0].reshape(shape)
    theory = np.stack([np.broadcast_to(pair_theory(points, lam), shape[1:]) for lam in spectra])
    move = lambda a: np.moveaxis(a, 1, 0).astype(float)  # noqa: E731  (β first, as the statistics' dimensions)
    return dict(basin_map=move(basin), pair_map=move(pairs), pair_map_theory=move(theory))


def _pure(config) -> dict:
    spectra, betas, sizes = config.spectra, config.beta, config.atlas_n
    shape = (len(betas), len(spectra), len(sizes), D, len(SPLITS))
    out = {
        k: np.full(shape, np.nan) for k in ("pure_index", "pure_index_theory", "pure_spectrum_error", "pure_residual")
    }
    for b, beta in enumerate(betas):
        for c, lam in enumerate(spectra):
            field = symmetric_field(lam, float(beta))
            for j, n in enumerate(sizes):
                for p in range(D):
                    for s, split in enumerate(SPLITS):
                        nm = split_sizes(int(n), split)
                        if nm is None:
                            continue
                        r = equilibrium(field, pure_state(D, p, *nm), strict=False)
                        exact = pure_spectrum(lam, p, *nm, float(beta))
                        found = np.sort(r.eigenvalues.real)[::-1]
                        where = (b, c, j, p, s)
                        out["pure_index"][where] = r.unstable
                        out["pure_index_theory"][where] = pure_unstable(lam, p, *nm, float(beta))
                        out["pure_spectrum_error"][where] = float(np.max(np.abs(found - exact)))
                        out["pure_residual"][where] = r.residual
    return out


def _mixed(config) -> dict:
    sets = config.mixed
    q = np.full((len(sets), MAX_ROOTS), np.nan)
    velocity, index = np.full_like(q, np.nan), np.full_like(q, np.nan)
    for i, (a, b, beta, m, k) in enumerate(sets):
        field = symmetric_field((a, b), beta)
        for j, root in enumerate(mixed_roots(a, b, beta, int(m), int(k))[:MAX_ROOTS]):
            x = mixed_state(float(root), int(m), int(k))
            r = equilibrium(field, x, strict=False)
            q[i, j], index[i, j] = root, r.unstable
            # the closed-form state's own velocity, and how far Newton moved it (0 for an exact rest point)
            velocity[i, j] = max(float(np.max(np.abs(np.asarray(field(0.0, x))))), float(np.max(np.abs(r.x - x))))
    return dict(mixed_q=q, mixed_velocity=velocity, mixed_index=index)


def run(config, *, progress=None) -> RunResult:
    """Every part of the module docstring: rest points in float64, the ensembles in float32."""
    start = time.perf_counter()
    B = len(config.beta)
    stats = {**_atlas(config), **_maps(config), **_pure(config)}
    stats.update({k: np.broadcast_to(v, (B,) + v.shape).copy() for k, v in _mixed(config).items()})
    stats = {k: np.asarray(v, dtype=float)[None, :, None] for k, v in stats.items()}
    return RunResult.of_statistics(config, stats, {}, start=start, members=(1, B, 1))


# -- refusals, memory, checks, figures --------------------------------------------------------------------------


def requires(config) -> None:
    """β > 0; three distinct eigenvalues per spectrum class; mixed rows [a, b, β, m, k] with a, b, β ≠ 0, integers
    m ≥ 0, k ≥ 1 and m + 2k ≤ 32."""
    if min(config.beta) <= 0:
        raise ConfigError(f"spectral-selection takes β > 0, got beta = {list(config.beta)}")
    for i, row in enumerate(config.spectra):
        if len(row) != D or len(set(row)) != D:
            raise ConfigError(
                f"spectra[{i}] must be {D} distinct eigenvalues (V = diag(λ) in R³), got {list(row)}; "
                "a repeated eigenvalue has no single winning direction"
            )
    for i, row in enumerate(config.mixed):
        if len(row) != 5:
            raise ConfigError(f"mixed[{i}] must be [a, b, beta, m, k] (5 numbers), got {list(row)}")
        a, b, beta, m, k = row
        if 0.0 in (a, b, beta):
            raise ConfigError(f"mixed[{i}] = {list(row)}: a, b and beta must be nonzero")
        if not (float(m).is_integer() and float(k).is_integer() and m >= 0 and k >= 1 and m + 2 * k <= 32):
            raise ConfigError(
                f"mixed[{i}] = {list(row)}: m and k are token counts, integers m ≥ 0, k ≥ 1 with m + 2k ≤ 32"
            )
    if config.dt <= 0:
        raise ConfigError("spectral-selection integrates with RK4: set dt > 0")
    if math.ceil(config.t1 / config.dt) > config.max_steps:
        raise ConfigError(f"t1/dt = {config.t1 / config.dt:.0f} steps exceeds max_steps = {config.max_steps}")


def members(config) -> int:
    """Ensemble members of every simulation: the atlas's and the two maps'."""
    C, B = len(config.spectra), len(config.beta)
    return C * B * (int(config.starts) * len(config.atlas_n) + 4 * int(config.map_resolution) ** 2)


def memory(config) -> dict:
    """The largest ensemble's RK4 states (float32, a dozen copies), the largest rest point's Jacobian."""
    C, B = len(config.spectra), len(config.beta)
    n = max(config.atlas_n)
    ensemble = C * B * max(int(config.starts), 2 * int(config.map_resolution) ** 2)
    N = max([n * (D - 1)] + [int(m + 2 * k) for *_, m, k in config.mixed])
    return {
        "the ensembles' states [spectra, beta, starts, atlas_n, map_resolution]": 4 * 12 * ensemble * n * D,
        "the rest points' Jacobians [atlas_n, mixed]": 8 * 12 * N * N,
    }


def _mask(s, name) -> np.ndarray:
    return np.asarray(s[name])[0, :, 0]


def checks(result: RunResult) -> list[Check]:
    """The pure-mode spectra and criteria, the mixed rest points, the atlas's end states, the antipodal map."""
    c, s = result.config, result.stats
    out = []
    err, res = _mask(s, "pure_spectrum_error"), _mask(s, "pure_residual")
    idx, theory = _mask(s, "pure_index"), _mask(s, "pure_index_theory")
    known = np.isfinite(idx)
    worst = float(np.nanmax(np.maximum(err, res)))
    out.append(
        Check(
            "pure-mode states ±e_p: rest points, whole spectrum and unstable count vs the closed form",
            f"velocity and spectrum error ≤ {REST_TOL:g}, counts equal",
            f"worst {worst:.1e}, {int(np.sum(idx[known] != theory[known]))} count mismatches of {int(known.sum())}",
            bool(worst <= REST_TOL and np.all(idx[known] == theory[known])),
        )
    )
    bad = total = 0
    bip_bad = bip_total = split_bad = split_total = 0
    for b, beta in enumerate(c.beta):
        for k, lam in enumerate(c.spectra):
            lam = np.asarray(lam)
            top = int(np.argmax(lam))
            for j, n in enumerate(c.atlas_n):
                for p in range(D):
                    stable = idx[b, k, j, p] == 0
                    total += 1
                    bad += int(stable[0] != homogeneous_stable(lam, p))
                    if np.isfinite(idx[b, k, j, p, 2]) and p == top and lam[p] > 0:
                        bip_total += 1
                        rule = bool(np.all(np.delete(lam, p) < bipolar_threshold(lam[p], beta)))
                        bip_bad += int(stable[2] != rule)
                    if lam[p] > 0:
                        split_total += 1
                        split_bad += int(stable[1] != split_stable(lam, p, int(n) - 1, 1, float(beta)))
    out.append(
        Check(
            "all tokens at e_p: stable iff λ_p > 0 and λ_k < λ_p (k ≠ p)",
            "the Jacobian agrees at every class, β, n and p",
            f"{bad} mismatches of {total}",
            bad == 0,
        )
    )
    out.append(
        Check(
            "balanced split on the top eigenvector: stable iff λ_k < λ₊ tanh(βλ₊)",
            "the Jacobian agrees wherever λ₊ > 0 and n is even",
            f"{bip_bad} mismatches of {bip_total}",
            bip_bad == 0 and bip_total > 0,
        )
    )
    out.append(
        Check(
            "one token apart on e_p (λ_p > 0): stable iff λ_p > |log r|/(2β) holds the group and λ_k < σ(c, r) λ_p",
            "the Jacobian agrees",
            f"{split_bad} mismatches of {split_total}",
            split_bad == 0,
        )
    )
    q, vel = _mask(s, "mixed_q")[0], _mask(s, "mixed_velocity")[0]
    found = np.isfinite(q)
    worst = float(np.max(vel[found])) if found.any() else float("nan")
    out.append(
        Check(
            "mixed three-group states (u m times, q u ± s v k times): each zero of g(q) is a rest point",
            f"velocity ≤ {REST_TOL:g}, Newton moves it ≤ {REST_TOL:g}; at least one q per set",
            f"{int(found.sum())} rest points in {len(c.mixed)} sets, worst {worst:.1e}",
            bool(found.any(axis=1).all() and worst <= REST_TOL),
        )
    )
    unstable, kept = _mask(s, "unstable_ends"), _mask(s, "unstable_kept")
    fraction = _mask(s, "basin_fraction")
    on = float(np.mean(1 - fraction[..., -1]))
    out.append(
        Check(
            "basin atlas: every end state on an eigendirection is a stable pure-mode state (closed form)",
            f"none unstable, or left within {SADDLE_EFOLDS:g} e-foldings of its unstable eigenvalue (a slow saddle)",
            f"{int(unstable.sum())} on an unstable state at t1, {int(kept.sum())} still there after their "
            f"continuation; {100 * on:.1f} % of the members end on an eigendirection",
            bool(kept.sum() == 0),
        )
    )
    pair, want = _mask(s, "pair_map"), _mask(s, "pair_map_theory")
    points = grid_points(int(c.map_resolution))
    r = np.stack([np.einsum("...i,i,...i->...", points, np.asarray(lam), points) for lam in c.spectra])
    # the rule holds in the invariant antipodal subspace; in the full flow only where its end state is stable
    held = np.array(
        [
            [
                np.isin(want[b, k], [2 * p + 1 for p in range(D) if pure_unstable(lam, p, 1, 1, float(beta)) == 0])
                for k, lam in enumerate(c.spectra)
            ]
            for b, beta in enumerate(c.beta)
        ]
    )
    away = np.broadcast_to(np.abs(r) >= PAIR_MARGIN, pair.shape) & held
    agree = float(np.mean(pair[away] == want[away])) if away.any() else float("nan")
    out.append(
        Check(
            "antipodal pair (y, −y): splits on the top eigenvector where ⟨y, Vy⟩ > 0, the bottom one where < 0",
            f"≥ 99 % of the map points with |⟨y, Vy⟩| ≥ {PAIR_MARGIN:g} whose predicted pair is stable",
            f"{100 * agree:.2f} % of {int(away.sum())}",
            bool(agree >= 0.99),  # NaN (no such point) fails
        )
    )
    return out


def _summary(result: RunResult) -> dict:
    c, s = result.config, result.stats
    q, vel, idx = (_mask(s, k)[0] for k in ("mixed_q", "mixed_velocity", "mixed_index"))
    mixed = []
    for i, (a, b, beta, m, k) in enumerate(c.mixed):
        found = np.isfinite(q[i])
        mixed.append(
            dict(
                a=a,
                b=b,
                beta=beta,
                m=int(m),
                k=int(k),
                q=[float(v) for v in q[i][found]],
                velocity=[float(v) for v in vel[i][found]],
                unstable=[int(v) for v in idx[i][found]],
                at_rest=bool(np.all(vel[i][found] <= REST_TOL)),
            )
        )
    winner = _mask(s, "winner_fraction")
    top = {
        f"[{', '.join(f'{v:g}' for v in lam)}]": [
            float(np.mean(winner[b, k, :, int(np.argmax(lam))])) for b in range(len(c.beta))
        ]
        for k, lam in enumerate(c.spectra)
    }
    return {"mixed_q": mixed, "top_eigenvector_wins": {"beta": [float(b) for b in c.beta], "fraction": top}}


def figures(result: RunResult) -> dict:
    """The basin fractions over β, n and the spectrum classes; the basin maps; g(q) with its zeros."""
    c, s = result.config, result.stats
    betas = np.asarray(c.beta, dtype=float)
    sets = [tuple(row) for row in c.mixed]
    return {
        "basin_fractions": lambda p: draw.basin_fractions(
            betas, list(c.atlas_n), [list(v) for v in c.spectra], _mask(s, "basin_fraction"), list(OUTCOMES), path=p
        ),
        "basin_map": lambda p: draw.basin_maps(
            betas,
            [list(v) for v in c.spectra],
            _mask(s, "basin_map"),
            _mask(s, "pair_map"),
            list(OUTCOMES),
            n=int(c.atlas_n[0]),
            path=p,
        ),
        "mixed_states": lambda p: draw.mixed_equations(
            sets,
            [np.linspace(-0.999, 0.999, 801)] * len(sets),
            [mixed_equation(np.linspace(-0.999, 0.999, 801), a, b, beta, m, k) for a, b, beta, m, k in sets],
            _mask(s, "mixed_q")[0],
            _mask(s, "mixed_index")[0],
            path=p,
        ),
    }


EXPERIMENT = register(
    Experiment(
        "spectral-selection",
        "symmetric V: pure-mode and mixed rest points with their stability in closed form, basin fractions over "
        "spectrum classes, β and n, the basin map on S²",
        "arXiv 2604.26085, 2511.11553",
        dict(
            experiment="spectral-selection",
            beta=[0.5, 1.0, 2.0, 4.0],
            seeds=1,
            starts=1024,
            seed=0,
            t1=150.0,
            dt=0.1,
            atlas_n=[4, 8, 16],
            map_resolution=32,
        ),
        dict(
            beta=[1.0, 4.0],
            starts=64,
            t1=60.0,
            atlas_n=[4],
            map_resolution=8,
            mixed=[[1.0, 0.5, 2.0, 2, 1], [1.0, 2.0, 1.0, 2, 1]],
        ),
        figures,
        checks,
        needs=lambda config: (),
        run=run,
        keys=("beta", "starts", "seed", "t1", "dt", "max_steps", "spectra", "mixed", "atlas_n", "map_resolution"),
        memory=memory,
        requires=requires,
        headline=lambda c: (
            f"V = diag(λ) for {len(c.spectra)} spectrum classes in R³ at β = {list(c.beta)}, n = {list(c.atlas_n)}: "
            f"{members(c)} members to t1 = {c.t1:g}, {len(c.mixed)} mixed sets"
        ),
        summary=_summary,
        figures_read_members=lambda config: False,
        runtime="8.7 min of CPU on 2 shared CPU cores, 14 to 20 min of wall time beside other runs (the atlas's ensembles)",
    )
)
