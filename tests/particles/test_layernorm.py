"""Normalization schemes: Post-LN vs Pre-LN rates on equiangular data, peri-LN, nGPT, and no layer norm.

Equiangular starts stay equiangular under every scheme (permutation and rotation equivariance,
[GLPR] Thm 6.8), with common inner product ρ of the directions and, in R^d, common norm r. With
a = A_ii, b = A_ij (i ≠ j) the SA weights at Q = K = V = I,

    a = 1 / (1 + (n−1) e^{β(ρ−1)}),   b = e^{β(ρ−1)} a,
    ⟨θ_i, A_i⟩ = a + (n−1) b ρ,        ‖A_i‖² = a² + 2(n−1) a b ρ + (n−1) b² (1 + (n−2) ρ),

and every scheme moves the directions by θ̇_i = s P_{θ_i} A_i with a common speed factor s, so

    ρ̇ = 2 s b (1−ρ)(1 + (n−1)ρ),   s = 1 (Post-LN), 1/r (Pre-LN), 1/(r‖A‖) (peri-LN), α/‖A‖ (nGPT),
    ṙ = ⟨θ_i, A_i⟩ (Pre-LN),  ⟨θ_i, A_i⟩/‖A_i‖ (peri-LN).

Near consensus a, b → 1/n and ‖A‖, ⟨θ, A⟩ → 1: Post-LN gives 1 − ρ ~ e^{−2t}, nGPT e^{−2αt},
and in R^d the norms grow like r ~ t, so ρ̇ ≈ 2(1−ρ)/t and 1 − ρ ~ C t^{−2} (Pre-LN, peri-LN).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import nnls

import attnflow as af
from attnflow.particles.fields import ensemble_axes
from attnflow.particles.layernorm import NGPT, NoLN, PeriLN, PostLN, PreLN, RescaledNoLN
from attnflow.particles.sphere import normalize, pairwise_gaps, project

N, D, BETA = 4, 4, 1.0
X_EQ = af.init.equiangular(0, N, D, 0.0)
# 1 − ρ is a small difference of O(1) coordinates, which the step control does not weigh: tsit5 at
# these tolerances keeps its relative error ≲ 2e-9 (measured against the reduced ODE and rk4 at
# dt = 1e-3), where dopri8 at rtol = 1e-10 was off by 1e-6. Comparisons below allow 1e-8.
TIGHT = dict(rtol=1e-12, atol=1e-14, solver="tsit5")


def reduced(scheme, ts, n=N, beta=BETA, alpha=1.0, rho0=0.0):
    """The equiangular (1 − ρ, r) system of the module docstring, solved by scipy at tight tolerance.

    Integrated in u = log(1 − ρ), so that 1 − ρ keeps its relative precision as it goes to 0.
    """

    def rhs(t, y):
        u, r = y
        w = np.exp(u)  # 1 − ρ
        rho = 1.0 - w
        a = 1.0 / (1.0 + (n - 1) * np.exp(-beta * w))
        b = np.exp(-beta * w) * a
        radial = a + (n - 1) * b * rho
        norm_a = np.sqrt(a * a + 2 * (n - 1) * a * b * rho + (n - 1) * b * b * (1 + (n - 2) * rho))
        s, dr = {
            "post": (1.0, 0.0),
            "pre": (1.0 / r, radial),
            "peri": (1.0 / (r * norm_a), radial / norm_a),
            "ngpt": (alpha / norm_a, 0.0),
        }[scheme]
        return [-2.0 * s * b * (n - (n - 1) * w), dr]

    sol = solve_ivp(rhs, (0.0, ts[-1]), [np.log(1.0 - rho0), 1.0], t_eval=ts, method="DOP853", rtol=1e-13, atol=1e-13)
    return np.exp(sol.y[0]), sol.y[1]


def direction_gaps(xs):
    """1 − ⟨θ_i, θ_j⟩ for all pairs i < j, accurate near 1 (half squared chord)."""
    g = np.asarray(pairwise_gaps(normalize(xs)))
    iu = np.triu_indices(xs.shape[-2], 1)
    return g[..., iu[0], iu[1]]


def loglog_slope(ts, gap, lo, hi):
    keep = (ts >= lo) & (ts <= hi)
    return np.polyfit(np.log(ts[keep]), np.log(gap[keep]), 1)[0]


def exp_rate(ts, gap, lo, hi):
    keep = (ts >= lo) & (ts <= hi)
    return -np.polyfit(ts[keep], np.log(gap[keep]), 1)[0]


# -- Post-LN: the sphere model, 1 − ρ ~ e^{−2t} -----------------------------------------------


def test_post_ln_is_the_sphere_model():
    x = af.init.uniform(1, 6, 3)
    field = af.SA(2.0, V=0.5 * jnp.eye(3))
    assert PostLN(field).geometry == "sphere"
    np.testing.assert_array_equal(PostLN(field)(0.0, x), field(0.0, x))
    assert float(PostLN(field).beta) == 2.0


@pytest.mark.slow
def test_post_ln_equiangular_decays_exponentially_at_rate_two():
    ts = np.linspace(0.0, 10.0, 41)
    sol = af.simulate(PostLN(af.SA(BETA)), X_EQ, ts[-1], ts=ts, **TIGHT)
    gaps = direction_gaps(sol.xs)
    # equiangular for all time ([GLPR] Thm 6.8), 1 − ρ following (6.9)
    np.testing.assert_allclose(gaps, gaps[:, :1] * np.ones_like(gaps), rtol=1e-8)
    np.testing.assert_allclose(gaps[:, 0], reduced("post", ts)[0], rtol=1e-8)
    # (6.9) near γ = 1: γ̇ = 2(1−γ)(1 + O(1−γ)); on [6, 10] 1 − ρ ≤ 5e-5, so the fitted rate is 2
    # up to ~1e-5 (measured 1.999992), far inside the tolerance
    rate = exp_rate(ts, gaps[:, 0], 6.0, 10.0)
    assert rate == pytest.approx(2.0, abs=2e-3), rate


# -- Pre-LN: norms grow like t, 1 − ρ ~ C/t² -------------------------------------------------


@pytest.mark.slow
def test_pre_ln_equiangular_decays_like_t_to_the_minus_two():
    ts = np.geomspace(0.5, 2000.0, 49)
    sol = af.simulate(PreLN(af.SA(BETA)), X_EQ, ts[-1], ts=np.concatenate([[0.0], ts]), **TIGHT)
    xs = np.asarray(sol.xs)[1:]
    gaps, r = direction_gaps(xs), np.linalg.norm(xs, axis=-1)
    np.testing.assert_allclose(gaps, gaps[:, :1] * np.ones_like(gaps), rtol=1e-7)
    np.testing.assert_allclose(r, r[:, :1] * np.ones_like(r), rtol=1e-10)
    gap_ref, r_ref = reduced("pre", ts)
    # the reduced ODE predicts the whole curve (measured 1e-11 relative)
    np.testing.assert_allclose(gaps[:, 0], gap_ref, rtol=1e-8)
    np.testing.assert_allclose(r[:, 0], r_ref, rtol=1e-8)
    # ṙ → 1: the norms grow linearly, r − t tends to a constant c (≈ −0.42 here)
    late = ts >= 100
    assert np.all(np.abs(r[late, 0] - ts[late] - (r[-1, 0] - ts[-1])) < 0.02)
    # hence ρ̇ ≈ 2(1−ρ)/r and the local log-log slope is −2t/r = −2 + 2c/t + O(1−ρ): the window
    # [100, 2000] starts where |2c|/t ≤ 1% (and 1 − ρ ≤ 2e-4), so the fitted exponent is −2 ± 0.01
    # (measured −2.0023); before, the local slope runs from −1.3 (t = 2) through −2.027 (t = 16)
    slope = loglog_slope(ts, gaps[:, 0], 100.0, 2000.0)
    assert slope == pytest.approx(-2.0, abs=0.01), slope
    # t²(1 − ρ) → C (≈ 1.91): within 2% over the window
    assert np.ptp(gaps[late, 0] * ts[late] ** 2) < 0.02 * np.mean(gaps[late, 0] * ts[late] ** 2)
    # no exponential law: the local rate −d log(1−ρ)/dt ≈ 2/t falls tenfold from t ~ 140 to 1400
    assert exp_rate(ts, gaps[:, 0], 100, 200) / exp_rate(ts, gaps[:, 0], 1000, 2000) > 5


def test_pre_ln_moves_directions_by_p_theta_a_over_r():
    x = 3.0 * af.init.uniform(2, 5, 3) * jnp.arange(1.0, 6.0)[:, None]
    inner = af.SA(1.5)
    field = PreLN(inner)
    assert field.geometry == "euclidean"
    theta = normalize(x)
    np.testing.assert_array_equal(field(0.0, x), inner.drift(0.0, theta))
    # d/dt (x/‖x‖) along ẋ = A(Θ): the formula θ̇_i = r_i^{-1} P_{θ_i} A_i(Θ) of docs/model.md §1.8
    _, dtheta = jax.jvp(normalize, (x,), (field(0.0, x),))
    r = jnp.linalg.norm(x, axis=-1, keepdims=True)
    np.testing.assert_allclose(dtheta, project(theta, inner.drift(0.0, theta)) / r, rtol=1e-12, atol=1e-15)


# -- peri-LN ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_peri_ln_unit_speed_and_power_law_clustering():
    x = 2.0 * af.init.uniform(3, N, D)
    v = PeriLN(af.SA(1.0))(0.0, x)
    np.testing.assert_allclose(jnp.linalg.norm(v, axis=-1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(v, normalize(af.SA(1.0).drift(0.0, normalize(x))), rtol=1e-14)

    ts = np.geomspace(0.5, 2000.0, 49)
    # members: the equiangular start, and a cap start (an open hemisphere) that clusters too
    x0 = jnp.stack([X_EQ, af.init.cap(5, N, D, angle=1.2)])
    sol = af.simulate(PeriLN(af.SA(BETA)), x0, ts[-1], ts=np.concatenate([[0.0], ts]), **TIGHT)
    gaps = direction_gaps(np.asarray(sol.xs)[0, 1:])
    np.testing.assert_allclose(gaps[:, 0], reduced("peri", ts)[0], rtol=1e-8)
    # as for Pre-LN (here r − t → c ≈ +0.46): slope −2 + O(2c/t), within 1% on [100, 2000]
    # (measured −1.9974)
    slope = loglog_slope(ts, gaps[:, 0], 100.0, 2000.0)
    assert slope == pytest.approx(-2.0, abs=0.01), slope
    assert float(np.max(direction_gaps(sol.x_final[1]))) < 1e-4  # C/t² at t = 2000, C = O(1)


# -- nGPT -----------------------------------------------------------------------------------------


def test_ngpt_has_the_direction_of_sa_and_speed_at_most_alpha():
    x = af.init.uniform(4, N, D)
    inner = af.SA(2.0)
    sa, ngpt = inner(0.0, x), NGPT(inner, alpha=1.0)(0.0, x)
    norm_a = jnp.linalg.norm(inner.drift(0.0, x), axis=-1, keepdims=True)
    # same tangent direction, speed divided by ‖A_i‖ (a positive per-token factor)
    np.testing.assert_allclose(ngpt, sa / norm_a, rtol=1e-12, atol=1e-15)
    cos = jnp.sum(sa * ngpt, -1) / (jnp.linalg.norm(sa, axis=-1) * jnp.linalg.norm(ngpt, axis=-1))
    np.testing.assert_allclose(cos, 1.0, atol=1e-14)
    np.testing.assert_allclose(jnp.sum(ngpt * x, -1), 0.0, atol=1e-15)
    assert float(jnp.max(jnp.linalg.norm(NGPT(inner, alpha=0.3)(0.0, x), axis=-1))) <= 0.3
    # a zero sublayer output (V = 0) has no direction: the token rests instead of producing nan
    np.testing.assert_array_equal(NGPT(af.SA(1.0, V=jnp.zeros((D, D))))(0.0, x), 0.0)


@pytest.mark.slow
def test_ngpt_equiangular_rate_two_alpha_and_clustering():
    alphas = jnp.array([0.5, 1.0, 1.0])
    # members: equiangular at α = 0.5 and 1, and a cap start at α = 1. From an open hemisphere the
    # min_i ⟨x_i, w⟩ argument of [GLPR] Lemma 6.4 holds: nGPT points where SA points, up to
    # positive per-token factors
    x0 = jnp.stack([X_EQ, X_EQ, af.init.cap(5, N, D, angle=1.2)])
    ts = np.linspace(0.0, 20.0, 41)
    sol = af.simulate(NGPT(af.SA(BETA), alpha=alphas), x0, ts[-1], ts=ts, **TIGHT)
    assert sol.xs.shape == (3, ts.size, N, D)
    assert float(af.particles.norm_error(sol.xs)) < 1e-14
    for k, alpha in enumerate([0.5, 1.0]):
        gaps = direction_gaps(sol.xs[k])
        # beyond t = 10/α, 1 − ρ < 1e-9 is a difference below the digits the coordinates carry
        resolved = ts <= 10.0 / alpha
        np.testing.assert_allclose(gaps[resolved, 0], reduced("ngpt", ts, alpha=alpha)[0][resolved], rtol=1e-8)
        # ρ̇ = 2α(1−ρ)(1 + O(1−ρ)): on [5/α, 10/α] 1 − ρ ≲ e^{-10} (rate error ~1e-4), and at
        # its end 1 − ρ ≈ e^{-20} ≈ 1e-9 is still resolved to ~1e-8
        assert exp_rate(ts, gaps[:, 0], 5.0 / alpha, 10.0 / alpha) == pytest.approx(2 * alpha, rel=2e-3)
    assert float(np.max(direction_gaps(sol.x_final[2]))) < 1e-12  # ~e^{-2t} at t = 20


# -- no layer norm, and its rescaled form --------------------------------------------------------


def naive_rescaled(z, t, beta, Q, K, V):
    """ż_i = Σ_j A_ij(e^{tV} z) V (z_j − z_i), [GLPR] §9, in NumPy with scipy's expm."""
    from scipy.linalg import expm

    x = z @ expm(t * V).T
    logits = beta * (x @ Q.T) @ (x @ K.T).T
    w = np.exp(logits - logits.max(1, keepdims=True))
    a = w / w.sum(1, keepdims=True)
    return np.einsum("ij,ijd->id", a, (z[None, :, :] - z[:, None, :]) @ V.T)


@pytest.mark.slow
def test_rescaled_field_is_the_formula_and_the_conjugated_no_ln_field():
    key = jax.random.split(jax.random.key(6), 4)
    z = np.asarray(jax.random.normal(key[0], (7, 3)))
    Q, K, V = (np.asarray(jax.random.normal(k, (3, 3))) / 2.0 for k in key[1:])
    for t in (0.0, 0.7):
        for mats in (dict(Q=Q, K=K, V=V), dict(Q=Q, K=K), {}):
            full = {"Q": np.eye(3), "K": np.eye(3), "V": np.eye(3), **mats}
            got = RescaledNoLN(af.SA(1.3, **mats))(t, jnp.asarray(z))
            np.testing.assert_allclose(got, naive_rescaled(z, t, 1.3, **full), rtol=1e-10, atol=1e-12)
    # z = e^{-tV} x turns ẋ = A(X) V X into ż = e^{-tV} A(e^{tV} Z) V e^{tV} z − V z, for USA too
    # (in both time conventions); 1e-9: e^{±tV} products cost a few digits of the direct form
    t = 0.4
    for field, v in ((af.USA(0.8, Q=Q, K=K, V=V), V), (af.USA(0.8, time="rescaled"), np.eye(3))):
        resc = RescaledNoLN(field)
        x = resc.tokens(t, z)
        np.testing.assert_allclose(resc.rescale(t, x), z, rtol=1e-12, atol=1e-14)
        expected = resc.rescale(t, NoLN(field)(t, x)) - z @ v.T
        np.testing.assert_allclose(resc(t, jnp.asarray(z)), expected, rtol=1e-9, atol=1e-12)


def hull_distance(points, k, weight=1e4):
    """Distance from points[k] to the convex hull of the others (NNLS with a heavy Σλ = 1 row)."""
    others = np.delete(points, k, axis=0)
    a = np.vstack([others.T, weight * np.ones(len(others))])
    return nnls(a, np.concatenate([points[k], [weight]]))[1]


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 3])
def test_rescaled_tokens_converge_to_the_vertices_of_a_polytope(d):
    """V = I, QᵀK ≻ 0, β = 1, n = 12: z_i(t) → vertices of a convex polytope (arXiv 2305.05465)."""
    n, members = 12, 4
    key = jax.random.split(jax.random.key(10 + d), 2)
    x0 = jax.random.normal(key[0], (members, n, d))
    # member 0: Q = K = I; the others Q = K = G, so QᵀK = GᵀG is a random SPD matrix
    G = jax.random.normal(key[1], (members, d, d)) / np.sqrt(d)
    G = G.at[0].set(jnp.eye(d))
    inner = af.SA(1.0, Q=G, K=G)
    ts = np.array([0.0, 2.0, 4.0, 15.0, 20.0])
    z = af.simulate(RescaledNoLN(inner), x0, ts[-1], ts=ts, rtol=1e-10, atol=1e-12).xs
    # the same tokens without rescaling, x = e^t z, grow like e^t: compare up to t = 4, relative to
    # their size; two runs in different coordinates agree to ~1e3 × rtol
    x = af.simulate(NoLN(inner), x0, ts[2], ts=ts[:3], rtol=1e-10, atol=1e-12).xs
    x_from_z = RescaledNoLN(inner).tokens(ts[:3], z[:, :3])
    scale = np.max(np.abs(np.asarray(x)), axis=(-2, -1), keepdims=True)
    np.testing.assert_allclose(np.asarray(x_from_z) / scale, np.asarray(x) / scale, atol=1e-7)
    assert np.all(scale[:, -1] > 20.0)
    z = np.asarray(z)
    vertex_counts = []
    for m in range(members):
        # converged: once attention is a hardmax (β e^{2t} ≫ 1) z_i approaches its vertex like e^{-t},
        # so the last 5 time units move it by ≲ e^{-15}·O(1)
        assert np.max(np.abs(z[m, 4] - z[m, 3])) < 1e-5
        assert np.max(np.abs(z[m, 1] - z[m, 0])) > 0.1
        zf = z[m, -1]
        dist = np.linalg.norm(zf[:, None] - zf[None], axis=-1)
        reps = []
        for i in range(n):
            if all(dist[i, j] > 1e-4 for j in reps):
                reps.append(i)
        points = zf[reps]
        # many tokens share few limit points...
        assert len(reps) <= n // 2
        # ...and each limit point is a vertex: it lies O(1) away from the hull of the other ones,
        # far beyond the ~1e-6 by which z(20) may still differ from the limit
        if len(reps) > 1:
            assert min(hull_distance(points, k) for k in range(len(points))) > 0.3
        vertex_counts.append(len(reps))
    # not only segments: some member ends on a polygon / polytope with ≥ 3 vertices
    assert max(vertex_counts) >= 3


# -- wiring --------------------------------------------------------------------------------------


def test_wrappers_validate_and_carry_ensembles():
    with pytest.raises(ValueError, match="attention field"):
        PreLN("sa")
    with pytest.raises(ValueError, match="geometry 'sphere'"):
        PreLN(NoLN(af.SA(1.0)))
    with pytest.raises(ValueError, match="single attention field"):
        RescaledNoLN(af.SA(1.0) + af.SA(2.0))
    for bad in (0.0, -1.0, np.nan, [[1.0]]):
        with pytest.raises(ValueError, match="alpha"):
            NGPT(af.SA(1.0), alpha=bad)
    with pytest.raises(ValueError, match="lives in R"):
        af.simulate(PreLN(af.SA(1.0)), X_EQ, 1.0, solver="lie_euler", dt=0.1)
    with pytest.raises(ValueError, match="V has shape"):
        af.simulate(NoLN(af.SA(1.0, V=np.eye(3))), X_EQ, 1.0)
    _, size = ensemble_axes(NGPT(af.SA(jnp.array([1.0, 2.0, 3.0])), alpha=jnp.array([0.1, 0.2, 0.3])))
    assert size == 3
    with pytest.raises(ValueError, match="disagree"):
        ensemble_axes(NGPT(af.SA(jnp.array([1.0, 2.0])), alpha=jnp.array([0.1, 0.2, 0.3])))
