"""``orthogonal-ode``: from an orthogonal start every pair follows the ODE (6.9) ([GLPR] Thm 6.8)."""

from __future__ import annotations

import numpy as np

from ..analysis import gamma_of_t, plots, tag
from ..registry import Check, Experiment, Figures, register
from ..run.runner import RunResult


def figures(result: RunResult) -> dict:
    """Every pair's inner product over time against the ODE's solution, one figure per β."""
    c = result.config
    out: Figures = {}
    if not result.has_states:
        return out
    xs = result.states(c.d[0])
    for j, beta in enumerate(c.beta):
        gram = np.einsum("tid,tjd->tij", xs[j, 0], xs[j, 0])
        out[f"inner_products_beta{tag(beta)}"] = lambda p, gram=gram, beta=beta: plots.inner_product_vs_ode(
            result.ts, gram, gamma_of_t(result, beta), n=c.n, beta=beta, path=p
        )
    return out


def checks(result: RunResult) -> list[Check]:
    """The largest and smallest inner products stay on the ODE's solution, for each β."""
    c = result.config
    out = []
    for j, beta in enumerate(c.beta):
        gamma = gamma_of_t(result, beta)
        dev = max(
            float(np.max(np.abs(result.stats["max_inner_product"][0, j] - gamma))),
            float(np.max(np.abs(result.stats["min_inner_product"][0, j] - gamma))),
        )
        out.append(Check(f"Thm 6.8: pairs follow (6.9) at β = {beta:g}", "max error ≤ 1e-6", f"{dev:.1e}", dev <= 1e-6))
    return out


EXPERIMENT = register(
    Experiment(
        "orthogonal-ode",
        "orthogonal start (d = n): every pair follows the equiangular ODE (6.9)",
        "[GLPR] Thm 6.8",
        dict(
            experiment="orthogonal-ode",
            model="sa",
            n=32,
            d=32,
            beta=[1.0, 4.0],
            seeds=1,
            init="orthogonal",
            t1=10.0,
            n_save=101,
            solver="dopri8",
            rtol=1e-10,
            atol=1e-12,
            save_states="yes",
        ),
        dict(n=8, d=8, n_save=41),
        figures,
        checks,
    )
)
