"""What a run of a configuration computes and keeps, and how its members are cut into compiled calls.

Shared by the runner, which follows the plan, and by ``memory``, which sizes it before the run:
the groups of statistics (``GROUPS``: the configuration's ``statistics`` key plus whatever its
experiment's figures read, given by the caller), whether the states and the attention matrices are
kept, the members per compiled call, and which grid points of a sweep run as one ensemble.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from ...solvers import machine
from ..config import Config
from . import field_config as fields

__all__ = [
    "GROUPS",
    "statistics_groups",
    "keep_states",
    "keep_attention",
    "chunk_size",
    "call_budget",
    "DEVICE_SHARE",
    "ensemble_key",
    "STATES_LIMIT",
    "ATTENTION_MATRIX_LIMIT",
    "CPU_CHUNK_BYTES",
    "CPU_STATE_BYTES",
]

GROUPS = {
    "pairs": ("mean_inner_product", "min_inner_product", "max_inner_product", "clustered_fraction"),
    # the fraction alone: one count over the pairs, ≈ 3–4× cheaper than the pair summary
    # (n = 32, d = 2), for runs that read nothing else (the phase diagram)
    "clustered": ("clustered_fraction",),
    "clusters": ("n_clusters", "cluster_level"),
    "energy": ("energy", "normalized_energy", "log_energy"),
    # plus "attention_matrix" itself when it is small (``keep_attention``)
    "attention": ("spectral_gap", "stationary_distribution", "attention_entropy", "effective_tokens"),
}


def statistics_groups(config: Config, needs: Iterable[str] = ()) -> tuple[str, ...]:
    """The groups a run computes: its ``statistics`` key and ``needs`` (what its experiment's figures and
    checks read), in the order of ``GROUPS``."""
    wanted = set(config.statistics) | set(needs)
    return tuple(g for g in GROUPS if g in wanted)


DEVICE_SHARE = 0.5
"""The share of an accelerator's free memory one compiled call may take (``call_budget``): its arrays and XLA's
temporaries beyond the estimate, and the next call's inputs while the host reads this one's results."""


def call_budget(config: Config) -> float:
    """Bytes one compiled call may take: ``memory_gb``; on an accelerator at least ``DEVICE_SHARE`` of its free
    memory (``machine.device_memory``), so that a row of a figure is one call where it fits (on a 139 GB GPU
    the 92 160 members of a Fig. 5 row instead of 22 calls of 4 190)."""
    budget = config.memory_gb * 2**30
    memory = machine.device_memory()
    if memory is not None:
        budget = max(budget, DEVICE_SHARE * memory[1])
    return budget


CPU_CHUNK_BYTES = 8 * 2**20  # n×n attention bytes per compiled call on CPU backends (measured in benchmarks/)
CPU_STATE_BYTES = 2 * 2**20  # bytes of one state array (members × n × d) per compiled call on CPU backends


def chunk_size(config: Config, d: int, members: int, n_times: int, keep: bool, groups: Iterable[str]) -> int:
    """Members per compiled call that fit the memory budget (state, RK stages, attention, saves).

    ``keep``: whether the states are saved (``keep_states``); ``groups``: the statistics computed.
    """
    n = config.n
    r = n if fields.span_reduction(config, d) else d  # the dimension the members are simulated in
    itemsize = 4 if config.dtype == "float32" else 8
    per_member = itemsize * (16 * n * r + 6 * n * n + n_times * (8 + config.histogram_bins))
    if "attention" in groups:  # the stationary law per save, and A(t), its powers and spectrum
        per_member += itemsize * (n_times * (n + 4) + 4 * n * n)
    if config.weights != "identity":
        layers = max(1, int(math.ceil(config.t1 / config.layer_tau))) if config.layer_tau > 0 else 1
        per_member += itemsize * 3 * d * d * layers
    if keep:
        per_member += itemsize * n_times * n * d
    chunk = min(members, call_budget(config) // per_member)
    if not machine.accelerated():
        # a chunk whose n×n attention arrays stay in cache: on CPUs, 2048 members of n = 32 in
        # float32 run 2.4× faster per member than one call for all 184 320 of the phase diagram
        chunk = min(chunk, CPU_CHUNK_BYTES // (itemsize * n * n))
        # and states that stay in cache: a step carries and rewrites about seven of them (the step's
        # ends, their velocities, the stages), so at n = d = 32 512 members per call run 25% faster
        # than 2048 (whose 8 MiB states stream from memory at every step)
        chunk = min(chunk, CPU_STATE_BYTES // (itemsize * n * r))
    chunk = max(1, int(chunk))
    # equal chunks: the last one is padded to the common size, so balance them
    return -(-members // -(-members // chunk))


STATES_LIMIT = 20_000_000
"""Numbers up to which ``save_states = "auto"`` keeps a run's states (160 MB in float64)."""


def keep_states(config: Config, members_per_d: int, n_times: int) -> bool:
    """Whether a run saves its states: ``save_states`` yes or no, or "auto" when they are at most
    ``STATES_LIMIT`` numbers, counted as they are kept: every d's members padded to the largest d
    (len(d) × members × save times × n × max d)."""
    if config.save_states == "yes":
        return True
    if config.save_states == "no":
        return False
    return len(config.d) * members_per_d * n_times * config.n * max(config.d) <= STATES_LIMIT


MEMBERS_LIMIT = 64 * 2**20
"""Bytes of per-member statistics up to which ``save_members = "auto"`` writes every member's."""


def keep_members(config: Config, nbytes: int, figures_read_members: bool) -> bool:
    """Whether a run writes each member's statistics (``save_members`` yes or no, or "auto": when they take at
    most ``MEMBERS_LIMIT`` bytes or the experiment's figures read them), else their means over the seeds."""
    if config.save_members != "auto":
        return config.save_members == "yes"
    return figures_read_members or nbytes <= MEMBERS_LIMIT


ATTENTION_MATRIX_LIMIT = 4_000_000
"""Numbers (members × save times × n²) up to which a run with the "attention" statistics also keeps
A(t) itself (32 MiB in float64); beyond, only its summaries (gap, stationary law, entropies)."""


def keep_attention(config: Config, members_per_d: int, n_times: int) -> bool:
    """Whether a run with the "attention" statistics keeps A(t) itself (``ATTENTION_MATRIX_LIMIT``)."""
    return len(config.d) * members_per_d * n_times * config.n**2 <= ATTENTION_MATRIX_LIMIT


def ensemble_key(config: Config) -> tuple:
    """What grid points must share to run as one ensemble: every key but β, which decides the compiled
    shape and the initial conditions."""
    return tuple(sorted((k, repr(v)) for k, v in config.to_dict().items() if k != "beta"))
