"""The fixed-step and dense loops in the accelerators' form: loops of static length whose skipped steps are
selected, not branched (no predicate read back by the host at each step). Forced on CPUs here: the same steps,
the same bits as the while loops, stops at consensus and frozen members included."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.solvers import loop, machine


def _runs(monkeypatch, **kwargs):
    field = af.SA(beta=jnp.asarray([0.5, 4.0, 30.0, 1.0]))
    x0 = af.init.uniform(3, n=7, d=3, batch=4)
    ts = jnp.linspace(0.0, 12.0, 13)
    args = dict(ts=ts, dt=0.1, stop_when_clustered=1e-3, **kwargs)
    while_form = af.simulate(field, x0, 12.0, **args)
    monkeypatch.setattr(machine, "accelerated", lambda: True)
    assert loop.fixed_trips(False)
    static_form = af.simulate(field, x0, 12.0, **args)
    return while_form, static_form


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    "kwargs",
    [dict(solver="rk4", dense=True), dict(solver="ab4"), dict(solver="rk4"), dict(solver="euler")],
    ids=["dense-rk4", "dense-ab4", "fixed-rk4", "fixed-euler"],
)
def test_the_static_loops_take_the_same_steps(monkeypatch, kwargs):
    a, b = _runs(monkeypatch, **kwargs)
    np.testing.assert_array_equal(np.asarray(a.xs), np.asarray(b.xs))
    np.testing.assert_array_equal(np.asarray(a.steps), np.asarray(b.steps))
    np.testing.assert_array_equal(np.asarray(a.t_event), np.asarray(b.t_event))
    # the β = 0.5 and β = 1 members cluster (t ≈ 5.3 and 6.2) and stop: fewer steps, their saves held; the others
    # run to t1 = 12
    stopped = np.isfinite(np.asarray(a.t_event))
    assert stopped.tolist() == [True, False, False, True]
    assert np.all(np.asarray(a.steps)[stopped] < np.asarray(a.steps)[~stopped].min())


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_accelerators_take_the_static_selected_form(monkeypatch):
    """With an accelerator every loop between saves is of static length with selected steps; on CPUs while loops."""
    seen = []
    original = loop.steps_while

    def spy(go, step, state, most, select):
        seen.append((most, select))
        return original(go, step, state, most, select)

    monkeypatch.setattr(loop, "steps_while", spy)
    field = af.SA(beta=jnp.asarray([1.0, 2.0, 3.0]))  # a β no other test uses with this grid: traced afresh
    x0 = af.init.uniform(1, n=5, d=3, batch=3)
    for dense in (True, False):
        seen.clear()
        af.simulate(field, x0, 1.3, ts=jnp.linspace(0.0, 1.3, 4), solver="rk4", dt=0.13, dense=dense)
        assert seen and all(most is None for most, _ in seen)
    monkeypatch.setattr(machine, "accelerated", lambda: True)
    for dense in (True, False):
        seen.clear()
        af.simulate(field, x0, 1.3, ts=jnp.linspace(0.0, 1.3, 4), solver="rk4", dt=0.13, dense=dense)
        assert seen and all(most is not None and select for most, select in seen)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("on_angles", [True, False], ids=["circle", "sa-d3"])
def test_rk4_stages_in_a_loop_give_the_same_bits(monkeypatch, on_angles):
    """The grid's RK4 with its three stages in a loop (``dense.stage_loop``: fields on angles, accelerators) takes
    the same arithmetic in the same order as written out."""
    from attnflow.solvers import dense

    beta = jnp.asarray([0.7, 3.0, 9.0])
    if on_angles:
        field = af.Circle(beta)
        x0 = af.to_angles(af.init.uniform(5, n=9, d=2, batch=3))
    else:
        field = af.SA(beta)
        x0 = af.init.uniform(5, n=9, d=3, batch=3)
    args = dict(ts=jnp.linspace(0.0, 4.0, 9), solver="rk4", dt=0.2, dense=True, dtype="float32")
    assert dense.stage_loop(field) == on_angles
    a = af.simulate(field, x0, 4.0, **args)
    monkeypatch.setattr(dense, "stage_loop", lambda f: not on_angles)
    b = af.simulate(field, x0, 4.0, **args)
    np.testing.assert_array_equal(np.asarray(a.xs), np.asarray(b.xs))
