"""The configuration keys that only gaussian-closure reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import TIME_UNITS, Label

_T = TIME_UNITS

KEYS = (
    Key(
        "rank_dims",
        "int_list",
        (3, 4, 5),
        "gaussian-closure: dimensions d of the limit-rank histograms (Q of shape ⌊d/2⌋ × d, K = −Q)",
        minimum=2,
        experiment_key=True,
    ),
    Key(
        "rank_draws",
        "int",
        100,
        "gaussian-closure: random (Q, S0) draws per dimension and value matrix of the limit-rank histograms",
        minimum=1,
        experiment_key=True,
    ),
    Key(
        "replicas",
        "int",
        8,
        "gaussian-closure: independent Gaussian samples of the particles per n",
        minimum=1,
        experiment_key=True,
    ),
    Key(
        "collapse_time",
        "float",
        20.0,
        "gaussian-closure: horizon of the particles collapsing onto ker A, compared with the closure",
        minimum=0.0,
        strict_min=True,
        experiment_key=True,
    ),
)

LABELS = {
    "size": Label("particles n"),
    "collapse_time": Label("time t", _T),
    "rank_dim": Label("dimension d"),
    "closure_error": Label("relative error of the covariance, particles vs closure"),
    "closure_mean_error": Label("relative error of the mean, particles vs closure"),
    "collapse_particles": Label("covariance eigenvalue, particles"),
    "collapse_closure": Label("covariance eigenvalue, closure"),
    "rank_counts": Label("draws per limit rank d − rank Σ*"),
    "rank_failed": Label("draws whose solve failed"),
    "rank_bound": Label("bound d − rank A on the limit rank"),
    "identity_limit_error": Label("error of the V = I limit against its closed form"),
}
