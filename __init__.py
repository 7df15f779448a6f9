"""attnflow: transformers as interacting particle systems on the sphere.

Tokens are particles on S^{d-1}; a transformer layer is a time step of the self-attention
vector field ([GLPR] arXiv 2312.10794). ``import attnflow as af`` exposes the public API:
fields (``SA``, ``USA``), initial conditions (``af.init``), ``simulate``, observables, and
``load`` for results written by the command line.

attnflow turns on JAX's float64 support when imported (``jax_enable_x64``): validation needs
it, and arrays default to float64. Pass ``dtype="float32"`` where speed matters more.

Compiled programs are kept on disk by default, where the command line keeps them ($ATTNFLOW_CACHE_DIR, else
~/.cache/attnflow/jax), so that a second process of the same shapes starts warm; ATTNFLOW_CACHE_DIR=off turns
that off (``solvers/compilation_cache.py``).

The public names are listed once, in ``__init__.pyi`` (what type checkers read), and imported when
first used (``af.SA`` imports ``attnflow.particles``), so that ``import attnflow`` is quick and the
command line can configure the process (equinox's runtime checks, ``solvers/compilation_cache.py``)
before the numerical libraries are imported. Names of one theorem or one study live under their
namespace (``af.particles``, ``af.solvers`` or their module); ``af.NAME`` of one that moved there
fails naming where it is.
"""

import importlib as _importlib
import os as _os
import signal as _signal
import sys as _sys
import threading as _threading
import typing as _typing


def _the_program() -> bool:
    """Whether this process is the ``attnflow`` command: its console script, or ``python -m`` of its module (while
    a ``-m`` module's packages are imported, ``sys.argv[0]`` is "-m": the original command line tells)."""
    if _os.path.basename(_sys.argv[0]) == "attnflow":
        return True
    argv = list(getattr(_sys, "orig_argv", ()))
    return any(a == "-m" and b in ("attnflow", "attnflow.experiments.commands.cli") for a, b in zip(argv, argv[1:]))


if _the_program():
    # Ctrl-C before the command line's own handling is set up (while JAX is imported, mostly): one line and
    # status 130, as for Ctrl-C later, instead of Python's traceback and an end by the signal itself
    _previous_excepthook = _sys.excepthook

    def _interrupted_early(kind, value, traceback):
        if not issubclass(kind, KeyboardInterrupt):
            return _previous_excepthook(kind, value, traceback)
        _sys.stderr.write("attnflow: interrupted\n")
        for stream in (_sys.stdout, _sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        _os._exit(130)

    _sys.excepthook = _interrupted_early

# Ctrl-C while JAX is imported is held until the import is done, then raised: raised inside it, it may land in
# JAX's garbage-collection callback (where Python only reports it as ignored, and the import goes on as if whole)
# or in an extension's initialization (which it can leave broken)
_held: list = []
_holding = _threading.current_thread() is _threading.main_thread() and (
    _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
)
if _holding:
    _signal.signal(_signal.SIGINT, lambda signum, frame: _held.append(signum))
try:
    import jax as _jax
finally:
    if _holding:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
if _held:
    raise KeyboardInterrupt("interrupted while importing JAX")

_jax.config.update("jax_enable_x64", True)

# The compilation cache and the stored programs are on by default (``solvers/compilation_cache.py``, turned on when
# a public name is first used, or at the first compiled program): as the command line does, ask equinox for runtime
# checks without Python callbacks (EQX_ON_ERROR=nan) before it is imported, so that the adaptive solves can be
# cached. A value of the user's own wins; with ATTNFLOW_CACHE_DIR=off (or 0, false, no, none) equinox is left alone.
_CACHE_OFF = ("off", "0", "false", "no", "none")  # as solvers/compilation_cache.py reads ATTNFLOW_CACHE_DIR
if "equinox" not in _sys.modules and _os.environ.get("ATTNFLOW_CACHE_DIR", "").strip().lower() not in _CACHE_OFF:
    _os.environ.setdefault("EQX_ON_ERROR", "nan")

from ._version import __version__  # noqa: E402
from .moved import install as _install_moved  # noqa: E402
from .moved import name_error as _moved_name_error  # noqa: E402

_install_moved(__name__)  # a former module path fails naming the new one (moved.py)


# The public names and their modules, read from the stub beside this file (``__init__.pyi``, the one list, which
# type checkers read too): ``from .module import NAME as NAME`` makes NAME public; ``from . import sub as sub``
# a subpackage. Parsed, never imported: ``import attnflow`` stays quick.
def _read_exports() -> tuple[dict[str, str], tuple[str, ...]]:
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).with_name("__init__.pyi").read_text(encoding="utf-8"))
    home, subpackages = {}, []
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        if node.module is None:
            subpackages += [alias.name for alias in node.names]
        elif not node.module.startswith("_"):  # _version: __version__, defined here
            home.update({alias.name: node.module for alias in node.names})
    return home, tuple(subpackages)


_HOME, _SUBPACKAGES = _read_exports()

__all__ = sorted(_HOME) + ["__version__", "load"]


def __getattr__(name):
    """The public names, imported from their modules when first used; a name that moved under a namespace
    fails naming where it lives now (``moved.MOVED_NAMES``)."""
    if name in _SUBPACKAGES:
        return _importlib.import_module(f".{name}", __name__)
    module = _HOME.get(name)
    if module is None:
        raise _moved_name_error(__name__, name)
    if name != "enable_compilation_cache":  # attnflow's default before anything compiles, unless the name chooses
        _importlib.import_module(".solvers.compilation_cache", __name__).enable_by_default()
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_HOME) | set(_SUBPACKAGES))


def load(path):
    """The run or sweep directory ``path`` written by ``attnflow run``/``sweep``, as an ``xarray.Dataset``."""
    from .experiments.results.dataset import load as _load

    return _load(path)
