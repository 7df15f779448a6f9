"""From configuration keys to a vector field and to ``simulate``'s arguments.

The keys compose the way the fields do: an attention term (``model``, ``heads``, ``mask``,
``weights``, ``value``, ``layer_tau``/``weights_file``), an optional feed-forward term
(``ff_width``), a layer-norm scheme wrapped around the sum (``norm``), and noise on top
(``noise``). Combinations that make no sense are refused with one clear line. The method keys
(``solver``, ``dt``, tolerances, ``dtype``, ``precision``, ``dense``, ``max_steps``, ``stop_when_clustered``) become
``simulate``'s keywords in :func:`simulate_arguments`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ...particles.fields import Field
from ...particles.models import MODELS, query_key_product
from ..config import (
    ANGLE_SOLVERS,
    FIXED_STEP_SOLVERS,
    NORMS,
    WEIGHTS,
    Config,
    ConfigError,
    non_plain_keys,
)
from ..config import (
    MODELS as MODEL_NAMES,
)


def _member_keys(seeds: np.ndarray):
    """One key per member, from the member's seed: members with the same seed share their weights."""
    return jax.vmap(jax.random.key)(jnp.asarray(seeds))


BROWNIAN_STREAM = 0x42726F77
"""Folded into a member's seed key for its Brownian path: a stream apart from its initial conditions' (the seed's
key itself) and its weights' (the seed's key, folded with the layer's index for layer-wise weights)."""


def brownian_keys(seeds) -> jax.Array:
    """The Brownian keys of members with ``seeds`` (their seeds, config.seed + s): ``fold_in(key(seed),
    BROWNIAN_STREAM)``, one per member (``simulate(key=...)`` takes them as they are).

    A member's noise is keyed by its seed alone, as its initial conditions are: the same for every β and d,
    and whatever the member's place among the compiled calls of a run (``memory_gb``, progress), so that a
    noisy run is the same for every chunking, the member labelled seed s is the run of ``seed = s, seeds = 1``,
    and a sweep's grid points are the same merged into one ensemble or run alone.
    """
    return jax.vmap(lambda s: jax.random.fold_in(jax.random.key(s), BROWNIAN_STREAM))(jnp.asarray(seeds))


def attention_field(config: Config, beta, seeds: np.ndarray, d: int):
    """The attention term: the model (``particles.models.MODELS``) with its options, heads, weights (random,
    V = −I, per layer). The configuration's rules have refused every key the model does not take."""
    from ...particles.layerwise import LayerWise
    from ...particles.weights import sample_weights

    spec = MODELS[config.model]
    layered = bool(config.weights_file) or (config.layer_tau > 0 and config.weights != "identity")
    mats: Mapping[str, jax.Array | np.ndarray | None] = {}
    if config.weights != "identity" and not layered:
        mats = jax.vmap(lambda k: sample_weights(k, d, config.weights))(_member_keys(seeds))
    elif config.value == "-identity":
        mats = {"V": -np.eye(d)}
    mats = {k: v for k, v in mats.items() if v is not None}
    if config.heads > 1:
        from ...particles.multihead import MultiHead

        if mats or layered:
            raise ConfigError("heads > 1 uses the block-identity heads; random or layer-wise weights need heads = 1")
        position = {}
        if config.positional == "rope":
            position = dict(positional="rope", rope_base=config.rope_base)
        elif config.positional != "none":  # ALiBi's geometric slopes, the first head's being alibi_slope
            slopes = MultiHead.alibi_slopes(config.heads)
            position = dict(positional=config.positional, alibi_slope=config.alibi_slope * slopes / slopes[0])
        return MultiHead.identity(beta, config.heads, d, mask=config.mask, model=config.model, **position)
    if spec.bilinear and config.positional != "rope":  # rotary logits ⟨Qx_i, R_{j−i}Kx_j⟩ need Q and K apart
        mats = query_key_product(mats, d)
    inner = spec.make(beta, options=config, **mats)
    if config.weights_file:
        return LayerWise.from_npz(inner, config.weights_file, config.layer_tau)
    if layered:
        n_layers = max(1, int(np.ceil(config.t1 / config.layer_tau)))
        plain = spec.make(1.0, options=config)
        stacks = jax.vmap(lambda k: LayerWise.redrawn(plain, k, config.weights, d, n_layers, config.layer_tau))(
            _member_keys(seeds)
        )
        return LayerWise(inner, Qs=stacks.Qs, Ks=stacks.Ks, Vs=stacks.Vs, tau=config.layer_tau)
    return inner


def in_angles(config: Config, d: int) -> bool:
    """Whether the members of dimension ``d`` run in angles (``Circle``): circle = 'yes' (validated to
    apply), or 'auto' for d = 2 with plain SA/USA and a solver that steps angles as the scheme it names
    (not the rotations of lie_euler and cg3, nor renormalized_euler, which needs the velocity's radial part)."""
    if config.circle == "yes":
        return True
    return (
        config.circle == "auto"
        and d == 2
        and MODELS[config.model].circle
        and not non_plain_keys(config)
        and config.solver in ANGLE_SOLVERS
        and min(config.beta) >= 0
    )


def build_field(config: Config, beta, seeds: np.ndarray, d: int):
    """The whole field of a configuration for members with inverse temperatures ``beta`` and ``seeds``."""
    if in_angles(config, d):
        from ...particles.circle import Circle

        field: Field = Circle(beta, model=config.model)
        if config.coalesce > 0:
            from ...particles.coalesce import Coalesced

            field = Coalesced(field, config.coalesce)
        return field
    field = attention_field(config, beta, seeds, d)
    if config.ff_width:
        from ...particles.feedforward import FeedForward

        # one feed-forward layer for the whole run, drawn from the run's seed
        key = jax.random.fold_in(jax.random.key(config.seed), 2**31 - 1)
        ka, kb, kw = jax.random.split(key, 3)
        m = config.ff_width
        field = field + FeedForward(
            jax.random.normal(ka, (m, d)) / np.sqrt(d),
            jax.random.normal(kb, (m,)),
            config.ff_scale * jax.random.normal(kw, (d, m)) / np.sqrt(m),
            activation=config.ff_activation,
        )
    if config.norm != "post":
        from ...particles import layernorm

        wrap = {"pre": layernorm.PreLN, "peri": layernorm.PeriLN, "none": layernorm.NoLN}
        field = layernorm.NGPT(field, alpha=config.ngpt_alpha) if config.norm == "ngpt" else wrap[config.norm](field)
    if config.coalesce > 0:
        from ...particles.coalesce import Coalesced

        field = Coalesced(field, config.coalesce)
    if config.noise > 0:
        from ...particles.noise import Noisy

        field = Noisy(field, config.noise)
    return field


@functools.lru_cache(maxsize=64)
def span_reduction(config: Config, d: int) -> str | None:
    """Whether the members of dimension ``d`` are simulated in the span of their n tokens, and how.

    "any frame" where the reduced field is the same in every frame (Q = K = identity: it is the field
    at dimension n), "frame" where it needs each member's frame (random Q, K enter as UᵀQᵀK U), None
    where the run is simulated in R^d: ``span`` off, d ≤ n, angles on the circle, or a field that
    answers None to ``in_span`` (its span is not invariant: V ≠ λI, noise, feed-forward, ...). Asks a
    one-member field of the run, built as the run builds its fields (once per configuration and d).
    """
    n = config.n
    if not config.span or d <= n or n < 2 or in_angles(config, d):
        return None
    probe = build_field(config, jnp.asarray([float(config.beta[0])]), np.asarray([config.seed]), d)
    if probe.in_span(n) is not None:
        return "any frame"
    if probe.in_span(jnp.eye(d, n)) is not None:
        return "frame"
    return None


def simulate_arguments(
    config: Config, ts, *, progress: bool | str = False, key=None, method_only: bool = False
) -> dict:
    """``simulate``'s keyword arguments for the members of ``config`` saved at ``ts``.

    dt is passed to fixed-step solvers, and to adaptive ones as their first step when it is set
    (dt > 0); a run stopping at consensus stops at δ/2, which leaves its final state unambiguously one
    cluster at δ. ``key``: the Brownian keys of a noisy run's members (``brownian_keys``). ``method_only`` keeps the integration
    method alone (solver, dt, tolerances, max_steps), for particles that are not the configuration's
    ensemble: they keep the dtype they are given (and full-precision products), are saved where asked only
    and run to the end.
    """
    out = dict(
        ts=ts,
        solver=config.solver,
        dt=config.dt if config.solver in FIXED_STEP_SOLVERS or config.dt > 0 else None,
        rtol=config.rtol,
        atol=config.atol,
        max_steps=config.max_steps,
        progress=progress,
        key=key,
    )
    if not method_only:
        out.update(
            dtype=config.dtype,
            precision=config.precision,
            dense=config.dense,
            stop_when_clustered=config.delta / 2 if config.stop_when_clustered else None,
        )
    return out


def describe() -> str:
    """One paragraph per variant key group, for ``attnflow list --keys``."""
    return "model: " + ", ".join(MODEL_NAMES) + "; norm: " + ", ".join(NORMS) + "; weights: " + ", ".join(WEIGHTS)
