"""Where XLA must not fuse: arrays written to memory before the work that reads them many times.

XLA fuses cheap elementwise producers into their consumers. That is right when each value is
read once, and costly when it is read many times or read across the short minor axis of a
configuration (n, d) with d = 2: the n × n pair statistics would recompute the dense
interpolant inside every pair, and a normalization fused with the sum that produced its input
runs as a scalar loop (measured on XLA's CPU backend: a step's update, normalized, took 3×
longer fused than written first; the same for the interpolant at a save time).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def materialized(t, x: jax.Array) -> jax.Array:
    """``x`` written to memory before whatever reads it.

    The CPU backend drops ``lax.optimization_barrier`` before fusing; a conditional is a boundary
    fusion does not cross. Its predicate is a time shared by the members (vmap would turn a
    predicate that differs between members into a select, which fuses), and both branches
    return x.
    """
    return jax.lax.cond(jnp.isfinite(t), lambda y: y, lambda y: y * 1.0, x)
