"""moderate-interaction (β = c·n): the three phases read from observables of known form, and the refusals."""

import math

import numpy as np
import pytest

from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.studies.moderate_interaction import moderate_interaction as mi
from attnflow.experiments.studies.moderate_interaction.moderate_interaction_theory import collapse_moment, collapse_time


def synthetic(ts):
    """λ_min of the Laplace limit, a band growing like e^{2·0.5·(t − 1)} from 0.01 after t = 1 until it saturates
    at 1, and 6 clusters from t = 9 that become 5 at t = 20 and 3 at t = 40."""
    lam = collapse_moment(ts)
    power = np.minimum(0.01 * np.exp(np.maximum(ts - 1.0, 0.0)), 1.0)
    count = np.where(ts < 9, 1, np.where(ts < 20, 6, np.where(ts < 40, 5, 3)))
    return dict(min_eigenvalue=lam, band_power=power, cluster_count=count)


def test_phases_of_known_observables():
    """The collapse at the closed form's level (to the log-linear interpolation's error on a 0.05 grid), the rate
    0.5 of a pure exponential and of the linear theory with one mode at 0.5 (1e-9), the power's half-way time
    log(50)/1 + 1, six clusters, the first merge at 20 and half of them left at 40."""
    ts = np.arange(0.0, 60.0, 0.05)
    out = mi.phases(ts, synthetic(ts), 3, np.array([0.5]), 100)
    assert out["t_collapse"] == pytest.approx(collapse_time(1.0), abs=2e-3)
    assert out["band_growth_rate"] == pytest.approx(0.5, rel=1e-9)
    assert out["band_growth_theory"] == pytest.approx(0.5, rel=1e-9)
    assert out["band_growth_error"] < 1e-9
    assert out["t_clusters"] == pytest.approx(1.0 + math.log(50.0), abs=0.05)
    assert out["clusters"] == 6
    assert out["t_first_merge"] == pytest.approx(20.0, abs=0.05)
    assert out["t_half"] == pytest.approx(40.0, abs=0.05)


def test_on_the_circle_there_is_no_collapse_and_the_growth_starts_at_zero():
    ts = np.arange(0.0, 60.0, 0.05)
    out = mi.phases(ts, synthetic(ts), 2, np.array([0.5]), 100)
    assert math.isnan(out["t_collapse"])
    # the linear theory e^{2·0.5 t}/100 reaches 1/2 at t = log 50
    assert out["t_linear"] == pytest.approx(math.log(50.0), rel=1e-9)
    # the fit starts at t = 0, where the power is flat until t = 1: slower than 0.5 on that window
    assert out["band_growth_rate"] < 0.5


@pytest.mark.parametrize("dims", ["d=[4]", "d=[2,5]"])
def test_only_the_circle_and_s2_are_accepted(dims):
    config = load_config(dict(mi.EXPERIMENT.defaults), [dims])
    with pytest.raises(ConfigError, match="d must be 2 or 3"):
        mi.requires(config)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("token_counts=[]", "token_counts must be"),
        ("collapse_eigenvalue=1.5", "collapse_eigenvalue"),
        ("interaction_c=[0]", "interaction_c"),
    ],
)
def test_the_keys_refuse_values_without_a_regime(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(dict(mi.EXPERIMENT.defaults), [override])


def test_save_grid_resolves_the_growth_and_reaches_t1():
    """LINEAR_SAVES + 1 equal steps up to twice the expected formation time, then LOG_SAVES geometric ones to t1."""
    grid = mi.save_grid(1000, 0.01, 400.0)
    assert grid[0] == 0.0 and grid[-1] == pytest.approx(400.0)
    assert len(grid) == mi.LINEAR_SAVES + mi.LOG_SAVES + 1
    assert np.all(np.diff(grid) > 0)
    assert grid[mi.LINEAR_SAVES] == pytest.approx(mi.linear_end(1000, 0.01))
