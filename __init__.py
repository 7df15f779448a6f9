"""attnflow: transformers as interacting particle systems on the sphere.

Tokens are particles on S^{d-1}; a transformer layer is a time step of the self-attention
vector field ([GLPR] arXiv 2312.10794). ``import attnflow as af`` exposes the public API:
fields (``SA``, ``USA``), initial conditions (``af.init``), ``simulate``, observables, and
``load`` for results written by the command line.

attnflow turns on JAX's float64 support when imported (``jax_enable_x64``): validation needs
it, and arrays default to float64. Pass ``dtype="float32"`` where speed matters more.

The names below are imported when first used (``af.SA`` imports ``attnflow.particles``), so that
``import attnflow`` is quick and the command line can configure the process (equinox's runtime
checks, ``solvers/compilation_cache.py``) before the numerical libraries are imported.
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

from ._version import __version__  # noqa: E402

_EXPORTS = {
    "particles": (
        "ENSEMBLES",
        "NGPT",
        "SA",
        "USA",
        "Attention",
        "Circle",
        "Clusters",
        "FeedForward",
        "Field",
        "Hardmax",
        "LayerWise",
        "LeastSquaresAttention",
        "LinearAttention",
        "MultiHead",
        "NoLN",
        "Noisy",
        "Coalesced",
        "PeriLN",
        "PostLN",
        "PreLN",
        "RescaledNoLN",
        "Sinkhorn",
        "Sum",
        "attention_matrix",
        "attention_spectrum",
        "cluster_labels",
        "clustered_fraction",
        "clustered_fraction_of_angles",
        "clusters",
        "effective_tokens",
        "energy",
        "equiangular",
        "fastest_mode",
        "from_angles",
        "gamma_curve",
        "hitting_time",
        "inner_product_histogram",
        "init",
        "log_energy",
        "mode_growth_rates",
        "n_clusters",
        "normalized_energy",
        "pair_statistics",
        "row_entropy",
        "sample_weights",
        "second_eigenvalue",
        "span",
        "stationary_distribution",
        "to_angles",
        "wendel_probability",
    ),
    "particles.errors": ("AttnflowError", "ConvergenceError", "InputError"),
    "solvers": (
        "SOLVERS",
        "MaxStepsError",
        "NonFiniteError",
        "Solution",
        "Status",
        "enable_compilation_cache",
        "simulate",
    ),
    "solvers.meanfield": ("MeanFieldError", "MeanFieldSolution", "meanfield_circle", "w1_circle"),
    "solvers.fitting": ("FitResult", "fit"),
    "experiments.commands.probe": ("ProbeResult", "probe"),
    "solvers.meanfield_sphere": (
        "SphereMeanField",
        "SphereMeanFieldError",
        "meanfield_sphere",
        "perturbed_uniform_sphere",
    ),
    "solvers.equilibrium": ("Equilibrium", "EquilibriumError", "equilibrium"),
    "solvers.continuation": ("Branch", "ContinuationError", "SpecialPoint", "continuation"),
    "solvers.rest_points": ("RestPoints",),
    "solvers.stationary": (
        "StationaryCircle",
        "StationaryDensity",
        "branch_threshold",
        "pitchfork_coefficient",
        "stationary_circle",
    ),
    "particles.polytopes": (
        "cross_polytope",
        "hypercube",
        "regular_polygon",
        "simplex",
        "simplex_spectrum",
        "simplex_threshold",
    ),
}
# What type checkers and IDEs read: every name of _EXPORTS imported from its module, re-exported by the
# ``X as X`` form (tests/test_exports.py keeps the two lists equal). Nothing here runs: ``import attnflow``
# stays lazy. Grouped by module in _EXPORTS' order, past the import sorter (it writes one statement per name).
if _typing.TYPE_CHECKING:
    # isort: off
    from .particles import (
        ENSEMBLES as ENSEMBLES,
        NGPT as NGPT,
        SA as SA,
        USA as USA,
        Attention as Attention,
        Circle as Circle,
        Clusters as Clusters,
        FeedForward as FeedForward,
        Field as Field,
        Hardmax as Hardmax,
        LayerWise as LayerWise,
        LeastSquaresAttention as LeastSquaresAttention,
        LinearAttention as LinearAttention,
        MultiHead as MultiHead,
        NoLN as NoLN,
        Noisy as Noisy,
        Coalesced as Coalesced,
        PeriLN as PeriLN,
        PostLN as PostLN,
        PreLN as PreLN,
        RescaledNoLN as RescaledNoLN,
        Sinkhorn as Sinkhorn,
        Sum as Sum,
        attention_matrix as attention_matrix,
        attention_spectrum as attention_spectrum,
        cluster_labels as cluster_labels,
        clustered_fraction as clustered_fraction,
        clustered_fraction_of_angles as clustered_fraction_of_angles,
        clusters as clusters,
        effective_tokens as effective_tokens,
        energy as energy,
        equiangular as equiangular,
        fastest_mode as fastest_mode,
        from_angles as from_angles,
        gamma_curve as gamma_curve,
        hitting_time as hitting_time,
        inner_product_histogram as inner_product_histogram,
        init as init,
        log_energy as log_energy,
        mode_growth_rates as mode_growth_rates,
        n_clusters as n_clusters,
        normalized_energy as normalized_energy,
        pair_statistics as pair_statistics,
        row_entropy as row_entropy,
        sample_weights as sample_weights,
        second_eigenvalue as second_eigenvalue,
        span as span,
        stationary_distribution as stationary_distribution,
        to_angles as to_angles,
        wendel_probability as wendel_probability,
    )
    from .particles.errors import (
        AttnflowError as AttnflowError,
        ConvergenceError as ConvergenceError,
        InputError as InputError,
    )
    from .solvers import (
        SOLVERS as SOLVERS,
        MaxStepsError as MaxStepsError,
        NonFiniteError as NonFiniteError,
        Solution as Solution,
        Status as Status,
        enable_compilation_cache as enable_compilation_cache,
        simulate as simulate,
    )
    from .solvers.meanfield import (
        MeanFieldError as MeanFieldError,
        MeanFieldSolution as MeanFieldSolution,
        meanfield_circle as meanfield_circle,
        w1_circle as w1_circle,
    )
    from .solvers.fitting import (
        FitResult as FitResult,
        fit as fit,
    )
    from .experiments.commands.probe import (
        ProbeResult as ProbeResult,
        probe as probe,
    )
    from .solvers.meanfield_sphere import (
        SphereMeanField as SphereMeanField,
        SphereMeanFieldError as SphereMeanFieldError,
        meanfield_sphere as meanfield_sphere,
        perturbed_uniform_sphere as perturbed_uniform_sphere,
    )
    from .solvers.equilibrium import (
        Equilibrium as Equilibrium,
        EquilibriumError as EquilibriumError,
        equilibrium as equilibrium,
    )
    from .solvers.continuation import (
        Branch as Branch,
        ContinuationError as ContinuationError,
        SpecialPoint as SpecialPoint,
        continuation as continuation,
    )
    from .solvers.rest_points import (
        RestPoints as RestPoints,
    )
    from .solvers.stationary import (
        StationaryCircle as StationaryCircle,
        StationaryDensity as StationaryDensity,
        branch_threshold as branch_threshold,
        pitchfork_coefficient as pitchfork_coefficient,
        stationary_circle as stationary_circle,
    )
    from .particles.polytopes import (
        cross_polytope as cross_polytope,
        hypercube as hypercube,
        regular_polygon as regular_polygon,
        simplex as simplex,
        simplex_spectrum as simplex_spectrum,
        simplex_threshold as simplex_threshold,
    )

    # isort: on
    from . import experiments as experiments
    from . import particles as particles
    from . import solvers as solvers

_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
_SUBPACKAGES = ("particles", "solvers", "experiments")

__all__ = sorted(_HOME) + ["__version__", "load"]


if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and a misspelt af.NAME as an error

    def __getattr__(name):
        """The public names, imported from their modules when first used."""
        if name in _SUBPACKAGES:
            return _importlib.import_module(f".{name}", __name__)
        module = _HOME.get(name)
        if module is None:
            raise AttributeError(f"module 'attnflow' has no attribute {name!r}")
        value = getattr(_importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value


def __dir__():
    return sorted(set(globals()) | set(_HOME) | set(_SUBPACKAGES))


def load(path):
    """The run or sweep directory ``path`` written by ``attnflow run``/``sweep``, as an ``xarray.Dataset``."""
    from .experiments.results.dataset import load as _load

    return _load(path)
