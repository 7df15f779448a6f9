"""attnflow: transformers as interacting particle systems on the sphere.

Tokens are particles on S^{d-1}; a transformer layer is a time step of the self-attention
vector field ([GLPR] arXiv 2312.10794). ``import attnflow as af`` exposes the public API:
fields (``SA``, ``USA``), initial conditions (``af.init``), ``simulate``, observables, and
``load`` for results written by the command line.

attnflow turns on JAX's float64 support when imported (``jax_enable_x64``): validation needs
it, and arrays default to float64. Pass ``dtype="float32"`` where speed matters more.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._version import __version__  # noqa: E402
from .particles import (  # noqa: E402
    ENSEMBLES,
    NGPT,
    SA,
    USA,
    Attention,
    Circle,
    Clusters,
    FeedForward,
    Field,
    Hardmax,
    LayerWise,
    LeastSquaresAttention,
    LinearAttention,
    MultiHead,
    NoLN,
    Noisy,
    Coalesced,
    PeriLN,
    PostLN,
    PreLN,
    RescaledNoLN,
    Sinkhorn,
    Sum,
    attention_matrix,
    attention_spectrum,
    cluster_labels,
    clustered_fraction,
    clustered_fraction_of_angles,
    clusters,
    effective_tokens,
    energy,
    equiangular,
    fastest_mode,
    from_angles,
    gamma_curve,
    hitting_time,
    inner_product_histogram,
    init,
    log_energy,
    mode_growth_rates,
    n_clusters,
    normalized_energy,
    pair_statistics,
    row_entropy,
    sample_weights,
    second_eigenvalue,
    span,
    stationary_distribution,
    to_angles,
    wendel_probability,
)
from .solvers import SOLVERS, NonFiniteError, Solution, enable_compilation_cache, simulate  # noqa: E402
from .solvers.meanfield import MeanFieldError, MeanFieldSolution, meanfield_circle, w1_circle  # noqa: E402


def load(path):
    """A run or sweep directory written by ``attnflow run``/``sweep``, as an ``xarray.Dataset``."""
    from .experiments.store import load as _load

    return _load(path)
