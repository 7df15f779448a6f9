"""Value kinds of configuration keys: the :class:`Key` declaration and the normalization of values.

A key's ``type`` is one of :data:`TYPES`. Normalizing a value turns numpy scalars into Python ones,
ints into floats where a float is due, lists into tuples and tables into read-only mappings, and
checks bounds and choices; every refusal is a :class:`ConfigError` of one line naming the key, the
bad value and what is allowed. Numeric list keys also take the text forms ``"a:b:n"``
(``numpy.linspace(a, b, n)``, its values rounded as a user would write them) and ``"a,b,c"``, parsed here.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import re
import tomllib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ...particles.errors import InputError

__all__ = [
    "ConfigError",
    "TYPES",
    "MAX_GRID_POINTS",
    "Key",
    "show_value",
    "shorten",
    "thaw",
    "parse_scalar_text",
    "toml_or_text",
    "split_commas",
    "split_spec",
    "linspace_values",
]

TYPES = ("int", "float", "str", "bool", "float_list", "int_list", "str_list", "float_rows", "table")
_LIST_ELEMENT = {"float_list": "float", "int_list": "int", "str_list": "str"}
MAX_GRID_POINTS = 100_000  # the most values an 'a:b:n' list or a grid may hold
_BARE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ConfigError(InputError):
    """A configuration problem, described in one line (key, bad value, what is allowed); an ``InputError``
    (so a ValueError)."""


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key: name, type, default, one-line doc, and the values it allows.

    ``type`` is one of :data:`TYPES`. ``minimum``/``maximum`` bound numbers (elementwise for lists;
    ``strict_min``/``strict_max`` make them exclusive); ``choices`` restricts strings (elementwise
    for ``str_list``). List keys need at least one value unless ``allow_empty``. The default is
    normalized by the key itself when the key is made, so a bad default fails at import time.
    ``applies`` = (other key, values) says that the key acts only where the other key has one of those
    values (``">0"``: a positive number); a configuration setting it elsewhere is refused, since the
    run would ignore it. ``experiment_key``: read only by the experiments that list it in their ``keys``
    (an experiment with a runner of its own), never by the particle ensemble
    (``experiments/preflight.check_keys_read``). ``model``: the key changes the model itself (the attention, its
    variants, layer norm, noise, coalescing), so an experiment's theory checks, which hold for its own model, do
    not apply to a run that sets it otherwise (``registry.changed_model_keys``); ``keys.model_keys()`` lists them.
    """

    name: str
    type: str
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    strict_min: bool = False
    strict_max: bool = False
    choices: tuple | None = None
    allow_empty: bool = False
    applies: tuple | None = None
    experiment_key: bool = False
    model: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _BARE_KEY.match(self.name):
            raise ConfigError(f"key name must match [A-Za-z][A-Za-z0-9_]*, got {self.name!r}")
        if self.type not in TYPES:
            raise ConfigError(f"key {self.name!r}: type must be one of {', '.join(TYPES)}; got {self.type!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
        if self.applies is not None:
            other, values = self.applies
            object.__setattr__(self, "applies", (other, values if values == ">0" else tuple(values)))
        if "\n" in self.doc:
            raise ConfigError(f"key {self.name!r}: doc must be one line")
        # frozen: the normalized default replaces the given one (lists become tuples)
        object.__setattr__(self, "default", self.coerce(self.default))

    @property
    def element_type(self) -> str:
        """The type of one value: the element type for list keys, else the key's type."""
        return _LIST_ELEMENT.get(self.type, self.type)

    def allowed(self) -> str:
        """What the key accepts, in words (used in error messages and ``describe_keys``)."""
        if self.type == "float_rows":
            rng = _range_text(self)
            return "a list of lists of finite numbers" + (f" (each {rng})" if rng else "")
        return _describe(self, self.element_type, plural=self.type in _LIST_ELEMENT)

    def coerce(self, value: Any) -> Any:
        """Return ``value`` normalized for this key (ints, floats, tuples), or raise ConfigError."""
        if self.type == "table":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{self.name} must be a table, got {show_value(value)}")
            return _freeze_table(self.name, value)
        if self.type in _LIST_ELEMENT:
            return self._coerce_list(value)
        if self.type == "float_rows":
            return self._coerce_rows(value)
        return _coerce_scalar(self, self.type, self.name, value)

    def coerce_element(self, value: Any) -> Any:
        """Normalize one grid value: an element for list keys (a whole list is also accepted)."""
        if self.type in _LIST_ELEMENT and not _is_sequence(value):
            return _coerce_scalar(self, self.element_type, self.name, value)
        return self.coerce(value)

    def _coerce_list(self, value: Any) -> tuple:
        element = self.element_type
        if isinstance(value, str) and element in ("int", "float"):
            if ":" not in value and "," not in value:
                raise ConfigError(
                    f"{self.name} must be {self.allowed()} (or a string 'a:b:n' or 'a,b,c'), got {value!r} (a string)"
                )
            items = split_spec(self.name, value)
        elif isinstance(value, str):
            items = split_commas(self.name, value, text_values=True) if "," in value else [value]
        elif isinstance(value, np.ndarray):
            if value.ndim > 1:
                raise ConfigError(f"{self.name} must be {self.allowed()}, got an array of shape {value.shape}")
            items = value.reshape(-1).tolist()
        elif _is_sequence(value):
            items = list(value)
        elif isinstance(value, Mapping):
            raise ConfigError(f"{self.name} must be {self.allowed()}, got a table {show_value(value)}")
        else:
            return (_coerce_scalar(self, element, self.name, value),)
        if not items and not self.allow_empty:
            raise ConfigError(f"{self.name} must be {self.allowed()}, got an empty list")
        return tuple(_coerce_scalar(self, element, f"{self.name}[{i}]", v) for i, v in enumerate(items))

    def _coerce_rows(self, value: Any) -> tuple:
        """A list of rows, each a list of numbers (``float_rows``): a tuple of tuples of floats."""
        rows = value.tolist() if isinstance(value, np.ndarray) and value.ndim == 2 else value
        if not _is_sequence(rows) or any(not _is_sequence(row) for row in rows):
            raise ConfigError(
                f"{self.name} must be {self.allowed()}, such as [[1, 2], [3, 4]]; got {show_value(value)}"
            )
        if not rows and not self.allow_empty:
            raise ConfigError(f"{self.name} must be {self.allowed()}, got an empty list")
        return tuple(
            tuple(_coerce_scalar(self, "float", f"{self.name}[{i}][{j}]", v) for j, v in enumerate(row))
            for i, row in enumerate(rows)
        )


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim >= 1)


def _fmt_num(x: float) -> str:
    if isinstance(x, int) or float(x).is_integer():
        return str(int(x))
    return f"{x:g}"


def _range_text(key: Key) -> str:
    parts = []
    if key.minimum is not None:
        parts.append(f"{'>' if key.strict_min else '≥'} {_fmt_num(key.minimum)}")
    if key.maximum is not None:
        parts.append(f"{'<' if key.strict_max else '≤'} {_fmt_num(key.maximum)}")
    return " and ".join(parts)


def _describe(key: Key, element: str, plural: bool) -> str:
    rng = _range_text(key)
    if element == "int":
        what = "an integer" if not plural else "an integer or list of integers"
    elif element == "float":
        what = "a finite number" if not plural else "a number or list of finite numbers"
    elif element == "str":
        what = "a string" if not plural else "a string or list of strings"
    elif element == "bool":
        what = "true or false"
    else:
        what = "a table"
    if key.choices is not None:
        listed = ", ".join(repr(c) for c in key.choices)
        what = f"one of {listed}" if not plural else f"a list of values from {listed}"
    if rng:
        what += f" {rng}" if not plural else f" (each {rng})"
    return what


def show_value(value: Any) -> str:
    """Render a bad value for a message: repr, and say so when it is a string or a table."""
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a table {" + ", ".join(f"{k} = {show_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show_value(v) if not isinstance(v, str) else repr(v) for v in value) + "]"
    return repr(value)


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis: what a message quotes of a user's input."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _coerce_scalar(key: Key, element: str, label: str, value: Any) -> Any:
    """Normalize one scalar for ``key`` (``label`` names it in messages, e.g. ``beta[2]``)."""
    if isinstance(value, np.generic):
        value = value.item()  # numpy scalars become Python ones (np.bool_ is no bool subclass)
    allowed = _describe(key, element, plural=False)
    if element == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{label} must be {allowed}, got {show_value(value)}")
        return value
    if element == "str":
        if (
            key.choices is not None
            and {"yes", "no"} <= set(key.choices)
            and (isinstance(value, bool) or value in ("true", "false"))
        ):
            value = "yes" if value in (True, "true") else "no"  # the yes/no/auto keys also take true and false
        if not isinstance(value, str):
            raise ConfigError(f"{label} must be {allowed}, got {show_value(value)}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(f"{label} must be valid Unicode text, got {value!r}") from None
        if key.choices is not None and value not in key.choices:
            near = difflib.get_close_matches(value, [str(c) for c in key.choices], n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            listed = ", ".join(repr(c) for c in key.choices)
            raise ConfigError(f"{label} must be one of {listed}; got {value!r}{hint}")
        return value
    # numbers: bool is not a number here, and neither is a string
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{label} must be {allowed}, got {show_value(value)}")
    if element == "int":
        if not isinstance(value, numbers.Integral):
            if math.isfinite(value) and float(value).is_integer():
                value = int(float(value))  # a float (or NumPy float) with an integer value
            else:
                raise ConfigError(f"{label} must be {allowed}, got {show_value(float(value))}")
        value = int(value)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{label} must be {allowed}, got {value!r}")
    if key.minimum is not None and (value <= key.minimum if key.strict_min else value < key.minimum):
        raise ConfigError(f"{label} must be {allowed}, got {show_value(value)}")
    if key.maximum is not None and (value >= key.maximum if key.strict_max else value > key.maximum):
        raise ConfigError(f"{label} must be {allowed}, got {show_value(value)}")
    if key.choices is not None and value not in key.choices:
        listed = ", ".join(repr(c) for c in key.choices)
        raise ConfigError(f"{label} must be one of {listed}; got {show_value(value)}")
    return value


def _freeze_table(label: str, table: Mapping) -> Mapping:
    """A read-only copy of a TOML table with lists as tuples; rejects what TOML cannot hold."""

    def freeze(path: str, v: Any) -> Any:
        if isinstance(v, np.generic):
            v = v.item()
        if isinstance(v, Mapping):
            out = {}
            for k, sub in v.items():
                if not isinstance(k, str):
                    raise ConfigError(f"{path} must have string keys, got {k!r}")
                out[k] = freeze(f"{path}.{k}", sub)
            return MappingProxyType(out)
        if _is_sequence(v):
            items = v.tolist() if isinstance(v, np.ndarray) else v
            return tuple(freeze(f"{path}[{i}]", x) for i, x in enumerate(items))
        if isinstance(v, float) and not math.isfinite(v):
            raise ConfigError(f"{path} must be finite, got {v!r}")
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise ConfigError(f"{path} must be valid Unicode text, got {v!r}") from None
            return v
        if isinstance(v, (bool, int, float)):
            return v
        raise ConfigError(f"{path} holds {v!r}, which TOML cannot represent")

    return freeze(label, table)


def thaw(value: Any) -> Any:
    """Plain, mutable, JSON-friendly copy of a normalized value (tuples → lists, tables → dicts)."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Values given as text (--set, --grid, list strings)


def parse_scalar_text(text: str) -> Any:
    """Parse ``text`` as one TOML value; None if it is not valid TOML (the caller keeps the text)."""
    if "\n" in text or "\r" in text:
        return None
    try:
        parsed = tomllib.loads(f"v = {text}")
    except (tomllib.TOMLDecodeError, RecursionError):  # nested deeper than the parser follows: not a value
        return None
    return parsed.get("v") if set(parsed) == {"v"} else None


def toml_or_text(text: str) -> Any:
    """``text`` parsed as one TOML value, or the stripped text itself where it is not TOML."""
    parsed = parse_scalar_text(text)
    return text.strip() if parsed is None else parsed


def split_commas(label: str, text: str, *, text_values: bool = False) -> list:
    """Split ``"a,b,c"``; each part is parsed as TOML, except that for string keys
    (``text_values``) a part that is not a quoted TOML string stays raw text."""
    parts = [p.strip() for p in text.split(",")]
    if text.strip().endswith(",") and len(parts) > 1:
        parts = parts[:-1]  # a trailing comma ("2,") is a one-value list
    if any(p == "" for p in parts):
        raise ConfigError(f"{label}: empty value in the list {text!r}")
    values = [toml_or_text(p) for p in parts]
    if text_values:
        values = [v if isinstance(v, str) else p for v, p in zip(values, parts)]
    return values


def split_spec(label: str, text: str) -> list:
    """``"a:b:n"`` → ``linspace(a, b, n)`` as floats; ``"a,b,c"`` → values; else raise."""
    if ":" in text:
        parts = [p.strip() for p in text.split(":")]
        nums = [parse_scalar_text(p) for p in parts]
        ok = (
            len(parts) == 3
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in nums[:2])
            and all(math.isfinite(x) for x in nums[:2])
            and isinstance(nums[2], int)
            and not isinstance(nums[2], bool)
            and nums[2] >= 1
        )
        if not ok:
            raise ConfigError(
                f"{label}: grid {text!r} must be 'a:b:n' (numpy.linspace(a, b, n)) "
                f"with numbers a, b and an integer n ≥ 1"
            )
        if nums[2] > MAX_GRID_POINTS:  # refused before numpy allocates them
            raise ConfigError(
                f"{label}: grid {text!r} asks for {nums[2]} values; at most {MAX_GRID_POINTS} are allowed"
            )
        return linspace_values(nums[0], nums[1], nums[2])
    return split_commas(label, text)


_LINSPACE_TOLERANCE = 1e-12  # how far (relative to the grid's largest magnitude) a written value may move


def linspace_values(a: float, b: float, n: int) -> list[float]:
    """``numpy.linspace(a, b, n)`` as a user would write it: every value rounded to the grid's own
    precision, the fewest decimals that keep the values distinct and each within 10⁻¹² (relative to
    the grid's largest magnitude) of the exact one. 0.1:9:90 gives 0.1, 0.2, 0.3, … (not
    0.30000000000000004), 0:1:7 gives 0.166666666667, 0.333333333333, …."""
    exact = np.linspace(float(a), float(b), n).tolist()
    scale = max(abs(v) for v in exact)
    if scale == 0:
        return [0.0] * n
    tolerance = _LINSPACE_TOLERANCE * scale
    leading = math.floor(math.log10(scale))
    for significant in range(1, 18):
        decimals = significant - 1 - leading
        rounded = [round(v, decimals) + 0.0 for v in exact]  # + 0.0: no -0.0
        if len(set(rounded)) == len(set(exact)) and all(abs(r - v) <= tolerance for r, v in zip(rounded, exact)):
            return rounded
    return exact
