"""Where the modules that moved now live: importing an old path fails with one message naming the new one.

attnflow's layout puts each study in its own folder (``experiments/studies/``) and gives every module a base name
of its own. A script importing a module by its former path (``attnflow.particles.moderate``) gets a
``ModuleNotFoundError`` that names the module's path now, rather than a bare "No module named".

The names of ``af.`` are what every user needs (``__init__.pyi``); a name of one theorem's closed form or of one
study lives under its namespace, and ``af.NAME`` of one that was at the top before fails with an AttributeError
naming where it is now (``MOVED_NAMES``).
"""

from __future__ import annotations

import importlib.abc
import sys

__all__ = ["MOVED", "MOVED_NAMES", "install", "name_error"]

MOVED = {
    "experiments.builtin.analysis": "experiments.analysis",
    "experiments.config.experiment_keys": "experiments.config.keys",
    "particles.ensembles": "particles.fields",
    "experiments.builtin.staircase": "experiments.studies.staircase.staircase",
    "experiments.builtin.metastability": "experiments.studies.metastability.metastability",
    "experiments.builtin.metastable_count": "experiments.studies.metastability.metastable_count",
    "experiments.plots.metastability": "experiments.studies.metastability.metastability_figures",
    "experiments.builtin.negative_beta": "experiments.studies.negative_beta.negative_beta",
    "experiments.builtin.renyi_centres": "experiments.studies.renyi_centres.renyi_centres",
    "particles.renyi": "experiments.studies.renyi_centres.renyi_centres_theory",
    "experiments.plots.centres": "experiments.studies.renyi_centres.renyi_centres_figures",
    "experiments.builtin.long_context": "experiments.studies.long_context.long_context",
    "particles.long_context": "experiments.studies.long_context.long_context_theory",
    "experiments.builtin.lost_in_middle": "experiments.studies.lost_in_middle.lost_in_middle",
    "particles.lost_in_middle": "experiments.studies.lost_in_middle.lost_in_middle_theory",
    "experiments.plots.retrieval": "experiments.studies.lost_in_middle.lost_in_middle_figures",
    "experiments.builtin.gaussian_closure": "experiments.studies.gaussian_closure.gaussian_closure",
    "particles.gaussian_closure": "experiments.studies.gaussian_closure.gaussian_closure_theory",
    "solvers.closure": "experiments.studies.gaussian_closure.gaussian_closure_solver",
    "experiments.plots.closure": "experiments.studies.gaussian_closure.gaussian_closure_figures",
    "experiments.builtin.noisy_transition": "experiments.studies.noisy_transition.noisy_transition",
    "experiments.builtin.bifurcation": "experiments.studies.noisy_transition.bifurcation",
    "particles.noisy_transition": "experiments.studies.noisy_transition.noisy_transition_theory",
    "experiments.plots.transition": "experiments.studies.noisy_transition.noisy_transition_figures",
    "experiments.builtin.equilibria": "experiments.studies.equilibria.equilibria",
    "particles.extremizers": "experiments.studies.equilibria.equilibria_theory",
    "experiments.plots.equilibria": "experiments.studies.equilibria.equilibria_figures",
    "experiments.builtin.hardmax_limit": "experiments.studies.hardmax_limit.hardmax_limit",
    "particles.frank_wolfe": "experiments.studies.hardmax_limit.hardmax_limit_theory",
    "experiments.plots.hardmax": "experiments.studies.hardmax_limit.hardmax_limit_figures",
    "experiments.builtin.selectivity": "experiments.studies.selectivity.selectivity",
    "particles.selectivity": "experiments.studies.selectivity.selectivity_theory",
    "experiments.plots.selectivity": "experiments.studies.selectivity.selectivity_figures",
    "experiments.builtin.moderate_interaction": "experiments.studies.moderate_interaction.moderate_interaction",
    "particles.moderate": "experiments.studies.moderate_interaction.moderate_interaction_theory",
    "experiments.plots.moderate": "experiments.studies.moderate_interaction.moderate_interaction_figures",
    "experiments.commands.probe": "experiments.commands.probe_command",
    "experiments.plots.probe": "experiments.plots.probe_figures",
    "experiments.run.fields": "experiments.run.field_config",
    "experiments.plots.curves": "experiments.plots.sweep_curves",
    "experiments.plots.fitting": "experiments.plots.fit_figures",
    "solvers.meanfield": "solvers.circle_meanfield",
    "solvers.meanfield_sphere": "solvers.sphere_meanfield",
}
"""Former module path → the path now, both relative to the package."""


MOVED_NAMES = {
    "ENSEMBLES": "particles",
    "span": "particles",
    "clustered_fraction_of_angles": "particles",
    "second_eigenvalue": "particles",
    "hitting_time": "particles",
    "gamma_curve": "particles",
    "wendel_probability": "particles",
    "simplex_spectrum": "particles.polytopes",
    "simplex_threshold": "particles.polytopes",
    "branch_threshold": "solvers.stationary",
    "pitchfork_coefficient": "solvers.stationary",
    "SpecialPoint": "solvers.continuation",
}
"""Former names of ``af.`` → the namespace (a subpackage or a module, relative to the package) that holds them now."""


def name_error(package: str, name: str) -> AttributeError:
    """The AttributeError of ``package``'s ``name``: where it lives now if it moved (``MOVED_NAMES``), else the
    plain one."""
    where = MOVED_NAMES.get(name)
    if where is None:
        return AttributeError(f"module {package!r} has no attribute {name!r}")
    home = f"{package}.{where}"
    how = f" (from {home} import {name})" if "." in where else ""
    return AttributeError(f"{package}.{name} moved under its namespace: it is {home}.{name}{how}", name=name)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Refuses a former module path of ``package``, naming where the module lives now."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(self, fullname, path=None, target=None):
        prefix = self.package + "."
        if fullname.startswith(prefix) and fullname[len(prefix) :] in MOVED:
            now = f"{prefix}{MOVED[fullname[len(prefix) :]]}"
            raise ModuleNotFoundError(f"{fullname} moved to {now}: import it from there", name=now)
        return None


def install(package: str) -> None:
    """Put the finder of ``package``'s moved modules at the end of ``sys.meta_path`` (once): it is asked only
    after every finder has failed to find a module."""
    if not any(isinstance(f, MovedModuleFinder) and f.package == package for f in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder(package))
