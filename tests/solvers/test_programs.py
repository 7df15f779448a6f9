"""Traced programs kept on disk (``solvers/programs.py``): a later process loads them instead of tracing,
with results bitwise equal to the traced program's; unusable entries are rebuilt, never used; a change of
anything that determines the program misses."""

import hashlib
import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.run import runner
from attnflow.solvers import compilation_cache as cc
from attnflow.solvers import programs


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


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
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
    from attnflow.solvers import program_keys

    for sub in programs.PACKAGE_DIRS:
        (tmp_path / sub).mkdir()
    (tmp_path / "solvers" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(program_keys, "PACKAGE_ROOT", tmp_path)
    monkeypatch.setattr(program_keys, "IMPORTED", {})
    before = programs.source_digest()  # a.py read from disk: not imported

    def imported(source):
        program_keys.IMPORTED["solvers/a.py"] = hashlib.sha256(source).hexdigest()

    imported(b"x = 2\n")  # imported with another source than the one read
    edited = programs.source_digest()
    assert edited != before
    (tmp_path / "solvers" / "a.py").write_text("x = 3\n")  # an edit after the import: not the code that runs
    assert programs.source_digest() == edited
    imported(b"x = 1\n")
    assert programs.source_digest() == before


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_program_with_a_callback_is_traced_and_said_so(store, caplog):
    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        first = run(solver="tsit5")  # equinox's error checks call back into Python (EQX_ON_ERROR is not nan here)
    assert programs.EVENTS["traced"] >= 1 and not programs.EVENTS["exported"] and entries(store) == []
    assert "cannot be exported, traced instead" in caplog.text
    assert list(store.glob(f"*{programs.REFUSED}"))  # later processes do not try again
    fresh_process()
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        again = run(solver="tsit5")
    assert not programs.EVENTS["exported"] and "cannot be exported" in caplog.text
    assert same(again, first)


@pytest.mark.parametrize("dense", [False, True], ids=["fixed", "dense"])
def test_progress_keeps_a_fixed_step_program_stored(store, dense):
    """Progress is reported between a fixed-step or grid run's calls, never from inside its program: the run with
    a progress bar is exported and loaded by a later process like one without."""
    first = run(progress=True, dense=dense)
    assert programs.EVENTS == {"exported": 1} and len(entries(store)) == 1
    fresh_process()
    again = run(progress=False, dense=dense)
    assert programs.EVENTS == {"loaded": 1}
    assert same(again, first)


def test_a_save_function_from_outside_attnflow_is_traced(store, caplog):
    def mine(t, x):
        return {"first": x[0, 0]}

    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        sol = run(save=mine)
    # traced at each of the run's calls (its bounded calls, ``loop.segments``), never stored nor loaded
    assert set(programs.EVENTS) == {"traced"} and entries(store) == []
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


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
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


# --- what makes a stored program stale: each of these returned a program of other settings or other code


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("jax_threefry_partitionable", "flip"),
        ("jax_random_seed_offset", 7),
        ("jax_numpy_dtype_promotion", "strict"),
        ("jax_numpy_rank_promotion", "raise"),
        ("jax_disable_jit", True),
        ("jax_default_matmul_precision", "highest"),
        ("jax_enable_x64", "flip"),
        ("jax_default_prng_impl", "rbg"),
    ],
)
def test_every_jax_setting_that_changes_tracing_is_in_the_key(name, value):
    before = getattr(jax.config, name)
    keyed = programs.settings()
    try:
        jax.config.update(name, (not before) if value == "flip" else value)
        assert programs.settings() != keyed
    finally:
        jax.config.update(name, before)
    assert programs.settings() == keyed


def test_a_setting_in_a_context_is_keyed_and_the_untraced_ones_are_not():
    keyed = programs.settings()
    with jax.numpy_rank_promotion("raise"):  # a thread-local value, as jax's context managers set it
        assert programs.settings() != keyed
    # JAX's whole configuration is keyed, so that a setting this version does not know yet is too
    assert programs.settings({**jax.config.values, "jax_a_new_setting": 1}) != keyed
    # but not the settings that cannot change a traced program (logging, the cache's own directory)
    for name in ("jax_log_compiles", "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs"):
        assert name in programs.UNTRACED
        assert programs.settings({**jax.config.values, name: "changed"}) == keyed


def noisy_run():
    from attnflow.particles.noise import Noisy

    x0 = af.init.uniform(jax.random.key(4), 6, 3, batch=2)
    field = Noisy(af.SA(beta=jnp.asarray([1.0, 2.0])), 0.5)
    sol = af.simulate(field, x0, 1.0, ts=np.linspace(0, 1, 3), solver="rk4", dt=0.1, key=jax.random.key(9))
    return np.asarray(sol.xs)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_random_bits_setting_misses_instead_of_returning_the_default_draws(store):
    default = noisy_run()
    before = jax.config.jax_threefry_partitionable
    jax.config.update("jax_threefry_partitionable", not before)
    try:
        fresh_process()
        stored = noisy_run()
        assert programs.EVENTS == {"exported": 1}  # another program, not the default setting's
        jax.config.update("jax_compilation_cache_dir", None)
        programs.forget()
        traced = noisy_run()  # the traced program under this setting, no store at all
    finally:
        jax.config.update("jax_threefry_partitionable", before)
    np.testing.assert_array_equal(stored, traced)
    assert np.max(np.abs(stored - default)) > 0.05  # other draws: a stale program would return `default`


SNIPPET = """
import json, sys
from pathlib import Path
from attnflow.solvers import programs
root = Path(programs.PACKAGE_ROOT)
if sys.argv[1] == "edit":
    assert "attnflow.particles.fields" in sys.modules and "attnflow.particles.polytopes" not in sys.modules
    for name in ("particles/fields.py", "particles/polytopes.py"):  # imported, not imported yet
        path = root / name
        path.write_text(path.read_text() + "\\n# edited\\n")
    first = programs.source_digest()
    import attnflow.particles.polytopes  # now imported with its edit
    imported = programs.source_digest()
    path = root / "particles/polytopes.py"
    path.write_text(path.read_text() + "\\n# edited after its import\\n")
    print(json.dumps([first, imported, programs.source_digest()]))
else:
    print(json.dumps([programs.source_digest()]))
"""


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_source_digest_is_of_the_code_imported_not_of_the_files_at_the_first_call(tmp_path):
    import os
    import shutil
    import subprocess
    import sys

    root = programs.PACKAGE_ROOT
    copy = tmp_path / "attnflow"
    copy.mkdir()
    for name in ("__init__.py", "__init__.pyi", "_version.py", "moved.py"):  # the package's own root files
        shutil.copy2(root / name, copy / name)
    for sub in programs.PACKAGE_DIRS:
        shutil.copytree(root / sub, copy / sub, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONDONTWRITEBYTECODE": "1"}

    def digests(mode):
        out = subprocess.run(
            [sys.executable, "-c", SNIPPET, mode], env=env, capture_output=True, text=True, check=True, cwd=tmp_path
        )
        return __import__("json").loads(out.stdout.strip().splitlines()[-1])

    (pristine,) = digests("plain")
    pristine_fields = (copy / "particles/fields.py").read_text()
    first, imported, after = digests("edit")
    # the process runs fields.py as imported (unedited) and polytopes.py as it will import it (edited):
    # a fresh process over exactly those files has the same digest
    (copy / "particles/fields.py").write_text(pristine_fields)
    polytopes = (copy / "particles/polytopes.py").read_text()
    (copy / "particles/polytopes.py").write_text(polytopes.removesuffix("\n# edited after its import\n"))
    (expected,) = digests("plain")
    assert first == expected != pristine
    assert imported == after == expected  # an edit after a module's import is not the code that runs


def export_fails(*args, **kwargs):
    raise RuntimeError("an export that failed once")


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_refusal_marker_expires_and_gives_way_to_a_good_entry(store, monkeypatch):
    first = run()
    (path,) = store.glob(f"*{programs.SUFFIX}")
    good = path.read_bytes()
    path.unlink()
    monkeypatch.setattr(jax.export, "export", export_fails)
    fresh_process()
    run()  # the export fails: a marker, this key is traced for now
    monkeypatch.undo()
    marker = path.with_suffix(programs.REFUSED)
    assert programs.EVENTS == {"traced": 1} and marker.exists() and not path.exists()
    fresh_process()
    run()
    assert programs.EVENTS == {"traced": 1}  # a fresh marker holds
    # a marker older than its lifetime is dropped and the export tried again
    old = marker.stat().st_mtime - programs.REFUSAL_LIFETIME_S - 60
    os.utime(marker, (old, old))
    fresh_process()
    assert same(run(), first)
    assert programs.EVENTS == {"exported": 1} and path.exists() and not marker.exists()
    # a good entry (another process's) beside a fresh marker is loaded, and the marker removed
    marker.write_bytes(programs.Refusal.pack(path.stem, "an export that failed once"))
    path.write_bytes(good)
    fresh_process()
    assert same(run(), first)
    assert programs.EVENTS == {"loaded": 1} and not marker.exists()
    # a marker that is not attnflow's (or of another format) is not honoured
    path.unlink()
    marker.write_bytes(b"callbacks")
    fresh_process()
    run()
    assert programs.EVENTS == {"exported": 1} and path.exists()


def fake_entry(directory, name, size, age_s):
    path = directory / f"{name}{programs.SUFFIX}"
    path.write_bytes(programs.Entry.pack("0" * 64, b"p" * size))
    stamp = 1_700_000_000 - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_the_oldest_entries_are_evicted_beyond_the_cap_and_nothing_else(tmp_path):
    entries_ = [fake_entry(tmp_path, f"e{i}", 1000, age_s=100 * (4 - i)) for i in range(4)]  # e0 oldest
    marker = tmp_path / f"m{programs.REFUSED}"
    marker.write_bytes(programs.Refusal.pack("m", "why"))
    os.utime(marker, (1_600_000_000, 1_600_000_000))  # older than all
    foreign = tmp_path / f"notes{programs.SUFFIX}"  # not attnflow's: never deleted, never counted
    foreign.write_bytes(b"x" * 5000)
    os.utime(foreign, (1, 1))
    other = tmp_path / "readme.txt"
    other.write_bytes(b"y" * 5000)
    size = entries_[0].stat().st_size
    programs.evict(tmp_path, cap=2 * size + 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["e2" + programs.SUFFIX, "e3" + programs.SUFFIX, foreign.name, other.name]
    )
    programs.evict(tmp_path, cap=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([foreign.name, other.name])


def test_a_write_evicts_beyond_the_cap_and_a_load_counts_as_a_use(store, monkeypatch):
    store.mkdir(parents=True, exist_ok=True)
    old = fake_entry(store, "f" * 40, (1 << 20) - 2000, age_s=10_000)  # alone within the cap, not with another
    monkeypatch.setenv(cc.PROGRAMS_SIZE_VAR, "1MiB")
    run()
    assert not old.exists() and len(entries(store)) == 1  # the new entry, and nothing older
    (path,) = store.glob(f"*{programs.SUFFIX}")
    os.utime(path, (1_600_000_000, 1_600_000_000))
    fresh_process()
    run()
    assert programs.EVENTS == {"loaded": 1} and path.stat().st_mtime > 1_700_000_000  # its last use


@pytest.mark.parametrize(
    ("value", "size"),
    [(None, 1 << 30), ("", 1 << 30), ("1000", 1000), ("512MiB", 512 << 20), ("2 GiB", 2 << 30), ("1.5KiB", 1536)],
)
def test_the_cap_is_read_from_its_variable(monkeypatch, value, size):
    if value is None:
        monkeypatch.delenv(cc.PROGRAMS_SIZE_VAR, raising=False)
    else:
        monkeypatch.setenv(cc.PROGRAMS_SIZE_VAR, value)
    assert cc.programs_size_cap() == size


def test_a_bad_cap_is_refused_before_anything_changes(monkeypatch, tmp_path):
    monkeypatch.setenv(cc.PROGRAMS_SIZE_VAR, "lots")
    before = jax.config.jax_compilation_cache_dir
    with pytest.raises(ValueError, match=r"ATTNFLOW_PROGRAMS_MAX_SIZE='lots'.*GiB"):
        cc.enable_compilation_cache(tmp_path / "cache")
    assert jax.config.jax_compilation_cache_dir == before and not (tmp_path / "cache").exists()


def made_in_attnflow(source):
    """A function as attnflow's own code would make it (its module is attnflow's; every one on line 1)."""
    return eval(source, {"__name__": "attnflow.generated", "np": np})


def test_functions_ranges_and_slices_are_described_exactly():
    double, triple = made_in_attnflow("lambda x: x * 2"), made_in_attnflow("lambda x: x * 3")
    assert programs.describe(double) != programs.describe(triple)  # only a constant differs
    assert programs.describe(double) == programs.describe(made_in_attnflow("lambda x: x * 2"))
    sine, cosine = made_in_attnflow("lambda x: np.sin(x)"), made_in_attnflow("lambda x: np.cos(x)")
    assert programs.describe(sine) != programs.describe(cosine)  # only a name differs
    nested = made_in_attnflow("lambda: (lambda y: y + 1)"), made_in_attnflow("lambda: (lambda y: y + 2)")
    assert programs.describe(nested[0]) != programs.describe(nested[1])  # a constant of an inner function
    assert programs.describe(range(3)) != programs.describe(range(4))
    assert programs.describe(range(0, 6, 2)) != programs.describe(range(0, 6, 3))
    assert programs.describe(slice(1, 2)) != programs.describe(slice(1, 3))
    assert programs.describe(slice(None, 2)) != programs.describe(slice(0, 2))
    assert programs.describe(range(3)) == programs.describe(range(3))
    assert programs.describe(np.sin) != programs.describe(np.cos)


@pytest.mark.parametrize(
    "value",
    [jax.devices()[0], np.random.default_rng(0), np.frompyfunc(lambda x: x, 1, 1), object()],
    ids=["device", "generator", "user-ufunc", "object"],
)
def test_an_object_the_describer_does_not_know_is_refused(value):
    with pytest.raises(programs.Unkeyable):
        programs.describe(value)


def test_a_refused_static_value_is_traced_with_its_reason(store, caplog):
    # a save function of attnflow's whose default is an object the describer does not know
    save = made_in_attnflow("lambda t, x, g=None: {'first': x[0, 0]}")
    save.__defaults__ = (np.random.default_rng(0),)
    with caplog.at_level(logging.DEBUG, logger="attnflow"):
        sol = run(save=save)
    assert set(programs.EVENTS) == {"traced"} and entries(store) == []  # at each of the run's bounded calls
    assert "has no stable description" in caplog.text and "Generator" in caplog.text
    assert np.isfinite(np.asarray(sol.stats["first"])).all()
