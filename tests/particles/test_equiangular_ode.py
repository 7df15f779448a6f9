"""The equiangular ODE of [GLPR] Thm 6.8, (6.9)/(6.10), its hitting times, and Wendel's Thm 6.7.

Every test compares with a number the theory gives independently of the implementation: closed
forms (tanh, logistic), a tight DOP853 integration of the literal right-hand sides, event times,
the linearization at γ = 1, Laplace asymptotics at large β, the particle system itself, and a
Monte-Carlo estimate of the hemisphere probability.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp

import attnflow as af  # noqa: F401  (enables float64)
from attnflow.particles import init
from attnflow.particles.equiangular_ode import (
    equiangular,
    equiangular_rhs,
    gamma_curve,
    hitting_time,
    wendel_probability,
)
from attnflow.particles.fields import make
from attnflow.particles.sphere import inner_products

MODELS = ("sa", "usa", "usa-rescaled")


def literal_rhs(g, beta, n, model):
    """(6.9)/(6.10) exactly as printed in [GLPR] (fine for the moderate β used with it)."""
    poly = (1 - g) * ((n - 1) * g + 1)
    if model == "sa":
        return 2 * np.exp(beta * g) * poly / (np.exp(beta) + (n - 1) * np.exp(beta * g))
    if model == "usa":
        return (2 / n) * np.exp(beta * g) * poly
    return (2 / n) * np.exp(beta * (g - 1)) * poly


def reference(beta, n, ts, rho0, model):
    # DOP853 at rtol 1e-13 is accurate to ~1e-12 on these smooth scalar problems (it agreed with
    # the closed form to ≤ 6e-12 over 270 (model, n, β, ρ0) cases up to t = 10), so agreement to
    # 1e-10 tests the 1e-10 accuracy the module promises with a wide margin.
    sol = solve_ivp(
        lambda t, y: literal_rhs(y, beta, n, model),
        (0.0, float(ts[-1])),
        [rho0],
        method="DOP853",
        rtol=1e-13,
        atol=1e-15,
        t_eval=ts,
    )
    assert sol.success
    return sol.y[0]


# ---------------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("model", MODELS)
def test_two_particles_at_beta_zero_follow_tanh(model):
    # n = 2, β = 0: all three models reduce to γ̇ = 1 − γ², so γ = tanh(t + artanh ρ0).
    ts = np.linspace(0.0, 6.0, 61)
    for rho0 in (-0.9, -0.3, 0.0, 0.4, 0.95):
        got = np.asarray(equiangular(0.0, 2, ts, rho0, model))
        # the β = 0 branch is a ratio of logarithms: only rounding error (a few ulps)
        np.testing.assert_allclose(got, np.tanh(ts + np.arctanh(rho0)), rtol=0, atol=1e-14)


@pytest.mark.parametrize("n", [3, 5, 32, 1024])
def test_beta_zero_is_logistic(n):
    # β = 0: γ̇ = (2/n)(1−γ)((n−1)γ+1), a logistic equation between the simplex a = −1/(n−1)
    # and 1, solved by γ = a + c/(1 + ((1−ρ0)/(ρ0−a)) e^{−2t}) with c = 1 − a.
    a, c = -1.0 / (n - 1), n / (n - 1)
    ts = np.linspace(0.0, 10.0, 41)
    for rho0 in (0.0, 0.5, a + 1e-3):
        want = a + c / (1.0 + (1.0 - rho0) / (rho0 - a) * np.exp(-2.0 * ts))
        for model in MODELS:
            got = np.asarray(equiangular(0.0, n, ts, rho0, model))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)


@pytest.mark.parametrize("model", MODELS)
def test_simplex_is_stationary(model):
    # F(−1/(n−1)) = 0 ((n−1)γ + 1 vanishes): the regular simplex never moves, so γ is exactly
    # ρ0 and 1 − δ is never reached.
    for n in (2, 3, 10):
        a = -1.0 / (n - 1)
        assert float(equiangular_rhs(a, 3.0, n, model)) == 0.0
        got = np.asarray(equiangular(jnp.array([0.0, 1.0, 30.0]), n, [0.0, 1.0, 50.0], a, model))
        assert np.all(got == a)
        assert np.all(np.isinf(np.asarray(hitting_time(jnp.array([0.0, 5.0]), n, 1e-3, a, model))))


# ---------------------------------------------------------------------------------- vs direct integration

CASES = [
    ("sa", 2, 1.0, 0.0, 10.0),
    ("sa", 8, 4.0, 0.0, 30.0),
    ("sa", 32, 9.0, 0.0, 30.0),  # the largest β of [GLPR] Fig. 3, n = 32
    ("sa", 1024, 2.0, 0.1, 10.0),
    ("sa", 4, 50.0, 0.97, 20.0),  # β = 50 started close enough to 1 to move in time
    ("sa", 6, 3.0, -0.15, 10.0),  # started near the simplex (−0.2)
    ("usa", 5, 2.0, 0.0, 5.0),
    ("usa", 3, 0.5, -0.4, 10.0),
    ("usa-rescaled", 16, 6.0, 0.2, 30.0),
    ("usa-rescaled", 4, 50.0, 0.97, 20.0),
]


@pytest.mark.parametrize("model,n,beta,rho0,t1", CASES)
def test_matches_dop853(model, n, beta, rho0, t1):
    ts = np.linspace(0.0, t1, 31)
    got = np.asarray(equiangular(beta, n, ts, rho0, model))
    np.testing.assert_allclose(got, reference(beta, n, ts, rho0, model), rtol=0, atol=1e-10)


def test_beta_array_is_a_leading_batch_axis():
    betas = np.array([0.0, 1.0, 4.0, 9.0])
    ts = np.linspace(0.0, 30.0, 16)
    got = np.asarray(equiangular(betas, 32, ts))
    assert got.shape == (4, 16)
    for row, beta in zip(got, betas):
        np.testing.assert_allclose(row, reference(beta, 32, ts, 0.0, "sa"), rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "model,n,beta,rho0,delta",
    [
        ("sa", 32, 1.0, 0.0, 1e-3),
        ("sa", 32, 4.0, 0.0, 1e-3),
        ("sa", 3, 2.0, -0.3, 1e-6),
        ("usa", 5, 2.0, 0.0, 1e-3),
        ("usa-rescaled", 8, 5.0, 0.3, 1e-4),
    ],
)
def test_hitting_time_matches_event_time(model, n, beta, rho0, delta):
    def event(t, y):
        return y[0] - (1.0 - delta)

    event.terminal = True
    sol = solve_ivp(
        lambda t, y: literal_rhs(y, beta, n, model),
        (0.0, 1e4),
        [rho0],
        method="DOP853",
        rtol=1e-13,
        atol=1e-15,
        events=event,
    )
    want = sol.t_events[0][0]
    got = float(hitting_time(beta, n, delta, rho0, model))
    # the event time inherits DOP853's ~1e-12 error in γ divided by γ̇ ≈ 2δ at the crossing
    # (δ = 1e-6: ~1e-6 absolute); the closed form is exact to rounding
    np.testing.assert_allclose(got, want, rtol=1e-8)


def test_gamma_curve_is_the_level_set():
    # Γ_{∞,δ} (6.12): γ_β(t*(β)) = 1 − δ. For β ≤ 4 (n = 32) the crossing is well conditioned
    # (γ̇ ≈ 2δ there and t* ~ 10), so the round trip is exact to ~1e-13.
    betas = np.linspace(0.1, 4.0, 9)
    tstar = np.asarray(gamma_curve(betas, 32, 1e-3))
    np.testing.assert_array_equal(tstar, np.asarray(hitting_time(betas, 32, 1e-3)))
    assert np.all(np.diff(tstar) > 0)  # hotter (smaller β) clusters sooner
    for beta, t in zip(betas, tstar):
        assert abs(float(equiangular(beta, 32, [t])[0]) - (1 - 1e-3)) < 1e-12
    assert float(hitting_time(2.0, 32, 0.5, rho0=0.6)) == 0.0  # already past 1 − δ


# ---------------------------------------------------------------------------------- asymptotics


@pytest.mark.parametrize("model,n,beta", [("sa", 32, 3.0), ("usa", 8, 2.0), ("usa-rescaled", 8, 5.0)])
def test_decay_rate_at_one(model, n, beta):
    # Linearizing at γ = 1: F(γ) ≈ −F'(1)(γ − 1) with F'(1) = −2 for (6.9), −(2/n)e^β·n = −2e^β
    # for (6.10), and −2 for the rescaled (6.10)·e^{−β}. So 1 − γ ∝ e^{−λt}, λ = −F'(1).
    rate = {"sa": 2.0, "usa": 2.0 * math.exp(beta), "usa-rescaled": 2.0}[model]
    t1 = float(hitting_time(beta, n, 1e-6, 0.0, model))
    t2 = t1 + 8.0 / rate  # 1 − γ drops by e^{−8} more
    g1, g2 = np.asarray(equiangular(beta, n, [t1, t2], 0.0, model))
    slope = -(math.log1p(-g2) - math.log1p(-g1)) / (t2 - t1)
    # next-order term of F at 1 is O((β + n)(1 − γ)²): relative slope error ≲ 40·1e-6
    assert slope == pytest.approx(rate, rel=1e-4)


def test_usa_large_beta_laplace():
    # (6.10) from ρ0 = 0: t* = (n/2)∫ e^{−βγ} dγ / ((1−γ)((n−1)γ+1)). Expanding the rational
    # factor as Σ_k c_k γ^k, c_k = Σ_{i≤k} (−m)^i (m = n − 1), Laplace gives
    # t* = (n/2) Σ_k k! c_k / β^{k+1};
    # four terms leave a relative 24 m⁴/β⁴ ≈ 2e-9 at n = 32, β = 1e4 (the cut at 1 − δ costs
    # e^{−β}). Finite although e^β overflows float64.
    n, beta = 32, 1e4
    m = n - 1
    coeffs = [1, 1 - m, 1 - m + m * m, 1 - m + m * m - m**3]
    want = 0.5 * n * sum(math.factorial(k) * c / beta ** (k + 1) for k, c in enumerate(coeffs))
    assert float(hitting_time(beta, n, 1e-3, 0.0, "usa")) == pytest.approx(want, rel=1e-8)
    g = np.asarray(equiangular(beta, n, [0.0, 1e-4, 1.0], 0.0, "usa"))
    assert g[0] == 0.0 and 0.0 < g[1] < 1.0 and g[2] == 1.0


def test_sa_large_beta_laplace():
    # (6.9), n = 2, ρ0 = 0: 1/F = (e^{β(1−γ)} + 1)/(2(1−γ²)); the e^{β(1−γ)} part dominates and
    # Laplace at γ = 0 gives t* = e^β/(2β) (1 + 2/β² + O(24/β⁴)) (1/(1−γ²) = 1 + γ² + …); the
    # "+1" part adds only artanh(1 − δ)/2. At β = 600 (e^β ≈ 4e260) this checks the scaled
    # exponential integrals in their asymptotic range.
    beta = 600.0
    want = math.exp(beta) / (2 * beta) * (1 + 2 / beta**2)
    assert float(hitting_time(beta, 2, 1e-3)) == pytest.approx(want, rel=1e-9)


def test_huge_beta_stays_finite():
    # SA at β = 10⁴ from ρ0 = 0: γ̇ ≤ 2n e^{−β}/(n−1)… is far below the smallest double, so
    # γ(t) = ρ0 to rounding for every representable t ≤ 100; t* overflows to inf (true value
    # ~e^{10⁴}/(2·10⁴)).
    ts = np.linspace(0.0, 100.0, 11)
    for rho0 in (0.0, 0.5):
        g = np.asarray(equiangular(1e4, 32, ts, rho0, "sa"))
        assert np.all(g == rho0)
    g = np.asarray(equiangular(jnp.array([1e3, 1e4]), 32, ts, 0.999, "usa-rescaled"))
    assert np.all(np.isfinite(g)) and np.all(g >= 0.999)
    assert np.isinf(float(hitting_time(1e4, 32, 1e-3)))
    assert np.all(np.isfinite(np.asarray(equiangular_rhs(np.linspace(-0.03, 1.0, 5), 1e4, 32, "sa"))))


def test_rhs_forms():
    g = np.linspace(-0.2, 1.0, 25)
    for model in MODELS:
        got = np.asarray(equiangular_rhs(g, 3.0, 6, model))
        np.testing.assert_allclose(got, literal_rhs(g, 3.0, 6, model), rtol=1e-13, atol=1e-300)
    # rescaled = e^{−β} × glpr, and β of shape (B,) is a leading axis
    both = np.asarray(equiangular_rhs(g, jnp.array([1.0, 2.0]), 6, "usa-rescaled"))
    np.testing.assert_allclose(both[1], np.exp(-2.0) * literal_rhs(g, 2.0, 6, "usa"), rtol=1e-13)


# ---------------------------------------------------------------------------------- Thm 6.8 on particles


@pytest.mark.parametrize("model,beta", [("sa", 1.5), ("usa", 1.0)])
def test_particles_stay_equiangular_and_follow_the_ode(model, beta):
    # Thm 6.8: SA/USA started from an equiangular configuration stays equiangular and its pair
    # inner product solves (6.9)/(6.10). Integrate the particle field itself (n = 4, d = 5).
    n, d, rho0 = 4, 5, 0.2
    x0 = np.asarray(init.equiangular(0, n, d, rho0))
    field = make(model, beta)
    rhs = jax.jit(lambda x: field(0.0, x.reshape(n, d)).ravel())
    ts = np.linspace(0.0, 3.0, 7)
    sol = solve_ivp(
        lambda t, y: np.asarray(rhs(jnp.asarray(y))),
        (0, 3.0),
        x0.ravel(),
        method="DOP853",
        rtol=1e-12,
        atol=1e-14,
        t_eval=ts,
    )
    g = np.asarray(inner_products(jnp.asarray(sol.y.T.reshape(-1, n, d))))
    off = g[:, ~np.eye(n, dtype=bool)]
    want = np.asarray(equiangular(beta, n, ts, rho0, model))
    # ambient DOP853 at rtol 1e-12 (norms drift ~1e-12): 1e-9 leaves ample margin
    np.testing.assert_allclose(off, np.repeat(want[:, None], n * (n - 1), axis=1), rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------------- Wendel


def test_wendel_closed_cases():
    for n in range(1, 21):
        # circle: n points lie in a half circle with probability n / 2^{n−1}
        assert wendel_probability(n, 2) == pytest.approx(n / 2 ** (n - 1), rel=1e-15)
        # S^0 = {±1}: all n signs equal
        assert wendel_probability(n, 1) == 2.0 ** (1 - n)
        for d in range(n, n + 3):
            assert wendel_probability(n, d) == 1.0
        # antipodal symmetry of the binomial sum: P(n, d) + P(n, n − d) = 1 for 1 ≤ d < n
        for d in range(1, n):
            assert wendel_probability(n, d) + wendel_probability(n, n - d) == pytest.approx(1.0, abs=1e-15)


def _in_open_hemisphere(x):
    """For each of the N configurations x (N, n, d) in general position (d ∈ {2, 3}, n ≥ d):
    do all points lie in some open hemisphere {⟨·, w⟩ > 0}?

    The closed cone {w : ⟨x_i, w⟩ ≥ 0 ∀i} is pointed, so if it is nonzero it has an extreme
    ray, where d − 1 of the constraints are active: w ⟂ (d − 1) of the points. Conversely such
    a w with the other points strictly positive can be tilted into the open cone. So it is
    enough to try ±(normal of every (d − 1)-subset).
    """
    n_conf, n, d = x.shape
    if d == 2:
        normals = np.stack([-x[..., 1], x[..., 0]], axis=-1)  # (N, n, 2): w ⟂ x_j
    else:
        i, j = np.triu_indices(n, 1)
        normals = np.cross(x[:, i], x[:, j])  # (N, pairs, 3): w ⟂ x_i, x_j
    normals = np.concatenate([normals, -normals], axis=1)
    dots = np.einsum("nkd,nid->nki", normals, x)
    return np.any(np.all(dots > -1e-12, axis=-1), axis=-1)


@pytest.mark.parametrize("n,d", [(4, 2), (6, 2), (5, 3), (7, 3)])
def test_wendel_monte_carlo(n, d):
    rng = np.random.default_rng(1234 + 10 * n + d)
    samples = 20000
    x = rng.standard_normal((samples, n, d))
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    p_hat = np.mean(_in_open_hemisphere(x))
    p = wendel_probability(n, d)
    # binomial standard error ≤ √(1/4 / 20000) ≈ 0.0035; 5σ
    assert abs(p_hat - p) < 5 * math.sqrt(p * (1 - p) / samples) + 1e-12


# ---------------------------------------------------------------------------------- validation


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="n must be an integer"):
        equiangular(1.0, 0, [1.0])
    with pytest.raises(ValueError, match="beta"):
        equiangular(-1.0, 4, [1.0])
    with pytest.raises(ValueError, match="beta"):
        hitting_time(np.array([1.0, np.nan]), 4, 1e-3)
    with pytest.raises(ValueError, match="rho0"):
        equiangular(1.0, 4, [1.0], rho0=-0.5)  # below the simplex −1/3
    with pytest.raises(ValueError, match="rho0"):
        equiangular(1.0, 4, [1.0], rho0=1.0)
    with pytest.raises(ValueError, match="ts"):
        equiangular(1.0, 4, [-1.0, 1.0])
    with pytest.raises(ValueError, match="model"):
        equiangular(1.0, 4, [1.0], model="softmax")
    with pytest.raises(ValueError, match="delta"):
        hitting_time(1.0, 4, 0.0)
    with pytest.raises(ValueError, match="betas"):
        gamma_curve(1.0, 4, 1e-3)
    with pytest.raises(ValueError, match="d must be an integer"):
        wendel_probability(3, 0)
