"""β_*^{(d)} of the bifurcation experiment (docs/model.md §13.6): the pitchfork coefficient's sign change from the
stationary densities, the closed form and the continued branches' folds agree, on the circle and on S², S³; the
folds lie beyond σ_# above β_* and are absent below; summary.json's ``beta_star`` is keyed by d; on S² the particles'
hysteresis loop lies between the threshold and the fold."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from attnflow.experiments.studies.noisy_transition import bifurcation
from attnflow.experiments.studies.noisy_transition.noisy_transition_theory import critical_beta


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 3, 4])
def test_beta_star_three_ways(d):
    root, closed, fold = bifurcation.beta_star(d, "usa", 32)
    assert closed == critical_beta(d)
    assert abs(root - closed) <= 1e-6 and abs(fold - closed) <= 1e-6
    assert round(root, 4) == {2: 2.4469, 3: 1.8162, 4: 1.5753}[d]  # the circle's value unchanged


@pytest.mark.parametrize("d", [3, 4])
def test_degree_one_branch_folds_beyond_the_threshold_only_above_beta_star(d):
    above = bifurcation.degree_one_fold(critical_beta(d) + 0.3, d, modes=24)
    assert above is not None and above[0] > 1.0 and 0 < above[1] < 1
    assert bifurcation.degree_one_fold(critical_beta(d) - 0.3, d, modes=24) is None


def test_summary_keys_beta_star_by_d():
    stars = np.array([[2.4469, 2.44691, 2.44692], [1.8162, 1.81621, 1.81622], [1.5753, 1.57531, 1.57532]])
    result = SimpleNamespace(
        config=SimpleNamespace(sphere_dims=[4, 3, 4]), stats={"beta_star": stars[None, None, None].repeat(2, axis=1)}
    )
    out = bifurcation._summary(result)
    assert out["beta_star"] == {"2": 2.4469, "3": 1.8162, "4": 1.5753}
    assert out["beta_star_closed_form"]["3"] == 1.81621 and out["beta_star_fold"]["4"] == 1.57532


@pytest.mark.slow
def test_particles_hysteresis_on_the_sphere_lies_between_threshold_and_fold():
    from attnflow.experiments.config import load_config
    from attnflow.experiments.registry import get

    beta, ratios = 6.0, [0.9, 1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.4]
    fold = bifurcation.degree_one_fold(beta, 3, modes=48)
    assert fold is not None and fold[0] > 1.0
    e = get("noisy-transition")
    config = load_config(
        None, ["progress=false", "d=[3]", f"beta=[{beta}]", f"noise_ratios={ratios}"], base={**e.defaults, **e.quick}
    )
    order = bifurcation.nt.run(config).stats["order"][0, 0]
    down, up = bifurcation.nt.sweep_crossings(np.asarray(ratios), order)[:, -1]
    tol = bifurcation.LOOP_TOL
    assert 1.0 - tol <= down < up <= fold[0] * (1.0 + tol)  # S² at β = 6: σ_# ≤ σ_down < σ_up ≤ σ_fold = 1.2707 σ_#
