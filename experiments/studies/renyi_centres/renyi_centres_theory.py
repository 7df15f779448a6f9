"""Rényi centres of a causally masked configuration (Karagodin, Polyanskiy, Rigollet, arXiv 2411.04990 §5).

Under a causal mask token i attends only to tokens j ≤ i, so the order of the tokens matters. Taken in
that order, token i is a **Rényi centre** when its geodesic distance to every earlier centre exceeds δ
(a greedy packing: the centres are the cars of Rényi's random parking problem when the tokens are
uniform), and a **strong Rényi centre** when its distance to every earlier token exceeds δ. A strong
centre feels no earlier token closer than δ, whose weights are at most e^{−β(1 − cos δ)} times its own,
so it stays put for a long time (their Lemma 5.1), and the tokens after it gather around it; with
δ = 4β^{−1/2} that factor is e^{−8 + O(1/β)}. The centres are the candidates for the metastable clusters.

Rényi's parking constant c_R = 0.747597920… is the density of cars of length δ parked at random until
no gap is left; on a circle of circumference L the mean number of cars at that point is c_R L/δ up to
terms that vanish faster than any power of δ/L (the first car leaves an interval of length L − δ for
the others, whose mean count is c_R (L − δ)/δ + c_R − 1). For tokens uniform on the circle, the number
of Rényi centres therefore tends to c_R · 2π/δ as n → ∞ (≈ 9.39 at β = 64, δ = 1/2).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float

from ....particles.sphere import normalize

__all__ = ["RENYI_PARKING", "renyi_centres", "parking_count"]

RENYI_PARKING = 0.7475979202534114
"""Rényi's parking constant c_R = ∫_0^∞ exp(−2 ∫_0^t (1 − e^{−u})/u du) dt."""


def parking_count(delta: float, circumference: float = 2.0 * math.pi) -> float:
    """c_R · circumference / δ: the mean number of Rényi centres of infinitely many uniform tokens on a
    circle (in the limit of many cars; its corrections vanish faster than any power of δ)."""
    return RENYI_PARKING * circumference / delta


def renyi_centres(x: Float[Array, "... n d"], delta) -> tuple[Bool[Array, "... n"], Bool[Array, "... n"]]:
    """(centres, strong centres): boolean masks over the tokens, in token order, at geodesic threshold δ.

    Token i is a centre when arccos⟨x_i, x_c⟩ > δ for every earlier centre c, a strong centre when
    arccos⟨x_i, x_j⟩ > δ for every earlier token j (token 0 is both). Directions x_i/‖x_i‖ are compared.
    O(n²) per configuration; leading axes are batch axes.
    """
    x = normalize(jnp.asarray(x))
    n = x.shape[-2]
    limit = jnp.cos(jnp.asarray(delta, x.dtype))

    def one(y):
        far = (y @ y.T) < limit  # distance > δ
        earlier = jnp.tril(jnp.ones((n, n), bool), k=-1)  # j < i
        strong = jnp.all(far | ~earlier, axis=1)

        def step(is_centre, i):
            near_centre = jnp.any(is_centre & earlier[i] & ~far[i])
            return is_centre.at[i].set(~near_centre), None

        centres, _ = jax.lax.scan(step, jnp.zeros(n, bool), jnp.arange(n))
        return centres, strong

    flat = x.reshape((-1,) + x.shape[-2:])
    centres, strong = jax.vmap(one)(flat)
    return centres.reshape(x.shape[:-1]), strong.reshape(x.shape[:-1])
