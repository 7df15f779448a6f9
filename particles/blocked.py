"""Attention drifts without the n×n matrix: blocked evaluation with an online softmax.

For one configuration, with queries q_i = Q x_i, keys k_j = K x_j and values v_j = V x_j,

    normalized (SA):     Σ_j softmax_j(β⟨q_i, k_j⟩) v_j                          [GLPR] (2.4)
    unnormalized (USA):  (1/n) Σ_j e^{β⟨q_i, k_j⟩ − offset} v_j                  [GLPR] §3.3

are computed tile by tile: queries in blocks of ``block`` rows (``lax.map``), and for each of
them the keys in blocks of ``block`` columns (``lax.scan``), carrying per row the running maximum
m_i of the logits seen so far, the running sum l_i = Σ_j e^{L_ij − m_i} and the running weighted
sum a_i = Σ_j e^{L_ij − m_i} v_j. A new tile with a larger maximum m'_i rescales l_i and a_i by
e^{m_i − m'_i} ≤ 1, so no exponential ever exceeds 1, for any β: the same guarantee as the dense
path's max subtraction, and the same result up to rounding. At the end SA returns a_i / l_i and
USA a_i e^{m_i − offset} / n.

Only one block × block tile of logits exists at a time (per ensemble member), so the memory is
O(block² + n d) instead of the n² of the dense path. n is padded to a multiple of ``block``; the
padded keys are masked out and the padded queries dropped. Under a causal mask the tiles that lie
entirely above the diagonal are skipped.

``fused_attention`` is the other route: ``jax.nn.dot_product_attention``, the kernel JAX dispatches
to on accelerators, with the query multiplied by β beforehand and scale 1. ``kernel="pallas"`` is a
third, for whole steps rather than one evaluation: SA's RK4 step fused into one Pallas kernel per block
of ensemble members (``solvers/fused_rk4.py``); the checks of that choice are here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import check_choice

__all__ = [
    "DENSE_LIMIT_BYTES",
    "PALLAS_AUTO",
    "PALLAS_MAX_ELEMENTS",
    "PALLAS_MAX_TOKENS",
    "PARTICLE_AXIS",
    "TILE",
    "blocked_attention",
    "dense_limit_bytes",
    "fused_attention",
    "pallas_step",
    "resolve_block",
    "resolve_kernel",
    "tile_side",
]

DENSE_LIMIT_BYTES = {"cpu": 16 * 2**20, "accelerator": 2**30}
"""With ``block="auto"``, a field switches to the blocked path when the n×n logits of one member
(n² × itemsize bytes) would exceed this many bytes. On CPU, 16 MiB (n > 1448 in float64, n > 2048
in float32): past it the logits no longer fit in cache and the blocked path is also the faster
one. On GPUs, 1 GiB (n > 11585 in float64, n > 16384 in float32), where memory rather than cache
is the constraint."""

TILE = {"cpu": 1024, "accelerator": 4096}
"""Largest tile side under ``block="auto"``: n is split into ⌈n/TILE⌉ equal blocks (rounded up to
a multiple of 8). On CPU a 1024 × 1024 tile of float64 logits is 8 MiB, which stays in cache
while being large enough for the matrix products to run near full speed; GPUs take larger tiles,
so that each launch has enough work."""

_KERNELS = ("auto", "xla", "fused", "pallas")

PALLAS_MAX_TOKENS = 128
"""The most tokens n of a member whose RK4 steps the fused Pallas kernel takes: its n × n logits stay on chip."""

PALLAS_MAX_ELEMENTS = 4096
"""The most numbers n·d of one member's configuration the fused Pallas kernel keeps resident (n = 32, d = 128):
a step holds about eight such arrays (the state, its velocity, a stage, the sum of the stages, queries, keys,
values, the update), 128 KiB in float32, within a GPU multiprocessor's shared memory."""

PALLAS_AUTO: dict[str, int] = {}
"""Where ``kernel="auto"`` takes the fused Pallas RK4 step: JAX backend → the largest n·d per member at which
it was measured faster than the XLA loop (``benchmarks/pallas_step.py``). Empty: nothing is measured yet, so
"auto" never takes it; a GPU measurement that shows it faster adds its backend here, and nothing else changes."""

PARTICLE_AXIS = "particles"
"""Name of the mesh axis over which a run's particles are split (``solvers/sharding.py``)."""


def _device_kind() -> str:
    return "cpu" if jax.default_backend() == "cpu" else "accelerator"


def dense_limit_bytes() -> int:
    """The ``block="auto"`` threshold of the current JAX backend (``DENSE_LIMIT_BYTES``)."""
    return DENSE_LIMIT_BYTES[_device_kind()]


def resolve_block(block, n: int, dtype) -> int | None:
    """The tile side to use for n particles of ``dtype``, or None for the dense path.

    ``block`` is None (always dense), a positive int (always blocked, tiles of that side, at most
    n rounded up to a multiple of 8), or "auto": dense while the logits n² × itemsize stay within
    ``dense_limit_bytes()``, blocked beyond, with tiles of side ``tile_side(n)``.
    """
    if block is None:
        return None
    if isinstance(block, str):
        if n * n * jnp.dtype(dtype).itemsize <= dense_limit_bytes():
            return None
        return tile_side(n)
    return int(-(-min(block, n) // 8) * 8)


def tile_side(n: int) -> int:
    """The side of ⌈n/TILE⌉ equal tiles covering n (TILE of the current backend), rounded up to a multiple of 8."""
    block = -(-n // -(-n // TILE[_device_kind()]))
    return int(-(-block // 8) * 8)


def check_block(block) -> int | str | None:
    """Validate the ``block`` option of an attention field: None, "auto" or an int ≥ 1."""
    if block is None or (isinstance(block, str) and block == "auto"):
        return block
    if isinstance(block, (bool, np.bool_)) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be None (dense), 'auto' or a positive int (tile side), got {block!r}")
    return int(block)


def check_kernel(kernel: str, field: str = "SA", *, mask: str = "none", positional: str = "none", block="auto") -> str:
    """Validate the ``kernel`` option of an attention field: "auto", "xla", "fused" or "pallas".

    "pallas" steps SA without a mask or a positional bias (``pallas_step``), and keeps the logits whole:
    ``block`` must be "auto" or None. "fused" does not take a positional bias (rotary positions it does: they
    rotate the queries and keys it is given).
    """
    check_choice("kernel", kernel, _KERNELS)
    if kernel == "fused" and positional not in ("none", "rope"):
        raise ValueError(
            f"positional={positional!r} is evaluated by attnflow's dense or blocked attention: "
            "use kernel='auto' or 'xla', not 'fused'"
        )
    if kernel != "pallas":
        return kernel
    what = (
        f"{field}'s attention"
        if field != "SA"
        else f"positional={positional!r}"
        if positional != "none"
        else f"mask={mask!r}"
        if mask != "none"
        else f"block={block!r}"
        if isinstance(block, int)
        else None
    )
    if what is not None:
        raise ValueError(
            f"kernel='pallas' fuses whole RK4 steps of SA without a mask or positional bias, its logits whole "
            f"(block 'auto' or None): {what} needs kernel='auto', 'xla' or 'fused'"
        )
    return kernel


def check_kernel_size(kernel: str, n: int, d: int) -> None:
    """Refuse a configuration of n tokens in R^d too large for the fused Pallas step (``PALLAS_MAX_TOKENS``,
    ``PALLAS_MAX_ELEMENTS``)."""
    if kernel == "pallas" and (n > PALLAS_MAX_TOKENS or n * d > PALLAS_MAX_ELEMENTS):
        raise ValueError(
            f"kernel='pallas' keeps a member's tokens on chip: at most n = {PALLAS_MAX_TOKENS} tokens and "
            f"n·d = {PALLAS_MAX_ELEMENTS} numbers, got n = {n}, d = {d} (n·d = {n * d}); use kernel='auto' or 'xla'"
        )


def pallas_step(kernel: str, n: int, d: int, *, plain: bool) -> bool:
    """Whether SA with this ``kernel`` takes its RK4 steps by the fused Pallas kernel for n tokens in R^d.

    plain   the field is SA itself, without a mask, a positional bias or tiles of its own

    "pallas" always (its field checks have refused what it cannot take); "auto" only on a backend of
    ``PALLAS_AUTO`` and within its measured size; "xla" and "fused" never.
    """
    if kernel == "pallas":
        return True
    limit = PALLAS_AUTO.get(jax.default_backend())
    return (
        kernel == "auto"
        and plain
        and limit is not None
        and n <= PALLAS_MAX_TOKENS
        and n * d <= min(limit, PALLAS_MAX_ELEMENTS)
    )


def resolve_kernel(kernel: str, normalized: bool, dtype) -> str:
    """ "fused" or "xla" for one evaluation of the drift, decided at trace time.

    "auto" takes the fused kernel on GPU backends ("gpu", "cuda", "rocm") for softmax attention
    in float32 or narrower, and attnflow's own dense or blocked evaluation everywhere else:
    ``jax.nn.dot_product_attention`` has no unnormalized variant and computes its softmax in
    float32, which would cost float64 runs their precision. Forcing "fused" where it does not
    apply is an error. "pallas" has no evaluation of the drift alone: it is SA's whole RK4 step
    (``pallas_step``), which only the fixed-step and uniform-grid loops take, so it is refused here.
    """
    if kernel == "pallas":
        raise ValueError(
            "SA(kernel='pallas') is evaluated only as whole RK4 steps, by simulate with solver='rk4' "
            "(fixed steps or dense=True); other solvers and functions evaluating its drift alone need "
            "kernel='auto', 'xla' or 'fused'"
        )
    if kernel == "auto":
        fits = normalized and jnp.dtype(dtype).itemsize <= 4
        return "fused" if fits and jax.default_backend() in ("gpu", "cuda", "rocm") else "xla"
    if kernel == "fused" and not normalized:
        raise ValueError(
            "kernel='fused' (jax.nn.dot_product_attention) computes softmax attention only; "
            "USA needs kernel='auto' or 'xla'"
        )
    if kernel == "fused" and jnp.dtype(dtype).itemsize > 4:
        raise ValueError(
            "kernel='fused' (jax.nn.dot_product_attention) computes its softmax in float32; "
            "float64 runs need kernel='auto' or 'xla'"
        )
    return kernel


def _pad_rows(a: Array, rows: int) -> Array:
    return a if a.shape[0] == rows else jnp.pad(a, ((0, rows - a.shape[0]), (0, 0)))


def blocked_attention(
    beta: Float[Array, ""],
    q: Float[Array, "n k"],
    k: Float[Array, "n k"],
    v: Float[Array, "n e"],
    *,
    block: int,
    normalized: bool,
    offset=0.0,
    causal: bool = False,
    slope=None,
) -> Float[Array, "n e"]:
    """Σ_j softmax_j(β⟨q_i,k_j⟩) v_j (``normalized``) or (1/n) Σ_j e^{β⟨q_i,k_j⟩ − offset} v_j, in tiles.

    ``block`` is the tile side (static); ``causal`` restricts row i to j ≤ i; ``slope`` m adds the
    positional bias −m (i − j) of ALiBi to every logit. The running
    maximum is excluded from differentiation (``stop_gradient``), as in the dense path: the
    result does not depend on it. Traced under a mesh with a ``PARTICLE_AXIS`` of more than one
    device (``solvers/sharding.py``), the query rows are split across its devices, each of
    which holds every key and value; every row's result is the one-device result.
    """
    devices = _particle_devices()
    if devices > 1:
        return _rows_over_devices(
            beta, q, k, v, devices, block=block, normalized=normalized, offset=offset, causal=causal, slope=slope
        )
    return _tiles(
        beta, q, k, v, q_block=block, k_block=block, normalized=normalized, offset=offset, causal=causal, slope=slope
    )


def _particle_devices() -> int:
    """Devices along ``PARTICLE_AXIS`` of the mesh being traced under (1 without one, or inside its shard_map)."""
    mesh = jax.sharding.get_abstract_mesh()
    if PARTICLE_AXIS not in mesh.axis_names or PARTICLE_AXIS in mesh.manual_axes:
        return 1
    return int(mesh.shape[PARTICLE_AXIS])


def _rows_over_devices(beta, q, k, v, devices: int, *, block: int, normalized: bool, offset, causal: bool, slope=None):
    """``blocked_attention`` with the query rows in ``devices`` equal slices, one per device (``shard_map``).

    Keys and values are replicated, so each device sweeps the same key tiles in the same order as
    one device would: its rows' results equal the one-device ones to rounding. The query tile
    shrinks to the slice when the slice is smaller than ``block``.
    """
    from jax.sharding import PartitionSpec as P

    n = q.shape[0]
    local = -(-n // devices)
    q_block = min(block, -(-local // 8) * 8)
    q = _pad_rows(q, local * devices)

    def rows(beta, q_local, k, v, offset, slope_):
        row0 = jax.lax.axis_index(PARTICLE_AXIS) * local
        return _tiles(
            beta,
            q_local,
            k,
            v,
            q_block=q_block,
            k_block=block,
            normalized=normalized,
            offset=offset,
            causal=causal,
            row0=row0,
            slope=None if slope is None else slope_,
        )

    out = jax.shard_map(
        rows,
        in_specs=(P(), P(PARTICLE_AXIS), P(), P(), P(), P()),
        out_specs=P(PARTICLE_AXIS),
        axis_names={PARTICLE_AXIS},
        check_vma=False,
    )(jnp.asarray(beta), q, k, v, jnp.asarray(offset, q.dtype), jnp.asarray(0.0 if slope is None else slope))
    return out[:n]


def _tiles(beta, q, k, v, *, q_block: int, k_block: int, normalized: bool, offset, causal: bool, row0=None, slope=None):
    """The tiled sweep of ``blocked_attention`` for query rows ``row0``, ``row0`` + 1, ... against all keys.

    row0 None: q holds every row and both tile sides are equal (the one-device case).
    """
    nq, n = q.shape[0], k.shape[0]
    nqb, nb = -(-nq // q_block), -(-n // k_block)
    dtype = q.dtype
    beta = beta.astype(dtype)
    e = v.shape[1]
    # for narrow values (d = 2, 3) a column of ones makes the row sums l_i a by-product of the
    # product with the values, saving a pass over the tile; wider values take a separate sum
    ones = e < 4
    if ones:
        v = jnp.concatenate([v, jnp.ones((n, 1), dtype), jnp.zeros((n, 3 - e), dtype)], axis=1)
    qb = _pad_rows(q, nqb * q_block).reshape(nqb, q_block, q.shape[1])
    kb = _pad_rows(k, nb * k_block).reshape(nb, k_block, k.shape[1])
    vb = _pad_rows(v, nb * k_block).reshape(nb, k_block, v.shape[1])
    padded = nb * k_block != n
    col = jnp.arange(k_block)
    row = jnp.arange(q_block)

    def first_row(i):
        return i * q_block if row0 is None else row0 + i * q_block

    def tile(state, qi, i, c, masked: bool):
        m, l, a = state
        s = beta * (qi @ kb[c].T)
        if slope is not None:  # ALiBi: −m (i − j)
            gap = (first_row(i) + row[:, None]) - (c * k_block + col[None, :])
            s = s - jnp.where(gap == 0, 0.0, slope.astype(dtype) * gap.astype(dtype))  # ∞ · 0 is not a bias
        if masked:
            j = c * k_block + col[None, :]
            keep = j < n
            if causal:
                keep = keep & (j <= first_row(i) + row[:, None])
            s = jnp.where(keep, s, -jnp.inf)
        m_new = jnp.maximum(m, jax.lax.stop_gradient(jnp.max(s, axis=1)))
        # every row meets a real key in the first tile (key 0 precedes every query), so m_new is
        # finite from then on, except under an ALiBi slope beyond the dtype (every earlier key at −∞):
        # a row still at −∞ keeps alpha = 0 and p = 0 instead of e^{−∞ + ∞}
        m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
        alpha = jnp.exp(m - m_safe)
        p = jnp.exp(s - m_safe[:, None])
        pv = p @ vb[c]
        if ones:
            l = alpha * l + pv[:, e]
            a = alpha[:, None] * a + pv[:, :e]
        else:
            l = alpha * l + jnp.sum(p, axis=1)
            a = alpha[:, None] * a + pv
        return m_new, l, a

    def query_block(args):
        qi, i = args
        init = (jnp.full((q_block,), -jnp.inf, dtype), jnp.zeros((q_block,), dtype), jnp.zeros((q_block, e), dtype))

        def step(state, c):
            if not (causal or padded):
                return tile(state, qi, i, c, False), None
            # only the tiles crossing the diagonal (causal) and the last key tile (padding) need
            # a mask; tiles above the diagonal hold no allowed pair and are skipped
            masked = (c == nb - 1) if padded else False
            if causal:
                if row0 is None:
                    crossing, above = c == i, c > i
                else:
                    crossing = (c + 1) * k_block - 1 > first_row(i)
                    above = c * k_block > first_row(i) + q_block - 1
                masked = masked | crossing
            branch = jnp.where(masked, 1, 0)
            if causal:
                branch = jnp.where(above, 2, branch)
            state = jax.lax.switch(
                branch, [lambda s: tile(s, qi, i, c, False), lambda s: tile(s, qi, i, c, True), lambda s: s], state
            )
            return state, None

        (m, l, a), _ = jax.lax.scan(step, init, jnp.arange(nb))
        if normalized:
            return a / l[:, None]
        return a * (jnp.exp(m - offset) / n)[:, None]

    out = jax.lax.map(query_block, (qb, jnp.arange(nqb)))
    return out.reshape(nqb * q_block, e)[:nq]


def fused_attention(
    beta: Float[Array, ""],
    q: Float[Array, "n k"],
    k: Float[Array, "n k"],
    v: Float[Array, "n e"],
    *,
    causal: bool = False,
) -> Float[Array, "n e"]:
    """Σ_j softmax_j(β⟨q_i,k_j⟩) v_j through ``jax.nn.dot_product_attention``.

    The query is multiplied by β and the kernel's own scale set to 1, so its logits are β⟨q_i,k_j⟩.
    Queries, keys and values of different widths are padded with zero columns to a common one
    (which changes no inner product), as the kernel needs one head dimension.
    """
    width = max(q.shape[1], v.shape[1])

    def head(a):
        a = a if a.shape[1] == width else jnp.pad(a, ((0, 0), (0, width - a.shape[1])))
        return a[None, :, None, :]  # (batch, tokens, heads, width)

    out = jax.nn.dot_product_attention(
        head(beta.astype(q.dtype) * q), head(k), head(v), scale=1.0, is_causal=causal, implementation=None
    )
    return out[0, :, 0, : v.shape[1]]
