"""``af.``'s names are listed once, in ``__init__.pyi``: type checkers read the stub, ``import attnflow`` parses it
and imports each name from its module when first used; the names that moved under a namespace fail naming where.

The stub is parsed with ``ast`` here as ``__init__.py`` parses it; the names are then asked of the package.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import attnflow as af
from attnflow.moved import MOVED_NAMES

ROOT = Path(__file__).resolve().parent.parent  # the repository root is the package
STUB = ast.parse((ROOT / "__init__.pyi").read_text(encoding="utf-8"))
IMPORTS = [node for node in STUB.body if isinstance(node, ast.ImportFrom) and node.level == 1]
EXPORTS = {a.name: node.module for node in IMPORTS if node.module and node.module != "_version" for a in node.names}
SUBPACKAGES = sorted(a.name for node in IMPORTS if node.module is None for a in node.names)


def test_every_import_of_the_stub_re_exports_its_name():
    loose = [
        f"line {node.lineno}: from .{node.module or ''} import {a.name} as {a.asname}"
        for node in IMPORTS
        for a in node.names
        if a.asname != a.name
    ]
    assert not loose, "imports that are not `from .module import X as X`:\n" + "\n".join(loose)
    names = [a.name for node in IMPORTS for a in node.names]
    assert len(names) == len(set(names)), "a name imported twice"


def test_the_package_exports_the_stubs_names_from_their_modules():
    assert sorted(af.__all__) == sorted([*EXPORTS, "__version__", "load"])
    assert SUBPACKAGES == ["experiments", "particles", "solvers"]
    for name, module in EXPORTS.items():
        assert getattr(af, name) is getattr(importlib.import_module(f"attnflow.{module}"), name), name
    assert set(af.__all__) | set(SUBPACKAGES) <= set(dir(af))
    assert len(EXPORTS) == 79  # 91 before the names of single theorems and studies moved under their namespaces


def test_the_stub_declares_what_init_defines():
    """``load`` and ``__version__`` are defined in ``__init__.py``; the stub, which type checkers read instead,
    declares them too."""
    defined = {node.name for node in STUB.body if isinstance(node, ast.FunctionDef)}
    assert defined == {"load"}
    assert any(node.module == "_version" and node.names[0].name == "__version__" for node in IMPORTS)


@pytest.mark.parametrize("name", sorted(MOVED_NAMES))
def test_a_moved_name_fails_naming_where_it_lives(name):
    where = MOVED_NAMES[name]
    assert name not in EXPORTS and name not in af.__all__ and name not in dir(af)
    with pytest.raises(AttributeError, match=rf"attnflow\.{name} moved .*: it is attnflow\.{where}\.{name}\b") as err:
        getattr(af, name)
    assert err.value.name == name
    if "." in where:  # a module: the message says how to import it
        assert f"from attnflow.{where} import {name}" in str(err.value)
    assert hasattr(importlib.import_module(f"attnflow.{where}"), name)  # still reachable, where the message says


def test_an_unknown_name_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'attnflow' has no attribute 'simplex_spectrumm'$"):
        af.simplex_spectrumm  # noqa: B018


def test_the_stub_is_shipped_and_type_checked():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "__init__.pyi" in project["tool"]["setuptools"]["package-data"]["attnflow"]
    assert "attnflow/__init__.pyi" in (ROOT / ".ci" / "typecheck").read_text(encoding="utf-8")


def test_import_stays_lazy_and_af_probe_imports_no_matplotlib():
    """``import attnflow`` imports none of its subpackages (the stub is parsed, not imported), and ``af.probe`` on
    a given β measures without importing matplotlib (its figures are drawn only by ``save``)."""
    code = """
import sys
import numpy as np
import attnflow as af
assert not [m for m in sys.modules if m.startswith("attnflow.") and m not in ("attnflow._version", "attnflow.moved")]
x = np.random.default_rng(0).normal(size=(2, 5, 3))
result = af.probe(x, beta=1.0, k=2)
print(sorted({m.split(".")[0] for m in sys.modules} & {"matplotlib", "plotly"}), result.layers.tolist())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "[0,", "1]"]
