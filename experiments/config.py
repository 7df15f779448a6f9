"""Run configuration: a declarative registry of keys, TOML loading, ``--set`` overrides and grids.

A configuration is a flat set of keys (``n``, ``beta``, ``solver``...), each declared once as a
:class:`Key` in :data:`KEYS` with its type, default, bounds and one line of documentation. Other
modules add their own keys with :func:`register` and their cross-key rules with
:func:`register_check`. Values are resolved in layers, later ones winning::

    registry defaults  <  experiment defaults (base)  <  TOML file or dict  <  --set key=value

and the result is an immutable :class:`Config`. Every problem is a :class:`ConfigError` whose message
is one line naming the key, the bad value and what is allowed.

List keys (``d``, ``beta``, ``save_times``) hold tuples; a scalar becomes a one-element tuple, and the
strings ``"a:b:n"`` (``numpy.linspace(a, b, n)``) and ``"a,b,c"`` are accepted for numeric lists.
:func:`parse_grid` and :func:`expand_grid` turn ``--grid key=spec`` options into the Cartesian
product of configurations a sweep runs; :func:`to_toml` writes a configuration back exactly.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import numbers
import os
import re
import stat
import tomllib
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ConfigError",
    "read_toml_file",
    "shorten",
    "Key",
    "KEYS",
    "TYPES",
    "FIXED_STEP_SOLVERS",
    "GRID_ONLY_SOLVERS",
    "MAX_GRID_POINTS",
    "Config",
    "register",
    "register_check",
    "load_config",
    "validate",
    "parse_override",
    "parse_grid",
    "expand_grid",
    "to_toml",
    "describe_keys",
]

TYPES = ("int", "float", "str", "bool", "float_list", "int_list", "str_list", "table")
_LIST_ELEMENT = {"float_list": "float", "int_list": "int", "str_list": "str"}
FIXED_STEP_SOLVERS = ("euler", "rk4", "lie_euler", "cg3", "lie_trotter", "ab4")
GRID_ONLY_SOLVERS = ("ab4",)  # fixed-step solvers that always step on the uniform grid and interpolate their saves
MAX_GRID_POINTS = 100_000
SEED_MAX = 2**63 - 1  # jax.random.key takes a signed 64-bit seed (particles.init.SEED_MAX)
_BARE_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """A configuration problem, described in one line (key, bad value, what is allowed)."""


# --------------------------------------------------------------------------------------------
# Keys


@dataclasses.dataclass(frozen=True)
class Key:
    """One configuration key: name, type, default, one-line doc, and the values it allows.

    ``type`` is one of :data:`TYPES`. ``minimum``/``maximum`` bound numbers (elementwise for lists;
    ``strict_min``/``strict_max`` make them exclusive); ``choices`` restricts strings (elementwise
    for ``str_list``). List keys need at least one value unless ``allow_empty``. The default is
    normalized by the key itself when the key is made, so a bad default fails at import time.
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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _BARE_KEY.match(self.name):
            raise ConfigError(f"key name must match [A-Za-z][A-Za-z0-9_]*, got {self.name!r}")
        if self.type not in TYPES:
            raise ConfigError(f"key {self.name!r}: type must be one of {', '.join(TYPES)}; got {self.type!r}")
        if self.choices is not None:
            object.__setattr__(self, "choices", tuple(self.choices))
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
        return _describe(self, self.element_type, plural=self.type in _LIST_ELEMENT)

    def coerce(self, value: Any) -> Any:
        """Return ``value`` normalized for this key (ints, floats, tuples), or raise ConfigError."""
        if self.type == "table":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{self.name} must be a table, got {_show(value)}")
            return _freeze_table(self.name, value)
        if self.type in _LIST_ELEMENT:
            return self._coerce_list(value)
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
            items = _split_spec(self.name, value)
        elif isinstance(value, str):
            items = _split_commas(self.name, value, text_values=True) if "," in value else [value]
        elif isinstance(value, np.ndarray):
            if value.ndim > 1:
                raise ConfigError(f"{self.name} must be {self.allowed()}, got an array of shape {value.shape}")
            items = value.reshape(-1).tolist()
        elif _is_sequence(value):
            items = list(value)
        elif isinstance(value, Mapping):
            raise ConfigError(f"{self.name} must be {self.allowed()}, got a table {_show(value)}")
        else:
            return (_coerce_scalar(self, element, self.name, value),)
        if not items and not self.allow_empty:
            raise ConfigError(f"{self.name} must be {self.allowed()}, got an empty list")
        return tuple(_coerce_scalar(self, element, f"{self.name}[{i}]", v) for i, v in enumerate(items))


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


def _show(value: Any) -> str:
    """Render a bad value for a message: repr, and say so when it is a string or a table."""
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "a table {" + ", ".join(f"{k} = {_show(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) if not isinstance(v, str) else repr(v) for v in value) + "]"
    return repr(value)


def _coerce_scalar(key: Key, element: str, label: str, value: Any) -> Any:
    """Normalize one scalar for ``key`` (``label`` names it in messages, e.g. ``beta[2]``)."""
    if isinstance(value, np.generic):
        value = value.item()  # numpy scalars become Python ones (np.bool_ is no bool subclass)
    allowed = _describe(key, element, plural=False)
    if element == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{label} must be {allowed}, got {_show(value)}")
        return value
    if element == "str":
        if (key.choices is not None and {"yes", "no"} <= set(key.choices)
                and (isinstance(value, bool) or value in ("true", "false"))):
            value = "yes" if value in (True, "true") else "no"  # the yes/no/auto keys also take true and false
        if not isinstance(value, str):
            raise ConfigError(f"{label} must be {allowed}, got {_show(value)}")
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
        raise ConfigError(f"{label} must be {allowed}, got {_show(value)}")
    if element == "int":
        if not isinstance(value, numbers.Integral):
            if math.isfinite(value) and float(value).is_integer():
                value = int(value)
            else:
                raise ConfigError(f"{label} must be {allowed}, got {_show(float(value))}")
        value = int(value)
    else:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{label} must be {allowed}, got {value!r}")
    if key.minimum is not None and (value <= key.minimum if key.strict_min else value < key.minimum):
        raise ConfigError(f"{label} must be {allowed}, got {_show(value)}")
    if key.maximum is not None and (value >= key.maximum if key.strict_max else value > key.maximum):
        raise ConfigError(f"{label} must be {allowed}, got {_show(value)}")
    if key.choices is not None and value not in key.choices:
        listed = ", ".join(repr(c) for c in key.choices)
        raise ConfigError(f"{label} must be one of {listed}; got {_show(value)}")
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
            return types.MappingProxyType(out)
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


def _thaw(value: Any) -> Any:
    """Plain, mutable, JSON-friendly copy of a normalized value (tuples → lists, tables → dicts)."""
    if isinstance(value, Mapping):
        return {k: _thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Registry

KEYS: dict[str, Key] = {}
_CHECKS: list[Callable[["Config"], None]] = []


def register(key: Key) -> Key:
    """Add ``key`` to :data:`KEYS` (re-registering an identical key is a no-op) and return it."""
    if not isinstance(key, Key):
        raise TypeError(f"register expects a Key, got {type(key).__name__}")
    old = KEYS.get(key.name)
    if old is not None and old != key:
        raise ConfigError(f"key {key.name!r} is already registered with a different definition")
    KEYS[key.name] = key
    return key


def register_check(check: Callable[["Config"], None]) -> Callable[["Config"], None]:
    """Add a cross-key rule run by :func:`validate`: ``check(config)`` raises ConfigError or returns.

    Usable as a decorator. Registering the same function twice runs it once.
    """
    if check not in _CHECKS:
        _CHECKS.append(check)
    return check


for _key in (
    Key("experiment", "str", "simulate", "the kind of experiment (a built-in experiment's name)"),
    Key(
        "model", "str", "sa", "attention: SA, USA, USA rescaled by e^{-β}, Sinkhorn, hardmax, linear, least squares",
        choices=("sa", "usa", "usa-rescaled", "sinkhorn", "hardmax", "linear", "least_squares")
    ),
    Key("n", "int", 32, "number of particles (tokens)", minimum=1),
    Key("d", "int_list", 3, "dimension of the ambient space R^d; a list sweeps it", minimum=2),
    Key("beta", "float_list", 1.0, "inverse temperature β; a list runs one ensemble per value", minimum=0.0),
    Key("seeds", "int", 16, "ensemble size: independent initial conditions per β", minimum=1),
    Key("seed", "int", 0, "random seed of the first ensemble member (member s draws from seed + s ≤ 2**63 - 1)",
        minimum=0),
    Key(
        "init",
        "str",
        "uniform",
        "initial condition",
        choices=("uniform", "orthogonal", "equiangular", "cap", "clusters", "file", "angles"),
    ),
    Key("angles", "float_list", (), "initial angles on the circle (init = 'angles', d = 2)", allow_empty=True),
    Key(
        "rho",
        "float",
        0.0,
        "equiangular initial inner product ρ0 (init = 'equiangular')",
        minimum=-1.0,
        maximum=1.0,
        strict_max=True,
    ),
    Key(
        "cap_angle",
        "float",
        math.pi / 4,
        "angular radius of the cap (init = 'cap')",
        minimum=0.0,
        strict_min=True,
        maximum=math.pi,
    ),
    Key("n_init_clusters", "int", 3, "number of initial clusters (init = 'clusters')", minimum=1),
    Key("spread", "float", 0.05, "spread of the initial clusters (init = 'clusters')", minimum=0.0),
    Key("init_file", "str", "", "path of a .npy initial configuration (init = 'file')"),
    Key("t1", "float", 15.0, "final time", minimum=0.0, strict_min=True),
    Key("n_save", "int", 151, "number of equally spaced save times in [0, t1]", minimum=2),
    Key(
        "save_times",
        "float_list",
        (),
        "explicit save times, increasing, within [0, t1]; override n_save when given",
        minimum=0.0,
        allow_empty=True,
    ),
    Key(
        "solver",
        "str",
        "tsit5",
        "time integrator",
        choices=("euler", "rk4", "lie_euler", "cg3", "lie_trotter", "ab4", "tsit5", "dopri5", "dopri8", "kvaerno5"),
    ),
    Key("dt", "float", 0.0, "time step (0 = unset; required by euler, rk4, lie_euler, cg3, lie_trotter, ab4)",
        minimum=0.0),
    Key("max_steps", "int", 1_000_000, "the most steps per member (adaptive solvers stop there; longer fixed-step "
        "runs and more save times are refused before they start)", minimum=1),
    Key("dense", "bool", False,
        "rk4: uniform steps of dt, saves interpolated between them (ab4 and the adaptive solvers always interpolate)"),
    Key("rtol", "float", 1e-6, "relative tolerance of adaptive solvers", minimum=0.0, strict_min=True),
    Key("atol", "float", 1e-9, "absolute tolerance of adaptive solvers", minimum=0.0, strict_min=True),
    Key("dtype", "str", "float64", "floating-point precision", choices=("float32", "float64")),
    Key(
        "delta",
        "float",
        1e-3,
        "clustering threshold: pairs with ⟨x_i,x_j⟩ ≥ 1−δ are together",
        minimum=0.0,
        strict_min=True,
        maximum=2.0,
    ),
    Key("save_spacing", "str", "linear", "spacing of the n_save save times", choices=("linear", "log")),
    Key("log_decades", "float", 4.0, "with save_spacing = 'log': save times span t1·10^-decades … t1",
        minimum=0.0, strict_min=True, maximum=30.0),
    Key("histogram_bins", "int", 0, "bins of the inner-product histograms saved per time (0 = none)", minimum=0),
    Key("save_states", "str", "auto", "keep the trajectories (auto: when they are small)",
        choices=("auto", "yes", "no")),
    Key("memory_gb", "float", 2.0, "memory budget of one compiled batch; larger ensembles run in chunks",
        minimum=0.0, strict_min=True),
    Key("statistics", "str_list", ("pairs", "clusters", "energy"),
        "statistics saved per time: pairs (inner products, clustered fraction), clustered (the clustered fraction "
        "alone, cheapest), clusters (counts, levels), energy, "
        "attention (spectral gap, stationary law, entropy of the attention matrix)",
        choices=("pairs", "clustered", "clusters", "energy", "attention")),
    Key("progress", "bool", True, "show progress on stderr"),
    Key("stop_when_clustered", "bool", False, "stop a member once all its pairs are within δ/2 (one cluster)"),
    Key("span", "bool", True, "simulate d > n runs in the span of the tokens where that is exact (V = λI, no noise "
        "or feed-forward): coordinates in R^n, states mapped back to R^d where saved"),
    Key("modes", "int", 256, "meanfield-circle: Fourier modes |k| < modes of the density (a grid of 2·modes angles)",
        minimum=2),
    Key("perturbation", "float", 1e-3, "meanfield-circle: amplitude ε of each mode k ≤ 16 of the initial density",
        minimum=0.0),
    Key("particle_counts", "int_list", (), "meanfield-circle: particle counts n compared with the density in W1",
        minimum=1, allow_empty=True),
):
    register(_key)
del _key


# --------------------------------------------------------------------------------------------
# Config


class Config(Mapping):
    """An immutable, validated configuration: ``cfg.n``, ``cfg["n"]``, ``cfg.to_dict()``.

    ``Config(values)`` fills missing keys with the registry defaults, normalizes every value and runs
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
    def _trusted(cls, values: dict[str, Any]) -> "Config":
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
            raise AttributeError(f"Config has no key {name!r}{_suggest(name, self._values)}") from None

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
        return {k: _thaw(v) for k, v in self._values.items()}

    def replace(self, changes: Mapping[str, Any] | None = None, /, **kwargs: Any) -> "Config":
        """A new validated Config with some keys changed (``cfg.replace(beta=4)``)."""
        updates = dict(changes or {})
        updates.update(kwargs)
        values = dict(self._values)
        values.update(_coerce_layer(updates, ""))
        new = Config._trusted(values)
        validate(new)
        return new


def _suggest(name: str, valid: Iterable[str]) -> str:
    near = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else ""


def shorten(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis: what a message quotes of a user's input."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unknown(name: str) -> ConfigError:
    hint = _suggest(name, KEYS) if len(name) <= 60 else ""
    if not hint:
        hint = "; valid keys: " + ", ".join(KEYS)
    return ConfigError(f"unknown key {shorten(name)!r}{hint}")


def _coerce_layer(layer: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Normalize one layer of values; messages start with ``source`` (a file, '--set ...')."""
    out = {}
    for name, value in layer.items():
        try:
            if not isinstance(name, str):
                raise ConfigError(f"key names must be strings, got {name!r}")
            key = KEYS.get(name)
            if key is None:
                raise _unknown(name)
            if isinstance(value, Mapping) and key.type != "table":
                raise ConfigError(
                    f"{name} must be {key.allowed()}, got {_show(value)} (nested tables are not supported)"
                )
            out[name] = key.coerce(value)
        except ConfigError as err:
            raise ConfigError(f"{source}: {err}" if source else str(err)) from None
    return out


def validate(config: Config | Mapping[str, Any]) -> Config:
    """Check the rules that involve several keys, then the registered checks; return ``config``.

    Core rules: fixed-step solvers need ``dt > 0``; ``save_times`` increasing and within
    ``[0, t1]``; the members' seeds ``seed + s`` ≤ 2**63 − 1; ``init = 'file'`` needs ``init_file``;
    the initial conditions' own limits (equiangular ρ and d ≥ n, orthogonal d ≥ n, at most n initial
    clusters), for every d listed.
    """
    if not isinstance(config, Config):
        return Config(config)  # normalizes every value, then comes back here
    c = config
    if c["solver"] in FIXED_STEP_SOLVERS and c["dt"] <= 0:
        raise ConfigError(
            f"dt must be > 0 for the fixed-step solver {c['solver']!r} (dt = 0 means unset); "
            f"set dt, or pick an adaptive solver (tsit5, dopri5, dopri8)"
        )
    if c["dense"] and c["solver"] in FIXED_STEP_SOLVERS and c["solver"] not in ("rk4",) + GRID_ONLY_SOLVERS:
        raise ConfigError(f"dense = true interpolates between rk4 or ab4 steps; the fixed-step solver "
                          f"{c['solver']!r} has no interpolant: set solver = 'rk4' or 'ab4' (or an adaptive solver, "
                          f"which always interpolates) or dense = false")
    times = c["save_times"]
    for i in range(1, len(times)):
        if not times[i] > times[i - 1]:
            raise ConfigError(
                f"save_times must be strictly increasing; got save_times[{i - 1}] = {times[i - 1]!r} "
                f"then save_times[{i}] = {times[i]!r}"
            )
    if times and times[-1] > c["t1"]:
        raise ConfigError(f"save_times must lie within [0, t1 = {c['t1']!r}]; got {times[-1]!r}")
    if c["seed"] + c["seeds"] - 1 > SEED_MAX:
        top = SEED_MAX - c["seeds"] + 1
        fix = f"seed must lie in [0, {top}]" if top >= 0 else f"seeds must be ≤ 2**63 = {SEED_MAX + 1}"
        raise ConfigError(f"seed + seeds - 1 must be ≤ 2**63 - 1 = {SEED_MAX} (member s draws from seed + s); got "
                          f"seed = {c['seed']}, seeds = {c['seeds']}: {fix}")
    init, n = c["init"], c["n"]
    if init == "file" and not c["init_file"]:
        raise ConfigError("init = 'file' needs init_file, the path of a .npy array; got init_file = ''")
    if init == "equiangular" and n > 1:
        lower = -1.0 / (n - 1)
        rho = c["rho"]
        simplex = math.isclose(rho, lower, rel_tol=0.0, abs_tol=1e-12)
        if rho < lower and not simplex:
            raise ConfigError(f"rho must be ≥ -1/(n-1) = {lower:g} for equiangular init with n = {n}; got {rho!r}")
        need = n - 1 if simplex else n
        small = [d for d in c["d"] if d < need]
        if small:
            raise ConfigError(
                f"d must be ≥ {need} for equiangular init with n = {n}, rho = {rho!r} "
                f"(n vectors with equal inner products); got d = {small[0]}"
            )
    if init == "orthogonal":
        small = [d for d in c["d"] if d < n]
        if small:
            raise ConfigError(f"d must be ≥ n = {n} for orthogonal init; got d = {small[0]}")
    if init == "angles":
        if tuple(c["d"]) != (2,):
            raise ConfigError(f"init = 'angles' places particles on the circle and needs d = 2; got d = {list(c['d'])}")
        if len(c["angles"]) != n:
            raise ConfigError(f"init = 'angles' needs one angle per particle: n = {n} but {len(c['angles'])} angles")
    if init == "clusters" and c["n_init_clusters"] > n:
        raise ConfigError(f"n_init_clusters must be ≤ n = {n}; got {c['n_init_clusters']}")
    for check in _CHECKS:
        check(config)
    return config


# --------------------------------------------------------------------------------------------
# Loading


def _parse_scalar_text(text: str) -> Any:
    """Parse ``text`` as one TOML value; None if it is not valid TOML (the caller keeps the text)."""
    if "\n" in text or "\r" in text:
        return None
    try:
        parsed = tomllib.loads(f"v = {text}")
    except tomllib.TOMLDecodeError:
        return None
    return parsed.get("v") if set(parsed) == {"v"} else None


def _toml_or_text(text: str) -> Any:
    parsed = _parse_scalar_text(text)
    return text.strip() if parsed is None else parsed


def _split_commas(label: str, text: str, *, text_values: bool = False) -> list:
    """Split ``"a,b,c"``; each part is parsed as TOML, except that for string keys
    (``text_values``) a part that is not a quoted TOML string stays raw text."""
    parts = [p.strip() for p in text.split(",")]
    if text.strip().endswith(",") and len(parts) > 1:
        parts = parts[:-1]  # a trailing comma ("2,") is a one-value list
    if any(p == "" for p in parts):
        raise ConfigError(f"{label}: empty value in the list {text!r}")
    values = [_toml_or_text(p) for p in parts]
    if text_values:
        values = [v if isinstance(v, str) else p for v, p in zip(values, parts)]
    return values


def _split_spec(label: str, text: str) -> list:
    """``"a:b:n"`` → ``linspace(a, b, n)`` as floats; ``"a,b,c"`` → values; else raise."""
    if ":" in text:
        parts = [p.strip() for p in text.split(":")]
        nums = [_parse_scalar_text(p) for p in parts]
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
            raise ConfigError(f"{label}: grid {text!r} asks for {nums[2]} values; at most {MAX_GRID_POINTS} are allowed")
        return np.linspace(float(nums[0]), float(nums[1]), nums[2]).tolist()
    return _split_commas(label, text)


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
        raise ConfigError(f"--set {text if len(name) <= 60 else '…'}: {_unknown(name)}")
    value = _toml_or_text(raw)
    if key.type == "str" and not isinstance(value, str):
        value = raw.strip()
    return name, value


_SPECIAL_FILES = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                  (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_toml_file(path: str | os.PathLike) -> dict:
    """The table of a TOML config file; one ConfigError line naming the file for anything else.

    Only regular files (or links to them) are read: a pipe (``<(...)``), a device or a socket is
    refused by name before it is opened, since reading one can block or never end. A UTF-8 byte
    order mark, as some editors write, is skipped.
    """
    path = Path(path)
    label = str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        if path.is_symlink():
            raise ConfigError(f"config file {label!r} is a broken symbolic link (to {os.readlink(path)!r})") from None
        raise ConfigError(f"config file {label!r} does not exist") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {label!r}: {err.strerror or err}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"config file {label!r} is a directory, not a TOML file")
    for test, kind in _SPECIAL_FILES:
        if test(info.st_mode):
            raise ConfigError(f"config file {label!r} is {kind}, not a regular file: save the configuration to a "
                              ".toml file and give its path")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read config file {label!r}: {err.strerror or err}") from None
    try:
        return tomllib.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{label}: malformed TOML: not UTF-8 text (byte {err.start})") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{label}: malformed TOML: {err}") from None


def _read_toml(source: str | os.PathLike | Mapping) -> tuple[dict, str]:
    """The raw table of a TOML file, TOML text or dict, and a label for error messages."""
    if isinstance(source, Mapping):
        return dict(source), "config"
    if isinstance(source, str) and ("\n" in source or "\r" in source):
        label = "config text"
        try:
            return tomllib.loads(source.removeprefix("\ufeff")), label
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{label}: malformed TOML: {err}") from None
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"a configuration is a TOML file path, TOML text or a dict; got {type(source).__name__}")
    return read_toml_file(source), str(source)


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
        table, label = _read_toml(source)
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
        raise ConfigError(f"--grid {spec}: {_unknown(name)}")
    label = f"--grid {name}"
    if not raw:
        raise ConfigError(f"{label}: the grid is empty; give values a,b,c or a:b:n")
    if raw.startswith("["):
        parsed = _parse_scalar_text(raw)
        if not isinstance(parsed, list):
            raise ConfigError(f"{label}: {raw!r} is not a valid TOML array")
        values = parsed
    elif ":" in raw and key.element_type in ("int", "float"):
        values = _split_spec(label, raw)
    else:
        values = _split_commas(label, raw, text_values=key.element_type == "str")
    return name, _normalize_axis(name, values)


def _normalize_axis(name: str, values: Any) -> list:
    key = KEYS.get(name)
    if key is None:
        raise _unknown(name)
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
            raise ConfigError(f"grid {name} repeats the value {_show(norm)}; grid values must be distinct")
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
        values = dict(config._values)
        # a grid value of a list key is one element: the run's config holds it as a 1-list
        values.update({k: KEYS[k].coerce(v) for k, v in point.items()})
        cfg = Config._trusted(values)
        try:
            validate(cfg)
        except ConfigError as err:
            where = ", ".join(f"{k}={_toml_value(v)}" for k, v in point.items())
            raise ConfigError(f"grid point {where}: {err}") from None
        out.append((point, cfg))
    return out


# --------------------------------------------------------------------------------------------
# Writing


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")  # TOML forbids raw control characters in strings
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else _toml_string(k)


def _toml_value(v: Any) -> str:
    """One value as TOML text; floats via repr so they read back bit for bit."""
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ConfigError(f"cannot write the non-finite number {v!r} to TOML")
        return repr(v)
    if isinstance(v, str):
        return _toml_string(v)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise ConfigError(f"cannot write {v!r} (of type {type(v).__name__}) to TOML")


def to_toml(config: Mapping[str, Any]) -> str:
    """The configuration as TOML text, one ``key = value`` line per key (tables inline).

    ``load_config(to_toml(c)) == c`` for every Config ``c``.
    """
    lines = ["# attnflow configuration"]
    lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in config.items()]
    return "\n".join(lines) + "\n"


def describe_keys() -> str:
    """A text table of every key: name, type, default, and doc with the values allowed."""
    rows = [("key", "type", "default", "description")]
    for key in KEYS.values():
        default = _toml_value(key.default)
        if len(default) > 24:
            default = default[:21] + "..."
        doc = key.doc
        if key.choices is not None or key.minimum is not None or key.maximum is not None:
            doc += f" [{key.allowed()}]"
        rows.append((key.name, key.type, default, doc))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        if i == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(r[3]))
    return "\n".join(line.rstrip() for line in out)
