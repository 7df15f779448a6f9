"""The memory a run needs, estimated before it starts, and the refusal of runs the machine cannot hold.

A run holds, at its peak:

* the working set of one compiled call: for each of the ``chunk`` members it integrates at once
  (``plan.chunk_size``), the state and the solver's stages (``STATE_COPIES`` state-sized
  arrays), the Jacobian of implicit solvers ((n·d)² twice), the attention (three n×n arrays on the
  dense path, three tiles and O(n·d) on the blocked one), the weights of every layer and the
  feed-forward term, and the values it saves (statistics per save time, and the states
  themselves when they are kept);
* the initial conditions of the ``seeds`` members;
* the results gathered on the host: the statistics of every member at every save time, twice
  while the chunks are concatenated, and the trajectories of every d when ``save_states`` keeps
  them, once: each chunk's states are written in place into one array padded to the largest d
  (len(d) × members × save times × n × max d, ``runner.RunResult.xs``).

:func:`estimate_bytes` adds these up; :func:`check_fits` refuses, in one line, a configuration whose
estimate exceeds the machine's memory (:func:`machine_bytes`), naming the remedy: the blocked
attention, ``save_states = 'no'``, fewer seeds or save times, float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from ...particles.models import MODELS
from ...solvers import machine
from ...solvers.machine import format_bytes, machine_bytes
from ...solvers.methods import METHODS
from ..config import Config, ConfigError
from .field_config import in_angles, span_reduction
from .plan import chunk_size, ensemble_key, keep_attention, keep_states, statistics_groups

__all__ = [
    "STATE_COPIES",
    "estimate_bytes",
    "machine_bytes",
    "check_fits",
    "check_fits_all",
    "check_parts",
    "format_bytes",
]

STATE_COPIES = {m.name: m.state_copies for m in METHODS.values()}
"""State-sized arrays one step holds per member: the stages, the start and end points, the error
estimate and the dense-output coefficients (``solvers.methods.Method.state_copies``)."""

STAT_VALUES = {"pairs": 4, "clustered": 1, "clusters": 2, "energy": 3, "attention": 3}
"""Numbers saved per member and save time by each group of statistics (``plan.GROUPS``)."""

ATTENTION_COPIES = 3
"""n×n arrays of the dense attention (logits, their exponentials, one temporary); tiles on the blocked path."""


def _attention_words(config: Config, n: int, d: int, block, r: int | None = None) -> tuple[int, bool]:
    """Numbers held by one member's attention, and whether that is the dense n×n evaluation
    (``r``: the dimension the members move in, n where they are reduced to the span of the tokens)."""
    from ...particles import blocked

    heads = config.heads
    if MODELS[config.model].dense_only or heads > 1 or in_angles(config, d):
        return ATTENTION_COPIES * heads * n * n, True
    tile = blocked.resolve_block(block, n, config.dtype)
    if tile is None:
        return ATTENTION_COPIES * n * n, True
    return ATTENTION_COPIES * tile * tile + 4 * n * (d if r is None else r), False


def _parts(config: Config, block="auto", needs: Iterable[str] = ()) -> tuple[dict[str, int], bool]:
    """The estimate in bytes by what holds them (see the module docstring), and whether the
    attention of the largest compiled call is the dense n×n evaluation."""
    itemsize = 4 if config.dtype == "float32" else 8
    n, seeds = config.n, config.seeds
    times = len(config.save_times) or config.n_save  # never materialized: n_save may be absurd
    members = len(config.beta) * seeds
    keep = keep_states(config, members, times)
    groups = statistics_groups(config, needs)
    saved = sum(STAT_VALUES[g] for g in groups) + config.histogram_bins
    if "attention" in groups:  # the stationary law (n values) and, when it is kept, A(t) itself
        saved += n + (n * n if keep_attention(config, members, times) else 0)
    working: dict[str, int] = {}
    dense, statistics = False, 0
    # every d's states in one array padded to the largest d, filled in place chunk by chunk
    trajectories = itemsize * len(config.d) * members * times * n * max(config.d) if keep else 0
    for d in config.d:
        nd = n * d
        # members reduced to the span of their tokens move n × n coordinates (runner.span_initial_conditions);
        # frames (seeds, d, n) exist where the init is drawn in R^d, the field or the saved states need them
        reduction = span_reduction(config, d)
        r = n if reduction else d
        frames = reduction is not None and (config.init != "uniform" or reduction == "frame" or keep)
        attention, dense_d = _attention_words(config, n, d, block, r)
        weights = 0
        if config.weights != "identity" or config.weights_file:
            layers = max(1, math.ceil(config.t1 / config.layer_tau)) if config.layer_tau > 0 else 1
            weights = 3 * d * d * layers
        per_member = {
            "states": STATE_COPIES.get(config.solver, 12) * n * r + times * (saved + (nd if keep else 0)),
            "jacobian": 2 * (n * r) ** 2 if METHODS[config.solver].implicit else 0,
            "attention": attention,
            "weights": weights + 2 * config.ff_width * (n + d),
        }
        chunk = chunk_size(config, d, members, times, keep, groups)
        call = {k: itemsize * chunk * v for k, v in per_member.items()}
        call["initial"] = itemsize * seeds * (n * r + (d * r if frames else 0))
        if sum(call.values()) > sum(working.values()):
            working, dense = call, dense_d
        # gathered on the host for every d, twice while the chunks are concatenated
        statistics += 2 * itemsize * members * times * saved
    return {**working, "statistics": statistics, "trajectories": trajectories}, dense


def estimate_bytes(config: Config, *, block="auto", needs: Iterable[str] = ()) -> int:
    """Peak bytes of a run of ``config``: one compiled call's working set plus what the run keeps.

    ``block`` is the attention fields' option (``"auto"``: dense while the n×n logits are small,
    blocked beyond; None: always dense; an int: blocked tiles of that side). ``needs``: groups of
    statistics the run computes beyond its ``statistics`` key (``plan.statistics_groups``).
    """
    return sum(_parts(config, block, needs)[0].values())


DEVICE_PARTS = ("states", "jacobian", "attention", "weights")
"""The parts of a run's memory that one compiled call holds on the device it runs on."""

_WHAT = {
    "states": "states and solver stages",
    "jacobian": "the implicit solver's Jacobians",
    "weights": "the weights and the feed-forward term",
    "attention": "the attention",
    "initial": "the initial conditions",
    "statistics": "the statistics of every member",
    "trajectories": "the saved trajectories",
}


def check_fits(config: Config, *, block="auto", needs: Iterable[str] = ()) -> None:
    """Raise ConfigError, in one line, when ``estimate_bytes(config)`` exceeds :func:`machine_bytes`.

    The message gives the estimate, its largest part, the machine's memory and what would shrink
    the run. Nothing is refused when the machine's memory cannot be read. ``needs``: as for
    :func:`estimate_bytes`.
    """
    parts, dense = _parts(config, block, needs)
    device = machine.device_memory()
    if device is not None:
        # on an accelerator one call's arrays are the device's (chunks sized to fit it: ``plan.call_budget``),
        # and the host keeps the initial conditions, the statistics and the trajectories
        on_device = sum(parts[k] for k in DEVICE_PARTS)
        if on_device > device[0]:
            largest = max(DEVICE_PARTS, key=lambda part: parts[part])
            raise ConfigError(
                f"one compiled call of this run needs about {format_bytes(on_device)} of the GPU's memory (mostly "
                f"{_WHAT[largest]}), more than its {format_bytes(device[0])}; try fewer particles (n) or dimensions "
                "(d), or the blocked evaluation (block = 'auto')"
            )
        parts = {k: (0 if k in DEVICE_PARTS else v) for k, v in parts.items()}
    have = machine_bytes()
    if have is None:
        return
    need = sum(parts.values())
    if need <= have:
        return
    largest = max(parts, key=lambda part: parts[part])
    remedies = []
    if largest == "attention" and dense:
        if MODELS[config.model].dense_only or config.heads > 1 or any(in_angles(config, d) for d in config.d):
            why = (
                f"model = {config.model!r}"
                if MODELS[config.model].dense_only
                else f"heads = {config.heads}"
                if config.heads > 1
                else "the angle form (circle)"
            )
            remedies.append(f"fewer particles (n; {why} evaluates the full n×n attention)")
        else:
            remedies.append("the blocked evaluation (block = 'auto', memory O(n·d))")
    if largest == "jacobian":
        remedies.append("an explicit solver such as tsit5")
    if largest in ("states", "initial"):
        remedies.append("fewer particles (n) or dimensions (d)")
    if largest == "weights":
        remedies += (["a larger layer_tau (fewer layers of weights)"] if config.layer_tau > 0 else []) + (
            ["a smaller ff_width"] if config.ff_width else []
        )
    if 4 * parts["trajectories"] > need:
        remedies.append("save_states = 'no'")
    if 4 * (parts["trajectories"] + parts["statistics"]) > need:
        remedies.append("fewer save times (n_save)" + (" or histogram_bins" if config.histogram_bins else ""))
    remedies.append("a smaller ensemble (seeds, β values)")
    if config.dtype == "float64":
        remedies.append("dtype = 'float32'")
    advice = remedies[0] if len(remedies) == 1 else f"{', '.join(remedies[:-1])} or {remedies[-1]}"
    raise ConfigError(
        f"this run needs about {format_bytes(need)} of memory (mostly {_WHAT[largest]}, "
        f"{format_bytes(parts[largest])}), more than this machine's {format_bytes(have)}; try {advice}"
    )


def check_fits_all(configs: Iterable[Config], *, needs: Callable[[Config], Iterable[str]] | None = None) -> None:
    """:func:`check_fits` for the runs of a sweep: grid points that differ only in β run as one
    ensemble (``plan.ensemble_key``), so each group is checked with its β values merged.

    ``needs`` gives, for a configuration, the groups of statistics it computes beyond its
    ``statistics`` key (none when None)."""
    groups: dict[tuple, list[Config]] = {}
    for config in configs:
        groups.setdefault(ensemble_key(config), []).append(config)
    for members in groups.values():
        merged = members[0] if len(members) == 1 else members[0].replace(beta=[b for c in members for b in c.beta])
        check_fits(merged, needs=() if needs is None else needs(merged))


def check_parts(parts: dict[str, int], who: str) -> None:
    """Raise ConfigError, in one line, when the parts of a run's memory add up to more than
    :func:`machine_bytes`: an experiment's own estimate (``Experiment.memory``), each part named
    ``"what holds it [the keys that size it]"`` and given in bytes. The message names the largest part
    and its keys, the remedy. Nothing is refused when the machine's memory cannot be read."""
    have = machine_bytes()
    need = sum(parts.values())
    if have is None or need <= have:
        return
    largest = max(parts, key=lambda part: parts[part])
    what, _, keys = largest.partition(" [")
    remedy = f": make {keys.rstrip(']')} smaller" if keys else ""
    raise ConfigError(
        f"this run of {who} needs about {format_bytes(need)} of memory (mostly {what}, "
        f"{format_bytes(parts[largest])}), more than this machine's {format_bytes(have)}{remedy}"
    )
