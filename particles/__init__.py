"""What moves: sphere geometry, attention vector fields, energies, initial conditions, observables."""

from . import init
from .energy import energy, log_energy, normalized_energy
from .equiangular_ode import equiangular, equiangular_rhs, gamma_curve, hitting_time, wendel_probability
from .fields import SA, USA, Attention
from .observables import (
    Clusters,
    cluster_labels,
    cluster_sizes,
    clustered_fraction,
    clusters,
    histogram_edges,
    inner_product_histogram,
    n_clusters,
    order_parameter,
    pair_statistics,
    plateaus,
)
from .sphere import (
    expmap,
    geodesic_distance,
    inner_products,
    norm_error,
    normalize,
    pairwise_gaps,
    project,
)
