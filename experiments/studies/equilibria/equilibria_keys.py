"""The configuration keys that only equilibria reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import TIME_UNITS, Label

_T = TIME_UNITS

KEYS = (
    Key(
        "saddle_beta",
        "float",
        10.0,
        "equilibria: β of the n-token cluster saddles and energy staircase on the circle (USA, rescaled time)",
        minimum=0.0,
        strict_min=True,
        maximum=30.0,
        experiment_key=True,
    ),
    Key(
        "extremizer_tau",
        "float_list",
        (-2.0, 0.5, 2.0, 8.0),
        "equilibria: the τ ≠ 0 of D = diag(1, τ) for the "
        "four-token energy extremizers (arXiv 2501.03096); τ < 0 makes D indefinite",
        experiment_key=True,
    ),
)

LABELS = {
    "polytope_index": Label("index (unstable directions) of the regular configuration"),
    "polytope_zero_modes": Label("zero modes of the regular configuration"),
    "polytope_neutral": Label("neutral directions beyond the rotations"),
    "polytope_morse": Label("Morse index of the energy"),
    "closed_form_error": Label("spectrum's error against its closed form"),
    "path_beta": Label("inverse temperature β along the continuation"),
    "path_eigen": Label("eigenvalue of the tangent Jacobian along the continuation"),
    "path_branch_beta": Label("β of a branch point"),
    "path_branch_multiplicity": Label("eigenvalues crossing zero at the branch point"),
    "saddle_energy": Label("normalized energy of the cluster saddle"),
    "saddle_level": Label("Σ_q m_q² / n² of the saddle's clusters"),
    "saddle_index": Label("Morse index of the saddle"),
    "saddle_neutral": Label("neutral directions of the saddle"),
    "saddle_clusters": Label("clusters of the saddle"),
    "plateau_energy": Label("normalized energy of the staircase's plateau"),
    "plateau_saddle": Label("the plateau's saddle (index along partition)"),
    "staircase_energy": Label("normalized energy along the staircase"),
    "staircase_time": Label("time t", _T),
    "extremizer_energy": Label("energy of the four-token candidate"),
    "extremizer_index": Label("Morse index of the four-token candidate"),
    "extremizer_ratio": Label("side ratio of the rectangle extremizer"),
    "pair_energy": Label("energy of the two-token state"),
}
