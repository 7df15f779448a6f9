"""The built-in experiments: the founding paper's figures and the core's own, as configurations, plots and
theory checks; then the studies' (``experiments/studies/``), one folder per paper reproduced.

One module per experiment, which registers it in ``registry.EXPERIMENTS`` when imported: adding a core
experiment is a new module and its import line below, whose order is the order of ``attnflow list``; adding a
study is its folder and its line in ``studies.STUDIES``. ``analysis`` holds what several experiments compute,
``simulate`` the figures of a configuration of one's own. ``resolve(config.experiment).execute(config)`` runs
any configuration as its experiment does.
"""

from __future__ import annotations

from ..registry import EXPERIMENTS, Check, Experiment, changed_model_keys, get, register
from ..run import plan

# each import registers its experiment, in the order of `attnflow list`: the core's, then the studies'
# isort: off
from . import fig3_phase_diagram
from . import fig5_random_matrices
from . import fig4_circle
from . import highdim_histogram
from . import orthogonal_ode
from . import sphere_movie
from . import meanfield_circle
from . import meanfield_sphere
from .. import studies

studies.register_all()
# isort: on
import importlib  # noqa: E402


def _in_list_order() -> None:
    """``EXPERIMENTS`` in the order of the imports above and of ``studies.STUDIES``, whichever module was imported
    first (a study's, by a script or a test, registers its experiments before the core's); experiments registered
    from elsewhere (a plugin, a test) keep their place after them."""
    core = (fig3_phase_diagram, fig5_random_matrices, fig4_circle, highdim_histogram, orthogonal_ode, sphere_movie)
    modules = [*core, meanfield_circle, meanfield_sphere, *map(importlib.import_module, studies.experiment_modules())]
    ordered = {m.EXPERIMENT.name: m.EXPERIMENT for m in modules}
    ordered |= {name: e for name, e in EXPERIMENTS.items() if name not in ordered}
    EXPERIMENTS.clear()
    EXPERIMENTS.update(ordered)


_in_list_order()
from ..analysis import statistics_figures
from .fig5_random_matrices import FIG5_PANELS
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
