"""Checks a run or a sweep passes before anything is computed or written.

A configuration is validated key by key when it is made (``config.validate``); what it asks of the
experiment that runs it is checked here, once, before the first step and before a sweep writes its
manifest (:func:`check`): that the run reads every key the configuration sets (:func:`check_keys_read`),
the experiment's own refusals, the arrays of ``init_file`` and ``weights_file`` (read without
unpickling, with the shapes the run needs), the memory of the run (``memory.check_fits`` for the
particle ensemble, the experiment's own estimate otherwise), and its steps and save times against
``max_steps`` (:func:`check_steps`). Every problem is a ConfigError in one line. Every command and
``Experiment.execute`` go through :func:`check`, so no experiment skips it.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Callable, Iterable

import numpy as np

from ...solvers import problem
from ...solvers.dense import grid_steps
from ..config import FIXED_STEP_SOLVERS, GRID_ONLY_SOLVERS, KEYS, Config, ConfigError
from ..config.toml import toml_literal
from . import memory

__all__ = ["AMBIENT_KEYS", "check", "check_files", "check_keys_read", "check_step_count", "check_steps", "keys_read"]

AMBIENT_KEYS = frozenset(("experiment", "progress"))
"""Keys every run reads: which experiment it is, and whether it shows progress."""


def _acts(key, config: Config) -> bool:
    """Whether ``key`` acts in ``config`` as far as its ``applies`` condition goes."""
    if key.applies is None:
        return True
    other, values = key.applies
    return config[other] > 0 if values == ">0" else config[other] in values


def keys_read(config: Config, experiment=None) -> frozenset[str]:
    """The keys a run of ``config`` reads: those its experiment declares (``Experiment.keys``, for an
    experiment with a runner of its own), else those of the particle ensemble, every key but the
    experiments' own (``Key.experiment_key``); either only where the key acts (``Key.applies``)."""
    declared = getattr(experiment, "keys", None)
    if declared is not None:
        return frozenset(k for k in declared if k not in KEYS or _acts(KEYS[k], config)) | AMBIENT_KEYS
    return frozenset(name for name, key in KEYS.items() if not key.experiment_key and _acts(key, config))


def check_keys_read(config: Config, experiment=None) -> None:
    """Refuse a configuration that sets a key its run would ignore: set away from the experiment's own values
    (``Experiment.own_values``; the key's default where the experiment sets none), but not read
    (:func:`keys_read`)."""
    reads = keys_read(config, experiment)
    own = experiment.own_values() if experiment is not None else {}
    custom = getattr(experiment, "keys", None) is not None
    for name, key in KEYS.items():
        value = config[name]
        # what the experiment itself sets a key to (its default where it sets nothing) is not the user's
        if name in reads or value in own.get(name, (key.default,)):
            continue
        shown = f"{name} = {toml_literal(value)}"
        if name in own:  # the experiment's own value, not the key's default, is what its run would have
            values = " or ".join(sorted(toml_literal(v) for v in own[name]))
            leave = f"leave {name} unset (the experiment's own {name} = {values})"
        else:
            leave = f"leave {name} at its default {toml_literal(key.default)}"
        declared = not custom or name in experiment.keys
        if key.applies is not None and not _acts(key, config) and declared:
            other, values = key.applies
            where = f"{other} > 0" if values == ">0" else f"{other} = " + " or ".join(repr(v) for v in values)
            raise ConfigError(
                f"{shown} acts only with {where} (got {other} = {toml_literal(config[other])}): set {other}, or {leave}"
            )
        if custom:
            listed = ", ".join(sorted(reads - AMBIENT_KEYS))
            raise ConfigError(
                f"experiment {experiment.name!r} does not read {name} (got {shown}): its run reads {listed}; {leave}"
            )
        raise ConfigError(f"{shown} is read by another experiment, not by a particle run ({name}: {key.doc}); {leave}")


def check_step_count(steps: float, max_steps: int, what: str) -> None:
    """Refuse an experiment's own loop of ``steps`` steps per member (``what``: how they come about, e.g. "t1 / dt
    = 1e+12 Heun steps") beyond ``max_steps``: a run that would not end in any reasonable time."""
    if not steps <= max_steps:  # NaN or inf too
        raise ConfigError(
            f"{what} per member, more than max_steps = {max_steps}: lower t1, raise the step, or raise max_steps"
        )


def check_steps(config: Config) -> None:
    """Refuse a run with more save times than ``max_steps``, or whose fixed steps (of ``dt`` over
    [0, t1]) vanish against t1 or number more than ``max_steps`` per member (``problem.check_steps``).

    The save times are not formed here (n_save may be absurd): the steps of a run stepping on a
    uniform grid (ab4, rk4 with dense) are exact; the other fixed-step solvers shorten steps to land
    on each save time, so the count is a lower bound, and ``simulate`` checks the exact one.
    """
    times = len(config.save_times) or config.n_save
    if times > config.max_steps:
        what = f"save_times holds {times} times" if config.save_times else f"n_save = {times} save times"
        raise ConfigError(f"{what}, more than max_steps = {config.max_steps}: save fewer times, or raise max_steps")
    solver, dt, t1 = config.solver, config.dt, config.t1
    if solver not in FIXED_STEP_SOLVERS or not dt > 0:
        return
    if solver in GRID_ONLY_SOLVERS or config.dense:
        steps, at_least = grid_steps(0.0, t1, dt), False
    else:
        # each of the times + 1 intervals between knots [0, save times, t1] rounds its steps up, with the
        # 1e-9 that forgives rounding; each interval of positive length takes at least one step
        ratio = t1 / dt
        steps = max(math.ceil(ratio - 1e-9 * (times + 1)) if math.isfinite(ratio) else math.inf, times - 1)
        at_least = steps < math.inf
    label = f"solver {solver!r}" + (" (dense)" if config.dense and solver not in GRID_ONLY_SOLVERS else "")
    try:
        problem.check_steps(label, 0.0, t1, dt, steps, config.max_steps, config.dtype, at_least=at_least)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def _init_file(config: Config) -> None:
    from ...particles.init import from_array

    path = config.init_file
    label = f"init_file {path!r}"
    if not path.endswith(".npy"):
        raise ConfigError(f"{label} must be a .npy array written by numpy.save")
    if not os.path.isfile(path):
        raise ConfigError(f"{label} does not exist" if not os.path.exists(path) else f"{label} is not a file")
    try:  # memory-mapped: the shape is checked before any data is read
        array = np.load(path, allow_pickle=False, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:  # pickled or object arrays are refused, never loaded
        pickled = "pickle" in str(err) or "Python objects" in str(err)
        why = "it holds pickled Python objects, which are never loaded" if pickled else str(err)
        raise ConfigError(f"{label} is not a plain numeric .npy array ({why})") from None
    if not isinstance(array, np.ndarray):
        array.close()
        raise ConfigError(f"{label} holds an .npz archive; save one array of shape (n, d) with numpy.save")
    n, seeds, shape = config.n, config.seeds, array.shape
    if array.ndim in (2, 3):
        for d in config.d:
            if shape[-2:] != (n, d):
                raise ConfigError(f"{label} holds shape {shape}, but the run has n = {n}, d = {d}")
        if array.ndim == 3 and shape[0] != seeds:
            raise ConfigError(f"{label} holds {shape[0]} configurations but seeds = {seeds}")
    try:
        from_array(np.array(array), dtype=config.dtype)  # dtype, shape, finite and nonzero rows
    except ValueError as err:
        raise ConfigError(f"{label}: {err}") from None


def _weights_file(config: Config) -> None:
    from ...particles.fields import SA
    from ...particles.layerwise import LayerWise

    path = config.weights_file
    try:
        layered = LayerWise.from_npz(SA(1.0), path, config.layer_tau or 1.0)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise ConfigError(f"weights_file: {err}") from None
    for stack in (layered.Qs, layered.Ks, layered.Vs):
        for d in config.d:
            if stack is not None and stack.shape[-1] != d:
                raise ConfigError(
                    f"weights_file {path!r} holds matrices acting on d = {stack.shape[-1]}, but the run has d = {d}"
                )


def check_files(config: Config) -> None:
    """Read the arrays ``config`` points to (``init_file``, ``weights_file``) as the run will, without
    unpickling, and check their types and shapes against the run."""
    if config.init == "file":
        _init_file(config)
    if config.weights_file:
        _weights_file(config)


def check(
    configs: Config | Iterable[Config], *, experiment=None, needs: Callable[[Config], Iterable[str]] | None = None
) -> None:
    """Everything a run or a sweep must pass before it starts; ``configs``: one Config, or a sweep's grid points.

    ``experiment`` (an ``Experiment``; None for a particle run of one's own): ``experiment.check`` (the keys
    its run reads, β's sign, its own refusals). Then, for a particle ensemble, ``memory.check_fits_all``,
    :func:`check_steps` and :func:`check_files` for each distinct use of a file; for an experiment with a
    runner of its own, its memory estimate (``Experiment.memory``) and, where it integrates with the
    configuration's solver, dt and t1, :func:`check_steps`.

    ``needs``: the groups of statistics a particle configuration computes beyond its ``statistics`` key
    (``plan.statistics_groups``), which its memory counts; by default what ``experiment`` reads."""
    configs = [configs] if isinstance(configs, Config) else list(configs)
    for config in configs:
        if experiment is None:
            check_keys_read(config)
        else:
            experiment.check(config)
    if needs is None and experiment is not None:
        needs = experiment.needs
    if experiment is not None and experiment.run is not None:
        for config in configs:
            memory.check_parts(experiment.memory(config), f"experiment {experiment.name!r}")
            if {"solver", "dt", "t1", "n_save"} <= keys_read(config, experiment):
                check_steps(config)
        return
    memory.check_fits_all(configs, needs=needs)
    for config in configs:
        check_steps(config)
    seen = set()
    for config in configs:
        files = (
            config.init,
            config.init_file,
            config.weights_file,
            config.n,
            config.d,
            config.seeds,
            config.dtype,
            config.layer_tau,
        )
        if files not in seen and (config.init == "file" or config.weights_file):
            seen.add(files)
            check_files(config)
