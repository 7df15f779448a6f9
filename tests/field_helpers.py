"""Test fields shared by the solvers' tests."""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp

import attnflow as af


class BlowsUp(af.Field):
    """SA at β, except that members with β > 2 have an infinite drift after t = 1."""

    beta: jax.Array
    event_ndim: ClassVar[dict[str, int]] = {"beta": 0}

    def __init__(self, beta):
        self.beta = jnp.asarray(beta, dtype=float)

    def drift(self, t, x):
        return jnp.where((t > 1.0) & (self.beta > 2.0), jnp.inf, af.SA(self.beta).drift(t, x))
