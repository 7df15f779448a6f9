"""Solving the Gaussian covariance closure (``gaussian_closure_theory.py``, docs/model.md §10) with error control.

The closure is an ODE for a mean m and a covariance Σ. Σ = WWᵀ is carried by a factor (Ẇ = LW), so it stays
symmetric positive semi-definite to rounding, and (m, W) are stepped by one of diffrax's methods (``METHODS``; the
implicit, L-stable Kvaerno5 by default: draws that have not collapsed yet are stiff) with PID step control, the
steps ending on the save times. ``solve_closure`` follows one Gaussian, ``solve_covariance`` many covariances to
t = 10⁶ at once. Every save is checked finite, symmetric and positive semi-definite (``psd_tolerance``); a solve
that stops short (max_steps, a blow-up, a non-finite state) or leaves an indefinite Σ raises one ConvergenceError line,
or is masked (``on_failure="mask"``).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from ....particles.errors import ConvergenceError
from .gaussian_closure_theory import KINDS, closure_weights, factored_velocity, psd_root

__all__ = ["METHODS", "ClosureSolution", "MaskedCovariances", "psd_tolerance", "solve_closure", "solve_covariance"]

METHODS = ("kvaerno5", "tsit5", "dopri8")
"""The integrators of ``solve_closure`` and ``solve_covariance`` (diffrax's, with PID step control): "kvaerno5",
implicit and L-stable (the default: draws that have not collapsed yet are stiff), and the explicit pairs "tsit5"
and "dopri8" for runs known to be non-stiff."""


class ClosureSolution(NamedTuple):
    """The Gaussian N(mean[t], cov[t]) at the times ``ts`` (T,): mean (T, d), cov (T, d, d)."""

    ts: np.ndarray
    mean: np.ndarray
    cov: np.ndarray


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
            b, L = factored_velocity(jnp.zeros(S.shape[-1], S.dtype) if m is None else m, S, W, A, V, kind, B)
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
        raise ConvergenceError(f"{name}: {bad[0]}{more}")


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
    ``max_steps`` steps. A solve that cannot reach ts[-1] with a finite, PSD Σ raises ConvergenceError (the time reached,
    why, what to change): a closure that blows up in finite time has no solution past it.
    """
    m0, S0, d = _check_moments(m0, S0)
    ts = np.asarray(ts, dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0 or not np.isfinite(ts).all() or np.any(np.diff(ts) < 0):
        raise ValueError("ts must be a non-empty increasing 1-D array of finite times")
    _check_steps(rtol, atol, max_steps, method, dt)
    A, Vs, B = closure_weights(beta, Q, K, V, d, kind)
    W0 = np.asarray(psd_root(jnp.asarray(S0)))
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

    ``on_failure``: "raise" (ConvergenceError naming the first failed member, the time it reached, why and what to
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
    W0 = np.asarray(jax.vmap(psd_root)(jnp.asarray(S0)))
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
