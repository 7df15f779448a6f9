"""Runs cut into calls of bounded wall time: fixed-step and grid runs (``loop.segments``), the adaptive queue and
diffrax's adaptive solves (``loop.bounded``) give the same bits as one call, in one compiled program (start included)
whatever the cuts, the rate of a program learnt once, progress between calls (no callback in the program); Ctrl-C
and SIGTERM end a long ``attnflow run`` within seconds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.layerwise import LayerWise
from attnflow.solvers import compilations, loop, progress


def _save(t, x):
    return {"e": af.energy(x, 1.0), "x": x}


def _run(kind: str, n: int = 12, **kwargs):
    x0 = af.init.uniform(0, n=n, d=3)
    field = af.SA(beta=jnp.array([1.0, 4.0, 9.0]))
    args: dict = dict(solver="rk4", dt=0.1)
    if kind == "euler":
        args["solver"] = "euler"
    elif kind == "noisy":
        field = af.Noisy(field, sigma=0.2)
        args["key"] = jax.random.split(jax.random.key(7), 3)  # one key per member
    elif kind == "dense":
        args["dense"] = True
    elif kind == "ab4":
        args["solver"] = "ab4"
    elif kind == "dense-held":
        args.update(dense=True, save_reads_time=False, stop_when_clustered=1e-3)
    elif kind == "consensus":
        args["stop_when_clustered"] = 1e-3
    args.update(kwargs)
    ts = jnp.linspace(0.0, 19.0, 39)  # the last save before t1: a stretch after it
    return af.simulate(field, x0, 20.0, ts=ts, save=_save, **args)


def _leaves(sol):
    return [
        np.asarray(a)
        for a in jax.tree_util.tree_leaves((sol.stats, sol.xs, sol.x_final, sol.steps, sol.t_event, sol.status))
    ]


@pytest.fixture
def schedule(monkeypatch):
    """``one`` call for the whole run, or ``single`` intervals (every call one save interval)."""

    def use(which: str):
        loop.RATES.clear()
        monkeypatch.setattr(loop, "SEGMENT_S", 1e9 if which == "one" else 0.0)

    return use


KINDS = ["rk4", "euler", "noisy", "dense", "ab4", "consensus", "dense-held"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("accelerated", [False, True], ids=["while", "select"])
def test_segments_give_the_bits_of_one_call(kind, accelerated, schedule, monkeypatch):
    if accelerated:  # the accelerators' loops of static length with selected steps (test_device_loops.py)
        from attnflow.solvers import machine

        monkeypatch.setattr(machine, "accelerated", lambda: True)
    schedule("one")
    whole = _run(kind)
    schedule("single")
    cut = _run(kind)
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(whole), _leaves(cut), strict=True))
    steps = np.asarray(cut.steps)
    if kind in ("consensus", "dense-held"):  # β = 9 clusters before t1, β = 1 does not
        assert np.isfinite(np.asarray(cut.t_event)).any() and steps.max() == 200 and steps.min() < 200
    else:
        assert np.all(steps == 200)  # t1 / dt


def test_one_program_start_included_whatever_the_segment_sizes(schedule):
    with compilations.record() as compiled:
        schedule("one")
        _run("rk4", n=13)
        schedule("single")
        _run("rk4", n=13, progress=True)  # progress is reported between calls: the same program
    programs = compiled.by_program()
    assert programs["jit(segment_fixed)"]["compiled"] == 1, programs
    assert not any("start" in name or "run_fixed" in name for name in programs), programs


@pytest.mark.parametrize("dense", [False, True])
def test_one_compilation_with_the_program_store_on(store, schedule, dense):
    """With the compilation cache on, the first segment's carry (made on the host) goes in committed to the device,
    as every later segment's (the last call's output) does: the program compiles once, not once per placement."""
    schedule("single")
    with compilations.record() as compiled:
        _run("rk4", n=19, dense=dense) if dense else _run("rk4", n=19)  # shapes no other test compiles
    name = "jit(segment_dense)" if dense else "jit(segment_fixed)"
    assert compiled.by_program()[name]["compiled"] == 1, compiled.by_program()


def test_a_known_rate_runs_what_fits_in_one_call(monkeypatch):
    """The first run of a program probes (one interval), then sizes its calls from the rate; a later run of the
    same program, whose whole run fits in ``SEGMENT_S``, is one call."""
    calls = []
    original = loop.segments

    def spy(call, carry, work, **kw):
        def counted(c, k0, k1):
            calls.append((int(k0), int(k1)))
            return call(c, k0, k1)

        return original(counted, carry, work, **kw)

    monkeypatch.setattr(loop, "segments", spy)
    loop.RATES.clear()
    _run("rk4", n=14)  # compiles in its probe: that call teaches nothing, the next probes again
    assert calls[0] == (0, 1) and calls[1] == (1, 2) and calls[-1][1] == 40
    calls.clear()
    _run("rk4", n=14)
    assert calls == [(0, 40)]  # 39 saves and the stretch to t1 in one call


def test_the_next_call_aims_at_its_budget():
    work = np.cumsum(np.full(10, 100.0))  # ten intervals of 100 steps
    assert loop.next_end(work, 0, None, 1.0) == 1  # unknown rate: a probe of one interval
    assert loop.next_end(work, 2, 1e-3, 0.35) == 5  # 350 steps at 1 ms: 3 intervals
    assert loop.next_end(work, 2, 1.0, 0.35) == 3  # an interval longer than the budget: still one
    assert loop.next_end(work, 0, 1e-6, 1.0) == 10  # all of it fits


def test_progress_is_reported_between_segments(schedule, capsys):
    schedule("single")
    _run("dense", progress="grid")
    err = capsys.readouterr().err
    assert "grid: [########################] t = 20 / 20 (100%)" in err


def _spied_calls(monkeypatch) -> list:
    """The iterations of each call of ``loop.bounded``, appended as the calls run."""
    calls: list = []
    original = loop.bounded

    def spy(call, carry, **kw):
        def counted(c, first, budget):
            out = call(c, first, budget)
            calls.append(int(out[1][1]))
            return out

        return original(counted, carry, **kw)

    monkeypatch.setattr(loop, "bounded", spy)
    return calls


def _queue_run(kind: str, members: int = 70, n: int = 10, **kwargs):
    """An adaptive ensemble of more than 64 members, which the queue runs (``adaptive_loop.queue_slots``)."""
    x0 = jnp.stack([af.init.uniform(s, n=n, d=3) for s in range(members)])
    field = af.SA(beta=jnp.linspace(1.0, 9.0, members))
    args: dict = dict(solver="tsit5", rtol=1e-6, atol=1e-9)
    if kind == "consensus":
        args["stop_when_clustered"] = 1e-3
    args.update(kwargs)
    return af.simulate(field, x0, 20.0, ts=jnp.linspace(0.0, 20.0, 21), save=_save, **args)


@pytest.mark.parametrize("kind", ["tsit5", "consensus", "saves-in-loop"])
def test_the_queue_in_bounded_calls_gives_the_bits_of_one_call(kind, schedule, monkeypatch):
    """The queue's iterations cut into calls of one iteration each (after the probe) give the bits of one call:
    its carry holds every slot's state, step size, stages and save index."""
    if kind == "saves-in-loop":  # the statistics computed inside the loop, not from saved states after it
        monkeypatch.setattr(loop, "STATES_AFTER_LOOP_BYTES", 0)
    calls = _spied_calls(monkeypatch)
    schedule("one")
    whole = _queue_run(kind)
    assert len(calls) <= 3  # the call that compiled, a probe, then the rest
    calls.clear()
    schedule("single")
    cut = _queue_run(kind)
    assert len(calls) > 30 and set(calls[2:-1]) == {1}, calls[:5]  # a probe, then one iteration per call
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(whole), _leaves(cut), strict=True))
    steps = np.asarray(cut.steps)
    assert steps.min() > 10  # adaptive steps, members of different stiffness
    if kind == "consensus":  # the hot members cluster before t1, the cold ones do not
        t_event = np.asarray(cut.t_event)
        assert np.isfinite(t_event).any() and not np.isfinite(t_event).all()


def test_the_queue_reports_progress_between_its_calls_in_one_program(schedule, capsys, monkeypatch):
    """Progress is the members finished, reported between calls: no host callback in the program, so the same
    program runs with progress on or off."""
    reported = []
    original = progress.report
    monkeypatch.setattr(progress, "report", lambda member, t: (reported.append(float(t)), original(member, t)))
    with compilations.record() as compiled:
        schedule("one")
        _queue_run("tsit5", members=66, n=11)
        schedule("single")
        _queue_run("tsit5", members=66, n=11, progress="queue")
    programs = compiled.by_program()
    assert programs["jit(_run_queue)"]["compiled"] == 1, programs
    err = capsys.readouterr().err
    assert "queue: [########################] t = 20 / 20 (100%)" in err
    # after each call the members finished so far, of 66: none while the first 64 run, then more, then all
    assert reported == sorted(reported) and reported[0] == 0.0 and reported[-1] == 20.0
    assert 0.0 < reported[-2] < 20.0 and len(reported) > 30


def _diffrax_run(kind: str, members: int = 3, n: int = 10, **kwargs):
    """An adaptive ensemble that diffrax's solve runs (64 members or fewer, or a method the queue does not run)."""
    x0 = jnp.stack([af.init.uniform(s, n=n, d=3) for s in range(members)])
    field = af.SA(beta=jnp.linspace(1.0, 9.0, members))
    args: dict = dict(solver="tsit5", rtol=1e-6, atol=1e-9)
    if kind == "consensus":
        args["stop_when_clustered"] = 1e-3
    elif kind == "dopri8":
        args["solver"] = "dopri8"
    elif kind == "layers":  # layer switches: diffrax steps to each and restarts there (made_jump)
        field = LayerWise.redrawn(field, jax.random.key(3), "wigner-psd", d=3, n_layers=4, tau=4.0)
    elif kind == "constant":  # diffrax's constant steps
        args.update(adaptive=False, dt=0.25)
    elif kind == "grouped":  # in groups of two, hardest first
        args["group_size"] = 2
    elif kind == "max-steps":  # the hottest member stops at max_steps, the others reach t1
        args.update(max_steps=36, on_failure="keep")
    args.update(kwargs)
    return af.simulate(field, x0, 20.0, ts=jnp.linspace(0.0, 19.0, 20), save=_save, **args)


DIFFRAX_KINDS = ["tsit5", "consensus", "saves-in-loop", "dopri8", "layers", "constant", "grouped", "max-steps"]


@pytest.mark.parametrize("kind", DIFFRAX_KINDS)
def test_diffrax_in_bounded_calls_gives_the_bits_of_one_call(kind, schedule, monkeypatch):
    """diffrax's solves cut after every step attempt (after the probe) give the bits of one call: each call resumes
    every member from its state, its solver's and its controller's, with the step the uncut solve takes next."""
    if kind == "saves-in-loop":  # the statistics computed inside the loop, not from saved states after it
        monkeypatch.setattr(loop, "STATES_AFTER_LOOP_BYTES", 0)
    monkeypatch.setattr(loop, "PROBE_ITERATIONS", 10**6)  # one call while the rate is unknown
    calls = _spied_calls(monkeypatch)
    schedule("one")
    whole = _diffrax_run(kind)
    assert len(calls) == 1
    calls.clear()
    monkeypatch.setattr(loop, "PROBE_ITERATIONS", 1)
    schedule("single")
    cut = _diffrax_run(kind)
    # one iteration per call, or a few where a member's step was rejected (the call ends after an accepted one)
    groups = 2 if kind == "grouped" else 1
    assert len(calls) > 12 and max(calls[:-1]) <= 8 * groups and np.median(calls) <= groups, calls[:5]
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(_leaves(whole), _leaves(cut), strict=True))
    steps, status = np.asarray(cut.steps), np.asarray(cut.status)
    assert steps.min() > 5
    if kind == "consensus":  # the hot member clusters before t1, the cold one does not
        t_event = np.asarray(cut.t_event)
        assert np.isfinite(t_event).any() and not np.isfinite(t_event).all()
    if kind == "constant":
        assert np.all(steps == 80)  # t1 / dt
    if kind == "max-steps":  # β = 5 takes the most steps
        assert status[0] == af.Status.DONE and status[1] == af.Status.MAX_STEPS
        assert 0.0 < float(cut.t_stop[1]) < 20.0
    else:
        assert np.all(status == af.Status.DONE)


def test_diffrax_in_bounded_calls_is_the_one_call_solve(schedule):
    """Resumed from call to call, diffrax's solve takes the steps of ``run_adaptive``'s one call, whose program the
    command line ran before (and which runs under an outer trace): the same bits."""
    from attnflow.solvers import adaptive_loop

    schedule("single")
    cut = _diffrax_run("tsit5")
    kwargs: dict = {}

    def one_call(**kw):
        kwargs.update(kw)
        return adaptive_loop.run_adaptive(**{k: v for k, v in kw.items() if k != "bounded"})

    original = adaptive_loop.solve_diffrax
    try:
        adaptive_loop.solve_diffrax = one_call
        whole = _diffrax_run("tsit5")
    finally:
        adaptive_loop.solve_diffrax = original
    assert kwargs["bounded"] is True  # the run above went in bounded calls
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(_leaves(whole), _leaves(cut), strict=True))


def test_a_single_member_with_progress_runs_the_program_without_progress(schedule, capsys, monkeypatch):
    """One member's adaptive solve with progress on reports between its calls, not from inside its loop: its program
    holds no callback (so it is stored, and a later process loads it: ``test_startup.py``), and it is the program
    that runs without progress, with the same results."""
    reported = []
    original = progress.report
    monkeypatch.setattr(progress, "report", lambda member, t: (reported.append(float(t)), original(member, t)))
    x0, field = af.init.uniform(4, n=9, d=3), af.SA(beta=6.0)

    def run(**kw):
        return af.simulate(field, x0, 20.0, ts=jnp.linspace(0.0, 20.0, 11), solver="tsit5", rtol=1e-7, **kw)

    schedule("single")
    with compilations.record() as compiled:
        shown = run(progress="one member")
        quiet = run()
    assert compiled.by_program()["jit(run_adaptive_calls)"]["compiled"] == 1, compiled.by_program()
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(shown), _leaves(quiet), strict=True))
    err = capsys.readouterr().err
    assert "one member: [########################] t = 20 / 20 (100%)" in err
    # after each call the time the member reached: increasing, from its probe of 16 steps to t1
    assert reported == sorted(reported) and 0.0 < reported[0] < 5.0 and reported[-1] == 20.0 and len(reported) > 10


# minutes as one compiled call; calls of about a second now
LONG = ["run", "simulate", "--set", "solver=rk4", "--set", "dt=0.01", "--set", "n=128", "--set", "seeds=1"]
LONG += ["--set", "t1=5000", "--set", "n_save=501", "--set", "statistics=clustered", "--set", "save_states=no"]


@pytest.mark.slow  # a long run in a subprocess, signalled: the slow tier
@pytest.mark.parametrize(
    ("sig", "status", "word"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")]
)
def test_a_signal_ends_a_long_run_within_seconds(tmp_path, sig, status, word):
    env = dict(os.environ, MPLBACKEND="Agg", ATTNFLOW_CACHE_DIR=str(tmp_path / "cache"))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "attnflow.experiments.commands.cli", *LONG, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = bytearray()
    started = threading.Event()

    def read():
        assert proc.stderr is not None
        while chunk := os.read(proc.stderr.fileno(), 4096):
            err.extend(chunk)
            if b"t = " in err and b"t = 0 /" not in err[err.rfind(b"t = ") :]:
                started.set()  # a segment's end reported: the run is in its loop

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 300
        while not started.wait(0.2) and proc.poll() is None and time.monotonic() < deadline:
            pass
        assert started.is_set() and proc.poll() is None, err.decode(errors="replace")
        sent = time.monotonic()
        proc.send_signal(sig)
        proc.wait(timeout=60)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    text = err.decode(errors="replace")
    assert proc.returncode == status, text
    assert waited < 15, (waited, text)  # calls of ~1 s; generous for a loaded machine
    assert text.rstrip().endswith(f"attnflow: {word}"), text
    assert not out.exists()  # nothing written


CHILD = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import jax.numpy as jnp
import attnflow as af
from attnflow.solvers import loop

original = loop.wait


def wait(tree):  # the parent signals once a compiled call is being waited for
    print("waiting", file=sys.stderr, flush=True)
    return original(tree)


loop.wait = wait
members, n = int(sys.argv[1]), int(sys.argv[2])
x0 = jnp.stack([af.init.uniform(s, n=n, d=3) for s in range(members)])
try:
    af.simulate(af.SA(beta=jnp.full(members, 0.5)), x0, 1e5, solver="tsit5")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("finished", flush=True)
"""


@pytest.mark.slow  # a long run in a subprocess, signalled: the slow tier
@pytest.mark.parametrize(("members", "n"), [(2, 384), (70, 128)], ids=["diffrax", "queue"])
def test_ctrl_c_during_an_adaptive_call_is_raised_at_once(tmp_path, members, n):
    """Ctrl-C while an adaptive run computes: raised within a second or two, not after the call (minutes here).
    diffrax's vmapped solve is one call, waited for by ``loop.wait``; the queue runs in calls of about a second."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, ATTNFLOW_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen(
        [sys.executable, str(script), str(members), str(n)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "waiting" in line, line + proc.stderr.read()
        time.sleep(1.0)  # inside the call
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and out.strip() == "interrupted", (out, err)
    assert waited < 10, waited  # the whole run takes minutes; generous for a loaded machine
