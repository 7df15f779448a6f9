"""What moves: sphere geometry, attention vector fields, energies, initial conditions, observables."""

from . import init, span
from .attention_stats import (
    attention_matrix,
    attention_spectrum,
    effective_tokens,
    row_entropy,
    second_eigenvalue,
    stationary_distribution,
)
from .circle import Circle, from_angles, to_angles
from .coalesce import Coalesced
from .energy import energy, log_energy, normalized_energy
from .equiangular_ode import equiangular, equiangular_rhs, gamma_curve, hitting_time, wendel_probability
from .feedforward import FeedForward
from .fields import SA, USA, Attention, Field, Sum
from .hardmax import Hardmax
from .layernorm import NGPT, NoLN, PeriLN, PostLN, PreLN, RescaledNoLN
from .layerwise import LayerWise
from .linear import LeastSquaresAttention, LinearAttention
from .modes import fastest_mode, mode_growth_rates
from .multihead import MultiHead
from .noise import Noisy
from .observables import (
    Clusters,
    cluster_labels,
    cluster_sizes,
    clustered_fraction,
    clustered_fraction_of_angles,
    clusters,
    histogram_edges,
    inner_product_histogram,
    n_clusters,
    order_parameter,
    pair_statistics,
    plateaus,
)
from .sinkhorn import Sinkhorn
from .sphere import (
    expmap,
    geodesic_distance,
    inner_products,
    norm_error,
    normalize,
    pairwise_gaps,
    project,
)
from .weights import ENSEMBLES, sample_weights
