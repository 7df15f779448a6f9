"""Paths of the random-depth transformer, of its common-noise SDE, of the random quadratic form and of attention
forced by a common Brownian motion, vmapped over ensemble members.

Three schemes, each keeping the tokens on the sphere (docs/numerics.md, "Common noise"):

    "depth"            the random-depth model itself (particles/random_depth.py): one layer per step, dt = 1/L
    "euler-maruyama"   x ← retract(x + b(x) dt + F(x)[ΔW]), b the Itô drift; weak order 1
    "heun"             the Stratonovich Heun step: x̃ = x + b_S(x) dt + F(x)[ΔW],
                       x ← retract(x + ½(b_S(x) + b_S(x̃)) dt + ½(F(x) + F(x̃))[ΔW]); weak order 1

retract(z)_i = z_i/‖z_i‖. Step s of the member with noise seed k draws G = ΔW/√dt (a layer's G for "depth")
as ``jax.random.normal(fold_in(fold_in(key(k), NOISE_STREAM), s))``: a path depends on (seed, step) alone,
never on how the steps are chunked into compiled calls, and members that share a noise seed share the
noise ("same noise, different initial conditions").
"""

from __future__ import annotations

from functools import partial
from typing import cast

import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from ..particles.errors import InputError
from ..particles.random_depth import CommonBrownian, CommonNoise, QuadraticForm, RandomDepth, member_axes
from ..particles.sphere import normalize

SCHEMES = ("depth", "euler-maruyama", "heun")
"""The schemes of ``common_noise_paths``: the discrete model, and two for the SDE."""

WEAK_ORDER = {"depth": 1.0, "euler-maruyama": 1.0, "heun": 1.0}
"""The weak order of each scheme in dt (1/L for the discrete model), measured by tests/solvers/test_common_noise_paths.py."""

NOISE_STREAM = 1
"""The key of the noise stream under a seed (initial conditions use others)."""

DEFAULT_CHUNK = 512
"""Steps per compiled call."""


def noise_key(seed) -> Array:
    """The key of a member's noise: ``fold_in(PRNGKey(seed), NOISE_STREAM)``."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), NOISE_STREAM)


def gaussian(key: Array, step, shape: tuple[int, ...], dtype) -> Array:
    """The standard normals of step ``step`` of the stream ``key``: the same whatever the chunking."""
    return jax.random.normal(jax.random.fold_in(key, step), shape, dtype)


def step(
    system: RandomDepth | CommonNoise | QuadraticForm | CommonBrownian,
    scheme: str,
    x: Float[Array, "n d"],
    g: Array,
    dt,
) -> Float[Array, "n d"]:
    """One step of one member with the standard normals ``g`` (shape ``system.noise_shape(d)``): a layer with G = g
    for "depth" (dt = 1/L), the SDE's step with ΔW = √dt g otherwise."""
    # common_noise_paths takes only a scheme of the system's own SCHEMES: "depth" for the layers, else an SDE's
    if scheme == "depth":
        return cast(RandomDepth, system).layer(x, g, 1.0 / dt)
    sde = cast("CommonNoise | QuadraticForm | CommonBrownian", system)
    dw = jnp.sqrt(dt) * g
    if scheme == "euler-maruyama":
        return normalize(x + sde.ito_drift(x) * dt + sde.diffusion(x, dw))
    b0, f0 = sde.stratonovich_drift(x), sde.diffusion(x, dw)
    guess = x + b0 * dt + f0
    return normalize(x + 0.5 * (b0 + sde.stratonovich_drift(guess)) * dt + 0.5 * (f0 + sde.diffusion(guess, dw)))


@partial(jax.jit, static_argnames=("scheme",))
def _advance(system, x, keys, start, count, dt, *, scheme: str):
    def one(sys_m, x_m, key_m):
        shape = sys_m.noise_shape(x_m.shape[-1])

        def body(s, carry):
            return step(sys_m, scheme, carry, gaussian(key_m, start + s, shape, carry.dtype), dt)

        return jax.lax.fori_loop(0, count, body, x_m)

    return jax.vmap(one, in_axes=(member_axes(system), 0, 0))(system, x, keys)


def common_noise_paths(
    system: RandomDepth | CommonNoise | QuadraticForm | CommonBrownian,
    x0: Float[Array, "B n d"],
    seeds,
    *,
    dt: float,
    steps: int,
    save_every: int | None = None,
    scheme: str = "depth",
    chunk: int = DEFAULT_CHUNK,
) -> Float[Array, "B S n d"]:
    """The states of B members every ``save_every`` steps (the start included), S = steps/save_every + 1.

    system       a ``RandomDepth`` (scheme "depth", L = 1/dt layers per unit time), a ``CommonNoise``, a
                 ``QuadraticForm`` or a ``CommonBrownian`` (the SDE schemes); a leaf with a leading member axis
                 (β, σ or γ of shape (B,)) differs by member
    x0           the members' initial tokens, unit rows
    seeds        B integers: each member's noise seed (equal seeds, equal noise)
    dt           the step (1/L for the discrete model)
    steps        the number of steps (layers); save_every divides it (default: steps, start and end only)
    chunk        steps per compiled call: the paths do not depend on it
    """
    if scheme not in SCHEMES:
        raise InputError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if scheme not in system.SCHEMES:
        raise InputError(
            f"scheme {scheme!r} does not step a {type(system).__name__}, whose schemes are "
            f"{', '.join(system.SCHEMES)} (\"depth\": the random-depth model's layers; the others: an SDE's)"
        )
    if not (isinstance(dt, float | int) and dt > 0):
        raise InputError(f"dt must be a number > 0, got {dt!r}")
    save_every = steps if save_every is None else save_every
    if steps < 1 or save_every < 1 or steps % save_every:
        raise InputError(f"steps (≥ 1) must be a multiple of save_every (≥ 1), got {steps} and {save_every}")
    x = jnp.asarray(x0)
    if x.ndim != 3:
        raise InputError(f"x0 must have shape (members, n, d), got {x.shape}")
    seeds = jnp.asarray(seeds)
    if seeds.shape != (x.shape[0],):
        raise InputError(f"seeds must hold one integer per member ({x.shape[0]}), got shape {seeds.shape}")
    keys = jax.vmap(noise_key)(seeds)
    saves, done = [x], 0
    while done < steps:
        target = done + save_every
        while done < target:
            count = min(chunk, target - done)
            x = _advance(system, x, keys, done, count, jnp.asarray(dt, dtype=x.dtype), scheme=scheme)
            done += count
        saves.append(x)
    return jnp.stack(saves, axis=1)
