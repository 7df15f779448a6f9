"""Traced programs kept on disk (``solvers/programs.py``): a later process loads them instead of tracing,
with results bitwise equal to the traced program's; unusable entries are rebuilt, never used; a change of
anything that determines the program misses."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache

import attnflow as af
from attnflow.experiments.run import runner
from attnflow.solvers import compilation_cache as cc
from attnflow.solvers import programs

OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@pytest.fixture
def store(tmp_path):
    """The compilation cache (and so the program store) in a fresh directory; JAX's options restored after."""
    before = {name: getattr(jax.config, name) for name in OPTIONS}
    assert cc.enable_compilation_cache(tmp_path / "cache") is not None
    programs.forget()
    programs.EVENTS.clear()
    yield tmp_path / "cache" / programs.SUBDIRECTORY
    compilation_cache.reset_cache()
    for name, value in before.items():
        jax.config.update(name, value)
    programs.forget()


def fresh_process():
    """What a new process holds of stored programs: nothing (it reads them from disk)."""
    programs.forget()
    programs.EVENTS.clear()


STATS = runner.statistics(0.01, 0, False, ("pairs",))


def run(solver="rk4", delta=None, save=STATS, n=6, progress=False, dense=False):
    """A small SA ensemble (the fixed-step loop, the dense grid with ``dense``; the adaptive solves hold
    equinox's callbacks in a process that has not set EQX_ON_ERROR=nan, as this one: test_startup.py runs
    them through the program)."""
    x0 = af.init.uniform(jax.random.key(3), n, 3, batch=4)
    field = af.SA(beta=jnp.asarray([0.5, 1.0, 2.0, 4.0]))
    ts = np.linspace(0, 2, 5)
    return af.simulate(
        field,
        x0,
        2.0,
        ts=ts,
        solver=solver,
        dt=0.25,
        save=save,
        stop_when_clustered=delta,
        progress=progress,
        dense=dense,
    )


def arrays(sol):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves((sol.stats, sol.x_final, sol.steps, sol.t_event))]


def same(a, b):
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip(arrays(a), arrays(b), strict=True))


def entries(store):
    return sorted(p.name for p in store.glob(f"*{programs.SUFFIX}"))


@pytest.mark.parametrize("dense", [False, True])
def test_a_later_process_loads_the_program_and_gets_the_same_bits(store, dense):
    traced = run(dense=dense, delta=1e-2)  # the cache is on: exported, written, then called
    assert programs.EVENTS == {"exported": 1} and len(entries(store)) == 1
    fresh_process()
    loaded = run(dense=dense, delta=1e-2)
    assert programs.EVENTS == {"loaded": 1}
    assert same(loaded, traced)
    # and the same bits as eqx.filter_jit's traced program, with no store at all
    jax.config.update("jax_compilation_cache_dir", None)
    programs.forget()
    assert same(run(dense=dense, delta=1e-2), traced)
    assert programs.EVENTS == {"loaded": 1}


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[: len(blob) // 2],  # truncated
        lambda blob: blob[:-40] + bytes(40),  # corrupt: the checksum no longer matches
        lambda blob: blob.replace(programs.FORMAT, b"attnflow-program 0\n"),  # written by another version
        lambda blob: b"",  # empty
    ],
    ids=["truncated", "corrupt", "other-version", "empty"],
)
def test_an_unusable_entry_is_rebuilt_not_used(store, damage, caplog):
    first = run()
    (path,) = store.glob(f"*{programs.SUFFIX}")
    path.write_bytes(damage(path.read_bytes()))
    fresh_process()
    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        again = run()
    assert programs.EVENTS == {"rebuilt": 1, "exported": 1}
    assert "is unusable" in caplog.text and "rebuilding it" in caplog.text
    assert same(again, first)
    fresh_process()
    run()
    assert programs.EVENTS == {"loaded": 1}  # the rebuilt entry is whole


def test_an_entry_that_fails_to_deserialize_is_rebuilt(store):
    run()
    (path,) = store.glob(f"*{programs.SUFFIX}")
    digest = path.read_bytes()[len(programs.FORMAT) :].split(b" ", 1)[0].decode()
    # a well-formed entry (its key, its checksum) whose payload is not a serialized program
    path.write_bytes(programs.Entry.pack(digest, b"\x00" * 64))
    fresh_process()
    run()
    assert programs.EVENTS == {"rebuilt": 1, "exported": 1}


@pytest.mark.slow
def test_whatever_determines_the_program_is_in_its_key(store, monkeypatch):
    run()
    assert len(entries(store)) == 1
    # a value held in the save function's closure (δ of the statistics), a static argument (stop threshold),
    # a shape, another solver: each its own program
    run(save=runner.statistics(0.02, 0, False, ("pairs",)))
    run(delta=1e-3)
    run(n=7)
    run(solver="euler")
    assert programs.EVENTS == {"exported": 5} and len(entries(store)) == 5
    # another version of a library, or an edit of attnflow's source, misses too
    monkeypatch.setattr(programs, "environment", lambda: "jax=another|source=edited")
    fresh_process()
    run()
    assert programs.EVENTS == {"exported": 1} and len(entries(store)) == 6
    monkeypatch.undo()
    fresh_process()
    run()
    assert programs.EVENTS == {"loaded": 1}


def test_the_source_digest_changes_with_a_file_of_attnflow(tmp_path, monkeypatch):
    for sub in ("particles", "solvers", "experiments"):
        (tmp_path / sub).mkdir()
    (tmp_path / "solvers" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(programs, "PACKAGE_ROOT", tmp_path)
    programs.source_digest.cache_clear()
    try:
        before = programs.source_digest()
        (tmp_path / "solvers" / "a.py").write_text("x = 2\n")
        programs.source_digest.cache_clear()
        assert programs.source_digest() != before
    finally:
        programs.source_digest.cache_clear()


def test_a_program_with_a_callback_is_traced_and_said_so(store, caplog):
    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        first = run(progress=True)  # the progress bar calls back into Python from the loop
    assert programs.EVENTS == {"traced": 1} and entries(store) == []
    assert "cannot be exported, traced instead" in caplog.text
    assert list(store.glob(f"*{programs.REFUSED}"))  # later processes do not try again
    fresh_process()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        again = run(progress=True)
    assert programs.EVENTS == {"traced": 1} and "cannot be exported" in caplog.text
    assert same(again, first)


def test_a_save_function_from_outside_attnflow_is_traced(store, caplog):
    def mine(t, x):
        return {"first": x[0, 0]}

    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        sol = run(save=mine)
    assert programs.EVENTS == {"traced": 1} and entries(store) == []
    assert "has no stable description" in caplog.text and "mine" in caplog.text
    assert np.isfinite(np.asarray(sol.stats["first"])).all()


def test_descriptions_are_stable_and_tell_values_apart():
    assert programs.describe(runner.statistics(0.01, 0)) == programs.describe(runner.statistics(0.01, 0))
    assert programs.describe(runner.statistics(0.01, 0)) != programs.describe(runner.statistics(0.02, 0))
    assert programs.describe(af.SA(beta=1.0)) != programs.describe(af.SA(beta=2.0))
    assert programs.describe((1, 1.0)) != programs.describe((1.0, 1))

    class Thing:  # a value of a class outside attnflow and its libraries: no description to trust
        def __init__(self):
            self.value = 1

    with pytest.raises(programs.Unkeyable, match="Thing"):
        programs.describe(Thing())


def test_under_the_callers_trace_nothing_is_stored(store):
    """Under an outer jax.jit the caller's trace decides the program: nothing is exported or loaded, and the
    result is the one outside it."""
    x0 = af.init.uniform(jax.random.key(3), 6, 3, batch=4)

    def final(beta):
        sol = af.simulate(af.SA(beta=beta), x0, 2.0, solver="rk4", dt=0.25, save=STATS)
        return sol.x_final

    betas = jnp.asarray([0.5, 1.0, 2.0, 4.0])
    inside = jax.jit(final)(betas)
    assert programs.EVENTS == {} and entries(store) == []
    np.testing.assert_allclose(inside, final(betas), rtol=0, atol=1e-12)


def test_a_noisy_run_with_its_typed_key_is_stored_and_loaded(store):
    # the Brownian paths' key is a typed PRNG key (an extended dtype NumPy cannot name): the program is
    # still keyed, exported and loaded, and a later process draws the very same paths
    from attnflow.particles.noise import Noisy

    def noisy():
        x0 = af.init.uniform(jax.random.key(4), 6, 3, batch=2)
        field = Noisy(af.SA(beta=jnp.asarray([1.0, 2.0])), 0.5)
        return af.simulate(field, x0, 1.0, ts=np.linspace(0, 1, 3), solver="rk4", dt=0.1, key=jax.random.key(9))

    first = noisy()
    assert programs.EVENTS == {"exported": 1} and len(entries(store)) == 1
    fresh_process()
    again = noisy()
    assert programs.EVENTS == {"loaded": 1}
    np.testing.assert_array_equal(np.asarray(again.xs), np.asarray(first.xs))
    assert np.all(np.isfinite(np.asarray(first.xs)))
