"""The configuration keys that only noisy-transition and bifurcation reads, and the labels of the arrays it writes (``af.load``'s
``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import RATE_UNITS, Label

_R = RATE_UNITS

KEYS = (
    Key(
        "noise_ratios",
        "float_list",
        (0.8, 0.9, 1.0, 1.1, 1.2),
        "noisy-transition: the noise levels σ/σ_#(β, d) "
        "swept down and up (increasing; σ_# = 1/√K_#, the uniform state's linear threshold)",
        minimum=0.0,
        strict_min=True,
        experiment_key=True,
    ),
    Key(
        "burn_in",
        "float",
        0.5,
        "noisy-transition: the first fraction of each noise level left out of the time averages",
        minimum=0.0,
        maximum=0.95,
        experiment_key=True,
    ),
    Key(
        "meanfield_time",
        "float",
        100.0,
        "noisy-transition: duration of each noise level of the mean-field sweeps "
        "(d = 2), in units of τ_# = 2/((d−1)σ_#²); 0 = no mean field",
        minimum=0.0,
        experiment_key=True,
    ),
    Key(
        "branches",
        "int_list",
        (1, 2, 3),
        "bifurcation: the Fourier modes k whose branches of stationary densities are followed from the uniform one",
        minimum=1,
        experiment_key=True,
    ),
    Key(
        "sphere_dims",
        "int_list",
        (3, 4),
        "bifurcation: the dimensions d of the spheres S^{d−1} whose criticality switch β_*^{(d)} is located from "
        "their zonal stationary densities (with ``modes`` Gegenbauer degrees), beside the circle's",
        minimum=3,
        maximum=64,
        experiment_key=True,
    ),
    Key(
        "sphere_beta",
        "float",
        4.0,
        "bifurcation: the β, above every β_*^{(d)} of sphere_dims, at which the particles' noise sweeps run on those "
        "spheres, their hysteresis loop against the zonal branch's fold and the threshold K_#^{(d)}; 0 = no sweeps",
        minimum=0.0,
        experiment_key=True,
    ),
)

LABELS = {
    "order": Label("time-averaged order parameter r"),
    "order_sq": Label("time-averaged r²"),
    "meanfield_order": Label("time-averaged order parameter r, mean field (n = ∞)"),
    "branch_sigma": Label("noise σ along the branch"),
    "branch_amplitude": Label("amplitude of the stationary density along the branch"),
    "branch_stable": Label("stable (1) or unstable (0) along the branch"),
    "branch_point": Label("noise σ at the branch point"),
    "fold_sigma": Label("noise σ at the branch's first fold"),
    "fold_amplitude": Label("amplitude at the branch's first fold"),
    "pitchfork": Label("pitchfork coefficient dK/dc₁² (0), β where it vanishes (1)"),
    "beta_star": Label(
        "β_* of d = 2 and of sphere_dims: coefficient's sign change (0), closed form (1), folds extrapolated (2)"
    ),
    "sphere_order": Label("time-averaged order parameter r on the sphere S^{d−1} of sphere_dims at sphere_beta"),
    "sphere_order_sq": Label("time-averaged r² on the sphere S^{d−1} of sphere_dims at sphere_beta"),
    "sphere_branch_sigma": Label("noise σ along the sphere's degree-1 zonal branch at sphere_beta"),
    "sphere_branch_order": Label("order parameter m₁ along the sphere's degree-1 zonal branch at sphere_beta"),
    "sphere_branch_stable": Label("zonally stable (1) or unstable (0) along the sphere's degree-1 branch"),
    "sphere_fold": Label("the sphere's degree-1 branch's first fold: σ_fold/σ_# (0), m₁ there (1)"),
    "rate_predicted": Label("linearized rate (eigenvalue)", _R),
    "rate_measured": Label("rate measured by the time-dependent solver", _R),
}
