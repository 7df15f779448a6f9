"""Argument validation shared by the public functions: one clear ValueError, raised before any work."""

from __future__ import annotations

import math
import numbers

import numpy as np


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ValueError naming the argument and the allowed range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}, got {value!r}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer{_range(minimum, maximum)}, got {value}")
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
            raise ValueError(f"{name} must be a real number, got {value!r}")
        value = arr.item()
    value = float(value)
    lo = "" if minimum is None else (f" > {minimum:g}" if strict_min else f" ≥ {minimum:g}")
    hi = "" if maximum is None else f" ≤ {maximum:g}"
    allowed = f"a finite number{lo}{' and' if lo and hi else ''}{hi}"
    if not math.isfinite(value):
        raise ValueError(f"{name} must be {allowed}, got {value}")
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise ValueError(f"{name} must be {allowed}, got {value:g}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be {allowed}, got {value:g}")
    return value


def check_choice(name: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ValueError listing them."""
    if value not in choices:
        listed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {listed}; got {value!r}")
    return value


def _range(minimum, maximum) -> str:
    if minimum is not None and maximum is not None:
        return f" between {minimum} and {maximum}"
    if minimum is not None:
        return f" ≥ {minimum}"
    if maximum is not None:
        return f" ≤ {maximum}"
    return ""
