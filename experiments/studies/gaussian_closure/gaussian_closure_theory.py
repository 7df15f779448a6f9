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

**Solving it.** ``solve_closure`` (m and Σ) and ``solve_covariance`` (Σ alone, a batch of draws up to t = 10⁶) carry
Σ = WWᵀ by a factor, Ẇ = LW, so that Σ stays symmetric positive semi-definite to rounding (checked at every save
time to 8d²ε‖Σ‖, ``psd_tolerance``), and step (m, W) with error control in float64: diffrax's Kvaerno5 (implicit,
L-stable; full Newton) with PID steps to rtol = 1e-8, atol = 1e-11 by default, ending exactly at the save times. The
draws are stiff: with the authors' weights (V = GᵀG, ‖V‖ ≈ 5–27, S0 = HHᵀ, d = 5) the Jacobian has eigenvalues near
−700 at t = 0 and down to −18 still at t = 300, while Σ creeps to its limit on the timescale t, so explicit pairs are
held to short steps by stability (DOP853: up to 17 000 evaluations to t = 300; Tsit5: up to 10⁵ steps to 10⁶), and
a fixed-step RK4 at dt = 0.01 returns a non-finite or indefinite Σ on 24 of 30 such draws. Kvaerno5 takes a few
hundred steps to t = 10⁶, growing them with t, and agrees with DOP853 at rtol 1e-12 to 1.3 rtol over the 30 draws
up to t = 300.
A solve that cannot be kept (max_steps, a non-finite state, a blow-up, an indefinite Σ) raises ValueError naming the
draw, the time reached, why and what to change; ``solve_covariance(..., on_failure="mask")`` returns the others and
which failed (``MaskedCovariances``).

Implemented: SA, multi-head, L2 and Sinkhorn closures (``affine_velocity``, ``closure_rhs``), their solvers above,
the exact solutions, and the rank of a limit covariance from two late times (``settled_rank``). Not implemented: the
paper's sigmoid and masked attention (not Gaussian-preserving in the same way) and its gradient-flow
(Bures–Wasserstein) reading.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

KINDS = ("sa", "l2", "sinkhorn")
"""The attention kinds whose Gaussian closure is implemented."""

__all__ = [
    "KINDS",
    "attention_kernels",
    "paper_beta",
    "affine_velocity",
    "closure_rhs",
    "factored_velocity",
    "closure_weights",
    "psd_root",
    "identity_value_covariance",
    "identity_value_limit",
    "settled_rank",
    "kernel_dimension",
    "empirical_moments",
    "gaussian_sample",
    "random_covariance",
]


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
        given = Qs if Qs is not None else Ks
        if given is None:
            raise ValueError("d is needed when Q and K are both the identity")
        d = given.shape[-1]
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


def psd_root(S: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """The PSD square root of a symmetric matrix (negative rounding eigenvalues clipped); not for derivatives."""
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    return (U * jnp.sqrt(jnp.maximum(w, 0.0))) @ U.T


@jax.custom_jvp
def _spd_sqrt(S: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """The square root of a symmetric positive definite S, differentiable where eigenvalues repeat."""
    return psd_root(S)


@_spd_sqrt.defjvp
def _spd_sqrt_jvp(primals, tangents):
    # R = S^{1/2} solves RṘ + ṘR = Ṡ: in the eigenbasis Ṙ_ij = Ṡ_ij / (√w_i + √w_j), finite for S ≻ 0
    # whatever the multiplicities (the eigenvector derivatives of eigh are not)
    (S,), (dS,) = primals, tangents
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    r = jnp.sqrt(jnp.maximum(w, 0.0))
    inner = U.T @ (0.5 * (dS + dS.T)) @ U / (r[:, None] + r[None, :])
    return (U * r) @ U.T, U @ inner @ U.T


def factored_velocity(m, S, W, A, V, kind, B):
    """(b, L) of N(m, S) with S = WWᵀ; W (any such factor) is read by the Sinkhorn kind only."""
    d = S.shape[-1]
    eye = jnp.eye(d, dtype=S.dtype)
    b = jnp.zeros(d, S.dtype)
    L = jnp.zeros((d, d), S.dtype)
    for h in range(A.shape[0]):
        Ah, Vh = A[h], V[h]
        if kind == "sa":
            b, L = b + Vh @ m, L + Vh @ S @ Ah
        elif kind == "l2":
            G = jnp.linalg.solve(eye + S @ B[h], eye)
            b, L = b + Vh @ G @ m, L + Vh @ G @ S @ Ah
        elif kind == "sinkhorn":
            # with W = S^{1/2}O (O orthogonal), N = WᵀAᵀW = OᵀNO: L = VW·shrink(N)·WᵀA is the same for every factor
            N = W.T @ Ah.T @ W
            shrink = 2.0 * jnp.linalg.solve(eye + _spd_sqrt(eye + 4.0 * N.T @ N), eye)
            Lh = Vh @ W @ shrink @ W.T @ Ah
            b, L = b + Vh @ m - Lh @ m, L + Lh
        else:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return b, L


def affine_velocity(m, S, A, V, kind: str = "sa", B=None):
    """(b, L) with the mean-field velocity v(x) = b + L x of μ = N(m, S) (module docstring).

    A (H, d, d) the kernels β K_hᵀQ_h, V (H, d, d) the values, B (H, d, d) the kernels β K_hᵀK_h of L2 attention.
    """
    return factored_velocity(m, S, psd_root(S) if kind == "sinkhorn" else None, A, V, kind, B)


def closure_rhs(m, S, A, V, kind: str = "sa", B=None):
    """(ṁ, Ṡ) of the closure: ṁ = b + L m, Ṡ = L S + S Lᵀ with (b, L) = ``affine_velocity``."""
    b, L = affine_velocity(m, S, A, V, kind, B)
    LS = L @ S
    return b + L @ m, LS + LS.T


def closure_weights(beta, Q, K, V, d, kind):
    """(A, V, B) of the closure as arrays (H, d, d): kernels, values, and the L2 kind's β K_hᵀK_h (zeros otherwise)."""
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


def settled_rank(S_before, S_after, *, keep: float = 0.99, decay: float = 0.2):
    """(rank, settled) of the limit of a covariance seen at two times t < t' = 10t (S_before, S_after: (..., d, d)).

    Sorted eigenvalues whose ratio λ(t')/λ(t) is within 1 − ``keep`` of 1 persist (a limit λ* + c/t moves by
    0.9c/(λ*t) over the decade); those that fall below ``decay`` collapse (like 1/t, the ratio is 1/10); a member with
    any other ratio has not settled. Both sides count: with a nearly singular V (smallest eigenvalue 4e-8 or 1e-4) an
    eigenvalue can still drift by 1.5–2% per decade at t = 10⁶, either way, before it collapses (after t = 10⁷).
    Nothing about A is assumed, so the rank can be compared with the bound d − rank A_s. Non-finite covariances are
    refused: a failed solve has no limit rank (leave such members out; ``solve_covariance(..., on_failure="mask")``
    says which they are)."""
    a, b = np.asarray(S_before, dtype=np.float64), np.asarray(S_after, dtype=np.float64)
    finite = np.isfinite(a).all(axis=(-1, -2)) & np.isfinite(b).all(axis=(-1, -2))
    if not finite.all():
        bad = np.argwhere(~finite)
        who = f" of member {tuple(int(i) for i in bad[0])} ({len(bad)} of {finite.size})" if finite.ndim else ""
        raise ValueError(
            f"settled_rank: the covariances{who} are not finite: a failed solve has no limit rank; leave it out"
        )
    wa, wb = np.linalg.eigvalsh(a), np.linalg.eigvalsh(b)
    ratio = wb / np.maximum(np.abs(wa), 1e-300)
    persist = np.abs(ratio - 1.0) <= 1.0 - keep
    return np.sum(persist, axis=-1), np.all(persist | (ratio < decay), axis=-1)


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
