"""Rules across keys: the checks every configuration passes, run by ``validate`` in registration order.

A check takes the configuration (a :class:`~attnflow.experiments.config.Config`, read here as a
mapping) and raises a one-line :class:`ConfigError` naming the keys involved, or returns. The core
rules come first (solver and step, save times, seeds, the initial condition), then the rules of the
model variant keys. :func:`register_check` adds a rule from elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ...particles import models
from ...particles.models import MODELS
from ...solvers.methods import names, spoken
from .keys import FIXED_STEP_SOLVERS, GRID_ONLY_SOLVERS, KEYS, SEED_MAX, model_keys
from .toml import toml_literal
from .types import ConfigError

__all__ = [
    "CHECKS",
    "register_check",
    "ROTATING_SOLVERS",
    "ANGLE_SOLVERS",
    "ATTENTION_STATISTICS_MAX_N",
    "non_plain_keys",
    "variant_keys",
]

Check = Callable[[Mapping[str, Any]], None]
CHECKS: list[Check] = []

ROTATING_SOLVERS = names(rotating=True)  # solvers that rotate on the sphere (no motion in R^d or in angles)
ANGLE_SOLVERS = names(angles=True)  # solvers that step angles on the circle as the scheme they name
ATTENTION_STATISTICS_MAX_N = 1024  # the "attention" statistics form A(t) (n×n) and its spectrum at every save


def register_check(check: Check) -> Check:
    """Add a cross-key rule run by ``validate``: ``check(config)`` raises ConfigError or returns.

    Usable as a decorator. Registering the same function twice runs it once.
    """
    if check not in CHECKS:
        CHECKS.append(check)
    return check


@register_check
def check_solver_and_saves(c: Mapping[str, Any]) -> None:
    """Fixed-step solvers need ``dt > 0``; ``dense`` needs an interpolant; ``save_times`` increasing within [0, t1]."""
    if c["solver"] in FIXED_STEP_SOLVERS and c["dt"] <= 0:
        raise ConfigError(
            f"dt must be > 0 for the fixed-step solver {c['solver']!r} (dt = 0 means unset); "
            f"set dt, or pick an adaptive solver ({', '.join(names('adaptive', implicit=False))})"
        )
    dense = names(dense=True)
    if c["dense"] and c["solver"] in FIXED_STEP_SOLVERS and c["solver"] not in dense:
        raise ConfigError(
            f"dense = true interpolates between {spoken(dense, quote='')} steps; the fixed-step solver "
            f"{c['solver']!r} has no interpolant: set solver = {spoken(dense)} (or an adaptive solver, "
            f"which always interpolates) or dense = false"
        )
    times = c["save_times"]
    for i in range(1, len(times)):
        if not times[i] > times[i - 1]:
            raise ConfigError(
                f"save_times must be strictly increasing; got save_times[{i - 1}] = {times[i - 1]!r} "
                f"then save_times[{i}] = {times[i]!r}"
            )
    if times and times[-1] > c["t1"]:
        raise ConfigError(f"save_times must lie within [0, t1 = {c['t1']!r}]; got {times[-1]!r}")


@register_check
def check_seeds(c: Mapping[str, Any]) -> None:
    """The members' seeds ``seed + s`` stay ≤ 2**63 − 1."""
    if c["seed"] + c["seeds"] - 1 > SEED_MAX:
        top = SEED_MAX - c["seeds"] + 1
        fix = f"seed must lie in [0, {top}]" if top >= 0 else f"seeds must be ≤ 2**63 = {SEED_MAX + 1}"
        raise ConfigError(
            f"seed + seeds - 1 must be ≤ 2**63 - 1 = {SEED_MAX} (member s draws from seed + s); got "
            f"seed = {c['seed']}, seeds = {c['seeds']}: {fix}"
        )


@register_check
def check_initial_condition(c: Mapping[str, Any]) -> None:
    """The initial condition's own limits, for every d listed.

    ``init = 'file'`` needs ``init_file``; equiangular needs ρ ≥ −1/(n−1) and d ≥ n (d ≥ n − 1 at
    the simplex); orthogonal needs d ≥ n; angles need d = 2 and n angles; at most n clusters.
    """
    init, n = c["init"], c["n"]
    if init == "file" and not c["init_file"]:
        raise ConfigError("init = 'file' needs init_file, the path of a .npy array; got init_file = ''")
    if init == "equiangular" and n > 1:
        lower = -1.0 / (n - 1)
        rho = c["rho"]
        simplex = math.isclose(rho, lower, rel_tol=0.0, abs_tol=1e-12)
        if rho < lower and not simplex:
            raise ConfigError(f"rho must be ≥ -1/(n-1) = {lower:g} for equiangular init with n = {n}; got {rho!r}")
        need = n - 1 if simplex else n
        small = [d for d in c["d"] if d < need]
        if small:
            raise ConfigError(
                f"d must be ≥ {need} for equiangular init with n = {n}, rho = {rho!r} "
                f"(n vectors with equal inner products); got d = {small[0]}"
            )
    if init == "orthogonal":
        small = [d for d in c["d"] if d < n]
        if small:
            raise ConfigError(f"d must be ≥ n = {n} for orthogonal init; got d = {small[0]}")
    if init == "angles":
        if tuple(c["d"]) != (2,):
            raise ConfigError(f"init = 'angles' places particles on the circle and needs d = 2; got d = {list(c['d'])}")
        if len(c["angles"]) != n:
            raise ConfigError(f"init = 'angles' needs one angle per particle: n = {n} but {len(c['angles'])} angles")
    if init == "clusters" and c["n_init_clusters"] > n:
        raise ConfigError(f"n_init_clusters must be ≤ n = {n}; got {c['n_init_clusters']}")


def non_plain_keys(c: Mapping[str, Any]) -> list[str]:
    """The variant keys of ``c`` that take a run off plain SA/USA (which the angle form cannot express)."""
    return [
        k
        for k in ("heads", "mask", "positional", "norm", "weights", "value", "ff_width", "weights_file")
        if c[k] != KEYS[k].default
    ] + [k for k in ("noise",) if c[k] > 0]


def variant_keys() -> tuple[str, ...]:
    """The model keys (``keys.model_keys``) that some attention models take and others do not
    (``particles.models.Model.takes``): those a configuration may set only with a model that takes them."""
    taken = {k for m in MODELS.values() for k in m.takes}
    return tuple(k for k in model_keys() if k in taken)


@register_check
def check_model_keys(c: Mapping[str, Any]) -> None:
    """A key the model does not take (``particles.models.Model.takes``) is refused, never dropped; so is a β
    other than 1 for a model without an inverse temperature."""
    spec = MODELS[c["model"]]
    variants = variant_keys()
    for name in variants:
        if name not in spec.takes and c[name] != KEYS[name].default:
            takes = [k for k in variants if k in spec.takes]
            raise ConfigError(
                f"model {spec.name!r} takes no {name} (got {name} = {toml_literal(c[name])}); it takes "
                + (", ".join(takes) if takes else "none of the variant keys")
                + f": leave {name} at its default {toml_literal(KEYS[name].default)}, or choose a model "
                f"that takes it ({spoken(m.name for m in MODELS.values() if name in m.takes)})"
            )
    if not spec.temperature and tuple(c["beta"]) != (1.0,):
        raise ConfigError(
            f"model {spec.name!r} has no inverse temperature β, so members with β = "
            f"{toml_literal(c['beta'])} would not differ: leave beta at 1"
        )


@register_check
def check_negative_beta(c: Mapping[str, Any]) -> None:
    """β < 0 only where the model is defined for it (``Model.signed_beta``: SA and USA), not in angles."""
    negative = [b for b in c["beta"] if b < 0]
    if not negative:
        return
    signed = models.names(signed_beta=True)
    if c["model"] not in signed:
        raise ConfigError(
            f"beta < 0 (got {negative[0]:g}) runs with model {spoken(signed)}, whose "
            f"softmax subtracts the row maximum; model = {c['model']!r} needs beta ≥ 0"
        )
    if c["circle"] == "yes":
        raise ConfigError(
            f"beta < 0 (got {negative[0]:g}): the angle form (circle = 'yes') assumes beta ≥ 0; "
            "use circle = 'auto' or 'no' (points of the plane)"
        )


@register_check
def check_positional(c: Mapping[str, Any]) -> None:
    """A positional bias (ALiBi: SA/USA, any heads; decay: USA, one head) weighs the causal logits; rotary
    positions (any mask) rotate planes of the queries and keys, whose dimension must be even."""
    if c["positional"] == "none":
        return
    if c["positional"] == "rope":
        odd = [d for d in c["d"] if (d // c["heads"]) % 2]
        if odd:
            raise ConfigError(
                f"positional = 'rope' rotates the planes (2p, 2p + 1) of the queries and keys, whose dimension "
                f"d/heads must be even: got d = {odd[0]} with heads = {c['heads']}; choose an even d/heads"
            )
        return
    if c["mask"] != "causal":
        raise ConfigError(f"positional = {c['positional']!r} biases attention to earlier tokens: set mask = 'causal'")
    if c["positional"] == "decay" and c["heads"] > 1:
        raise ConfigError(f"positional = 'decay' weighs the tokens of one head: it needs heads = 1 (got {c['heads']})")
    if c["positional"] == "decay" and c["model"] == "sa":
        raise ConfigError(
            "positional = 'decay' normalizes the weights over positions, not by the content kernel: "
            "it needs model usa or usa-rescaled (model = 'sa' takes positional = 'alibi')"
        )


@register_check
def check_variants(c: Mapping[str, Any]) -> None:
    """Refuse combinations of variant keys that have no meaning, naming the keys involved."""
    model, solver, heads, norm = c["model"], c["solver"], c["heads"], c["norm"]
    weights, layer_tau, noise = c["weights"], c["layer_tau"], c["noise"]
    if heads > 1:
        bad = [d for d in c["d"] if d % heads]
        if bad:
            raise ConfigError(f"heads must divide d: heads = {heads} does not divide d = {bad[0]}")
    if c["value"] == "-identity" and weights != "identity":
        raise ConfigError(
            f"value = '-identity' applies to identity weights; with weights = {weights!r} "
            "use weights = 'repulsive' or 'v-minus-qk'"
        )
    if c["weights_file"] and weights != "identity":
        raise ConfigError("give either weights_file (user weights per layer) or a random weights ensemble, not both")
    if (c["weights_file"] or (layer_tau > 0 and weights != "identity")) and layer_tau <= 0:
        raise ConfigError("weights_file needs layer_tau > 0, the time each layer's weights act")
    if layer_tau > 0 and weights == "identity" and not c["weights_file"]:
        raise ConfigError(
            f"layer_tau = {layer_tau:g} is the time each layer's weights act: it needs random weights "
            "redrawn per layer (weights other than 'identity') or a weights_file; or leave layer_tau "
            "at 0"
        )
    one_step = names("fixed", grid_only=False)  # what a Strang splitting wraps
    if noise > 0 and solver not in one_step:
        raise ConfigError(
            f"noise > 0 integrates an SDE with fixed steps: set solver to one of "
            f"{', '.join(one_step)} and dt (got solver = {solver!r})"
        )
    grid_only = solver in GRID_ONLY_SOLVERS
    if (grid_only or (c["dense"] and solver in FIXED_STEP_SOLVERS)) and (noise > 0 or layer_tau > 0):
        what, fix = (
            (f"solver = {solver!r}", f"use solver = {spoken(names(dense=True, grid_only=False))}")
            if grid_only
            else ("dense = true", "set dense = false")
        )
        raise ConfigError(
            f"{what} interpolates a smooth deterministic path: it does not combine with noise > 0 "
            f"or layer_tau > 0 (weights switching during the run); {fix}"
        )
    if norm in ("pre", "peri", "none") and solver in ROTATING_SOLVERS:
        raise ConfigError(f"norm = {norm!r} moves tokens in R^d; solver {solver!r} only rotates on the sphere")
    if c["circle"] == "yes":
        changed = non_plain_keys(c)
        if tuple(c["d"]) != (2,) or not MODELS[model].circle or changed:
            raise ConfigError(
                "circle = 'yes' is the angle form of plain SA/USA on the circle: it needs d = 2, "
                f"model {spoken(models.names(circle=True), quote='')} and no other variant key"
                + (f" (got {', '.join(changed)})" if changed else "")
                + "; circle = 'auto' uses it only where it applies"
            )
        if solver in ROTATING_SOLVERS:
            raise ConfigError(f"circle = 'yes' integrates angles in R; solver {solver!r} rotates on the sphere")
        if solver not in ANGLE_SOLVERS:
            raise ConfigError(
                f"circle = 'yes' integrates angles in R; solver {solver!r} steps points with their "
                f"unprojected velocity, which angles do not carry: use circle = 'auto' or 'no'"
            )
    if c["coalesce"] > 0 and norm in ("pre", "peri", "none"):
        raise ConfigError(
            f"coalesce moves tokens on the sphere together; norm = {norm!r} leaves the sphere "
            "(use norm = 'post' or 'ngpt', or coalesce = 0)"
        )
    if "attention" in c["statistics"]:
        if not MODELS[model].make(1.0, options=c).stochastic:  # the field answers, with the run's options
            raise ConfigError(
                f"statistics 'attention' treat the attention matrix as a random walk, but model = "
                f"{model!r} has signed weights; use linear_normalize = 'sum' with linear_feature = "
                f"'elu' (model = 'linear'), or leave 'attention' out of statistics"
            )
        if c["n"] > ATTENTION_STATISTICS_MAX_N:
            raise ConfigError(
                f"statistics 'attention' form the n×n attention matrix and its spectrum at every save "
                f"time: n ≤ {ATTENTION_STATISTICS_MAX_N}, got n = {c['n']}"
            )
