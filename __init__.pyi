"""What ``import attnflow as af`` exports: the one list of its public names, read by type checkers and by the
interpreter.

Type checkers read this stub in place of ``__init__.py``; ``__init__.py`` parses its ``from .module import NAME as
NAME`` lines with ``ast`` when attnflow is imported and imports each name from its module when first used
(``af.SA`` imports ``attnflow.particles``), so that ``import attnflow`` imports only JAX. A public name is one line
here. Names of one theorem's closed form or of one study live under their namespace (``af.particles``,
``af.solvers``, or their module: ``attnflow.particles.polytopes.simplex_spectrum``); ``af.NAME`` of a name that
moved there fails naming where it lives (``moved.py``).
"""

# isort: off
import os

import xarray

from . import experiments as experiments
from . import particles as particles
from . import solvers as solvers
from ._version import __version__ as __version__
from .particles import (
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
    clusters as clusters,
    effective_tokens as effective_tokens,
    energy as energy,
    equiangular as equiangular,
    fastest_mode as fastest_mode,
    from_angles as from_angles,
    inner_product_histogram as inner_product_histogram,
    init as init,
    log_energy as log_energy,
    mode_growth_rates as mode_growth_rates,
    n_clusters as n_clusters,
    normalized_energy as normalized_energy,
    pair_statistics as pair_statistics,
    row_entropy as row_entropy,
    sample_weights as sample_weights,
    stationary_distribution as stationary_distribution,
    to_angles as to_angles,
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
from .solvers.circle_meanfield import (
    MeanFieldError as MeanFieldError,
    MeanFieldSolution as MeanFieldSolution,
    meanfield_circle as meanfield_circle,
    w1_circle as w1_circle,
)
from .solvers.fitting import (
    FitResult as FitResult,
    fit as fit,
)
from .experiments.run.probe_run import (
    ProbeResult as ProbeResult,
    probe as probe,
)
from .solvers.sphere_meanfield import (
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
    continuation as continuation,
)
from .solvers.rest_points import (
    RestPoints as RestPoints,
)
from .solvers.stationary import (
    StationaryCircle as StationaryCircle,
    StationaryDensity as StationaryDensity,
    stationary_circle as stationary_circle,
)
from .particles.polytopes import (
    cross_polytope as cross_polytope,
    hypercube as hypercube,
    regular_polygon as regular_polygon,
    simplex as simplex,
)

# isort: on

def load(path: str | os.PathLike[str]) -> xarray.Dataset:
    """The run or sweep directory ``path`` written by ``attnflow run``/``sweep``, as an ``xarray.Dataset``."""
