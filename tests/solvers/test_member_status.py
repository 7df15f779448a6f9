"""Each member's status on the Solution: a member that reaches max_steps or becomes non-finite stops there with
its status, the others' results are those of a run without it, and ``on_failure`` chooses between raising (with
the solution attached) and keeping the solution."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from field_helpers import BlowsUp

import attnflow as af

BETA = np.array([1.0, 1.0, 6.0, 1.0])  # USA in [GLPR]'s time: velocities ~ e^β, member 2 needs ~180 steps
STIFF, OTHERS = 2, np.array([0, 1, 3])
TS = jnp.linspace(0.0, 2.0, 5)
MAX_STEPS = 60  # attempts: enough for the β = 1 members (≤ 20 steps), not for β = 6


def _run(members, **kw):
    x0 = af.init.uniform(0, 8, 3, batch=4)[members]
    return af.simulate(af.USA(jnp.asarray(BETA[members]), time="glpr"), x0, 2.0, ts=TS, max_steps=MAX_STEPS, **kw)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("group_size", [None, 2])
def test_a_member_at_max_steps_keeps_the_others_results(group_size):
    sol = _run(np.arange(4), on_failure="keep", group_size=group_size)
    assert np.asarray(sol.status).tolist() == [af.Status.DONE, af.Status.DONE, af.Status.MAX_STEPS, af.Status.DONE]
    assert np.asarray(sol.ok).tolist() == [True, True, False, True]
    t_stop = np.asarray(sol.t_stop)
    assert np.all(np.isinf(t_stop[OTHERS])) and 0.0 < t_stop[STIFF] < 0.5  # the time it reached
    # the stiff member keeps its saves up to the time it reached, NaN after
    xs = np.asarray(sol.xs)
    assert np.all(np.isfinite(xs[STIFF, 0])) and np.all(np.isnan(xs[STIFF, 1:]))
    assert 0 < int(sol.steps[STIFF]) <= MAX_STEPS
    # the others as in a run without it (to the rounding of vectorizing 4 members instead of 3)
    ref = _run(OTHERS, group_size=group_size)
    assert np.asarray(ref.status).tolist() == [af.Status.DONE] * 3
    np.testing.assert_array_equal(np.asarray(sol.steps)[OTHERS], np.asarray(ref.steps))
    np.testing.assert_allclose(xs[OTHERS], np.asarray(ref.xs), rtol=0, atol=1e-10)
    np.testing.assert_allclose(np.asarray(sol.x_final)[OTHERS], np.asarray(ref.x_final), rtol=0, atol=1e-10)

    # "raise", the default: the same solution, attached to the error that names the member and its time
    with pytest.raises(
        af.MaxStepsError, match=r"^simulate: the adaptive solve of member 2 of 4 reached max_steps = 60 at t = 0\."
    ) as info:
        _run(np.arange(4), group_size=group_size)
    err = info.value
    assert err.members == (STIFF,) and err.t == pytest.approx(t_stop[STIFF], rel=0, abs=0)
    assert "kvaerno5" in str(err) and isinstance(err, af.ConvergenceError) and isinstance(err, RuntimeError)
    np.testing.assert_array_equal(np.asarray(err.solution.status), np.asarray(sol.status))
    np.testing.assert_array_equal(np.asarray(err.solution.xs), xs)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_non_finite_member_is_kept_with_its_status_and_last_finite_time():
    x0 = af.init.uniform(1, 8, 3, batch=3)
    field = BlowsUp([1.0, 3.0, 1.5])
    sol = af.simulate(field, x0, 2.0, ts=jnp.linspace(0, 2, 5), solver="euler", dt=0.5, on_failure="keep")
    assert np.asarray(sol.status).tolist() == [af.Status.DONE, af.Status.NON_FINITE, af.Status.DONE]
    assert np.asarray(sol.t_stop).tolist() == [np.inf, 1.5, np.inf]  # Euler's last finite state
    assert np.asarray(sol.ok).tolist() == [True, False, True]
    assert np.all(np.isnan(np.asarray(sol.xs)[1, 4])) and np.all(np.isfinite(np.asarray(sol.xs)[1, :4]))
    with pytest.raises(af.NonFiniteError) as info:  # the default raises, as before, with the same solution
        af.simulate(field, x0, 2.0, ts=jnp.linspace(0, 2, 5), solver="euler", dt=0.5)
    np.testing.assert_array_equal(np.asarray(info.value.solution.status), np.asarray(sol.status))
    assert info.value.times == (1.5,)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_run_without_failures_is_done_for_every_member():
    sol = af.simulate(af.SA(jnp.array([1.0, 2.0])), af.init.uniform(0, 6, 3, batch=2), 1.0, solver="rk4", dt=0.1)
    assert np.asarray(sol.status).tolist() == [0, 0] and np.all(np.isinf(np.asarray(sol.t_stop)))
    one = af.simulate(af.SA(1.0), af.init.uniform(0, 6, 3), 1.0)  # unbatched: scalars
    assert np.shape(one.status) == () and bool(one.ok)


def test_under_jit_the_status_tells_the_members_apart():
    x0 = af.init.uniform(1, 8, 3, batch=2)

    @jax.jit
    def status(beta):
        return af.simulate(BlowsUp(beta), x0, 2.0, solver="euler", dt=0.5).status

    assert np.asarray(status(jnp.array([1.0, 3.0]))).tolist() == [af.Status.DONE, af.Status.NON_FINITE]


@pytest.mark.slow
def test_the_queue_marks_members_at_max_steps_and_finishes_the_others():
    members = 80  # more than 64 on one CPU device: the queue runs them
    if jax.default_backend() != "cpu":
        pytest.skip("the queue runs on CPU only")
    beta = np.where(np.arange(members) % 10 == 3, 6.0, 1.0)
    x0 = np.asarray(af.init.uniform(0, 6, 3, batch=members))
    sol = af.simulate(af.USA(jnp.asarray(beta), time="glpr"), x0, 2.0, ts=TS, max_steps=MAX_STEPS, on_failure="keep")
    stiff = beta > 2.0
    assert np.array_equal(np.asarray(sol.status) == af.Status.MAX_STEPS, stiff)
    assert np.all(np.asarray(sol.t_stop)[stiff] < 2.0) and np.all(np.isnan(np.asarray(sol.xs)[stiff][:, -1]))
    keep = np.flatnonzero(~stiff)  # 72 members: the queue again
    ref = af.simulate(af.USA(jnp.asarray(beta[keep]), time="glpr"), x0[keep], 2.0, ts=TS, max_steps=MAX_STEPS)
    np.testing.assert_array_equal(np.asarray(sol.steps)[keep], np.asarray(ref.steps))
    np.testing.assert_allclose(np.asarray(sol.xs)[keep], np.asarray(ref.xs), rtol=0, atol=1e-10)
