"""SA's RK4 step fused into one Pallas kernel per block of ensemble members (``SA(kernel="pallas")``).

A figure's ensemble (n = 32 tokens, d ≤ 128, 10⁴–10⁵ members) is launch-bound on a GPU: each RK4 step of the
vmapped loop is several small XLA kernels (logits, softmax, products, projections, the stage combinations, the
normalization). One member's whole step fits in a multiprocessor's on-chip memory, so here one kernel launch
advances a block of members by a whole step, their states resident from the first stage to the last, the
analogue of the "kernel per trajectory" GPU ODE ensembles. The grid runs over blocks of ``BLOCK_MEMBERS``
members; inside a block the members are taken one after the other, each with two-dimensional products only.

The step is the loops' RK4 step to rounding, with the velocity of SA, [GLPR] (2.3)–(2.5),

    F(x)_i = P_{x_i}( Σ_j softmax_j(β⟨Q x_i, K x_j⟩) V x_j ),   the row maximum subtracted before exp,
    k2 = F(x + h/2 k1),  k3 = F(x + h/2 k2),  k4 = F(x + h k3),
    x' = normalize(x + h/6 (k1 + 2 k2 + 2 k3 + k4)),

with per-member β and optional per-member Q, K, V (identities cost nothing). The uniform-grid loop
(``dense.py``) gives k1 = F(x), its previous step's last velocity, and takes F(x') back for the next step
and its interpolant: four evaluations per step, as there. The fixed-step loop (``fixed_loop.py``) has the
kernel evaluate k1 itself. Off a GPU the kernel runs in Pallas' interpreter (``interpret=True``): the same
numbers, slowly.

The field chooses the kernel (``Field.fused_step``): SA with ``kernel="pallas"``, never "auto" until a
measurement on a GPU enables it in ``particles.blocked.PALLAS_AUTO``. ``check`` refuses, before anything
runs, every run the kernel cannot take.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jaxtyping import Array, Float

from ..particles.sphere import normalize, project
from .methods import spoken

__all__ = ["BLOCK_MEMBERS", "FusedRK4", "GPU_BACKENDS", "check", "fused", "interpreted"]

BLOCK_MEMBERS = 8
"""The most members one program of the kernel's grid advances; a block is the largest power of two up to this
that divides the ensemble's size, so that no member is padded (Pallas' GPU lowering takes blocks whose sides
are powers of two, as n = 32 and d = 8 … 128 of the figures are)."""

GPU_BACKENDS = ("gpu", "cuda", "rocm")
"""Backends where the kernel is compiled (Pallas' GPU lowering); elsewhere it runs interpreted."""

LOOP_METHODS = ("rk4",)
"""The methods whose steps the kernel takes."""


def interpreted() -> bool:
    """Whether the kernel runs in Pallas' interpreter: on every backend but a GPU."""
    return jax.default_backend() not in GPU_BACKENDS


def check(p) -> bool:
    """Whether the run ``p`` (a ``problem.Problem``) steps by the fused kernel; refuses one that asks for it
    and cannot take it: another method, a field around SA(kernel="pallas"), a run under the caller's trace."""
    n, d = p.x0.shape[-2:]
    parts = p.field.fused_step(n, d, p.dtype)
    if parts is None:
        if p.field.asks_fused_step:
            raise ValueError(
                f"kernel='pallas' fuses the RK4 steps of SA itself; a {type(p.field).__name__} around or beside it "
                "(wrappers, sums, noise, layer-wise weights) needs kernel='auto' or 'xla'"
            )
        return False
    if p.solver not in LOOP_METHODS:
        raise ValueError(
            f"kernel='pallas' is SA's whole RK4 step: use solver={spoken(LOOP_METHODS)} (fixed steps or "
            f"dense=True), or kernel='auto' or 'xla' with solver={p.solver!r}"
        )
    if p.traced:
        raise ValueError(
            "kernel='pallas' has no derivative (a Pallas kernel): differentiate through simulate with kernel='xla'"
        )
    return True


def _block(members: int) -> int:
    """The members of one program: the largest power of two up to ``BLOCK_MEMBERS`` that divides ``members``."""
    return max(b for b in (1, 2, 4, 8, 16, 32) if b <= BLOCK_MEMBERS and members % b == 0)


def _velocity(x, beta, Q, K, V):
    """F(x) of one member, as ``SA.__call__`` evaluates it: P_x of the softmax-weighted values."""
    q = x if Q is None else x @ Q.T
    k = x if K is None else x @ K.T
    v = x if V is None else x @ V.T
    logits = beta * (q @ k.T)
    w = jnp.exp(logits - jnp.max(logits, axis=-1, keepdims=True))
    return project(x, (w @ v) / jnp.sum(w, axis=-1, keepdims=True))


def _kernel(*refs, members: int, given: bool, step: bool, after: bool, weights: tuple[str, ...]):
    """One program: ``members`` members, each with k1 given (``given``) or evaluated, one RK4 step (``step``),
    and the velocity at the end point (``after``). refs: scalars (β, h), x, [k1], weights..., outputs."""
    queue = list(refs)
    scalars, x_ref = queue.pop(0), queue.pop(0)
    f_ref = queue.pop(0) if given else None
    weight_refs = {name: queue.pop(0) for name in weights}
    out_refs = queue

    def member(i, carry):
        beta, h = scalars[i, 0], scalars[i, 1]
        mats = {name: (ref[i] if len(ref.shape) == 3 else ref[...]) for name, ref in weight_refs.items()}

        def F(y):
            return _velocity(y, beta, mats.get("Q"), mats.get("K"), mats.get("V"))

        x = x_ref[i]
        k1 = f_ref[i] if f_ref is not None else F(x)
        if step:
            k2 = F(x + (0.5 * h) * k1)
            k3 = F(x + (0.5 * h) * k2)
            k4 = F(x + h * k3)
            x = normalize(x + (h / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4))
        outputs = ((x,) if step else ()) + ((F(x) if step else k1,) if after else ())
        for ref, value in zip(out_refs, outputs):
            ref[i] = value
        return carry

    jax.lax.fori_loop(0, members, member, 0)


class FusedRK4:
    """The fused kernel for one ensemble of SA: (β, Q, K, V) from ``Field.fused_step``, one block per program.

    beta   () or (members,); Q, K (k, d) or (members, k, d), V (d, d) or (members, d, d), or None (identity)
    """

    def __init__(self, parts: tuple, members: int, dtype):
        beta, Q, K, V = parts
        self.members, self.dtype, self.block = members, jnp.dtype(dtype), _block(members)
        self.beta = jnp.broadcast_to(jnp.asarray(beta, dtype), (members,))
        self.weights = {name: jnp.asarray(w, dtype) for name, w in zip("QKV", (Q, K, V)) if w is not None}

    def _call(self, x, f, h, *, step: bool, after: bool):
        members, n, d = x.shape
        bm = self.block
        states = pl.BlockSpec((bm, n, d), lambda b: (b, 0, 0))

        def spec(w):
            if w.ndim == 3:
                return pl.BlockSpec((bm,) + w.shape[1:], lambda b: (b, 0, 0))
            return pl.BlockSpec(w.shape, lambda b: (0, 0))  # shared by every member: the same block for all

        scalars = jnp.stack([self.beta, jnp.broadcast_to(jnp.asarray(h, x.dtype), (members,))], axis=-1)
        inputs = [scalars, x] + ([f] if f is not None else []) + list(self.weights.values())
        specs = [pl.BlockSpec((bm, 2), lambda b: (b, 0)), states] + ([states] if f is not None else [])
        specs += [spec(w) for w in self.weights.values()]
        outs = int(step) + int(after)
        kernel = functools.partial(
            _kernel, members=bm, given=f is not None, step=step, after=after, weights=tuple(self.weights)
        )
        return pl.pallas_call(
            kernel,
            grid=(members // bm,),
            in_specs=specs,
            out_specs=[states] * outs,
            out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype)] * outs,
            interpret=interpreted(),
        )(*inputs)

    def velocity(self, x: Float[Array, "m n d"]) -> Float[Array, "m n d"]:
        """F(x) of every member."""
        (f,) = self._call(x, None, 0.0, step=False, after=True)
        return f

    def step(self, x: Float[Array, "m n d"], h, f: Float[Array, "m n d"] | None = None, *, after: bool = True):
        """One RK4 step of size h from x, normalized: (x', F(x')) with ``after``, else x'. ``f`` is F(x) when
        known (the uniform grid's last velocity), else the kernel evaluates it."""
        out = self._call(x, f, h, step=True, after=after)
        return (out[0], out[1]) if after else out[0]


def fused(field, members: int, n: int, d: int, dtype) -> FusedRK4:
    """The fused kernel of ``field`` (whose ``fused_step`` ``check`` has found) for ``members`` members."""
    parts = field.fused_step(n, d, dtype)
    assert parts is not None, "the loop steps by the kernel only where check(problem) found it"
    return FusedRK4(parts, members, dtype)
