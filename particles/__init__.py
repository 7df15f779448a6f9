"""What moves: sphere geometry, attention vector fields, energies, initial conditions, observables."""

from . import init
from .energy import energy, log_energy, normalized_energy
from .fields import SA, USA, Attention
from .sphere import (
    expmap,
    geodesic_distance,
    inner_products,
    norm_error,
    normalize,
    pairwise_gaps,
    project,
)
