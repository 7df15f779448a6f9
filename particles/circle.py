"""The circle d = 2 in angles: one number per particle instead of a point of R² ([GLPR] §7).

x_i = (cos θ_i, sin θ_i). Writing SA and USA (Q = K = V = I) in the angles gives the
generalized Kuramoto model of MODEL.md §1.6: half the state of the planar run, no projection
and no renormalization, and (``exact=True``) velocities accurate relative to their size inside
tight clusters.
"""

from __future__ import annotations

import math
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._checks import check_choice
from .fields import Field, _as_beta

__all__ = ["Circle", "to_angles", "from_angles"]

_MODELS = ("sa", "usa", "usa-rescaled")


def to_angles(x: Float[Array, "... n 2"]) -> Float[Array, "... n 1"]:
    """The angle θ_i ∈ (−π, π] of every point x_i = ‖x_i‖(cos θ_i, sin θ_i) of the plane."""
    x = jnp.asarray(x)
    if x.ndim < 2 or x.shape[-1] != 2:
        raise ValueError(f"to_angles needs points of the plane, shape (..., n, 2), got {x.shape}")
    return jnp.arctan2(x[..., 1], x[..., 0])[..., None]


def from_angles(theta: Float[Array, "... n 1"]) -> Float[Array, "... n 2"]:
    """The points (cos θ_i, sin θ_i) of the unit circle."""
    theta = jnp.asarray(theta)
    if theta.ndim < 2 or theta.shape[-1] != 1:
        raise ValueError(f"from_angles needs angles of shape (..., n, 1), got {theta.shape}")
    return jnp.concatenate([jnp.cos(theta), jnp.sin(theta)], axis=-1)


class Circle(Field):
    """SA or USA on the circle, in angles θ of shape (n, 1) ([GLPR] §7, MODEL.md §1.6):

        "sa":            θ̇_i = −Σ_j e^{β cos(θ_i−θ_j)} sin(θ_i−θ_j) / Σ_k e^{β cos(θ_i−θ_k)}
        "usa":           θ̇_i = −(1/n) Σ_j e^{β cos(θ_i−θ_j)} sin(θ_i−θ_j)                 [GLPR]
        "usa-rescaled":  θ̇_i = −(1/n) Σ_j e^{β (cos(θ_i−θ_j) − 1)} sin(θ_i−θ_j)    [2410.06833]

    the angular velocities of ``SA(β)``, ``USA(β)`` and ``USA(β, time="rescaled")``. β = 0 is the
    Kuramoto model. The weights are e^{β(cos Δ − 1)} ≤ 1, which never overflow; "usa" restores
    the factor e^β afterwards. The states are angles in R (geometry "euclidean"): map with
    ``to_angles`` / ``from_angles``; no projection or renormalization is needed.

    exact=False  (default) cos Δ = c_i c_j + s_i s_j and Σ_j w_ij sin Δ_ij = s_i (W c)_i − c_i (W s)_i:
                 one exponential per pair and two matrix products, the cost of ``SA`` in the plane
                 and its precision (velocities to ~1e-16 absolute).
    exact=True   from the differences Δ = θ_i − θ_j, with β(cos Δ − 1) = −2β sin²(Δ/2): small
                 velocities keep their relative precision (tight clusters, Δ ≪ 1e-8), for three
                 transcendental functions per pair (about 10× slower on CPU).
    """

    beta: Float[Array, ""]
    model: str = eqx.field(static=True, default="sa")
    exact: bool = eqx.field(static=True, default=False)
    geometry: ClassVar[str] = "euclidean"
    event_ndim: ClassVar[dict[str, int]] = {"beta": 0}

    def __init__(self, beta=1.0, model: str = "sa", *, exact: bool = False):
        self.beta = _as_beta(beta)
        self.model = check_choice("model", model, _MODELS)
        self.exact = bool(exact)

    def directions(self, x):
        """Angles (n, 1) as points (cos θ, sin θ) of the circle."""
        return from_angles(x)

    def drift(self, t, theta: Float[Array, "n 1"]) -> Float[Array, "n 1"]:
        th = theta[..., 0]
        beta = self.beta.astype(theta.dtype)
        if self.exact:
            delta = th[:, None] - th[None, :]
            w = jnp.exp(-2.0 * beta * jnp.sin(0.5 * delta) ** 2)
            pull = jnp.sum(w * jnp.sin(delta), axis=-1)
        else:
            cs = jnp.stack([jnp.cos(th), jnp.sin(th)], axis=-1)
            w = jnp.exp(beta * (cs @ cs.T - 1.0))
            wcs = w @ cs
            pull = cs[:, 1] * wcs[:, 0] - cs[:, 0] * wcs[:, 1]
        if self.model == "sa":
            # the diagonal weight is 1, so the normalizer is ≥ 1
            velocity = -pull / jnp.sum(w, axis=-1)
        else:
            scale = jnp.exp(beta) if self.model == "usa" else 1.0
            velocity = -pull * (scale / th.shape[0])
        return velocity[:, None]

    def check(self, n: int, d: int, dtype) -> None:
        if d != 1:
            raise ValueError(f"Circle acts on angles of shape (n, 1), got d = {d}; "
                             f"convert points of the circle with to_angles(x)")
        if self.model != "usa" or isinstance(self.beta, jax.core.Tracer):
            return
        beta_max = float(np.max(np.asarray(self.beta)))
        # headroom for the sum over n particles and a few Runge–Kutta stages
        if beta_max > math.log(float(jnp.finfo(dtype).max)) - math.log(n) - 8.0:
            raise ValueError(f"Circle(model='usa') at beta={beta_max:g} has velocities of order e^beta, which "
                             f"overflow {jnp.dtype(dtype).name}; use model='usa-rescaled' (time t -> e^-beta t)")
