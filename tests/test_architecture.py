"""The package's shape, read from its source: no import cycles, no private names across modules, the core apart from
the shelf of studies, a name for every module that says which, and a ceiling on a module's length.

Every module is parsed with ``ast``, never imported, and its imports are read wherever they are
(inside functions too; ``if TYPE_CHECKING`` blocks aside). An import of a package counts as an import
of its ``__init__``; ``from pkg import name`` is an import of the submodule ``pkg.name`` when there is
one, else of ``pkg``; importing a submodule also imports the packages above it, except those that
enclose the importing module. A private name (one leading underscore) is another module's when it is
defined there; a private submodule is usable inside the package that holds it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository root is the package
PACKAGE = "attnflow"
MAX_LINES = 1200  # per module: a safety net only; a module is split where its concept splits, never to fit
STUDIES = f"{PACKAGE}.experiments.studies"  # the shelf: one folder per study, reached only through its index

# (importer, imported) edges of import cycles in particles/ and solvers/, skipped by the cycle check
ALLOWED_CYCLE_EDGES: set[tuple[str, str]] = set()
# (importer, private name) uses across modules of particles/ and solvers/, skipped by the private-name check
ALLOWED_PRIVATE_USES: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    """Module name → file, for every module of the package (directories with an ``__init__.py`` chain)."""
    out = {}

    def walk(directory: Path, name: str) -> None:
        out[name] = directory / "__init__.py"
        for path in sorted(directory.iterdir()):
            if path.name.startswith((".", "__pycache__")):
                continue
            if path.is_dir() and (path / "__init__.py").is_file():
                walk(path, f"{name}.{path.name}")
            elif path.suffix == ".py" and path.name != "__init__.py":
                out[f"{name}.{path.stem}"] = path

    walk(ROOT, PACKAGE)
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _existing(name: str) -> str | None:
    """``name`` if it is a module of the package, else its longest prefix that is; None outside it."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


class _Imports(ast.NodeVisitor):
    """The imports of one module, wherever they are (functions included, ``if TYPE_CHECKING`` excluded):
    ``edges`` (imported module, line), ``names`` (local name → module it is bound to), and
    ``private`` (the private name, line) for names private to another module that it uses."""

    def __init__(self, module: str):
        self.module = module
        self.enclosing = set(_ancestors(module)) | ({module} if _is_package(module) else set())
        self.edges: list[tuple[str, int]] = []
        self.names: dict[str, str] = {}
        self.private: list[tuple[str, int]] = []

    def _add(self, target: str, line: int) -> None:
        for name in _ancestors(target) + [target]:
            if name != self.module and name not in self.enclosing:
                self.edges.append((name, line))

    def _check(self, dotted: str, line: int) -> None:
        """Record the first private part of ``dotted`` that is not this module's own: a private name of
        another module, or a private submodule of a package that does not enclose this module."""
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if not part.startswith("_") or part.startswith("__"):
                continue
            prefix, owner = ".".join(parts[: i + 1]), ".".join(parts[:i])
            if owner == self.module or (prefix in MODULES and owner in self.enclosing):
                continue
            self.private.append((prefix, line))
            return

    def _base(self, node: ast.ImportFrom) -> str:
        if node.level == 0:
            return node.module or ""
        parts = self.module.split(".") if _is_package(self.module) else self.module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        return ".".join(parts + ([node.module] if node.module else []))

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            target = _existing(alias.name)
            if target is None:
                continue
            self._add(target, node.lineno)
            self._check(alias.name, node.lineno)
            if alias.asname:
                self.names[alias.asname] = target
            else:
                self.names[alias.name.split(".")[0]] = PACKAGE

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._base(node)
        if _existing(base) != base:
            return  # outside the package
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            self._add(sub if sub in MODULES else base, node.lineno)
            self._check(sub, node.lineno)
            if sub in MODULES:
                self.names[alias.asname or alias.name] = sub

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain, value = [node.attr], node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in self.names:
            module = self.names[value.id]
            for attr in reversed(chain):
                dotted = f"{module}.{attr}"
                if attr.startswith("_") and not attr.startswith("__"):
                    self._check(dotted, node.lineno)
                    break
                if dotted not in MODULES:
                    break
                module = dotted
        self.generic_visit(node)


def _scan(name: str) -> _Imports:
    visitor = _Imports(name)
    visitor.visit(ast.parse(MODULES[name].read_text(encoding="utf-8"), filename=str(MODULES[name])))
    return visitor


SCANS = {name: _scan(name) for name in MODULES}


def _graph() -> dict[str, dict[str, int]]:
    graph: dict[str, dict[str, int]] = defaultdict(dict)
    for name, scan in SCANS.items():
        for target, line in scan.edges:
            if (name, target) not in ALLOWED_CYCLE_EDGES:
                graph[name].setdefault(target, line)
    return graph


def _shortest_cycle(graph: dict[str, dict[str, int]], start: str, component: set[str]) -> list[str] | None:
    """The shortest way from ``start`` back to itself inside ``component`` (breadth first)."""
    paths, frontier = {start: [start]}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph.get(v, {})):
                if w == start:
                    return paths[v] + [start]
                if w in component and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return None


def _cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The shortest cycle through each module that lies on one, each cycle once (components by Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(set(component))

    for v in sorted(MODULES):
        if v not in index:
            connect(v)
    cycles, seen = [], set()
    for component in components:
        for start in sorted(component):
            cycle = _shortest_cycle(graph, start, component)
            first = cycle.index(min(cycle[:-1]))
            key = tuple(cycle[first:-1] + cycle[:first])
            if key not in seen:
                seen.add(key)
                cycles.append(list(key) + [key[0]])
    return cycles


def _show(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    steps = [f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])]
    return " -> ".join(steps + [cycle[-1]])


def test_the_package_is_found():
    assert {f"{PACKAGE}.particles", f"{PACKAGE}.solvers", f"{PACKAGE}.experiments.run.runner"} <= set(MODULES)


def test_no_import_cycles():
    graph = _graph()
    cycles = [_show(c, graph) for c in _cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_private_names_across_modules():
    found = sorted(
        {
            (name, used, line)
            for name, scan in SCANS.items()
            for used, line in scan.private
            if (name, used) not in ALLOWED_PRIVATE_USES
        }
    )
    assert not found, "private names used across modules:\n" + "\n".join(
        f"{name} (line {line}) uses {used}" for name, used, line in found
    )


def test_module_names_say_which():
    """No two modules share a base name (``__init__`` aside), so that a traceback line or an import says which."""
    by_stem = defaultdict(list)
    for name, path in MODULES.items():
        if path.name != "__init__.py":
            by_stem[path.stem].append(name)
    repeated = {stem: names for stem, names in by_stem.items() if len(names) > 1}
    assert not repeated, f"module base names used twice: {repeated}"


def _study(name: str) -> str | None:
    """The study folder ``name`` belongs to (``experiments.studies.X``), None for the core and the shelf's index."""
    if not name.startswith(STUDIES + "."):
        return None
    return ".".join(name.split(".")[:4])


def test_the_core_never_imports_a_study_and_studies_never_each_other():
    """Studies depend on the core, never the other way round and never on each other: the core reaches the shelf
    only through its index (``experiments/studies/__init__.py``), which imports the studies by name at run time."""
    wrong = []
    for name, scan in SCANS.items():
        mine = _study(name)
        for target, line in scan.edges:
            theirs = _study(target)
            if theirs is not None and theirs != mine:
                wrong.append(f"{name} (line {line}) imports {target}")
    assert not wrong, "imports across the shelf:\n" + "\n".join(wrong)


def test_every_study_is_registered_and_names_its_modules():
    """Each folder of the shelf is in ``STUDIES`` (its one registration line), lists its experiment modules, and
    names its other modules after itself (``<study>_theory.py``, ``<study>_figures.py``, ...)."""
    from attnflow.experiments import studies

    folders = sorted(p.name for p in (ROOT / "experiments" / "studies").iterdir() if (p / "__init__.py").is_file())
    assert sorted(studies.STUDIES) == folders
    for study in studies.STUDIES:
        package = __import__(f"{STUDIES}.{study}", fromlist=["EXPERIMENTS"])
        for path in (ROOT / "experiments" / "studies" / study).glob("*.py"):
            if path.name != "__init__.py":
                assert path.stem in package.EXPERIMENTS or path.stem.startswith(f"{study}_"), path


def test_modules_are_small():
    lines = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    large = {name: n for name, n in lines.items() if n > MAX_LINES}
    assert not large, f"modules over {MAX_LINES} lines: {large}"


def test_simulate_only_checks_picks_a_loop_and_wraps():
    """``simulate`` delegates: its code (docstring aside) is a dozen statements, however the formatter lays them
    out, and every time loop is reached through ``simulation.LOOPS``, each loop module building its call with
    ``prepare``."""
    tree = ast.parse(MODULES[f"{PACKAGE}.solvers.simulation"].read_text(encoding="utf-8"))
    (fn,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "simulate"]
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) else fn.body
    statements = sum(isinstance(node, ast.stmt) for top in body for node in ast.walk(top))
    assert statements <= 16, statements
    from attnflow.solvers import adaptive_loop, dense, fixed_loop, simulation

    assert set(simulation.LOOPS.values()) == {dense.prepare, fixed_loop.prepare, adaptive_loop.prepare}


def test_every_module_has_a_room_in_the_architecture_page():
    """docs/architecture.md's table of rooms names every module by its path (a folder for all of its modules)."""
    import re

    text = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    rooms = text[text.index("## Rooms") : text.index("## The path of a run")]
    named = set(re.findall(r"`((?:particles|solvers|experiments)/[A-Za-z0-9_/]*(?:\.py|/))`", rooms))
    missing = []
    for name, path in MODULES.items():
        parts = name.split(".")[1:]
        if len(parts) < 2 or path.name == "__init__.py":
            continue  # a package's __init__ is its folder; the root's own files are the package's face
        relative = "/".join(parts) + ".py"
        folders = {"/".join(parts[:k]) + "/" for k in range(1, len(parts))}
        if relative not in named and not folders & named:
            missing.append(relative)
    assert not missing, f"modules without a room in docs/architecture.md: {missing}"


def test_every_package_is_installed():
    """pyproject.toml lists every package of the tree (setuptools installs only those listed, and the
    repository root is the package): ``python docs/scripts/tables.py`` writes a new folder's line there."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert packages == listed, (
        f"pyproject.toml's packages: add {sorted(packages - listed)}, drop {sorted(listed - packages)}"
    )
