"""Made-up results of the tests: run results holding statistics whose values a formula gives, to test what draws
or reads them without running a simulation."""

from __future__ import annotations

import numpy as np

from attnflow.experiments import builtin
from attnflow.experiments.config import load_config
from attnflow.experiments.run.runner import RunResult
from attnflow.solvers import harmonics


def sphere_density_run(degree: int, n_save: int, t1: float = 3.0) -> tuple[RunResult, np.ndarray]:
    """A meanfield-sphere result whose density gathers around the north pole: the von Mises–Fisher density of
    concentration κ = t on the experiment's grid of ``degree``, at ``n_save`` times in [0, t1]; and that density
    (times, colatitudes, longitudes)."""
    e = builtin.EXPERIMENTS["meanfield-sphere"]
    config = load_config(None, [f"degree={degree}", f"n_save={n_save}", f"t1={t1}"], base={**e.defaults, **e.quick})
    grid = harmonics.sphere_grid(degree)
    ts = np.linspace(0.0, t1, n_save)
    kappa = ts[:, None, None]
    rho = np.exp(kappa * np.cos(grid.theta)[None, :, None]) * np.ones(grid.phi.size)
    rho /= 4 * np.pi * np.where(kappa > 0, np.sinh(np.maximum(kappa, 1e-12)) / np.maximum(kappa, 1e-12), 1.0)
    one = np.zeros((1, 1, 1))
    result = RunResult(
        config=config,
        ts=ts,
        stats={"sphere_density": rho[None, None, None]},
        xs=None,
        steps=one.astype(np.int64),
        t_event=np.full(one.shape, np.inf),
        wall_time_s=0.0,
        extra={"colatitude": (grid.theta, ["colatitude"]), "longitude": (grid.phi, ["longitude"])},
    )
    return result, rho
