"""The built-in experiments: the papers' figures as configurations, plots and theory checks.

One module per experiment, which registers it in ``registry.EXPERIMENTS`` when imported: adding an
experiment is a new module and its import line below, whose order is the order of ``attnflow list``.
``analysis`` holds what several experiments compute, ``simulate`` the figures of a configuration
of one's own. ``resolve(config.experiment).execute(config)`` runs any configuration as its experiment does.
"""

from __future__ import annotations

from ..registry import EXPERIMENTS, Check, Experiment, changed_model_keys, get, register
from ..run import plan

# each import registers its experiment, in the order of `attnflow list`
# isort: off
from . import fig3_phase_diagram
from . import fig5_random_matrices
from . import fig4_circle
from . import highdim_histogram
from . import orthogonal_ode
from . import sphere_movie
from . import staircase
from . import metastability
from . import metastable_count
from . import meanfield_circle
from . import meanfield_sphere
from . import negative_beta
from . import renyi_centres
from . import long_context
from . import lost_in_middle
from . import gaussian_closure
from . import noisy_transition
from . import equilibria
from . import bifurcation
from . import hardmax_limit
from . import selectivity
from . import moderate_interaction

# isort: on
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
