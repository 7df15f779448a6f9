"""The equiangular reduction of SA/USA, [GLPR] Thm 6.8, and Wendel's hemisphere probability, Thm 6.7.

Started from an equiangular configuration ⟨x_i(0), x_j(0)⟩ = ρ0 (i ≠ j), SA and USA with
Q = K = V = I keep it equiangular, and the common inner product γ(t) solves a scalar ODE:

    (6.9)  SA:   γ̇ = 2 e^{βγ} (1−γ) ((n−1)γ + 1) / (e^{β} + (n−1) e^{βγ})
    (6.10) USA:  γ̇ = (2/n) e^{βγ} (1−γ) ((n−1)γ + 1)

``model="usa-rescaled"`` is (6.10) times e^{−β}, USA in the time convention of arXiv 2410.06833
(``USA(time="rescaled")``); its solution is the "usa" one at time e^{β} t.

How the solution is computed. Write a = −1/(n−1) (the regular simplex, a stationary point),
c = 1 − a = n/(n−1), w = 1 − γ, u = γ − a, and the logistic coordinate s = log(u/w), so that
γ = a + c σ(s) with σ the logistic function. Since (n−1)γ + 1 = (n−1)u and 1/(wu) = (1/w + 1/u)/c,
the ODE is separable with an explicit antiderivative in exponential integrals:

    T(γ) = A (s − s0) + J1 + J2,      J1 = ∫_w^{w0} e^{βv}/v dv,   J2 = ∫_{u0}^{u} e^{β(c−y)}/y dy,

where t = T/(2n) with A = n − 1 for SA, t = T/2 with A = 0 for "usa-rescaled" and t = e^{−β}T/2
with A = 0 for "usa". J1 = Ei(βw0) − Ei(βw) and J2 = e^{βc}(E1(βu0) − E1(βu)); they are evaluated
scaled by e^{−βw0} (the largest value of the integrand), so nothing overflows for any β ≥ 0, and
with a power series at small argument, so β = 0 (where they reduce to logarithms) is exact.
The hitting time is this formula evaluated at γ = 1 − δ; γ(t) inverts it by Newton's method in s.
T is concave increasing in s, so Newton from the left end converges monotonically without any
safeguard. For n = 1 (no pairs; the ODE is kept as a formula) s = −log w and J2 is absent.

Accuracy (float64, which ``import attnflow`` enables): hitting times to a few units of rounding;
γ(t) is the exact solution at a time within a few ulps of t (backward error measured ≤ 3e-15
in γ over β ≤ 120, n ≤ 1024, t ≤ 1e40), so |γ − γ(t)| ≲ 1e-15 + 1e-16·t·|γ̇|, and ≤ 1e-11
against DOP853 at rtol 1e-13 for β ≤ 20, t ≤ 10. The t·|γ̇| term is the conditioning of the
problem itself: when t* is astronomically large (SA at large β) γ goes from ρ0 to 1 within
less than one ulp of t.
β may be a scalar or a 1-D array (a leading batch axis), and β and ts may be traced (jax.jit);
n, ρ0, δ and the model must be concrete.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import check_choice, check_int, check_real
from .fields import KERNEL_MODELS

__all__ = ["equiangular_rhs", "equiangular", "hitting_time", "gamma_curve", "wendel_probability"]

MODELS = KERNEL_MODELS  # their codes are indices into it

_EULER = 0.57721566490153286061
# Below |x| = _SMALL the entire function Ein is summed as a power series; above it the
# exponential integrals are scaled and evaluated by continued fraction / series / asymptotics.
_SMALL = 2.0


# ---------------------------------------------------------------------------------------------
# Exponential integrals.  Ein(x) = ∫_0^x (1 − e^{−t})/t dt is entire, E1(x) = −γ_E − log x + Ein(x)
# and Ei(x) = γ_E + log x − Ein(−x) for x > 0. jax.scipy.special.exp1 is not usable here (it did
# not terminate on large arguments in jax 0.10) and neither function has a scaled form, which the
# large-β regime needs, so the three pieces below are written out.


def _ein(x):
    """Ein(x) = Σ_{k≥1} (−1)^{k+1} x^k / (k·k!), for |x| ≤ 2 (terms < 1e-25 beyond k = 32)."""

    def body(k, state):
        term, total = state
        term = -term * x / k
        return term, total + term / k

    return jax.lax.fori_loop(2, 33, body, (x, x))[1]


def _e1_scaled(x):
    """e^x E1(x) for x ≥ 2, by the continued fraction 1/(x+1− 1/(x+3− 4/(x+5− ...))), depth 80.

    Evaluated from the tail (fixed depth, no division by small numbers); at x = 2 depth 80
    converges to below 1e-18 relative.
    """
    depth = 80

    def body(i, f):
        k = depth - 1 - i
        return x + (2 * k + 1) - (k + 1) ** 2 / f

    return 1.0 / jax.lax.fori_loop(0, depth, body, x + (2 * depth + 1))


def _ei_scaled(x):
    """e^{−x} Ei(x) for x ≥ 2.

    Up to x = 50: e^{−x}(γ_E + log x + Σ_k x^k/(k·k!)), all terms positive (no cancellation),
    200 terms. Beyond: the asymptotic series (1/x) Σ_{k<45} k!/x^k, whose truncation error is
    below 45!/50^45 ≈ e^{−47}.
    """
    xs = jnp.minimum(x, 50.0)

    def body(k, state):
        term, total = state
        term = term * xs / k
        return term, total + term / k

    _, series = jax.lax.fori_loop(1, 201, body, (jnp.ones_like(xs) * jnp.exp(-xs), jnp.zeros_like(xs)))
    small = jnp.exp(-xs) * (_EULER + jnp.log(xs)) + series

    xl = jnp.maximum(x, 50.0)

    def asym_body(k, state):
        term, total = state
        term = term * k / xl
        return term, total + term

    _, asym = jax.lax.fori_loop(1, 45, asym_body, (jnp.ones_like(xl), jnp.ones_like(xl)))
    return jnp.where(x <= 50.0, small, asym / xl)


def _k_scaled(beta, p, log_p, q, log_q):
    """∫_p^q e^{−β(q−v)}/v dv = e^{−βq}(Ei(βq) − Ei(βp)), 0 < p ≤ q (J1 scaled by e^{−βw0})."""
    bp, bq = beta * p, beta * q
    log_ratio = log_q - log_p
    # both arguments small: Ei(βq) − Ei(βp) = log(q/p) + Ein(−βp) − Ein(−βq), exact at β = 0
    small = jnp.exp(-bq) * (log_ratio + _ein(-jnp.minimum(bp, _SMALL)) - _ein(-jnp.minimum(bq, _SMALL)))
    eis_q = _ei_scaled(jnp.maximum(bq, _SMALL))
    eis_p = _ei_scaled(jnp.maximum(bp, _SMALL))
    large = eis_q - jnp.exp(-beta * (q - p)) * eis_p
    # log(βp) is formed as log β + log p so that p underflowing to 0 (γ → 1) stays finite
    bp_small = jnp.minimum(bp, _SMALL)
    ei_p = _EULER + jnp.log(jnp.maximum(beta, 1e-300)) + log_p - _ein(-bp_small)
    mixed = eis_q - jnp.exp(-bq) * ei_p
    return jnp.where(bq <= _SMALL, small, jnp.where(bp >= _SMALL, large, mixed))


def _l_scaled(beta, p, log_p, q, log_q):
    """∫_p^q e^{−β(v−p)}/v dv = e^{βp}(E1(βp) − E1(βq)), for 0 < p ≤ q (J2 scaled by e^{−βw0})."""
    bp, bq = beta * p, beta * q
    log_ratio = log_q - log_p
    small = jnp.exp(bp) * (log_ratio + _ein(jnp.minimum(bp, _SMALL)) - _ein(jnp.minimum(bq, _SMALL)))
    e1s_p = _e1_scaled(jnp.maximum(bp, _SMALL))
    e1s_q = _e1_scaled(jnp.maximum(bq, _SMALL))
    large = e1s_p - jnp.exp(-beta * (q - p)) * e1s_q
    bp_small = jnp.minimum(bp, _SMALL)
    e1_p = -_EULER - jnp.log(jnp.maximum(beta, 1e-300)) - log_p + _ein(bp_small)
    mixed = jnp.exp(jnp.minimum(bp, _SMALL)) * e1_p - jnp.exp(-beta * (q - p)) * e1s_q
    return jnp.where(bq <= _SMALL, small, jnp.where(bp >= _SMALL, large, mixed))


# ---------------------------------------------------------------------------------------------
# Coordinates. For n ≥ 2: γ = a + c σ(s), w = c σ(−s), u = c σ(s). For n = 1: γ = 1 − e^{−s}.
# n and the model are traced (n as a float, the model as an index into MODELS), so one compiled
# kernel serves every n ≥ 2 and every model; only n = 1 (``single``) changes the formulas.


def _coords(s, n, single: bool):
    """γ, w = 1−γ, log w, u = γ−a, log u at logistic coordinate s, each to full relative precision."""
    if single:
        w = jnp.exp(-s)
        return 1.0 - w, w, -s, None, None
    a, log_c = -1.0 / (n - 1), jnp.log(n / (n - 1))
    log_w = log_c - jax.nn.softplus(s)
    log_u = log_c - jax.nn.softplus(-s)
    w, u = jnp.exp(log_w), jnp.exp(log_u)
    # γ from whichever end it is closer to, so that neither 1−γ nor γ−a is rounded away
    gamma = jnp.where(s > 0, 1.0 - w, a + u)
    return gamma, w, log_w, u, log_u


def _s_of(gamma, n, single: bool):
    """Logistic coordinate of γ (−inf at the simplex)."""
    if single:
        return -jnp.log1p(-gamma)
    return jnp.log(gamma + 1.0 / (n - 1)) - jnp.log1p(-gamma)


def _scaled_integral(beta, s, s0, n, single: bool):
    """(J1 + J2) e^{−βw0} between s0 and s ≥ s0."""
    _, w, log_w, u, log_u = _coords(s, n, single)
    _, w0, log_w0, u0, log_u0 = _coords(s0, n, single)
    total = _k_scaled(beta, w, log_w, w0, log_w0)
    if not single:
        total = total + _l_scaled(beta, u0, log_u0, u, log_u)
    return total


def _time_units(beta, n, rho0, w0, code):
    """(A, log f): T = A(s − s0) + J1 + J2 and t = T e^{−βw0} / f for the model MODELS[code].

    sa: t = T/(2n), A = n − 1;  usa-rescaled: t = T/2, A = 0;  usa: t = e^{−β}T/2, A = 0. Scaled
    by e^{−βw0}, log f = log 2n − βw0, log 2 − βw0 and log 2 + βρ0 (e^{β}e^{−βw0} = e^{βρ0}).
    """
    is_sa = code == 0
    slope = jnp.where(is_sa, n - 1.0, 0.0)
    log_f = jnp.where(is_sa, jnp.log(2.0 * n), jnp.log(2.0)) + jnp.where(code == 1, beta * rho0, -beta * w0)
    return slope, log_f


@partial(jax.jit, static_argnames="single")
def _solve(beta, ts, rho0, n, code, *, single: bool):
    """γ at times ts, elementwise in (β, ts).

    Newton in s on A e^{−βw0}(s − s0) + (J1 + J2) e^{−βw0} = T(t) e^{−βw0}.
    """
    s0 = _s_of(rho0, n, single)
    stationary = jnp.isneginf(s0)
    s0 = jnp.where(stationary, 0.0, s0)
    _, w0, *_ = _coords(s0, n, single)
    slope, log_f = _time_units(beta, n, rho0, w0, code)
    scale = slope * jnp.exp(-beta * w0)
    target = ts * jnp.exp(log_f)

    def body(state):
        s, _, it = state
        _, w, *_ = _coords(s, n, single)
        g = scale * (s - s0) + _scaled_integral(beta, s, s0, n, single) - target
        # dT/ds = A + e^{βw}; scaled by e^{−βw0} it never overflows since w ≤ w0
        dg = scale + jnp.exp(-beta * (w0 - w))
        # T is concave in s, so Newton steps from the left never overshoot; the max() keeps
        # rounding noise near the root from stepping back
        step = jnp.maximum(-g / dg, 0.0)
        # dg underflowing to 0 with g < 0 gives step = inf: T is flat to float64 precision
        # beyond s, so γ = 1 to rounding; NaN appears only once s = inf and means "done"
        step = jnp.where(jnp.isnan(step), 0.0, step)
        return s + step, step, it + 1

    def cond(state):
        s, step, it = state
        return (it < 200) & jnp.any(step > 1e-15 * (1.0 + jnp.abs(s)))

    start = jnp.full_like(target, s0)
    s, _, _ = jax.lax.while_loop(cond, body, (start, jnp.ones_like(target), 0))
    gamma = _coords(s, n, single)[0]
    gamma = jnp.where(jnp.isinf(target) | jnp.isinf(s), 1.0, gamma)
    return jnp.where(stationary | (ts == 0), rho0, gamma)


@partial(jax.jit, static_argnames="single")
def _hitting(beta, rho0, delta, n, code, *, single: bool):
    """Time at which γ = 1 − δ, elementwise in β, assuming a < ρ0 < 1 − δ."""
    s0 = _s_of(rho0, n, single)
    s1 = _s_of(1.0 - delta, n, single)
    _, w0, *_ = _coords(s0, n, single)
    slope, log_f = _time_units(beta, n, rho0, w0, code)
    # t = (A(s1 − s0) + e^{βw0} I) / f with I the scaled integral; the e^{βw0} only enters
    # through f, so the result overflows to inf exactly when the true time exceeds float64
    scaled = _scaled_integral(beta, s1, s0, n, single)
    return slope * (s1 - s0) * jnp.exp(-beta * w0 - log_f) + scaled * jnp.exp(-log_f)


# ---------------------------------------------------------------------------------------------
# Validation


def _check_beta(beta):
    """β as a float64 array of shape () or (B,), finite and ≥ 0 (traced values pass unchecked)."""
    if isinstance(beta, jax.core.Tracer):
        return beta
    arr = np.asarray(beta)
    if arr.ndim > 1 or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"beta must be a real number or a 1-D array of them, got {beta!r}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"beta must be finite and ≥ 0, got {arr.tolist()}")
    return jnp.asarray(arr)


def _check_rho0(rho0, n: int) -> float:
    lower = -1.0 / (n - 1) if n > 1 else -1.0
    rho0 = check_real("rho0", rho0, lower, 1.0)
    if rho0 >= 1.0:
        raise ValueError(f"rho0 must be < 1 (γ = 1 is the fully clustered state), got {rho0:g}")
    return rho0


def _check_ts(ts):
    if isinstance(ts, jax.core.Tracer):
        return ts
    arr = np.asarray(ts)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"ts must be real times, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"ts must be finite and ≥ 0, got {arr.tolist() if arr.size <= 8 else arr}")
    return jnp.asarray(arr)


def _elementwise(fn, beta, *arrays):
    """Evaluate the elementwise kernel ``fn(beta, *arrays)`` on the broadcast of β (shape () or
    (B,), a leading axis) against ``arrays``.

    The kernels are elementwise in (β, t), so everything is flattened and padded to a power of
    two: one compiled kernel then serves all shapes up to that size (compiling costs ~0.5 s;
    evaluating a point ~1 µs).
    """
    beta = jnp.asarray(beta, dtype=jnp.float64)
    shape = jnp.shape(beta) + jnp.broadcast_shapes(*(jnp.shape(a) for a in arrays))
    expand = (...,) + (None,) * (len(shape) - beta.ndim)
    flat = [jnp.broadcast_to(beta[expand], shape).ravel()]
    flat += [jnp.broadcast_to(a, shape).ravel() for a in arrays]
    size = max(16, 1 << max(flat[0].size - 1, 0).bit_length())
    padded = [jnp.pad(f, (0, size - f.size)) for f in flat]
    return fn(*padded)[: flat[0].size].reshape(shape)


# ---------------------------------------------------------------------------------------------
# Public API


def equiangular_rhs(gamma, beta, n: int, model: str = "sa") -> Float[Array, ...]:
    """Right-hand side F(γ) of the equiangular ODE γ̇ = F(γ), [GLPR] (6.9)/(6.10).

    sa:            2(1−γ)((n−1)γ+1) / (e^{β(1−γ)} + (n−1))     (= (6.9), divided through by e^{βγ})
    usa:           (2/n) e^{βγ} (1−γ)((n−1)γ+1)                  (6.10)
    usa-rescaled:  (2/n) e^{β(γ−1)} (1−γ)((n−1)γ+1)              (6.10) · e^{−β}

    The SA and rescaled forms stay finite for any β ≥ 0 when γ ≤ 1; the "usa" one is of order
    e^{β} and overflows float64 beyond β ≈ 709, as the dynamics itself does. β of shape (B,)
    adds a leading axis: the result has shape (B, *gamma.shape).
    """
    n = check_int("n", n, 1)
    model = check_choice("model", model, MODELS)
    beta = _check_beta(beta)
    gamma = jnp.asarray(gamma, dtype=jnp.float64)
    beta = jnp.reshape(beta, jnp.shape(beta) + (1,) * gamma.ndim)
    poly = (1.0 - gamma) * ((n - 1) * gamma + 1.0)
    if model == "sa":
        return 2.0 * poly / (jnp.exp(beta * (1.0 - gamma)) + (n - 1))
    if model == "usa":
        return (2.0 / n) * jnp.exp(beta * gamma) * poly
    return (2.0 / n) * jnp.exp(beta * (gamma - 1.0)) * poly


def equiangular(beta, n: int, ts, rho0: float = 0.0, model: str = "sa") -> Float[Array, "... T"]:
    """Common inner product γ(t) of an equiangular SA/USA configuration, [GLPR] Thm 6.8.

    Solves (6.9) (model="sa") or (6.10) ("usa"; "usa-rescaled" is (6.10)·e^{−β}) from
    γ(0) = ρ0 by inverting the closed-form antiderivative t(γ) (see the module docstring);
    error ≲ 1e-15 + 1e-16·t·|γ̇| (≤ 1e-11 for β ≤ 50, n ≤ 1024, t ≤ 100), finite for every
    β ≥ 0. ρ0 = −1/(n−1) (regular simplex) is stationary. β of shape (B,) gives an
    array of shape (B, *ts.shape).
    """
    n = check_int("n", n, 1)
    model = check_choice("model", model, MODELS)
    rho0 = _check_rho0(rho0, n)
    ts = _check_ts(ts)
    beta = _check_beta(beta)
    args = (jnp.float64(rho0), jnp.float64(n), MODELS.index(model))
    return _elementwise(lambda b, t: _solve(b, t, *args, single=n == 1), beta, ts)


def hitting_time(beta, n: int, delta: float, rho0: float = 0.0, model: str = "sa") -> Float[Array, ...]:
    """Time t*(β) at which the equiangular γ_β(t) reaches 1 − δ, [GLPR] (6.9)/(6.10), §6.3.

    t* = ∫_{ρ0}^{1−δ} dγ / F(γ), evaluated in closed form with exponential integrals. It is 0
    when ρ0 ≥ 1 − δ and inf at the simplex ρ0 = −1/(n−1) (a stationary point); it is also inf
    when the true value exceeds the float64 range (e.g. SA with β(1−ρ0) ≳ 709 + log β).
    """
    n = check_int("n", n, 1)
    model = check_choice("model", model, MODELS)
    rho0 = _check_rho0(rho0, n)
    delta = check_real("delta", delta, 0.0, strict_min=True)
    beta = _check_beta(beta)
    if rho0 >= 1.0 - delta:
        return jnp.zeros(jnp.shape(beta))
    if n > 1 and rho0 == -1.0 / (n - 1):
        return jnp.full(jnp.shape(beta), jnp.inf)
    args = (jnp.float64(rho0), jnp.float64(delta), jnp.float64(n), MODELS.index(model))
    return _elementwise(lambda b: _hitting(b, *args, single=n == 1), beta)


def gamma_curve(betas, n: int, delta: float, rho0: float = 0.0, model: str = "sa") -> Float[Array, " B"]:
    """The curve Γ_{∞,δ} = {(t, β) : γ_β(t) = 1 − δ} of [GLPR] (6.12), as t*(β) over a β grid.

    Returns t*(β) for each β in ``betas`` (a 1-D grid), i.e. the abscissae of the curve to
    overlay on a (t, β) phase diagram: the d → ∞ limit of the boundary where the fraction of
    pairs with ⟨x_i(t), x_j(t)⟩ ≥ 1 − δ jumps from 0 to 1 (SA, orthogonal start ρ0 = 0).
    ``n`` is the number of tokens, ``delta`` the threshold δ.
    """
    arr = np.asarray(betas) if not isinstance(betas, jax.core.Tracer) else betas
    if jnp.ndim(arr) != 1:
        raise ValueError(f"betas must be a 1-D grid of β values, got shape {jnp.shape(arr)}")
    return hitting_time(arr, n, delta, rho0=rho0, model=model)


def wendel_probability(n: int, d: int) -> float:
    """P(n i.i.d. uniform points of S^{d−1} lie in an open hemisphere), [GLPR] Thm 6.7 (Wendel).

    P = 2^{−(n−1)} Σ_{k=0}^{d−1} C(n−1, k), which is 1 when d ≥ n. Computed exactly in
    rational arithmetic, then rounded once to float.
    """
    n = check_int("n", n, 1)
    d = check_int("d", d, 1)
    count = sum(math.comb(n - 1, k) for k in range(min(d, n)))
    return float(Fraction(count, 2 ** (n - 1)))
