"""Traced and lowered programs kept on disk, so that a later process calls them without tracing again.

JAX's persistent compilation cache (``compilation_cache.py``) saves only XLA's compilation: every
process still traces and lowers its time loops (diffrax's loop, the queue: 1–3 s), and only then
finds the compiled program. ``jit`` below also keeps what tracing and lowering produce, exported
with JAX's public serialization (``jax.export``), in ``programs/`` of the compilation cache's
directory (on by default from the first call of a program: ``compilation_cache.enable_by_default``). A
later process with the same program deserializes it and calls it; the call is compiled with the same
compiler options and finds its executable in the compilation cache.

An entry is found by a key of everything that determines the program (``program_keys.py``): the
function, the static arguments (every value that is not an array: numbers, flags, the save function
with its code, constants and the values its closure holds, the field's static structure, the method),
described exactly, the shapes and dtypes of the array arguments, the compiler options, JAX's whole
configuration but the options known not to change tracing (``UNTRACED``: logging, the caches'
settings, time-outs), the ``EQX_*`` variables, the backend, the versions of Python, jax, jaxlib,
equinox, diffrax and attnflow, and a digest of attnflow's source as imported, so that neither an edit
of attnflow nor another setting ever reuses a program traced otherwise.

A program that cannot be keyed (a static value with no exact description: a function defined outside
attnflow and the libraries it runs on, an object of a kind the describer does not know) is traced, not
stored; the debug log (``logging.getLogger("attnflow")``) says why. A program that cannot be exported
(it calls back into Python: progress bars; it holds effects) is traced too, and a refusal marker
beside its entry spares later processes the attempt for ``REFUSAL_LIFETIME_S`` (a day); a marker that
is older, or not attnflow's, is not honoured, and a good entry (another process's) wins over it and
removes it. A change of the source or of a version changes the key, so it never meets an old marker.
An entry that is truncated, corrupt, written for another key or version, or that fails to
deserialize, is rebuilt and never used; a file in an entry's or a marker's place that is not a regular
file (a pipe, a device, a link to one) or is larger than the store's cap is never read
(``particles/files.py``), so that it can neither block a run nor exhaust its memory. The checksum guards
against damage, not forgery: like JAX's compilation cache beside it, whose executables are run as found,
the store is trusted as the user's own directory, and an entry written there by hand with a valid header
is used. Entries are written to a temporary file and renamed. A load
renews an entry's modification time; after each write, the least recently used entries and markers
are evicted until ``programs/`` holds at most $ATTNFLOW_PROGRAMS_MAX_SIZE (default 1 GiB,
``compilation_cache.programs_size_cap``); only files whose first line is attnflow's are counted or
removed. Under an outer trace (``jax.grad``, ``jax.jit``) and on several devices nothing is stored: the
caller's trace, or the sharding, decides the program.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import time
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from ..particles.files import open_regular, read_regular
from .compilation_cache import enable_by_default, programs_size_cap
from .program_keys import (
    PACKAGE_DIRS,
    PACKAGE_ROOT,
    UNTRACED,
    Unkeyable,
    aval,
    describe,
    describe_treedef,
    environment,
    settings,
    source_digest,
)

__all__ = [
    "EVENTS",
    "PACKAGE_DIRS",
    "PACKAGE_ROOT",
    "UNTRACED",
    "Entry",
    "Program",
    "Refusal",
    "Unkeyable",
    "describe",
    "environment",
    "evict",
    "forget",
    "jit",
    "settings",
    "source_digest",
]

log = logging.getLogger("attnflow")

FORMAT = b"attnflow-program 1\n"
"""The first line of every entry; the header then holds the key's digest and the payload's."""

SUFFIX = ".jaxexport"
REFUSED = ".traced"
"""Beside an entry's name: a program that could not be exported (``Refusal``), traced while the marker lives."""
REFUSAL_FORMAT = b"attnflow-refusal 1\n"
REFUSAL_LIFETIME_S = 24 * 3600
REFUSAL_LIMIT = 2**20  # a marker holds a name and a reason: larger is not attnflow's
"""How long a refusal marker holds: then the export is tried again (and the marker written again if it fails)."""
SUBDIRECTORY = "programs"

EVENTS: Counter[str] = Counter()
"""How programs were obtained in this process: "loaded" (from disk), "exported" (traced, written),
"traced" (not stored), "rebuilt" (an unusable entry replaced). Read by tests and benchmarks."""

_PROGRAMS: weakref.WeakSet[Program] = weakref.WeakSet()


def store_directory() -> Path | None:
    """Where programs go: ``programs/`` in JAX's compilation cache directory, None while that cache is off."""
    cache = jax.config.jax_compilation_cache_dir  # type: ignore[attr-defined]  # options are set at run time
    return None if not cache else Path(cache) / SUBDIRECTORY


def _traced(leaves) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)


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


class Refusal:
    """A refusal marker's file: its format line, the entry's name it stands for, and why the export failed."""

    @staticmethod
    def pack(name: str, reason: str) -> bytes:
        return REFUSAL_FORMAT + f"{name}\n{reason}".encode()

    @staticmethod
    def holds(path: Path) -> str | None:
        """The reason of the marker at ``path`` while it holds: attnflow's, for this entry, younger than
        ``REFUSAL_LIFETIME_S``. None otherwise (a marker that expired is removed)."""
        try:
            blob = read_regular(path, "refusal marker", limit=REFUSAL_LIMIT, error=OSError)
            age = time.time() - path.stat().st_mtime
        except OSError:
            return None
        if not blob.startswith(REFUSAL_FORMAT):
            return None  # not attnflow's, or of another format: not honoured, and not deleted
        name, _, reason = blob[len(REFUSAL_FORMAT) :].decode(errors="replace").partition("\n")
        if name != path.stem:
            return None
        if age > REFUSAL_LIFETIME_S:
            _unlink(path)
            return None
        return reason


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _ours(path: Path) -> bool:
    """Whether attnflow wrote the file: its first line is an entry's or a refusal marker's."""
    try:
        with open_regular(path, "stored program", error=OSError) as f:
            head = f.read(max(len(FORMAT), len(REFUSAL_FORMAT)))
    except OSError:
        return False
    return head.startswith(FORMAT) or head.startswith(REFUSAL_FORMAT)


def evict(directory: Path, cap: int) -> None:
    """Remove attnflow's least recently used entries and markers (by modification time, which a load
    renews) until those left hold at most ``cap`` bytes. Files attnflow did not write are neither
    counted nor removed; temporaries of interrupted writes count once they are an hour old."""
    found = []
    now = time.time()
    try:
        candidates = list(directory.iterdir())
    except OSError:
        return
    for path in candidates:
        name = path.name
        temporary = name.endswith(".tmp") and (SUFFIX in name or REFUSED in name)
        if not (name.endswith(SUFFIX) or name.endswith(REFUSED) or temporary):
            continue
        try:
            st = path.stat()
        except OSError:
            continue
        if temporary and now - st.st_mtime < 3600:
            continue  # another process may be writing it
        if _ours(path):
            found.append((st.st_mtime, name, st.st_size, path))
    total = sum(size for _, _, size, _ in found)
    for _, _, size, path in sorted(found):
        if total <= cap:
            break
        _unlink(path)
        total -= size
        log.debug("the stored program %s evicted (the store is capped at %d bytes)", path, cap)


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

    def __call__(self, *args, compiler_options: dict[str, str] | dict[str, int] | None = None, **kwargs):
        options = tuple(sorted((compiler_options or {}).items()))
        enable_by_default()  # the first compiled program turns the cache on, unless the process chose otherwise
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
                            describe_treedef(treedef, 0),
                            ",".join(aval(leaf) for leaf in leaves),
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
            exported = self.load(path, digest)
            if exported is None:
                exported = self.export(path, digest, options, static, treedef, leaves)
            else:
                _unlink(path.with_suffix(REFUSED))  # a good entry: a marker of an earlier failure is moot
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
        try:  # a regular file within the store's cap: a pipe or a device there would block or never end
            blob = read_regular(path, "the stored program", limit=programs_size_cap(), error=OSError, missing="")
        except OSError as err:
            if os.path.lexists(path):
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
        try:
            os.utime(path)  # its last use, which eviction reads
        except OSError:
            pass
        EVENTS["loaded"] += 1
        log.debug("%s loaded from %s", self.name, path)
        return exported

    def export(self, path: Path, digest: str, options: tuple, static, treedef, leaves):
        """Trace, lower and export the program for these arguments and write it to ``path``, then evict beyond
        the store's cap. Where it cannot be exported (the reason in the debug log, and a marker beside the
        entry so that later processes do not try again while it holds), the traced function over the
        leaves, whose trace the export attempt made."""

        def flat(*flat_leaves):
            args, kwargs = eqx.combine(jax.tree_util.tree_unflatten(treedef, flat_leaves), static)
            return self.fn(*args, **kwargs)

        flat.__name__ = flat.__qualname__ = self.fn.__name__  # the program's name in JAX's logs and profiles
        jitted = _compiled(flat, options)
        refusal = path.with_suffix(REFUSED)
        reason = Refusal.holds(refusal)
        if reason is not None:
            EVENTS["traced"] += 1
            log.debug("%s traced: it cannot be exported (%s)", self.name, reason)
            return jitted
        cap = programs_size_cap()  # a bad setting is refused before anything is written
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
                _write_atomically(refusal, Refusal.pack(path.stem, reason))
            except OSError:
                pass
            evict(path.parent, cap)
            return jitted
        try:
            _write_atomically(path, Entry.pack(digest, bytes(payload)))
        except OSError as err:
            log.debug("cannot write the stored program %s (%s)", path, err)
        _unlink(refusal)
        evict(path.parent, cap)
        EVENTS["exported"] += 1
        log.debug("%s exported to %s", self.name, path)
        return exported


def _compiled(fn: Callable, options: tuple) -> Any:  # jax.jit's wrapper, which jax.export takes
    return jax.jit(fn, compiler_options=dict(options)) if options else jax.jit(fn)


def forget() -> None:
    """Drop what this process holds of stored programs, as a new process starts: the next call of each
    program looks for its entry on disk again."""
    for program in list(_PROGRAMS):
        program.calls.clear()


def jit(fn: Callable) -> Program:
    """``fn`` as a ``Program``: ``eqx.filter_jit`` whose traced program is kept on disk (see the module)."""
    return Program(fn)
