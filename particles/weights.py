"""Random weight ensembles for the attention matrices Q, K, V, seeded and batched over members.

[GLPR] §6.3 Fig. 5 repeats the phase diagram of Fig. 3 with random weights; the authors' script
draws QᵀK Gaussian or GOE and V Gaussian, PSD or ±QᵀK. ``sample_weights`` draws one set
{Q, K, V} per ensemble member in one vmapped call; the result plugs into the fields as
``SA(beta, **w)``, and a leading member axis makes the weights per-member (``ensemble_axes``).

Scaling. Every Gaussian entry of Q, K (k×d) and of V, W (d×d) has variance 1/d, so the
operators have O(1) norms as d grows: a Ginibre matrix has spectral radius → 1 (circular law)
and operator norm → 2, a GOE matrix has its spectrum on [−2, 2] (semicircle), the PSD
V = GGᵀ/d has mean I and spectrum on [0, 4] (Marchenko–Pastur). Then β·sup⟨Qx, Ky⟩ over unit
x, y is O(β), as for Q = K = I, so the β axis of Fig. 5 means what it means in Fig. 3.
(For independent random unit x, y the inner product ⟨Qx, Ky⟩ itself is O(1/√d).)

Keys. Member m of a batch is drawn from ``jax.random.fold_in(key, m)``:
``sample_weights(key, d, e, members=M)[name][m] == sample_weights(fold_in(key, m), d, e)[name]``
for every M > m, so growing an ensemble never changes its first members. One draw is one
standard Gaussian vector ``jax.random.normal(key, (2kd + d²,))`` cut, in order, into A (k×d),
B (k×d) and C (d×d): Q = A/√d, K = B/√d, V = C/√d (Ginibre), W = (B + Bᵀ)/√(2d) (GOE),
V = CCᵀ/d (PSD). Ensembles drawn from one key therefore share their randomness: "ginibre" and
"ginibre-v-qk" have the same Q, K; "wigner-psd" and "wigner-v-qk" the same W.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import check_choice, check_int

__all__ = ["ENSEMBLES", "sample_weights", "member_keys"]

ENSEMBLES: dict[str, str] = {
    "identity": "Q = K = V = I (Q, K, V are None): the plain (SA) of [GLPR]",
    "ginibre": "Q, K (k×d) and V (d×d) independent Ginibre, i.i.d. N(0, 1/d) entries ([GLPR] Fig. 5(a))",
    "wigner-psd": "QᵀK = W a GOE matrix (Q = I, K = W), V = GGᵀ/d ⪰ 0 with G a d×d standard Gaussian "
    "([GLPR] Fig. 5(b))",
    "ginibre-v-qk": "Q, K Ginibre as in 'ginibre', V = QᵀK ([GLPR] Fig. 5(c))",
    "wigner-v-qk": "QᵀK = W a GOE matrix (Q = I, K = W), V = W: a gradient flow of E_β ([GLPR] Fig. 5(d))",
    "v-minus-qk": "Q, K Ginibre, V = −QᵀK (the repulsive counterpart of 'ginibre-v-qk')",
    "repulsive": "Q = K = I (None), V = −I: the energy E_β decreases ([GLPR] §3.3)",
}

# ensembles whose Q, K are square by construction (identity or Q = I, K = W)
_SQUARE_QK = ("identity", "wigner-psd", "wigner-v-qk", "repulsive")


def _key(key):
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return jax.random.key(int(key))
    return key


def member_keys(key, members: int):
    """The keys of members 0..members−1: ``fold_in(key, m)`` (int seeds are turned into keys first)."""
    members = check_int("members", members, 1)
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(_key(key), jnp.arange(members, dtype=jnp.uint32))


def _symmetric(a):
    # upper triangle mirrored: exactly symmetric, whatever fused multiply-adds did to the lower one
    return jnp.triu(a) + jnp.triu(a, 1).T


def _carve(z, d: int, k: int, ensemble: str) -> dict:
    """One member's {Q, K, V} from its standard Gaussian vector z of length 2kd + d²."""
    f = jnp.result_type(float)
    if ensemble == "identity":
        return dict(Q=None, K=None, V=None)
    if ensemble == "repulsive":
        return dict(Q=None, K=None, V=-jnp.eye(d, dtype=f))
    a = z[: k * d].reshape(k, d)
    b = z[k * d : 2 * k * d].reshape(k, d)
    c = z[2 * k * d :].reshape(d, d)
    if ensemble in ("wigner-psd", "wigner-v-qk"):
        # (B + Bᵀ)/√(2d): off-diagonal variance 2/(2d) = 1/d, diagonal (2B_ii)²/(2d) → 2/d
        w = _symmetric((b + b.T) / jnp.sqrt(2.0 * d))
        # V = C Cᵀ/d: Wishart, E V = I, Marchenko–Pastur spectrum on [0, 4]
        return dict(Q=None, K=w, V=_symmetric(c @ c.T / d) if ensemble == "wigner-psd" else w)
    # Ginibre: entries N(0, 1/d), so Q x has length ≈ √(k/d) for unit x
    q, kmat = a / jnp.sqrt(d), b / jnp.sqrt(d)
    if ensemble == "ginibre":
        return dict(Q=q, K=kmat, V=c / jnp.sqrt(d))
    qk = q.T @ kmat
    return dict(Q=q, K=kmat, V=qk if ensemble == "ginibre-v-qk" else -qk)


# two compiled pieces: the Gaussians depend on (members, size) only, so all ensembles of one
# (d, k) share one (slow to compile) random-bit generator; carving them compiles fast
@functools.partial(jax.jit, static_argnames=("members", "size"))
def _gaussians(key, *, members, size):
    f = jnp.result_type(float)
    if members is None:
        return jax.random.normal(key, (size,), f)
    return jax.vmap(lambda km: jax.random.normal(km, (size,), f))(member_keys(key, members))


@functools.partial(jax.jit, static_argnames=("d", "k", "ensemble"))
def _carve_all(z, *, d, k, ensemble):
    if z.ndim == 1:
        return _carve(z, d, k, ensemble)
    return jax.vmap(lambda zm: _carve(zm, d, k, ensemble))(z)


def sample_weights(
    key, d: int, ensemble: str, *, members: int | None = None, k: int | None = None, dtype=None
) -> dict[str, Float[Array, "... r d"] | None]:
    """Random attention weights {"Q", "K", "V"} from one of the ``ENSEMBLES``.

    key        a ``jax.random`` key or an int seed
    d          dimension of the particles (≥ 2)
    ensemble   a name in ``ENSEMBLES`` (see the module docstring for the scalings)
    members    None: one draw, Q, K of shape (k, d), V (d, d). An int M: M independent draws
               stacked on a leading axis, (M, k, d) and (M, d, d); member m is the draw of
               ``fold_in(key, m)``. Entries that are None (the identity) are shared by all members.
    k          rows of Q and K (default d); only the Ginibre ensembles allow k ≠ d
    dtype      float dtype of the arrays (default float64); draws are made in float64 and
               rounded, so a float32 draw is the float64 draw rounded.

    ``SA(beta, **sample_weights(key, d, "ginibre", members=B))`` is a field with B members.
    """
    check_choice("ensemble", ensemble, tuple(ENSEMBLES))
    d = check_int("d", d, 2)
    if members is not None:
        members = check_int("members", members, 1)
    if k is None:
        k = d
    k = check_int("k", k, 1)
    if k != d and ensemble in _SQUARE_QK:
        raise ValueError(
            f"ensemble {ensemble!r} has square Q, K (identity or Q = I, K = W), so k must be "
            f"d = {d}; got k = {k}. Rectangular Q, K (k×d) need a Ginibre ensemble"
        )
    dt = jnp.dtype(jnp.result_type(float) if dtype is None else dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(f"dtype must be a floating type such as 'float32' or 'float64', got {dt.name}")
    z = _gaussians(_key(key), members=members, size=2 * k * d + d * d)
    out = _carve_all(z, d=d, k=k, ensemble=ensemble)
    return {name: None if out[name] is None else out[name].astype(dt) for name in ("Q", "K", "V")}
