"""Per-member statistics are written where a figure or the user needs them (``save_members``); otherwise their
means over the seeds, from which the figures are drawn again."""

from __future__ import annotations

import numpy as np
import pytest

from attnflow.experiments import builtin
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.results import runs, store
from attnflow.experiments.run import plan, runner

SMALL = dict(d=[2], n=6, beta="0.5:6:3", seeds=4, n_save=11, t1=6.0)


def fig3(**overrides):
    """A small phase diagram's result: its clustered fractions (d, β, seed, time) as a run gives them (multiples of
    1/30, the pairs of 6 tokens, growing in time), float32 as the experiment computes them."""
    experiment = builtin.resolve("fig3-phase-diagram")
    config = load_config({**experiment.defaults, **experiment.quick, **SMALL, **overrides})
    rng = np.random.default_rng(0)
    fraction = np.sort(rng.integers(0, 31, size=(1, 3, 4, 11)), axis=-1).astype(np.float32) / 30
    result = runner.RunResult(
        config=config,
        ts=runner.save_times(config),
        stats={"clustered_fraction": fraction},
        xs=None,
        steps=np.full((1, 3, 4), 8),
        t_event=np.full((1, 3, 4), np.inf),
        wall_time_s=0.1,
    )
    return config, experiment, result


@pytest.fixture(scope="module")
def members_and_means(tmp_path_factory):
    """One small phase diagram written twice: every member's statistics (``save_members = "yes"``) and, as a
    large run writes by default, their means over the seeds."""
    tmp = tmp_path_factory.mktemp("members")
    config, experiment, result = fig3(save_members="yes")
    runs.save(tmp / "members", result, experiment, plot=False)
    auto = load_config({**config.to_dict(), "save_members": "auto"})
    result.config = auto
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan, "MEMBERS_LIMIT", 0)  # as a run of more than 64 MiB of statistics
        runs.save(tmp / "means", result, experiment, plot=True)
    return result, tmp / "members", tmp / "means"


def test_a_large_phase_diagram_writes_means_over_the_seeds(members_and_means):
    result, members, means = members_and_means
    full = store.read_run(members)
    reduced = store.read_run(means)
    assert full.dims["clustered_fraction"] == ["d", "beta", "seed", "time"]
    assert reduced.dims["clustered_fraction"] == ["d", "beta", "time"]
    stats = result.stats["clustered_fraction"]  # (1, 3, 4, 11): 4 seeds
    assert full.arrays["clustered_fraction"].shape == stats.shape == (1, 3, 4, 11)
    np.testing.assert_array_equal(full.arrays["clustered_fraction"], stats)
    # the mean over the 4 seeds of each (d, β, time), to float32 rounding of the run's dtype
    np.testing.assert_allclose(reduced.arrays["clustered_fraction"], stats.mean(axis=2), rtol=1e-6, atol=0)
    # what stays per member: steps and t_clustered, (d, β, seed)
    assert reduced.arrays["steps"].shape == (1, 3, 4)
    assert reduced.summary["clustered_fraction"] == full.summary["clustered_fraction"]


def test_a_run_of_means_is_drawn_again(members_and_means):
    _, _, means = members_and_means
    loaded, experiment = runs.load_result(means)
    assert loaded.stats["clustered_fraction"].shape == (1, 3, 1, 11)  # the mean as the one member
    written = {p.name: p.stat().st_size for p in means.glob("*.png")}
    assert list(written) == ["phase_diagram.png"]
    from attnflow.experiments.results import figures

    figures.write(means, experiment.figures(loaded))  # what `attnflow plot RUN` draws
    assert (means / "phase_diagram.png").stat().st_size > 0


def test_small_runs_and_figures_that_read_members_keep_them(members_and_means):
    result, _, _ = members_and_means
    experiment = builtin.resolve("fig3-phase-diagram")
    auto = result.config
    assert runs.members_written(result, experiment)  # auto: 528 bytes of statistics, under MEMBERS_LIMIT
    one_beta = load_config({**auto.to_dict(), "beta": [2.0]})
    assert experiment.figures_read_members(one_beta) and not experiment.figures_read_members(auto)
    assert plan.keep_members(auto, 10 * plan.MEMBERS_LIMIT, figures_read_members=True)
    assert not plan.keep_members(auto, plan.MEMBERS_LIMIT + 1, figures_read_members=False)
    yes = load_config({**auto.to_dict(), "save_members": "yes"})
    assert plan.keep_members(yes, 10 * plan.MEMBERS_LIMIT, figures_read_members=False)


def test_no_members_is_refused_where_the_figures_read_them():
    experiment = builtin.resolve("fig4-circle")
    config = load_config({**experiment.defaults, **experiment.quick, "save_members": "no"})
    with pytest.raises(ConfigError, match=r"fig4-circle.*each member's statistics.*save_members = \"no\""):
        experiment.check(config)
