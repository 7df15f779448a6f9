"""The persistent compilation cache: where it lives, how it is turned off, and that a repeated run
loads its compiled programs instead of compiling them."""

import json
import os
import subprocess
import sys
import warnings

import jax
import pytest

from attnflow.experiments.commands import cli
from attnflow.solvers import compilation_cache as cc

# ``attnflow`` as a program (cli.main() with no argv), counting JAX's persistent-cache events
CHILD = r"""
import json, sys
import jax.monitoring
counts = {}
jax.monitoring.register_event_listener(
    lambda event, **kw: counts.__setitem__(event.rsplit("/", 1)[-1], counts.get(event.rsplit("/", 1)[-1], 0) + 1))
from attnflow.experiments.commands import cli
sys.argv = ["attnflow"] + sys.argv[1:]
rc = cli.main()
from attnflow.solvers import programs
counts.update({"programs_" + k: v for k, v in programs.EVENTS.items()})
sys.stderr.write("\nCOUNTS " + json.dumps(counts) + "\n")
sys.exit(rc)
"""
RUN = [
    "run",
    "fig4-circle",
    "--quick",
    "--no-plot",
    "--quiet",
    "--json",
    "--set",
    "n=6",
    "--set",
    "seeds=2",
    "--set",
    "t1=2",
    "--set",
    "n_save=5",
]


def program(args, env):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stderr.rsplit("COUNTS ", 1)[1])
    return json.loads(proc.stdout), counts, proc.stderr


SHOWN = ["seeds=1" if a == "seeds=2" else a for a in RUN if a != "--quiet"]
"""RUN for one member with its progress bar: the adaptive solve reports between its calls, from no callback."""


@pytest.mark.slow
@pytest.mark.parametrize("args", [RUN, SHOWN], ids=["quiet", "one member with progress"])
def test_a_repeated_run_loads_every_program_from_the_cache(tmp_path, args):
    cache = tmp_path / "cache"
    env = {"ATTNFLOW_CACHE_DIR": str(cache)}
    first, counts1, _ = program(args + ["--out", tmp_path / "a"], env)
    entries = sorted(os.listdir(cache))
    assert counts1.get("cache_misses", 0) > 0 and len(entries) >= counts1["cache_misses"]
    # the integration loop is among them: no Python callbacks left in the adaptive solve
    assert any("run_adaptive" in name for name in entries)

    # the initial conditions' and the adaptive loop's traced programs were stored beside the compiled ones
    # (solvers/programs.py)
    assert counts1["programs_exported"] == 2 and not counts1.get("programs_traced")
    assert len(list((cache / "programs").glob("*.jaxexport"))) == 2

    again, counts2, _ = program(args + ["--out", tmp_path / "b"], env)
    assert counts2.get("cache_misses", 0) == 0
    # fewer compilations than the first run's: what tracing computed eagerly is not computed again
    assert 0 < counts2["cache_hits"] == counts2["compile_requests_use_cache"] <= counts1["cache_misses"]
    assert sorted(os.listdir(cache)) == entries
    # loaded, not traced again, and its compiled program found in the compilation cache (no miss above)
    assert counts2["programs_loaded"] == 2 and not counts2.get("programs_exported")
    for key in ("mean_inner_product", "min_inner_product", "energy", "n_clusters", "steps"):
        assert again[key] == first[key], key


@pytest.mark.slow
def test_an_unusable_cache_dir_warns_once_and_the_run_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    summary, counts, err = program(RUN + ["--out", tmp_path / "run"], {"ATTNFLOW_CACHE_DIR": str(blocker / "cache")})
    assert summary["steps"] > 0
    lines = [line for line in err.splitlines() if "compilation cache" in line]
    assert len(lines) == 1 and "compilation cache off: cannot use" in lines[0] and str(blocker) in lines[0]
    assert counts.get("cache_hits", 0) == counts.get("cache_misses", 0) == 0


def test_cache_dir_defaults_and_off(monkeypatch, tmp_path):
    monkeypatch.delenv(cc.ENV_VAR, raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cc.default_cache_dir() == tmp_path / ".cache" / "attnflow" / "jax"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cc.default_cache_dir() == tmp_path / "xdg" / "attnflow" / "jax"
    monkeypatch.setenv(cc.ENV_VAR, str(tmp_path / "mine"))
    assert cc.default_cache_dir() == tmp_path / "mine"
    for off in ("off", "OFF", "0", "none"):
        monkeypatch.setenv(cc.ENV_VAR, off)
        assert cc.default_cache_dir() is None
        assert cc.enable_compilation_cache() is None
    assert jax.config.jax_compilation_cache_dir is None  # nothing was turned on


def test_enable_reports_a_bad_directory_once_and_changes_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(cc, "_warned", False)
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="compilation cache off: cannot use"):
        assert cc.enable_compilation_cache(blocker / "cache") is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cc.enable_compilation_cache(blocker / "cache") is None
    assert jax.config.jax_compilation_cache_dir is None


def test_no_cache_flag_and_calls_from_python_leave_jax_alone(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the cache was turned on")

    monkeypatch.setattr(cc, "enable_compilation_cache", boom)
    args = cli.build_parser().parse_args(["run", "fig4-circle", "--no-cache"])
    assert args.no_cache
    cli._configure_process(args)  # --no-cache: nothing to do
    for command in (["list"], ["plot", "somewhere"]):
        cli._configure_process(cli.build_parser().parse_args(command))  # commands that do not compile
    assert cli.build_parser().parse_args(["validate", "--no-cache"]).no_cache
    assert cli.build_parser().parse_args(["sweep", "fig4-circle", "--no-cache"]).no_cache


PROCESS = r"""
import os, sys
import attnflow as af
from attnflow.experiments.commands import cli
cli.build_parser()
assert not {"equinox", "diffrax"} & set(sys.modules), "imported before the program could configure them"
sys.argv = ["attnflow", "list"]
rc = cli.main()
print(rc, os.environ.get("EQX_ON_ERROR"), af.SA.__name__, "equinox" in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize("given, kept", [(None, "nan"), ("raise", "raise")])
def test_the_program_sets_equinox_checks_before_equinox_is_imported(given, kept):
    """``import attnflow`` and the command line's parser import neither equinox nor diffrax, so the
    program can ask for equinox's callback-free checks (EQX_ON_ERROR=nan, what lets JAX cache adaptive
    solves) before equinox reads the variable; a value the user set wins."""
    env = {k: v for k, v in os.environ.items() if k != "EQX_ON_ERROR"}
    if given is not None:
        env["EQX_ON_ERROR"] = given
    proc = subprocess.run([sys.executable, "-c", PROCESS], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-4:] == ["0", kept, "SA", "True"]


IMPORTS = r"""
import sys
import attnflow.experiments.commands.cli
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"matplotlib", "xarray", "scipy", "optax", "plotly", "dask", "pandas"})
print(" ".join(heavy) or "none")
"""


def test_the_command_line_imports_no_plotting_or_data_library():
    """``import attnflow.experiments.commands.cli`` (every command's start) imports neither matplotlib nor xarray
    (nor scipy, optax, plotly, dask, pandas): each is imported where a figure is drawn, a Dataset built, or a
    routine of its own used."""
    proc = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "none"


RUN_IMPORTS = r"""
import sys
from attnflow.experiments.commands import cli
rc = cli.main(sys.argv[1:])
heavy = sorted({name.split(".")[0] for name in sys.modules} & {"matplotlib", "xarray", "scipy", "optax", "plotly", "dask", "pandas"})
print(rc, " ".join(heavy) or "none")
"""


@pytest.mark.slow
def test_a_run_without_figures_imports_no_plotting_or_data_library(tmp_path):
    """``attnflow run fig4-circle --no-plot`` runs, writes and reports without matplotlib, xarray or scipy."""
    args = [*RUN, "--out", str(tmp_path / "run")]
    proc = subprocess.run([sys.executable, "-c", RUN_IMPORTS, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["0", "none"]
