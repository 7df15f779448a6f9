"""The public names type checkers see are the names ``import attnflow`` loads lazily, read from the source.

``__init__.py`` loads ``af.NAME`` from ``_EXPORTS`` when first used; its ``if TYPE_CHECKING`` block imports
the same names, module by module, in the ``X as X`` form that re-exports them. Parsed with ``ast``, never
imported, so the two lists cannot drift apart unnoticed.
"""

from __future__ import annotations

import ast
from pathlib import Path

INIT = Path(__file__).resolve().parent.parent / "__init__.py"  # the repository root is the package


def _module_assignment(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"__init__.py assigns no {name}")


def _type_checking_imports(tree: ast.Module) -> list[ast.ImportFrom]:
    """The ``from ... import`` statements of the module-level ``if TYPE_CHECKING:`` blocks."""
    found = []
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            found += [child for child in node.body if isinstance(child, ast.ImportFrom)]
    return found


TREE = ast.parse(INIT.read_text(encoding="utf-8"))
EXPORTS: dict[str, tuple[str, ...]] = _module_assignment(TREE, "_EXPORTS")
SUBPACKAGES: tuple[str, ...] = _module_assignment(TREE, "_SUBPACKAGES")
IMPORTS = _type_checking_imports(TREE)


def test_every_import_re_exports_its_name_from_the_package():
    loose = [
        f"line {node.lineno}: {'.' * node.level}{node.module or ''} import {a.name} as {a.asname}"
        for node in IMPORTS
        for a in node.names
        if node.level != 1 or a.asname != a.name
    ]
    assert IMPORTS, "__init__.py has no `if TYPE_CHECKING:` imports"
    assert not loose, "imports that are not `from .module import X as X`:\n" + "\n".join(loose)


def test_the_type_checking_names_are_the_lazy_exports():
    imported: dict[str, list[str]] = {}
    for node in IMPORTS:
        if node.module is not None:
            imported.setdefault(node.module, []).extend(a.name for a in node.names)
    assert sorted(imported) == sorted(EXPORTS)
    for module, names in EXPORTS.items():
        assert sorted(imported[module]) == sorted(names), module
        assert len(set(imported[module])) == len(imported[module]), f"{module}: a name imported twice"
    total = sum(len(names) for names in EXPORTS.values())
    assert sum(len(names) for names in imported.values()) == total


def test_the_subpackages_are_visible_to_type_checkers():
    packages = sorted(a.name for node in IMPORTS if node.module is None for a in node.names)
    assert packages == sorted(SUBPACKAGES)
