"""Pseudo-arclength continuation (solvers/continuation.py): folds and branch points of normal forms located where
they are, branch switching at a pitchfork, and the particle systems' branch points in β at the closed forms
(the triangle's −2/3 of arXiv 2507.22857, the tetrahedron's −3/2 and 0, docs/model.md §13.2), and a branch of an
equivariant field that is not a gradient flow ending where its solutions start to rotate."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles import polytopes
from attnflow.particles.synchronization import NO_SYNC_BETA


class NormalForm(eqx.Module):
    """F(u, p) = ("fold") u² − p or ("pitchfork") u (p − u²): one unknown, stability from −F_u."""

    kind: str = eqx.field(static=True)

    def residual(self, u, p):
        return u**2 - p if self.kind == "fold" else u * (p - u**2)

    def start(self, guess, p):
        return np.atleast_1d(np.asarray(guess, dtype=float))

    def stability(self, u, p):
        (u,) = u
        slope = 2 * u if self.kind == "fold" else p - 3 * u**2  # ∂F/∂u; the flow u̇ = F
        return np.array([slope], complex), int(slope > 1e-12), 0

    def state(self, u, p):
        return u

    def measure(self, u, p):
        return float(u[0])

    def valid(self, u, p):
        return bool(np.all(np.isfinite(u)))

    def motion(self, u, p):
        return None


def test_fold_is_located_and_passed():
    branch = af.continuation(NormalForm("fold"), 1.0, 1.0, p_range=(-1.0, 2.0), direction=-1, ds=0.1, ds_max=0.2)
    assert len(branch.folds) == 1
    fold = branch.folds[0]
    assert fold.p == pytest.approx(0.0, abs=1e-12) and fold.u[0] == pytest.approx(0.0, abs=1e-6)
    assert np.isclose(branch.p[fold.index], fold.p)  # the fold is one of the branch's points
    # past the fold the branch comes back on u = −√p, stable (∂F/∂u = 2u < 0) where it was unstable
    after = branch.u[fold.index + 1 :, 0]
    assert np.all(after < 0) and np.allclose(after**2, branch.p[fold.index + 1 :], atol=1e-11)
    assert branch.unstable[0] == 1 and branch.unstable[-1] == 0


def test_pitchfork_branch_point_and_switching():
    trivial = af.continuation(NormalForm("pitchfork"), 0.0, -1.0, p_range=(-1.0, 1.0), ds=0.1)
    assert len(trivial.branch_points) == 1
    bp = trivial.branch_points[0]
    assert bp.p == pytest.approx(0.0, abs=1e-14) and bp.multiplicity == 1
    assert not trivial.stable[-1]  # u = 0 is unstable for p > 0
    other = af.continuation(NormalForm("pitchfork"), bp, p_range=(-1.0, 1.0), ds=0.05)
    u, p = other.u[:, 0], other.p
    np.testing.assert_allclose(u**2, p, atol=1e-11)  # the branch u² = p
    assert np.all(p >= -1e-12) and np.all(other.stable[1:])  # supercritical: stable


@pytest.mark.slow
def test_triangle_branch_point_at_minus_two_thirds():
    x = af.simplex(3, 2)
    system = af.RestPoints(lambda b: af.USA(b), x, 0.5)
    branch = af.continuation(system, x, 0.5, p_range=(-1.5, 0.5), direction=-1, ds=0.1)
    assert len(branch.branch_points) == 1
    bp = branch.branch_points[0]
    assert abs(bp.p - NO_SYNC_BETA) <= 1e-10 and bp.multiplicity == 2  # μ(β) is a double eigenvalue
    np.testing.assert_allclose(branch.state(len(branch.p) - 1), x, atol=1e-12)  # the triangle stays a rest point
    assert np.all(branch.unstable[branch.p > bp.p + 1e-9] == 2) and np.all(branch.unstable[branch.p < bp.p] == 0)


@pytest.mark.slow
def test_tetrahedron_branch_points_at_the_closed_forms():
    x = af.simplex(4, 3)
    system = af.RestPoints(lambda b: af.SA(b), x, 1.0)
    branch = af.continuation(system, x, 1.0, p_range=(-2.0, 1.0), direction=-1, ds=0.1)
    found = sorted((bp.p, bp.multiplicity) for bp in branch.branch_points)
    assert len(found) == 2
    (b1, m1), (b2, m2) = found
    assert abs(b1 - polytopes.simplex_threshold(4)) <= 1e-10 and m1 == 3  # μ_1, the standard representation
    assert abs(b2) <= 1e-10 and m2 == 2  # μ_2 = 2βe/(n − 1) vanishes at β = 0


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="p_range"):
        af.continuation(NormalForm("fold"), 1.0, 1.0, p_range=(1.0, 0.0))
    with pytest.raises(ValueError, match="direction"):
        af.continuation(NormalForm("fold"), 1.0, 1.0, p_range=(0.0, 2.0), direction=2)
    with pytest.raises(af.ContinuationError, match="singular"):
        af.continuation(NormalForm("fold"), 0.0, 0.0, p_range=(-1.0, 1.0))  # the fold itself


@pytest.mark.slow
def test_families_in_a_weight_scale_and_a_mask_slope():
    # Q = sI makes the logits β s⟨x_i, x_j⟩: the triangle's branch point moves to β s = −2/3
    x = af.simplex(3, 2)
    system = af.RestPoints(lambda s: af.USA(-1.0, Q=s * jnp.eye(2)), x, 0.2)
    branch = af.continuation(system, x, 0.2, p_range=(0.2, 1.2), ds=0.1)
    assert len(branch.branch_points) == 1 and abs(branch.branch_points[0].p - 2.0 / 3.0) <= 1e-10
    # a causal antipodal pair under ALiBi's slope m: the second token leaves at A_21 = 1/(1 + e^{2β + m})
    beta, pair = 0.5, af.simplex(2, 2)
    family = lambda m: af.SA(beta, mask="causal", positional="alibi", alibi_slope=m)  # noqa: E731
    branch = af.continuation(af.RestPoints(family, pair, 0.0), pair, 0.0, p_range=(0.0, 2.0), ds=0.2)
    rates = np.array([values.real.max() for values in branch.eigenvalues])
    np.testing.assert_allclose(rates, 1.0 / (1.0 + np.exp(2 * beta + branch.p)), rtol=1e-12)
    assert branch.p.max() >= 2.0 and np.all(branch.unstable == 1)


ROTATION = jnp.array([[0.0, -1.0], [1.0, 0.0]])  # J, the rotation by π/2: V = I + wJ commutes with every rotation


def _rotating_family(w):
    return af.SA(1.0, V=jnp.eye(2) + w * ROTATION)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_branch_that_starts_to_rotate_ends_with_the_rotation_rate():
    # at w = 0 two clusters (2 + 1 tokens) at rest; for w ≠ 0 the solutions of F = 0 turn at speed ≈ w
    guess = np.array([[1.0, 0.0], [np.cos(0.3), np.sin(0.3)], [np.cos(2.5), np.sin(2.5)]])
    rest = af.equilibrium(_rotating_family(0.0), guess)
    system = af.RestPoints(_rotating_family, rest.x, 0.0)
    branch = af.continuation(system, rest.x, 0.0, p_range=(-0.1, 0.5), ds=0.1)
    assert branch.p.tolist() == [0.0]  # the only point at rest
    speed = np.max(np.linalg.norm(np.asarray(_rotating_family(0.0)(0.0, jnp.asarray(branch.state(0)))), axis=-1))
    assert speed <= 1e-15
    moving = branch.relative_equilibrium
    assert moving is not None and moving.kind == "relative" and moving.p > 0
    x = system.configuration(moving.u)
    v = np.asarray(_rotating_family(moving.p)(0.0, jnp.asarray(x)))
    turn = np.sum(v * (x @ np.asarray(ROTATION).T), axis=-1)  # each token's angular speed
    assert branch.rotation_rate == pytest.approx(np.max(np.abs(turn)), rel=1e-3)
    assert 0.5 * moving.p < branch.rotation_rate < moving.p  # slower than w: the attention's mixing
    assert "turns into relative equilibria" in branch.ended and f"ω = {branch.rotation_rate:.3g}" in branch.ended


def test_a_single_cluster_rotates_at_exactly_w():
    # n tokens at one point: f_i = P_x(V x) = w J x, a rigid rotation at rate w, refused as a rest point
    cluster = np.repeat([[1.0, 0.0]], 3, axis=0)
    system = af.RestPoints(_rotating_family, cluster, 0.0)
    branch = af.continuation(system, cluster, 0.0, p_range=(-0.1, 0.5), ds=0.05)
    assert branch.p.tolist() == [0.0]
    assert branch.rotation_rate == pytest.approx(branch.relative_equilibrium.p, rel=1e-12)
    assert "rotating rigidly" in branch.ended
    with pytest.raises(af.ContinuationError, match="rotating rigidly at rate ω = 0.2"):
        af.continuation(system, cluster, 0.2, p_range=(-0.1, 0.5))  # a start that is not at rest
