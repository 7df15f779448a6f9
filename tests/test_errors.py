"""One error hierarchy: bad input (InputError, a ValueError) apart from numerical failures (ConvergenceError, a
RuntimeError), each existing exception under one of them with its old base kept; the numerical failures of Newton
iterations, sums and the closure raise ConvergenceError naming what they reached; the command line's exit status
follows the meaning: 2 for input, 1 for a failed run."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.commands import cli
from attnflow.experiments.config import ConfigError
from attnflow.experiments.studies.gaussian_closure import gaussian_closure_solver as closure
from attnflow.experiments.studies.selectivity import selectivity_theory as selectivity
from attnflow.solvers import circle_meanfield as mf


@pytest.mark.parametrize(
    "error,bases",
    [
        (af.InputError, (af.AttnflowError, ValueError)),
        (af.ConvergenceError, (af.AttnflowError, RuntimeError)),
        (ConfigError, (af.InputError, ValueError)),
        (af.NonFiniteError, (af.ConvergenceError, FloatingPointError, RuntimeError)),
        (af.MaxStepsError, (af.ConvergenceError, RuntimeError)),
        (af.MeanFieldError, (af.ConvergenceError, RuntimeError)),
        (af.SphereMeanFieldError, (af.ConvergenceError, RuntimeError)),
    ],
)
def test_each_error_sits_under_its_meaning_and_keeps_its_base(error, bases):
    assert all(issubclass(error, base) for base in bases), error.__mro__
    # input and numerical failures never overlap
    assert not (issubclass(error, af.InputError) and issubclass(error, af.ConvergenceError))


def test_stationary_newton_that_does_not_converge_is_a_convergence_error_with_its_residual():
    theta = mf.theta_grid(48)
    with pytest.raises(af.ConvergenceError, match=r"Newton did not converge in 1 iterations \(residual \d") as info:
        af.stationary_circle(1.5, 0.5, np.exp(2.0 * np.cos(theta)), max_iter=1, tol=1e-300)
    assert not isinstance(info.value, ValueError)  # no longer reported as the user's input


def test_selectivity_newton_that_does_not_converge_names_its_steps():
    keys = af.init.uniform(0, 64, 3)
    with pytest.raises(af.ConvergenceError, match=r"did not converge in 1 steps \(to rtol = 1e-12\)"):
        selectivity.selectivity_threshold(keys[:2] + 0.01, keys, max_iter=1)


def test_an_unconverged_limit_sum_is_a_convergence_error():
    # d = 12 with 50 points per draw: the terms beyond the 50th are far above 1e-9 of the sum
    with pytest.raises(af.ConvergenceError, match=r"the sum over 50 points per draw has not converged for d = 12"):
        selectivity.limit_thresholds(12, 8, points=50)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_closure_that_stops_at_max_steps_is_a_convergence_error():
    with pytest.raises(af.ConvergenceError, match=r"draw 0: the solve used its max_steps = 3 steps and stopped at t"):
        closure.solve_covariance(np.eye(2)[None], -np.eye(2)[None, None], times=(0.2, 10.0), max_steps=3)


@pytest.mark.parametrize(
    "error,status",
    [
        (af.ConvergenceError("solve: stopped at t = 0.5"), 1),
        (af.MaxStepsError("simulate: member 2 of 4 reached max_steps", member=2, t=0.5), 1),
        (af.NonFiniteError("simulate: member 0 of 1 became non-finite", member=0, t=1.0), 1),
        (RuntimeError("1 of 2 runs failed"), 1),
        (af.InputError("beta must be finite"), 2),
        (ConfigError("unknown key 'bta'"), 2),
        (ValueError("bad array"), 2),
    ],
)
def test_the_exit_status_follows_the_meaning(monkeypatch, capsys, error, status):
    def fails(args):
        raise error

    monkeypatch.setattr(cli, "cmd_list", fails)
    assert cli.main(["list"]) == status
    err = capsys.readouterr().err
    assert err == f"attnflow: error: {error}\n"


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_max_steps_at_the_command_line_exits_1_keeping_the_other_members(tmp_path, capsys):
    out = tmp_path / "run"
    sets = ["model=usa", "beta=1,6", "n=8", "d=3", "seeds=1", "t1=2", "n_save=5"]
    sets += ["solver=tsit5", "max_steps=60", "progress=false", "statistics=pairs"]
    rc = cli.main(["run", "simulate", "--out", str(out), "--no-plot"] + [a for s in sets for a in ("--set", s)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert err.count("\n") == 1 and err.startswith("attnflow: error: run: the member d = 3, β = 6, seed = 0 stopped")
    assert "max_steps = 60" in err and "t1 = 2" in err
    ds = af.load(out)
    fraction = np.asarray(ds.clustered_fraction.sel(d=3))
    assert np.all(np.isfinite(fraction[0]))  # β = 1 reached t1
    assert np.isfinite(fraction[1, 0, 0]) and np.all(np.isnan(fraction[1, 0, 1:]))  # β = 6 stopped before t = 0.5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["error"].startswith("run: the member d = 3, β = 6, seed = 0 stopped at t = 0.2")


def test_on_failure_is_checked_before_anything_runs():
    with pytest.raises(ValueError, match=r"on_failure must be one of 'raise', 'keep'; got 'ignore'"):
        af.simulate(af.SA(1.0), af.init.uniform(0, 4, 3), 1.0, on_failure="ignore", ts=jnp.linspace(0, 1, 2))


def test_rest_point_and_continuation_failures_are_convergence_errors():
    from attnflow.solvers.continuation import ContinuationError
    from attnflow.solvers.equilibrium import EquilibriumError

    assert issubclass(ContinuationError, af.ConvergenceError) and issubclass(ContinuationError, RuntimeError)
    assert issubclass(EquilibriumError, af.ConvergenceError) and issubclass(EquilibriumError, RuntimeError)
