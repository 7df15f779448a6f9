"""bifurcation on the spheres S², S³ at ``sphere_beta`` (docs/model.md §13.6): the degree-1 zonal branch continued
from σ_# through its fold against the closed forms (branch point, pitchfork curvature, the stability change at the
fold), the hysteresis loop's bounds with their statistical tolerance, the refusal of a β at or below β_*, and the
particles' loop between the threshold and the fold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.registry import get
from attnflow.experiments.studies.noisy_transition import bifurcation
from attnflow.experiments.studies.noisy_transition.noisy_transition_theory import (
    critical_beta,
    critical_noise,
    pitchfork_closed_form,
    threshold_coupling,
)
from attnflow.solvers.stationary_sphere import sphere_branch_threshold


def _config(*overrides, quick=True):
    e = get("bifurcation")
    return load_config(None, ["progress=false", *overrides], base={**e.defaults, **(e.quick if quick else {})})


@pytest.mark.parametrize("d", [3, 4])
def test_degree_one_branch_starts_at_the_threshold_with_the_closed_form_curvature_and_turns_stable_at_its_fold(d):
    beta = 4.0
    branch, s1 = bifurcation.degree_one_branch(beta, d, modes=64, lowest=0.9, max_points=400)
    # the branch point: σ_#² = 2μ_1/β, the paper's K_#^{(d)} = 1/σ_#², the particles' threshold too
    assert s1 == pytest.approx(sphere_branch_threshold(beta, d, 1, "usa"), rel=1e-12)
    assert 1.0 / s1**2 == pytest.approx(threshold_coupling(beta, d), rel=1e-10)
    assert s1 == pytest.approx(critical_noise(beta, d, "usa"), rel=1e-10)
    # near the branch point K/K_# − 1 = m_1² d(1 − dρ)/((d + 2)(1 − ρ)): negative above β_*, more noise first
    K, m = 1.0 / branch.p**2, branch.measure
    near = (m > 0.02) & (m < 0.06) & (np.arange(m.size) < np.argmax(m > 0.3))
    slope = np.polyfit(m[near] ** 2, K[near] - 1.0 / s1**2, 2)[1]
    assert slope < 0
    assert slope == pytest.approx(float(pitchfork_closed_form(beta, d)), rel=1e-3)
    # one fold beyond σ_#; unstable from the branch point to the fold, stable past it (the ordered state)
    assert len(branch.folds) == 1
    fold = branch.folds[0]
    assert 1.0 < fold.p / s1 < 1.3
    j = int(np.argmax(branch.p))
    assert abs(branch.p[j] - fold.p) <= 1e-2 * s1
    # (the first points, within 1e-2 of m_1 = 0, have an eigenvalue O(m_1²) of either sign)
    assert not branch.stable[(m > 1e-2) & (np.arange(m.size) < j - 1)].any() and branch.stable[j + 2 :].all()
    assert branch.measure[-1] > fold.measure  # down to 0.9 σ_#, more ordered than at the fold


def test_degree_one_fold_is_the_branch_s_first_fold():
    branch, s1 = bifurcation.degree_one_branch(4.0, 3, modes=32)
    assert bifurcation.degree_one_fold(4.0, 3, modes=32) == (branch.folds[0].p / s1, branch.folds[0].measure)


def _loop(down, up, levels, seeds=4, spread=0.0):
    """A made-up (seeds, sweep, level) order: 1 below each sweep's crossing, 0 above it (each seed shifted)."""
    order = np.empty((seeds, 2, levels.size))
    for k in range(seeds):
        shift = spread * (k - (seeds - 1) / 2)
        for s, at in enumerate((down, up)):
            order[k, s] = (levels < at + shift).astype(float)
    return order


def test_loop_bounds_tolerance_is_three_standard_errors_and_the_levels_spacing():
    levels = np.array([0.8, 0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3])
    inside = bifurcation.loop_bounds(levels, _loop(1.02, 1.12, levels), fold=1.124)
    assert inside["ok"] and inside["se"].tolist() == [0.0, 0.0]
    assert inside["down"] == pytest.approx(1.025) and inside["up"] == pytest.approx(1.125)  # halfway, interpolated
    assert inside["tol_down"] == pytest.approx(0.1) and inside["tol_up"] == pytest.approx(0.05)  # 0.9–1, 1.1–1.15
    assert bifurcation.spacing_at(levels, 1.124) == pytest.approx(0.05)
    assert bifurcation.spacing_at(levels, 1.25) == pytest.approx(0.1)
    assert bifurcation.spacing_at(levels, 1.05) == pytest.approx(0.05) and bifurcation.spacing_at(
        levels, 2.0
    ) == pytest.approx(0.1)
    # the sweep up past the fold by more than its tolerance, or no loop: refused
    assert not bifurcation.loop_bounds(levels, _loop(1.02, 1.22, levels), fold=1.124)["ok"]
    assert not bifurcation.loop_bounds(levels, _loop(1.07, 1.07, levels), fold=1.124)["ok"]
    assert not bifurcation.loop_bounds(levels, _loop(1.02, 1.12, levels), fold=float("nan"))["ok"]
    # spread seeds widen the tolerance by 3 standard errors of their crossings
    spread = bifurcation.loop_bounds(levels, _loop(1.02, 1.12, levels, spread=0.02), fold=1.124)
    per_seed = bifurcation.nt.sweep_crossings(levels, _loop(1.02, 1.12, levels, spread=0.02))[1, :-1]
    assert spread["tol_up"] == pytest.approx(3 * np.std(per_seed, ddof=1) / 2 + 0.05)


def test_sphere_beta_at_or_below_beta_star_is_refused_and_zero_means_no_sweeps():
    e = get("bifurcation")
    with pytest.raises(ConfigError, match="sphere_beta"):
        e.requires(_config(f"sphere_beta={critical_beta(3) - 0.01}"))
    e.requires(_config("sphere_beta=0"))
    assert bifurcation.sphere_sweep_config(_config()).d == (3, 4)
    assert bifurcation.sphere_sweep_config(_config()).beta == (4.0,)


@pytest.mark.slow
def test_particles_hysteresis_on_s2_and_s3_lies_between_threshold_and_fold():
    config = _config()  # n = 128, 4 seeds, eight levels, S² and S³ at β = 4
    stats = bifurcation.sphere_stats(bifurcation.sphere_sweeps(config, progress=False), 1, config.seeds)
    checks = bifurcation._sphere_checks(SimpleNamespace(config=config, stats=stats))
    assert [ch.name.split(",")[0] for ch in checks] == ["[MR] S^2", "[MR] S^3"]
    assert all(ch.passed for ch in checks), [ch.measured for ch in checks]
    fold = np.asarray(stats["sphere_fold"])[0, 0, 0, :, 0]
    assert fold == pytest.approx([1.1239, 1.2207], abs=1e-4)  # S² and S³ at β = 4 (docs/model.md §13.6)
