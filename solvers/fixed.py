"""Fixed-step integrators that keep every particle on the sphere.

Each method is a stateless PyTree with ``order`` and a pure ``step(field, t, x, h)`` mapping
an (n, d) configuration on (S^{d-1})^n to the configuration one step of size h later.
"""

from __future__ import annotations

from typing import ClassVar

import equinox as eqx

from ..particles.sphere import normalize, rotate
from .fusion import materialized


class FixedStep(eqx.Module):
    """A one-step method of fixed step size."""

    order: ClassVar[int]
    name: ClassVar[str]

    def step(self, field, t, x, h):
        raise NotImplementedError


def _retract(field, t, x):
    """Back onto the sphere for fields that live there; fields in R^d are left alone.

    The update is written to memory first: fused with the sums that produce it, the
    normalization ran 3× slower at d = 2 on CPU (``fusion.materialized``)."""
    return normalize(materialized(t, x)) if field.geometry == "sphere" else x


class Euler(FixedStep):
    """Explicit Euler with the projected velocity, then renormalize: x ← (x + h P_x v) / ‖·‖,
    v = drift(t, x). Order 1.

    Not the authors' scheme: their scripts step with the unprojected v (``RenormalizedEuler``),
    which on the sphere is this step with h replaced by h / (1 + h⟨x, v⟩) (docs/numerics.md).
    For fields in R^d (v is the velocity, nothing is renormalized) the two steps are the same.
    In angles (``Circle``) the step is θ ← θ + h θ̇, the geodesic step of ``LieEuler``.
    """

    order: ClassVar[int] = 1
    name: ClassVar[str] = "euler"

    def step(self, field, t, x, h):
        return _retract(field, t, x + h * field(t, x))


class RenormalizedEuler(FixedStep):
    """The authors' scheme: explicit Euler with the unprojected velocity, then renormalize,
    x ← (x + h v) / ‖·‖ with v = drift(t, x), the velocity before layer norm. Order 1.

    This is the update of the phase-diagram script of [GLPR] (``benchmarks/baseline.py``) and of
    the simuformer code, Post-LN's x ← Norm(x + h Attn(x)) read literally. Writing
    v = P_x v + ⟨x, v⟩x on the sphere, x + h v = (1 + h⟨x, v⟩)(x + h_eff P_x v) with
    h_eff = h / (1 + h⟨x, v⟩): the step of ``Euler`` with a shorter step wherever ⟨x, v⟩ > 0 (for SA
    ⟨x_i, v_i⟩ = Σ_j A_ij⟨x_i, x_j⟩ → 1 in a cluster, so 9% shorter at h = 0.1). Both are first order
    and differ by O(h) over a fixed time.

    For fields in R^d (geometry "euclidean": Pre-LN, peri-LN, no layer norm) the drift is the whole
    velocity and nothing is renormalized: the step is plain Euler, x ← x + h v, that of ``Euler``.
    In angles (``Circle``) the radial part ⟨x, v⟩ is gone, so the scheme cannot be written there:
    ``simulate`` refuses such a field (the method's ``angles`` flag is False) and ``circle = 'auto'``
    keeps the points.
    """

    order: ClassVar[int] = 1
    name: ClassVar[str] = "renormalized_euler"

    def step(self, field, t, x, h):
        return _retract(field, t, x + h * field.drift(t, x))


class RK4(FixedStep):
    """Classical fourth-order Runge–Kutta on the projected field, then renormalize. Order 4.

    The field's projection divides by ‖x‖², so the stages off the sphere still move
    tangentially; renormalizing the result changes it by O(h⁵) and keeps the order.
    """

    order: ClassVar[int] = 4
    name: ClassVar[str] = "rk4"

    def step(self, field, t, x, h):
        k1 = field(t, x)
        k2 = field(t + 0.5 * h, x + 0.5 * h * k1)
        k3 = field(t + 0.5 * h, x + 0.5 * h * k2)
        k4 = field(t + h, x + h * k3)
        return _retract(field, t, x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4))


class LieEuler(FixedStep):
    """Lie–Euler: follow the great circle, x ← exp_x(h f(x)). Order 1, on the sphere by construction."""

    order: ClassVar[int] = 1
    name: ClassVar[str] = "lie_euler"

    def step(self, field, t, x, h):
        # the rotation is exact; normalizing only stops rounding errors from accumulating
        return normalize(rotate(x, field(t, x), x, h))


# Crouch–Grossman coefficients of order 3 (Owren & Marthinsen, BIT 1999): they satisfy
# the classical order-3 conditions and the extra one from non-commuting frozen flows.
_CG3_A = ((), (3.0 / 4.0,), (119.0 / 216.0, 17.0 / 108.0))
_CG3_B = (13.0 / 51.0, -2.0 / 3.0, 24.0 / 17.0)
_CG3_C = (0.0, 3.0 / 4.0, 17.0 / 24.0)


def _compose(frozen, x, h, weights):
    """exp(h w_s A_s) ⋯ exp(h w_1 A_1) x, the rightmost factor applied first."""
    for (y, f), w in zip(frozen, weights):
        x = rotate(y, f, x, h * w)
    return x


class CG3(FixedStep):
    """Crouch–Grossman method of order 3 with the rotation-group action on each particle.

    Stage i sits at Y_i = exp(h a_{i,i−1} A_{i−1}) ⋯ exp(h a_{i1} A_1) x with frozen generators
    A_j = F_j Y_jᵀ − Y_j F_jᵀ, F_j = f(t + c_j h, Y_j); the step is the same composition with
    weights b. Every factor is an exact rotation (``sphere.rotate``), so particles stay on the
    sphere to rounding error whatever the step size.
    """

    order: ClassVar[int] = 3
    name: ClassVar[str] = "cg3"

    def step(self, field, t, x, h):
        frozen = []
        for a_row, c in zip(_CG3_A, _CG3_C):
            y = _compose(frozen, x, h, a_row)
            frozen.append((y, field(t + c * h, y)))
        # the composition is an exact rotation; normalizing only stops rounding errors from accumulating
        return normalize(_compose(frozen, x, h, _CG3_B))


class LieTrotter(FixedStep):
    """Lie–Trotter splitting of a sum of fields, one RK4 sub-step per term. Order 1.

    For f = f_1 + ⋯ + f_K (a ``Sum``, e.g. attention + feed-forward) one step is
    x ← Φ^{K}_h ∘ ⋯ ∘ Φ^{1}_h (x), with Φ^{k}_h an RK4 step of size h of ẋ = P_x drift_k(t, x)
    alone, renormalized: the attention layer, then the feed-forward layer, as in the discrete
    transformer ([GLPR] after (2.8)). The splitting error is O(h) per unit time from the
    commutators [f_k, f_l]; each sub-step's own O(h⁴) error is negligible beside it. A field
    that is not a ``Sum`` has one term, and the step is plain RK4.
    """

    order: ClassVar[int] = 1
    name: ClassVar[str] = "lie_trotter"

    def step(self, field, t, x, h):
        # every term sees the same time interval [t, t + h]: the layers share one "depth" index
        for term in field.summands():
            x = RK4().step(term, t, x, h)
        return x
