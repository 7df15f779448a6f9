"""The configuration keys that only long-context reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import Label

KEYS = (
    Key(
        "gamma",
        "float_list",
        (1.0, 2.0, 3.0),
        "long-context: β = γ log n for each γ listed",
        minimum=0.0,
        experiment_key=True,
    ),
    Key(
        "particle_max",
        "int",
        10_000,
        "long-context: the longest context also computed from token arrays (d = n + 1)",
        minimum=0,
        experiment_key=True,
    ),
    Key(
        "residual",
        "float",
        0.0,
        "long-context: weight α of the residual x_i added to the attention output",
        minimum=0.0,
        maximum=1e6,
        experiment_key=True,
    ),
)

LABELS = {
    "gamma": Label("γ of β = γ log n"),
    "context": Label("context length n"),
    "curve_context": Label("context length n (closed form)"),
    "layer_cosine": Label("cosine between two outputs of the layer (exact)"),
    "layer_cosine_of_tokens": Label("cosine between two outputs of the layer (token arrays)"),
    "layer_limit": Label("n → ∞ limit of the cosine"),
    "layer_cosine_curve": Label("cosine between two outputs of the layer (closed form)"),
}
