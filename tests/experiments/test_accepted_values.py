"""Every value a key accepts runs or is refused: the ranges of the keys stated and checked, seeds summed in Python
integers (derived streams wrap modulo 2**63), overflow caught where it happens and named, and step bounds for the
experiments whose runs could otherwise not end. A refusal is one line with exit status 2, a numerical failure one
line with exit status 1; never a traceback."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import cli

import attnflow as af
from attnflow.particles import init
from attnflow.particles.errors import ConvergenceError, InputError
from attnflow.particles.modes import BETA_MAX, fastest_mode

SEED_MAX = 2**63 - 1


def refused(rc: int, stderr: str, *words: str) -> str:
    """The one line of a refusal (exit status 2), which names every word given."""
    assert rc == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- the ranges of the keys -----------------------------------------------------------------------------------


def test_beta_key_states_and_checks_its_range(tmp_path):
    rc, _, err = cli(["run", "simulate", "--set", "beta=1e300", "--out", tmp_path / "r"])
    line = refused(rc, err, "beta", "≤ 100000000", "1e+300")
    assert "≥ -100000000" in line
    assert not (tmp_path / "r").exists()
    rc, out, _ = cli(["list", "--keys"])
    assert rc == 0 and "each ≥ -100000000 and ≤ 100000000" in out


def test_interaction_c_and_its_beta_refused_by_name(tmp_path):
    rc, _, err = cli(
        ["run", "moderate-interaction", "--quick", "--set", "interaction_c=[1e300,2e300]", "--out", tmp_path / "a"]
    )
    refused(rc, err, "interaction_c[0]", "≤ 10000", "1e+300")
    # within the key's range, but c·n = 2e4 · 1e4 = 2e8 past the growth rates' largest β
    rc, _, err = cli(
        [
            "run",
            "moderate-interaction",
            "--quick",
            "--set",
            "interaction_c=[10000]",
            "--set",
            "token_counts=[20000]",
            "--out",
            tmp_path / "b",
        ]
    )
    refused(rc, err, "interaction_c × token_counts", "β = 2e+08", "≤ 1e+08")


def test_growth_rates_refuse_beta_past_their_recurrence():
    assert int(fastest_mode(BETA_MAX)) == pytest.approx(np.sqrt(2 * BETA_MAX), rel=1e-3)  # k* ≈ √(2β) = 14142
    with pytest.raises(InputError, match=r"beta must be ≤ 1e\+08 .* got 1e\+308"):
        fastest_mode(1e308)


def test_stationary_circle_names_beta_instead_of_overflowing():
    with pytest.raises(InputError, match=r"beta must be ≤ 1e\+08 for the stationary densities, got 1e\+308"):
        af.stationary_circle(1e308, 0.5, model="sa")
    with pytest.raises(InputError, match=r"beta must be ≤ 700 with model 'usa'.*'usa-rescaled'"):
        af.stationary_circle(800.0, 0.5, model="usa")
    with pytest.raises(ConvergenceError, match=r"not finite at beta = 1e-300"):
        af.stationary_circle(1e-300, 0.5, model="sa")  # 2K/β overflows float64
    # SA's mode 1 grows at I_1(β)/(β I_0(β)) → 1/2 as β → 0; a noise σ = 2 damps it at σ²/2 = 2: stable
    below = af.stationary_circle(1e-6, 2.0, model="sa")
    assert below.order == pytest.approx(0.0, abs=1e-12) and below.unstable == 0


# -- seeds -----------------------------------------------------------------------------------------------------


def test_derived_seeds_wrap_modulo_two_to_the_63():
    assert init.derived_seed(SEED_MAX, 1) == 0
    assert init.derived_seed(SEED_MAX, 1000 * 2 + 3) == 2002
    assert init.derived_seed(5, 7) == 12
    assert init.derived_seed(2**62, 2**62) == 0  # summed in Python integers: no int64 overflow on the way


@pytest.mark.slow
def test_the_seeds_documented_maximum_runs(tmp_path):
    rc, _, err = cli(
        [
            "run",
            "moderate-interaction",
            "--quick",
            "--quiet",
            "--no-plot",
            "--set",
            f"seed={SEED_MAX}",
            "--out",
            tmp_path,
        ]
    )
    assert rc == 0 and "Traceback" not in err, err


# -- runs that cannot end --------------------------------------------------------------------------------------


def test_renyi_centres_refuses_a_run_past_max_steps(tmp_path):
    rc, _, err = cli(["run", "renyi-centres", "--quick", "--set", "t1=1e300", "--out", tmp_path / "r"])
    refused(rc, err, "t1 = 1e+300", "1.25e+299 steps", "max_steps = 1000000")
    assert not (tmp_path / "r").exists()
    rc, _, err = cli(
        ["run", "renyi-centres", "--quick", "--set", "t1=1e5", "--set", "max_steps=10000", "--out", tmp_path / "r"]
    )
    refused(rc, err, "t1/8 = 1.25e+04 steps", "max_steps = 10000")


# -- what the experiments do with extreme values ---------------------------------------------------------------


@pytest.mark.slow
def test_bifurcation_at_a_tiny_beta_is_a_numerical_message(tmp_path):
    rc, _, err = cli(["run", "bifurcation", "--quick", "--quiet", "--set", "beta=[1e-300]", "--out", tmp_path])
    assert rc == 1 and "Traceback" not in err and "β = 1e-300" in err, err


# -- messages --------------------------------------------------------------------------------------------------


def test_deep_nesting_is_an_input_error_that_quotes_a_short_value(tmp_path):
    deep = "[" * 5000 + "]" * 5000
    (tmp_path / "deep.toml").write_text(f"beta = {deep}\n")
    rc, _, err = cli(["run", tmp_path / "deep.toml", "--out", tmp_path / "a"])
    refused(rc, err, "nested too deeply")
    rc, _, err = cli(["sweep", "simulate", "--grid", f"beta={deep}", "--out", tmp_path / "b"])
    line = refused(rc, err, "--grid beta", "not a valid TOML array")
    assert len(line) < 200, line


def test_a_key_the_experiment_does_not_read_is_refused_with_the_experiments_own_value(tmp_path):
    rc, _, err = cli(["run", "hardmax-limit", "--quick", "--set", "d=3", "--out", tmp_path])
    line = refused(rc, err, "does not read d (got d = [3])", "leave d unset (the experiment's own d = [2])")
    assert "default" not in line


def test_meanfield_time_past_the_mean_fields_horizon_is_named(tmp_path):
    rc, _, err = cli(["run", "noisy-transition", "--quick", "--set", "meanfield_time=1e300", "--out", tmp_path])
    line = refused(rc, err, "meanfield_time = 1e+300", "meanfield_time ≤ 1.88e+07")
    assert "t1" not in line


def test_repeated_beta_in_a_fit_is_refused_not_singular(tmp_path):
    rc, _, err = cli(["run", "hardmax-limit", "--quick", "--set", "trap_beta=[20,20,20]", "--out", tmp_path])
    line = refused(rc, err, "trap_beta needs ≥ 3 distinct values, got 1 (3 listed)")
    assert "Singular" not in line


def test_a_fit_through_one_abscissa_is_undefined():
    from attnflow.experiments.studies.hardmax_limit.hardmax_limit import fit_line

    assert all(np.isnan(fit_line([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])))
    a, _, b, _ = fit_line([0.0, 1.0, 2.0], [1.0, 3.0, 5.0])
    assert (a, b) == pytest.approx((2.0, 1.0))


def test_moderate_interaction_bounds_its_steps_by_max_steps(tmp_path):
    rc, _, err = cli(
        ["run", "moderate-interaction", "--quick", "--set", "t1=1e5", "--set", "max_steps=100", "--out", tmp_path]
    )
    refused(rc, err, "t1 = 100000 with dt = 0.05 needs 2e+06 steps of solver 'ab4'", "max_steps = 100")


@pytest.mark.parametrize(
    "name, setting, words",
    [
        ("meanfield-sphere", "perturbation=1", ("perturbation ε must be < 0.3/√16 = 0.075", "got 1")),
        ("gaussian-closure", "collapse_time=1e-300", ("collapse_time = 1e-300 must be ≥ dt = 0.05",)),
        ("gaussian-closure", "dt=1e300", ("t1 = 2 must be ≥ dt = 1e+300",)),
        ("moderate-interaction", "collapse_eigenvalue=-1e300", ("collapse_eigenvalue", "≥ -10", "-1e+300")),
        ("long-context", "residual=1e300", ("residual must be a finite number ≥ 0 and ≤ 1000000", "1e+300")),
    ],
)
def test_extremes_of_the_experiments_keys_refused_up_front(tmp_path, name, setting, words):
    rc, _, err = cli(["run", name, "--quick", "--set", setting, "--out", tmp_path / "r"])
    refused(rc, err, *words)
    assert not (tmp_path / "r").exists()
