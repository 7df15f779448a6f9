"""``fig5-random-matrices``: phase diagrams of the four ensembles of random Q, K, V at d = 128 ([GLPR] Fig. 5).

One run per ensemble (the ``weights`` grid); the figure and the check read the four together.
"""

from __future__ import annotations

import numpy as np

from ..analysis import mean_over_seeds, plots
from ..registry import Check, Experiment, register

FIG5_PANELS = {
    "ginibre": "(a) Q, K, V Ginibre",
    "wigner-psd": "(b) QᵀK Wigner, V ⪰ 0",
    "ginibre-v-qk": "(c) Q, K Ginibre, V = QᵀK",
    "wigner-v-qk": "(d) QᵀK Wigner, V = QᵀK",
}


def grid_figures(results: dict) -> dict:
    """The four phase diagrams side by side, from the runs by ensemble."""
    first = next(iter(results.values()))
    c = first.config
    betas = np.asarray(c.beta, dtype=float)
    panels = {FIG5_PANELS.get(w, w): mean_over_seeds(r, "clustered_fraction")[0] for w, r in results.items()}
    return {
        "phase_diagrams": lambda p: plots.phase_diagram_grid(
            first.ts, betas, panels, ncols=2, n=c.n, delta=c.delta, title=f"random weights, d = {c.d[0]}", path=p
        )
    }


def grid_checks(results: dict) -> list[Check]:
    """Panel (d): the energy of the QᵀK kernel never decreases."""
    out = []
    r = results.get("wigner-v-qk")
    if r is not None and "log_energy" in r.stats:
        e = r.stats["log_energy"]
        worst = float(np.min(np.diff(e, axis=-1)))
        # float32 rounds log E itself to ~1e-6 (steps of 8 ulp seen at |log E| ≈ 15): 64 ulp of its largest value
        tol = (
            1e-9
            if r.config.dtype == "float64"
            else 64 * float(np.finfo(np.float32).eps) * max(1.0, float(np.max(np.abs(e))))
        )
        # QᵀK symmetric and V = QᵀK: SA is a gradient flow of E_β with kernel QᵀK ([GLPR] §3.2)
        out.append(
            Check(
                "(d) V = QᵀK symmetric: energy of the QᵀK kernel non-decreasing",
                f"min increment of log E ≥ −{'1e-9' if tol == 1e-9 else f'{tol:.1e}'} ({r.config.dtype})",
                f"{worst:.1e}",
                worst >= -tol,
            )
        )
    return out


EXPERIMENT = register(
    Experiment(
        "fig5-random-matrices",
        "phase diagrams with random Q, K, V: the four ensembles of Fig. 5 (d = 128)",
        "[GLPR] Fig. 5",
        # rk4 dt = 0.25 on a uniform grid, float32, a member stopped once one cluster (docs/numerics.md,
        # "Fig. 5's method"); --quick keeps float64, where the gradient-flow check holds to 1e-9
        dict(
            experiment="fig5-random-matrices",
            model="sa",
            n=32,
            d=128,
            beta="0.1:9:90",
            seeds=1024,
            init="uniform",
            t1=30.0,
            n_save=201,
            delta=1e-3,
            solver="rk4",
            dt=0.25,
            dense=True,
            dtype="float32",
            stop_when_clustered=True,
            statistics=["clustered"],
            save_states="no",
        ),
        dict(d=16, beta="0.5:6:8", seeds=4, n_save=41, dtype="float64"),
        lambda result: {},
        lambda result: [],
        grid={"weights": list(FIG5_PANELS)},
        grid_figures=grid_figures,
        grid_checks=grid_checks,
        # the figure reads the clustered fraction; the check of panel (d), the log-energy
        needs=lambda config: ("clustered", "energy") if config.weights == "wigner-v-qk" else ("clustered",),
        runtime="≈ 22 min",
        # the figure reads the clustered fraction's means over the seeds; the check of panel (d) each member's energy
        figures_read_members=lambda config: config.weights == "wigner-v-qk",
    )
)
