"""Reading a user's or a cache's file: regular files only, by kind after resolving links, with a size bound.

Every reader of a file attnflow did not just write (states, initial conditions, weights, TOML configs,
prompts, stored programs, the files of run and sweep directories) opens it here. A named pipe, a device
or a socket, or a link to one, is refused by its kind (``os.stat``'s ``S_ISREG`` after resolving links)
before anything is read: opening a pipe blocks until someone writes to it, and reading a device such as
``/dev/zero`` never ends. The file is opened without blocking (``O_NONBLOCK``) and its kind is checked
on the open descriptor, so a pipe put in the file's place between a check and the open is refused too.
A file larger than the reader's bound is refused before it is read. A ``.npy`` array is memory-mapped,
never unpickled (``open_npy``: initial conditions, states).
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

import numpy as np

from .errors import InputError

__all__ = ["TEXT_LIMIT", "file_kind", "regular_file", "open_regular", "read_regular", "open_npy"]

TEXT_LIMIT = 64 * 2**20
"""The default bound of a text file read whole (a configuration, prompts, a summary): 64 MiB."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words ("a named pipe (FIFO)", "a character device", ...)."""
    for test, kind in _KINDS:
        if test(mode):
            return kind
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _size_text(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _refuse_kind(path: str, mode: int, label: str, error: type[Exception], hint: str) -> None:
    if stat.S_ISREG(mode):
        return
    link = f" (a link to {os.path.realpath(path)!r})" if os.path.islink(path) else ""
    raise error(f"{label} is {file_kind(mode)}{link}, not a regular file{hint}")


def _missing(path: str, label: str, error: type[Exception], missing: str) -> Exception:
    if os.path.islink(path):
        return error(f"{label} is a broken symbolic link (to {os.readlink(path)!r})")
    return error(f"{label} {missing}")


def _refuse_size(size: int, limit: int | None, label: str, error: type[Exception]) -> None:
    if limit is not None and size > limit:
        raise error(f"{label} holds {_size_text(size)}, more than the {_size_text(limit)} attnflow reads from it")


def regular_file(
    path: str | os.PathLike,
    label: str,
    *,
    limit: int | None = None,
    error: type[Exception] = InputError,
    missing: str = "does not exist",
    hint: str = "",
) -> os.stat_result:
    """The ``os.stat`` of ``path`` (links resolved) if it is a regular file of at most ``limit`` bytes; else
    ``error`` with one line starting with ``label`` saying what it is (missing, a broken link, a directory, a
    pipe, a device, too large). ``hint`` ends the message of a file of the wrong kind. For readers that
    hand the path itself on (``np.load``'s memory map); the others call ``open_regular``."""
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise _missing(path, label, error, missing) from None
    except OSError as err:
        raise error(f"cannot read {label} ({err.strerror or err})") from None
    _refuse_kind(path, info.st_mode, label, error, hint)
    _refuse_size(info.st_size, limit, label, error)
    return info


def open_regular(
    path: str | os.PathLike,
    label: str,
    *,
    limit: int | None = None,
    error: type[Exception] = InputError,
    missing: str = "does not exist",
    hint: str = "",
) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file of at most ``limit`` bytes (checked on
    the open descriptor, which opening never blocks for); else ``error`` as ``regular_file`` says."""
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise _missing(path, label, error, missing) from None
    except IsADirectoryError:
        raise error(f"{label} is a directory, not a regular file{hint}") from None
    except OSError as err:
        raise error(f"cannot read {label} ({err.strerror or err})") from None
    try:
        info = os.fstat(fd)
        _refuse_kind(path, info.st_mode, label, error, hint)
        _refuse_size(info.st_size, limit, label, error)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: str | os.PathLike,
    label: str,
    *,
    limit: int = TEXT_LIMIT,
    error: type[Exception] = InputError,
    missing: str = "does not exist",
    hint: str = "",
) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (a file that grows past the bound
    while it is read is refused too); else ``error`` as ``regular_file`` says."""
    with open_regular(path, label, limit=limit, error=error, missing=missing, hint=hint) as f:
        try:
            data = f.read(limit + 1)
        except OSError as err:
            raise error(f"cannot read {label} ({err.strerror or err})") from None
    _refuse_size(len(data), limit, label, error)
    return data


def open_npy(path, label: str | None = None):
    """The array of a ``.npy`` file, memory-mapped and never unpickled (or the NpzFile of an ``.npz``
    archive found under that name, for the caller to refuse).

    Memory-mapping reads only the header: dtype and shape can be checked before any data is read,
    and a header that claims more data than the file holds is an error, not an allocation. A
    missing file raises FileNotFoundError; any other failure (pickled objects, garbage, a
    directory, a pipe, a device or a link to one, refused by kind: ``regular_file``) a one-line
    ValueError starting with ``label`` (default: the path).
    """
    label = repr(os.fspath(path)) if label is None else label
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    # a regular file only: np.load would open a pipe (and block) or map a device
    regular_file(path, label, error=ValueError, hint=": save the array with numpy.save and give its path")
    try:
        return np.load(path, allow_pickle=False, mmap_mode="r")
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as err:  # numpy's advice to allow pickles does not apply
        pickled = "pickle" in str(err) or "Python objects" in str(err)
        why = "it holds pickled Python objects, which are never loaded" if pickled else str(err)
        raise ValueError(f"{label} is not a plain numeric .npy array ({why})") from None
