"""The configuration keys that only common-noise, quadratic-form and homogenized-flow read, and the labels of
the arrays they write (``af.load``'s ``long_name`` and ``units``), registered with the core's by ``experiments/studies/__init__.py``."""

from __future__ import annotations

from ...config.types import Key
from ...results.labels import Label

KEYS = (
    Key(
        "depth_dt",
        "float",
        0.01,
        "common-noise: 1/L, the time one random layer takes (t1/depth_dt layers in all)",
        minimum=0.0,
        strict_min=True,
        maximum=1.0,
        experiment_key=True,
    ),
    Key(
        "value_sigma",
        "float",
        1.0,
        "common-noise: σ of the value matrices V_ℓ = V̄ + σ G_ℓ/√d, G_ℓ standard normal, drawn per layer",
        minimum=0.0,
        experiment_key=True,
    ),
    Key(
        "value_mean",
        "float",
        0.0,
        "common-noise: V̄ = value_mean · I, the values' mean (0: centred; must be 0 with residual_exponent = 0.5)",
        experiment_key=True,
    ),
    Key(
        "residual_exponent",
        "float",
        0.5,
        "common-noise: α of the residual scaling L^(−α): 0.5 (the SDE limit) or 1 (the deterministic flow)",
        minimum=0.5,
        maximum=1.0,
        experiment_key=True,
    ),
    Key(
        "head_noise",
        "str",
        "shared",
        "common-noise: the heads of a layer share one G_ℓ (shared) or draw one each (per-head)",
        choices=("shared", "per-head"),
        experiment_key=True,
    ),
    Key(
        "same_noise",
        "bool",
        False,
        "common-noise: every member takes the noise of seed `seed` (same noise, different initial conditions)",
        experiment_key=True,
    ),
    Key(
        "quadratic_gamma",
        "float_list",
        [0.4, 0.28, 0.2, 0.14, 0.1],
        "quadratic-form: the strengths γ > 0 of the common vector noise γ P_x ∘ dw (γ = 0 always runs beside them)",
        minimum=0.0,
        strict_min=True,
        experiment_key=True,
    ),
    Key(
        "quadratic_r0",
        "float",
        -0.5,
        "quadratic-form: the pairs' initial overlap R₀ = ⟨x₁, x₂⟩",
        minimum=-1.0,
        maximum=1.0,
        strict_min=True,
        strict_max=True,
        experiment_key=True,
    ),
    Key(
        "quadratic_dt",
        "float",
        0.01,
        "quadratic-form: the Euler–Maruyama step (with retraction onto the sphere)",
        minimum=0.0,
        strict_min=True,
        maximum=0.1,
        experiment_key=True,
    ),
    Key(
        "homogenized_gamma0",
        "float",
        0.3,
        "homogenized-flow: the overlap γ₀ of the equiangular initial tokens",
        minimum=0.0,
        maximum=1.0,
        strict_max=True,
        experiment_key=True,
    ),
    Key(
        "homogenized_dt",
        "float",
        0.01,
        "homogenized-flow: the Euler–Maruyama step of the common-noise SDE (with retraction onto the sphere)",
        minimum=0.0,
        strict_min=True,
        maximum=0.1,
        experiment_key=True,
    ),
)

LABELS = {
    "final_min_inner_product": Label("min over pairs of ⟨x_i, x_j⟩ at t1"),
    "antipodal_fraction": Label("fraction of members with an antipodal pair at t1 (⟨x_i, x_j⟩ < −0.99)"),
    "antipodal_exponent": Label("Lyapunov exponent at the antipodal state (closed form)", "1/time"),
    "quadratic_overlap": Label("R = ⟨x₁, x₂⟩ of a pair under the random quadratic form"),
    "quadratic_self_overlap": Label("⟨x₁(0), x₁(t)⟩ of one token under the random quadratic form"),
    "homogenized_overlap": Label("mean over pairs of ⟨x_i, x_j⟩ (equiangular start, common-noise SDE)"),
    "homogenized_pair_overlap": Label("⟨x₁, x₂⟩ (equiangular start, common-noise SDE)"),
    "homogenized_deviation": Label("max over pairs of |⟨x_i, x_j⟩ − γ(t)|, γ the homogenized flow"),
    "quadratic_gamma": Label("γ, the strength of the common vector noise"),
}
