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

import functools
from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx
from jaxtyping import Array, Float

KINDS = ("sa", "l2", "sinkhorn")
"""The attention kinds whose Gaussian closure is implemented."""

METHODS = ("kvaerno5", "tsit5", "dopri8")
"""The integrators of ``solve_closure`` and ``solve_covariance`` (diffrax's, with PID step control): "kvaerno5",
implicit and L-stable (the default: draws that have not collapsed yet are stiff), and the explicit pairs "tsit5"
and "dopri8" for runs known to be non-stiff."""

__all__ = [
    "KINDS",
    "METHODS",
    "ClosureSolution",
    "MaskedCovariances",
    "psd_tolerance",
    "attention_kernels",
    "paper_beta",
    "affine_velocity",
    "closure_rhs",
    "solve_closure",
    "solve_covariance",
    "identity_value_covariance",
    "identity_value_limit",
    "settled_rank",
    "kernel_dimension",
    "empirical_moments",
    "gaussian_sample",
    "random_covariance",
]


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


def _psd_root(S: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """The PSD square root of a symmetric matrix (negative rounding eigenvalues clipped); not for derivatives."""
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    return (U * jnp.sqrt(jnp.maximum(w, 0.0))) @ U.T


@jax.custom_jvp
def _spd_sqrt(S: Float[Array, "d d"]) -> Float[Array, "d d"]:
    """The square root of a symmetric positive definite S, differentiable where eigenvalues repeat."""
    return _psd_root(S)


@_spd_sqrt.defjvp
def _spd_sqrt_jvp(primals, tangents):
    # R = S^{1/2} solves RṘ + ṘR = Ṡ: in the eigenbasis Ṙ_ij = Ṡ_ij / (√w_i + √w_j), finite for S ≻ 0
    # whatever the multiplicities (the eigenvector derivatives of eigh are not)
    (S,), (dS,) = primals, tangents
    w, U = jnp.linalg.eigh(0.5 * (S + S.T))
    r = jnp.sqrt(jnp.maximum(w, 0.0))
    inner = U.T @ (0.5 * (dS + dS.T)) @ U / (r[:, None] + r[None, :])
    return (U * r) @ U.T, U @ inner @ U.T


def _velocity(m, S, W, A, V, kind, B):
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
    return _velocity(m, S, _psd_root(S) if kind == "sinkhorn" else None, A, V, kind, B)


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


def _check_steps(rtol, atol, max_steps, method, dt):
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise ValueError(f"{name} must be a number in (0, 1), got {value!r}")
    if isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer)) or max_steps < 1:
        raise ValueError(f"max_steps must be a positive integer, got {max_steps!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if dt is not None and not (isinstance(dt, (int, float)) and not isinstance(dt, bool) and 0 < dt < np.inf):
        raise ValueError(f"dt (the first step) must be None or a positive number, got {dt!r}")


def _method(name: str, rtol: float, atol: float):
    if name == "kvaerno5":
        # full Newton (a fresh Jacobian every iteration): with diffrax's chord iteration (a frozen Jacobian) the stiff
        # draws fail to converge and about every other step is rejected. Solved to the steps' own tolerance: late
        # steps have h|λ| up to ~10⁵, where 100× tighter Newton tolerances are out of the linear solves' reach (at
        # rtol = 1e-9, 7 of the authors' 30 draws then spent 3000 steps short of t = 10⁶), with no gain in accuracy
        return diffrax.Kvaerno5(root_finder=optx.Newton(rtol=rtol, atol=atol, norm=optx.rms_norm))
    return {"tsit5": diffrax.Tsit5, "dopri8": diffrax.Dopri8}[name]()


class _Stalls(diffrax.AbstractStepSizeController):
    """Ends a solve (diffrax's dt_min_reached) once the wrapped controller asks for a step below 64 ulps of the time, or
    a non-finite one: near a finite-time blow-up the steps shrink geometrically and would otherwise be rejected until
    max_steps. Runs that never get there are unchanged."""

    controller: diffrax.AbstractStepSizeController

    def wrap(self, direction):
        return _Stalls(self.controller.wrap(direction))

    def init(self, terms, t0, t1, y0, dt0, args, func, error_order):
        return self.controller.init(terms, t0, t1, y0, dt0, args, func, error_order)

    def adapt_step_size(self, t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state):
        keep, next_t0, next_t1, jump, state, result = self.controller.adapt_step_size(
            t0, t1, y0, y1_candidate, args, y_error, error_order, controller_state
        )
        step, scale = next_t1 - next_t0, jnp.maximum(jnp.abs(next_t0), jnp.abs(next_t1))
        stall = ~(step >= 64 * jnp.finfo(jnp.result_type(step)).eps * scale)
        return keep, next_t0, next_t1, jump, state, diffrax.RESULTS.where(stall, diffrax.RESULTS.dt_min_reached, result)


def _run(m0, W0, t0: float, ts: np.ndarray, A, V, B, *, kind, method, rtol, atol, max_steps, dt):
    """``_integrate`` with the save times padded to a power of two (repeating the last): one compiled solve serves
    every number of save times up to it. Returns numpy arrays."""
    size = 1 << max(2, int(ts.size - 1).bit_length())
    padded = np.concatenate([ts, np.full(size - ts.size, ts[-1])])
    out = _integrate(
        None if m0 is None else jnp.asarray(m0),
        jnp.asarray(W0),
        jnp.asarray(t0),
        jnp.asarray(padded),
        jnp.asarray(A),
        jnp.asarray(V),
        jnp.asarray(B),
        jnp.asarray(float(rtol)),
        jnp.asarray(float(atol)),
        None if dt is None else jnp.asarray(float(dt)),
        kind=kind,
        method=method,
        max_steps=int(max_steps),
    )
    (mean, W), (m_end, W_end), t_end, status = jax.tree.map(np.asarray, out)
    return None if mean is None else mean[:, : ts.size], W[:, : ts.size], m_end, W_end, t_end, status


@functools.partial(jax.jit, static_argnames=("kind", "method", "max_steps"))
def _integrate(m0, W0, t0, ts, A, V, B, rtol, atol, dt, *, kind, method, max_steps):
    """Members (the leading axis of W0, A, V, B; m0 None: no mean) from t0 to ts[-1], saved at ts.

    Σ = WWᵀ with Ẇ = LW (then Σ̇ = LΣ + ΣLᵀ), ṁ = b + Lm. Returns the saves (m or None, W) (M, T, ·), each member's
    last (m, W) and the time it reached, and its status: 0 done, 1 max_steps reached, 2 another failure (``_Stalls``,
    the implicit stages did not converge)."""

    def one(m0, W0, A, V, B):
        def field(t, y, args):
            m, W = y
            S = W @ W.T
            b, L = _velocity(jnp.zeros(S.shape[-1], S.dtype) if m is None else m, S, W, A, V, kind, B)
            return (None if m is None else b + L @ m), L @ W

        # steps end at the save times: saves are step ends, not the lower-order dense interpolant
        control = _Stalls(diffrax.ClipStepSizeController(diffrax.PIDController(rtol=rtol, atol=atol), step_ts=ts))
        sol = diffrax.diffeqsolve(
            diffrax.ODETerm(field),
            _method(method, rtol, atol),
            t0,
            ts[-1],
            dt,
            (m0, W0),
            saveat=diffrax.SaveAt(subs=[diffrax.SubSaveAt(ts=ts), diffrax.SubSaveAt(t1=True)]),
            stepsize_controller=control,
            max_steps=max_steps,
            throw=False,
        )
        status = jnp.where(
            sol.result == diffrax.RESULTS.successful,
            0,
            jnp.where(sol.result == diffrax.RESULTS.max_steps_reached, 1, 2),
        )
        m_end = None if m0 is None else sol.ys[1][0][0]
        return sol.ys[0], (m_end, sol.ys[1][1][0]), sol.ts[1][0], status

    return jax.vmap(one, in_axes=(None if m0 is None else 0, 0, 0, 0, 0))(m0, W0, A, V, B)


def psd_tolerance(d: int) -> float:
    """The relative tolerance 8 d² ε of the PSD check: Σ = WWᵀ is PSD exactly, and forming the product perturbs it
    by at most d ε tr Σ ≤ d² ε ‖Σ‖ (Frobenius), eigvalsh by a few d ε ‖Σ‖ more (Weyl: so much for its eigenvalues)."""
    return 8.0 * d * d * float(np.finfo(np.float64).eps)


def _checked(ts, t0, m0, W0, mean, W, m_end, W_end, t_end, status, *, max_steps, rtol, atol, what):
    """(mean, cov, why) of the members started from (m0, W0) at t0: cov = WWᵀ at ts; why[i] "" for a kept member, else
    what went wrong, where, and what to change."""
    m0, W0, mean, W, m_end, W_end = (
        None if a is None else np.asarray(a, dtype=np.float64) for a in (m0, W0, mean, W, m_end, W_end)
    )
    t_end, status = np.asarray(t_end, dtype=np.float64), np.asarray(status)
    prod = W @ np.swapaxes(W, -1, -2)
    cov = 0.5 * (prod + np.swapaxes(prod, -1, -2))
    why = []
    for i in range(W.shape[0]):
        with np.errstate(over="ignore", invalid="ignore"):  # the norms of a state on its way to overflow
            why.append(
                _diagnose(
                    ts,
                    t0,
                    m0 if mean is None else (m0[i], mean[i], m_end[i]),
                    W0[i],
                    cov[i],
                    prod[i],
                    W_end[i],
                    t_end[i],
                    status[i],
                    max_steps=max_steps,
                    rtol=rtol,
                    atol=atol,
                    where=f"{what}{i}: " if what else "",
                )
            )
    return mean, cov, why


def _diagnose(ts, t0, means, W0, cov, prod, W_end, t_end, status, *, max_steps, rtol, atol, where) -> str:
    """ "" for a member kept by ``_checked``, else what went wrong, where, and what to change. ``means``: None (no mean)
    or (m0, the saved means, the last mean)."""
    tolerances = f"rtol/atol (now {rtol:g}/{atol:g})"
    past = (
        "the closure blows up in finite time there (as when A_s has a positive direction)"
        if means is None
        else "the closure blows up there (as when A_s has a positive direction) or overflows (the mean grows like "
        "e^{Vt} for V ≻ 0)"
    ) + " and has no solution past it: keep the times before it"
    finite = np.isfinite(cov).all(axis=(-1, -2)) & (True if means is None else np.isfinite(means[1]).all(axis=-1))
    done = ts <= t_end if np.isfinite(t_end) else np.zeros(ts.shape, bool)
    reached = t_end if np.isfinite(t_end) else (ts[finite][-1] if finite.any() else ts[0])
    last = np.linalg.norm(W_end, 2) ** 2 if np.isfinite(W_end).all() else np.inf
    growth = [(np.linalg.norm(W0, 2) ** 2, last, "‖Σ‖")]
    if means is not None and not np.linalg.norm(means[0]) == np.linalg.norm(means[2]) == 0:
        growth.append((np.linalg.norm(means[0]), np.linalg.norm(means[2]), "|m|"))
    grew = any(b > 1e6 * max(a, np.finfo(np.float64).tiny) or not np.isfinite(b) for a, b, _ in growth)
    at = (
        f"t = {reached:.6g} of {ts[-1]:g} ({', '.join(f'{n} {a:.3g} → {b:.3g}' for a, b, n in growth)} from t = {t0:g})"
    )
    if not all(np.isfinite(b) for _, b, _ in growth) or not finite[done].all():
        return f"{where}the state became non-finite at {at}: {past}; if no blow-up is expected, tighten {tolerances}"
    if status == 1:
        return (
            f"{where}the solve used its max_steps = {max_steps} steps and stopped at {at}: raise max_steps or "
            f"loosen {tolerances}"
        )
    if status != 0 or reached < ts[-1] or not finite.all():
        # near a blow-up the steps shrink to rounding (``_Stalls``) and the implicit stages stop converging
        return f"{where}the solver could not step past {at}: " + (
            past if grew else f"its implicit stages did not converge; loosen {tolerances}, or try method='dopri8'"
        )
    tol = psd_tolerance(cov.shape[-1])
    asym = np.abs(prod - np.swapaxes(prod, -1, -2)).max(axis=(-1, -2))
    low = np.linalg.eigvalsh(cov).min(axis=-1)
    norm = np.maximum(np.linalg.norm(cov, 2, axis=(-1, -2)), np.finfo(np.float64).tiny)
    bad = (asym > tol * norm) | (low < -tol * norm)
    if not bad.any():
        return ""
    k = int(np.argmax(bad))
    return (
        f"{where}Σ at t = {ts[k]:.6g} is not symmetric positive semi-definite (smallest eigenvalue "
        f"{low[k] / norm[k]:.2e} ‖Σ‖, asymmetry {asym[k] / norm[k]:.1e} ‖Σ‖, tolerance {tol:.1e} ‖Σ‖): tighten "
        f"{tolerances}"
    )


def _raise(name: str, why: list[str]) -> None:
    bad = [w for w in why if w]
    if bad:
        more = f" (and {len(bad) - 1} more draw{'s' if len(bad) > 2 else ''} of {len(why)})" if len(bad) > 1 else ""
        raise ValueError(f"{name}: {bad[0]}{more}")


def solve_closure(
    m0,
    S0,
    ts,
    beta: float,
    Q=None,
    K=None,
    V=None,
    *,
    kind: str = "sa",
    rtol: float = 1e-8,
    atol: float = 1e-11,
    max_steps: int = 100_000,
    method: str = "kvaerno5",
    dt: float | None = None,
) -> ClosureSolution:
    """The closure's N(m_t, Σ_t) at the increasing times ``ts`` (from ts[0]), with error control in float64.

    Q, K (k, d) or (heads, k, d), V (d, d) or (heads, d, d); None is the identity. ``kind``: "sa" (softmax, one or
    several heads), "l2" or "sinkhorn" (module docstring). Σ = WWᵀ is carried by a factor W (Ẇ = LW), so it stays
    symmetric positive semi-definite to rounding; ``method`` (``METHODS``) steps (m, W) with PID control of the error
    per step to ``atol`` + ``rtol``·|y| (``dt``, if given, is the first step; None: diffrax's estimate), at most
    ``max_steps`` steps. A solve that cannot reach ts[-1] with a finite, PSD Σ raises ValueError (the time reached,
    why, what to change): a closure that blows up in finite time has no solution past it.
    """
    m0, S0, d = _check_moments(m0, S0)
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0 or not np.isfinite(ts).all() or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a non-empty increasing 1-D array of finite times")
    _check_steps(rtol, atol, max_steps, method, dt)
    A, Vs, B = _weights(beta, Q, K, V, d, kind)
    W0 = np.asarray(_psd_root(jnp.asarray(S0)))
    if ts[-1] == ts[0]:  # nothing to integrate
        S = 0.5 * (W0 @ W0.T + (W0 @ W0.T).T)
        return ClosureSolution(ts, np.broadcast_to(m0, (ts.size, d)).copy(), np.broadcast_to(S, (ts.size, d, d)).copy())
    out = _run(
        m0[None],
        W0[None],
        ts[0],
        ts,
        A[None],
        Vs[None],
        B[None],
        kind=kind,
        method=method,
        rtol=rtol,
        atol=atol,
        max_steps=max_steps,
        dt=dt,
    )
    mean, cov, why = _checked(ts, ts[0], m0[None], W0[None], *out, max_steps=max_steps, rtol=rtol, atol=atol, what="")
    _raise("solve_closure", why)
    return ClosureSolution(ts, mean[0], cov[0])


class MaskedCovariances(NamedTuple):
    """``solve_covariance(..., on_failure="mask")``: Σ (M, T, d, d), NaN for the members that ``failed`` (M,), and
    ``why`` (M,) each failed (the message ``on_failure="raise"`` would give; "" for the others)."""

    cov: np.ndarray
    failed: np.ndarray
    why: tuple


def _check_covariances(S0: np.ndarray) -> None:
    scale = np.maximum(1.0, np.abs(S0).max(axis=(-1, -2)))
    asym = np.abs(S0 - np.swapaxes(S0, -1, -2)).max(axis=(-1, -2)) > 1e-12 * scale
    neg = np.linalg.eigvalsh(0.5 * (S0 + np.swapaxes(S0, -1, -2))).min(axis=-1) < -1e-12 * scale
    for name, bad in (("symmetric", asym), ("positive semi-definite", neg)):
        if bad.any():
            raise ValueError(f"S0 must be {name}: member {int(np.argmax(bad))} is not")


def solve_covariance(
    S0,
    A,
    V=None,
    *,
    B=None,
    kind: str = "sa",
    times=(50.0, 1e5, 1e6),
    rtol: float = 1e-8,
    atol: float = 1e-11,
    max_steps: int = 100_000,
    method: str = "kvaerno5",
    dt: float | None = None,
    on_failure: str = "raise",
):
    """Σ at the increasing times ``times`` ≥ 0 (T,), from S0 (d, d) at t = 0 or a batch S0 (M, d, d): (T, d, d) or
    (M, T, d, d).

    A (H, d, d) or (M, H, d, d) are the kernels β K_hᵀQ_h (``attention_kernels``), V the values (None: the
    identity), B the L2 kernels β K_hᵀK_h; weights without the M axis are shared. The covariance ODE does not
    involve the mean; it is solved as in ``solve_closure`` (rtol, atol, max_steps, method, dt), from t = 0 to
    times[-1] in one error-controlled solve per member. The default implicit method lets the steps grow with t
    where Σ creeps to its limit like 1/t while Jacobian eigenvalues of O(1)–O(10) remain (the draws not yet
    collapsed): up to t = 10⁶ in a few hundred steps, where an explicit pair needs 10⁴–10⁵.

    ``on_failure``: "raise" (ValueError naming the first failed member, the time it reached, why and what to
    change) or "mask" (a ``MaskedCovariances``: the others' Σ, and which failed and why)."""
    S0 = np.asarray(S0, dtype=np.float64)
    if S0.ndim not in (2, 3) or S0.shape[-1] != S0.shape[-2]:
        raise ValueError(f"S0 must have shape (d, d) or (M, d, d), got {S0.shape}")
    batched = S0.ndim == 3
    S0 = S0.reshape((-1,) + S0.shape[-2:])
    members, d = S0.shape[0], S0.shape[-1]
    _check_covariances(S0)
    times = np.asarray(times, dtype=np.float64)
    if (
        times.ndim != 1
        or times.size == 0
        or times[0] < 0
        or not np.isfinite(times).all()
        or np.any(np.diff(times) <= 0)
    ):
        raise ValueError("times must be finite, non-negative and increasing")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if on_failure not in ("raise", "mask"):
        raise ValueError(f"on_failure must be 'raise' or 'mask', got {on_failure!r}")
    _check_steps(rtol, atol, max_steps, method, dt)

    def per_member(a, fill):
        a = fill if a is None else np.asarray(a, dtype=np.float64)
        a = a[None] if a.ndim == 2 else a
        return np.broadcast_to(a, (members,) + a.shape[-3:]) if a.ndim == 3 else a

    A = per_member(A, None)
    V = per_member(V, np.broadcast_to(np.eye(d), A.shape[-3:]))
    B = per_member(B, np.zeros(A.shape[-3:]))
    W0 = np.asarray(jax.vmap(_psd_root)(jnp.asarray(S0)))
    if times[-1] == 0.0:
        out = None, W0[:, None], None, W0, np.zeros(members), np.zeros(members, int)
    else:
        out = _run(
            None, W0, 0.0, times, A, V, B, kind=kind, method=method, rtol=rtol, atol=atol, max_steps=max_steps, dt=dt
        )
    _, cov, why = _checked(
        times, 0.0, None, W0, *out, max_steps=max_steps, rtol=rtol, atol=atol, what="draw " if batched else ""
    )
    if on_failure == "raise":
        _raise("solve_covariance", why)
        return cov if batched else cov[0]
    failed = np.array([bool(w) for w in why])
    cov[failed] = np.nan
    if not batched:
        return MaskedCovariances(cov[0], failed[0], tuple(why))
    return MaskedCovariances(cov, failed, tuple(why))


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
