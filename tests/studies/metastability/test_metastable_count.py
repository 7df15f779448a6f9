"""The law of metastable clusters: the fastest unstable mode k*(β), plateau detection, and the
``metastable-count`` experiment's counts against k*(β) on the circle."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special

import attnflow as af
from attnflow.experiments import builtin
from attnflow.experiments.config import load_config
from attnflow.experiments.run import runner
from attnflow.experiments.studies.metastability import metastable_count
from attnflow.particles.modes import fastest_mode, mode_growth_rates

BETAS = [1.0, 5.0, 20.0, 100.0, 400.0]


@pytest.mark.parametrize("beta", BETAS)
def test_fastest_mode_is_the_argmax_of_k2_Ik(beta):
    k = np.arange(1, 200)
    # scipy's iv overflows past β ≈ 700; up to 400 it is the reference
    expected = int(k[np.argmax(k**2 * special.iv(k, beta))])
    assert int(fastest_mode(beta)) == expected
    assert af.fastest_mode(beta) == expected


@pytest.mark.slow
@pytest.mark.parametrize("d", [2, 3, 4])
@pytest.mark.parametrize("model", ["sa", "usa", "usa-rescaled"])
def test_growth_rates_match_bessel_functions(model, d):
    nu = d / 2 - 1
    for beta in BETAS:
        ell, rates = mode_growth_rates(beta, d, model=model)
        ell = np.asarray(ell, dtype=float)
        ref = ell * (ell + d - 2) / beta * special.iv(ell + nu, beta)
        if model == "sa":
            ref = ref / special.iv(nu, beta)
        else:
            ref = ref * math.gamma(d / 2) * (2 / beta) ** nu * (math.exp(-beta) if model == "usa-rescaled" else 1.0)
        np.testing.assert_allclose(np.asarray(rates), ref, rtol=1e-12)
        # the fastest degree is the same for SA and USA
        assert int(np.argmax(rates)) + 1 == int(fastest_mode(beta, d))


def test_circle_rates_are_the_linearization_of_md_section_3():
    # k² I_k(β)/(β I_0(β)) for SA on the circle, at one β and k by hand
    _, rates = mode_growth_rates(3.0, model="sa", kmax=4)
    assert float(rates[1]) == pytest.approx(4 * special.iv(2, 3.0) / (3.0 * special.iv(0, 3.0)), rel=1e-13)


@pytest.mark.parametrize("beta", [100.0, 400.0, 1e3, 5e3, 1e4])
def test_fastest_mode_approaches_sqrt_2beta_without_overflow(beta):
    k = int(fastest_mode(beta))
    assert abs(k - math.sqrt(2 * beta)) <= 1
    _, rates = mode_growth_rates(beta, model="usa-rescaled")
    assert np.all(np.isfinite(np.asarray(rates))) and float(np.max(rates)) > 0


def test_fastest_mode_batches_and_rejects_bad_beta():
    betas = np.array([[1.0, 5.0], [20.0, 1e4]])
    np.testing.assert_array_equal(np.asarray(fastest_mode(betas)), [[1, 3], [6, 141]])
    for bad in (0.0, -1.0, float("nan"), float("inf"), []):
        with pytest.raises(ValueError, match="beta"):
            fastest_mode(bad)
    with pytest.raises(ValueError, match="d"):
        fastest_mode(5.0, d=1)


# -- plateau detection ------------------------------------------------------------------------


def _series():
    """Save times 0, then 1 … 1000 (log-spaced, ratio 10^{1/40}) with a known first metastable state."""
    ts = np.concatenate([[0.0], np.geomspace(1.0, 1000.0, 121)])
    counts = np.full(ts.size, 300)
    counts[ts >= 3] = 40
    counts[ts >= 6] = 20  # still collapsing: below the 1.25 ratio a plateau is too short
    counts[ts >= 7] = 9  # a straggler leaving: short too
    counts[ts >= 7.5] = 8  # the first metastable state, 7.5 … 60
    counts[ts >= 60] = 7
    counts[ts >= 200] = 5
    tight = ts >= 6.5  # the energy test: tight clusters from t = 6.5
    return ts, counts, tight


def test_first_metastable_plateau_on_a_synthetic_series():
    ts, counts, tight = _series()
    count, t_start, t_end, censored = metastable_count.first_metastable_plateau(ts, counts, tight)
    assert count == 8 and not censored
    assert t_start == ts[np.argmax(ts >= 7.5)]
    assert t_end == ts[np.argmax(ts >= 60)]  # the first save at which the count differs
    # without the tightness test, the long run of 300 before the collapse would count
    assert metastable_count.first_metastable_plateau(ts, counts)[0] == 300
    # a plateau that lasts to the end is censored at the last save time
    counts[ts >= 60] = 8
    count, t_start, t_end, censored = metastable_count.first_metastable_plateau(ts, counts, tight)
    assert (count, t_end, censored) == (8, ts[-1], True)
    # a tighter notion of a plateau skips the state and takes the next long one
    counts[ts >= 60] = 7
    assert metastable_count.first_metastable_plateau(ts, counts, tight, min_ratio=10.0)[0] == 7
    # never tight: no metastable state
    assert np.isnan(metastable_count.first_metastable_plateau(ts, counts, np.zeros(ts.size, bool))[0])


# -- the experiment, shrunk ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_run():
    e = builtin.EXPERIMENTS["metastable-count"]
    config = load_config(None, ["progress=false"], base={**e.defaults, **e.quick})
    return e, runner.run(config)


@pytest.mark.slow
def test_first_metastable_count_is_the_fastest_unstable_mode(quick_run):
    e, result = quick_run
    c = result.config
    assert tuple(c.d) == (2,) and c.n >= 256 and c.seeds >= 8 and all(2 <= b <= 20 for b in c.beta)
    states = metastable_count.metastable_states(result)
    counts = states["count"][0]  # (β, seeds)
    assert np.isfinite(counts).all(), "every member reaches a metastable plateau"
    medians = np.median(counts, axis=1)
    kstar = np.asarray(fastest_mode(np.asarray(c.beta)))
    assert len(set(kstar.tolist())) == len(c.beta)  # the β are far enough apart to tell the modes apart
    # the linear prediction, member by member: most runs form exactly k*(β) clusters
    np.testing.assert_array_equal(medians, kstar)
    assert np.mean(counts == kstar[:, None]) >= 0.6
    assert np.all(np.abs(counts - kstar[:, None]) <= 1)
    # the plateau comes after the collapse (T₁ ~ log(n)/rate) and ends later
    assert np.all(states["t_start"] > 5) and np.all(states["t_end"] > 1.2 * states["t_start"])
    checks = e.checks(result)
    assert checks and all(ch.passed for ch in checks), checks
    assert sum("k*(β)" in ch.name for ch in checks) == len(c.beta)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_figures_draw_counts_and_lifetimes(quick_run, tmp_path, monkeypatch):
    e, result = quick_run
    from attnflow.experiments.studies.metastability import metastability_figures

    captured = {}
    monkeypatch.setattr(
        metastability_figures, "metastable_counts", lambda betas, counts, **kw: captured.update(counts=counts, **kw)
    )
    figures = e.figures(result)
    assert set(figures) == {"cluster_count_vs_beta", "plateau_lifetime"}
    figures["cluster_count_vs_beta"](None)
    grid, kstar = captured["kstar"]
    assert np.all(np.diff(kstar) >= 0) and kstar[0] == fastest_mode(grid[0]) and kstar[-1] == fastest_mode(grid[-1])
    monkeypatch.undo()
    path = tmp_path / "lifetime.png"
    figures["plateau_lifetime"](path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# -- the checks, judged on made-up statistics ----------------------------------------------------------------


def _kstar(beta: float) -> int:
    """k*(β) = argmax k² I_k(β) from scipy, apart from ``fastest_mode``'s recurrence."""
    k = np.arange(1, 200)
    return int(k[np.argmax(k**2 * special.ive(k, beta))])


def _made_up(counts_of_beta) -> runner.RunResult:
    """A run whose every member sits, from t = 3 to t = 30, in a tight state of ``counts_of_beta(β)`` clusters
    (its normalized energy at Σm²/n²), after a start that is not tight, and is one cluster after t = 30."""
    e = builtin.EXPERIMENTS["metastable-count"]
    config = load_config(None, ["progress=false", "beta=[2,5,9,15,40,80,160]"], base={**e.defaults, **e.quick})
    ts = np.concatenate([[0.0], np.geomspace(0.01, 100.0, 60)])
    shape = (1, len(config.beta), config.seeds, ts.size)
    counts = np.full(shape, float(config.n))
    for j, beta in enumerate(config.beta):
        counts[0, j, :, (ts >= 3) & (ts < 30)] = counts_of_beta(beta)
    counts[..., ts >= 30] = 1.0
    level = np.full(shape, 0.25)
    energy = np.where(ts < 3, 2.0, 1.0) * level
    stats = {"n_clusters": counts, "cluster_level": level, "normalized_energy": energy}
    members = shape[:3]
    return runner.RunResult(config, ts, stats, None, np.zeros(members, np.int64), np.full(members, np.inf), 0.0)


def test_every_check_compares_with_the_theory_and_fails_where_it_is_broken():
    e = builtin.EXPERIMENTS["metastable-count"]
    checks = e.checks(_made_up(_kstar))
    # one count against k*(β) per β in [2, 30], the √β growth over the three β ≥ 30; nothing merely reported
    assert len(checks) == 5 and all(c.passed for c in checks), checks
    assert sum("k*(β)" in c.name for c in checks) == 4 and sum("β^p" in c.name for c in checks) == 1
    # two clusters too many: exactly the four counts against k*(β) fail
    failed = [c.name for c in e.checks(_made_up(lambda b: _kstar(b) + 2)) if c.failed]
    assert len(failed) == 4 and all("k*(β)" in name for name in failed)
    # counts growing like β past β = 30 (k* below): only the √β growth fails
    failed = [c.name for c in e.checks(_made_up(lambda b: _kstar(b) if b <= 30 else round(b / 4))) if c.failed]
    assert len(failed) == 1 and "β^p" in failed[0]
