"""Self-attention vector fields on (S^{d-1})^n.

A field is an immutable PyTree (``equinox.Module``) with ``__call__(t, x) -> dx`` acting on a
configuration ``x`` of shape (n, d). Its array leaves (β, Q, K, V) are traced, so changing β
never recompiles; vmap over a field with a batched β runs an ensemble of temperatures.

Every field splits into ``drift(t, x)``, the ambient velocity in R^d before layer norm, and
the tangent projection P_x that keeps particles on the sphere ([GLPR] (2.3)).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ._checks import check_choice
from .sphere import project

_TIMES = ("glpr", "rescaled")


def _as_matrix(name: str, value) -> Array | None:
    if value is None:
        return None
    if isinstance(value, jax.core.Tracer):
        return value
    arr = np.asarray(value)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be a 2-D real matrix, got an array of shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must have finite entries")
    return jnp.asarray(arr, dtype=jnp.result_type(float))


def _as_beta(value) -> Array:
    if isinstance(value, jax.core.Tracer):
        return value
    arr = np.asarray(value)
    if arr.ndim > 1 or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"beta must be a real number or a 1-D array of them, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"beta must be finite and ≥ 0, got {arr.tolist()}")
    return jnp.asarray(arr, dtype=jnp.result_type(float))


class Attention(eqx.Module):
    """Shared structure of the attention fields: ẋ_i = P_{x_i}(Σ_j A_ij V x_j).

    Subclasses say how the weights A_ij are normalized. Q and K may be rectangular (k×d);
    ``None`` stands for the identity (and costs nothing).
    """

    beta: Float[Array, ""]
    Q: Float[Array, "k d"] | None = None
    K: Float[Array, "k d"] | None = None
    V: Float[Array, "d d"] | None = None

    def __init__(self, beta=1.0, Q=None, K=None, V=None):
        self.beta = _as_beta(beta)
        self.Q = _as_matrix("Q", Q)
        self.K = _as_matrix("K", K)
        self.V = _as_matrix("V", V)
        q_shape = None if self.Q is None else self.Q.shape
        k_shape = None if self.K is None else self.K.shape
        if q_shape is not None and k_shape is not None and q_shape != k_shape:
            raise ValueError(f"Q and K must have the same shape (k, d); got Q {q_shape} and K {k_shape}")
        if self.V is not None and self.V.shape[0] != self.V.shape[1]:
            raise ValueError(f"V must be square (d, d), got shape {self.V.shape}")

    # -- pieces --------------------------------------------------------------------------
    def logits(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """β⟨Q x_i, K x_j⟩."""
        # weights follow the configuration's precision, so float32 runs stay float32
        q = x if self.Q is None else x @ self.Q.T.astype(x.dtype)
        k = x if self.K is None else x @ self.K.T.astype(x.dtype)
        return self.beta.astype(x.dtype) * (q @ k.T)

    def values(self, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        """V x_j for every particle."""
        return x if self.V is None else x @ self.V.T.astype(x.dtype)

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        raise NotImplementedError

    def __call__(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return project(x, self.drift(t, x))

    # -- validation against a configuration ---------------------------------------------
    def check(self, n: int, d: int, dtype) -> None:
        """Raise ValueError if this field cannot act on (n, d) configurations of ``dtype``."""
        for name in ("Q", "K"):
            m = getattr(self, name)
            if m is not None and m.shape[-1] != d:
                raise ValueError(f"{name} has shape {m.shape} but particles live in d = {d}: expected (k, {d})")
        if self.V is not None and self.V.shape != (d, d):
            raise ValueError(f"V has shape {self.V.shape} but particles live in d = {d}: expected ({d}, {d})")

    def kernel_norm(self) -> float:
        """Largest |⟨Qx, Ky⟩| over unit x, y: the spectral norm of QᵀK (1 for identities)."""
        q = np.eye(1) if self.Q is None else np.asarray(self.Q)
        k = np.eye(1) if self.K is None else np.asarray(self.K)
        if self.Q is None and self.K is None:
            return 1.0
        if self.Q is None:
            return float(np.linalg.norm(k, 2))
        if self.K is None:
            return float(np.linalg.norm(q, 2))
        return float(np.linalg.norm(q.T @ k, 2))


class SA(Attention):
    """Self-attention with layer norm, [GLPR] (2.3)–(2.5):

        ẋ_i = P_{x_i}( Σ_j A_ij V x_j ),   A_ij = e^{β⟨Qx_i,Kx_j⟩} / Σ_k e^{β⟨Qx_i,Kx_k⟩}.

    The softmax subtracts each row's maximum before exponentiating, so any β (10⁴ included)
    is free of overflow in float32 and float64.
    """

    def attention(self, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The row-stochastic attention matrix A."""
        return jax.nn.softmax(self.logits(x), axis=-1)

    def drift(self, t, x):
        logits = self.logits(x)
        m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
        w = jnp.exp(logits - m)
        return (w @ self.values(x)) / jnp.sum(w, axis=-1, keepdims=True)


class USA(Attention):
    """Unnormalized self-attention, [GLPR] §3.3, in one of two time conventions:

        time="glpr":      ẋ_i = P_{x_i}( (1/n) Σ_j e^{β⟨Qx_i,Kx_j⟩} V x_j )            [GLPR]
        time="rescaled":  ẋ_i = P_{x_i}( (1/n) Σ_j e^{β(⟨Qx_i,Kx_j⟩ − 1)} V x_j )     [arXiv 2410.06833]

    The second is the first after the time change t → e^{−β} t. The weights are computed as
    e^{β⟨⟩ − m_i} with m_i the row maximum and the factor e^{m_i} (or e^{m_i − β}) restored
    afterwards, so nothing overflows unless the velocity itself does: in the "glpr"
    convention velocities grow like e^β, which float32 cannot represent beyond β ≈ 88 and
    float64 beyond β ≈ 709; ``check`` refuses such runs and names the "rescaled" convention,
    whose velocities stay O(1) for every β.
    """

    time: str = eqx.field(static=True, default="glpr")

    def __init__(self, beta=1.0, Q=None, K=None, V=None, *, time: str = "glpr"):
        super().__init__(beta, Q, K, V)
        self.time = check_choice("time", time, _TIMES)

    def drift(self, t, x):
        logits = self.logits(x)
        m = jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
        w = jnp.exp(logits - m)
        offset = 0.0 if self.time == "glpr" else self.beta.astype(x.dtype)
        return (w @ self.values(x)) * (jnp.exp(m - offset) / x.shape[0])

    def check(self, n, d, dtype):
        super().check(n, d, dtype)
        if self.time != "glpr" or isinstance(self.beta, jax.core.Tracer):
            return
        beta_max = float(np.max(np.asarray(self.beta)))
        log_max = math.log(float(jnp.finfo(dtype).max))
        # headroom for the sum over n particles and a few Runge–Kutta stages
        if beta_max * self.kernel_norm() > log_max - math.log(n) - 8.0:
            raise ValueError(
                f"USA with time='glpr' at beta={beta_max:g} has velocities of order e^beta, which overflow "
                f"{jnp.dtype(dtype).name}; use USA(..., time='rescaled') (time t -> e^-beta t), "
                + ("float64, " if jnp.dtype(dtype).itemsize < 8 else "")
                + "or a smaller beta"
            )


def make(model: str, beta=1.0, **kwargs) -> Attention:
    """Build a field from its name: ``"sa"`` or ``"usa"`` (``"usa-rescaled"`` for the other time)."""
    builders = {
        "sa": lambda: SA(beta, **kwargs),
        "usa": lambda: USA(beta, **kwargs),
        "usa-rescaled": lambda: USA(beta, time="rescaled", **kwargs),
    }
    check_choice("model", model, tuple(builders))
    return builders[model]()
