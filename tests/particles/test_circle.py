"""The circle in angles: the same trajectories as SA/USA in the plane, symmetries, bad input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.circle import Circle, from_angles, to_angles

N = 8
X0 = af.init.uniform(0, N, 2)
TS = np.linspace(0.0, 10.0, 11)
# tight adaptive tolerances: both runs then sit within ~1e-10 of the exact flow (measured 8e-11)
TIGHT = dict(rtol=1e-12, atol=1e-12, solver="dopri8")


def test_angles_round_trip():
    theta = to_angles(X0)
    assert theta.shape == (N, 1)
    np.testing.assert_allclose(from_angles(theta), X0, atol=1e-15)
    assert to_angles(jnp.stack([X0, X0])).shape == (2, N, 1)
    # to_angles reads directions: any radius
    np.testing.assert_allclose(to_angles(3.0 * X0), theta, atol=1e-15)


@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("model", ["sa", "usa", "usa-rescaled"])
def test_angular_velocity_is_the_tangential_component_of_the_planar_field(model, exact):
    field = af.particles.fields.make(model, 2.0)
    theta = to_angles(X0)
    tangent = jnp.concatenate([-jnp.sin(theta), jnp.cos(theta)], axis=-1)
    # ẋ_i = θ̇_i (−sin θ_i, cos θ_i): one rounding-level identity per particle
    v = field(0.0, X0)
    angular = Circle(2.0, model, exact=exact)(0.0, theta)
    np.testing.assert_allclose(angular * tangent, v, atol=1e-14 * float(jnp.max(jnp.abs(v))))


def test_exact_form_keeps_small_velocities_relative_precision():
    # a tight cluster, spacing 1e-9 (velocities ~1e-9), away from θ = 0 so that c_i c_j + s_i s_j
    # and s_i c_j − c_i s_j cancel
    theta = 0.7 + 1e-9 * jnp.array([[0.0], [1.0], [3.0], [7.0]])
    th = np.asarray(theta[:, 0], dtype=np.longdouble)
    # reference in extended precision from the exact differences (exact in binary for these θ)
    delta = th[:, None] - th[None, :]
    w = np.exp(2.0 * (np.cos(delta) - 1.0))
    ref = (-(w * np.sin(delta)).sum(1) / w.sum(1)).astype(np.float64)
    exact = np.asarray(Circle(2.0, exact=True)(0.0, theta))[:, 0]
    fast = np.asarray(Circle(2.0)(0.0, theta))[:, 0]
    np.testing.assert_allclose(exact, ref, rtol=1e-12)
    # the product form is as good as the planar field: ~1e-16 absolute, i.e. ~1e-7 relative here
    np.testing.assert_allclose(fast, ref, atol=1e-15)
    assert np.max(np.abs(fast / ref - 1)) > 1e-10


# one run per model; the two forms (exact or not) agree pointwise to rounding (test above), so each
# is run once here to keep the compile count down
@pytest.mark.slow
@pytest.mark.parametrize("model, exact", [("sa", False), ("usa", True)])
def test_circle_trajectories_match_the_planar_ones_batched_over_beta(model, exact):
    # β ≤ 4: USA velocities grow like e^β, so larger β only costs steps here
    betas = jnp.array([0.0, 1.0, 4.0])
    planar = af.particles.fields.make(model, betas)
    xs = af.simulate(planar, X0, TS[-1], ts=TS, **TIGHT).xs
    sol = af.simulate(Circle(betas, model, exact=exact), to_angles(X0), TS[-1], ts=TS, **TIGHT)
    assert sol.xs.shape == (3, TS.size, N, 1)
    np.testing.assert_allclose(from_angles(sol.xs), xs, atol=1e-9)
    # the common rotation θ → θ + c commutes with the flow (rotation equivariance, docs/model.md §1.1);
    # same shapes and t1, so this reuses the compiled run
    c = 0.7
    shifted = af.simulate(Circle(betas, model, exact=exact), to_angles(X0) + c, TS[-1], ts=TS, **TIGHT)
    np.testing.assert_allclose(shifted.xs, sol.xs + c, atol=1e-9)


def test_kuramoto_at_beta_zero_and_stable_huge_beta():
    theta = to_angles(X0)
    # β = 0: SA and USA are the Kuramoto model θ̇_i = −(1/n) Σ_j sin(θ_i − θ_j)
    kuramoto = -jnp.mean(jnp.sin(theta - theta.T), axis=1, keepdims=True)
    for model in ("sa", "usa", "usa-rescaled"):
        for exact in (False, True):
            np.testing.assert_allclose(Circle(0.0, model, exact=exact)(0.0, theta), kuramoto, atol=1e-15)
    # β = 1e4: the weights e^{β(cos Δ − 1)} ≤ 1 never overflow; SA is a convex combination of
    # the −sin Δ_ij, so |θ̇_i| ≤ 1
    for exact in (False, True):
        for model in ("sa", "usa-rescaled"):
            v = Circle(1e4, model, exact=exact)(0.0, theta)
            assert bool(jnp.all(jnp.isfinite(v))) and float(jnp.max(jnp.abs(v))) <= 1.0


def test_circle_validates():
    with pytest.raises(ValueError, match="model"):
        Circle(1.0, "kuramoto")
    with pytest.raises(ValueError, match="beta"):
        Circle(-1.0)
    with pytest.raises(ValueError, match="to_angles"):
        af.simulate(Circle(1.0), X0, 1.0)
    with pytest.raises(ValueError, match="usa-rescaled"):
        af.simulate(Circle(800.0, "usa"), to_angles(X0), 1.0)
    with pytest.raises(ValueError, match="lives in R"):
        af.simulate(Circle(1.0), to_angles(X0), 1.0, solver="cg3", dt=0.1)
    with pytest.raises(ValueError, match=r"\(\.\.\., n, 2\)"):
        to_angles(jnp.ones((4, 3)))
    with pytest.raises(ValueError, match=r"\(\.\.\., n, 1\)"):
        from_angles(jnp.ones((4, 2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("span", [4.0, 1e3])
def test_sincos_is_within_one_ulp(dtype, span):
    from attnflow.particles.circle import sincos

    theta = np.random.default_rng(0).uniform(-span, span, 200_000).astype(dtype)
    theta = np.concatenate([theta, (np.arange(-8, 9) * np.pi / 2).astype(dtype), [dtype(0.0), dtype(-0.0)]])
    s, c = sincos(jnp.asarray(theta))
    assert s.dtype == c.dtype == dtype
    exact = theta.astype(np.float64)  # the rounded input's exact sine and cosine (to float64)
    eps = np.finfo(dtype).eps
    assert np.max(np.abs(np.asarray(s, np.float64) - np.sin(exact))) <= 1.0 * eps
    assert np.max(np.abs(np.asarray(c, np.float64) - np.cos(exact))) <= 1.0 * eps


def test_exp2_is_within_three_ulp_and_keeps_nan():
    from attnflow.particles.circle import exp2

    rng = np.random.default_rng(1)
    y = np.concatenate(
        [
            rng.uniform(-126.0, 0.0, 400_000),
            rng.uniform(0.0, 127.0, 20_000),
            np.arange(-126, 128),
            [-1e-30, 1e-7, -0.5, 0.5],
        ]
    ).astype(np.float32)
    got = np.asarray(exp2(jnp.asarray(y)), np.float64)
    # relative to the float32 input's exact power of two: the polynomial's 1.2e-7 and its rounding
    assert np.max(np.abs(got / np.exp2(y.astype(np.float64)) - 1.0)) <= 3 * np.finfo(np.float32).eps
    np.testing.assert_array_equal(
        exp2(jnp.asarray(np.arange(-126, 128), jnp.float32)),
        np.exp2(np.arange(-126, 128, dtype=np.float64)).astype(np.float32),
    )
    below = np.asarray(exp2(jnp.asarray([-126.5, -200.0, -np.inf], jnp.float32)))
    assert np.all(below <= np.float32(2.0**-126)) and np.all(below >= 0.0)
    assert np.isnan(exp2(jnp.asarray([np.nan], jnp.float32))).all()
    y64 = jnp.asarray([-3.25, 0.0, 1.5])
    np.testing.assert_array_equal(exp2(y64), jnp.exp2(y64))


@pytest.mark.slow
def test_float32_weights_by_exp2_give_the_float64_velocities_to_float32_precision():
    theta = np.random.default_rng(2).uniform(-np.pi, np.pi, (4, 32, 1))
    for beta in (0.1, 4.0, 9.0, 50.0):
        for model in ("sa", "usa-rescaled"):
            field = Circle(beta, model)
            v64 = np.asarray(jax.vmap(lambda th, field=field: field(0.0, th))(jnp.asarray(theta)))
            v32 = np.asarray(jax.vmap(lambda th, field=field: field(0.0, th))(jnp.asarray(theta, jnp.float32)))
            assert v32.dtype == np.float32
            # the angles' own rounding (≈ 3e-7 at |θ| ≤ π) times β bounds what float32 can give
            tol = 2e-6 * max(1.0, beta)
            np.testing.assert_allclose(v32, v64, atol=tol * max(1.0, np.abs(v64).max()))


@pytest.mark.parametrize(
    "method",
    [
        dict(solver="rk4", dt=0.05),
        dict(solver="rk4", dt=0.05, dense=True),
        dict(solver="tsit5", rtol=1e-10, atol=1e-12),
    ],
)
@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_stopping_at_consensus_in_angles_is_stopping_in_the_plane(method):
    # the consensus test reads the tokens' directions (cos θ, sin θ), not the angles as vectors in R¹
    x0 = af.init.uniform(0, N, 2, batch=4)
    plane = af.simulate(af.SA(1.0), x0, 20.0, stop_when_clustered=1e-3, **method)
    angles = af.simulate(Circle(1.0), to_angles(x0), 20.0, stop_when_clustered=1e-3, **method)
    t_plane = np.asarray(plane.t_event)
    assert np.all(np.isfinite(t_plane)) and np.all(t_plane > 1.0)  # every member gathers, none at the start
    # fixed steps stop at the same step; the adaptive event is located to the solvers' tolerance
    np.testing.assert_allclose(np.asarray(angles.t_event), t_plane, atol=1e-12 if "dt" in method else 1e-4)
    already = af.simulate(Circle(1.0), jnp.zeros((N, 1)), 1.0, stop_when_clustered=1e-3, **method)
    assert float(already.t_event) == 0.0


def test_spread_is_the_largest_pair_gap_whenever_below_one():
    from attnflow.particles.circle import spread

    rng = np.random.default_rng(1)
    # clusters of every width around centres far from 0 (the range is taken from the first angle, wrapped)
    widths = rng.choice([1e-9, 1e-5, 1e-2, 0.5, 1.5, 3.0, 7.0], 4000)
    theta = rng.uniform(-30.0, 30.0, (4000, 1)) + widths[:, None] * rng.uniform(-1.0, 1.0, (4000, 7))
    exact = np.max(2.0 * np.sin(0.5 * (theta[:, :, None] - theta[:, None, :])) ** 2, axis=(1, 2))
    got = np.asarray(spread(jnp.asarray(theta[..., None])))
    below = exact < 1.0
    assert 1000 < below.sum() < 3900  # both sides tested
    np.testing.assert_allclose(got[below], exact[below], rtol=1e-12, atol=0)
    assert np.all(got[~below] >= 1.0)  # so a test spread ≤ δ < 1 is exact
    # three tokens pairwise 2π/3 apart: no half circle holds them, their spread is 1.5
    assert float(spread(jnp.asarray([[0.0], [2.0 * np.pi / 3], [-2.0 * np.pi / 3]]))) >= 1.0


@pytest.mark.slow
def test_queue_in_angles_gives_diffrax_events_and_saves():
    # the queue (more than 64 members) against diffrax's vmapped solve: its consensus test from the
    # angles' range and its saves from the interpolant's Horner form
    members = 80
    beta = np.linspace(0.5, 4.0, members)
    x0 = np.asarray(to_angles(af.init.uniform(2, N, 2, batch=members)))
    common = dict(
        ts=np.linspace(0.0, 8.0, 33),
        rtol=1e-9,
        atol=1e-12,
        stop_when_clustered=1e-3,
        save=lambda t, th: af.particles.clustered_fraction_of_angles(th, 1e-2),
    )
    q = af.simulate(Circle(beta), x0, 8.0, **common)
    ref = af.simulate(Circle(beta), x0, 8.0, group_size=0, **common)
    ev, ev_ref = np.asarray(q.t_event), np.asarray(ref.t_event)
    np.testing.assert_array_equal(np.isfinite(ev), np.isfinite(ev_ref))
    assert 10 < np.isfinite(ev).sum() < members - 10
    np.testing.assert_allclose(ev[np.isfinite(ev)], ev_ref[np.isfinite(ev_ref)], rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(q.stats), np.asarray(ref.stats))
    late = ~np.isfinite(ev)  # members that ran to t1: the final states within the tolerance
    np.testing.assert_allclose(np.asarray(q.x_final)[late], np.asarray(ref.x_final)[late], rtol=0, atol=1e-7)
