"""Every compilation counted and timed: by program, with loads from the compilation cache apart."""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np

from attnflow.solvers import compilations


def test_a_new_program_is_counted_once_and_logged(caplog):
    def seventeen_times(x):  # a function no other test compiles
        return x * 17.0 + jnp.sin(x)

    f = jax.jit(seventeen_times)
    with caplog.at_level(logging.DEBUG, logger="attnflow"), compilations.record() as compiled:
        f(jnp.arange(3.0)).block_until_ready()
        f(jnp.arange(3.0) + 1).block_until_ready()  # the same shape: no second compilation
        f(jnp.arange(4.0)).block_until_ready()  # a new shape: a second program
    mine = [c for c in compiled.items if c.name == "jit(seventeen_times)"]
    assert len(mine) == 2 and all(c.seconds > 0 for c in mine)
    assert compiled.by_program()["jit(seventeen_times)"]["compiled"] == 2
    assert sum(1 for r in caplog.records if "compiled jit(seventeen_times) in" in r.getMessage()) == 2
    summary = compiled.summary()
    assert summary["compiled"] == len(compiled.compiled)
    assert np.isclose(summary["seconds"], sum(c.seconds for c in compiled.compiled), atol=1e-3 * len(compiled.items))


def test_nested_records_each_see_their_own():
    g = jax.jit(lambda x: x * 23.0 - 1.0)
    a, b = np.ones(5), np.ones(6)
    with compilations.record() as outer:
        g(a).block_until_ready()
        with compilations.record() as inner:
            g(b).block_until_ready()
    assert len(inner.items) == 1
    assert len(outer.items) == 2


def test_loads_from_the_persistent_cache_are_not_compilations(tmp_path):
    """A program found in the persistent compilation cache is a load: counted apart, not in the seconds."""
    import attnflow as af

    previous = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]
    minimum = jax.config.jax_persistent_cache_min_compile_time_secs  # type: ignore[attr-defined]
    try:
        af.enable_compilation_cache(tmp_path / "cache")
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)

        def twenty_nine(x):
            return jnp.cos(x) * 29.0

        with compilations.record() as first:
            jax.jit(twenty_nine)(jnp.ones(7)).block_until_ready()
        jax.clear_caches()  # the in-memory executables: the next call asks the persistent cache
        with compilations.record() as second:
            jax.jit(twenty_nine)(jnp.ones(7)).block_until_ready()
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", minimum)
        if previous:
            af.enable_compilation_cache(previous)
        else:
            jax.config.update("jax_compilation_cache_dir", None)
    assert [c.cached for c in first.items if c.name == "jit(twenty_nine)"] == [False]
    assert [c.cached for c in second.items if c.name == "jit(twenty_nine)"] == [True]
    assert second.by_program()["jit(twenty_nine)"] == {"compiled": 0, "seconds": 0.0, "cached": 1}


def test_records_of_threads_are_each_their_own_though_equal_when_they_open():
    """Two records opened together (a sweep's threads) are removed by identity: the first to close never takes the
    other's place in the listener, whose entry would then be missing when the other closes."""
    first = compilations.record()
    second = compilations.record()
    one = first.__enter__()
    two = second.__enter__()
    assert one == two and one is not two  # both empty: equal, not the same
    one.items.append(compilations.Compilation("jit(f)", 0.1, False))  # the first records one after the second opened
    first.__exit__(None, None, None)
    second.__exit__(None, None, None)  # raised "list.remove(x): x not in list" when removal was by equality
