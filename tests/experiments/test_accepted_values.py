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
        ["run", "moderate-interaction", "--quick", "--quiet", "--no-plot", "--set", f"seed={SEED_MAX}", "--out", tmp_path]
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
