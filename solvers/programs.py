"""Traced and lowered programs kept on disk, so that a later process calls them without tracing again.

JAX's persistent compilation cache (``compilation_cache.py``) saves only XLA's compilation: every
process still traces and lowers its time loops (diffrax's loop, the queue: 1–3 s), and only then
finds the compiled program. ``jit`` below also keeps what tracing and lowering produce, exported
with JAX's public serialization (``jax.export``), in ``programs/`` of the compilation cache's
directory. A later process with the same program deserializes it and calls it; the call is
compiled with the same compiler options and finds its executable in the compilation cache.

An entry is found by a key of everything that determines the program: the function, the static
arguments (every value that is not an array: numbers, flags, the save function with the values
its closure holds, the field's static structure, the method), the shapes and dtypes of the array
arguments, the compiler options, JAX's configuration that changes tracing (x64, the default PRNG,
matmul precision, EQX_ON_ERROR), the backend, the versions of Python, jax, jaxlib, equinox, diffrax
and attnflow, and a hash of attnflow's own source files (computed once per process), so that an
edit of attnflow never reuses a program traced from older code.

A program that cannot be exported (it calls back into Python: progress bars; it holds effects; an
argument that has no stable description, such as a function defined outside attnflow and the
libraries it runs on) is traced as before; the debug log (``logging.getLogger("attnflow")``) says
why. An entry that is truncated, corrupt, written for another key or version, or that fails to
deserialize, is rebuilt and never used. Entries are written to a temporary file and renamed.
Under an outer trace (``jax.grad``, ``jax.jit``) and on several devices nothing is stored: the
caller's trace, or the sharding, decides the program.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib.metadata
import logging
import os
import sys
import tempfile
import types
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

log = logging.getLogger("attnflow")

FORMAT = b"attnflow-program 1\n"
"""The first line of every entry; the header then holds the key's digest and the payload's."""

SUFFIX = ".jaxexport"
REFUSED = ".traced"
"""Beside an entry's name: a program that cannot be exported (the file holds why), traced by every process."""
SUBDIRECTORY = "programs"

EVENTS: Counter[str] = Counter()
"""How programs were obtained in this process: "loaded" (from disk), "exported" (traced, written),
"traced" (not stored), "rebuilt" (an unusable entry replaced). Read by tests and benchmarks."""

# the modules whose functions a key may name: attnflow (its source is hashed) and the libraries whose
# versions are in the key; a function of any other module (a user's save function) is traced
_KNOWN_MODULES = (
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
_VERSIONED = ("jax", "jaxlib", "equinox", "diffrax", "optimistix", "lineax", "numpy", "attnflow")
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_PACKAGE_DIRS = ("particles", "solvers", "experiments")


_PROGRAMS: weakref.WeakSet[Program] = weakref.WeakSet()


class Unkeyable(Exception):
    """A static argument with no stable description across processes."""


def store_directory() -> Path | None:
    """Where programs go: ``programs/`` in JAX's compilation cache directory, None while that cache is off."""
    cache = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # options are set at run time
    return None if not cache else Path(cache) / SUBDIRECTORY


@functools.cache
def source_digest() -> str:
    """A hash of attnflow's own source files (its package's .py files), once per process."""
    h = hashlib.sha256()
    files = [PACKAGE_ROOT / name for name in ("__init__.py", "_version.py")]
    for sub in _PACKAGE_DIRS:
        files += sorted((PACKAGE_ROOT / sub).rglob("*.py"))
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        h.update(str(path.relative_to(PACKAGE_ROOT)).encode())
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@functools.cache
def environment() -> str:
    """The versions and settings every key shares (the process's configuration, read once)."""
    versions = []
    for dist in _VERSIONED:
        try:
            versions.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist}=?")
    return "|".join(
        [
            f"python={sys.version_info[:3]}",
            *versions,
            f"source={source_digest()}",
            f"backend={jax.default_backend()}:{jax.devices()[0].device_kind}",
        ]
    )


def settings() -> str:
    """JAX's options and the environment that change what a function traces to (may change at run time)."""
    config = jax.config
    return "|".join(
        [
            f"x64={config.jax_enable_x64}",  # type: ignore[attr-defined]
            f"prng={config.jax_default_prng_impl}",  # type: ignore[attr-defined]
            f"matmul={config.jax_default_matmul_precision}",  # type: ignore[attr-defined]
            f"eqx_on_error={os.environ.get('EQX_ON_ERROR', '')}",
        ]
    )


def _known(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in _KNOWN_MODULES


def describe(obj, depth: int = 0) -> str:
    """A description of a static value that is the same in every process where the value is the same.

    Raises ``Unkeyable`` for what has none (an object whose only identity is its address, a function
    of a module outside attnflow and its libraries)."""
    if depth > 40:
        raise Unkeyable("a static value nested too deeply")
    d = depth + 1
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return f"{type(obj).__name__}:{obj!r}"
    if isinstance(obj, enum.Enum):
        return f"enum:{type(obj).__module__}.{type(obj).__qualname__}.{obj.name}"
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}(" + ",".join(describe(v, d) for v in obj) + ")"
    if isinstance(obj, dict):
        items = sorted((describe(k, d), describe(v, d)) for k, v in obj.items())
        return "dict(" + ",".join(f"{k}:{v}" for k, v in items) + ")"
    if isinstance(obj, (frozenset, set)):
        return f"{type(obj).__name__}(" + ",".join(sorted(describe(v, d) for v in obj)) + ")"
    if isinstance(obj, jax.core.Tracer):  # a value of the caller's trace, held in a closure: the caller's program
        raise Unkeyable("a traced value")
    if isinstance(obj, (np.ndarray, np.generic, jax.Array)):
        a = np.asarray(obj)
        return f"array:{a.dtype}{a.shape}:{hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()}"
    if isinstance(obj, np.dtype):
        return f"dtype:{obj}"
    if isinstance(obj, type):
        if not _known(obj.__module__):
            raise Unkeyable(f"the class {obj.__module__}.{obj.__qualname__}")
        return f"class:{obj.__module__}.{obj.__qualname__}"
    if isinstance(obj, jax.tree_util.PyTreeDef):
        return _describe_treedef(obj, d)
    if isinstance(obj, functools.partial):
        return f"partial({describe(obj.func, d)},{describe(obj.args, d)},{describe(obj.keywords, d)})"
    if isinstance(obj, types.MethodType):
        return f"method({describe(obj.__self__, d)},{describe(obj.__func__, d)})"
    if isinstance(obj, types.FunctionType):
        return _describe_function(obj, d)
    if isinstance(obj, (types.BuiltinFunctionType, types.ModuleType)):
        name = getattr(obj, "__qualname__", obj.__name__)
        return f"builtin:{getattr(obj, '__module__', None)}.{name}"
    treedef = jax.tree_util.tree_structure(obj)
    if not jax.tree_util.treedef_is_leaf(treedef):  # a pytree node (an equinox module, say)
        leaves = jax.tree_util.tree_leaves(obj)
        return f"tree({_describe_treedef(treedef, d)};" + ",".join(describe(v, d) for v in leaves) + ")"
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None and _known(getattr(obj, "__module__", None)) and "<locals>" not in obj.__qualname__:
        # a module-level wrapper (jax.jit, custom_vmap, ...): named by its place, its code is in the source hash
        return f"wrapper:{type(obj).__qualname__}:{obj.__module__}.{obj.__qualname__}"
    cls = type(obj)
    if _known(cls.__module__) and not getattr(obj, "__dict__", None) and not getattr(cls, "__slots__", None):
        return f"instance:{cls.__module__}.{cls.__qualname__}"  # a stateless marker (equinox's Missing)
    if cls.__module__.split(".")[0] == "attnflow" and isinstance(getattr(obj, "__dict__", None), dict):
        # attnflow's own plain objects (a save function's adapter, say): their class and what they hold
        return f"object:{cls.__module__}.{cls.__qualname__}({describe(vars(obj), d)})"
    raise Unkeyable(f"a {cls.__module__}.{cls.__qualname__} value")


def _describe_treedef(treedef, depth: int) -> str:
    data = treedef.node_data()
    if data is None:
        return "*"
    kind, aux = data
    children = ",".join(_describe_treedef(c, depth + 1) for c in treedef.children())
    return f"{describe(kind, depth)}[{describe(aux, depth)}]({children})"


def _describe_function(fn: types.FunctionType, depth: int) -> str:
    if not _known(fn.__module__):
        raise Unkeyable(f"the function {fn.__module__}.{fn.__qualname__}")
    code = fn.__code__
    cells = tuple(c.cell_contents for c in fn.__closure__ or ())
    return (
        f"function:{fn.__module__}.{fn.__qualname__}@{code.co_firstlineno}:"
        f"{hashlib.sha256(code.co_code).hexdigest()[:16]}"
        f"({describe(cells, depth)};{describe(fn.__defaults__, depth)};{describe(fn.__kwdefaults__, depth)})"
    )


def _traced(leaves) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


def _aval(leaf) -> str:
    weak = bool(getattr(leaf, "weak_type", False))
    # typed PRNG keys (a noisy run's Brownian paths) have an extended dtype, which NumPy cannot name
    dtype = str(leaf.dtype) if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended) else str(np.dtype(leaf.dtype))
    return f"{dtype}{tuple(leaf.shape)}{'w' if weak else ''}"


class Entry:
    """One program's file: the format line, the key's digest, the payload's digest and length, the payload."""

    @staticmethod
    def pack(key_digest: str, payload: bytes) -> bytes:
        header = f"{key_digest} {hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode()
        return FORMAT + header + payload

    @staticmethod
    def unpack(blob: bytes, key_digest: str) -> bytes:
        """The payload, or ValueError naming what is wrong with the entry."""
        if not blob.startswith(FORMAT):
            raise ValueError("not an entry of this format")
        line, sep, payload = blob[len(FORMAT) :].partition(b"\n")
        fields = line.decode(errors="replace").split()
        if not sep or len(fields) != 3:
            raise ValueError("a damaged header")
        digest, checksum, length = fields
        if digest != key_digest:
            raise ValueError("written for another key")
        if not length.isdigit() or int(length) != len(payload):
            raise ValueError(f"truncated ({len(payload)} of {length} bytes)")
        if hashlib.sha256(payload).hexdigest() != checksum:
            raise ValueError("its checksum does not match")
        return payload


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # as the compilation cache's own files (mkstemp makes them private)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Program:
    """``fn`` compiled as ``eqx.filter_jit`` would (arrays traced, everything else static), with its
    traced and lowered form kept on disk while the compilation cache is on; ``compiler_options=``
    at each call (one compilation per distinct set of options)."""

    def __init__(self, fn: Callable):
        self.fn = fn
        self.name = f"{fn.__module__}.{fn.__qualname__}"
        self.plain: dict[tuple, Callable] = {}  # options → eqx.filter_jit
        self.calls: dict[str, Callable] = {}  # key digest → its compiled call over the array leaves
        _PROGRAMS.add(self)
        functools.update_wrapper(self, fn, assigned=("__doc__", "__name__", "__qualname__", "__module__"), updated=())

    def jitted(self, options: tuple) -> Callable:
        """The traced path: ``eqx.filter_jit`` with the compiler options."""
        if options not in self.plain:
            if options:
                # filter_jit hands keywords beyond its own to jax.jit; its overloads leave them out
                self.plain[options] = eqx.filter_jit(self.fn, compiler_options=dict(options))  # type: ignore[call-overload]
            else:
                self.plain[options] = eqx.filter_jit(self.fn)
        return self.plain[options]

    def __call__(self, *args, compiler_options: dict[str, str] | None = None, **kwargs):
        options = tuple(sorted((compiler_options or {}).items()))
        directory = store_directory()
        if directory is not None and len(jax.devices()) == 1:
            dynamic, static = eqx.partition((args, kwargs), eqx.is_array)
            leaves, treedef = jax.tree_util.tree_flatten(dynamic)
            if not _traced(leaves):
                try:
                    key = "\n".join(
                        [
                            self.name,
                            describe(static),
                            _describe_treedef(treedef, 0),
                            ",".join(_aval(leaf) for leaf in leaves),
                            describe(options),
                            settings(),
                            environment(),
                        ]
                    )
                except Unkeyable as why:
                    EVENTS["traced"] += 1
                    log.debug("%s traced, not stored: %s has no stable description", self.name, why)
                else:
                    digest = hashlib.sha256(key.encode()).hexdigest()
                    return self.stored(directory, digest, options, static, treedef, leaves)(*leaves)
        return self.jitted(options)(*args, **kwargs)

    def stored(self, directory: Path, digest: str, options: tuple, static, treedef, leaves) -> Callable:
        """The compiled call of the program of ``digest`` over the array leaves: the stored program, loaded
        or exported and written; where it cannot be exported, the traced one."""
        if digest not in self.calls:
            path = directory / f"{digest[:40]}{SUFFIX}"
            refusal = path.with_suffix(REFUSED)
            exported = None if refusal.exists() else self.load(path, digest)
            if exported is None:
                exported = self.export(path, digest, options, static, treedef, leaves)
            self.calls[digest] = exported if callable(exported) else self.compiled(exported, options)
        return self.calls[digest]

    def compiled(self, exported, options: tuple) -> Callable:
        """The stored program's call, compiled with the options, named as the program (in JAX's logs, its
        compilation events and the compilation cache's file names)."""

        def call(*leaves):
            return exported.call(*leaves)

        call.__name__ = call.__qualname__ = self.fn.__name__
        return _compiled(call, options)

    def load(self, path: Path, digest: str):
        """The program stored at ``path``, or None (missing, or unusable: then removed, to be rebuilt)."""
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as err:
            log.debug("cannot read the stored program %s (%s): tracing", path, err)
            return None
        try:
            exported = jax.export.deserialize(bytearray(Entry.unpack(blob, digest)))
        except Exception as err:  # any failure of a damaged entry, whatever the deserializer raises
            EVENTS["rebuilt"] += 1
            log.debug("the stored program %s is unusable (%s): rebuilding it", path, err)
            try:
                path.unlink()
            except OSError:
                pass
            return None
        EVENTS["loaded"] += 1
        log.debug("%s loaded from %s", self.name, path)
        return exported

    def export(self, path: Path, digest: str, options: tuple, static, treedef, leaves):
        """Trace, lower and export the program for these arguments and write it to ``path``. Where it cannot
        be exported (the reason in the debug log, and a marker beside the entry so that later processes
        do not try again), the traced function over the leaves, whose trace the export attempt made."""

        def flat(*flat_leaves):
            args, kwargs = eqx.combine(jax.tree_util.tree_unflatten(treedef, flat_leaves), static)
            return self.fn(*args, **kwargs)

        flat.__name__ = flat.__qualname__ = self.fn.__name__  # the program's name in JAX's logs and profiles
        jitted = _compiled(flat, options)
        refusal = path.with_suffix(REFUSED)
        if refusal.exists():
            EVENTS["traced"] += 1
            log.debug("%s traced: it cannot be exported (%s)", self.name, _read_reason(refusal))
            return jitted
        specs = [
            jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, weak_type=getattr(leaf, "weak_type", False)) for leaf in leaves
        ]
        try:
            exported = jax.export.export(jitted)(*specs)
            payload = exported.serialize()
        except Exception as err:  # callbacks, effects, outputs that cannot be serialized: traced instead
            reason = (str(err).splitlines() or [type(err).__name__])[0]
            EVENTS["traced"] += 1
            log.debug("%s cannot be exported, traced instead: %s", self.name, reason)
            try:
                _write_atomically(refusal, reason.encode())
            except OSError:
                pass
            return jitted
        try:
            _write_atomically(path, Entry.pack(digest, bytes(payload)))
        except OSError as err:
            log.debug("cannot write the stored program %s (%s)", path, err)
        EVENTS["exported"] += 1
        log.debug("%s exported to %s", self.name, path)
        return exported


def _compiled(fn: Callable, options: tuple) -> Any:  # jax.jit's wrapper, which jax.export takes
    return jax.jit(fn, compiler_options=dict(options)) if options else jax.jit(fn)


def _read_reason(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return "unknown"


def forget() -> None:
    """Drop what this process holds of stored programs, as a new process starts: the next call of each
    program looks for its entry on disk again."""
    for program in list(_PROGRAMS):
        program.calls.clear()


def jit(fn: Callable) -> Program:
    """``fn`` as a ``Program``: ``eqx.filter_jit`` whose traced program is kept on disk (see the module)."""
    return Program(fn)
