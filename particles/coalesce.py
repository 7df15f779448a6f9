"""Coalesced clusters: tokens that have come together move as one.

Inside a tight cluster of m tokens the attention field contracts the cluster at a rate of order
e^{β} m/n (USA in [GLPR]'s time) or β-independent O(1) (SA). For USA at large β this rate, not the
motion of the clusters themselves, bounds the step of every explicit method: at β = 9, n = 32 an
adaptive Runge–Kutta method takes ~40 000 steps over t ≤ 30 to hold a cluster that is already a
point to rounding. ``Coalesced`` removes that mode: each token i is represented by the first token
r(i) within ½‖x_i − x_r‖² ≤ ε of it, the field is evaluated with every token placed at its
representative, and every token moves with its representative's (projected) velocity:

    ẋ_i = P_{x_r(i)}( drift(t, X_r)_{r(i)} ),   X_r = (x_r(1), …, x_r(n)).

Merges are kept: after every step the solvers place each merged token exactly at its
representative (``settle``), so the pair is one point from then on and never splits again. Without
this hysteresis a pair hovering at the threshold (an explicit method holds the gap of two collapsed
sub-clusters at its tolerance level, ~1e-11 at rtol 1e-6) drifts back and forth across it, the
field jumps by O(e^β √ε m/n) each time, and an adaptive method takes thousands of rejected steps
there. Choose ε above that tolerance level (1e-10 for rtol 1e-6 in float64) and far below the
statistics' thresholds δ.

A coalesced cluster is then one particle of mass m; its contraction, exactly zero for a point, is
gone from the Jacobian. Tokens farther apart than √(2ε) see the unchanged field, so the change is
confined to pairs that the exact flow would bring closer still: each moves by at most √(2ε) when it
joins. Statistics at thresholds δ ≫ ε are unaffected by construction.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, Int

from .checks import check_real
from .fields import Field
from .sphere import project, small_d_gaps

__all__ = ["Coalesced", "representatives", "settle"]


def representatives(x: Float[Array, "n d"], eps) -> Int[Array, " n"]:
    """r(i) = min{j : ½‖x_i − x_j‖² ≤ ε} (i itself when no earlier token is that close)."""
    n = x.shape[-2]
    # the first index as a min over j (an argmax is a two-operand reduction, ~20× slower on CPU)
    return jnp.min(jnp.where(small_d_gaps(x) <= eps, jnp.arange(n), n), axis=-1)


def settle(x: Float[Array, "n d"], eps) -> Float[Array, "n d"]:
    """Every token placed at its representative r(i): merged tokens become equal and stay so."""
    return x[representatives(x, eps)]


def settler(field):
    """For the solvers: the map settling every member of a batch (members, n, d) after a step.

    The identity unless the field coalesces (``coalesce_eps`` not None); then merged tokens are placed at their
    representatives (found on the tokens' directions: points of the sphere, or angles of
    ``Circle`` seen as points of the circle), so that a merge is kept from step to step.
    """
    eps = field.coalesce_eps
    if eps is None:
        return lambda x: x
    return jax.vmap(lambda y: y[representatives(field.directions(y), eps)])


class Coalesced(Field):
    """Tokens within ½‖x_i − x_j‖² ≤ ``eps`` of an earlier token move with it (module docstring).

    ``inner`` is any field on the sphere (SA, USA, sums, masks, weights...), or ``Circle`` (SA/USA
    in angles: tokens merge when 1 − cos(θ_i − θ_j) ≤ ε, the same ½‖x_i − x_j‖² of their points,
    and a merged token takes its representative's angle). β, validation and ensembles come from
    ``inner``.
    """

    inner: Field
    eps: float = eqx.field(static=True)

    def __init__(self, inner: Field, eps: float = 1e-10):
        if not isinstance(inner, Field):
            raise ValueError(f"Coalesced wraps an attnflow field such as af.USA(beta), got {type(inner).__name__}")
        if inner.geometry != "sphere" and not inner.in_angles:
            raise ValueError(
                f"Coalesced needs tokens on the sphere (or Circle's angles); {type(inner).__name__} lives in R^d"
            )
        self.inner = inner
        self.eps = check_real("eps", eps, 0.0, strict_min=True)

    @property
    def beta(self):
        """β of the inner field."""
        return self.inner.beta

    @property
    def geometry(self) -> str:  # type: ignore[override]  # the wrapped fields'; a class constant elsewhere
        """The inner field's: "sphere", or "euclidean" for ``Circle``'s angles."""
        return self.inner.geometry

    def directions(self, x):
        return self.inner.directions(x)

    def inner_fields(self) -> tuple[Field, ...]:
        return (self.inner,)

    @property
    def in_angles(self) -> bool:
        """The inner field's: True around ``Circle``."""
        return self.inner.in_angles

    @property
    def coalesce_eps(self) -> float:
        """ε, read by the solvers, which also settle merged tokens onto their representatives after each step."""
        return self.eps

    def settled_field(self) -> Field:
        """The inner field: on settled states (x_i = x_r(i)) the representatives need no search."""
        return self.inner

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        rep = representatives(self.inner.directions(x), self.eps)
        return self.inner.drift(t, x[rep])[rep]

    def __call__(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        # projected at the representative: a token a little off its representative would
        # otherwise be pulled onto it at the stiff rate this wrapper exists to remove
        rep = representatives(self.inner.directions(x), self.eps)
        xr = x[rep]
        velocity = self.inner.drift(t, xr)
        return (project(xr, velocity) if self.inner.geometry == "sphere" else velocity)[rep]

    def check(self, n, d, dtype):
        self.inner.check(n, d, dtype)
