"""One-pass pair statistics, the clique shortcut of cluster labels, and the ``statistics`` key of runs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments import builtin
from attnflow.experiments.builtin import EXPERIMENTS
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.results import runs
from attnflow.experiments.run import runner
from attnflow.particles import observables as ob


def _configs():
    """Uniform points, tight clusters, and a chain whose threshold graph is connected but not a clique."""
    uniform = af.init.uniform(0, 40, 3, batch=3)
    clustered = af.init.clusters(1, 40, 3, 4, 1e-4, batch=3)
    angles = np.arange(40) * 0.03  # neighbours 0.03 apart: gaps 4.5e-4 ≤ δ, second neighbours 1.8e-3 > δ
    chain = np.stack([np.cos(angles), np.sin(angles), np.zeros(40)], -1)[None]
    return [uniform, clustered, jnp.asarray(chain)]


@pytest.mark.slow
@pytest.mark.parametrize("x", _configs(), ids=["uniform", "clusters", "chain"])
def test_pair_summary_equals_the_separate_observables(x):
    delta = 1e-3
    s = ob.pair_summary(x, delta)
    pairs = ob.pair_statistics(x)
    assert np.allclose(s["mean_inner_product"], pairs["mean"], atol=1e-14)
    assert np.allclose(s["min_inner_product"], pairs["min"], atol=1e-14)
    assert np.allclose(s["max_inner_product"], pairs["max"], atol=1e-14)
    assert np.array_equal(s["clustered_fraction"], ob.clustered_fraction(x, delta))
    assert np.array_equal(s["n_clusters"], ob.n_clusters(x, delta))
    sizes = np.asarray(ob.cluster_sizes(x, delta))
    assert np.allclose(s["cluster_level"], sizes.mean(-1) / x.shape[-2], atol=1e-15)


@pytest.mark.slow
def test_clique_shortcut_is_exact_and_chains_still_propagate():
    x = _configs()
    gaps = [ob.pairwise_gaps(c) <= 1e-3 for c in x]
    assert bool(jnp.all(ob._is_clique_union(gaps[1])))  # four tight clusters: cliques
    assert not bool(jnp.any(ob._is_clique_union(gaps[2])))  # the chain is not
    assert int(ob.n_clusters(x[1], 1e-3)[0]) == 4
    assert int(ob.n_clusters(x[2], 1e-3)[0]) == 1  # one component, found by propagation
    # more than 32 neighbours per row (two signature words) and a graph that is a union of cliques
    # except for one bridge
    theta = np.concatenate([np.full(35, 0.0), np.full(30, 1.0)])
    pts = np.stack([np.cos(theta), np.sin(theta)], -1)
    adj = np.array(ob.pairwise_gaps(jnp.asarray(pts)) <= 1e-3)
    assert bool(ob._is_clique_union(jnp.asarray(adj)))
    adj[0, 40] = adj[40, 0] = True
    assert not bool(ob._is_clique_union(jnp.asarray(adj)))
    assert int(ob._count(ob._components(jnp.asarray(adj)))) == 1


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_pair_summary_of_one_particle_and_vmapped():
    one = ob.pair_summary(jnp.array([[1.0, 0.0]]), 1e-3)
    assert float(one["clustered_fraction"]) == 1.0 and int(one["n_clusters"]) == 1
    x = af.init.uniform(3, 16, 2, batch=5)
    direct = ob.pair_summary(x, 1e-3)
    mapped = jax.vmap(lambda c: ob.pair_summary(c, 1e-3))(x)
    for k in direct:
        assert np.allclose(direct[k], mapped[k], atol=1e-15), k


def _run(*sets, experiment="simulate"):
    base = EXPERIMENTS[experiment].defaults if experiment != "simulate" else None
    config = load_config(
        None, ["n=8", "d=3", "beta=1,4", "seeds=3", "t1=4", "n_save=9", "progress=false", *sets], base=base
    )
    return runner.run(config)


@pytest.mark.slow
def test_statistics_key_selects_groups_and_the_summary_says_null():
    full = _run()
    pairs = _run("statistics=pairs")
    assert set(pairs.stats) == set(runner.GROUPS["pairs"])
    for k in runner.GROUPS["pairs"]:
        assert np.array_equal(pairs.stats[k], full.stats[k]), k
    summary = runs.summarize(pairs)
    assert summary["energy"] == [None] * 9 and summary["n_clusters"] == []
    assert summary["clustered_fraction"] == runs.summarize(full)["clustered_fraction"]
    assert summary["t_clustered"] == runs.summarize(full)["t_clustered"]
    energy_only = _run("statistics=energy")
    assert set(energy_only.stats) == {"energy", "normalized_energy", "log_energy"}
    assert all(v is None for v in runs.summarize(energy_only)["t_clustered"])


@pytest.mark.slow  # runs with -m slow; the default suite keeps its faster neighbours
def test_the_clustered_group_is_the_pairs_fraction_alone_and_still_gives_t_clustered():
    full = _run("statistics=pairs", "seeds=4", "t1=12")
    alone = _run("statistics=clustered", "seeds=4", "t1=12")
    assert set(alone.stats) == {"clustered_fraction"}
    assert np.array_equal(alone.stats["clustered_fraction"], full.stats["clustered_fraction"])
    # "every pair within δ" read from the fraction (exactly 1) agrees with the minimum inner product
    t_full, t_alone = runner.t_clustered(full), runner.t_clustered(alone)
    assert np.isfinite(t_full).any() and not np.isfinite(t_full).all()
    assert np.array_equal(t_full, t_alone, equal_nan=True)
    summary = runs.summarize(alone)
    assert (
        summary["min_inner_product"] == [None] * 9
        and summary["clustered_fraction"] == runs.summarize(full)["clustered_fraction"]
    )


def test_experiments_compute_what_their_figures_read():
    # fig4-circle draws cluster counts: asking for pairs only still computes them
    config = load_config(
        None,
        ["statistics=pairs", "seeds=2", "t1=2", "n_save=5", "progress=false"],
        base=EXPERIMENTS["fig4-circle"].defaults,
    )
    assert builtin.statistics_groups(config) == ("pairs", "clusters", "energy")
    fig3 = load_config(None, [], base=EXPERIMENTS["fig3-phase-diagram"].defaults)
    assert builtin.statistics_groups(fig3) == ("clustered",)
    one_beta = load_config(None, ["beta=2"], base=EXPERIMENTS["fig3-phase-diagram"].defaults)
    assert builtin.statistics_groups(one_beta) == ("clustered", "clusters")


@pytest.mark.slow
def test_dense_key_runs_rk4_on_the_grid_and_is_refused_elsewhere():
    dense = _run("solver=rk4", "dt=0.5", "dense=true", "n_save=41")
    assert np.all(dense.steps == 8)
    plain = _run("solver=rk4", "dt=0.1", "n_save=41")
    # interpolated saves agree with a five times finer run to the method's accuracy
    assert np.max(np.abs(dense.stats["mean_inner_product"] - plain.stats["mean_inner_product"])) < 1e-3
    with pytest.raises(ConfigError, match="rk4"):
        load_config(None, ["dense=true", "solver=euler", "dt=0.1"])
    # the phase diagram's dense default gives way to an adaptive solver without complaint
    load_config(None, ["solver=tsit5"], base=EXPERIMENTS["fig3-phase-diagram"].defaults)
    with pytest.raises(ConfigError, match="noise"):
        load_config(None, ["solver=rk4", "dt=0.1", "dense=true", "noise=0.1"])


def test_unknown_statistics_group_is_refused_with_the_choices():
    with pytest.raises(ConfigError, match="pairs"):
        load_config(None, ["statistics=pairs,histograms"])


def test_a_statistic_has_one_layout_whichever_experiments_register_it():
    # every built-in experiment registered its statistics on import without a clash; a second layout is refused
    from attnflow.experiments import builtin  # noqa: F401  (registers every experiment's statistics)
    from attnflow.experiments.run.runner import STAT_DIMENSIONS

    assert STAT_DIMENSIONS["growth_rate"] == ["d", "beta", "seed", "mode"]  # meanfield-circle's
    assert STAT_DIMENSIONS["band_growth_rate"] == ["d", "beta", "seed", "usa", "token_count", "c"]
    STAT_DIMENSIONS.update(growth_rate=["d", "beta", "seed", "mode"])  # the same again: nothing changes
    with pytest.raises(ValueError, match=r"statistic 'growth_rate' is registered with dimensions"):
        STAT_DIMENSIONS.update(growth_rate=["d", "beta", "seed", "usa", "token_count", "c"])
    assert STAT_DIMENSIONS["growth_rate"] == ["d", "beta", "seed", "mode"]
