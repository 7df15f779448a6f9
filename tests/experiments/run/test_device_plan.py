"""Compiled calls sized for the device they run on: a CPU's cache, or an accelerator's free memory."""

from __future__ import annotations

import pytest

from attnflow.experiments.builtin import fig3_phase_diagram, fig5_random_matrices
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import memory, plan
from attnflow.solvers import machine

GB = 10**9


def _fig5(**sets):
    return load_config(sets, base=fig5_random_matrices.EXPERIMENT.defaults)


def _gpu(monkeypatch, total: float, free: float) -> None:
    monkeypatch.setattr(machine, "accelerated", lambda: True)
    monkeypatch.setattr(machine, "device_memory", lambda: (int(total), int(free)))


def _row(config, d):
    members = len(config.beta) * config.seeds
    ts = config.n_save
    keep = plan.keep_states(config, members, ts)
    return members, plan.chunk_size(config, d, members, ts, keep, plan.statistics_groups(config, ("pairs",)))


def test_on_a_cpu_calls_stay_in_cache():
    """Today's CPU plan: Fig. 5's rows in calls of at most the cache constants' size."""
    config = _fig5()
    members, chunk = _row(config, config.d[0])
    itemsize = 4 if config.dtype == "float32" else 8
    assert chunk <= plan.CPU_CHUNK_BYTES // (itemsize * config.n**2)
    assert chunk < members


def test_on_a_large_gpu_a_row_is_one_call(monkeypatch):
    """On 139 GB of free device memory a Fig. 5 row (90 β × 1024 seeds) is one compiled call, not 22 calls of the
    2 GB default budget."""
    config = _fig5()
    members, chunk_cpu_budget = _row(config, config.d[0])
    assert chunk_cpu_budget < members  # the cache constants cut it on a CPU
    _gpu(monkeypatch, 143 * GB, 139 * GB)
    members, chunk = _row(config, config.d[0])
    assert chunk == members == 90 * 1024
    # and the memory check takes the device's memory for the call, the host's for what it keeps
    memory.check_fits(config, needs=("pairs",))


def test_on_a_small_gpu_calls_take_half_its_free_memory(monkeypatch):
    """8 or 16 GB free: as few equal calls as hold DEVICE_SHARE of the free memory each; ``memory_gb`` above that
    share raises the budget (a floor, as on a CPU)."""
    config = _fig5()
    per_member = _bytes_per_member(config)
    for free in (8 * GB, 16 * GB):
        _gpu(monkeypatch, 2 * free, free)
        members, chunk = _row(config, config.d[0])
        largest = int(plan.DEVICE_SHARE * free // per_member)
        assert chunk <= largest < members
        assert -(-members // chunk) == -(-members // largest)  # no more calls than the budget needs
    bigger = config.replace(memory_gb=12.0)
    assert _row(bigger, bigger.d[0])[1] > _row(config, config.d[0])[1]


def _bytes_per_member(config):
    """One member's bytes as ``plan.chunk_size`` counts them: 1 GiB over the members of a 1 GiB call on a GPU with no
    free memory (the budget is then ``memory_gb``)."""
    with pytest.MonkeyPatch.context() as m:
        _gpu(m, 1 * GB, 0)
        members = plan.chunk_size(config.replace(memory_gb=1.0), config.d[0], 10**9, config.n_save, False, ("pairs",))
    return 2**30 / members


def test_a_call_that_cannot_fit_the_gpu_is_refused_naming_it(monkeypatch):
    """One member of 20 000 tokens in float64 evaluated densely (3.2 GB of logits) on a 1 GB GPU."""
    config = load_config({"n": 20000, "d": [3], "seeds": 1, "dtype": "float64"})
    _gpu(monkeypatch, 1 * GB, 1 * GB)
    with pytest.raises(ConfigError, match="GPU's memory"):
        memory.check_fits(config, block=None)


def test_fig3_rows_fit_one_call_each_on_a_large_gpu(monkeypatch):
    config = load_config({}, base=fig3_phase_diagram.EXPERIMENT.defaults)
    _gpu(monkeypatch, 143 * GB, 139 * GB)
    for d in config.d:
        members, chunk = _row(config, d)
        assert chunk == members
