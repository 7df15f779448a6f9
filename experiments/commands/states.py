"""A model's token states per layer, read from the user's file as hist and fit take them.

An array (layers, tokens, d) or (layers, batch, tokens, d) in an ``.npz`` (one array, or the one named by
``--key``; the one named ``states`` in an archive holding several, as ``attnflow export`` writes) or
``.npy`` file: read without unpickling, only from a regular file (a pipe or a device could
block: ``particles/files.py`` refuses them by kind),
checked from its header (dtype, shape, the memory it needs) before any data is read, then checked
finite; tokens scaled to the unit sphere as layer norm does; layers chosen with ``--layers``.
"""

from __future__ import annotations

import difflib
import math
import os
import zipfile
import zlib

import numpy as np

from ...particles.files import open_regular
from ..run import memory

__all__ = [
    "DEFAULT_KEY",
    "read_states",
    "read_attention",
    "array_names",
    "normalize_states",
    "parse_layers",
    "layer_index",
    "check_memory",
]

DEFAULT_KEY = "states"  # the array read from an archive holding several when no key is given


def _npz_header(f, label: str, name: str):
    """dtype and shape of one member of an .npz archive, from its header alone."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:  # version 3 only exists for structured dtypes with non-Latin-1 field names
            raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(f"{label}: array {name!r} is corrupt ({err})") from None
    return dtype, tuple(shape)


def _check_header(dtype: np.dtype, shape: tuple, label: str) -> None:
    """Refuse, before reading any data, what is not a float array (layers, [batch,] tokens, d)."""
    if dtype.hasobject:
        raise ValueError(
            f"{label} holds pickled Python objects (dtype object), which are never loaded; "
            "save the hidden states as a float array"
        )
    if dtype.kind != "f":
        raise ValueError(
            f"{label} has dtype {dtype}; expected floating-point hidden states "
            "(convert with .float() or .astype('float32') before saving)"
        )
    if len(shape) not in (3, 4):
        raise ValueError(f"{label} holds shape {shape}; expected (layers, tokens, d) or (layers, batch, tokens, d)")
    layers, tokens, d = shape[0], shape[-2], shape[-1]
    batch = shape[1] if len(shape) == 4 else 1
    if layers < 1 or batch < 1 or tokens < 2 or d < 2:
        raise ValueError(f"{label} holds shape {shape}; it needs at least one layer (and prompt), two tokens and d ≥ 2")


def check_memory(shape: tuple, label: str) -> None:
    need = 3 * math.prod(shape) * 8  # the array, in float64, and its normalized copy
    have = memory.machine_bytes()
    if have is not None and need > have:
        raise ValueError(
            f"{label} holds shape {shape}, which needs about {memory.format_bytes(need)} of memory, "
            f"more than this machine's {memory.format_bytes(have)}; select fewer layers or prompts "
            "when saving"
        )


def _read_npz(path: str, label: str, key: str | None, check=_check_header) -> tuple[np.ndarray, str]:
    fh = open_regular(path, label, error=ValueError, hint=_HINT)  # never a pipe or a device
    try:
        archive = zipfile.ZipFile(fh)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        fh.close()
        raise ValueError(f"{label} is not a readable .npz archive ({err})") from None
    with fh, archive:
        names = [m.removesuffix(".npy") for m in archive.namelist() if m.endswith(".npy")]
        if not names:
            raise ValueError(f"{label} holds no arrays; save the hidden states with numpy.savez(path, states=...)")
        if key is None and len(names) > 1 and DEFAULT_KEY in names:
            key = DEFAULT_KEY  # the states beside other arrays (attnflow export's attention, for one)
        if key is None:
            if len(names) > 1:
                raise ValueError(
                    f"{label} holds {len(names)} arrays ({', '.join(sorted(names))}); choose one with --key NAME"
                )
            key = names[0]
        elif key not in names:
            near = difflib.get_close_matches(key, names, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ValueError(f"{label} has no array {key!r}{hint}; it holds {', '.join(sorted(names))} (--key NAME)")
        where = f"{label}, array {key!r}" if len(names) > 1 else label
        info = archive.getinfo(key + ".npy")
        try:
            with archive.open(info) as f:
                dtype, shape = _npz_header(f, label, key)
                offset = f.tell()
        except (OSError, zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise ValueError(f"{label}: array {key!r} is corrupt ({err})") from None
        check(dtype, shape, where)
        claimed, held = math.prod(shape) * dtype.itemsize, info.file_size - offset
        if claimed != held:  # a header that lies about its size is refused before anything is allocated
            raise ValueError(
                f"{label}: array {key!r} is corrupt (its header claims {claimed} bytes of data, "
                f"the archive holds {held})"
            )
        check_memory(shape, where)
        try:
            with archive.open(info) as f:
                array = np.lib.format.read_array(f, allow_pickle=False)
        except (ValueError, OSError, EOFError, MemoryError, zipfile.BadZipFile, zlib.error) as err:
            raise ValueError(f"{label}: array {key!r} is corrupt ({err})") from None
    return array, key


_HINT = ": save the states to an .npz or .npy file and give its path"


def read_states(path, key: str | None = None) -> tuple[np.ndarray, str | None, tuple]:
    """Hidden states from an ``.npz`` archive (the single array, the one named ``key``, else the one named
    ``states`` among several) or an
    ``.npy`` file, read without unpickling: (array of shape (layers, batch, tokens, d), the array's
    name, the shape as saved). The header is checked (float dtype, 3 or 4 dimensions, size) before any data is read;
    the values are checked to be finite. Every problem is a one-line ValueError.
    """
    from ...particles.files import open_npy

    path = os.fspath(path)
    label = f"states file {path!r}"
    if os.path.isdir(path):
        raise ValueError(f"{label} is a directory, not an .npz or .npy file")
    # a regular file only: opening or reading a pipe or a device can block for ever
    with open_regular(path, label, error=ValueError, hint=_HINT) as f:
        try:
            magic = f.read(6)
        except OSError as err:
            raise ValueError(f"cannot read {label} ({err.strerror or err})") from None
    if magic.startswith(b"PK"):
        array, key = _read_npz(path, label, key)
    elif magic == b"\x93NUMPY":
        if key is not None:
            raise ValueError(
                f"--key {key!r}: {label} is an .npy file holding one array; --key selects an array of an .npz archive"
            )
        mapped = open_npy(path, label)
        _check_header(mapped.dtype, mapped.shape, label)
        check_memory(mapped.shape, label)
        array = np.array(mapped)
        del mapped
    else:
        why = (
            "it is empty"
            if not magic
            else "it looks like a Python pickle, which is never loaded"
            if magic[:1] == b"\x80"
            else "its first bytes are neither"
        )
        raise ValueError(
            f"{label} is neither an .npz archive nor an .npy array ({why}); "
            "save the states with numpy.savez or numpy.save"
        )
    saved = array.shape
    array = array.reshape(array.shape[:1] + (1,) + array.shape[1:]) if array.ndim == 3 else array
    finite = np.isfinite(array)
    if not finite.all():
        where = _position(np.argwhere(~finite)[0][:3], array.shape)
        raise ValueError(f"{label} has non-finite entries (nan or inf), the first at {where}")
    return array, key, saved


def array_names(path) -> list[str] | None:
    """The names of the arrays of an ``.npz`` archive at ``path``; None for anything else (an ``.npy`` file, a
    path that cannot be read, a pipe or a device, which could block: ``read_states`` says why)."""
    try:
        with open_regular(path, "states file", error=OSError) as f, zipfile.ZipFile(f) as archive:
            return [m.removesuffix(".npy") for m in archive.namelist() if m.endswith(".npy")]
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None


def _check_attention_header(dtype: np.dtype, shape: tuple, label: str) -> None:
    """Refuse, before reading any data, what is not a float array (blocks, [prompts,] heads, tokens, tokens)."""
    if dtype.hasobject or dtype.kind != "f":
        raise ValueError(f"{label} has dtype {dtype}; expected floating-point attention weights")
    if len(shape) not in (4, 5):
        raise ValueError(
            f"{label} holds shape {shape}; expected (blocks, heads, tokens, tokens) or "
            "(blocks, prompts, heads, tokens, tokens)"
        )


def read_attention(path, key: str) -> np.ndarray:
    """The attention weights named ``key`` in the ``.npz`` archive ``path``, read without unpickling, the header
    (float dtype, 4 or 5 dimensions, size) checked before any data is read. Their values are checked by
    ``particles.probe.check_attention`` against the states."""
    path = os.fspath(path)
    array, _ = _read_npz(path, f"states file {path!r}", key, _check_attention_header)
    return array


def _position(index, shape) -> str:
    layer, prompt, token = (int(i) for i in index)
    return f"layer {layer}, " + (f"prompt {prompt}, " if shape[1] > 1 else "") + f"token {token}"


def normalize_states(states: np.ndarray, label: str = "the states") -> np.ndarray:
    """Each token scaled to unit length in float64, as layer norm puts it on the sphere; zero tokens are errors."""
    x = np.asarray(states, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1)
    if np.any(norms == 0):
        where = _position(np.argwhere(norms == 0)[0], x.shape)
        raise ValueError(f"{label}: {where} is the zero vector, which has no direction on the sphere")
    return x / norms[..., None]


def parse_layers(spec: str | None, n_layers: int) -> np.ndarray:
    """``--layers``: a comma list of layer indices and inclusive ranges ("0,3,6", "0-12"); None: all."""
    if spec is None:
        return np.arange(n_layers)
    chosen: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            a = int(lo)
            b = int(hi) if sep else a
        except ValueError:
            raise ValueError(
                f"--layers {spec!r}: expected layer indices and ranges such as 0,3,6 or 0-12, got {part!r}"
            ) from None
        if a > b:
            raise ValueError(f"--layers {spec!r}: the range {part!r} is empty")
        for value in (a, b):
            if not 0 <= value < n_layers:
                raise ValueError(
                    f"--layers {spec!r}: layer {value} is out of range; the states have "
                    f"{n_layers} layers (0–{n_layers - 1})"
                )
        chosen.extend(range(a, b + 1))
    return np.unique(np.asarray(chosen, dtype=np.int64))


def layer_index(text: str, n_layers: int, flag: str) -> int:
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"{flag} expects a layer index, got {text!r}") from None
    if not 0 <= value < n_layers:
        raise ValueError(f"{flag} {value}: out of range; the states have {n_layers} layers (0–{n_layers - 1})")
    return value
