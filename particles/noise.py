"""Noisy transformers: any sphere field plus independent Brownian motion on each particle.

arXiv 2512.01868 §7 (docs/model.md §1.9):

    dX_i = P_{X_i}( drift_i(X) ) dt + σ P_{X_i} ∘ dW_i,     σ = √(2/κ),

with W_1, ..., W_n independent Brownian motions in R^d and ∘ the Stratonovich product. With
drift 0 each X_i is Brownian motion on S^{d-1}, the diffusion with generator (σ²/2) Δ_{S^{d-1}};
so E⟨X_i(t), X_i(0)⟩ = e^{−(d−1)σ²t/2}. At β = 0 (noisy Kuramoto) the uniform law is the unique
stationary state for κ ≤ 2, and a synchronized state appears beyond κ = 2.

A ``Noisy`` field is a PyTree like every other field: its velocity ``field(t, x)`` is the
deterministic part P_x drift (what an ODE solver or a statistic sees), and ``sigma`` is a traced
leaf, so a 1-D ``sigma`` is an ensemble over noise levels. ``simulate`` recognizes noisy fields
(``noise_sigma``) and integrates them with the stochastic scheme of ``solvers/stochastic.py``.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import as_parameter
from .fields import Field


def _as_sigma(value) -> Array:
    return as_parameter("sigma", value)


class Noisy(Field):
    """A sphere field with Brownian noise of strength σ on every particle, arXiv 2512.01868 §7:

        dX_i = P_{X_i}( inner.drift(t, X)_i ) dt + σ P_{X_i} ∘ dW_i      (Stratonovich)

    ``sigma`` (≥ 0) may be a 1-D array: one ensemble member per noise level. ``Noisy.from_kappa``
    takes the inverse temperature κ of the paper instead (σ = √(2/κ)). ``inner`` is any field on
    the sphere (``SA``, ``USA``, a ``Sum``...); its leaves keep their own ensemble axes.
    """

    inner: Field
    sigma: Float[Array, ""]
    event_ndim: ClassVar[dict[str, int]] = {"sigma": 0}

    def __init__(self, inner: Field, sigma=1.0):
        if not isinstance(inner, Field):
            raise ValueError(f"Noisy wraps an attnflow field such as af.SA(beta), got {type(inner).__name__}")
        if inner.geometry != "sphere":
            raise ValueError(f"Noisy adds Brownian motion on the sphere; {type(inner).__name__} lives in R^d")
        self.inner = inner
        self.sigma = _as_sigma(sigma)

    @classmethod
    def from_kappa(cls, inner: Field, kappa) -> Noisy:
        """The noisy field with σ = √(2/κ) (κ > 0; κ = inf means no noise), as in arXiv 2512.01868 §7."""
        if isinstance(kappa, jax.core.Tracer):
            return cls(inner, jnp.sqrt(2.0 / kappa))
        arr = np.asarray(kappa, dtype=float)
        if np.any(np.isnan(arr)) or np.any(arr <= 0):
            raise ValueError(f"kappa must be > 0 (inf for no noise), got {arr.tolist()}")
        return cls(inner, np.sqrt(2.0 / arr))

    @property
    def kappa(self):
        """κ = 2/σ² (inf when σ = 0)."""
        return 2.0 / self.sigma**2

    @property
    def beta(self):
        """β of the inner field (for statistics such as the energy)."""
        return self.inner.beta

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.inner.drift(t, x)

    def check(self, n, d, dtype):
        self.inner.check(n, d, dtype)

    def inner_fields(self) -> tuple[Field, ...]:
        return (self.inner,)

    @property
    def noise_sigma(self):
        """σ, or √(σ² + σ_inner²) when the inner field is noisy too (independent noises add in quadrature)."""
        inner = self.inner.noise_sigma
        return self.sigma if inner is None else jnp.sqrt(self.sigma**2 + inner**2)

    def deterministic(self) -> Field:
        """The inner field without its own noise."""
        return self.inner.deterministic()


def noise_sigma(field: Field):
    """The total noise level σ of a field, or None when it is deterministic (``Field.noise_sigma``).

    Independent Brownian motions add in quadrature: a ``Sum`` with noisy terms σ_1, σ_2, or
    ``Noisy(Noisy(f, σ_1), σ_2)``, diffuses with σ = √(σ_1² + σ_2²). Whether the result is None
    depends only on the structure of the field, so it can be decided outside of compiled code.
    """
    return field.noise_sigma


def deterministic(field: Field) -> Field:
    """The field without its noise: every ``Noisy`` layer replaced by the field it wraps (``Field.deterministic``).

    Its velocity equals the noisy field's (both are P_x drift); splitting schemes hand it to a
    deterministic method, which then sees the inner structure (a ``Sum`` of terms, say).
    """
    return field.deterministic()
