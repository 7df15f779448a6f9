"""The compilation cache and the stored programs on by default for the Python API (``solvers/compilation_cache.py``):
turned on at the place the command line uses when a public name is first used or at the first stored program, unless
the process chose (``enable_compilation_cache``, ``disable_compilation_cache``, JAX's own directory, ATTNFLOW_CACHE_DIR
=off); a second process of the README's example compiles nothing. The suite itself keeps the user's cache untouched
(``tests/conftest.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache

import attnflow as af
from attnflow.experiments.commands import cli
from attnflow.solvers import compilation_cache as cc
from attnflow.solvers import programs

OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)


@pytest.fixture
def new_process(monkeypatch, tmp_path):
    """This process as a new one that has chosen nothing: attnflow's default not yet applied, JAX's cache off, no
    program held in memory; HOME and XDG_CACHE_HOME in tmp_path (the default place, were ATTNFLOW_CACHE_DIR unset).
    JAX's options, the environment and the default's state restored after."""
    before = {name: getattr(jax.config, name) for name in OPTIONS}
    monkeypatch.setattr(cc, "_chosen", False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "cache"))
    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()
    programs.forget()
    programs.EVENTS.clear()
    yield tmp_path
    compilation_cache.reset_cache()
    for name, value in before.items():
        jax.config.update(name, value)
    programs.forget()
    programs.EVENTS.clear()


def small_run():
    """One fixed-step SA run (6 tokens on S², RK4 to t = 0.5): one stored program, the fixed-step loop."""
    x0 = af.init.uniform(jax.random.key(1), 6, 3)
    return af.simulate(af.SA(beta=1.0), x0, 0.5, ts=jnp.linspace(0.0, 0.5, 3), solver="rk4", dt=0.125)


def stored(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / programs.SUBDIRECTORY).glob(f"*{programs.SUFFIX}"))


def test_the_first_stored_program_turns_the_cache_on_where_the_command_line_keeps_it(new_process):
    cache = new_process / "cache"
    sol = small_run()
    assert jax.config.jax_compilation_cache_dir == str(cache)  # $ATTNFLOW_CACHE_DIR, as for `attnflow run`
    assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0  # every compilation kept, as the CLI keeps
    assert programs.EVENTS == {"exported": 1} and len(stored(cache)) == 1
    assert len([p for p in cache.iterdir() if p.name.endswith("-cache")]) >= 1  # the compiled programs beside it
    # a new process: the program loaded from disk, the same bits
    programs.forget()
    programs.EVENTS.clear()
    again = small_run()
    assert programs.EVENTS == {"loaded": 1}
    assert np.array_equal(np.asarray(again.x_final), np.asarray(sol.x_final))


def test_the_default_place_is_the_command_lines_without_its_variable(new_process, monkeypatch):
    monkeypatch.delenv(cc.ENV_VAR)
    assert cc.enable_by_default() == new_process / "xdg" / "attnflow" / "jax" == cc.default_cache_dir()
    assert jax.config.jax_compilation_cache_dir == str(new_process / "xdg" / "attnflow" / "jax")


def test_a_public_name_turns_it_on_before_anything_compiles(new_process):
    assert jax.config.jax_compilation_cache_dir is None
    assert af.__getattr__("SA") is af.SA  # as `af.SA` does in a process that has not used it yet
    assert jax.config.jax_compilation_cache_dir == str(new_process / "cache")
    cc._chosen = False
    jax.config.update("jax_compilation_cache_dir", None)
    with pytest.raises(AttributeError):  # a name attnflow does not export turns nothing on
        af.__getattr__("no_such_name")
    assert af.__getattr__("solvers") is af.solvers  # nor a namespace, through which one may choose
    assert jax.config.jax_compilation_cache_dir is None and not cc._chosen


@pytest.mark.parametrize("off", ["off", "OFF", "0", "false", "no", "none"])
def test_the_switch_keeps_it_off(new_process, monkeypatch, off):
    monkeypatch.setenv(cc.ENV_VAR, off)
    small_run()
    assert jax.config.jax_compilation_cache_dir is None
    assert programs.EVENTS == {} and not (new_process / "xdg").exists() and not (new_process / "home").exists()


def test_a_choice_of_the_process_wins_over_the_default(new_process):
    mine = new_process / "mine"
    af.__dict__.pop("enable_compilation_cache", None)  # as in a new process: `af.enable_compilation_cache` first used
    assert af.enable_compilation_cache(mine) == mine
    assert cc.enable_by_default() == mine
    small_run()
    assert jax.config.jax_compilation_cache_dir == str(mine) and len(stored(mine)) == 1
    assert not (new_process / "cache").exists()


def test_jax_s_own_directory_is_kept_with_its_options(new_process):
    own = new_process / "jax-own"
    jax.config.update("jax_compilation_cache_dir", str(own))
    minimum = jax.config.jax_persistent_cache_min_compile_time_secs
    small_run()
    assert jax.config.jax_compilation_cache_dir == str(own)
    assert jax.config.jax_persistent_cache_min_compile_time_secs == minimum  # the user's settings, untouched
    assert len(stored(own)) == 1 and not (new_process / "cache").exists()


def test_disable_turns_it_off_for_this_process_and_those_it_starts(new_process):
    assert af.enable_compilation_cache() == new_process / "cache"
    cc.disable_compilation_cache()
    assert jax.config.jax_compilation_cache_dir is None and os.environ[cc.ENV_VAR] == "off"
    assert cc.enable_by_default() is None
    small_run()
    assert jax.config.jax_compilation_cache_dir is None and programs.EVENTS == {}


def test_the_command_lines_no_cache_keeps_the_default_off(new_process):
    cli._configure_process(cli.build_parser().parse_args(["run", "fig4-circle", "--no-cache"]))
    assert os.environ[cc.ENV_VAR] == "off" and cc.enable_by_default() is None
    assert jax.config.jax_compilation_cache_dir is None
    cc._chosen = False  # a new process: `attnflow run` without --no-cache turns it on where the default would
    os.environ[cc.ENV_VAR] = str(new_process / "cache")
    cli._configure_process(cli.build_parser().parse_args(["run", "fig4-circle"]))
    assert jax.config.jax_compilation_cache_dir == str(new_process / "cache")


def test_the_suite_keeps_the_users_cache_untouched():
    """``tests/conftest.py`` turns the cache off for the suite's processes before attnflow is imported."""
    assert os.environ[cc.ENV_VAR] == "off" and cc.default_cache_dir() is None


# a new process: what `import attnflow` leaves in the environment, and what it imports
IMPORT = r"""
import os, sys
import attnflow
print(os.environ.get("EQX_ON_ERROR"), sorted(m for m in sys.modules if m.startswith("attnflow.")))
"""


@pytest.mark.parametrize(
    "env, eqx",
    [
        ({"ATTNFLOW_CACHE_DIR": "{tmp}"}, "nan"),
        ({"ATTNFLOW_CACHE_DIR": "off"}, "None"),
        ({"EQX_ON_ERROR": "raise"}, "raise"),
    ],
)
def test_import_asks_equinox_for_cacheable_checks_unless_told_otherwise(tmp_path, env, eqx):
    """With the cache on, ``import attnflow`` sets EQX_ON_ERROR=nan before equinox is imported (what lets JAX cache
    the adaptive solves, as the command line does); ATTNFLOW_CACHE_DIR=off leaves equinox alone, a value of the
    user's own wins; and nothing of attnflow's but its version and its table of moved names is imported."""
    child = {k: v for k, v in os.environ.items() if k not in ("EQX_ON_ERROR", cc.ENV_VAR)}
    child.update({k: v.format(tmp=tmp_path / "cache") for k, v in env.items()})
    out = subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, env=child, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    value, _, modules = out.stdout.strip().partition(" ")
    assert value == eqx
    assert modules == "['attnflow._version', 'attnflow.moved']"
    assert not (tmp_path / "cache").exists()  # importing turns nothing on: the first name used does


# the README's Python example in a new process, counting JAX's persistent-cache events and the stored programs
README = Path(__file__).resolve().parents[2] / "README.md"
COUNT = r"""
import json, runpy, sys
import jax.monitoring
counts = {}
jax.monitoring.register_event_listener(
    lambda event, **kw: counts.__setitem__(event.rsplit("/", 1)[-1], counts.get(event.rsplit("/", 1)[-1], 0) + 1))
runpy.run_path(sys.argv[1], run_name="__main__")
from attnflow.solvers import programs
counts.update({"programs_" + k: v for k, v in programs.EVENTS.items()})
sys.stderr.write("\nCOUNTS " + json.dumps(counts) + "\n")
"""


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    return text[start : text.index("```", start)]


@pytest.mark.slow
def test_a_second_process_of_the_readme_example_compiles_nothing(tmp_path):
    """The README's example run as a script prints its result; run again in a new process with the same cache
    (the default place, given by ATTNFLOW_CACHE_DIR), every compilation is found in the cache and the time loop's
    program is loaded, not traced: what makes it start warm."""
    script = tmp_path / "example.py"
    script.write_text(readme_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    env[cc.ENV_VAR] = str(tmp_path / "cache")
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", COUNT, script], capture_output=True, text=True, env=env, timeout=600
        )
        assert out.returncode == 0, out.stderr[-3000:]
        runs.append((out.stdout.split(), json.loads(out.stderr.rsplit("COUNTS ", 1)[1])))
    (printed1, first), (printed2, second) = runs
    assert printed1 == printed2 and len(printed1) == 1 and int(printed1[0]) >= 1  # the number of clusters
    assert first["cache_misses"] > 0 and first["programs_exported"] == 1
    assert second.get("cache_misses", 0) == 0 and second["cache_hits"] == second["compile_requests_use_cache"] > 0
    assert second["programs_loaded"] == 1 and not second.get("programs_exported")
