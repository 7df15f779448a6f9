"""``negative-beta``: synchronization on the circle for either sign of β (arXiv 2507.22857).

USA with Q = K = V = I on the circle (d = 2, points of the plane: the angle form assumes β ≥ 0) from
uniform random starts, each run until its tokens meet (``stop_when_clustered``) or t1. A start
synchronizes when its final tokens are one cluster at δ; three tokens that do not sit at the
equilateral triangle (every ⟨x_i, x_j⟩ = −1/2), the equilibrium whose linear rate
μ(β) = e^{−β/2}(1/2 + 3β/4) (``particles/synchronization.py``) turns negative below β = −2/3.
"""

from __future__ import annotations

import numpy as np

from ....particles.synchronization import NO_SYNC_BETA, SYNC_BETA, triangle_rate
from ...analysis import LazyModule, dimensions
from ...registry import Check, Experiment, register
from ...run.runner import RunResult

draw = LazyModule(f"{__package__}.negative_beta_figures")  # this study's figures, imported on first use

TRIANGLE_TOL = 1e-4
"""How far from −1/2 the inner products of a start stuck at the equilateral triangle may be at t1."""


def outcomes(result: RunResult) -> tuple[np.ndarray, np.ndarray]:
    """Per β (the run's first d), the share of starts that synchronized and of those at the triangle
    (for n = 3; zero otherwise): from each member's final clustered fraction and inner products."""
    synced = result.stats["clustered_fraction"][0, :, :, -1] >= 1.0
    if result.config.n == 3:
        lo = result.stats["min_inner_product"][0, :, :, -1]
        hi = result.stats["max_inner_product"][0, :, :, -1]
        triangle = (np.abs(lo + 0.5) <= TRIANGLE_TOL) & (np.abs(hi + 0.5) <= TRIANGLE_TOL)
    else:
        triangle = np.zeros_like(synced)
    return synced.mean(axis=1), triangle.mean(axis=1)


def figures(result: RunResult) -> dict:
    """The share of synchronized starts against β, with the triangle's linear rate (n = 3)."""
    c = result.config
    betas = np.asarray(c.beta, dtype=float)
    synced, triangle = outcomes(result)
    grid = np.linspace(betas.min(), betas.max(), 300)
    rate = (grid, triangle_rate(grid, c.model)) if c.n == 3 else None
    return {
        "synchronization": lambda p: draw.synchronization_vs_beta(
            betas,
            synced,
            triangle,
            sync_beta=SYNC_BETA,
            no_sync_beta=NO_SYNC_BETA,
            rate=rate,
            n=c.n,
            members=c.seeds,
            stuck_label="at the equilateral triangle" if c.n == 3 else "not synchronized",
            path=p,
        )
    }


def checks(result: RunResult) -> list[Check]:
    """Every start synchronizes for β ≥ −0.16; for n = 3 also wherever the triangle repels (β > −2/3),
    and below −2/3 some starts stay at the triangle, and every start that does not synchronize is there."""
    c = result.config
    betas = np.asarray(c.beta, dtype=float)
    synced, triangle = outcomes(result)
    out = []
    proved = betas >= SYNC_BETA
    if proved.any():
        worst = float(synced[proved].min())
        out.append(
            Check(
                "[PRY] every start synchronizes for β ≥ −0.16", "share 1 at every such β", f"{worst:.3f}", worst == 1.0
            )
        )
    if c.n == 3:
        repels = (betas > NO_SYNC_BETA + 0.05) & ~proved  # μ(β) > 0, away from the threshold's slow escape
        if repels.any():
            worst = float(synced[repels].min())
            out.append(
                Check(
                    "n = 3: every start synchronizes where the triangle repels (−2/3 < β < −0.16)",
                    "share 1 at every such β",
                    f"{worst:.3f}",
                    worst == 1.0,
                )
            )
        attracts = betas < NO_SYNC_BETA - 0.1
        if attracts.any():
            least = float(triangle[attracts].min())
            elsewhere = float(np.max(1.0 - synced[attracts] - triangle[attracts]))
            out.append(
                Check(
                    "[PRY] β < −2/3: no global synchronization (n = 3 stays at the equilateral triangle)",
                    "share at the triangle > 0 at every such β, none elsewhere",
                    f"min share {least:.3f}, elsewhere {elsewhere:.3f}",
                    least > 0 and elsewhere == 0,
                )
            )
    return out


EXPERIMENT = register(
    Experiment(
        "negative-beta",
        "synchronization on the circle for β of either sign: every start for β ≥ −0.16, not below −2/3",
        "arXiv 2507.22857",
        dict(
            experiment="negative-beta",
            model="usa",
            n=3,
            d=[2],
            beta="-2:0.5:26",
            seeds=256,
            init="uniform",
            t1=300.0,
            n_save=61,
            save_spacing="log",
            solver="tsit5",
            rtol=1e-8,
            atol=1e-10,
            delta=1e-6,
            stop_when_clustered=True,
            statistics=["pairs"],
            save_states="no",
        ),
        dict(beta=[-2.0, -0.5, -0.1, 0.5], seeds=64),
        figures,
        checks,
        needs=lambda config: ("pairs",),
        negative_beta=True,
        requires=dimensions(2, why="the synchronization thresholds and the equilateral triangle on the circle"),
        runtime="5 s",
    )
)
