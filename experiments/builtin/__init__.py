"""The built-in experiments: the papers' figures as configurations, plots and theory checks.

One module per experiment, which registers it in ``registry.EXPERIMENTS`` when imported: adding an
experiment is a new module and its import line below, whose order is the order of ``attnflow list``.
``analysis`` holds what several experiments compute, ``simulate`` the figures of a configuration
of one's own. ``resolve(config.experiment).execute(config)`` runs any configuration as its experiment does.
"""

from __future__ import annotations

from ..registry import EXPERIMENTS, MODEL_KEYS, Check, Experiment, changed_model_keys, get, register
from ..run import plan

# each import registers its experiment
from . import (
    fig3_phase_diagram,
    fig4_circle,
    fig5_random_matrices,
    gaussian_closure,
    highdim_histogram,
    long_context,
    lost_in_middle,
    meanfield_circle,
    meanfield_sphere,
    metastability,
    metastable_count,
    negative_beta,
    noisy_transition,
    orthogonal_ode,
    renyi_centres,
    sphere_movie,
    staircase,
)
from .analysis import statistics_figures
from .fig5_random_matrices import FIG5_PANELS
from .metastable_count import (
    COUNT_CHECK_BETAS,
    PLATEAU_RATIO,
    SQRT_CHECK_BETA,
    TIGHT_TOLERANCE,
    first_metastable_plateau,
    metastable_states,
)
from .simulate import GENERIC

__all__ = [
    "EXPERIMENTS",
    "GENERIC",
    "MODEL_KEYS",
    "Check",
    "Experiment",
    "changed_model_keys",
    "get",
    "register",
    "resolve",
    "needs",
    "statistics_groups",
    "statistics_figures",
    "FIG5_PANELS",
    "first_metastable_plateau",
    "metastable_states",
    "TIGHT_TOLERANCE",
    "PLATEAU_RATIO",
    "COUNT_CHECK_BETAS",
    "SQRT_CHECK_BETA",
]


def resolve(name: str) -> Experiment:
    """The experiment named ``name`` by a configuration's ``experiment`` key (``GENERIC`` for "simulate", a
    configuration of one's own); ``resolve(config.experiment).execute(config)`` runs any configuration."""
    return GENERIC if name == "simulate" else get(name)


def needs(config) -> tuple[str, ...]:
    """The groups of statistics a run of ``config`` computes beyond its ``statistics`` key: those its
    built-in experiment reads (none for a configuration of one's own)."""
    experiment = EXPERIMENTS.get(config.experiment)
    return () if experiment is None else tuple(experiment.needs(config))


def statistics_groups(config) -> tuple[str, ...]:
    """The groups of statistics a run of ``config`` computes (``plan.GROUPS`` order)."""
    return plan.statistics_groups(config, needs(config))
