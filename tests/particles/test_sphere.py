"""Sphere geometry: projections, exponential map, exact rotations, precise gaps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import attnflow as af
from attnflow.particles import sphere


def _random_pair(seed, d):
    k1, k2 = jax.random.split(jax.random.key(seed))
    x = sphere.normalize(jax.random.normal(k1, (d,)))
    v = sphere.project(x, jax.random.normal(k2, (d,)))
    return x, v


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 9), scale=st.floats(0.0, 6.0))
def test_expmap_stays_on_sphere_at_geodesic_distance(seed, d, scale):
    x, v = _random_pair(seed, d)
    v = scale * v / jnp.linalg.norm(v)
    y = sphere.expmap(x, v)
    assert abs(float(jnp.linalg.norm(y)) - 1.0) < 1e-14
    # great-circle distance equals ‖v‖ as long as ‖v‖ ≤ π (the geodesic is minimizing); near π it is
    # 2 arcsin(‖x − y‖/2), whose rounding grows like ε / cos(‖v‖/2) as the chord reaches its maximum 2
    if scale <= np.pi - 1e-6:
        tol = 1e-12 + 8 * np.finfo(float).eps / np.cos(scale / 2)
        assert float(sphere.geodesic_distance(x, y)) == pytest.approx(scale, abs=tol)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), d=st.integers(2, 9), h=st.floats(-3.0, 3.0))
def test_rotate_is_an_isometry_that_moves_y_along_its_geodesic(seed, d, h):
    y, f = _random_pair(seed, d)
    xs = sphere.normalize(jax.random.normal(jax.random.key(seed + 1), (5, d)))
    r = sphere.rotate(y, f, xs, h)
    # exp(hA) is orthogonal: inner products among the rotated points are unchanged
    np.testing.assert_allclose(r @ r.T, xs @ xs.T, atol=1e-13)
    # and it moves y exactly like the exponential map
    np.testing.assert_allclose(sphere.rotate(y, f, y, h), sphere.expmap(y, h * f), atol=1e-13)


def test_rotate_with_zero_generator_is_identity():
    x = af.init.uniform(0, 4, 3)
    np.testing.assert_array_equal(sphere.rotate(x, jnp.zeros_like(x), x, 0.7), x)


def test_project_is_tangent_and_idempotent():
    x = af.init.uniform(1, 20, 5)
    y = jax.random.normal(jax.random.key(2), (20, 5))
    p = sphere.project(x, y)
    np.testing.assert_allclose(jnp.sum(p * x, -1), 0.0, atol=1e-14)
    np.testing.assert_allclose(sphere.project(x, p), p, atol=1e-14)


def test_pairwise_gaps_keep_precision_where_one_minus_gram_loses_it():
    # two points at angle 1e-9: 1 − cos θ = θ²/2 = 5e-19, far below float64 epsilon
    theta = 1e-9
    x = jnp.array([[1.0, 0.0], [np.cos(theta), np.sin(theta)]])
    gap = float(sphere.pairwise_gaps(x)[0, 1])
    assert gap == pytest.approx(theta**2 / 2, rel=1e-6)
    assert float(1.0 - (x @ x.T)[0, 1]) == 0.0  # what the Gram matrix would say


def test_norm_error_measures_distance_from_sphere():
    x = jnp.array([[1.0, 0.0], [0.0, 1.5]])
    assert float(sphere.norm_error(x)) == pytest.approx(0.5)


def test_within_is_the_one_cluster_test_at_threshold_delta():
    # three directions at angles 0, a, 2a: the widest pair has ⟨x_i, x_j⟩ = cos 2a
    a = 0.01
    x = jnp.array([[1.0, 0.0], [np.cos(a), np.sin(a)], [np.cos(2 * a), np.sin(2 * a)]]) * jnp.array(
        [[1.0], [3.0], [0.5]]
    )
    gap = 1.0 - np.cos(2 * a)
    assert bool(sphere.within(x, gap * 1.001)) and not bool(sphere.within(x, gap * 0.999))


@pytest.mark.slow
@pytest.mark.parametrize("d", [1, 2, 3, 8, 9, 16])
def test_row_dot_written_out_equals_the_reduction(d):
    # d ≤ SMALL_D sums slices; beyond, jnp.sum: the same inner products to rounding
    x = jax.random.normal(jax.random.key(d), (5, 7, d))
    y = jax.random.normal(jax.random.key(d + 100), (5, 7, d))
    dot = sphere.row_dot(x, y)
    assert dot.shape == (5, 7, 1)
    np.testing.assert_allclose(
        dot[..., 0], np.einsum("...k,...k->...", np.asarray(x), np.asarray(y)), rtol=1e-13, atol=1e-14 * d
    )
    np.testing.assert_allclose(np.linalg.norm(sphere.normalize(x), axis=-1), 1.0, atol=1e-15)
