"""Symmetric V (experiments/studies/spectral_selection/spectral_selection_theory.py): the pure-mode states' spectra,
the homogeneous, balanced-bipolar and split stability criteria and the mixed three-group rest points, each against
``equilibrium``'s tangent Jacobian. Every pure state has n = 6 tokens in R³ and every mixed one n = 4 in R², so that
the Jacobians compile once per shape."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.experiments.studies.spectral_selection.spectral_selection_theory import (
    bipolar_threshold,
    homogeneous_stable,
    mixed_equation,
    mixed_roots,
    mixed_state,
    pure_spectrum,
    pure_state,
    pure_unstable,
    split_stable,
    split_threshold,
    symmetric_field,
)
from attnflow.solvers.equilibrium import equilibrium

N = 6
SPLITS = ((6, 0), (5, 1), (4, 2), (3, 3))


def _rest(lam, beta, x):
    r = equilibrium(symmetric_field(lam, beta), x)
    assert r.residual <= 1e-10 and np.max(np.abs(r.x - x)) <= 1e-10  # the closed-form state is already at rest
    return r


@pytest.mark.parametrize(
    "lam, beta, p",
    [((1.0, 0.4, -0.7), 1.3, 0), ((1.0, 0.4, -0.7), 1.3, 1), ((2.0, -0.3, -1.5), 0.6, 2), ((0.9, 0.5, 0.2), 3.0, 1)],
)
def test_pure_spectrum_is_the_jacobians(lam, beta, p):
    """Every split n₊ + n₋ = 6 on e_p: the n(d − 1) = 12 eigenvalues, the unstable count and the Morse index."""
    for n_plus, n_minus in SPLITS:
        r = _rest(lam, beta, pure_state(3, p, n_plus, n_minus))
        exact = pure_spectrum(lam, p, n_plus, n_minus, beta)
        assert exact.size == 12 and r.zero_modes == 0
        np.testing.assert_allclose(np.sort(r.eigenvalues.real)[::-1], exact, rtol=0, atol=1e-11)
        assert r.unstable == pure_unstable(lam, p, n_plus, n_minus, beta) == r.morse_index


def test_homogeneous_spectrum_and_criterion():
    """All at e_p: eigenvalues λ_k − λ_p once and −λ_p five times per k ≠ p; stable iff λ_p > 0, λ_k < λ_p."""
    lam = (0.8, -0.2, 1.1)
    want = {0: [0.3, -1.0], 1: [1.0, 1.3], 2: [-0.3, -1.3]}  # λ_k − λ_p for the two k ≠ p
    for p in range(3):
        values = pure_spectrum(lam, p, N, 0, 2.0)
        expect = np.sort(np.concatenate([want[p], [-lam[p]] * 10]))[::-1]
        np.testing.assert_allclose(values, expect, atol=1e-14)
        r = _rest(lam, 2.0, pure_state(3, p, N, 0))
        assert r.stable == homogeneous_stable(lam, p) == (p == 2)


def test_balanced_bipolar_threshold():
    """Three tokens at ±e_1 each: stable iff λ_k < λ₊ tanh(βλ₊); at λ_2 on the threshold the Jacobian is singular."""
    beta, top = 0.8, 1.0
    thr = bipolar_threshold(top, beta)
    assert thr == pytest.approx(np.tanh(0.8), abs=1e-15)
    assert split_threshold(np.exp(2 * beta * top), 1.0) == pytest.approx(thr, rel=1e-14)
    x = pure_state(3, 0, 3, 3)
    below, above = _rest((top, thr - 0.02, -0.5), beta, x), _rest((top, thr + 0.02, -0.5), beta, x)
    assert below.stable and above.unstable == 1
    at = equilibrium(symmetric_field((top, thr, -0.5), beta), x)
    assert np.min(np.abs(at.eigenvalues)) <= 1e-12


def test_split_threshold_is_where_the_group_matrix_is_singular():
    """r = n₊/n₋ = 2: det(λ_k B − λ_p diag μ) = λ_p² det B (t − 1)(t − σ(c, r)), t = λ_k/λ_p; at λ_k = σλ_p an
    eigenvalue of the Jacobian is 0, and the index changes by one across it."""
    beta, lam_p = 0.7, 1.2
    c, r = np.exp(2 * beta * lam_p), 2.0
    sigma = split_threshold(c, r)
    assert sigma == pytest.approx((c - 2) * (2 * c - 1) / (2 * (c * c - 1)), rel=1e-15)
    assert split_threshold(c, 0.5) == pytest.approx(sigma, rel=1e-14)  # σ(c, r) = σ(c, 1/r): either group's ratio
    x = pure_state(3, 0, 4, 2)
    at = equilibrium(symmetric_field((lam_p, sigma * lam_p, -0.9), beta), x)
    assert np.min(np.abs(at.eigenvalues)) <= 1e-12
    lo = _rest((lam_p, (sigma - 0.03) * lam_p, -0.9), beta, x)
    hi = _rest((lam_p, (sigma + 0.03) * lam_p, -0.9), beta, x)
    assert lo.stable and hi.unstable == 1


@pytest.mark.parametrize("lam_p", [0.2, 0.45, 0.55, 1.0])
def test_split_stability_and_the_log_ratio(lam_p):
    """4 at e_1 and 2 at −e_1, β = 1: the pair holds only for λ_p > log 2/(2β) = 0.347 (its internal mode −λ_pμ₋
    changes sign), whatever the other eigenvalues; split_stable agrees with the Jacobian."""
    beta = 1.0
    for others in ((-0.8, -0.9), (0.1, -0.5), (0.3 * lam_p, 0.9 * lam_p)):
        lam = (lam_p, *others)
        r = _rest(lam, beta, pure_state(3, 0, 4, 2))
        assert r.stable == split_stable(lam, 0, 4, 2, beta)
        if lam_p < np.log(2) / (2 * beta):
            assert not r.stable
    assert split_stable((lam_p, -5.0, -5.0), 0, 4, 2, beta) == (lam_p > np.log(2) / 2)


@pytest.mark.parametrize("a, b, beta, m, k", [(1.0, 0.5, 2.0, 2, 1), (-0.5, 1.0, 3.0, 2, 1), (1.0, 2.0, 1.0, 2, 1)])
def test_mixed_roots_are_rest_points(a, b, beta, m, k):
    """Each zero q of g: velocity 0 to 1e-10, Newton does not move it, and Newton from q + 0.04 comes back to it."""
    roots = mixed_roots(a, b, beta, m, k)
    assert roots.size >= 1 and np.all(np.abs(mixed_equation(roots, a, b, beta, m, k)) <= 1e-12)
    field = symmetric_field((a, b), beta)
    for q in roots:
        x = mixed_state(q, m, k)
        assert float(np.max(np.abs(np.asarray(field(0.0, x))))) <= 1e-10
        r = equilibrium(field, x)
        assert np.max(np.abs(r.x - x)) <= 1e-10
        start = mixed_state(float(np.clip(q + 0.04, -0.999, 0.999)), m, k)
        back = equilibrium(field, start)
        assert back.x[m, 0] == pytest.approx(q, abs=1e-9)  # the group at q u + s v returns to the same q


def test_mixed_without_the_middle_group():
    """m = 0: two symmetric clusters, g(q) = 2q(a cosh βbs² − b sinh βbs²), so tanh(βb(1 − q²)) = a/b, q > 0."""
    a, b, beta = 0.6, 1.0, 2.0
    roots = mixed_roots(a, b, beta, 0, 2)
    q = np.sqrt(1 - np.arctanh(a / b) / (beta * b))
    np.testing.assert_allclose(roots[roots > 1e-9], [q], rtol=1e-12)
    x = mixed_state(q, 0, 2)
    assert float(np.max(np.abs(np.asarray(symmetric_field((a, b), beta)(0.0, x))))) <= 1e-12


def test_bad_input_of_split_stable():
    with pytest.raises(ValueError, match="β > 0, λ_p > 0"):
        split_stable((-1.0, 0.5), 0, 1, 1, 1.0)
