"""The configuration keys that only lost-in-the-middle reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import TIME_UNITS, Label

_T = TIME_UNITS

KEYS = (
    Key(
        "decay_rate",
        "float",
        1.0,
        "lost-in-the-middle: λ of the position weights e^{−(λ/n)(i − j)} (positional = 'decay' with alibi_slope = λ/n)",
        minimum=0.0,
        experiment_key=True,
    ),
    Key(
        "classes",
        "float",
        8.0,
        "lost-in-the-middle: M classes read off the circle (soft accuracy weights ω_k = e^{−π²k²/(2M²)})",
        minimum=0.0,
        strict_min=True,
        experiment_key=True,
    ),
    Key(
        "profile_runs",
        "int",
        16384,
        "lost-in-the-middle: independent runs from uniform starts behind the particle estimate of the profile",
        minimum=2,
        experiment_key=True,
    ),
    Key(
        "profile_times",
        "float_list",
        (0.5, 1.0),
        "lost-in-the-middle: times of the particle estimates of the soft-accuracy profile",
        minimum=0.0,
        strict_min=True,
        experiment_key=True,
    ),
)

LABELS = {
    "profile_fraction": Label("time as a fraction of t_crit"),
    "position": Label("source position s / n"),
    "curve_beta": Label("inverse temperature β"),
    "profile_time": Label("time t", _T),
    "source": Label("source position (bin centre)"),
    "reference_time": Label("time t", _T),
    "token": Label("token position i"),
    "profile_curve": Label("soft accuracy S_t(s), closed form"),
    "profile_at_times": Label("soft accuracy S_t(s), closed form"),
    "profile_minimum": Label("position of the profile's minimum, s / n"),
    "critical_curve": Label("t_crit", _T),
    "soft_accuracy": Label("soft accuracy S_t(s), particles"),
    "soft_accuracy_error": Label("standard error of the soft accuracy"),
    "soft_accuracy_theory": Label("soft accuracy S_t(s), closed form"),
    "soft_accuracy_linear": Label("soft accuracy S_t(s), finite-n linear response"),
    "reference_angles": Label("angle θ_i of the reference run", "rad"),
}
