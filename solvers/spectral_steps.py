"""The adaptive time stepping of the spectral mean-field solvers (circle and sphere): one loop for both.

A density is held as spectral coefficients c (Fourier modes on the circle, spherical harmonics on S²)
and moves by ċ = L c + N(c): N the transport by the attention field (nonlinear, formed on a grid),
L a diagonal linear part (diffusion: −D k² on the circle, −D ℓ(ℓ+1) on the sphere; zero without noise).

Steps: Dormand–Prince 5(4) in the integrating-factor (Lawson) form, so L is integrated exactly and a
stiff diffusion costs no step size: with stage nodes c_i, Y_i = e^{c_i h L} c + h Σ_j a_ij e^{(c_i − c_j) h L} k_j,
k_i = N(Y_i), c' = e^{hL} c + h Σ_j b_j e^{(1 − c_j) h L} k_j (the last stage is c' itself, so its k
starts the next step). Without L it is plain DP5(4). The error is measured on the grid against
atol + rtol·max ρ; a step is also rejected, and the next halved, when the new density dips below
−positivity_tol·max ρ, so an explicit step that overshoots near zero is retried smaller instead of
seeding spurious growth. Steps land on every save time; the loop is a ``jax.lax.while_loop``
(jit- and vmap-able), returning the saved grid densities, the step counts, the time reached and a status.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "RUNNING",
    "DONE",
    "TOO_SMALL",
    "MAX_STEPS",
    "NON_FINITE",
    "CAUSES",
    "MIN_STEP",
    "check_horizon",
    "solve_adaptive",
    "raise_failures",
]

# Dormand–Prince 5(4): stages, 5th-order weights (= the last stage, FSAL) and error weights
_A = (
    (),
    (1 / 5,),
    (3 / 40, 9 / 40),
    (44 / 45, -56 / 15, 32 / 9),
    (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
    (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
)
_NODES = (0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0)
_E = (71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40)

MIN_STEP = 1e-12
"""The smallest step, relative to the horizon: h ≥ MIN_STEP · max(t1, 1)."""

RUNNING, DONE, TOO_SMALL, MAX_STEPS, NON_FINITE = 0, 1, 2, 3, 4
CAUSES = {
    TOO_SMALL: "the step size fell below its minimum while keeping the density non-negative: the density "
    "has peaks narrower than the grid resolves; use more modes (a larger degree) or an earlier t1",
    MAX_STEPS: "max_steps accepted steps were not enough; raise max_steps",
    NON_FINITE: "the density became non-finite",
}


def check_horizon(t1: float, rate: float, who: str) -> None:
    """Refuse, in one ValueError line, a horizon t1 whose smallest step MIN_STEP·t1 exceeds a hundredth of the
    e-folding time 1/``rate`` of the fastest mode at the uniform density: no step could follow the density
    (the run would stop at once, its peaks unresolved)."""
    limit = 0.01 / (MIN_STEP * rate) if rate > 0 else np.inf
    if t1 > limit:
        raise ValueError(
            f"{who}: t1 = {t1:g} is beyond what the adaptive steps resolve: the smallest step "
            f"{MIN_STEP:g}·t1 exceeds 1/100 of the e-folding time {1 / rate:.3g} of the fastest mode; "
            f"use t1 ≤ {limit:.3g} (the density concentrates into clusters long before)"
        )


def solve_adaptive(
    nonlinear: Callable,
    to_grid: Callable,
    c0,
    ts,
    *,
    linear=None,
    rtol: float,
    atol: float,
    positivity_tol: float,
    max_steps: int,
):
    """Integrate ċ = linear·c + nonlinear(c) from c0 at t = 0, saving ``to_grid(c)`` at the times ``ts``.

    ``linear``: None or an array broadcasting against c (the diagonal of L, ≤ 0 for diffusion).
    Returns (saves (T, *grid), accepted steps, rejected steps, time reached, status); saves after a
    failure are NaN and status is one of DONE, TOO_SMALL, MAX_STEPS, NON_FINITE (see ``CAUSES``).
    """
    T = ts.shape[0]
    t_end = ts[-1]
    h_min = MIN_STEP * jnp.maximum(jnp.abs(t_end), 1.0)

    def propagate(a, tau):  # e^{τ L} a
        return a if linear is None else jnp.exp(tau * linear) * a

    rho0 = to_grid(c0)
    f0 = nonlinear(c0)
    rate = f0 if linear is None else f0 + linear * c0
    speed = jnp.max(jnp.abs(to_grid(rate)))
    h0 = jnp.where(speed > 0, 0.01 * jnp.max(jnp.abs(rho0)) / speed, jnp.inf)
    h0 = jnp.minimum(h0, jnp.maximum(t_end, h_min))
    saves = jnp.full((T,) + rho0.shape, jnp.nan, dtype=rho0.dtype)
    first = ts <= 0.0
    saves = jnp.where(first.reshape((T,) + (1,) * rho0.ndim), rho0[None], saves)
    i0 = jnp.sum(first)

    def cond(s):
        return s["status"] == RUNNING

    def body(s):
        t, c, k1, h, i = s["t"], s["c"], s["k1"], s["h"], s["i"]
        t_next = ts[jnp.minimum(i, T - 1)]
        land = h >= t_next - t
        h_eff = jnp.where(land, t_next - t, h)
        ks = [k1]
        for row, node in zip(_A[1:], _NODES[1:]):
            y = propagate(c, node * h_eff) + h_eff * sum(
                aj * propagate(kj, (node - nj) * h_eff) for aj, kj, nj in zip(row, ks, _NODES) if aj != 0.0
            )
            ks.append(nonlinear(y))
        # the last stage (node 1, the 5th-order weights) is the new state
        c_new = propagate(c, h_eff) + h_eff * sum(
            aj * propagate(kj, (1.0 - nj) * h_eff) for aj, kj, nj in zip(_A[-1], ks[:-1], _NODES) if aj != 0.0
        )
        err_c = h_eff * sum(ej * propagate(kj, (1.0 - nj) * h_eff) for ej, kj, nj in zip(_E, ks, _NODES) if ej != 0.0)
        rho_new = to_grid(c_new)
        peak = jnp.maximum(jnp.max(jnp.abs(rho_new)), jnp.max(jnp.abs(to_grid(c))))
        err = jnp.max(jnp.abs(to_grid(err_c))) / (atol + rtol * peak)
        finite = jnp.all(jnp.isfinite(rho_new)) & jnp.isfinite(err)
        positive = jnp.min(rho_new) >= -positivity_tol * jnp.max(rho_new)
        accept = finite & (err <= 1.0) & positive
        factor = jnp.clip(0.9 * jnp.where(err > 0, err, 1e-10) ** -0.2, 0.2, 5.0)
        factor = jnp.where(accept, factor, jnp.minimum(factor, 1.0))
        factor = jnp.where(positive, factor, jnp.minimum(factor, 0.5))
        factor = jnp.where(finite, factor, 0.25)
        h_new = h_eff * factor
        # a step shortened to land on a save time says nothing against the step before it
        h_new = jnp.where(accept & land, jnp.maximum(h_new, h), h_new)
        t_new = jnp.where(accept, jnp.where(land, t_next, t + h_eff), t)
        saved = accept & land
        saves = jnp.where(saved, s["saves"].at[i].set(rho_new), s["saves"])
        i_new = i + saved
        steps = s["steps"] + accept
        status = jnp.where(
            i_new >= T,
            DONE,
            jnp.where(
                steps >= max_steps,
                MAX_STEPS,
                jnp.where(h_new < h_min, jnp.where(finite, TOO_SMALL, NON_FINITE), RUNNING),
            ),
        ).astype(jnp.int32)
        return dict(
            t=t_new,
            c=jnp.where(accept, c_new, c),
            k1=jnp.where(accept, ks[-1], k1),
            h=h_new,
            i=i_new,
            saves=saves,
            steps=steps,
            rejected=s["rejected"] + (~accept),
            status=status,
        )

    state = dict(
        t=jnp.asarray(0.0, dtype=rho0.dtype),
        c=c0,
        k1=f0,
        h=h0,
        i=i0,
        saves=saves,
        steps=jnp.asarray(0),
        rejected=jnp.asarray(0),
        status=jnp.where(i0 >= T, DONE, RUNNING).astype(jnp.int32),
    )
    out = jax.lax.while_loop(cond, body, state)
    return out["saves"], out["steps"], out["rejected"], out["t"], out["status"]


def raise_failures(solver: str, status, t_final, betas, t_ends, solution, error: type) -> None:
    """Raise ``error`` (message, ``solution``, the first failing ``member`` and its time ``t``) when a member did
    not reach its last save time ``t_ends[m]``; the message names the solver, β, the time and the cause."""
    status = np.asarray(status)
    failed = np.nonzero(status != DONE)[0]
    if not failed.size:
        return
    m = int(failed[0])
    t = float(np.asarray(t_final)[m])
    others = f" (and {failed.size - 1} other members)" if failed.size > 1 else ""
    raise error(
        f"{solver}: member {m} (β = {betas[m]:g}){others} stopped at t = {t:.6g} < {float(t_ends[m]):g}: "
        f"{CAUSES[int(status[m])]}",
        solution=solution,
        member=m,
        t=t,
    )
