"""Zonal stationary densities of the noisy mean field on S² and S³ (solvers/stationary_sphere.py, docs/model.md
§13.6): the Gegenbauer tables, the branch point at the paper's K_#^{(d)}, the Gibbs form checked by direct
quadrature of Φ over the sphere, the pitchfork coefficient against its closed form and its sign change β_*^{(d)}."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import roots_jacobi

from attnflow.experiments.studies.noisy_transition.noisy_transition_theory import (
    critical_beta,
    pitchfork_closed_form,
    threshold_coupling,
)
from attnflow.particles.errors import InputError
from attnflow.solvers import stationary_sphere as ss
from attnflow.solvers.continuation import continuation


@pytest.mark.parametrize("d", [3, 4, 5])
def test_gegenbauer_tables_are_the_zonal_harmonics(d):
    system = ss.StationarySphere(1.0, d, modes=12)
    k = np.arange(12)
    dims = [1] + [
        (2 * j + d - 2) * math.factorial(j + d - 3) / (math.factorial(j) * math.factorial(d - 2)) for j in k[1:]
    ]
    np.testing.assert_allclose(np.asarray(system.dims), dims, rtol=1e-12)  # N_k, the degree-k harmonics' dimension
    t = np.linspace(-1, 1, 7)
    P = ss.zonal_polynomials(d, 4, t)
    np.testing.assert_allclose(P[2], (d * t**2 - 1) / (d - 1), atol=1e-15)
    np.testing.assert_allclose(P[:, -1], 1.0)
    if d == 4:  # U_k(cos θ)/(k+1) = sin((k+1)θ)/((k+1) sin θ)
        th = np.arccos(t[1:-1])
        np.testing.assert_allclose(P[3, 1:-1], np.sin(4 * th) / (4 * np.sin(th)), atol=1e-14)


@pytest.mark.parametrize("d", [3, 4])
def test_branch_point_is_the_papers_threshold(d):
    for beta in (0.5, 2.0, 7.0):
        K = 1.0 / ss.sphere_branch_threshold(beta, d) ** 2
        np.testing.assert_allclose(K, float(threshold_coupling(beta, d)), rtol=1e-13)
    # the uniform density's Jacobian: diag(2Kμ_k/β), degree 1 unstable just below σ_#, none above
    s1 = ss.sphere_branch_threshold(2.0, d)
    system = ss.StationarySphere(2.0, d, modes=16)
    above, below = system.stability(np.zeros(15), 1.001 * s1), system.stability(np.zeros(15), 0.999 * s1)
    assert above[1] == 0 and below[1] == 1
    np.testing.assert_allclose(below[0][0], 1 / 0.999**2 - 1, rtol=1e-12)
    # continued in σ, the uniform density meets its branch points at σ_1 and σ_2
    s2 = ss.sphere_branch_threshold(2.0, d, 2)
    uniform = continuation(
        system, None, 1.1 * s1, p_range=(0.9 * s2, 1.2 * s1), direction=-1, ds=0.02 * s1, ds_max=0.04 * s1
    )
    found = sorted((bp.p for bp in uniform.branch_points), reverse=True)[:2]
    np.testing.assert_allclose(found, [s1, s2], rtol=0, atol=1e-10)


def _direct_phi(t, rho, beta, d):
    """Φ(t) = ∫ e^{β⟨x,y⟩} ρ(y) dy by quadrature over S^{d−1} (no Funk–Hecke): y = (s, √(1−s²) ω), ω ∈ S^{d−2},
    ⟨x,y⟩ = ts + √(1−t²)√(1−s²) cos φ, φ the angle of ω to x's transverse part (weight sin^{d−3} φ)."""
    a = (d - 3) / 2.0
    s, ws = roots_jacobi(t.size, a, a)  # the same nodes as the density's
    phi, wp = roots_jacobi(64, (d - 4) / 2.0, (d - 4) / 2.0)  # in cos φ, weight (1 − c²)^{(d−4)/2}
    ws, wp = ws / ws.sum(), wp / wp.sum()
    inner = (
        t[:, None, None] * s[None, :, None]
        + np.sqrt(1 - t**2)[:, None, None] * np.sqrt(1 - s**2)[None, :, None] * phi[None, None, :]
    )
    area = 2 * math.pi ** (d / 2) / math.gamma(d / 2)
    return np.einsum("tsp,s,p,s->t", np.exp(beta * inner), ws, wp, rho) * area


@pytest.mark.parametrize("d", [3, 4])
def test_stationary_density_is_a_rest_point(d):
    beta = 1.5
    sigma = 0.9 * ss.sphere_branch_threshold(beta, d)
    system = ss.StationarySphere(beta, d, modes=24)
    s = ss.stationary_sphere(beta, d, sigma, np.exp(2.0 * system.nodes), modes=24)
    assert s.residual <= 1e-13 and abs(s.order) > 0.1 and s.stable
    area = 2 * math.pi ** (d / 2) / math.gamma(d / 2)
    w = roots_jacobi(s.t.size, (d - 3) / 2, (d - 3) / 2)[1]
    np.testing.assert_allclose(np.sum(w / w.sum() * s.rho) * area, 1.0, rtol=1e-13)
    gap = np.log(s.rho) - 2 * s.coupling * _direct_phi(s.t, s.rho, beta, d) / beta
    assert np.ptp(gap) <= 1e-10  # ρ ∝ exp(2KΦ[ρ]/β): zero flux, a stationary density
    # the uniform density is a rest point too, unstable below σ_#
    u = ss.stationary_sphere(beta, d, sigma, modes=24)
    assert u.order == 0 and u.unstable == 1


@pytest.mark.parametrize("d", [3, 4])
def test_pitchfork_coefficient_matches_its_closed_form_and_changes_sign_at_beta_star(d):
    for beta in (1.0, 3.0):
        got = ss.sphere_pitchfork_coefficient(beta, d)
        np.testing.assert_allclose(got, float(pitchfork_closed_form(beta, d)), rtol=1e-6)
    assert ss.sphere_pitchfork_coefficient(1.0, d) > 0 > ss.sphere_pitchfork_coefficient(3.0, d)
    root = ss.sphere_critical_beta(d, bracket=(1.0, 3.0), xtol=1e-10)
    assert abs(root - critical_beta(d)) <= 1e-6
    assert round(root, 4) == {3: 1.8162, 4: 1.5753}[d]


def test_bad_arguments_are_refused():
    with pytest.raises(InputError, match="d must be"):
        ss.StationarySphere(1.0, 2)
    with pytest.raises(InputError, match="model"):
        ss.StationarySphere(1.0, 3, "bogus")
    with pytest.raises(InputError, match="beta"):
        ss.StationarySphere(-1.0, 3)
    with pytest.raises(InputError, match="guess"):
        ss.stationary_sphere(1.0, 3, 1.0, np.ones(5), modes=16)
    with pytest.raises(InputError, match="bracket"):
        ss.sphere_critical_beta(3, bracket=(2.0, 3.0))
