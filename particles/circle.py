"""The circle d = 2 in angles: one number per particle instead of a point of R² ([GLPR] §7).

x_i = (cos θ_i, sin θ_i). Writing SA and USA (Q = K = V = I) in the angles gives the
generalized Kuramoto model of docs/model.md §1.6: half the state of the planar run, no projection
and no renormalization, and (``exact=True``) velocities accurate relative to their size inside
tight clusters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import as_beta, check_choice
from .fields import KERNEL_MODELS, UNROLLED_N, Field

__all__ = ["Circle", "to_angles", "from_angles", "sincos", "exp2", "spread"]


# minimax coefficients of sin r = r + r³ S(r²) and cos r = 1 − r²/2 + r⁴ C(r²) on |r| ≤ π/4 (fdlibm's)
_SIN = (
    -1.66666666666666324348e-01,
    8.33333333332248946124e-03,
    -1.98412698298579493134e-04,
    2.75573137070700676789e-06,
    -2.50507602534068634195e-08,
    1.58969099521155010221e-10,
)
_COS = (
    4.16666666666666019037e-02,
    -1.38888888888741095749e-03,
    2.48015872894767294178e-05,
    -2.75573143513906633035e-07,
    2.08757232129817482790e-09,
    -1.13596475577881948265e-11,
)


def _horner(z, coefficients):
    acc = coefficients[-1]
    for c in coefficients[-2::-1]:
        acc = acc * z + c
    return acc


def sincos(theta: Array) -> tuple[Array, Array]:
    """(sin θ, cos θ) elementwise, to within one unit in the last place (float32 and float64).

    XLA's CPU backend calls a scalar routine per element for sin and cos (≈ 7 ns each); this
    reduction to |r| ≤ π/4 (k = round(2θ/π), r = θ − k π/2 with π/2 split in exact parts) and
    the polynomials above are plain vectorized arithmetic, about 9× faster. The reduction is
    exact while k·π/2's leading part is, |θ| ≲ 10⁶ in float64 and ≲ 10³ in float32; beyond,
    the error grows like |θ|·ε.
    """
    theta = jnp.asarray(theta)
    k = jnp.round(theta * (2.0 / math.pi))
    if jnp.dtype(theta.dtype).itemsize >= 8:
        r = (theta - k * 1.57079632673412561417e00) - k * 6.07710050650619224932e-11
        n_sin, n_cos = 6, 6
    else:
        r = ((theta - k * 1.5703125) - k * 4.837512969970703125e-4) - k * 7.549789954891882e-8
        n_sin, n_cos = 4, 3
    z = r * r
    s = r + r * z * _horner(z, _SIN[:n_sin])
    c = 1.0 - 0.5 * z + z * z * _horner(z, _COS[:n_cos])
    quadrant = k - 4.0 * jnp.floor(0.25 * k)  # k mod 4, exact in floating point
    sin = jnp.where(quadrant == 0, s, jnp.where(quadrant == 1, c, jnp.where(quadrant == 2, -s, -c)))
    cos = jnp.where(quadrant == 0, c, jnp.where(quadrant == 1, -s, jnp.where(quadrant == 2, -c, s)))
    return sin, cos


# 2^f = Σ_k (f ln 2)^k / k! on |f| ≤ 1/2, truncated after degree 6 (relative error ≤ 1.2e-7)
_EXP2 = tuple(float(np.float32(math.log(2.0) ** k / math.factorial(k))) for k in range(7))


def exp2(y: Array) -> Array:
    """2^y elementwise; in float32 for y ≤ 127 as plain vectorized arithmetic.

    XLA's CPU backend evaluates a float32 exponential with range checks on both sides and a
    two-part reduction, ≈ 30 vector operations; the attention weights of ``Circle`` are 2^y with
    y ≤ 0 (their exponent, rescaled by log₂ e, is folded into β) and need neither: n = round(y),
    f = y − n ∈ [−½, ½], 2^f by the polynomial above and 2^n added to the exponent bits, ≈ 18
    operations, within 2.5e-7 relative for −126 ≤ y ≤ 127. Below −126 the result is 2^−126
    instead of a subnormal or 0 (absolute error < 1.2e-38); NaN stays NaN; +inf is not
    supported. Other dtypes use ``jnp.exp2``.
    """
    y = jnp.asarray(y)
    if y.dtype != jnp.float32:
        return jnp.exp2(y)
    y = jnp.maximum(y, np.float32(-126.0))
    n = jnp.round(y)
    f = y - n
    p = _horner(f, tuple(np.float32(c) for c in _EXP2))
    # 2^n · p: n added to p's exponent field (NaN converts to 0 or INT_MIN, both shifted to 0)
    scale = jax.lax.shift_left(n.astype(jnp.int32), np.int32(23))
    return jax.lax.bitcast_convert_type(jax.lax.bitcast_convert_type(p, jnp.int32) + scale, jnp.float32)


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
    sin, cos = sincos(theta)
    return jnp.concatenate([cos, sin], axis=-1)


def spread(theta: Float[Array, "... n 1"]) -> Float[Array, ...]:
    """max_ij (1 − cos(θ_i − θ_j)), the largest ½‖x_i − x_j‖² of the points, in O(n): exact whenever it is < 1.

    With r_i = θ_i − θ_1 wrapped to [−π, π], tokens whose range R = max r − min r is at most π lie
    on an arc of length R, and their farthest pair is R apart: the spread is 2 sin²(R/2). When
    R > π, the token farthest from θ_1 is more than π/2 from it, so the spread is ≥ 1; 2 is returned.
    A test "spread ≤ δ" with δ < 1 (consensus at threshold δ) is therefore exact, without the n²
    pairs.
    """
    theta = jnp.asarray(theta)
    th = theta[..., 0]
    r = th - th[..., :1]
    r = r - (2.0 * math.pi) * jnp.round(r * (0.5 / math.pi))
    width = jnp.max(r, axis=-1) - jnp.min(r, axis=-1)
    return jnp.where(width <= math.pi, 2.0 * jnp.sin(0.5 * jnp.minimum(width, math.pi)) ** 2, 2.0).astype(th.dtype)


class Circle(Field):
    """SA or USA on the circle, in angles θ of shape (n, 1) ([GLPR] §7, docs/model.md §1.6):

        "sa":            θ̇_i = −Σ_j e^{β cos(θ_i−θ_j)} sin(θ_i−θ_j) / Σ_k e^{β cos(θ_i−θ_k)}
        "usa":           θ̇_i = −(1/n) Σ_j e^{β cos(θ_i−θ_j)} sin(θ_i−θ_j)                 [GLPR]
        "usa-rescaled":  θ̇_i = −(1/n) Σ_j e^{β (cos(θ_i−θ_j) − 1)} sin(θ_i−θ_j)    [2410.06833]

    the angular velocities of ``SA(β)``, ``USA(β)`` and ``USA(β, time="rescaled")``. β = 0 is the
    Kuramoto model. The weights are e^{β(cos Δ − 1)} ≤ 1, which never overflow; "usa" restores
    the factor e^β afterwards. The states are angles in R (geometry "euclidean"): map with
    ``to_angles`` / ``from_angles``; no projection or renormalization is needed.

    exact=False  (default) cos Δ = c_i c_j + s_i s_j and Σ_j w_ij sin Δ_ij = s_i (W c)_i − c_i (W s)_i:
                 one exponential per pair, the precision of ``SA`` in the plane (velocities to
                 ~1e-16 absolute). Up to ``UNROLLED_N`` particles the sums over j are written out
                 term by term, elementwise arithmetic that XLA fuses into one vectorized loop over
                 the ensemble (the batched matrix products of larger n cost ≈ 3× more at n = 32).
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
        self.beta = as_beta(beta, field="Circle (its weights e^{β(cos Δ − 1)} assume β ≥ 0)")
        self.model = check_choice("model", model, KERNEL_MODELS)
        self.exact = bool(exact)

    def directions(self, x):
        """Angles (n, 1) as points (cos θ, sin θ) of the circle."""
        return from_angles(x)

    @property
    def in_angles(self) -> bool:
        return True

    @property
    def has_attention(self) -> bool:
        return True

    def attention_matrix(self, t, theta: Float[Array, "n 1"]) -> Float[Array, "n n"]:
        """A_ij = softmax_j(β cos(θ_i − θ_j)), the matrix of SA at the points (cos θ_i, sin θ_i)."""
        p = from_angles(theta)
        return jax.nn.softmax(self.beta.astype(p.dtype) * (p @ p.T), axis=-1)

    def drift(self, t, theta: Float[Array, "n 1"]) -> Float[Array, "n 1"]:
        th = theta[..., 0]
        beta = self.beta.astype(theta.dtype)
        total: Array | float  # the unrolled sum over j starts from 0
        ws: Array | float
        wc: Array | float
        if self.exact:
            delta = th[:, None] - th[None, :]
            w = jnp.exp(-2.0 * beta * jnp.sin(0.5 * delta) ** 2)
            pull = jnp.sum(w * jnp.sin(delta), axis=-1)
            total = jnp.sum(w, axis=-1)
        elif th.shape[0] <= UNROLLED_N:
            s, c = sincos(th)
            exp: Callable[[Array], Array]
            if theta.dtype == jnp.float32:
                # e^{β(cos Δ − 1)} = 2^{β log₂e (cos Δ − 1)} by ``exp2``: an evaluation 12% cheaper
                b, exp = beta * np.float32(1.0 / math.log(2.0)), exp2
            else:
                b, exp = beta, jnp.exp
            bc, bs = b * c, b * s  # three operations per exponent instead of four
            total = ws = wc = 0.0
            for j in range(th.shape[0]):
                w_j = exp(bc * c[j] + bs * s[j] - b)
                total, wc, ws = total + w_j, wc + w_j * c[j], ws + w_j * s[j]
            pull = s * wc - c * ws
        else:
            s, c = sincos(th)
            cs = jnp.stack([c, s], axis=-1)
            w = jnp.exp(beta * (cs @ cs.T - 1.0))
            wcs = w @ cs
            pull = cs[:, 1] * wcs[:, 0] - cs[:, 0] * wcs[:, 1]
            total = jnp.sum(w, axis=-1)
        if self.model == "sa":
            # the diagonal weight is 1, so the normalizer is ≥ 1
            velocity = -pull / total
        else:
            scale = jnp.exp(beta) if self.model == "usa" else 1.0
            velocity = -pull * (scale / th.shape[0])
        return velocity[:, None]

    def check(self, n: int, d: int, dtype) -> None:
        if d != 1:
            raise ValueError(
                f"Circle acts on angles of shape (n, 1), got d = {d}; convert points of the circle with to_angles(x)"
            )
        if self.model != "usa" or isinstance(self.beta, jax.core.Tracer):
            return
        beta_max = float(np.max(np.asarray(self.beta)))
        # headroom for the sum over n particles and a few Runge–Kutta stages
        if beta_max > math.log(float(jnp.finfo(dtype).max)) - math.log(n) - 8.0:
            raise ValueError(
                f"Circle(model='usa') at beta={beta_max:g} has velocities of order e^beta, which "
                f"overflow {jnp.dtype(dtype).name}; use model='usa-rescaled' (time t -> e^-beta t)"
            )
