"""The theory checks compare two independent computations: docs/theory-tests.md says which two for every check of
``attnflow validate`` and of every built-in experiment, and the meanfield-sphere checks, judged on made-up
statistics, fail where the solver and the rates it was built from would agree with each other."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from attnflow.experiments import builtin
from attnflow.experiments.builtin import meanfield_sphere as mfs
from attnflow.experiments.commands import validate
from attnflow.experiments.config import load_config
from attnflow.experiments.run.runner import RunResult
from attnflow.particles.modes import fastest_mode, mode_growth_rates

DOC = Path(__file__).resolve().parents[3] / "docs" / "theory-tests.md"


def _audit_rows() -> dict[str, list[str]]:
    """The audit section of docs/theory-tests.md: under each ``### NAME`` heading, its table's rows."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## What each check compares") :]
    out: dict[str, list[str]] = {}
    name = None
    for line in section.splitlines():
        heading = re.match(r"^### `([^`]+)`", line)
        if heading:
            name = heading.group(1)
            out[name] = []
        elif name is not None and line.startswith("| ") and not line.startswith("| check ") and "---" not in line:
            out[name].append(line)
    return out


def test_every_check_of_validate_and_of_every_experiment_says_what_it_compares():
    rows = _audit_rows()
    # validate's own checks, then every built-in experiment: a table each, no heading for anything else
    expected = {"validate"} | set(builtin.EXPERIMENTS)
    assert set(rows) == expected, set(rows) ^ expected
    own = [label for label, fn in validate.CHECKS if not label.startswith(tuple(builtin.EXPERIMENTS))]
    assert len(rows["validate"]) == len(own), own
    for name, table in rows.items():
        assert table, f"{name}: no check listed"
        for row in table:
            cells = [c.strip() for c in row.strip("|").split("|")]
            # check | compares | against | status: the two computations named, and whether the check was changed
            assert len(cells) == 4 and all(cells), row
            assert cells[3] in ("independent", "changed", "removed", "excluded"), row


def _sphere_result(rates: np.ndarray, *, maxima=(16, 16)) -> RunResult:
    """A meanfield-sphere quick run's statistics with growth rates ``rates`` (β, ℓ) and otherwise as the theory has
    them: mass 1, a positive density, a rising energy, the maxima of the linear pattern (no particles)."""
    e = builtin.EXPERIMENTS["meanfield-sphere"]
    config = load_config(None, ["progress=false"], base={**e.defaults, **e.quick})
    ts = np.linspace(0.0, config.t1, 5)
    members = (1, len(config.beta), config.seeds)
    series = np.broadcast_to(ts, members + ts.shape)
    stats = {
        "sphere_growth_rate": np.broadcast_to(rates[:, None, :], members + rates.shape[-1:]).copy(),
        "mass": np.ones_like(series),
        "min_density": np.full_like(series, 0.1),
        "normalized_energy": 0.5 + 0.01 * series,
        "sphere_maxima": np.broadcast_to(np.asarray(maxima, dtype=float), members + (2,)).copy(),
    }
    return RunResult(config, ts, stats, None, np.zeros(members, np.int64), np.full(members, np.inf), 0.0)


def test_meanfield_sphere_rates_are_checked_against_scipy_not_against_the_solvers_own_rates(monkeypatch):
    e = builtin.EXPERIMENTS["meanfield-sphere"]
    ell = np.arange(1, mfs.GROWTH_DEGREES + 1)
    beta = 20.0
    # the linear theory by hand: ℓ(ℓ+1) I_{ℓ+1/2}(β)/(β I_{1/2}(β)) for SA on S²
    exact = (ell * (ell + 1) * special.iv(ell + 0.5, beta) / (beta * special.iv(0.5, beta)))[None]
    checks = e.checks(_sphere_result(exact))
    assert len(checks) == 6 and all(c.passed for c in checks), checks
    # 2 % too fast: the rates fail, the fastest degree (still 6) does not
    failed = [c.name for c in e.checks(_sphere_result(1.02 * exact)) if c.failed]
    assert len(failed) == 1 and "growth rates" in failed[0]
    # a solver whose kernel came from wrong rates (here: I_ℓ, the circle's orders, in place of I_{ℓ+1/2}) grows at
    # those rates; the solvers' module giving the same wrong rates, the check still compares with scipy and fails
    wrong = (ell * (ell + 1) * special.ive(ell, beta) / (beta * special.ive(0.0, beta)))[None]
    monkeypatch.setattr(mfs.ms, "sphere_growth_rates", lambda *a, **k: wrong)
    failed = [c.name for c in e.checks(_sphere_result(wrong)) if c.failed]
    assert len(failed) == 1 and "growth rates" in failed[0]
    monkeypatch.undo()
    # a fastest degree one too high: only that check fails
    shifted = exact.copy()
    shifted[0, 6] = 1.1 * exact.max()
    failed = [c.name for c in e.checks(_sphere_result(shifted)) if c.failed]
    assert "β = 20: the fastest degree of the solver" in failed
    # the clusters against the linear pattern
    failed = [c.name for c in e.checks(_sphere_result(exact, maxima=(15, 16))) if c.failed]
    assert len(failed) == 1 and "linear pattern" in failed[0]


@pytest.mark.parametrize("model", ["sa", "usa", "usa-rescaled"])
def test_bessel_rates_equal_mode_growth_rates(model):
    # two computations of one theory: scipy's Bessel functions and the downward recurrence of particles.modes
    ell = np.arange(1, 41)
    for beta in (0.5, 5.0, 20.0, 100.0, 400.0):
        for noise in (0.0, 0.3):
            _, rates = mode_growth_rates(beta, 3, model=model, kmax=40)
            want = np.asarray(rates) - 0.5 * noise**2 * ell * (ell + 1)
            np.testing.assert_allclose(mfs.bessel_rates(ell, beta, model, noise), want, rtol=1e-10, atol=0)
        degrees = np.arange(1, 80)
        assert degrees[np.argmax(mfs.bessel_rates(degrees, beta, model))] == int(fastest_mode(beta, d=3))
