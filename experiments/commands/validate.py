"""``attnflow validate``: the simulator against the theory of docs/model.md, as a table.

Each check simulates a case whose answer the theory gives (an exact solution, a monotone
quantity, a probability, a scaling law, a plateau level) and compares. ``--quick`` runs the
shrunk versions (under two minutes on two cores); the full set uses larger ensembles.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from typing import Any

import jax.numpy as jnp
import numpy as np

from ... import particles
from ...particles import equiangular_ode as eq
from ...solvers import simulate
from .. import builtin
from ..config import load_config
from ..registry import Check

TIGHT: dict[str, Any] = dict(solver="dopri8", rtol=1e-11, atol=1e-13)


def check_tanh(quick: bool) -> list[Check]:
    """n = 2, β = 0: ⟨x_1, x_2⟩(t) = tanh(t + artanh ρ0)."""
    ts = np.linspace(0.0, 6.0, 61)
    worst = 0.0
    for rho0 in (-0.6, 0.0, 0.45):
        x0 = particles.init.equiangular(0, 2, 3, rho0)
        xs = simulate(particles.SA(0.0), x0, 6.0, ts=ts, **TIGHT).xs
        assert xs is not None, "simulate saves the states when no save function is given"
        g = np.asarray(jnp.sum(xs[:, 0] * xs[:, 1], axis=-1))
        worst = max(worst, float(np.max(np.abs(g - np.tanh(ts + np.arctanh(rho0))))))
    return [Check("n = 2, β = 0: ⟨x1,x2⟩ = tanh(t + artanh ρ0)", "max error ≤ 1e-8", f"{worst:.1e}", worst <= 1e-8)]


def check_equiangular(quick: bool) -> list[Check]:
    """Thm 6.8 for USA (the orthogonal-ode experiment covers SA)."""
    n, beta = (6, 1.5) if quick else (16, 2.0)
    ts = np.linspace(0.0, 3.0, 31)
    sol = simulate(particles.USA(beta), particles.init.orthogonal(1, n, n), 3.0, ts=ts, **TIGHT)
    gram = np.asarray(jnp.einsum("tid,tjd->tij", sol.xs, sol.xs))[:, ~np.eye(n, dtype=bool)]
    gamma = np.asarray(eq.equiangular(beta, n, ts, model="usa"))
    err = float(np.max(np.abs(gram - gamma[:, None])))
    return [
        Check(
            f"Thm 6.8, USA, orthogonal start, n = {n}, β = {beta:g}: pairs follow (6.10)",
            "max error ≤ 1e-6",
            f"{err:.1e}",
            err <= 1e-6,
        )
    ]


def check_energy(quick: bool) -> list[Check]:
    """E_β non-decreasing along SA/USA with V = I, non-increasing with V = −I."""
    beta, n, d = 2.0, (16 if quick else 64), 3
    x0 = particles.init.uniform(5, n, d)
    ts = np.linspace(0.0, 10.0, 101)
    out = []
    for name, field, sign in (
        ("SA, V = I", particles.SA(beta), 1),
        ("USA, V = I", particles.USA(beta), 1),
        ("SA, V = −I", particles.SA(beta, V=-np.eye(d)), -1),
    ):
        sol = simulate(field, x0, 10.0, ts=ts, save=_energy_at(beta), **TIGHT)
        worst = float(np.min(sign * np.diff(np.asarray(sol.stats))))
        word = "non-decreasing" if sign > 0 else "non-increasing"
        out.append(Check(f"energy E_β {word} along {name}", "worst step ≥ −1e-12", f"{worst:.1e}", worst >= -1e-12))
    return out


def _energy_at(beta):
    return lambda t, x: particles.energy(x, beta)


def _in_open_hemisphere(x: np.ndarray) -> np.ndarray:
    """(samples, n, d) → whether the n points of each sample lie in an open hemisphere.

    They do unless the origin is in their convex hull, and (Carathéodory) it is iff it is a
    convex combination of at most d + 1 of them: for every subset of 2 … d + 1 points, solve
    for the weights (least squares) and accept exact, non-negative solutions.
    """
    samples, n, d = x.shape
    inside = np.zeros(samples, dtype=bool)
    for k in range(2, min(n, d + 1) + 1):
        for subset in itertools.combinations(range(n), k):
            pts = x[:, subset, :]  # (s, k, d)
            a = np.concatenate([np.swapaxes(pts, 1, 2), np.ones((samples, 1, k))], axis=1)  # (s, d+1, k)
            rhs = np.zeros((samples, d + 1, 1))
            rhs[:, -1] = 1.0
            lam = (np.linalg.pinv(a) @ rhs)[..., 0]  # (s, k)
            residual = np.linalg.norm((a @ lam[..., None])[..., 0] - rhs[..., 0], axis=1)
            inside |= (residual < 1e-9) & np.all(lam >= -1e-12, axis=1)
    return ~inside


def check_wendel(quick: bool) -> list[Check]:
    """Thm 6.7: P(n uniform points lie in a hemisphere) = 2^{−(n−1)} Σ_{k<d} C(n−1, k)."""
    samples = 20_000 if quick else 200_000
    out = []
    rng = np.random.default_rng(0)
    for n, d in ((5, 2), (6, 3), (7, 3)):
        x = rng.normal(size=(samples, n, d))
        x /= np.linalg.norm(x, axis=-1, keepdims=True)
        mc = float(np.mean(_in_open_hemisphere(x)))
        p = eq.wendel_probability(n, d)
        sigma = math.sqrt(p * (1 - p) / samples)
        out.append(
            Check(
                f"Thm 6.7 (Wendel), n = {n}, d = {d}: P(in a hemisphere)",
                f"{p:.4f} ± {4 * sigma:.4f}",
                f"{mc:.4f}",
                abs(mc - p) <= 4 * sigma,
            )
        )
    return out


def _experiment_checks(name: str):
    def run(quick: bool) -> list[Check]:
        experiment = builtin.EXPERIMENTS[name]
        base = dict(experiment.defaults)
        if quick:
            base.update(experiment.quick)
        config = load_config(None, ["progress=false"], base=base)
        return experiment.checks(experiment.execute(config))

    run.__doc__ = f"The checks of the {name} experiment."
    return run


CHECKS = [
    ("tanh", check_tanh),
    ("equiangular USA", check_equiangular),
    ("orthogonal-ode", _experiment_checks("orthogonal-ode")),
    ("energy", check_energy),
    ("wendel", check_wendel),
    ("highdim-histogram", _experiment_checks("highdim-histogram")),
    ("fig4-circle", _experiment_checks("fig4-circle")),
    ("staircase", _experiment_checks("staircase")),
    ("fig3-phase-diagram", _experiment_checks("fig3-phase-diagram")),
]


def table(checks: list[Check]) -> str:
    """A plain-text table: check, expected, measured, pass."""
    rows = [("check", "expected", "measured", "pass")] + [
        (c.name, c.expected, c.measured, {True: "yes", False: "NO", None: "n/a"}[c.passed]) for c in checks
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(quick: bool = False) -> int:
    """Run every check, print the table on stdout; exit status 0 only if all pass."""
    results: list[Check] = []
    start = time.perf_counter()
    for label, fn in CHECKS:
        t = time.perf_counter()
        print(f"validate: {label} …", file=sys.stderr, end="", flush=True)
        results.extend(fn(quick))
        print(f" {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)
    print(table(results))
    failed = sum(c.failed for c in results)
    skipped = sum(c.passed is None for c in results)
    print(
        f"\n{len(results) - failed - skipped} passed, {failed} failed"
        + (f", {skipped} not applicable" if skipped else "")
        + f" in {time.perf_counter() - start:.0f} s"
    )
    return 0 if failed == 0 else 1
