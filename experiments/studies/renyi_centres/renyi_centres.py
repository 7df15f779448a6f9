"""``renyi-centres``: metastable clusters under a causal mask and their Rényi centres (arXiv 2411.04990 Fig. 2).

SA with Q = K = V = I and a causal mask (token i attends to j ≤ i) on the circle, n = 200 tokens
uniform at t = 0, β = 64, Rényi centres at δ = 4β^{−1/2} (``experiments/studies/renyi_centres/renyi_centres_theory.py``) computed from the
saved states at every save time. Two claims of the paper are checked: strong Rényi centres stay where
they are (Lemma 5.1: no earlier token within δ), and the number of Rényi centres of uniform tokens is
Rényi's parking count c_R · 2π/δ (≈ 9.39 at β = 64).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ....solvers.methods import names
from ...analysis import LazyModule, dimensions, mean_over_seeds
from ...config import ConfigError
from ...registry import Check, Experiment, register
from ...run.runner import RunResult
from .renyi_centres_theory import parking_count, renyi_centres

draw = LazyModule(f"{__package__}.renyi_centres_figures")  # this study's figures, imported on first use

SCALE = 4.0
"""δ = SCALE · β^{−1/2}, the paper's threshold."""

STILL = 0.1
"""A strong centre "stays" while it moves less than STILL · δ (geodesic)."""

STABLE_STEP = 8.0
"""An explicit adaptive step at the clusters is at most this long: the tokens contract onto a cluster at rate 1
(Q = K = V = I), and no explicit method of attnflow (tsit5, dopri5, dopri8) is stable past h·rate ≈ 7. A run
to t1 takes at least t1 / STABLE_STEP steps (tsit5 measured: 2000 steps reach t ≈ 5200)."""


def centre_delta(beta: float) -> float:
    return SCALE / np.sqrt(beta)


def masks(result: RunResult, j: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(centres, strong): masks (seeds, T, n) of the run's β number j, from its saved states."""
    x = result.states(result.config.d[0])[j]
    centres, strong = renyi_centres(jnp.asarray(x), centre_delta(result.config.beta[j]))
    return np.asarray(centres), np.asarray(strong)


def displacements(result: RunResult, j: int = 0) -> np.ndarray:
    """(seeds, n): each token's largest geodesic distance from where it started, over the run."""
    x = result.states(result.config.d[0])[j]
    x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    cosines = np.clip(np.einsum("stnd,snd->stn", x, x[:, 0]), -1.0, 1.0)
    return np.arccos(cosines).max(axis=1)


def figures(result: RunResult) -> dict:
    """Snapshots of the first run with its centres (the paper's Fig. 2), and the mean counts over time."""
    c = result.config
    if not result.has_states:
        return {}
    beta = float(c.beta[0])
    delta = centre_delta(beta)
    centres, strong = masks(result)
    t1 = float(result.ts[-1])
    clusters = mean_over_seeds(result, "n_clusters")[0, 0]
    return {
        "renyi_centres": lambda p: draw.renyi_snapshots(
            result.ts,
            result.states(c.d[0])[0, 0],
            centres[0],
            strong[0],
            times=(0.0, t1 / 8, t1 / 2, t1),
            beta=beta,
            delta=delta,
            path=p,
        ),
        "centre_counts": lambda p: draw.centre_counts(
            result.ts,
            centres.sum(-1).mean(0),
            strong.sum(-1).mean(0),
            clusters,
            prediction=parking_count(delta),
            beta=beta,
            delta=delta,
            members=c.seeds,
            path=p,
        ),
    }


def checks(result: RunResult) -> list[Check]:
    """Strong centres stay put while the other tokens move; the count of centres at t = 0 is the parking count."""
    c = result.config
    beta = float(c.beta[0])
    delta = centre_delta(beta)
    centres, strong = masks(result)
    moved = displacements(result)
    first = strong[:, 0]  # strong centres of the initial configuration
    still = float(np.mean(moved[first] < STILL * delta))
    others = float(np.mean(moved[~first] < STILL * delta))
    count = float(centres[:, 0].sum(-1).mean())
    expected = parking_count(delta)
    error = count / expected - 1.0
    return [
        Check(
            f"Lemma 5.1: strong Rényi centres stay within {STILL:g}δ up to t = {result.ts[-1]:g}",
            "≥ 95 % of them (the other tokens: most move)",
            f"{100 * still:.1f} % (others {100 * others:.1f} %)",
            still >= 0.95 and others < 0.5,
        ),
        Check(
            f"Rényi parking: centres of {c.n} uniform tokens vs c_R·2π/δ = {expected:.3f}",
            "within 6 %",
            f"{count:.3f} ({100 * error:+.1f} %)",
            abs(error) <= 0.06,
        ),
    ]


_ON_THE_CIRCLE = dimensions(2, why="Rényi's parking count of arcs on the circle")


def requires(config) -> None:
    """The circle, the saved states its centres are computed from, and more tokens than the parking count (else
    every token may be a centre, and none is left to compare the strong centres with)."""
    _ON_THE_CIRCLE(config)
    beta = max(config.beta)
    count = parking_count(centre_delta(beta)) if beta > 0 else 0.0
    if config.n <= count:
        raise ConfigError(
            f"renyi-centres compares the strong Rényi centres with the other tokens: n must exceed the parking count "
            f"c_R·2π/δ = {count:.1f} at β = {beta:g} (the centres of many uniform tokens), got n = {config.n}"
        )
    explicit = config.solver in names("adaptive", implicit=False)
    if explicit and config.value == "identity" and config.weights == "identity":
        steps = config.t1 / STABLE_STEP
        if steps > config.max_steps:
            raise ConfigError(
                f"t1 = {config.t1:g} needs at least t1/{STABLE_STEP:g} = {steps:.3g} steps of solver "
                f"{config.solver!r} (explicit steps at the clusters are stable up to h ≈ {STABLE_STEP:g}), more than "
                f"max_steps = {config.max_steps}: lower t1, or raise max_steps"
            )
    if config.save_states == "no":
        raise ConfigError(
            "renyi-centres finds its Rényi centres in the saved states: save_states must be 'yes' or 'auto', not 'no'"
        )


EXPERIMENT = register(
    Experiment(
        "renyi-centres",
        "causal attention on the circle (n = 200, β = 64): Rényi centres, strong ones fixed, the parking count",
        "arXiv 2411.04990 Fig. 2",
        dict(
            experiment="renyi-centres",
            model="sa",
            mask="causal",
            n=200,
            d=[2],
            beta=[64.0],
            seeds=64,
            init="uniform",
            t1=200.0,
            n_save=101,
            solver="tsit5",
            rtol=1e-7,
            atol=1e-9,
            delta=1e-3,
            statistics=["clusters"],
            save_states="yes",
        ),
        dict(seeds=16, t1=100.0, n_save=21),
        figures,
        checks,
        needs=lambda config: ("clusters",),
        requires=requires,
        runtime="15 s",
    )
)
