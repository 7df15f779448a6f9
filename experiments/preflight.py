"""Checks a run or a sweep passes before anything is computed or written.

A configuration is validated key by key when it is made (``config.validate``); what it points to
is checked here, once, before the first step and before a sweep writes its manifest: the arrays
of ``init_file`` and ``weights_file`` (read without unpickling, with the shapes the run needs) and
the memory of the run (``memory.check_fits``). Every problem is a ConfigError in one line.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable

import numpy as np

from . import memory
from .config import Config, ConfigError

__all__ = ["check", "check_files"]


def _init_file(config: Config) -> None:
    from ..particles.init import from_array

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
    from ..particles.fields import SA
    from ..particles.layerwise import LayerWise

    path = config.weights_file
    try:
        layered = LayerWise.from_npz(SA(1.0), path, config.layer_tau or 1.0)
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise ConfigError(f"weights_file: {err}") from None
    for stack in (layered.Qs, layered.Ks, layered.Vs):
        for d in config.d:
            if stack is not None and stack.shape[-1] != d:
                raise ConfigError(f"weights_file {path!r} holds matrices acting on d = {stack.shape[-1]}, "
                                  f"but the run has d = {d}")


def check_files(config: Config) -> None:
    """Read the arrays ``config`` points to (``init_file``, ``weights_file``) as the run will, without
    unpickling, and check their types and shapes against the run."""
    if config.init == "file":
        _init_file(config)
    if config.weights_file:
        _weights_file(config)


def check(configs: Config | Iterable[Config]) -> None:
    """Everything a run (one Config) or a sweep (its grid points' Configs) must pass before it starts:
    ``memory.check_fits_all``, then :func:`check_files` for each distinct use of a file."""
    configs = [configs] if isinstance(configs, Config) else list(configs)
    memory.check_fits_all(configs)
    seen = set()
    for config in configs:
        files = (config.init, config.init_file, config.weights_file, config.n, config.d, config.seeds,
                 config.dtype, config.layer_tau)
        if files not in seen and (config.init == "file" or config.weights_file):
            seen.add(files)
            check_files(config)
