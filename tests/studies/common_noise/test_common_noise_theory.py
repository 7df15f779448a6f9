"""Two tokens under common noise (experiments/studies/common_noise/common_noise_theory.py): the Lyapunov
exponents at the aligned and antipodal states, −σ²(d − 1)/d and 2σ²(d − 2 − cosh 2β)/(d(1 + cosh 2β)),
against time averages of log(1 − R) and log(1 + R) along simulated pairs; the threshold β*(d)."""

import numpy as np
import pytest

from attnflow.experiments.studies.common_noise.common_noise import simulated_exponents
from attnflow.experiments.studies.common_noise.common_noise_theory import (
    aligned_exponent,
    antipodal_exponent,
    antipodal_threshold,
    pair_drift,
    pair_variance,
)

BETAS = np.array([0.25, 0.75, 1.25, 2.0, 3.0])


def test_threshold_is_where_the_antipodal_exponent_vanishes():
    for d in (4, 8, 16):
        b = antipodal_threshold(d)
        assert abs(antipodal_exponent(b, d)) < 1e-12
        assert antipodal_exponent(b + 0.01, d) < 0 < antipodal_exponent(b - 0.01, d)
    assert antipodal_threshold(3) == 0.0 and antipodal_exponent(0.1, 3) < 0
    np.testing.assert_allclose(antipodal_threshold(8), 0.5 * np.arccosh(6.0))


def test_pair_diffusion_vanishes_at_both_states():
    for r in (-1.0, 1.0):
        assert abs(pair_drift(r, 1.3, 6)) < 1e-14 and abs(pair_variance(r, 1.3, 6)) < 1e-14


def exponents(d, state, members=1000):
    # each pair's slope of log(1 ∓ R) over [0, 4], R(0) = ±cos(1e-5), Euler–Maruyama dt = 0.01 (the experiment's)
    slopes = simulated_exponents(d, BETAS, state, members)
    return slopes.mean(axis=1), slopes.std(axis=1) / np.sqrt(members)


@pytest.mark.slow
@pytest.mark.parametrize("d", [3, 5, 8])
def test_lyapunov_exponents_against_simulation(d):
    for state, want in (("aligned", aligned_exponent(d) + 0 * BETAS), ("antipodal", antipodal_exponent(BETAS, d))):
        measured, se = exponents(d, state)
        # EM's bias in the exponent is O(dt) = 0.01 σ²; the standard errors are about 0.01
        assert np.all(np.abs(measured - want) <= 3 * se + 0.01), (state, measured, want, se)
