"""Stationary densities of the noisy mean field on the circle (solvers/stationary.py, docs/model.md §13.3): the
Gibbs form in attnflow's units, the branch points at the modes' linear thresholds, the pitchfork turning
subcritical at β*(2) of arXiv 2606.05140, and the linearized spectrum against the time-dependent solver."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import iv

import attnflow as af
from attnflow.experiments.studies.noisy_transition.noisy_transition_theory import critical_beta, critical_noise
from attnflow.solvers import circle_meanfield as mf
from attnflow.solvers import stationary


def _phi(rho, beta):
    """Φ(θ) = ∫ e^{β cos(θ−φ)} ρ(φ) dφ on the grid, by direct quadrature."""
    theta = mf.theta_grid(rho.size // 2)
    kernel = np.exp(beta * np.cos(theta[:, None] - theta[None, :]))
    return kernel @ rho * (2 * np.pi / rho.size)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["usa", "sa"])
def test_stationary_density_has_the_gibbs_form_and_does_not_move(model):
    beta = 1.5
    sigma = 0.8 * float(stationary.branch_threshold(beta, 1, model))
    theta = mf.theta_grid(48)
    s = af.stationary_circle(beta, sigma, np.exp(2.0 * np.cos(theta)), model=model)
    assert s.residual <= 1e-13 and s.order > 0.1 and s.stable
    K, phi = 1.0 / sigma**2, _phi(s.rho, beta)
    log_gibbs = 2 * K * phi / beta if model == "usa" else (2 * K / beta) * np.log(phi)
    gap = np.log(s.rho) - log_gibbs
    assert np.ptp(gap) <= 1e-11  # ρ ∝ exp(2KΦ/β) (USA), Φ^{2K/β} (SA)
    sol = af.meanfield_circle(s.rho, beta, 5.0, model=model, noise=sigma, rtol=1e-12, atol=1e-14)
    assert np.max(np.abs(sol.rho[-1] - s.rho)) <= 1e-9  # stationary under the time-dependent solver


@pytest.mark.slow
@pytest.mark.parametrize("model", ["usa", "sa"])
def test_branch_points_of_the_uniform_density_are_the_linear_thresholds(model):
    beta = 2.0
    sigmas = [float(stationary.branch_threshold(beta, k, model)) for k in (1, 2, 3)]
    if model == "usa":
        np.testing.assert_allclose(sigmas[0], critical_noise(beta, 2), rtol=1e-14)
        np.testing.assert_allclose(np.square(sigmas), [2 * iv(k, beta) / beta for k in (1, 2, 3)], rtol=1e-12)
    system = af.StationaryCircle(beta, model, modes=32)
    branch = af.continuation(
        system,
        None,
        1.2 * sigmas[0],
        p_range=(0.8 * sigmas[2], 1.3 * sigmas[0]),
        direction=-1,
        ds=0.02 * sigmas[0],
        ds_max=0.04 * sigmas[0],
    )
    found = sorted(bp.p for bp in branch.branch_points)[::-1][:3]
    np.testing.assert_allclose(found, sigmas, rtol=0, atol=1e-10)
    # the uniform density's spectrum: every mode k twice (cos, sin), k² I_k/β − σ²k²/2 (USA) from growth_rates
    values, unstable, zero = system.stability(np.zeros(31), 0.9 * sigmas[0])
    k = np.arange(1, 32)
    rates = mf.growth_rates(k, beta, model, noise=0.9 * sigmas[0])
    np.testing.assert_allclose(np.sort(values.real), np.sort(np.repeat(rates, 2)), atol=1e-10)
    assert unstable == 2 and zero == 0


def test_mode_one_turns_subcritical_at_beta_star():
    assert stationary.pitchfork_coefficient(1.0) > 0 > stationary.pitchfork_coefficient(8.0)
    root = brentq(lambda b: stationary.pitchfork_coefficient(b, amplitude=5e-3), 2.0, 3.0, xtol=1e-12)
    assert abs(root - critical_beta(2)) <= 1e-6


def test_subcritical_branch_folds_beyond_the_threshold_and_changes_stability_there():
    beta = 8.0
    s1 = float(stationary.branch_threshold(beta, 1))
    uniform = af.continuation(
        af.StationaryCircle(beta, modes=48), None, 1.05 * s1, p_range=(0.95 * s1, 1.1 * s1), direction=-1, ds=0.01 * s1
    )
    bp = uniform.branch_points[0]
    assert abs(bp.p - s1) <= 1e-10
    branch = af.continuation(
        af.StationaryCircle(beta, modes=48),
        bp,
        p_range=(0.5 * s1, 1.5 * s1),
        ds=0.01 * s1,
        ds_max=0.04 * s1,
        max_points=80,
    )
    assert branch.p[1] > s1  # subcritical: the branch leaves towards more noise
    fold = branch.folds[0]
    assert 1.12 < fold.p / s1 < 1.14  # σ_fold = 1.1298 σ_#
    before, after = branch.unstable[: fold.index], branch.unstable[fold.index + 1 :]
    assert np.all(before[1:] == 1) and np.all(after == 0)  # the fold is a saddle-node: one mode stabilizes


def test_linearized_spectrum_matches_the_time_dependent_solver():
    # an unstable stationary density (the subcritical branch between its branch point and its fold): a small
    # perturbation along the leading eigenvector grows at the leading eigenvalue
    beta = 8.0
    s1 = float(stationary.branch_threshold(beta, 1))
    sigma = 1.05 * s1
    theta = mf.theta_grid(48)
    s = af.stationary_circle(beta, sigma, np.exp(0.9 * np.cos(theta)), modes=48)
    assert s.unstable == 1
    system = af.StationaryCircle(beta, modes=48)
    a = s.coefficients[1:]
    J, G = system.linearization(a, sigma)
    values, vectors = np.linalg.eig(J)
    j = int(np.argmax(values.real))
    v = vectors[:, j] / vectors[np.argmax(np.abs(vectors[:, j])), j]  # a real eigenvalue has a real eigenvector
    lam, v = float(values[j].real), v.real
    assert lam == pytest.approx(float(s.eigenvalues[0].real), rel=1e-10)
    c = v[:47] + 1j * v[47:]
    bump = np.real(np.exp(1j * np.outer(theta, np.arange(1, 48))) @ c) / np.pi
    ts = np.linspace(0.0, 2.0 / lam, 11)
    sol = af.meanfield_circle(
        s.rho + 1e-7 * bump / np.abs(bump).max(), beta, ts[-1], ts=ts, model="usa", noise=sigma, rtol=1e-12, atol=1e-15
    )
    gap = np.linalg.norm(sol.rho - s.rho, axis=-1)
    rate = np.polyfit(ts[2:], np.log(gap[2:]), 1)[0]
    assert rate == pytest.approx(lam, rel=0.02)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="beta"):
        af.StationaryCircle(-1.0)
    with pytest.raises(ValueError, match="sigma"):
        af.stationary_circle(1.0, 0.0)
    with pytest.raises(ValueError, match="model"):
        af.StationaryCircle(1.0, "linear")


def test_pitchfork_coefficient_refuses_a_branch_newton_does_not_reach():
    # c_1 = 2 × 0.7 = 1.4 is no density's coefficient (|c_k| < 1): Newton's iterates leave the finite numbers
    # instead of converging, which was returned as NaN
    with pytest.raises(af.ConvergenceError, match=r"did not converge on the branch of mode 1 at c_1 = 1.4 .* residual"):
        stationary.pitchfork_coefficient(1.0, amplitude=0.7)
    with pytest.raises(RuntimeError, match=r"in \d+ of 60 steps"):
        stationary.pitchfork_coefficient(1.0, amplitude=0.55)  # a singular Jacobian on the way
    assert np.isfinite(stationary.pitchfork_coefficient(1.0, amplitude=0.3))
