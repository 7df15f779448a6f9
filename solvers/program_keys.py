"""What keys a stored program (``programs.py``): exact descriptions of static values, JAX's configuration,
the versions, and a digest of attnflow's source as imported.

A key must change with everything that changes the traced program; where a value cannot be described
exactly, ``Unkeyable`` is raised and the program is traced, not stored, rather than risk two values
sharing a description.

* Static values: numbers, strings, containers, enums, arrays (by their bytes), ``range`` and ``slice`` by
  their fields, pytrees by their structure and leaves, functions by their code (bytecode, constants,
  names, nested code), closure contents and defaults, attnflow's plain objects by their class and
  attributes, named objects of attnflow and its libraries (classes, ufuncs, jitted functions) by their
  place, when the object found there is the value itself. Anything else is refused.
* JAX's configuration: every value of ``jax.config.values`` (its public mapping of every option to its
  current value, thread-local ones included) except ``UNTRACED``, the options known not to change a
  traced program; a setting of a later JAX is keyed by default. The ``EQX_*`` environment variables too.
* Source: attnflow's modules as they were imported. Modules imported before this one (the same import
  of attnflow) are read when it is imported; later imports (and reloads) of attnflow's modules are
  recorded as they happen; modules not imported yet are read from disk when the digest is asked for,
  and read again when they are imported. An edit after a module's import changes nothing: the code that
  runs is the imported one.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import types
from pathlib import Path
from typing import Any

import jax
import numpy as np

UNTRACED = frozenset(
    {
        # where the caches live and what they keep: the program is the same
        "jax_compilation_cache_dir",
        "jax_enable_compilation_cache",
        "jax_compilation_cache_max_size",
        "jax_compilation_cache_check_contents",
        "jax_compilation_cache_expect_pgle",
        "jax_compilation_cache_include_metadata_in_key",
        "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
        "jax_persistent_cache_enable_xla_caches",
        "jax_raise_persistent_cache_errors",
        # logging, dumps and how errors are printed
        "jax_log_compiles",
        "jax_logging_level",
        "jax_debug_log_modules",
        "jax_explain_cache_misses",
        "jax_compiler_detailed_logging_min_ops",
        "jax_pprint_use_color",
        "jax_traceback_filtering",
        "jax_tracer_error_num_traceback_frames",
        "jax_dump_ir_to",
        "jax_dump_ir_modes",
        "jax_include_debug_info_in_dumps",
        "jax_source_url_schema",
        "jax_log_checkpoint_residuals",
        "jax_captured_constants_report_frames",
        "jax_captured_constants_warn_bytes",
        # time-outs of the distributed runtime
        "jax_cpu_get_global_topology_timeout_minutes",
        "jax_cpu_get_local_topology_timeout_minutes",
        "jax_cross_host_transfer_timeout_seconds",
        "jax_share_binary_between_hosts_timeout_ms",
    }
)
"""JAX's options left out of the key: they cannot change a traced program (every other one is keyed)."""

# the modules whose functions a key may name: attnflow (its source is hashed) and the libraries whose
# versions are in the key; a function of any other module (a user's save function) is traced
KNOWN_MODULES = (
    "attnflow",
    "jax",
    "jaxlib",
    "numpy",
    "equinox",
    "diffrax",
    "optimistix",
    "lineax",
    "math",
    "builtins",
    "collections",
)
VERSIONED = ("jax", "jaxlib", "equinox", "diffrax", "optimistix", "lineax", "numpy", "attnflow")
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = ("particles", "solvers", "experiments")
PACKAGE = __name__.split(".")[0]


class Unkeyable(Exception):
    """A static argument with no stable description across processes."""


# --- attnflow's source, as imported

IMPORTED: dict[str, str] = {}
"""Relative path of each of attnflow's modules → the sha256 of its source when it was imported."""
_digest: list = [None, None]  # [the IMPORTED state it was computed from, the digest]


def _relative(file: str | None) -> str | None:
    if not file:
        return None
    try:
        return str(Path(file).resolve().relative_to(PACKAGE_ROOT))
    except ValueError:
        return None


def _record(file: str | None, data: bytes) -> None:
    name = _relative(file)
    if name is not None:
        IMPORTED[name] = hashlib.sha256(data).hexdigest()


class SourceRecorder(importlib.abc.MetaPathFinder):
    """Finds attnflow's modules as the other finders would, and records each one's source as its code is
    loaded."""

    def find_spec(self, fullname, path, target=None):
        if not fullname.startswith(PACKAGE + "."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if type(spec.loader) is importlib.machinery.SourceFileLoader:
                    spec.loader = RecordingLoader(spec.loader.name, spec.loader.path)
                return spec
        return None


class RecordingLoader(importlib.machinery.SourceFileLoader):
    """Python's own source loader (its bytecode cache included), recording the source it loads."""

    def get_code(self, fullname):
        _record(self.path, self.get_data(self.path))
        return super().get_code(fullname)


def _install() -> None:
    for module in list(sys.modules.values()):  # attnflow's modules imported before this one
        file = getattr(module, "__file__", None)
        if getattr(module, "__name__", "").split(".")[0] == PACKAGE and file and _relative(file):
            try:
                _record(file, Path(file).read_bytes())
            except OSError:
                pass
    if not any(isinstance(finder, SourceRecorder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceRecorder())


_install()


def source_digest() -> str:
    """A hash of attnflow's source files: each module as imported, or read from disk if not imported yet."""
    state = (PACKAGE_ROOT, tuple(sorted(IMPORTED.items())))  # it changes only as modules are imported
    if _digest[0] == state:
        return _digest[1]
    h = hashlib.sha256()
    files = [PACKAGE_ROOT / name for name in ("__init__.py", "_version.py")]
    for sub in PACKAGE_DIRS:
        files += sorted((PACKAGE_ROOT / sub).rglob("*.py"))
    for path in files:
        name = str(path.relative_to(PACKAGE_ROOT))
        digest = IMPORTED.get(name)
        if digest is None:
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                continue
        h.update(f"{name}:{digest}\n".encode())
    _digest[:] = [state, h.hexdigest()]
    return _digest[1]


# --- the versions and settings


@functools.cache
def versions() -> str:
    """The versions of Python, the libraries and attnflow, and the backend (read once)."""
    found = []
    for dist in VERSIONED:
        try:
            found.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{dist}=?")
    backend = f"backend={jax.default_backend()}:{jax.devices()[0].device_kind}"
    return "|".join([f"python={sys.version_info[:3]}", *found, backend])


def environment() -> str:
    """The versions and the source every key shares."""
    return f"{versions()}|source={source_digest()}"


def _setting(value) -> str:
    if value is None or isinstance(value, (bool, int, float, str)):
        return f"{type(value).__name__}:{value!r}"
    if isinstance(value, enum.Enum):
        return f"enum:{type(value).__qualname__}.{value.name}"
    text = repr(value)
    if " at 0x" in text:  # an object named by its address: nothing to compare across processes
        raise Unkeyable(f"a JAX setting held {text}")
    return f"{type(value).__qualname__}:{text}"


def settings(values=None) -> str:
    """JAX's configuration (``values``, default ``jax.config.values``, read at each call: settings change at
    run time) less ``UNTRACED``, and equinox's environment variables."""
    values = jax.config.values if values is None else values
    parts = [f"{name}={_setting(values[name])}" for name in sorted(values) if name not in UNTRACED]
    parts += [f"{name}={value}" for name, value in sorted(os.environ.items()) if name.startswith("EQX_")]
    return "|".join(parts)


# --- static values


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made at run time (a class statement), not a static C type


def _known(module: str | None) -> bool:
    return isinstance(module, str) and module.split(".")[0] in KNOWN_MODULES


def _at_its_place(obj) -> str | None:
    """``module.qualname`` of a named object of attnflow or its libraries found at that place, else None."""
    module = getattr(obj, "__module__", None)
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not _known(module) or not isinstance(name, str) or module not in sys.modules:
        return None
    found: Any = sys.modules[module]
    for part in name.split("."):
        found = getattr(found, part, None)
    return f"{module}.{name}" if found is obj else None


def describe(obj, depth: int = 0) -> str:
    """A description of a static value that is the same in every process where the value is the same, and
    differs wherever the values differ.

    Raises ``Unkeyable`` for what has none (an object whose only identity is its address, a function
    of a module outside attnflow and its libraries, an object of a kind it does not know)."""
    if depth > 40:
        raise Unkeyable("a static value nested too deeply")
    d = depth + 1
    kind = type(obj)
    if obj is None or obj is Ellipsis or kind in (bool, int, float, complex, str, bytes):
        return f"{kind.__name__}:{obj!r}"
    if isinstance(obj, enum.Enum):
        return f"enum:{describe(kind, d)}.{obj.name}"
    if kind in (tuple, list):
        return f"{kind.__name__}(" + ",".join(describe(v, d) for v in obj) + ")"
    if kind is dict:
        items = sorted((describe(k, d), describe(v, d)) for k, v in obj.items())
        return "dict(" + ",".join(f"{k}:{v}" for k, v in items) + ")"
    if kind in (frozenset, set):
        return f"{kind.__name__}(" + ",".join(sorted(describe(v, d) for v in obj)) + ")"
    if kind in (range, slice):
        return f"{kind.__name__}({describe(obj.start, d)},{describe(obj.stop, d)},{describe(obj.step, d)})"
    if isinstance(obj, jax.core.Tracer):  # a value of the caller's trace, held in a closure: the caller's program
        raise Unkeyable("a traced value")
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        a = np.asarray(obj)
        return f"array:{a.dtype}{a.shape}:{hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}"
    if isinstance(obj, np.dtype):
        return f"dtype:{obj}"
    if isinstance(obj, type):
        # Python's own types are named by their name (NoneType is no attribute of builtins)
        place = f"builtins.{obj.__qualname__}" if obj.__module__ == "builtins" else _at_its_place(obj)
        if place is None:
            raise Unkeyable(f"the class {obj.__module__}.{obj.__qualname__}")
        return f"class:{place}"
    if isinstance(obj, jax.tree_util.PyTreeDef):
        return describe_treedef(obj, d)
    if isinstance(obj, functools.partial):
        return f"partial({describe(obj.func, d)},{describe(obj.args, d)},{describe(obj.keywords, d)})"
    if isinstance(obj, types.MethodType):
        return f"method({describe(obj.__self__, d)},{describe(obj.__func__, d)})"
    if isinstance(obj, types.FunctionType):
        return _describe_function(obj, d)
    if isinstance(obj, types.ModuleType):
        if not _known(obj.__name__):
            raise Unkeyable(f"the module {obj.__name__}")
        return f"module:{obj.__name__}"
    treedef = jax.tree_util.tree_structure(obj)
    if not jax.tree_util.treedef_is_leaf(treedef):  # a pytree node (an equinox module, a namedtuple, ...)
        leaves = jax.tree_util.tree_leaves(obj)
        return f"tree({describe_treedef(treedef, d)};" + ",".join(describe(v, d) for v in leaves) + ")"
    place = _at_its_place(obj)
    if place is not None:
        # a named object (a builtin, a ufunc, a module-level jitted function): its place names it, and its
        # definition is in the source digest or the library's version
        return f"named:{kind.__module__}.{kind.__qualname__}:{place}"
    if isinstance(obj, types.BuiltinFunctionType) and isinstance(obj.__self__, types.ModuleType):
        raise Unkeyable(f"the builtin {obj.__self__.__name__}.{obj.__name__}")
    state = getattr(obj, "__dict__", None)
    # Python classes only (heap types throughout, no slots): no state beside the instance's dict
    python = all(c is object or (c.__flags__ & _HEAPTYPE and not c.__dict__.get("__slots__")) for c in kind.__mro__)
    if isinstance(state, dict) and python and _at_its_place(kind) is not None:
        if not state:  # a stateless marker (equinox's Missing, a method without parameters)
            return f"instance:{describe(kind, d)}"
        if kind.__module__.split(".")[0] == PACKAGE:
            # attnflow's own plain objects (a save function's adapter, say): their class and what they hold
            return f"object:{describe(kind, d)}({describe(state, d)})"
    raise Unkeyable(f"a {kind.__module__}.{kind.__qualname__} value")


def describe_treedef(treedef, depth: int) -> str:
    """A pytree's structure: each node's type and auxiliary data, leaves as ``*``."""
    data = treedef.node_data()
    if data is None:
        return "*"
    kind, aux = data
    children = ",".join(describe_treedef(c, depth + 1) for c in treedef.children())
    return f"{describe(kind, depth)}[{describe(aux, depth)}]({children})"


def _describe_code(code: types.CodeType, depth: int) -> str:
    if depth > 40:
        raise Unkeyable("a function nested too deeply")
    consts = ",".join(
        _describe_code(c, depth + 1) if isinstance(c, types.CodeType) else describe(c, depth + 1)
        for c in code.co_consts
    )
    shape = (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags)
    return (
        f"code:{code.co_qualname}@{code.co_firstlineno}:{shape}:{hashlib.sha256(code.co_code).hexdigest()}"
        f":names{code.co_names}:vars{code.co_varnames}:free{code.co_freevars}:cells{code.co_cellvars}"
        f"[{consts}]"
    )


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        raise Unkeyable("a closure cell not filled yet") from None


def _describe_function(fn: types.FunctionType, depth: int) -> str:
    if not _known(fn.__module__):
        raise Unkeyable(f"the function {fn.__module__}.{fn.__qualname__}")
    cells = tuple(_contents(c) for c in fn.__closure__ or ())
    return (
        f"function:{fn.__module__}.{fn.__qualname__}:{_describe_code(fn.__code__, depth)}"
        f"({describe(cells, depth)};{describe(fn.__defaults__, depth)};{describe(fn.__kwdefaults__, depth)})"
    )


def aval(leaf) -> str:
    """An array argument's dtype, shape and weak type."""
    weak = bool(getattr(leaf, "weak_type", False))
    # typed PRNG keys (a noisy run's Brownian paths) have an extended dtype, which NumPy cannot name
    dtype = str(leaf.dtype) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended) else str(np.dtype(leaf.dtype))
    return f"{dtype}{tuple(leaf.shape)}{'w' if weak else ''}"
