"""Run configuration: the :class:`Config` of a run, loaded from TOML and ``--set``, and sweep grids.

A configuration is a flat set of keys (``n``, ``beta``, ``solver``...), each declared once as a
:class:`Key` in :data:`KEYS` (``keys.py``), with rules across keys in ``rules.py`` and the value
kinds in ``types.py``. Values are resolved in layers, later ones winning::

    key defaults  <  experiment defaults (base)  <  TOML file or dict  <  --set key=value

and the result is an immutable :class:`Config`. Every problem is a :class:`ConfigError` whose message
is one line naming the key, the bad value and what is allowed.

List keys (``d``, ``beta``, ``save_times``) hold tuples; a scalar becomes a one-element tuple, and the
strings ``"a:b:n"`` (``numpy.linspace(a, b, n)``) and ``"a,b,c"`` are accepted for numeric lists.
:func:`parse_grid` and :func:`expand_grid` turn ``--grid key=spec`` options into the Cartesian
product of configurations a sweep runs; :func:`to_toml` writes a configuration back exactly.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .keys import (
    ACTIVATIONS,
    FIXED_STEP_SOLVERS,
    GRID_ONLY_SOLVERS,
    KEYS,
    MODELS,
    NORMS,
    SEED_MAX,
    SOLVERS,
    WEIGHTS,
    describe_keys,
    register,
    suggest,
    unknown_key,
)
from .rules import (
    ANGLE_SOLVERS,
    ATTENTION_STATISTICS_MAX_N,
    CHECKS,
    ROTATING_SOLVERS,
    non_plain_keys,
    register_check,
)
from .toml import read_source, read_toml_file, to_toml, toml_literal
from .types import (
    MAX_GRID_POINTS,
    TYPES,
    ConfigError,
    Key,
    parse_scalar_text,
    shorten,
    show_value,
    split_commas,
    split_spec,
    thaw,
    toml_or_text,
)

__all__ = [
    "ConfigError",
    "read_toml_file",
    "shorten",
    "Key",
    "KEYS",
    "TYPES",
    "SOLVERS",
    "FIXED_STEP_SOLVERS",
    "GRID_ONLY_SOLVERS",
    "SEED_MAX",
    "MODELS",
    "NORMS",
    "WEIGHTS",
    "ACTIVATIONS",
    "ROTATING_SOLVERS",
    "ANGLE_SOLVERS",
    "ATTENTION_STATISTICS_MAX_N",
    "MAX_GRID_POINTS",
    "CHECKS",
    "Config",
    "register",
    "register_check",
    "non_plain_keys",
    "load_config",
    "validate",
    "parse_override",
    "parse_grid",
    "expand_grid",
    "to_toml",
    "describe_keys",
]


class Config(Mapping):
    """An immutable, validated configuration: ``cfg.n``, ``cfg["n"]``, ``cfg.to_dict()``.

    ``Config(values)`` fills missing keys with the key defaults, normalizes every value and runs
    :func:`validate`; :func:`load_config` is the usual way to make one. List values are tuples.
    Configs compare equal when their values are equal, hash, and pickle (for executors).
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None, /) -> None:
        resolved = {name: key.default for name, key in KEYS.items()}
        if values is not None:
            resolved.update(_coerce_layer(values, ""))
        object.__setattr__(self, "_values", resolved)
        validate(self)

    @classmethod
    def _trusted(cls, values: dict[str, Any]) -> Config:
        """Wrap already-normalized values without re-checking them (internal)."""
        self = object.__new__(cls)
        object.__setattr__(self, "_values", values)
        return self

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"Config has no key {name!r}{suggest(name, self._values)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Config is immutable; use cfg.replace(key=value)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Config is immutable")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._values == other._values
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(to_toml(self))

    def __reduce__(self):
        return (Config._trusted, (dict(self._values),))

    def __repr__(self) -> str:
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def to_dict(self) -> dict[str, Any]:
        """A plain dict copy: lists for list keys, dicts for tables (JSON-serializable)."""
        return {k: thaw(v) for k, v in self._values.items()}

    def replace(self, changes: Mapping[str, Any] | None = None, /, **kwargs: Any) -> Config:
        """A new validated Config with some keys changed (``cfg.replace(beta=4)``)."""
        updates = dict(changes or {})
        updates.update(kwargs)
        values = dict(self._values)
        values.update(_coerce_layer(updates, ""))
        new = Config._trusted(values)
        validate(new)
        return new


def _coerce_layer(layer: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Normalize one layer of values; messages start with ``source`` (a file, '--set ...')."""
    out = {}
    for name, value in layer.items():
        try:
            if not isinstance(name, str):
                raise ConfigError(f"key names must be strings, got {name!r}")
            key = KEYS.get(name)
            if key is None:
                raise unknown_key(name)
            if isinstance(value, Mapping) and key.type != "table":
                raise ConfigError(
                    f"{name} must be {key.allowed()}, got {show_value(value)} (nested tables are not supported)"
                )
            out[name] = key.coerce(value)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}" if source else str(err)) from None
    return out


def validate(config: Config | Mapping[str, Any]) -> Config:
    """Run every rule across keys (:data:`CHECKS`, see ``rules.py``) on ``config``; return it.

    A plain mapping is first made a :class:`Config` (normalizing every value), which validates it.
    """
    if not isinstance(config, Config):
        return Config(config)  # normalizes every value, then comes back here
    for check in CHECKS:
        check(config)
    return config


# --------------------------------------------------------------------------------------------
# Loading


def parse_override(text: str) -> tuple[str, Any]:
    """Parse one ``--set key=value``: the value as TOML when it parses, else as a bare string.

    For string keys the raw text is kept even when it would parse as another TOML type
    (``--set init_file=2024`` is the file '2024'). The value is not validated here.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    name, _, raw = text.partition("=")
    name = name.strip()
    if not name:
        raise ConfigError(f"--set expects key=value, got {text!r} (the key is empty)")
    key = KEYS.get(name)
    if key is None:
        raise ConfigError(f"--set {text if len(name) <= 60 else '…'}: {unknown_key(name)}")
    value = toml_or_text(raw)
    if key.type == "str" and not isinstance(value, str):
        value = raw.strip()
    return name, value


def load_config(
    source: str | os.PathLike | Mapping[str, Any] | None = None,
    overrides: Iterable[str] = (),
    *,
    base: Mapping[str, Any] | None = None,
) -> Config:
    """Resolve a configuration: defaults < ``base`` < ``source`` < ``overrides``; validate it.

    ``source`` is a TOML file path, a dict, TOML text (a string holding a newline, such as the
    output of :func:`to_toml`), or None for defaults only. ``base`` holds an experiment's own
    defaults. ``overrides`` are ``--set`` strings ``"key=value"`` (see :func:`parse_override`).
    """
    if isinstance(overrides, str):
        overrides = (overrides,)  # one --set given as a bare string, not a sequence of characters
    values = {name: key.default for name, key in KEYS.items()}
    if base is not None:
        values.update(_coerce_layer(base, "experiment defaults"))
    if source is not None:
        table, label = read_source(source)
        values.update(_coerce_layer(table, label))
    for text in overrides:
        name, value = parse_override(text)
        values.update(_coerce_layer({name: value}, f"--set {shorten(text)}"))
    config = Config._trusted(values)
    validate(config)
    return config


# --------------------------------------------------------------------------------------------
# Grids


def parse_grid(spec: str) -> tuple[str, list]:
    """Parse ``--grid key=spec``: ``a:b:n`` (linspace, numeric keys), ``v1,v2,...``, or a TOML array.

    Each value is checked against the key's type (the element type for list keys, so
    ``d=2,8,32`` gives ``[2, 8, 32]``). Returns ``(key, values)``; empty grids and repeated values
    are errors.
    """
    if not isinstance(spec, str) or "=" not in spec:
        raise ConfigError(f"--grid expects key=values, got {spec!r}")
    name, _, raw = spec.partition("=")
    name, raw = name.strip(), raw.strip()
    key = KEYS.get(name)
    if key is None:
        raise ConfigError(f"--grid {spec}: {unknown_key(name)}")
    label = f"--grid {name}"
    if not raw:
        raise ConfigError(f"{label}: the grid is empty; give values a,b,c or a:b:n")
    if raw.startswith("["):
        parsed = parse_scalar_text(raw)
        if not isinstance(parsed, list):
            raise ConfigError(f"{label}: {shorten(raw)!r} is not a valid TOML array (or nested too deeply)")
        values = parsed
    elif ":" in raw and key.element_type in ("int", "float"):
        values = split_spec(label, raw)
    else:
        values = split_commas(label, raw, text_values=key.element_type == "str")
    return name, _normalize_axis(name, values)


def _normalize_axis(name: str, values: Any) -> list:
    key = KEYS.get(name)
    if key is None:
        raise unknown_key(name)
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise ConfigError(f"grid {name} must be a list of values, got {values!r}")
    values = values.tolist() if isinstance(values, np.ndarray) else list(values)
    if not values:
        raise ConfigError(f"grid {name} is empty; a grid axis needs at least one value")
    out, seen = [], set()
    for i, v in enumerate(values):
        try:
            norm = key.coerce_element(v)
        except ConfigError as err:
            raise ConfigError(f"grid {name}, value {i}: {err}") from None
        marker = _hashable(norm)
        if marker in seen:
            raise ConfigError(f"grid {name} repeats the value {show_value(norm)}; grid values must be distinct")
        seen.add(marker)
        out.append(norm)
    return out


def _hashable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return (type(v).__name__, v)


def expand_grid(
    config: Config,
    grid_axes: Mapping[str, Sequence] | Sequence[tuple[str, Sequence]],
) -> list[tuple[dict[str, Any], Config]]:
    """The Cartesian product of grid axes over ``config``: ``[(point, Config), ...]``.

    ``grid_axes`` is a dict or a sequence of ``(key, values)`` pairs (as from :func:`parse_grid`).
    The first axis varies slowest (``itertools.product`` order). Each point's Config is validated.
    Duplicate axes, empty axes and more than :data:`MAX_GRID_POINTS` points are errors.
    """
    if not isinstance(config, Config):
        config = Config(config)
    pairs = list(grid_axes.items()) if isinstance(grid_axes, Mapping) else list(grid_axes)
    names = [p[0] for p in pairs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"grid axis {dupes[0]!r} is given more than once; give each key one --grid")
    axes = [(name, _normalize_axis(name, values)) for name, values in pairs]
    total = math.prod(len(v) for _, v in axes)
    if total > MAX_GRID_POINTS:
        sizes = " × ".join(f"{len(v)} ({n})" for n, v in axes)
        raise ConfigError(f"grid has {total} points ({sizes}); at most {MAX_GRID_POINTS} are allowed")
    out = []
    for combo in itertools.product(*(v for _, v in axes)):
        point = dict(zip(names, combo))
        try:
            # a grid value of a list key is one element: the run's config holds it as a 1-list
            cfg = config.replace(point)
        except ConfigError as err:
            where = ", ".join(f"{k}={toml_literal(v)}" for k, v in point.items())
            raise ConfigError(f"grid point {where}: {err}") from None
        out.append((point, cfg))
    return out
