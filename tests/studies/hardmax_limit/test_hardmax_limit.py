"""``hardmax-limit``: its refusals, and its checks judged on made-up statistics (no simulation)."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import cli

from attnflow.experiments import builtin
from attnflow.experiments.config import load_config
from attnflow.experiments.run.runner import RunResult
from attnflow.experiments.studies.hardmax_limit import hardmax_limit as hl
from attnflow.experiments.studies.hardmax_limit.hardmax_limit_theory import (
    SELF_WEIGHT,
    concentration_offset,
    hull_tokens,
    limit_rate,
    trapping_exponent,
)

EXPERIMENT = builtin.EXPERIMENTS["hardmax-limit"]


@pytest.mark.parametrize(
    "setting,named",
    [("limit_beta=[10,20]", "limit_beta"), ("trap_beta=[20,30]", "trap_beta"), ("hull_vertices=2", "hull_vertices")],
)
def test_refusals_are_one_line_and_write_nothing(tmp_path, setting, named):
    out = tmp_path / "run"
    rc, _, err = cli(["run", "hardmax-limit", "--quick", "--set", setting, "--out", out])
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and named in err
    assert not out.exists()


def _result(config, *, distance_scale=0.5, t_c_shift=0.0, trap_factor=1.0) -> RunResult:
    """Statistics as the theory predicts them, scaled where a check should fail."""
    k = config.hull_vertices
    x0 = hull_tokens(k, config.hull_interior, seed=config.seed)
    betas = np.asarray(config.limit_beta)
    trap_betas = np.asarray(config.trap_beta)
    pred = np.log(betas / concentration_offset(x0, k))
    c, i, j = trapping_exponent(x0[:k])
    speed = np.exp(-c * trap_betas) * np.linalg.norm(x0[i] - x0[j])
    steps = np.arange(config.frank_wolfe_steps + 1)

    def member(a):
        return np.asarray(a, dtype=float)[None, None, None]

    stats = {
        "limit_distance": member(distance_scale * limit_rate(betas) * (betas / betas[0]) ** -0.5),
        "limit_distance_max": member(limit_rate(betas)),
        "self_weight": member(np.full((betas.size, 3), SELF_WEIGHT)),
        "concentration_time": member(pred + t_c_shift),
        "concentration_predicted": member(pred),
        "path_residual": member(np.zeros(3)),
        "tokens": member(x0),
        "cells": member(np.zeros(x0.shape[0])),
        "fw_gap": member(2.0 / (steps + 2.0) ** 2),
        "trap_time": member(trap_factor * hl.TRAP_DELTA / speed),
        "trap_speed": member(speed),
    }
    one = np.zeros((1, 1, 1))
    return RunResult(config, np.zeros(1), stats, None, one.astype(np.int64), one + np.inf, 0.0)


def test_checks_pass_on_the_theory_and_fail_where_it_is_broken():
    config = load_config({**EXPERIMENT.defaults, **EXPERIMENT.quick})
    checks = EXPERIMENT.checks(_result(config))
    assert len(checks) == 8 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    # a distance above the rate, a concentration late by 0.2, trapping times growing like e^{1.2 cβ}
    failed = [c.name for c in EXPERIMENT.checks(_result(config, distance_scale=1.5)) if c.failed]
    assert len(failed) == 1 and "≤ √(log(β+1)/β)" in failed[0]
    failed = [c.name for c in EXPERIMENT.checks(_result(config, t_c_shift=0.2)) if c.failed]
    assert len(failed) == 1 and "log β − log u*" in failed[0]
    trap_betas = np.asarray(config.trap_beta)
    c = trapping_exponent(hull_tokens(config.hull_vertices, 1, seed=config.seed)[: config.hull_vertices])[0]
    slower = np.exp(0.2 * c * (trap_betas - trap_betas[0]))
    failed = [ch.name for ch in EXPERIMENT.checks(_result(config, trap_factor=slower)) if ch.failed]
    assert len(failed) == 2 and all("trap" in name for name in failed)
