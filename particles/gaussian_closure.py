"""The Gaussian closure of self-attention without layer norm (Castin, Ablin, Carrillo, Peyré, arXiv 2501.18322 §5).

**The field.** attnflow's SA without layer norm (``NoLN(SA(β, Q, K, V))``, the configuration key ``norm = "none"``)
moves n tokens of R^d by

    ẋ_i = Σ_j softmax_j(β⟨Q x_i, K x_j⟩) V x_j,

the particle system whose empirical measure μ_t solves, as n → ∞, the Transformer PDE ∂_t μ + div(μ v[μ]) = 0 with
v[μ](x) = ∫ e^{β⟨Qx, Ky⟩} V y dμ(y) / ∫ e^{β⟨Qx, Ky⟩} dμ(y).

**The closure.** Write A = β KᵀQ (d × d), so that β⟨Qx, Ky⟩ = ⟨Ax, y⟩. For μ = N(m, Σ), the weight e^{⟨Ax, y⟩}
tilts μ into N(m + ΣAx, Σ) (complete the square), so the velocity is affine in x:

    v(x) = V(m + ΣAx) = b + L x,      b = V m,   L = VΣA.

An affine field maps Gaussians to Gaussians, so μ_t = N(m_t, Σ_t) for all t, with ṁ = b + L m and Σ̇ = LΣ + ΣLᵀ:

    ṁ = V(I + ΣA) m,        Σ̇ = VΣAΣ + (VΣAΣ)ᵀ                                        (SA)

**The map to the paper.** The paper's tokens attend with e^{⟨Qx, Ky⟩/√d}: its A = KᵀQ/√d is attnflow's
A = β KᵀQ with the same Q, K and β = 1/√d (``attention_kernels``). Its V is attnflow's V. With H heads (attnflow's
``MultiHead``: ẋ_i = Σ_h Σ_j softmax_j(β⟨Q_h x_i, K_h x_j⟩) V_h x_j, Q_h, K_h of shape k × d), the velocities add:

    ṁ = Σ_h V_h(I + ΣA_h) m,     Σ̇ = Σ_h V_hΣA_hΣ + (V_hΣA_hΣ)ᵀ,     A_h = β K_hᵀQ_h          (multi-head)

the paper's A_h = K_hᵀQ_h/√k (k = d/H, attnflow's β = 1/√k) and its value-and-output product W_hᵀV_h is attnflow's
d × d V_h.

**L2 attention** (no attnflow field; logits −(β/2)‖Qx − Ky‖², i.e. ⟨Ax, y⟩ − ½ yᵀBy + (terms in x) with
B = β KᵀK). The tilt has precision Σ⁻¹ + B: N(G(m + ΣAx), GΣ) with G = (I + ΣB)⁻¹, so b = VGm, L = VGΣA and

    ṁ = VG(I + ΣA) m,            Σ̇ = VGΣAΣ + (VGΣAΣ)ᵀ                                       (L2)

**Sinkhorn attention** (attnflow's ``Sinkhorn``: the kernel e^{⟨Ax_i, x_j⟩} scaled to a doubly stochastic matrix).
In the mean-field limit the weights are the entropic plan π with both marginals μ = N(m, Σ) and π ∝ e^{f(x) + g(y)
+ ⟨Ax, y⟩}; the velocity is V times the mean of π's conditional law given x. The plan is Gaussian with marginals μ:
in whitened coordinates u = Σ^{-1/2}(x − m), the joint covariance [[I, R], [Rᵀ, I]] must have the off-diagonal
precision block −N, N = Σ^{1/2}AᵀΣ^{1/2} (f, g only change the diagonal blocks), i.e. R(I − RᵀR)⁻¹ = N, solved by
R = N · 2(I + (I + 4NᵀN)^{1/2})⁻¹. The conditional mean of y is m + Σ^{1/2}RᵀΣ^{-1/2}(x − m), so

    b = V m − L m,   L = VΣ^{1/2} 2(I + (I + 4NᵀN)^{1/2})⁻¹ Σ^{1/2} A,
    ṁ = V m,                     Σ̇ = LΣ + ΣLᵀ                                               (Sinkhorn)

The mean moves as if there were no attention. For small ΣA, L → VΣA: Sinkhorn agrees with SA to first order. (This
is the authors' ε = 1 formula, written without inverting A or Σ.)

**Invariants and exact solutions.** Σ_t = Φ_t Σ_0 Φ_tᵀ with Φ̇ = L_tΦ, Φ_0 = I: the rank and the inertia of Σ are
preserved at finite time. With V = λI (any A), Σ̇ = 2λΣA_sΣ with A_s = (A + Aᵀ)/2, so d(Σ⁻¹)/dt = −2λA_s and

    Σ_t = (Σ_0⁻¹ − 2λt A_s)⁻¹ = Σ_0^{1/2}(I − 2λt Σ_0^{1/2}A_sΣ_0^{1/2})⁻¹Σ_0^{1/2}           (``identity_value_covariance``)

(blow-up in finite time when A_s has a positive direction). When V ⪰ 0 and A_s ⪯ 0 (e.g. K = −Q),
d tr Σ/dt = 2 tr(Σ V Σ A_s) ≤ 0: Σ stays bounded. **Limit ranks.** A stationary Σ* with V ≻ 0 and A_s ⪯ 0 solves
VW + WV = 0 for W = Σ*A_sΣ* ⪯ 0, whose only solution is W = 0, hence A_sΣ* = 0: the limit covariance lives in
ker A_s and its rank is at most d − rank(A_s) (⌈d/2⌉ for the paper's Q of shape ⌊d/2⌋ × d and K = −Q). With V = λI,
λ > 0, the limit is Σ_∞ = P(PᵀΣ_0⁻¹P)⁻¹Pᵀ (P an orthonormal basis of ker A_s), of rank exactly d − rank(A_s)
(``identity_value_limit``): the tokens collapse onto ker A_s, the Gaussian analogue of clustering.

Implemented: SA, multi-head, L2 and Sinkhorn closures (``affine_velocity``, ``closure_rhs``), a fixed-step RK4 solver
in float64 (``solve_closure``; ``solve_covariance`` in log time for long horizons), the exact solutions above, and
the rank of a limit covariance from two late times (``settled_rank``). Not implemented: the paper's sigmoid and masked attention (not
Gaussian-preserving in the same way) and its gradient-flow (Bures–Wasserstein) reading.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

KINDS = ("sa", "l2", "sinkhorn")
"""The attention kinds whose Gaussian closure is implemented."""

__all__ = ["KINDS", "ClosureSolution", "attention_kernels", "paper_beta", "affine_velocity", "closure_rhs",
           "solve_closure", "solve_covariance", "identity_value_covariance", "identity_value_limit", "settled_rank",
           "kernel_dimension", "empirical_moments", "gaussian_sample", "random_covariance"]


class ClosureSolution(NamedTuple):
    """The Gaussian N(mean[t], cov[t]) at the times ``ts`` (T,): mean (T, d), cov (T, d, d)."""

    ts: np.ndarray
    mean: np.ndarray
    cov: np.ndarray


def paper_beta(d: int, heads: int = 1) -> float:
    """attnflow's β that gives the paper's A = KᵀQ/√k (k = d/heads): 1/√k."""
    if heads < 1 or d % heads:
        raise ValueError(f"heads must divide d, got d = {d}, heads = {heads}")
    return 1.0 / np.sqrt(d // heads)


def _stack(name: str, a, d: int | None) -> np.ndarray | None:
    """Weights as a (H, ·, d) stack; None stays None (the identity)."""
    if a is None:
        return None
    a = np.asarray(a, dtype=np.float64)
    if a.ndim == 2:
        a = a[None]
    if a.ndim != 3 or (d is not None and a.shape[-1] != d):
        raise ValueError(f"{name} must have shape (k, d) or (heads, k, d) with d = {d}, got {np.shape(a)}")
    return a


def attention_kernels(beta: float, Q=None, K=None, d: int | None = None) -> np.ndarray:
    """A_h = β K_hᵀQ_h (H, d, d), the kernel of ⟨A_h x, y⟩ = β⟨Q_h x, K_h y⟩; None stands for the identity."""
    Qs, Ks = _stack("Q", Q, d), _stack("K", K, d)
    if d is None:
        if Qs is None and Ks is None:
            raise ValueError("d is needed when Q and K are both the identity")
        d = (Qs if Qs is not None else Ks).shape[-1]
    eye = np.eye(d)[None]
    Qs = eye if Qs is None else Qs
    Ks = eye if Ks is None else Ks
    if Qs.shape[:2] != Ks.shape[:2] and not (Qs.shape[0] == 1 or Ks.shape[0] == 1):
        raise ValueError(f"Q and K must have the same heads and rows, got {Qs.shape} and {Ks.shape}")
    return float(beta) * np.swapaxes(Ks, -1, -2) @ Qs


def _values(V, heads: int, d: int) -> np.ndarray:
    Vs = _stack("V", V, d)
    if Vs is None:
        return np.broadcast_to(np.eye(d), (heads, d, d)).copy()
    if Vs.shape[0] not in (1, heads) or Vs.shape[1] != d:
        raise ValueError(f"V must have shape (d, d) or (heads, d, d) = ({heads}, {d}, {d}), got {Vs.shape}")
    return np.broadcast_to(Vs, (heads, d, d)).copy()


def _sym_sqrt(S: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """The PSD square root of a symmetric matrix (negative rounding eigenvalues clipped)."""
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    return (U * jnp.sqrt(jnp.maximum(w, 0.0))) @ U.T


def affine_velocity(m, S, A, V, kind: str = "sa", B=None):
    """(b, L) with the mean-field velocity v(x) = b + L x of μ = N(m, S) (module docstring).

    A (H, d, d) the kernels β K_hᵀQ_h, V (H, d, d) the values, B (H, d, d) the kernels β K_hᵀK_h of L2 attention.
    """
    d = S.shape[-1]
    eye = jnp.eye(d, dtype=S.dtype)
    b = jnp.zeros(d, S.dtype)
    L = jnp.zeros((d, d), S.dtype)
    root = _sym_sqrt(S) if kind == "sinkhorn" else None
    for h in range(A.shape[0]):
        Ah, Vh = A[h], V[h]
        if kind == "sa":
            b, L = b + Vh @ m, L + Vh @ S @ Ah
        elif kind == "l2":
            G = jnp.linalg.solve(eye + S @ B[h], eye)
            b, L = b + Vh @ G @ m, L + Vh @ G @ S @ Ah
        elif kind == "sinkhorn":
            N = root @ Ah.T @ root
            shrink = 2.0 * jnp.linalg.solve(eye + _sym_sqrt(eye + 4.0 * N.T @ N), eye)
            Lh = Vh @ root @ shrink @ root @ Ah
            b, L = b + Vh @ m - Lh @ m, L + Lh
        else:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return b, L


def closure_rhs(m, S, A, V, kind: str = "sa", B=None):
    """(ṁ, Ṡ) of the closure: ṁ = b + L m, Ṡ = L S + S Lᵀ with (b, L) = ``affine_velocity``."""
    b, L = affine_velocity(m, S, A, V, kind, B)
    LS = L @ S
    return b + L @ m, LS + LS.T


def _weights(beta, Q, K, V, d, kind):
    A = attention_kernels(beta, Q, K, d)
    Vs = _values(V, A.shape[0], d)
    if kind == "l2":
        Ks = _stack("K", K, d)
        Ks = np.eye(d)[None] if Ks is None else Ks
        B = float(beta) * np.swapaxes(Ks, -1, -2) @ Ks
        B = np.broadcast_to(B, A.shape).copy()
    else:
        B = np.zeros_like(A)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return jnp.asarray(A), jnp.asarray(Vs), jnp.asarray(B)


def _rk4(f, y, h):
    k1 = f(y)
    k2 = f(jax.tree.map(lambda a, k: a + 0.5 * h * k, y, k1))
    k3 = f(jax.tree.map(lambda a, k: a + 0.5 * h * k, y, k2))
    k4 = f(jax.tree.map(lambda a, k: a + h * k, y, k3))
    return jax.tree.map(lambda a, p, q, r, s: a + h / 6.0 * (p + 2 * q + 2 * r + s), y, k1, k2, k3, k4)


def _check_moments(m0, S0):
    S0 = np.asarray(S0, dtype=np.float64)
    d = S0.shape[-1]
    if S0.ndim != 2 or S0.shape != (d, d) or not np.allclose(S0, S0.T, rtol=0, atol=1e-12 * max(1.0, np.abs(S0).max())):
        raise ValueError(f"S0 must be a symmetric (d, d) matrix, got shape {S0.shape}")
    if np.linalg.eigvalsh(S0).min() < -1e-12 * max(1.0, np.abs(S0).max()):
        raise ValueError("S0 must be positive semi-definite")
    m0 = np.zeros(d) if m0 is None else np.asarray(m0, dtype=np.float64)
    if m0.shape != (d,):
        raise ValueError(f"m0 must have shape ({d},), got {m0.shape}")
    return m0, S0, d


def solve_closure(m0, S0, ts, beta: float, Q=None, K=None, V=None, *, kind: str = "sa",
                  dt: float = 1e-2) -> ClosureSolution:
    """The closure's N(m_t, Σ_t) at the increasing times ``ts`` (from ts[0]), by RK4 in float64 with steps ≤ dt.

    Q, K (k, d) or (heads, k, d), V (d, d) or (heads, d, d); None is the identity. ``kind``: "sa" (softmax, one or
    several heads), "l2" or "sinkhorn" (module docstring).
    """
    m0, S0, d = _check_moments(m0, S0)
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0 or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a non-empty increasing 1-D array")
    A, Vs, B = _weights(beta, Q, K, V, d, kind)
    gaps = np.diff(ts)
    substeps = int(max(1, np.ceil(gaps.max() / dt))) if gaps.size else 1
    y0 = (jnp.asarray(m0), jnp.asarray(S0))
    out = _closure_scan(y0, jnp.asarray(gaps / substeps), A, Vs, B, kind, substeps)
    mean = np.concatenate([m0[None], np.asarray(out[0])])
    cov = np.concatenate([S0[None], np.asarray(out[1])])
    return ClosureSolution(ts, mean, 0.5 * (cov + np.swapaxes(cov, -1, -2)))


@functools.partial(jax.jit, static_argnames=("kind", "substeps"))
def _closure_scan(y0, hs, A, V, B, kind, substeps):
    def f(y):
        return closure_rhs(y[0], y[1], A, V, kind, B)

    def save_interval(y, h):
        y = jax.lax.fori_loop(0, substeps, lambda _, z: _rk4(f, z, h), y)
        return y, y

    return jax.lax.scan(save_interval, y0, hs)[1]


def solve_covariance(S0, A, V=None, *, B=None, kind: str = "sa", times=(50.0, 1e5, 1e6), dt: float = 1e-2,
                     log_step: float = 1e-2) -> np.ndarray:
    """Σ at the increasing positive ``times`` (T,), from S0 (d, d) or a batch S0 (M, d, d): (T, d, d) or (M, T, d, d).

    A (H, d, d) or (M, H, d, d) are the kernels β K_hᵀQ_h (``attention_kernels``), V the values (None: the
    identity), B the L2 kernels β K_hᵀK_h; weights without the M axis are shared. Up to times[0], RK4 in t with
    steps ≤ dt; after it, RK4 in the log time τ = log t with steps ≤ ``log_step``: the covariance ODE does not
    involve the mean, and near a limit of the collapsing kind (A_sΣ* = 0) Σ moves like 1/t, which log time resolves
    with steps of O(1) up to t = 10⁶ and beyond. A member still far from its limit at times[0] may be stiff in log
    time and come back non-finite: read that as "not converged"."""
    S0 = np.asarray(S0, dtype=np.float64)
    batched = S0.ndim == 3
    S0 = S0.reshape((-1,) + S0.shape[-2:])
    members, d = S0.shape[0], S0.shape[-1]
    times = np.asarray(times, dtype=np.float64)
    if times.ndim != 1 or times.size == 0 or times[0] <= 0 or np.any(np.diff(times) <= 0):
        raise ValueError("times must be positive and increasing")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")

    def per_member(a, fill):
        a = fill if a is None else np.asarray(a, dtype=np.float64)
        a = a[None] if a.ndim == 2 else a
        return np.broadcast_to(a, (members,) + a.shape[-3:]) if a.ndim == 3 else a

    A = per_member(A, None)
    V = per_member(V, np.broadcast_to(np.eye(d), A.shape[-3:]))
    B = per_member(B, np.zeros(A.shape[-3:]))
    first = int(np.ceil(times[0] / dt))
    logs = np.diff(np.log(times))
    counts = tuple(int(max(1, np.ceil(g / log_step))) for g in logs)
    out = np.asarray(_covariance_solve(jnp.asarray(S0), jnp.asarray(A), jnp.asarray(V), jnp.asarray(B), kind,
                                       first, counts, float(times[0]), jnp.asarray(logs)))
    out = 0.5 * (out + np.swapaxes(out, -1, -2))
    return out if batched else out[0]


@functools.partial(jax.jit, static_argnames=("kind", "first", "counts"))
def _covariance_solve(S0, A, V, B, kind, first, counts, t_first, logs):
    def one(S, A, V, B):
        m = jnp.zeros(S.shape[-1], S.dtype)

        def in_t(S):
            return closure_rhs(m, S, A, V, kind, B)[1]

        def in_log_t(y):  # y = (log t, Σ)
            t = jnp.exp(y[0])
            return jnp.ones_like(y[0]), t * closure_rhs(m, y[1], A, V, kind, B)[1]

        S = jax.lax.fori_loop(0, first, lambda _, z: _rk4(in_t, z, t_first / first), S)
        saved, y = [S], (jnp.log(jnp.asarray(t_first, S.dtype)), S)
        for k, count in enumerate(counts):
            h = logs[k] / count
            y = jax.lax.fori_loop(0, count, lambda _, z: _rk4(in_log_t, z, h), y)
            saved.append(y[1])
        return jnp.stack(saved)

    return jax.vmap(one)(S0, A, V, B)


def identity_value_covariance(S0, A, t, lam: float = 1.0) -> np.ndarray:
    """The exact Σ_t of the closure with V = λI (module docstring), at the times t (scalar or (T,))."""
    S0 = np.asarray(S0, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    A = A.sum(axis=0) if A.ndim == 3 else A  # heads with the same V = λI add up
    As = 0.5 * (A + A.T)
    w, U = np.linalg.eigh(S0)
    root = (U * np.sqrt(np.maximum(w, 0.0))) @ U.T
    inner = root @ As @ root
    ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
    eye = np.eye(S0.shape[0])
    out = np.stack([root @ np.linalg.solve(eye - 2.0 * lam * s * inner, root) for s in ts])
    return out if np.ndim(t) else out[0]


def kernel_dimension(A, rtol: float = 1e-10) -> int:
    """dim ker A_s of the symmetric part of A (summed over heads): the limit ranks' bound d − rank A_s."""
    A = np.asarray(A, dtype=np.float64)
    A = A.sum(axis=0) if A.ndim == 3 else A
    w = np.abs(np.linalg.eigvalsh(0.5 * (A + A.T)))
    return int(np.sum(w <= rtol * max(w.max(), 1e-300)))


def identity_value_limit(S0, A, rtol: float = 1e-10) -> np.ndarray:
    """lim Σ_t for V = λI, λ > 0 and A_s ⪯ 0: P(PᵀΣ_0⁻¹P)⁻¹Pᵀ with P an orthonormal basis of ker A_s (S0 ≻ 0)."""
    S0 = np.asarray(S0, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    A = A.sum(axis=0) if A.ndim == 3 else A
    w, U = np.linalg.eigh(0.5 * (A + A.T))
    if w.max() > rtol * max(np.abs(w).max(), 1e-300):
        raise ValueError("identity_value_limit needs A_s ⪯ 0 (otherwise Σ blows up in finite time)")
    P = U[:, np.abs(w) <= rtol * max(np.abs(w).max(), 1e-300)]
    if P.shape[1] == 0:
        return np.zeros_like(S0)
    inner = P.T @ np.linalg.solve(S0, P)
    return P @ np.linalg.solve(inner, P.T)


def settled_rank(S_before, S_after, *, keep: float = 0.95, decay: float = 0.2):
    """(rank, settled) of the limit of a covariance seen at two times t < t' = 10t (S_before, S_after: (..., d, d)).

    Sorted eigenvalues that keep λ(t')/λ(t) ≥ ``keep`` persist; those that fall below ``decay`` collapse (like 1/t,
    the ratio is 1/10); a member with a ratio in between, or a non-finite one, has not settled. Nothing about A is
    assumed, so the rank can be compared with the bound d − rank A_s."""
    a, b = np.asarray(S_before, dtype=np.float64), np.asarray(S_after, dtype=np.float64)
    finite = np.isfinite(a).all(axis=(-1, -2)) & np.isfinite(b).all(axis=(-1, -2))
    eye = np.eye(a.shape[-1])
    a = np.where(finite[..., None, None], a, eye)
    b = np.where(finite[..., None, None], b, eye)
    wa, wb = np.linalg.eigvalsh(a), np.linalg.eigvalsh(b)
    ratio = wb / np.maximum(np.abs(wa), 1e-300)
    settled = finite & np.all((ratio >= keep) | (ratio < decay), axis=-1)
    return np.sum(ratio >= keep, axis=-1), settled


def empirical_moments(x) -> tuple[np.ndarray, np.ndarray]:
    """Mean (..., d) and covariance (..., d, d) of the empirical measure of x (..., n, d) (normalized by n)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.mean(axis=-2)
    c = x - m[..., None, :]
    return m, np.swapaxes(c, -1, -2) @ c / x.shape[-2]


def gaussian_sample(rng: np.random.Generator, n: int, m, S, batch: tuple = ()) -> np.ndarray:
    """n i.i.d. draws of N(m, S) (batch + (n, d)), by S^{1/2} times standard normals (S may be singular)."""
    S = np.asarray(S, dtype=np.float64)
    w, U = np.linalg.eigh(S)
    root = (U * np.sqrt(np.maximum(w, 0.0))) @ U.T
    z = rng.standard_normal(tuple(batch) + (n, S.shape[0]))
    return np.asarray(m, dtype=np.float64) + z @ root


def random_covariance(rng: np.random.Generator, d: int, batch: tuple = ()) -> np.ndarray:
    """GGᵀ/d with G a d × d standard Gaussian matrix (Wishart, mean I): the paper's random S0 up to the 1/d."""
    G = rng.standard_normal(tuple(batch) + (d, d))
    return G @ np.swapaxes(G, -1, -2) / d
