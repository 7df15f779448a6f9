"""The configuration keys that only selectivity reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import Label

KEYS = (
    Key(
        "queries",
        "int",
        256,
        "selectivity: uniform queries per dimension, each meeting every context length's keys",
        minimum=1,
        experiment_key=True,
    ),
)

LABELS = {
    "threshold": Label("selectivity threshold β*_n(q): weight 1/2 on the nearest key"),
    "regime": Label("β of the regime in units of the median threshold β̄"),
    "regime_beta": Label("inverse temperature β of the regime"),
    "ordered_weights": Label("attention weight of the key of each rank"),
    "output_length": Label("length |y| of the layer's output"),
    "output_along_query": Label("⟨y, q⟩ of the layer's output"),
    "output_angle": Label("angle(y, q) / angle(k*, q) of the layer's output"),
    "exponent_fit": Label("log median β*_n against log n: exponent, its standard error, intercept"),
    "prefactor": Label("median β*_n (c_d n)^(−2/(d−1)) and the n → ∞ law's, each with its standard error"),
}
