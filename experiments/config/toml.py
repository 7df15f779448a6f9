"""Configuration files: TOML tables read from files or text, configurations written with tomli-w.

Written files start with the line ``# attnflow configuration`` and read back to the same values:
floats are written in Python's shortest round-trip form (bit for bit, −0.0 included), strings with
TOML escapes, lists as arrays and tables as TOML tables. Non-finite numbers are refused, as no
configuration holds one.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from typing import Any

import numpy as np
import tomli_w

from ...particles.files import read_regular
from .types import ConfigError

__all__ = ["HEADER", "CONFIG_LIMIT", "parse_toml", "read_toml_file", "read_source", "to_toml", "toml_literal"]

HEADER = "# attnflow configuration\n"

CONFIG_LIMIT = 16 * 2**20
"""The largest TOML file read as a configuration (16 MiB): a configuration is a few hundred bytes."""


def parse_toml(text: str, label: str) -> dict:
    """The table of TOML ``text``; one ConfigError line starting with ``label`` if it is malformed or nested
    deeper than the parser can follow (thousands of brackets)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{label}: malformed TOML: {err}") from None
    except RecursionError:
        raise ConfigError(f"{label}: malformed TOML: arrays or tables nested too deeply for a configuration") from None


def read_toml_file(path: str | os.PathLike) -> dict:
    """The table of a TOML config file; one ConfigError line naming the file for anything else.

    Only regular files (or links to them) of at most ``CONFIG_LIMIT`` bytes are read
    (``particles/files.py``): a pipe (``<(...)``), a device or a socket is refused by its kind before
    anything is read, since reading one can block or never end. A UTF-8 byte order mark, as some
    editors write, is skipped.
    """
    label = str(path)
    data = read_regular(
        path,
        f"config file {label!r}",
        limit=CONFIG_LIMIT,
        error=ConfigError,
        hint=": save the configuration to a .toml file and give its path",
    )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{label}: malformed TOML: not UTF-8 text (byte {err.start})") from None
    return parse_toml(text, label)


def read_source(source: str | os.PathLike | Mapping) -> tuple[dict, str]:
    """The raw table of a TOML file, TOML text or dict, and a label for error messages."""
    if isinstance(source, Mapping):
        return dict(source), "config"
    if isinstance(source, str) and ("\n" in source or "\r" in source):
        label = "config text"
        return parse_toml(source.removeprefix("\ufeff"), label), label
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"a configuration is a TOML file path, TOML text or a dict; got {type(source).__name__}")
    return read_toml_file(source), str(source)


def _plain(value: Any) -> Any:
    """``value`` as the Python types TOML holds (numpy → Python, tuples → lists, tables → dicts)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"cannot write the non-finite number {value!r} to TOML")
        return value
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    raise ConfigError(f"cannot write {value!r} (of type {type(value).__name__}) to TOML")


def to_toml(config: Mapping[str, Any]) -> str:
    """The configuration as TOML text: a header comment, then one ``key = value`` per key.

    Arrays span one line per element; table values follow the other keys as ``[key]`` sections.
    ``load_config(to_toml(c)) == c`` for every Config ``c``.
    """
    return HEADER + tomli_w.dumps(_plain(config))


def _key_text(name: str) -> str:
    return tomli_w.dumps({name: 0})[: -len(" = 0\n")]


def toml_literal(value: Any) -> str:
    """One value as TOML on one line (arrays and tables inline): how messages and tables quote values."""
    value = _plain(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key_text(k)} = {toml_literal(v)}" for k, v in value.items()) + "}"
    return tomli_w.dumps({"v": value})[len("v = ") : -1]
