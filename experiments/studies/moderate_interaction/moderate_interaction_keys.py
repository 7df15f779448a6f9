"""The configuration keys that only moderate-interaction reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import RATE_UNITS, TIME_UNITS, Label

_T, _R = TIME_UNITS, RATE_UNITS

KEYS = (
    Key(
        "token_counts",
        "int_list",
        (1000, 2000),
        "moderate-interaction: the numbers of tokens n, each run at β = c·n",
        minimum=8,
        experiment_key=True,
    ),
    Key(
        "interaction_c",
        "float_list",
        (0.01, 0.02),
        "moderate-interaction: the ratios c = β/n (and c·n ≤ 1e8, the largest β of the growth rates)",
        minimum=0.0,
        strict_min=True,
        maximum=1e4,
        experiment_key=True,
    ),
    Key(
        "collapse_eigenvalue",
        "float",
        0.0,
        "moderate-interaction: the last eigenvalue λ < 1 of V = diag(1, …, 1, λ) on S², "
        "which collapses the tokens onto a great circle at the rate 1 − λ",
        minimum=-10.0,
        maximum=0.9,
        experiment_key=True,
    ),
)

LABELS = {
    "save_time": Label("time t of the save", _T),
    "min_eigenvalue": Label("smallest eigenvalue of the second moment M = Σ x_i x_iᵀ / n"),
    "kinetic_energy": Label("mean squared angular velocity of the tokens", "1 / model time unit²"),
    "band_power": Label("power of the unstable band of Fourier modes"),
    "cluster_count": Label("clusters (gaps wider than 2/√β)"),
    "t_collapse": Label("collapse time: λ_min(M) reaches e⁻²/3", _T),
    "t_clusters": Label("formation time of the clusters: band power 1/2", _T),
    "t_linear": Label("formation time by the linear theory", _T),
    "band_growth_rate": Label("the unstable band's fitted growth rate", _R),
    "band_growth_error": Label("standard error of the band's fitted growth rate", _R),
    "band_growth_theory": Label("the band's growth rate by the linear theory", _R),
    "clusters": Label("clusters formed (most at any time)"),
    "t_first_merge": Label("time of the first merge of clusters", _T),
    "t_half": Label("time at which half the clusters have merged", _T),
    "usa": Label("model: USA (true) or SA (false)"),
    "token_count": Label("tokens n"),
    "c": Label("ratio c = β/n"),
    "save_index": Label("save index"),
}
