"""Coalesced clusters: tokens that have come within √(2ε) move as one, which removes the stiff
contraction of collapsed clusters (USA at large β) without changing what the field does elsewhere."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import runner
from attnflow.particles.coalesce import representatives, settler
from attnflow.particles.sphere import project


def test_without_close_pairs_the_field_is_unchanged():
    x = af.init.uniform(0, 24, 3)
    for inner in (af.SA(4.0), af.USA(2.0, mask="causal")):
        np.testing.assert_array_equal(af.Coalesced(inner, 1e-12)(0.0, x), inner(0.0, x))


def test_a_token_near_an_earlier_one_moves_with_it():
    x = np.array(af.init.uniform(1, 10, 3))
    x[7] = x[2] + 1e-7 * np.array([1.0, -2.0, 0.5])
    x[7] /= np.linalg.norm(x[7])
    x = jnp.asarray(x)
    rep = np.asarray(representatives(x, 1e-12))
    assert rep[7] == 2 and (rep[np.arange(10) != 7] == np.arange(10)[np.arange(10) != 7]).all()
    f = af.Coalesced(af.USA(6.0), 1e-12)
    v = np.asarray(f(0.0, x))
    np.testing.assert_array_equal(v[7], v[2])  # one velocity for the pair
    # the field sees token 7 at token 2's place: a point mass of 2 there
    placed = x.at[7].set(x[2])
    np.testing.assert_allclose(v, np.asarray(project(placed, af.USA(6.0).drift(0.0, placed))), rtol=0, atol=1e-12)


@pytest.mark.slow
def test_coalescing_removes_the_stiffness_of_usa_clusters():
    """USA at β = 9: the explicit adaptive method is held to ~1/e^β m/n by clusters that are already
    points; coalesced, it takes about 60× fewer steps and ends in the same clustered state."""
    x0 = af.init.uniform(0, 32, 2, batch=4)
    kw = dict(solver="tsit5", rtol=1e-6, atol=1e-9, ts=jnp.linspace(0.0, 5.0, 11), max_steps=200_000)
    plain = af.simulate(af.USA(9.0), x0, 5.0, **kw)
    merged = af.simulate(af.Coalesced(af.USA(9.0), 1e-12), x0, 5.0, **kw)
    steps_plain, steps_merged = np.asarray(plain.steps), np.asarray(merged.steps)
    assert (steps_plain > 3000).all() and (steps_merged * 30 < steps_plain).all(), (steps_plain, steps_merged)

    def fraction(xs):
        g = np.einsum("...id,...jd->...ij", xs, xs)
        return ((g >= 1 - 1e-3).sum((-1, -2)) - 32) / (32 * 31)

    np.testing.assert_array_equal(fraction(np.asarray(merged.xs))[:, -1], fraction(np.asarray(plain.xs))[:, -1])
    assert np.max(np.abs(np.asarray(merged.xs) - np.asarray(plain.xs))[:, 1:].max()) < 0.5
    np.testing.assert_allclose(np.linalg.norm(np.asarray(merged.xs), axis=-1), 1.0, atol=1e-12)


@pytest.mark.slow
def test_the_coalesce_key_wraps_the_field_and_refuses_off_sphere_norms():
    small = {
        "model": "usa",
        "n": 8,
        "d": 2,
        "beta": [6.0],
        "seeds": 2,
        "t1": 2.0,
        "n_save": 3,
        "solver": "tsit5",
        "progress": False,
    }
    plain = runner.run(load_config(small))
    merged = runner.run(load_config({**small, "coalesce": 1e-12}))
    assert merged.steps.max() * 2 < plain.steps.min()  # the coalesced field was built and used
    np.testing.assert_array_equal(
        merged.stats["clustered_fraction"][..., -1], plain.stats["clustered_fraction"][..., -1]
    )
    with pytest.raises(ConfigError, match="coalesce"):
        load_config({**small, "coalesce": 1e-12, "norm": "pre"})
    with pytest.raises(ValueError, match="eps"):
        af.Coalesced(af.SA(1.0), 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("solver, extra", [("tsit5", {}), ("rk4", {"dt": 0.01}), ("rk4", {"dt": 0.01, "dense": True})])
def test_merges_are_kept_by_every_solver(solver, extra):
    """A pair that comes within √(2ε) becomes one point at the end of that step and stays one:
    its gap is exactly 0 at every later save (merges have hysteresis)."""
    x = np.array(af.init.uniform(3, 12, 3))
    x[5] = x[1] + 3e-5 * np.array([1.0, 0.5, -1.0])  # gap ~1e-9: above ε, contracted by USA
    x = jnp.asarray(x / np.linalg.norm(x, axis=-1, keepdims=True))
    ts = jnp.linspace(0.0, 1.0, 21)
    kw = dict(solver=solver, ts=ts, **extra)
    merged = np.asarray(af.simulate(af.Coalesced(af.USA(3.0), 1e-10), x, 1.0, **kw).xs)
    plain = np.asarray(af.simulate(af.USA(3.0), x, 1.0, **kw).xs)
    gap = 0.5 * np.sum((merged[:, 5] - merged[:, 1]) ** 2, axis=-1)
    joined = np.flatnonzero(gap == 0.0)
    assert joined.size and joined[0] > 0, gap  # apart at first, then merged
    assert (gap[joined[0] :] == 0.0).all(), gap  # and never split again
    # the other tokens move as in the exact flow, up to the √(2ε) move of the merge
    others = np.arange(12) != 5
    np.testing.assert_allclose(merged[:, others], plain[:, others], atol=2 * np.sqrt(2e-10))


@pytest.mark.slow
def test_kept_merges_stop_the_chatter_of_collapsed_subclusters():
    """The member of the USA phase diagram (β = 5.86, seed 10, t ≤ 30) whose two collapsed
    sub-clusters sat at the tolerance level of tsit5 (gap ~1e-11, just above ε = 1e-12) took 1986
    steps; with ε above that level and merges kept it takes about as many as its neighbours
    (≤ 200)."""
    x0 = runner.initial_conditions(load_config({"n": 32, "d": 2, "seeds": 11, "seed": 0}), 2)[10]
    kw = dict(solver="tsit5", rtol=1e-6, atol=1e-9, dtype="float64", ts=jnp.linspace(0.0, 30.0, 7))
    sol = af.simulate(af.Coalesced(af.USA(5.858823529411765), 1e-10), x0, 30.0, **kw)
    assert int(sol.steps) <= 200, int(sol.steps)


def test_a_coalesced_field_reports_its_threshold_its_angles_and_its_settled_field():
    usa = af.USA(2.0)
    field = af.Coalesced(usa, 1e-9)
    assert field.coalesce_eps == 1e-9 and usa.coalesce_eps is None and (usa + usa).coalesce_eps is None
    assert field.settled_field() is usa and usa.settled_field() is usa
    assert not field.in_angles and not usa.in_angles
    assert af.Circle(1.0).in_angles and af.Coalesced(af.Circle(1.0)).in_angles
    assert float(field.temperature) == 2.0 and field.inner_fields() == (usa,)
    # the solvers' settling map: a token within ½‖x_i − x_j‖² ≤ ε of an earlier one is placed on it
    x = np.array(af.init.uniform(3, 4, 3))
    x[2] = x[0] + 1e-6 * np.array([1.0, -1.0, 0.5])  # ½‖x_2 − x_0‖² ≈ 1.1e-12
    settled = np.asarray(settler(field)(jnp.asarray(x)[None]))[0]
    np.testing.assert_array_equal(settled, x[[0, 1, 0, 3]])
    assert settler(usa)(x) is x
