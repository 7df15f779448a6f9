"""The shelf of studies: one folder per paper reproduced, each on the core (particles, solvers, experiments).

A study's folder holds its experiments (one module each, named after the experiment, which calls
``registry.register``), its theory (``<study>_theory.py``), its figures (``<study>_figures.py``), the
configuration keys and array labels only it uses (``<study>_keys.py``: ``KEYS`` and ``LABELS``, registered with
the core's as soon as the configuration package is imported), and the list of its experiment modules in its
``__init__.py`` (``EXPERIMENTS``). A study imports the core, never
another study; the core reaches the studies only through this module. Adding a study is its folder and its
line in :data:`STUDIES` (docs/howto/new-experiment.md).
"""

from __future__ import annotations

import importlib
import importlib.util

__all__ = ["STUDIES", "experiment_modules", "register_all", "declared_keys", "declared_labels"]

STUDIES = (
    "staircase",
    "metastability",
    "negative_beta",
    "renyi_centres",
    "long_context",
    "lost_in_middle",
    "gaussian_closure",
    "noisy_transition",
    "equilibria",
    "hardmax_limit",
    "selectivity",
    "moderate_interaction",
    "common_noise",
    "spectral_selection",
    "rope",
)
"""The studies, by folder name, in the order ``attnflow list`` shows their experiments (after the core's)."""


def experiment_modules() -> list[str]:
    """The modules that register the studies' experiments (full names), in :data:`STUDIES` order."""
    out = []
    for study in STUDIES:
        package = importlib.import_module(f"{__name__}.{study}")
        out += [f"{package.__name__}.{module}" for module in package.EXPERIMENTS]
    return out


def register_all() -> None:
    """Import every study's experiment modules, which register their experiments (``registry.EXPERIMENTS``)."""
    for module in experiment_modules():
        importlib.import_module(module)


def _declarations(study: str):
    """The study's ``<study>_keys`` module (its keys and labels), None when it declares none.

    The configuration package is imported first: it registers every study's keys as it is imported, so a
    study's keys module, which needs the configuration's types, is never imported half-way through its own
    import (the labels, asked before any configuration was read, would otherwise start that cycle)."""
    importlib.import_module(__name__.rsplit(".", 1)[0] + ".config")
    name = f"{__name__}.{study}.{study}_keys"
    return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None


def declared_keys() -> list:
    """Every study's configuration keys (``config.types.Key``), in :data:`STUDIES` order: what ``config.keys``
    registers after the core's. The modules that declare them import only the configuration's types."""
    return [key for study in STUDIES if (found := _declarations(study)) is not None for key in found.KEYS]


def declared_labels() -> dict:
    """Every study's array labels, name → ``results.labels.Label``; two studies never label one name twice."""
    out: dict = {}
    for study in STUDIES:
        found = _declarations(study)
        for name, label in ({} if found is None else found.LABELS).items():
            if out.setdefault(name, label) != label:
                raise ImportError(f"studies label {name!r} twice, differently: {out[name]} and {label} ({study})")
    return out
