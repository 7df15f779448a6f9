"""The configuration keys that only spectral-selection reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import Label

KEYS = (
    Key(
        "spectra",
        "float_rows",
        ((1.0, 0.6, 0.3), (1.0, 0.3, -0.6), (1.0, -0.2, -1.4), (-0.3, -0.6, -1.0)),
        "spectral-selection: the spectrum classes of the basin atlas, each the three eigenvalues of V = diag(λ) in R³",
        experiment_key=True,
    ),
    Key(
        "mixed",
        "float_rows",
        ((1.0, 0.5, 2.0, 2, 1), (1.0, 2.0, 1.0, 2, 1), (-0.5, 1.0, 3.0, 1, 2), (1.0, 0.8, 5.0, 3, 1)),
        "spectral-selection: the mixed three-group rest points sought, each [a, b, β, m, k]: V = diag(a, b), m tokens "
        "at e_1 and k at each of q e_1 ± s e_2",
        experiment_key=True,
    ),
    Key(
        "atlas_n",
        "int_list",
        (4, 8, 16),
        "spectral-selection: the token counts n of the basin atlas (the first also draws the basin map)",
        minimum=2,
        maximum=64,
        experiment_key=True,
    ),
    Key(
        "starts",
        "int",
        1024,
        "spectral-selection: uniform starts of the basin atlas per spectrum class, β and n",
        minimum=1,
        maximum=1_000_000,
        experiment_key=True,
    ),
    Key(
        "map_resolution",
        "int",
        32,
        "spectral-selection: latitudes of the basin map on S² (twice as many longitudes)",
        minimum=4,
        maximum=256,
        experiment_key=True,
    ),
)

LABELS = {
    "basin_fraction": Label("fraction of the ensemble ending in the outcome"),
    "winner_fraction": Label("fraction of the ensemble ending on the eigendirection"),
    "unstable_ends": Label("end states on an eigendirection that the closed form calls unstable"),
    "unstable_kept": Label("unstable end states still there after SADDLE_EFOLDS e-foldings of their eigenvalue"),
    "basin_map": Label("outcome from the first token's start (code 2p: consensus on e_p, 2p + 1: split, 2d: other)"),
    "pair_map": Label("outcome of the antipodal pair started at ±y (codes as basin_map)"),
    "pair_map_theory": Label("the antipodal pair's outcome by the sign of ⟨y, V y⟩"),
    "pure_index": Label("unstable eigenvalues of the pure-mode state (Jacobian)"),
    "pure_index_theory": Label("unstable eigenvalues of the pure-mode state (closed form)"),
    "pure_spectrum_error": Label("largest difference of the pure-mode spectrum from its closed form"),
    "pure_residual": Label("largest tangent velocity of the pure-mode state"),
    "mixed_q": Label("q of the mixed three-group rest point"),
    "mixed_velocity": Label("largest tangent velocity of the mixed rest point"),
    "mixed_index": Label("unstable eigenvalues of the mixed rest point"),
}
