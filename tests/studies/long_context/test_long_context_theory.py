"""One attention layer at β = γ log n (arXiv 2510.05554, 2512.01868 §6): the exact equiangular cosine against
token arrays, and its three limits as n → ∞ (1 below γ_c = 1/(1 − ρ), 4ρ/(1 + 3ρ) at γ_c, ρ above)."""

import numpy as np
import pytest

from attnflow.experiments.studies.long_context.long_context_theory import (
    attention_layer,
    critical_gamma,
    equiangular_layer,
    equiangular_tokens,
    layer_limit,
)


def cosine_of_tokens(n, rho, beta, residual=0.0, **kw):
    out = np.array(attention_layer(equiangular_tokens(n, rho), beta, residual, **kw))
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    gram = out @ out.T
    return gram[~np.eye(n, dtype=bool)]


@pytest.mark.parametrize("n", [2, 7, 300])
@pytest.mark.parametrize("gamma", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("residual", [0.0, 0.5])
def test_exact_cosine_is_that_of_the_token_arrays(n, gamma, residual):
    beta = gamma * np.log(n)
    cos = cosine_of_tokens(n, 0.5, beta, residual)
    np.testing.assert_allclose(cos, float(equiangular_layer(0.5, beta, n, residual)), rtol=0, atol=1e-12)


def test_blocked_attention_gives_the_same_layer():
    n, beta = 300, 2.0 * np.log(300)
    dense = cosine_of_tokens(n, 0.3, beta, block=None)
    blocked = cosine_of_tokens(n, 0.3, beta, block=64)
    np.testing.assert_allclose(blocked, dense, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rho", [0.2, 0.5, 0.8])
def test_three_regimes_in_the_long_context_limit(rho):
    gc = critical_gamma(rho)
    assert gc == pytest.approx(1.0 / (1.0 - rho))
    gammas = np.array([0.6 * gc, gc, 1.5 * gc])
    limits = layer_limit(rho, gammas)
    np.testing.assert_allclose(limits, [1.0, 4 * rho / (1 + 3 * rho), rho], rtol=1e-15)
    for g, lim in zip(gammas, limits):
        errors = [abs(float(equiangular_layer(rho, g * np.log(n), n)) - lim) for n in (1e2, 1e4, 1e8, 1e16)]
        assert errors[-1] < 1e-6 and all(b < a for a, b in zip(errors, errors[1:])), (rho, g, errors)


def test_the_critical_cosine_at_rho_one_half_is_0_8():
    assert float(layer_limit(0.5, 2.0)) == pytest.approx(0.8, abs=1e-15)
    assert abs(float(equiangular_layer(0.5, 2.0 * np.log(1e12), 10**12)) - 0.8) < 1e-9


def test_residual_limits_and_refusals():
    # α y_i + the mean below γ_c; c = 1/2 + α at γ_c
    a, rho = 0.5, 0.5
    assert float(layer_limit(rho, 1.0, a)) == pytest.approx(rho * (1 + a) ** 2 / (a * a + 2 * a * rho + rho))
    assert abs(float(equiangular_layer(rho, 2.0 * np.log(1e12), 10**12, a)) - float(layer_limit(rho, 2.0, a))) < 1e-9
    with pytest.raises(ValueError, match="rho must be < 1"):
        critical_gamma(1.0)
    with pytest.raises(ValueError, match="rho"):
        equiangular_tokens(4, -0.2)


def test_the_report_says_what_a_long_context_run_computed():
    from attnflow.experiments.builtin import EXPERIMENTS
    from attnflow.experiments.config import load_config

    e = EXPERIMENTS["long-context"]
    c = load_config(None, [], base={**e.defaults, **e.quick})
    line = e.describe(c, 1)
    assert line.startswith("one layer at β = γ log n for γ ∈ [1.0, 2.0, 3.0], ρ = 0.5")
    assert "n ∈ [10, 100, 1000] (token arrays up to n = 1000)" in line and "member" not in line
