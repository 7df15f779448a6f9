"""The configuration keys that only twisted-states reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import TIME_UNITS, Label

KEYS = (
    Key(
        "twist_q",
        "int_list",
        (1, 2, 3, 2),
        "twisted-states: the winding q of each ring θ_k = 2πqk/n (paired with twist_s)",
        experiment_key=True,
    ),
    Key(
        "twist_s",
        "int_list",
        (4, 3, 2, 2),
        "twisted-states: the resonance s of each ring, its plane's rotary frequency θ_p = 2πs/n (paired with twist_q)",
        experiment_key=True,
    ),
)

LABELS = {
    "ring": Label("twisted ring (index into twist_q, twist_s)"),
    "winding": Label("winding q of the ring θ_k = 2πqk/n"),
    "resonance": Label("resonance s of the plane's frequency θ = 2πs/n"),
    "ring_velocity": Label("largest tangent velocity at the rest point found"),
    "ring_spectrum_error": Label("tangent Jacobian's eigenvalues against the Bessel-aliasing closed form"),
    "ring_unstable": Label("unstable eigenvalues of the twisted state"),
    "ring_neutral": Label("neutral eigenvalues of the twisted state (symmetries not counted)"),
    "ring_eigen": Label("eigenvalue of the twisted state's tangent Jacobian"),
    "twist_path_beta": Label("inverse temperature β along the continuation"),
    "twist_path_velocity": Label("largest tangent velocity along the continuation"),
    "twist_path_error": Label("eigenvalues along the continuation against the closed form"),
    "hemisphere_margin": Label("min_i ⟨w, x_i(t)⟩ of tokens started in the closed hemisphere ⟨w, x⟩ ≥ 0"),
    "twist_min_inner": Label("min_{i≠j} ⟨x_i(t), x_j(t)⟩ of pairwise non-obtuse data"),
    "twist_min_inner_bound": Label("lower bound tanh(2at + artanh m₀) on min ⟨x_i, x_j⟩"),
    "twist_abscissa": Label("largest phase eigenvalue of the ring (rotation left out)"),
    "twist_time": Label("time t", TIME_UNITS),
}
