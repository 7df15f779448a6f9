"""Argument validation shared by the public functions: one clear ``InputError`` (a ValueError) naming the argument and
what it may be, raised before any work."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array

from .errors import InputError


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ValueError naming the argument and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InputError(f"{name} must be an integer{_range(minimum, maximum)}, got {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise InputError(f"{name} must be an integer{_range(minimum, maximum)}, got {value}")
    return value


def check_real(
    name: str,
    value,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    strict_min: bool = False,
) -> float:
    """Return ``value`` as a finite float in the allowed range, or raise ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        try:
            arr = np.asarray(value)
        except Exception:  # noqa: BLE001 - anything unconvertible is a bad argument
            arr = None
        if arr is None or arr.shape != () or not np.issubdtype(arr.dtype, np.number):
            raise InputError(f"{name} must be a real number, got {value!r}")
        value = arr.item()
    value = float(value)
    lo = "" if minimum is None else (f" > {minimum:g}" if strict_min else f" ≥ {minimum:g}")
    hi = "" if maximum is None else f" ≤ {maximum:g}"
    allowed = f"a finite number{lo}{' and' if lo and hi else ''}{hi}"
    if not math.isfinite(value):
        raise InputError(f"{name} must be {allowed}, got {value}")
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise InputError(f"{name} must be {allowed}, got {value:g}")
    if maximum is not None and value > maximum:
        raise InputError(f"{name} must be {allowed}, got {value:g}")
    return value


def real_array(name: str, value, shape: str = "") -> np.ndarray:
    """``value`` as a NumPy array of real numbers (booleans, integers or floats, its dtype kept), or an InputError
    naming the argument: complex numbers (whose imaginary part a conversion would drop with only a warning),
    strings and objects are refused. ``shape`` describes the shape expected, for the message."""
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting and objects NumPy cannot hold
        raise InputError(f"{name} must be a real array{shape}, got {_show(value)}") from None
    if arr.dtype.kind not in "biuf":
        what = "complex numbers, whose imaginary part would be lost" if arr.dtype.kind == "c" else "not numbers"
        raise InputError(f"{name} must be a real array{shape}, got dtype {arr.dtype} ({what})")
    return arr


def check_choice(name: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ValueError listing them."""
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise InputError(f"{name} must be one of {listed}; got {value!r}")
    return value


def _range(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f" between {minimum} and {maximum}"
    if minimum is not None:
        return f" ≥ {minimum}"
    if maximum is not None:
        return f" ≤ {maximum}"
    return ""


def as_matrix(name: str, value, ndim: int = 2) -> Array | None:
    """A weight matrix (or a stack of them, one per ensemble member), validated and as a JAX array; None stays None
    (the identity)."""
    return None if value is None else required_matrix(name, value, ndim)


def required_matrix(name: str, value, ndim: int = 2) -> Array:
    """``as_matrix`` for a weight without a default: the caller has refused None, naming what it needs."""
    if isinstance(value, jax.core.Tracer):
        return value
    arr = np.asarray(value)
    if arr.ndim not in (ndim, ndim + 1) or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(
            f"{name} must be a {ndim}-D real array (or a stack of them, one per member), "
            f"got an array of shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must have finite entries")
    return jnp.asarray(arr, dtype=jnp.result_type(float))


def _show(value) -> str:
    """A bad argument for a message: its repr (shortened) and what it is, e.g. 'hot' (a string)."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    if value is None:
        return "None"
    if isinstance(value, str):
        return f"{text} (a string)"
    if isinstance(value, (list, tuple)):
        kind = type(value).__name__
        if value and all(isinstance(v, str) for v in value):
            return f"{text} (a {kind} of strings)"
        return f"{text} (a {kind})"
    if isinstance(value, np.generic):
        return f"{text} (a NumPy {value.dtype})"
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return f"an array of dtype {value.dtype} and shape {tuple(value.shape)}"
    return f"{text} (a {type(value).__name__})"


def as_parameter(name: str, value, what: str = "value", *, signed: bool = False) -> Array:
    """A finite, non-negative scalar parameter (β, σ, ...) or a non-empty 1-D array of them (one per member).

    ``what`` names one entry in the message for an empty array ("give at least one temperature");
    ``signed`` accepts negative values too.
    """
    if isinstance(value, jax.core.Tracer):
        return value
    allowed = f"{name} must be a finite number{'' if signed else ' ≥ 0'} or a 1-D array of them"
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):  # ragged nesting and objects NumPy cannot hold
        raise ValueError(f"{allowed}, got {_show(value)}") from None
    # booleans and complex numbers are numbers to NumPy, not temperatures
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"{allowed}, got {_show(value)}")
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a real number or a 1-D array of them (one per member), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty: give at least one {what}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {arr.tolist()}")
    if not signed and np.any(arr < 0):
        raise ValueError(f"{name} must be ≥ 0, got {arr.tolist()}")
    return jnp.asarray(arr, dtype=jnp.result_type(float))


def as_beta(value, *, signed: bool = False, field: str = "") -> Array:
    """β as ``as_parameter`` checks it; ``signed`` accepts β < 0 (a field whose weights stay finite for
    every sign: its softmax subtracts the row maximum of β⟨Qx_i, Kx_j⟩). ``field`` names the field in the
    message refusing β < 0."""
    arr = as_parameter("beta", value, "temperature", signed=True)
    if signed or isinstance(arr, jax.core.Tracer):
        return arr
    if np.any(np.asarray(arr) < 0):
        raise ValueError(
            f"beta must be ≥ 0 for {field or 'this field'}, got {np.asarray(arr).tolist()}; "
            f"β < 0 runs with SA, USA (time='glpr') and MultiHead of model 'sa' or 'usa'"
        )
    return arr


def as_weights(Q, K, V) -> tuple[Array | None, Array | None, Array | None]:
    """Validated Q, K (k×d, same shape) and V (d×d), each possibly with a leading member axis; None = identity."""
    Q, K, V = as_matrix("Q", Q), as_matrix("K", K), as_matrix("V", V)
    q_shape = None if Q is None else Q.shape[-2:]
    k_shape = None if K is None else K.shape[-2:]
    if q_shape is not None and k_shape is not None and q_shape != k_shape:
        raise ValueError(f"Q and K must have the same shape (k, d); got Q {q_shape} and K {k_shape}")
    if V is not None and V.shape[-1] != V.shape[-2]:
        raise ValueError(f"V must be square (d, d), got shape {V.shape[-2:]}")
    return Q, K, V


def check_weights(Q, K, V, d: int) -> None:
    """Raise ValueError unless Q, K act on R^d (k×d) and V is d×d (None = identity fits any d)."""
    for name, m in (("Q", Q), ("K", K)):
        if m is not None and m.shape[-1] != d:
            raise ValueError(f"{name} has shape {m.shape} but particles live in d = {d}: expected (k, {d})")
    if V is not None and V.shape[-2:] != (d, d):
        raise ValueError(f"V has shape {V.shape} but particles live in d = {d}: expected ({d}, {d})")
