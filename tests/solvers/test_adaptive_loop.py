"""Adaptive ensembles in groups: the same results as one vmapped solve, with far less work when
one member is stiff."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.fields import ensemble_axes
from attnflow.solvers import adaptive_loop


def assert_same(a, b, atol=1e-12):
    """Every array of two solutions equal to ``atol`` (infinities where the other has them)."""
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        if not hasattr(x, "dtype"):
            continue
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape
        finite = np.isfinite(y)
        np.testing.assert_array_equal(np.isfinite(x), finite)
        np.testing.assert_allclose(np.where(finite, x, 0.0), np.where(finite, y, 0.0), rtol=0, atol=atol)


@pytest.mark.slow
def test_groups_give_the_ungrouped_results_with_events_statistics_and_per_member_weights():
    members, n, d = 70, 6, 3  # 5 groups of 16, the last padded with 10 copies
    beta = jnp.linspace(0.5, 6.0, members)
    field = af.SA(beta, **af.sample_weights(1, d, "ginibre", members=members))
    x0 = af.init.uniform(2, n, d, batch=members)

    def stats(t, x, f):
        return {"energy": af.energy(x, f.beta), "gram": x @ x.T, "count": af.n_clusters(x, 1e-2)}

    common = dict(ts=jnp.linspace(0.0, 3.0, 7), save=stats, stop_when_clustered=5e-2)
    one = af.simulate(field, x0, 3.0, group_size=0, **common)
    grouped = af.simulate(field, x0, 3.0, group_size=16, **common)
    assert np.isfinite(np.asarray(one.t_event)).any()  # some members stop early
    np.testing.assert_array_equal(np.asarray(grouped.steps), np.asarray(one.steps))
    np.testing.assert_array_equal(np.asarray(grouped.t_event), np.asarray(one.t_event))
    assert_same(grouped.stats, one.stats)
    assert_same(grouped.x_final, one.x_final)


def glpr_batch(members=128, stiff=(9, 50, 51, 100), beta_stiff=6.0):
    beta = np.ones(members)
    beta[list(stiff)] = beta_stiff
    return af.USA(jnp.asarray(beta), time="glpr"), af.init.uniform(0, 16, 3, batch=members)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_a_stiff_member_holds_back_only_its_own_group():
    field, x0 = glpr_batch()
    members, size, t1 = x0.shape[0], 32, 2.0
    one = af.simulate(field, x0, t1, ts=jnp.linspace(0, t1, 5), group_size=0)
    grouped = af.simulate(field, x0, t1, ts=jnp.linspace(0, t1, 5), group_size=size)
    steps = np.asarray(one.steps)
    np.testing.assert_array_equal(np.asarray(grouped.steps), steps)  # each member's own steps
    assert steps.max() > 5 * np.median(steps)  # the batch is uneven
    # velocities ~ e^β amplify the rounding differences of vectorizing 128 members instead of 32
    # into the step-size control, so for the stiff members the ungrouped batch itself differs from
    # their single runs by up to the tolerance; the grouped run gives each its single run to rounding
    assert_same(grouped.xs, one.xs, atol=1e-4)
    for m in (9, 51):
        single = af.simulate(af.USA(field.beta[m], time="glpr"), x0[m], t1, ts=jnp.linspace(0, t1, 5))
        assert int(single.steps) == steps[m]
        assert_same(grouped.xs[m], single.xs)

    # the work of a vmapped loop is (members in it) × (steps of its slowest member)
    axes, _ = ensemble_axes(field)
    _, order = adaptive_loop.grouping(size, field, axes, x0, 0.0)
    assert set(np.asarray(order)[:4].tolist()) == {9, 50, 51, 100}  # the stiffness estimate finds them
    by_group = steps[np.asarray(order)].reshape(-1, size)
    work = size * by_group.max(axis=1).sum()
    assert work < 0.4 * members * steps.max()


def test_automatic_grouping_only_where_it_pays():
    field, x0 = glpr_batch()
    axes, _ = ensemble_axes(field)
    if jax.default_backend() == "cpu":
        size, order = adaptive_loop.grouping(None, field, axes, x0, 0.0)
        assert size == 32 and order.shape == (128,)  # the 4 stiff members share one group of 32
    # an even ensemble, a small one, and explicit choices
    even = af.SA(jnp.full(128, 2.0))
    assert adaptive_loop.grouping(None, even, ensemble_axes(even)[0], x0, 0.0) == (None, None)
    assert adaptive_loop.grouping(None, field, axes, x0[:64], 0.0) == (None, None)
    assert adaptive_loop.grouping(0, field, axes, x0, 0.0) == (None, None)
    assert adaptive_loop.grouping(128, field, axes, x0, 0.0) == (None, None)
    assert adaptive_loop.grouping(48, field, axes, x0, 0.0)[0] == 48


@pytest.mark.parametrize("bad", [-1, 2.5, True, "8"])
def test_bad_group_size_is_named(bad):
    field, x0 = glpr_batch(members=8, stiff=())
    with pytest.raises(ValueError, match=r"group_size must be None \(automatic\), 0 \(one group\) or a positive"):
        af.simulate(field, x0, 1.0, group_size=bad)


@pytest.mark.slow
@pytest.mark.parametrize("group_size", [0, 3])
def test_max_steps_reached_is_an_error_naming_the_members(group_size):
    field, x0 = glpr_batch(members=8, stiff=(5,))
    with pytest.raises(RuntimeError, match=r"member 5 of 8 reached max_steps = 40"):
        af.simulate(field, x0, 2.0, max_steps=40, group_size=group_size)


@pytest.mark.slow
def test_grouped_progress_advances_per_group(capsys):
    field, x0 = glpr_batch(members=8, stiff=(5,))
    af.simulate(field, x0, 1.0, group_size=4, progress="grouped")
    err = capsys.readouterr().err
    assert "grouped:" in err and "100%" in err
