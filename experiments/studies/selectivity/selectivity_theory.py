"""One query among n keys: when attention averages and when it selects (arXiv 2605.08505).

A query q and n i.i.d. uniform keys k_1, …, k_n on S^{d−1}; one softmax attention layer with V = I gives

    y(q) = Σ_j w_j k_j,      w_j = e^{β⟨q, k_j⟩} / Σ_l e^{β⟨q, k_l⟩}.

With g_j = ⟨q, k*⟩ − ⟨q, k_j⟩ ≥ 0 the gaps to the nearest key k* (the largest ⟨q, k_j⟩), the weight on
k* is 1/T(β), T(β) = Σ_j e^{−β g_j} (its own term is 1). T falls from n at β = 0 to the number of
nearest keys as β → ∞, so the selectivity threshold of q,

    β*_n(q) = min{β : w_{k*} ≥ 1/2} = the root of log T(β) = log 2,

is unique; log T is convex and decreasing, and Newton's iteration from β = 0 climbs to the root
without overshooting it (``selectivity_threshold``). Near q the keys are a Poisson process of
intensity n/|S^{d−1}| in the tangent space and g_j ≈ (θ_j² − θ_1²)/2 (θ: the angle to q), so the gaps
that matter are of order n^{−2/(d−1)} and β*_n ≍ n^{2/(d−1)} (the paper's critical scale).

Below the threshold the output is a local average of the keys around q. For keys of density ρ the
average over the kernel e^{β⟨q,k⟩} is, for large n,

    y → ∫ e^{β⟨q,k⟩} k ρ(k) dk / ∫ e^{β⟨q,k⟩} ρ(k) dk ≈ A_d(β) q + (1/β) ∇_S log ρ(q),

A_d(β) = I_{d/2}(β)/I_{d/2−1}(β) ≈ 1 − (d − 1)/(2β): a shrinkage towards the origin and a step up the
gradient of log ρ, the step of the backward heat equation ∂_t ρ = −Δρ/β that the paper describes
(``mean_field_output``; exact for a von Mises–Fisher density ρ ∝ e^{κ⟨μ,k⟩}, whose average is
A_d(|βq + κμ|) times the unit vector of βq + κμ). For n uniform keys the output fluctuates around
A_d(β) q: by the delta method its part tangent to the sphere at q has mean 0 and

    n E|P_q y|² → E[e^{2β⟨q,k⟩}(1 − ⟨q,k⟩²)] / E[e^{β⟨q,k⟩}]² = (d − 1) A_d(2β)/(2β) · M_d(2β)/M_d(β)²,

M_d(κ) = Γ(d/2) (2/κ)^{d/2−1} I_{d/2−1}(κ) = E[e^{κ⟨q,k⟩}] (``local_average_spread``), valid while the
keys that carry the weight, about n β^{−(d−1)/2}, are many. Above the threshold the output is the nearest key.

Every pass over the keys goes block by block (``block`` keys at a time, the last block padded and
masked), so the memory is O(queries × block + n d) for any n; the logits are gaps from the exact
maximum, so no exponential exceeds 1.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from ....particles.checks import check_int, check_real
from ....particles.errors import ConvergenceError

__all__ = [
    "critical_scale",
    "cap_constant",
    "limit_thresholds",
    "local_average_norm",
    "local_average_spread",
    "mean_field_output",
    "nearest_keys",
    "selectivity_threshold",
    "attention_output",
    "smallest_gaps",
    "KEY_BLOCK",
]

KEY_BLOCK = 1024
"""Keys per block of every pass: queries × KEY_BLOCK logits exist at a time (2 MiB for 256 queries). One
compiled pass serves every context length (the count of blocks is traced), so a short context still
reads one whole block; longer blocks gain nothing measurable on a CPU at 10⁶ keys."""


def critical_scale(n, d: int):
    """n^{2/(d−1)}: the order of the selectivity threshold β*_n of n uniform keys on S^{d−1}."""
    d = check_int("d", d, 2)
    return np.asarray(n, dtype=float) ** (2.0 / (d - 1))


def cap_constant(d: int) -> float:
    """c_d: the fraction of S^{d−1} within 1 − ⟨q, k⟩ ≤ s is c_d s^{(d−1)/2} (1 + O(s)),
    c_d = 2^{(d−3)/2} Γ(d/2) / (√π Γ((d+1)/2)) (c_3 = 1/2 exactly)."""
    from scipy import special  # here: scipy costs a third of a second to import

    d = check_int("d", d, 2)
    return float(2.0 ** ((d - 3) / 2) * np.exp(special.gammaln(d / 2) - special.gammaln((d + 1) / 2)) / np.sqrt(np.pi))


def limit_thresholds(d: int, draws: int = 4000, *, points: int = 2000, seed: int = 0) -> np.ndarray:
    """``draws`` samples of b*, the n → ∞ law of β*_n(q) (c_d n)^{−2/(d−1)} (``cap_constant``): with S_1 < S_2 < …
    a Poisson process of intensity d(r^{(d−1)/2}) on [0, ∞) (the scaled 1 − ⟨q, k⟩ of the nearest keys),
    b* solves Σ_{j≥2} e^{−b*(S_j − S_1)} = 1. Each draw keeps its first ``points`` points; the expected sum of
    the terms beyond must be below 1e-9 (ConvergenceError otherwise: d ≤ 6 with the default ``points``)."""
    from scipy import special  # here: scipy costs a third of a second to import

    d = check_int("d", d, 2)
    draws, points = check_int("draws", draws, 1), check_int("points", points, 3)
    rng = np.random.default_rng(seed)
    s = np.cumsum(rng.exponential(size=(draws, points)), axis=1) ** (2.0 / (d - 1))
    gaps = s[:, 1:] - s[:, :1]
    # the root for the first 8 terms is a lower bound (fewer terms, smaller sum): Newton starts there
    b = _newton_from_below(gaps[:, :8], np.zeros(draws))
    b = _newton_from_below(gaps, b)
    a = (d - 1) / 2.0
    tail = np.exp(b * s[:, 0] + special.gammaln(a)) * a * b**-a * special.gammaincc(a, b * s[:, -1])
    if np.max(tail) > 1e-9:
        raise ConvergenceError(
            f"limit_thresholds: the sum over {points} points per draw has not converged for d = {d}: the terms "
            f"beyond miss {np.max(tail):.1e} of it (more than 1e-9); pass more points"
        )
    return b


def _newton_from_below(gaps, b):
    """Newton on the convex, decreasing log Σ_j e^{−b g_j} = 0 from below the root: monotone, never past it."""
    for _ in range(200):
        e = np.exp(-b[:, None] * gaps)
        t, g_sum = e.sum(axis=1), (gaps * e).sum(axis=1)
        step = np.maximum(np.log(t), 0.0) * t / g_sum
        b = b + step
        if np.all(step <= 1e-13 * b):
            return b
    raise ConvergenceError(
        f"limit_thresholds: Newton's iteration did not converge in 200 steps (largest relative step "
        f"{float(np.max(step / np.maximum(b, 1e-300))):.3g}, tolerance 1e-13)"
    )


def local_average_norm(beta, d: int):
    """A_d(β) = I_{d/2}(β)/I_{d/2−1}(β): the length of ∫ e^{β⟨q,k⟩} k dσ(k) / ∫ e^{β⟨q,k⟩} dσ(k) for the
    uniform law σ on S^{d−1} (the mean resultant length of a von Mises–Fisher law), ≈ 1 − (d−1)/(2β)."""
    from scipy import special  # here: scipy costs a third of a second to import

    d = check_int("d", d, 2)
    beta = np.asarray(beta, dtype=float)
    nu = d / 2.0 - 1.0
    # the scaled Bessel functions cancel e^β: no overflow at any β; β → 0 gives β/d
    small = beta < 1e-8
    safe = np.where(small, 1.0, beta)
    return np.where(small, beta / d, special.ive(nu + 1.0, safe) / special.ive(nu, safe))


def local_average_spread(beta, d: int):
    """n E|P_q y|² as n → ∞ for n uniform keys on S^{d−1} at a fixed β (module docstring): the tangent
    fluctuation of the local average, (d − 1)/d at β = 0 and ≈ (d − 1)/2 · Γ(d/2)^{−1} (β/4)^{(d−3)/2}/√π · …
    for large β (its exact value is a ratio of scaled Bessel functions, finite for every β)."""
    from scipy import special  # here: scipy costs a third of a second to import

    d = check_int("d", d, 2)
    beta = np.asarray(beta, dtype=float)
    nu = d / 2.0 - 1.0
    small = beta < 1e-8
    safe = np.where(small, 1.0, beta)
    # M(2β)/M(β)² = β^ν I_ν(2β) / (Γ(d/2) 4^ν I_ν(β)²); the scaled Bessel functions cancel e^{2β}
    log_ratio = nu * np.log(safe / 4.0) - special.gammaln(d / 2.0)
    ratio = np.exp(log_ratio) * special.ive(nu, 2.0 * safe) / special.ive(nu, safe) ** 2
    value = (d - 1) * local_average_norm(2.0 * safe, d) / (2.0 * safe) * ratio
    return np.where(small, (d - 1) / d, value)


def mean_field_output(q, beta: float, kappa: float = 0.0, mu=None) -> np.ndarray:
    """The n → ∞ output of one layer (V = I) at a query q for keys of von Mises–Fisher density
    ρ(k) ∝ e^{κ⟨μ,k⟩} (κ = 0: uniform): A_d(r) (βq + κμ)/r with r = |βq + κμ|.

    Its part tangent to the sphere at q is κ A_d(r) P_q μ / r ≈ (1/β) ∇_S log ρ(q) for β ≫ κ."""
    q = np.asarray(q, dtype=float)
    beta = check_real("beta", beta, 0.0)
    kappa = check_real("kappa", kappa, 0.0)
    u = beta * q + (0.0 if mu is None else kappa * np.asarray(mu, dtype=float))
    r = np.linalg.norm(u, axis=-1, keepdims=True)
    return local_average_norm(r, q.shape[-1]) * u / np.where(r > 0, r, 1.0)


def _padded(keys, block: int):
    """The keys padded with zero rows to a whole number of blocks."""
    n = keys.shape[0]
    return jnp.zeros((-(-n // block) * block, keys.shape[1]), keys.dtype).at[:n].set(keys)


def _over_blocks(step, init, keys, count, block: int):
    """Fold ``step(carry, k, valid)`` over the blocks of the first ``count`` keys (``count`` traced, so
    contexts of every length share one compiled program); ``valid`` masks the keys past ``count``."""

    def body(b, carry):
        k = jax.lax.dynamic_slice_in_dim(keys, b * block, block)
        valid = b * block + jnp.arange(block) < count
        return step(carry, k, valid)

    return jax.lax.fori_loop(0, (count + block - 1) // block, body, init)


def _prepare(queries, keys, count, block):
    queries, keys = jnp.asarray(queries), jnp.asarray(keys)
    if queries.ndim != 2 or keys.ndim != 2 or queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries and keys must be (m, d) and (n, d) arrays of the same d, got {queries.shape} and {keys.shape}"
        )
    count = keys.shape[0] if count is None else check_int("count", count, 2, keys.shape[0])
    if count < 2:
        raise ValueError(f"selectivity needs n ≥ 2 keys, got {count}")
    block = min(check_int("block", block, 8), -(-keys.shape[0] // 8) * 8)
    return queries, _padded(keys, block), jnp.asarray(count, jnp.int32), block


@functools.partial(jax.jit, static_argnames=("block",))
def _nearest(queries, keys, count, *, block):
    def step(carry, k, valid):
        best, index, b = carry
        s = jnp.where(valid[None, :], queries @ k.T, -jnp.inf)
        j = jnp.argmax(s, axis=1)
        top = jnp.take_along_axis(s, j[:, None], axis=1)[:, 0]
        better = top > best
        return jnp.where(better, top, best), jnp.where(better, (b * block + j).astype(index.dtype), index), b + 1

    m = queries.shape[0]
    init = (jnp.full(m, -jnp.inf, queries.dtype), jnp.zeros(m, jnp.int32), jnp.int32(0))
    best, index, _ = _over_blocks(step, init, keys, count, block)
    return best, index


def nearest_keys(
    queries, keys, count: int | None = None, *, block: int = KEY_BLOCK
) -> tuple[Float[Array, " m"], Int[Array, " m"]]:
    """(⟨q, k*⟩, the index of k*) for every query: its nearest key among the first ``count`` keys (all by
    default), exactly (the first one at ties)."""
    queries, keys, count, block = _prepare(queries, keys, count, block)
    return _nearest(queries, keys, count, block=block)


def _sums(queries, keys, count, block, top, beta):
    """T(β) = Σ_j e^{−β g_j} and G(β) = Σ_j g_j e^{−β g_j} per query, block by block."""

    def step(carry, k, valid):
        t, g_sum = carry
        gap = jnp.maximum(top[:, None] - queries @ k.T, 0.0)
        e = jnp.where(valid[None, :], jnp.exp(-beta[:, None] * gap), 0.0)
        return t + e.sum(1), g_sum + (gap * e).sum(1)

    zero = jnp.zeros(queries.shape[0], queries.dtype)
    return _over_blocks(step, (zero, zero), keys, count, block)


@functools.partial(jax.jit, static_argnames=("block", "max_iter"))
def _threshold(queries, keys, count, top, *, block, max_iter, rtol):
    log2 = jnp.log(2.0).astype(queries.dtype)

    def nearest_count(ties, k, valid):
        return ties + jnp.sum(valid[None, :] & (queries @ k.T >= top[:, None]), axis=1, dtype=ties.dtype)

    # a query with two nearest keys at exactly the same inner product has T(∞) ≥ 2: no finite threshold
    tied = _over_blocks(nearest_count, jnp.zeros(queries.shape[0], jnp.int32), keys, count, block) > 1

    def body(state):
        beta, _, it = state
        t, g_sum = _sums(queries, keys, count, block, top, beta)
        excess = jnp.log(t) - log2
        step = jnp.where(excess > 0, excess * t / jnp.where(g_sum > 0, g_sum, 1.0), 0.0)
        new = jnp.where(tied, jnp.inf, beta + step)
        done = jnp.all(tied | (step <= rtol * new))
        return new, done, it + 1

    def cond(state):
        return ~state[1] & (state[2] < max_iter)

    beta0 = jnp.where(tied, jnp.inf, jnp.zeros(queries.shape[0], queries.dtype))
    beta, done, it = jax.lax.while_loop(cond, body, (beta0, jnp.array(False), 0))
    return beta, done, it


def selectivity_threshold(
    queries, keys, count: int | None = None, *, block: int = KEY_BLOCK, rtol: float = 1e-12, max_iter: int = 200
) -> tuple[Float[Array, " m"], Int[Array, " m"]]:
    """(β*_n(q), the index of q's nearest key) for every query among the first ``count`` keys (all by default):
    the least β at which the attention weight on the nearest key reaches 1/2 (module docstring), to
    relative accuracy ``rtol``.

    Newton's iteration on log T(β) = log 2 from β = 0: each step is one blocked pass over the keys. A
    query with two nearest keys at exactly the same inner product never reaches 1/2: its β* is ∞."""
    queries, keys, count, block = _prepare(queries, keys, count, block)
    rtol = check_real("rtol", rtol, 0.0, 1.0, strict_min=True)
    max_iter = check_int("max_iter", max_iter, 1)
    top, index = _nearest(queries, keys, count, block=block)
    beta, done, it = _threshold(queries, keys, count, top, block=block, max_iter=max_iter, rtol=rtol)
    if not bool(done):
        raise ConvergenceError(
            f"selectivity_threshold: Newton's iteration did not converge in {int(it)} steps (to rtol = {rtol:g}); "
            "raise max_iter"
        )
    return beta, index


@functools.partial(jax.jit, static_argnames=("block", "ranks"))
def _smallest(queries, keys, count, top, *, block, ranks):
    rows = jnp.arange(queries.shape[0])

    def step(best, k, valid):
        # best holds each query's ``ranks`` smallest gaps so far, unsorted: a block's gap below a row's
        # largest replaces it, one per row and iteration, smallest first (no sort: XLA sorts whole rows)
        gap = jnp.where(valid[None, :], jnp.maximum(top[:, None] - queries @ k.T, 0.0), jnp.inf)

        def pending(state):
            gap, best = state
            return jnp.any(jnp.min(gap, axis=1) < jnp.max(best, axis=1))

        def take(state):
            gap, best = state
            j, worst = jnp.argmin(gap, axis=1), jnp.argmax(best, axis=1)
            g, w = gap[rows, j], best[rows, worst]
            return gap.at[rows, j].set(jnp.inf), best.at[rows, worst].set(jnp.minimum(g, w))

        return jax.lax.while_loop(pending, take, (gap, best))[1]

    init = jnp.full((queries.shape[0], ranks), jnp.inf, queries.dtype)
    return jnp.sort(_over_blocks(step, init, keys, count, block), axis=1)


def smallest_gaps(queries, keys, count: int | None = None, *, ranks: int = 32, block: int = KEY_BLOCK):
    """The ``ranks`` smallest gaps g_j = ⟨q, k*⟩ − ⟨q, k_j⟩ of every query in increasing order (the first is
    0, the nearest key's): at any β the ordered attention weights are e^{−β g_(r)} / T(β)."""
    queries, keys, count, block = _prepare(queries, keys, count, block)
    ranks = check_int("ranks", ranks, 1, int(count))
    top, _ = _nearest(queries, keys, count, block=block)
    return _smallest(queries, keys, count, top, block=block, ranks=ranks)


@functools.partial(jax.jit, static_argnames=("block",))
def _output(queries, keys, count, top, beta, *, block):
    m, d = queries.shape

    def step(carry, k, valid):
        t, y = carry
        gap = jnp.maximum(top[:, None] - queries @ k.T, 0.0)
        e = jnp.where(valid[None, None, :], jnp.exp(-beta[:, :, None] * gap[None]), 0.0)
        return t + e.sum(-1), y + e @ k

    r = beta.shape[0]
    t, y = _over_blocks(
        step, (jnp.zeros((r, m), queries.dtype), jnp.zeros((r, m, d), queries.dtype)), keys, count, block
    )
    return y / t[..., None], 1.0 / t


def attention_output(
    queries, keys, beta, count: int | None = None, *, block: int = KEY_BLOCK
) -> tuple[Float[Array, "... m d"], Float[Array, "... m"]]:
    """(y(q), the weight 1/T(β) on the nearest key) of one layer with V = I for every query over the first
    ``count`` keys (all by default). ``beta`` is one value, one per query (m,), or several rows of them
    (r, m) or (r,) (a 1-D β of length m is one per query), computed in the same pass (a leading axis r in
    the results)."""
    queries, keys, count, block = _prepare(queries, keys, count, block)
    beta, m = jnp.asarray(beta, queries.dtype), queries.shape[0]
    single = beta.ndim == 0 or beta.shape == (m,)
    if single:
        grid = jnp.broadcast_to(beta, (1, m))
    elif beta.ndim == 1 or (beta.ndim == 2 and beta.shape[1] == m):
        grid = jnp.broadcast_to(beta.reshape(beta.shape[0], -1), (beta.shape[0], m))
    else:
        raise ValueError(f"beta must be a number, one per query ({m},), rows (r,) or (r, {m}); got shape {beta.shape}")
    if bool(jnp.any(~jnp.isfinite(grid) | (grid < 0))):
        raise ValueError("beta must be finite and ≥ 0 for every query")
    top, _ = _nearest(queries, keys, count, block=block)
    y, w = _output(queries, keys, count, top, grid, block=block)
    return (y[0], w[0]) if single else (y, w)
