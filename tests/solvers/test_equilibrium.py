"""Rest points (solvers/equilibrium.py): the regular simplex's whole spectrum against its closed form
(docs/model.md §13.2), the triangle's rate of arXiv 2507.22857, the zero modes of the rotations, Sylvester's
law between the Jacobian and the energy's Hessian, the same rest point through every wrapper, and a clear
refusal where Newton does not converge."""

from __future__ import annotations

import time

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles import polytopes
from attnflow.particles.synchronization import triangle_rate
from attnflow.solvers.equilibrium import symmetry_algebra


def _closed(beta, n, d, model):
    values, mult = polytopes.simplex_spectrum(beta, n, d, model)
    return np.sort(np.repeat(values, mult))[::-1]


def _field(model, beta):
    return {
        "usa": lambda: af.USA(beta),
        "sa": lambda: af.SA(beta),
        "usa-rescaled": lambda: af.USA(beta, time="rescaled"),
    }[model]()


def _zero_modes(d, r):
    return d * (d - 1) // 2 - (d - r) * (d - r - 1) // 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,n,d,betas", [("usa", 4, 3, (1.3, -0.7, -2.0)), ("sa", 4, 5, (1.3, -0.7)), ("usa-rescaled", 5, 4, (0.4, 3.0))]
)
def test_simplex_spectrum_is_the_closed_form(model, n, d, betas):
    for beta in betas:
        r = af.equilibrium(_field(model, beta), af.simplex(n, d))
        exact = _closed(beta, n, d, model)
        assert r.converged and r.eigenvalues.shape == (n * (d - 1),)
        np.testing.assert_allclose(np.sort(r.eigenvalues.real)[::-1], exact, rtol=0, atol=1e-13 * np.abs(exact).max())
        assert np.all(r.eigenvalues.imag == 0)  # a gradient flow: real spectrum
        assert r.zero_modes == _zero_modes(d, n - 1)  # the rotations that move the simplex
        positive = int(np.sum(exact > 1e-12))
        assert r.unstable == positive and r.morse_index == positive and r.neutral == 0
        # the eigenvalues come sorted by real part, largest first
        assert np.all(np.diff(r.eigenvalues.real) <= 0)


def test_simplex_threshold_is_where_the_standard_mode_crosses_zero():
    for n in (3, 4, 5, 7):
        beta = polytopes.simplex_threshold(n)
        values, _ = polytopes.simplex_spectrum(beta, n)
        assert values[0] == pytest.approx(0.0, abs=1e-15)  # μ_1(β_n) = 0
        assert (
            polytopes.simplex_spectrum(beta - 0.01, n)[0][:2].max()
            < 0
            < polytopes.simplex_spectrum(beta + 0.01, n)[0][0]
        )
    assert polytopes.simplex_threshold(3) == pytest.approx(-2.0 / 3.0, abs=1e-15)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["usa", "sa"])
def test_triangle_has_the_rate_of_arxiv_2507_22857(model):
    for beta in (-1.5, -2.0 / 3.0 + 0.1, 1.0):
        r = af.equilibrium(_field(model, beta), af.simplex(3, 2))
        mu = float(triangle_rate(beta, model))
        np.testing.assert_allclose(np.sort(r.eigenvalues.real), np.sort([mu, mu, 0.0]), atol=1e-14)
        assert r.zero_modes == 1 and r.unstable == (2 if mu > 0 else 0)


def test_newton_converges_quadratically_to_a_rotated_simplex():
    x = af.simplex(4, 3) + 0.02 * np.random.default_rng(0).normal(size=(4, 3))
    r = af.equilibrium(af.SA(1.0), x)
    assert r.converged and r.iterations <= 5 and r.residual <= 1e-14
    gram = r.x @ r.x.T
    np.testing.assert_allclose(gram[~np.eye(4, dtype=bool)], -1.0 / 3.0, atol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(r.x, axis=1), 1.0, atol=1e-15)  # on the sphere


@pytest.mark.slow
def test_wrappers_give_the_same_rest_point_and_spectrum():
    tri, beta = af.simplex(3, 2), 0.8
    base = af.equilibrium(af.SA(beta), tri).eigenvalues
    for wrapped in (
        af.PostLN(af.SA(beta)),
        af.MultiHead.identity(beta, 1, 2),
        af.SA(beta) + af.FeedForward(jnp.zeros((1, 2)), jnp.zeros(1), jnp.zeros((2, 1))),
    ):
        r = af.equilibrium(wrapped, tri)
        np.testing.assert_allclose(r.eigenvalues, base, atol=1e-14)
        assert r.zero_modes == 1
    usa = af.equilibrium(af.USA(beta), tri)
    noisy = af.equilibrium(af.Noisy(af.USA(beta), 0.3), tri)  # the rest points of the deterministic part
    np.testing.assert_allclose(noisy.eigenvalues, usa.eigenvalues, atol=1e-14)
    angles = af.equilibrium(af.Circle(beta, "usa"), np.asarray(af.to_angles(tri)))  # states in angles
    np.testing.assert_allclose(angles.eigenvalues, usa.eigenvalues, atol=1e-13)
    assert angles.zero_modes == 1 and angles.gradient is None
    # layer-wise weights, frozen in the second layer where Q = 2I: SA at 2β
    layers = af.LayerWise(af.SA(beta), Qs=jnp.stack([jnp.eye(2), 2.0 * jnp.eye(2)]), tau=1.0)
    r = af.equilibrium(layers, tri, t=1.5)
    mu = float(triangle_rate(2 * beta, "sa"))
    np.testing.assert_allclose(np.sort(r.eigenvalues.real), np.sort([mu, mu, 0.0]), atol=1e-13)


def test_causal_pair_has_its_closed_form():
    # the first token never moves; the second, antipodal, leaves at rate A_21 = 1/(1 + e^{2β}) in each direction
    beta = 0.7
    r = af.equilibrium(af.SA(beta, mask="causal"), af.simplex(2, 3))
    a = 1.0 / (1.0 + np.exp(2 * beta))
    np.testing.assert_allclose(np.sort(r.eigenvalues.real), [0.0, 0.0, a, a], atol=1e-14)
    assert r.zero_modes == 2 and r.unstable == 2 and r.gradient is None  # a mask breaks the gradient structure


@pytest.mark.slow
def test_symmetry_algebra_is_asked_of_the_field():
    assert symmetry_algebra(af.USA(1.0), 3, 3).shape == (3, 3, 3)
    K = jnp.diag(jnp.array([1.0, 1.0, 2.0]))  # rotations of the first two coordinates only
    algebra = symmetry_algebra(af.USA(1.0, K=K), 3, 3)
    assert algebra.shape == (1, 3, 3)
    A = algebra[0] / np.abs(algebra[0]).max()
    np.testing.assert_allclose(np.abs(A), [[0, 1, 0], [1, 0, 0], [0, 0, 0]], atol=1e-8)
    random = jnp.asarray(np.random.default_rng(1).normal(size=(3, 3)))
    assert symmetry_algebra(af.SA(1.0, Q=random), 3, 3).shape[0] == 0
    # zero modes: d(d−1)/2 − (d−r)(d−r−1)/2 for tokens spanning r dimensions
    assert af.equilibrium(af.USA(1.0), af.simplex(3, 3)).zero_modes == _zero_modes(3, 2)
    assert af.equilibrium(af.USA(1.0), af.simplex(2, 4)).zero_modes == _zero_modes(4, 1)


@pytest.mark.slow
def test_gradient_structure_is_tested_and_sylvester_holds():
    tri = af.simplex(3, 2)
    usa = af.equilibrium(af.USA(1.0), tri)
    assert usa.gradient == "round" and usa.climbs
    np.testing.assert_allclose(3 * usa.hessian, usa.jacobian, atol=1e-13)  # USA: ẋ = n grad E_β
    sa = af.equilibrium(af.SA(1.0), tri)
    assert sa.gradient == "attention" and sa.climbs
    Z = np.exp(1.0) + 2 * np.exp(-0.5)  # every row sum of the kernel at the triangle
    np.testing.assert_allclose(9 * sa.hessian / Z, sa.jacobian, atol=1e-13)  # SA: ẋ_i = n² grad_i E_β / Z_i
    D = jnp.diag(jnp.array([1.0, 0.5]))
    down = af.equilibrium(af.USA(1.0, K=D, V=-D), tri + 0.05)  # V = −QᵀK lowers E
    assert down.gradient == "round" and not down.climbs and down.morse_index == down.unstable
    assert af.equilibrium(af.USA(1.0, K=D), tri + 0.05).gradient is None  # V = I with QᵀK ≠ cI: no energy


def test_newton_failure_is_refused_with_the_last_iterate():
    tri = af.simplex(3, 2)
    with pytest.raises(af.EquilibriumError, match="no rest point is returned") as err:
        af.equilibrium(af.PreLN(af.SA(1.0)), tri, max_iter=10)  # Pre-LN tokens' norms grow: no rest point
    assert not err.value.result.converged
    r = af.equilibrium(af.PreLN(af.SA(1.0)), tri, max_iter=10, strict=False)
    assert not r.converged and r.residual > 0.1


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match="one member"):
        af.equilibrium(af.SA(jnp.array([1.0, 2.0])), af.simplex(3, 2))
    with pytest.raises(ValueError, match=r"shape \(n, d\)"):
        af.equilibrium(af.SA(1.0), np.zeros(3))
    with pytest.raises(ValueError, match="zero row"):
        af.equilibrium(af.SA(1.0), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="attnflow field"):
        af.equilibrium(lambda t, x: x, af.simplex(3, 2))


@pytest.mark.slow
def test_two_thousand_unknowns_in_seconds():
    # 22 clusters of 9 tokens at the cross-polytope's vertices in d = 11: n(d − 1) = 1980 unknowns
    x = np.repeat(af.cross_polytope(11), 9, axis=0)
    x = x + 1e-3 * np.random.default_rng(2).normal(size=x.shape)
    start = time.perf_counter()
    r = af.equilibrium(af.SA(2.0), x)
    elapsed = time.perf_counter() - start
    assert r.converged and r.zero_modes == 55
    assert r.unstable == r.morse_index
    assert elapsed < 60.0


def test_sylvester_compares_the_hessian_with_the_jacobian_and_fails_on_a_wrong_energy(monkeypatch):
    from attnflow.experiments.studies.equilibria.equilibria import sylvester
    from attnflow.solvers import equilibrium as eq

    tetrahedron = af.simplex(4, 3)  # USA at β = 1: a saddle of index 5 (8 tangent directions, 3 zero modes)
    right = af.equilibrium(af.USA(1.0), tetrahedron)
    assert (right.unstable, right.morse_index, right.zero_modes) == (5, 5, 3)
    assert sylvester([right.morse_index], [right.unstable]).passed
    true_terms = eq._energy_terms

    def flipped(*args):  # the energy's Hessian with its sign turned: a wrong claimed energy
        v, g, z, e, H = true_terms(*args)
        return v, g, z, e, -H

    monkeypatch.setattr(eq, "_energy_terms", flipped)
    wrong = af.equilibrium(af.USA(1.0), tetrahedron)
    assert wrong.unstable == 5 and not wrong.stable  # the Jacobian still says index 5
    assert wrong.morse_index == 0  # the flipped Hessian: no direction raises the energy
    check = sylvester([wrong.morse_index], [wrong.unstable])
    assert check.passed is False and check.measured == "1 mismatches of 1"
