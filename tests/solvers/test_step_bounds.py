"""Step counts and seeds at their limits: refused in one line before anything runs, never wrapped or rounded away.

A fixed-step run (fixed-step solvers, ``dense``, ab4, noisy fields, ``adaptive=False``) knows its
step count in advance: more than ``max_steps``, or a step that vanishes against the time in the
run's dtype, is a ValueError before anything is compiled. Member s of a run draws from seed
``seed + s``, which must stay in [0, 2**63 − 1]. Nothing here simulates more than a few dozen steps.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import cli, tree

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import preflight
from attnflow.solvers.dense import grid, grid_steps, steps_to_cover
from attnflow.solvers.simulation import MAX_COUNTED_STEPS

SEED_MAX = 2**63 - 1


def X0():
    return af.init.uniform(0, 4, 3)


def NOISY():
    return af.Noisy(af.SA(1.0), 0.1)


def _sim(**kw):
    field = kw.pop("field", af.SA(1.0))
    x0 = kw.pop("x0", X0())
    t1 = kw.pop("t1", 2.0)
    return af.simulate(field, x0, t1, **kw)


# -- the Python API: each family of fixed-step runs -----------------------------------------------

FAMILIES = {
    "rk4": dict(solver="rk4"),
    "euler": dict(solver="euler"),
    "ab4": dict(solver="ab4"),
    "rk4-dense": dict(solver="rk4", dense=True),
    "noisy-euler": dict(solver="euler", field=NOISY()),
    "tsit5-constant": dict(solver="tsit5", adaptive=False),
    "dopri5-constant": dict(solver="dopri5", adaptive=False),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_dt_is_refused_naming_the_count_and_the_remedy(family):
    with pytest.raises(ValueError) as info:
        _sim(dt=1e-12, **FAMILIES[family])
    message = str(info.value)
    assert "\n" not in message
    assert f"'{FAMILIES[family]['solver']}'" in message
    assert "dt = 1e-12 over [0, 2] needs 2e+12 steps, more than max_steps = 1000000" in message
    assert "raise dt, or pass a larger max_steps" in message


@pytest.mark.parametrize("family", FAMILIES)
def test_huge_t1_is_refused_not_run_as_zero_steps(family):
    with pytest.raises(ValueError, match=r"dt = 0.05 is below the resolution of float64 at t = 1e\+300"):
        _sim(t1=1e300, dt=0.05, **FAMILIES[family])


@pytest.mark.parametrize("dt", [1e-300, 5e-324])
def test_a_step_that_vanishes_against_t_is_refused(dt):
    with pytest.raises(ValueError, match=r"is below the resolution of float64 at t = 2 .*raise dt"):
        _sim(solver="rk4", dt=dt)


def test_float32_resolution_is_its_own_and_names_float64():
    # 1e-7 < half the spacing of float32 at 2 (2.4e-7): the steps would add nothing to t, nor to x
    with pytest.raises(ValueError, match=r"dt = 1e-07 is below the resolution of float32 at t = 2 .*float64"):
        _sim(solver="rk4", dt=1e-7, dtype="float32", max_steps=10**8)
    _sim(solver="rk4", dt=1e-7, dtype="float64", max_steps=10**8, t1=1e-6)  # 10 steps in float64: fine


def test_a_late_start_needs_its_own_resolution():
    with pytest.raises(ValueError, match=r"float32 at t = 1e\+08"):
        _sim(solver="rk4", dt=1.0, t0=1e8, t1=1e8 + 64, dtype="float32")


def test_max_steps_cannot_lift_the_step_counters_limit():
    with pytest.raises(ValueError, match=rf"more than the {MAX_COUNTED_STEPS} steps a fixed-step run can count"):
        _sim(solver="rk4", dt=1e-12, max_steps=10**13)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "many"])
def test_max_steps_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match=r"max_steps must be an integer ≥ 1"):
        _sim(solver="rk4", dt=0.05, max_steps=bad)


# -- at the bound: accepted, and the loops take exactly the steps counted ---------------------------

# rk4 over [0, 2] at dt = 0.05: 40 steps; three save intervals of 2/3 take ⌈13.3⌉ = 14 each;
# a save at 0.52 splits [0, 2] into ⌈10.4⌉ + ⌈29.6⌉ = 11 + 30; the uniform grid ignores save times
AT_BOUND = [
    ("rk4", dict(solver="rk4"), None, 40),
    ("rk4-thirds", dict(solver="rk4"), np.linspace(0.0, 2.0, 4), 42),
    ("rk4-split", dict(solver="rk4"), np.array([0.0, 0.52, 2.0]), 41),
    ("ab4-thirds", dict(solver="ab4"), np.linspace(0.0, 2.0, 4), 40),
    ("rk4-dense-split", dict(solver="rk4", dense=True), np.array([0.0, 0.52, 2.0]), 40),
    ("noisy-euler-thirds", dict(solver="euler", field=NOISY()), np.linspace(0.0, 2.0, 4), 42),
    ("tsit5-constant", dict(solver="tsit5", adaptive=False), np.linspace(0.0, 2.0, 4), 40),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, kw, ts, steps", AT_BOUND, ids=[c[0] for c in AT_BOUND])
def test_a_run_exactly_at_the_bound_runs_and_takes_the_counted_steps(name, kw, ts, steps):
    sol = _sim(dt=0.05, ts=ts, max_steps=steps, **kw)
    assert int(sol.steps) == steps
    with pytest.raises(ValueError, match=rf"needs {steps} steps, more than max_steps = {steps - 1}:"):
        _sim(dt=0.05, ts=ts, max_steps=steps - 1, **kw)


def test_the_grid_count_is_python_arithmetic():
    assert steps_to_cover(2.0, 0.05) == 40 and isinstance(steps_to_cover(2.0, 0.05), int)
    assert steps_to_cover(0.0, 0.05) == 0
    assert steps_to_cover(1e300, 1e-300) == float("inf")  # the ratio overflows to inf, never an exception
    assert grid_steps(0.0, 1e-3, 0.05) == 1
    with pytest.raises(ValueError, match="more than a grid can count"):
        grid(0.0, 1e300, 1e-300, np.array([0.0]))


# -- t1 at t0 ----------------------------------------------------------------------------------------


def test_t1_equal_to_t0_names_t1_not_ts():
    with pytest.raises(ValueError, match=r"^t1 must be > t0 = 0, got 0$"):
        _sim(t1=0.0)
    with pytest.raises(ValueError, match=r"^t1 must be > t0 = 1, got 1$"):
        _sim(t1=1.0, t0=1.0, solver="rk4", dt=0.1)


# -- seeds at the edge of int64 -------------------------------------------------------------------------


def test_the_largest_seed_is_accepted():
    assert af.init.uniform(SEED_MAX, 3, 2).shape == (3, 2)
    assert af.init.uniform(np.uint64(5), 3, 2).shape == (3, 2)


@pytest.mark.parametrize(
    "seed",
    [SEED_MAX + 1, 2**64 - 1, 2**64, -1, np.int64(-5), np.uint64(2**64 - 1)],
    ids=["2**63", "2**64-1", "2**64", "-1", "np-negative", "np-uint64-max"],
)
def test_seeds_outside_int64_are_refused_by_the_samplers(seed):
    with pytest.raises(ValueError, match=rf"^seed must be an integer in \[0, 2\*\*63 - 1\], got {int(seed)}$"):
        af.init.uniform(seed, 3, 2)
    with pytest.raises(ValueError, match=r"^seed must be an integer in \[0, 2\*\*63 - 1\]"):
        af.init.clusters(seed, 4, 3, 2, 0.1)


@pytest.mark.parametrize("seed", [SEED_MAX + 1, -1])
def test_noise_keys_outside_int64_are_refused(seed):
    with pytest.raises(ValueError, match=rf"^seed must be an integer in \[0, 2\*\*63 - 1\], got {seed}$"):
        _sim(field=NOISY(), solver="euler", dt=0.05, t1=0.1, key=seed)


def test_the_largest_noise_seed_runs():
    assert int(_sim(field=NOISY(), solver="euler", dt=0.05, t1=0.1, key=SEED_MAX).steps) == 2


def test_config_seed_range():
    assert load_config(None, ["seed=9223372036854775807", "seeds=1"]).seed == SEED_MAX
    assert load_config(None, ["seed=9223372036854775806", "seeds=2"]).seed == SEED_MAX - 1
    with pytest.raises(
        ConfigError,
        match=r"seed = 9223372036854775807, seeds = 2: seed must lie in "
        r"\[0, 9223372036854775806\]",
    ):
        load_config(None, ["seed=9223372036854775807", "seeds=2"])
    with pytest.raises(
        ConfigError,
        match=r"seed = 18446744073709551615, seeds = 1: seed must lie in "
        r"\[0, 9223372036854775807\]",
    ):
        load_config(None, ["seed=18446744073709551615", "seeds=1"])
    with pytest.raises(ConfigError, match=r"seed must be an integer ≥ 0, got -1"):
        load_config(None, ["seed=-1"])


# -- the configuration: max_steps, and preflight's checks ---------------------------------------------


def _config(*sets):
    return load_config(
        None, ["model=sa", "n=6", "d=3", "beta=1.0", "seeds=1", "t1=2.0", "n_save=5", "solver=rk4", "dt=0.05", *sets]
    )


def test_preflight_counts_steps_from_the_config():
    preflight.check_steps(_config("max_steps=40"))
    with pytest.raises(ConfigError, match=r"needs at least 40 steps, more than max_steps = 39"):
        preflight.check_steps(_config("max_steps=39"))
    # ab4 and dense rk4 step on the uniform grid: the count is exact
    with pytest.raises(ConfigError, match=r"solver 'ab4' with dt = 0.05 over \[0, 2\] needs 40 steps"):
        preflight.check_steps(_config("solver=ab4", "max_steps=39"))
    with pytest.raises(ConfigError, match=r"solver 'rk4' \(dense\) .* needs 40 steps"):
        preflight.check_steps(_config("dense=true", "max_steps=39"))
    # adaptive solvers: dt is the first step, nothing to count
    preflight.check_steps(_config("solver=tsit5", "dt=1e-12"))


def test_preflight_bounds_save_times():
    with pytest.raises(ConfigError, match=r"n_save = 1000000000 save times, more than max_steps = 1000000"):
        preflight.check_steps(_config("solver=tsit5", "n_save=1000000000"))
    with pytest.raises(ConfigError, match=r"save_times holds 3 times, more than max_steps = 2"):
        preflight.check_steps(_config("solver=tsit5", "save_times=[0.0, 1.0, 2.0]", "max_steps=2"))


def test_preflight_lower_bound_never_exceeds_the_exact_count():
    # three save intervals of 2/3 take 42 steps: preflight lets 41 through, simulate refuses it exactly
    preflight.check_steps(_config("n_save=4", "max_steps=41"))
    preflight.check_steps(_config("n_save=4", "max_steps=40"))


# -- the command line: one line, exit 2, nothing written ---------------------------------------------------


@pytest.fixture
def workdir(small_workdir):
    return small_workdir


def _refused(workdir, argv, *fragments):
    before = tree(workdir)
    rc, stdout, stderr = cli(argv)
    assert rc == 2, stderr
    assert stdout == "" and "Traceback" not in stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    line = stderr.strip()
    assert line.startswith("attnflow: error: "), stderr
    for fragment in fragments:
        assert fragment in line, f"{fragment!r} not in {line!r}"
    assert tree(workdir) == before, "something was written"


def _run(*sets):
    return ["run", "small.toml", *(a for s in sets for a in ("--set", s)), "--out", "OUT", "--quiet"]


CLI_REFUSALS = {
    "dt-tiny": (("dt=1e-12",), ("solver 'rk4'", "needs at least 2e+12 steps", "max_steps = 1000000", "raise dt")),
    "dt-vanishing": (("dt=1e-300",), ("dt = 1e-300 is below the resolution of float64 at t = 2",)),
    "t1-huge": (("t1=1e300",), ("dt = 0.05 is below the resolution of float64 at t = 1e+300",)),
    "ab4-tiny": (("solver=ab4", "dt=1e-9"), ("solver 'ab4'", "needs 2e+09 steps", "max_steps")),
    "float32-resolution": (
        ("dtype=float32", "dt=1e-8", "max_steps=1000000000"),
        ("below the resolution of float32", "float64"),
    ),
    "one-step-over": (("max_steps=39", "n_save=2"), ("needs at least 40 steps, more than max_steps = 39",)),
    "max-steps-zero": (("max_steps=0",), ("max_steps must be an integer ≥ 1, got 0",)),
    "n-save-huge": (
        ("solver=tsit5", "n_save=100000000", "seeds=1", "beta=1", "statistics=clustered", "save_states=no"),
        ("n_save = 100000000 save times", "max_steps = 1000000"),
    ),
    "seed-uint64": (
        ("seed=18446744073709551615",),
        ("seed = 18446744073709551615, seeds = 2", "[0, 9223372036854775806]"),
    ),
    "seed-wraps": (
        ("seed=9223372036854775807", "seeds=2"),
        ("seed = 9223372036854775807, seeds = 2", "[0, 9223372036854775806]"),
    ),
    "seed-negative": (("seed=-1",), ("seed must be an integer ≥ 0",)),
}


@pytest.mark.parametrize("case", CLI_REFUSALS)
def test_command_line_refusals(workdir, case):
    sets, fragments = CLI_REFUSALS[case]
    _refused(workdir, _run(*sets), *fragments)


def test_a_sweep_point_beyond_the_bound_is_refused_before_the_manifest(workdir):
    argv = ["sweep", "small.toml", "--grid", "dt=0.05,1e-12", "--out", "OUT", "--quiet"]
    _refused(workdir, argv, "dt = 1e-12", "max_steps")


def test_command_line_at_the_bound_and_the_largest_seed_run(workdir):
    rc, stdout, stderr = cli(
        _run("max_steps=40", "n_save=2", "seeds=1", "beta=1", "seed=9223372036854775807") + ["--json", "--no-plot"]
    )
    assert rc == 0, stderr
    summary = json.loads(stdout)
    assert summary["steps"] == 40
    assert summary["config"]["max_steps"] == 40 and summary["config"]["seed"] == SEED_MAX


def test_jnp_times_are_counted_like_numpy_ones():
    sol = _sim(solver="rk4", dt=0.05, ts=jnp.linspace(0.0, 2.0, 4), max_steps=42)
    assert int(sol.steps) == 42
