"""Plots and animations of attnflow runs, one module per family of figures; shared look in ``style``.

Every function takes plain NumPy arrays (anything ``np.asarray`` accepts, JAX arrays included),
draws on a ``matplotlib.figure.Figure`` attached to the Agg canvas, returns that figure and, when
``path`` is given, writes it there (PNG; a GIF for ``animate_sphere``). Nothing here uses pyplot:
no global figure state, no windows, safe to call from worker threads. Styling is set on each
artist (``style.apply_style``), never through rcParams; text is mathtext, never LaTeX, even when a
user's rcParams ask for ``text.usetex``.

The figures follow [GLPR] (arXiv 2312.10794) §6.3 and the metastability paper (arXiv 2410.06833):
phase diagram (Fig. 3), circle trajectories (Fig. 4), histograms of pairwise inner products
against the equiangular ODE (6.9), and the energy staircase.
"""

from .animation import animate_sphere
from .attention import attention_statistics
from .clusters import cluster_count_vs_time, energy_and_clusters
from .fit_figures import fit_errors
from .histograms import (
    histogram_over_time,
    histogram_ridges,
    layer_distances,
    layer_histograms,
)
from .inner_products import inner_product_vs_ode
from .phase import phase_diagram, phase_diagram_grid
from .probe_figures import probe_energy, probe_geometry, probe_knn, probe_rank, probe_sinks
from .sphere_density import sphere_density_maps, sphere_rates_and_convergence
from .style import (
    BAND_COLOR,
    BETA_LABEL,
    CYCLIC_CMAP,
    DATA_COLOR,
    DPI,
    FRACTION_LABEL,
    GAMMA_CURVE_LABEL,
    HISTOGRAM_CMAP,
    INNER_LABEL,
    LABEL_SIZE,
    LEGEND_SIZE,
    SEQUENTIAL_CMAP,
    SPHERE_COLOR,
    THEORY_COLOR,
    TICK_SIZE,
    TIME_LABEL,
    TITLE_SIZE,
)
from .sweep_curves import sweep_curves
from .trajectory import (
    circle_trajectories,
    pca_trajectories,
    sphere_trajectories,
    trajectories,
    unwrapped_angles,
)

__all__ = [
    "animate_sphere",
    "attention_statistics",
    "circle_trajectories",
    "cluster_count_vs_time",
    "energy_and_clusters",
    "fit_errors",
    "histogram_over_time",
    "histogram_ridges",
    "inner_product_vs_ode",
    "layer_distances",
    "layer_histograms",
    "sphere_density_maps",
    "sphere_rates_and_convergence",
    "pca_trajectories",
    "phase_diagram",
    "phase_diagram_grid",
    "probe_energy",
    "probe_geometry",
    "probe_knn",
    "probe_rank",
    "probe_sinks",
    "sphere_trajectories",
    "sweep_curves",
    "trajectories",
]
