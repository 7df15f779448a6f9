"""Initial conditions: each sampler's defining property, batching, and bad input."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af


def gram(x):
    return np.asarray(jnp.einsum("...id,...jd->...ij", x, x))


def test_uniform_is_isotropic():
    # the mean of N uniform unit vectors in R^d has E‖mean‖² = 1/N; 4096 points in d = 3
    x = af.init.uniform(0, 4096, 3)
    assert float(jnp.sum(jnp.mean(x, 0) ** 2)) < 5.0 / 4096
    # and E⟨x, e1⟩² = 1/d
    assert float(jnp.mean(x[:, 0] ** 2)) == pytest.approx(1 / 3, abs=0.03)


def test_orthogonal_frame():
    x = af.init.orthogonal(1, 6, 9, batch=3)
    assert x.shape == (3, 6, 9)
    np.testing.assert_allclose(gram(x), np.broadcast_to(np.eye(6), (3, 6, 6)), atol=1e-13)
    assert not np.allclose(x[0], x[1])  # members differ


@pytest.mark.parametrize("n, d, rho", [(5, 5, 0.3), (7, 10, -0.1), (4, 3, -1 / 3), (1, 2, 0.0)])
def test_equiangular_gram_matrix(n, d, rho):
    g = gram(af.init.equiangular(2, n, d, rho))
    expected = (1 - rho) * np.eye(n) + rho * np.ones((n, n))
    np.testing.assert_allclose(g, expected, atol=1e-13)


def test_cap_lies_in_the_cap_and_fills_it():
    w = np.array([0.0, 0.0, 2.0])
    x = af.init.cap(3, 4000, 3, angle=math.pi / 3, w=w)
    heights = np.asarray(x[:, 2])
    assert heights.min() >= math.cos(math.pi / 3) - 1e-12
    # on S², uniform in the cap means the height is uniform on [cos a, 1]
    assert heights.mean() == pytest.approx((1 + math.cos(math.pi / 3)) / 2, abs=0.02)


def test_clusters_have_the_requested_spread():
    x = af.init.clusters(4, 30, 3, k=3, spread=1e-3)
    g = gram(x)
    same = (np.arange(30)[:, None] % 3) == (np.arange(30)[None, :] % 3)
    assert g[same].min() > 1 - 1e-4  # angles of order spread·√2 inside a cluster


def test_from_array_normalizes_and_reads_npy(tmp_path):
    a = np.array([[3.0, 4.0], [0.0, -2.0]])
    np.testing.assert_allclose(af.init.from_array(a), [[0.6, 0.8], [0.0, -1.0]])
    np.save(tmp_path / "x.npy", a)
    np.testing.assert_allclose(af.init.from_array(tmp_path / "x.npy"), [[0.6, 0.8], [0.0, -1.0]])


def test_from_array_refuses_pickles(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="not a plain numeric .npy array"):
        af.init.from_array(tmp_path / "obj.npy")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: af.init.uniform(0, 0, 3), "n must be an integer ≥ 1, got 0"),
        (lambda: af.init.uniform(0, 4, 1), "d must be an integer ≥ 2, got 1"),
        (lambda: af.init.uniform(0, 4.5, 3), "n must be an integer"),
        (lambda: af.init.orthogonal(0, 5, 3), "orthogonal needs d ≥ n"),
        (lambda: af.init.equiangular(0, 4, 4, 1.0), "rho must be < 1"),
        (lambda: af.init.equiangular(0, 4, 4, -0.5), "rho must be a finite number ≥ -0.333333"),
        (lambda: af.init.equiangular(0, 4, 3, 0.2), "needs d ≥ n"),
        (lambda: af.init.cap(0, 4, 3, angle=0.0), "angle must be a finite number > 0"),
        (lambda: af.init.cap(0, 4, 3, w=[0, 0]), r"w must be a finite nonzero vector of shape \(3,\)"),
        (lambda: af.init.clusters(0, 4, 3, k=5), "k must be an integer between 1 and 4"),
        (lambda: af.init.from_array(np.zeros((3, 2))), "zero row at index"),
        (lambda: af.init.from_array(np.array([[1.0, np.nan]])), "non-finite"),
        (lambda: af.init.from_array(np.ones(3)), r"shape \(n, d\) or \(batch, n, d\)"),
        (lambda: af.init.from_array(np.ones((3, 1))), "d ≥ 2"),
        (lambda: af.init.from_array("missing.npy"), "does not exist"),
        (lambda: af.init.uniform(0, 4, 3, dtype="int32"), "dtype must be a floating type"),
    ],
)
def test_bad_sampler_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()
