"""Adaptive ensembles as a queue (solvers/queue.py): members in slots refilled as they finish give
the results of diffrax's vmapped solve, within the tolerance, in the members' own order."""

import jax.numpy as jnp
import numpy as np
import pytest
from field_helpers import BlowsUp

import attnflow as af
from attnflow.experiments.builtin import EXPERIMENTS
from attnflow.experiments.config import load_config
from attnflow.experiments.run import field_config as models
from attnflow.particles.circle import Circle, to_angles
from attnflow.solvers import adaptive_loop, loop, queue

MEMBERS = 80  # more than the 64 members up to which adaptive_loop never groups: the queue runs them


def test_the_queue_runs_large_adaptive_ensembles_only():
    jumps = np.zeros(0)
    assert adaptive_loop.queue_slots("tsit5", True, jumps, None, MEMBERS, None) == queue.SLOTS
    assert adaptive_loop.queue_slots("dopri5", True, jumps, None, MEMBERS, None) == queue.SLOTS
    # few members, an explicit grouping, a method without FSAL, layer switches, constant steps: diffrax
    assert adaptive_loop.queue_slots("tsit5", True, jumps, None, 64, None) is None
    assert adaptive_loop.queue_slots("tsit5", True, jumps, 16, MEMBERS, None) is None
    assert adaptive_loop.queue_slots("dopri8", True, jumps, None, MEMBERS, None) is None
    assert adaptive_loop.queue_slots("tsit5", True, np.array([1.0]), None, MEMBERS, None) is None
    assert adaptive_loop.queue_slots("tsit5", False, jumps, None, MEMBERS, None) is None


@pytest.mark.slow
def test_a_part_of_a_large_ensemble_runs_the_queue_as_the_whole_does():
    # ``ensemble``: the members of the whole of which a call is a part; the loop is chosen for it, so parts
    # of 40 members (fewer than 64, which alone would run diffrax's vmapped solve) take the queue's steps
    beta, x0 = _ensemble()
    run = lambda lo, hi, **kw: af.simulate(af.SA(beta[lo:hi]), x0[lo:hi], 3.0, ts=np.linspace(0, 3, 4), **kw)  # noqa: E731
    whole = run(0, MEMBERS)
    parts = [run(lo, lo + 40, ensemble=MEMBERS) for lo in (0, 40)]
    np.testing.assert_array_equal(np.concatenate([np.asarray(p.steps) for p in parts]), whole.steps)
    xs = np.concatenate([np.asarray(p.xs) for p in parts])
    np.testing.assert_allclose(xs, whole.xs, rtol=0, atol=1e-11)  # the queue's, to rounding
    alone = run(0, 40)  # without it: diffrax's solve, whose step counts differ
    assert np.any(np.asarray(alone.steps) != np.asarray(whole.steps)[:40])
    with pytest.raises(ValueError, match="ensemble = 30 counts the members of the whole ensemble"):
        run(0, 40, ensemble=30)


def _ensemble(n=6, d=3):
    beta = jnp.linspace(0.5, 6.0, MEMBERS)
    x0 = np.array(af.init.uniform(3, n, d, batch=MEMBERS))
    x0[5] = x0[5, :1] + 1e-4 * x0[5]  # one member already clustered at t0
    return beta, x0


@pytest.mark.slow
def test_queue_gives_the_vmapped_solve_events_and_statistics_in_member_order():
    beta, x0 = _ensemble()
    field = af.SA(beta, **af.sample_weights(1, 3, "ginibre", members=MEMBERS))

    def stats(t, x, f):
        return {"energy": af.energy(x, f.beta), "count": af.n_clusters(x, 1e-2)}

    common = dict(ts=jnp.linspace(0.0, 4.0, 9), save=stats, stop_when_clustered=5e-2, rtol=1e-9, atol=1e-12)
    q = af.simulate(field, x0, 4.0, **common)
    ref = af.simulate(field, x0, 4.0, group_size=0, **common)  # diffrax, one vmapped solve
    ev, ev_ref = np.asarray(q.t_event), np.asarray(ref.t_event)
    np.testing.assert_array_equal(np.isfinite(ev), np.isfinite(ev_ref))
    assert 5 < np.isfinite(ev).sum() < MEMBERS - 5  # events and full runs both tested
    assert ev[5] == 0.0
    # the crossing located on the interpolant, as diffrax's root finding locates it
    np.testing.assert_allclose(ev[np.isfinite(ev)], ev_ref[np.isfinite(ev_ref)], rtol=0, atol=1e-7)
    np.testing.assert_allclose(np.asarray(q.stats["energy"]), np.asarray(ref.stats["energy"]), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(q.stats["count"]), np.asarray(ref.stats["count"]))
    # the same method, the same tolerance: about as many steps (the controllers differ in detail)
    steps, steps_ref = np.asarray(q.steps, float), np.asarray(ref.steps, float)
    assert 0.7 < steps.mean() / steps_ref.mean() < 1.3
    norms = np.linalg.norm(np.asarray(q.x_final), axis=-1)
    np.testing.assert_allclose(norms, 1.0, rtol=0, atol=1e-14)


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_queue_error_follows_the_tolerance_against_a_tight_reference():
    beta, x0 = _ensemble(n=8, d=2)
    field = af.SA(beta)
    ts = jnp.linspace(0.0, 5.0, 11)
    ref = af.simulate(field, x0, 5.0, ts=ts, solver="dopri8", rtol=1e-12, atol=1e-14, group_size=0)
    errors = []
    for rtol in (1e-5, 1e-8):
        q = af.simulate(field, x0, 5.0, ts=ts, rtol=rtol, atol=1e-3 * rtol)
        errors.append(float(np.max(np.abs(np.asarray(q.xs) - np.asarray(ref.xs)))))
    # steps held to rtol, saves from tsit5's own continuous extension: error ≈ a few rtol (3.4e-5, 3.2e-8)
    assert errors[0] < 2e-4
    assert errors[1] < 3e-7
    assert errors[1] < errors[0] / 300  # a 1000× tighter tolerance: about 1000× smaller errors


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_saves_inside_the_loop_equal_the_saves_after_it(monkeypatch):
    beta, x0 = _ensemble(n=5, d=3)

    def stats(t, x, f):
        return {"energy": af.energy(x, f.beta), "gram": x @ x.T}

    common = dict(ts=jnp.linspace(0.0, 3.0, 13), save=stats, stop_when_clustered=5e-2)
    after = af.simulate(af.SA(beta), x0, 3.0, **common)
    monkeypatch.setattr(loop, "STATES_AFTER_LOOP_BYTES", 0)  # statistics at every save, in the loop
    inside = af.simulate(af.SA(beta), x0, 3.0, **common)
    for key in ("energy", "gram"):
        np.testing.assert_allclose(np.asarray(inside.stats[key]), np.asarray(after.stats[key]), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(np.asarray(inside.t_event), np.asarray(after.t_event))


@pytest.mark.slow
def test_a_failing_member_stops_at_its_last_finite_state_and_the_others_go_on():
    betas = np.where(np.arange(MEMBERS) % 10 == 3, 3.0, 1.0)
    x0 = af.init.uniform(4, 5, 3, batch=MEMBERS)
    ts = jnp.linspace(0.0, 3.0, 7)
    with pytest.raises(af.NonFiniteError) as info:
        af.simulate(BlowsUp(betas), x0, 3.0, ts=ts)
    err = info.value
    assert list(err.members) == list(range(3, MEMBERS, 10))
    assert all(0.9 < t <= 1.0 for t in err.times)
    keep = np.flatnonzero(betas < 2.0)
    ref = af.simulate(af.SA(betas[keep]), np.asarray(x0)[keep], 3.0, ts=ts, group_size=0)
    # both held to rtol = 1e-6 by different step sequences
    np.testing.assert_allclose(np.asarray(err.solution.xs)[keep], np.asarray(ref.xs), rtol=0, atol=1e-5)
    late = np.asarray(err.solution.xs)[3][np.asarray(ts) > err.times[0]]
    assert np.all(np.isnan(late))


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_coalesced_usa_in_angles_clusters_as_in_the_plane():
    # the USA phase diagram's method: stiff collapsed clusters merged (ε = 1e-10), stopping at consensus
    seeds, n = 24, 16
    beta = np.repeat([2.0, 5.0, 8.0], seeds)
    x0 = np.tile(np.asarray(af.init.uniform(5, n, 2, batch=seeds)), (3, 1, 1))
    ts = np.linspace(0.0, 5.0, 26)
    common = dict(
        ts=ts, rtol=1e-6, atol=1e-9, stop_when_clustered=1e-3, save=lambda t, x: af.clustered_fraction(x, 1e-3)
    )
    plane = af.simulate(af.Coalesced(af.USA(beta), 1e-10), x0, 5.0, **common)
    common["save"] = lambda t, th: af.particles.clustered_fraction_of_angles(th, 1e-3)
    angles = af.simulate(af.Coalesced(Circle(beta, model="usa"), 1e-10), np.asarray(to_angles(x0)), 5.0, **common)
    fa, fp = np.asarray(angles.stats), np.asarray(plane.stats)
    assert fp[:, -1].min() > 0.2 and (fp[:, -1] == 1.0).mean() > 0.05  # clusters form; some reach consensus
    # the same curves but for the timing of a few merges of metastable clusters
    assert np.mean(np.abs(fa - fp)) < 5e-3
    assert np.mean(fa[:, -1] == fp[:, -1]) > 0.9
    both = np.isfinite(np.asarray(angles.t_event)) & np.isfinite(np.asarray(plane.t_event))
    assert both.sum() >= 3
    np.testing.assert_allclose(np.asarray(angles.t_event)[both], np.asarray(plane.t_event)[both], rtol=1e-3)


def test_circle_auto_keeps_a_coalesced_usa_run_in_angles():
    config = load_config(None, ["model=usa", "d=2", "coalesce=1e-10"], base=EXPERIMENTS["fig3-phase-diagram"].defaults)
    assert models.in_angles(config, 2)
    field = models.build_field(config, jnp.asarray([1.0, 2.0]), np.arange(2), 2)
    assert isinstance(field, af.Coalesced) and isinstance(field.inner, Circle)
    assert field.geometry == "euclidean" and field.coalesce_eps == 1e-10
