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

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._version import __version__  # noqa: E402

_EXPORTS = {
    "particles": (
        "ENSEMBLES", "NGPT", "SA", "USA", "Attention", "Circle", "Clusters", "FeedForward", "Field", "Hardmax",
        "LayerWise", "LeastSquaresAttention", "LinearAttention", "MultiHead", "NoLN", "Noisy", "Coalesced",
        "PeriLN", "PostLN", "PreLN", "RescaledNoLN", "Sinkhorn", "Sum", "attention_matrix", "attention_spectrum",
        "cluster_labels", "clustered_fraction", "clustered_fraction_of_angles", "clusters", "effective_tokens",
        "energy", "equiangular", "fastest_mode", "from_angles", "gamma_curve", "hitting_time",
        "inner_product_histogram", "init", "log_energy", "mode_growth_rates", "n_clusters", "normalized_energy",
        "pair_statistics", "row_entropy", "sample_weights", "second_eigenvalue", "span",
        "stationary_distribution", "to_angles", "wendel_probability",
    ),
    "solvers": ("SOLVERS", "NonFiniteError", "Solution", "enable_compilation_cache", "simulate"),
    "solvers.meanfield": ("MeanFieldError", "MeanFieldSolution", "meanfield_circle", "w1_circle"),
    "solvers.fitting": ("FitResult", "fit"),
    "solvers.meanfield_sphere": ("SphereMeanField", "SphereMeanFieldError", "meanfield_sphere",
                                 "perturbed_uniform_sphere"),
    "solvers.equilibrium": ("Equilibrium", "EquilibriumError", "equilibrium"),
    "solvers.continuation": ("Branch", "ContinuationError", "SpecialPoint", "continuation"),
    "solvers.rest_points": ("RestPoints",),
    "solvers.stationary": ("StationaryCircle", "StationaryDensity", "branch_threshold", "pitchfork_coefficient",
                           "stationary_circle"),
    "particles.polytopes": ("cross_polytope", "hypercube", "regular_polygon", "simplex", "simplex_spectrum",
                            "simplex_threshold"),
}
_HOME = {name: module for module, names in _EXPORTS.items() for name in names}
_SUBPACKAGES = ("particles", "solvers", "experiments")

__all__ = sorted(_HOME) + ["__version__", "load"]


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
    from .experiments.store import load as _load

    return _load(path)
