"""What the arrays of a run mean: a long name, and units where there are any, for every variable and coordinate
attnflow writes, declared once.

``af.load`` puts them in each variable's ``attrs`` (``long_name``, ``units``), so that xarray's plots label
their axes ("time t [model time units]", "inverse temperature β"). Every name a built-in experiment, ``hist``
or ``fit`` writes is in :data:`LABELS` (a test runs each experiment and checks); a sweep's other axes are
configuration keys, named by their one line of documentation (``config.KEYS``). Time is measured in the
model's own units (the dynamics have no physical clock); β, inner products, energies and fractions have no
units.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Label", "LABELS", "TIME_UNITS", "RATE_UNITS", "label", "attrs"]

TIME_UNITS = "model time units"
RATE_UNITS = "1 / model time unit"


class Label(NamedTuple):
    """A variable's ``long_name`` and ``units`` (None: a pure number)."""

    long_name: str
    units: str | None = None


_T, _R = TIME_UNITS, RATE_UNITS

LABELS: dict[str, Label] = {
    # -- every particle run: coordinates, per member, the summary's series and per-run numbers
    "d": Label("dimension d"),
    "beta": Label("inverse temperature β"),
    "seed": Label("seed of the initial condition"),
    "time": Label("time t", _T),
    "member": Label("member (d, β, seed order)"),
    "run": Label("run of the sweep"),
    "run_name": Label("run directory"),
    "steps": Label("accepted steps"),
    "t_clustered": Label("first time every pair is within δ", _T),
    "wall_time_s": Label("wall time", "s"),
    "xs": Label("token x_i on the sphere"),
    # -- the statistics of plan.GROUPS, per member and save time
    "mean_inner_product": Label("mean ⟨x_i, x_j⟩ over pairs i ≠ j"),
    "min_inner_product": Label("min ⟨x_i, x_j⟩ over pairs"),
    "max_inner_product": Label("max ⟨x_i, x_j⟩ over pairs i ≠ j"),
    "clustered_fraction": Label("fraction of pairs with ⟨x_i, x_j⟩ ≥ 1 − δ"),
    "n_clusters": Label("clusters at threshold δ"),
    "cluster_level": Label("Σ_q m_q² / n² over the cluster sizes m_q"),
    "energy": Label("interaction energy E_β"),
    "normalized_energy": Label("normalized energy E_β"),
    "log_energy": Label("log-energy of the field's kernel"),
    "histogram": Label("pairs ⟨x_i, x_j⟩ per bin"),
    "spectral_gap": Label("spectral gap 1 − |λ₂(A)| of the attention"),
    "stationary_distribution": Label("stationary law π of the attention (πA = π)"),
    "attention_entropy": Label("mean row entropy of the attention"),
    "effective_tokens": Label("effective number of attended tokens e^H"),
    "attention_matrix": Label("attention matrix A(t)"),
    # -- mean field on the circle (meanfield-circle) and on S² (meanfield-sphere)
    "density": Label("density ρ on the circle"),
    "theta": Label("angle θ on the circle", "rad"),
    "mass": Label("mass ∫ρ"),
    "min_density": Label("min ρ / max ρ"),
    "growth_rate": Label("growth rate of the Fourier mode", _R),
    "mode": Label("Fourier mode k"),
    "w1": Label("Wasserstein distance W1"),
    "particles": Label("particles n"),
    "sphere_density": Label("density ρ on S²"),
    "colatitude": Label("colatitude θ", "rad"),
    "longitude": Label("longitude φ", "rad"),
    "sphere_growth_rate": Label("growth rate of the degree-ℓ harmonics", _R),
    "degree": Label("spherical-harmonic degree ℓ"),
    "sphere_distance": Label("H⁻² distance of the particles to the density"),
    "sphere_maxima": Label("maxima of ρ (0) and of the linear pattern (1)"),
    "sphere_particles": Label("particles sampled from the density, moved"),
    # -- long-context
    "gamma": Label("γ of β = γ log n"),
    "context": Label("context length n"),
    "curve_context": Label("context length n (closed form)"),
    "layer_cosine": Label("cosine between two outputs of the layer (exact)"),
    "layer_cosine_of_tokens": Label("cosine between two outputs of the layer (token arrays)"),
    "layer_limit": Label("n → ∞ limit of the cosine"),
    "layer_cosine_curve": Label("cosine between two outputs of the layer (closed form)"),
    # -- lost-in-the-middle
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
    # -- gaussian-closure
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
    # -- noisy-transition and bifurcation
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
    "rate_predicted": Label("linearized rate (eigenvalue)", _R),
    "rate_measured": Label("rate measured by the time-dependent solver", _R),
    # -- equilibria
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
    # -- selectivity
    "threshold": Label("selectivity threshold β*_n(q): weight 1/2 on the nearest key"),
    "regime": Label("β of the regime in units of the median threshold β̄"),
    "regime_beta": Label("inverse temperature β of the regime"),
    "ordered_weights": Label("attention weight of the key of each rank"),
    "output_length": Label("length |y| of the layer's output"),
    "output_along_query": Label("⟨y, q⟩ of the layer's output"),
    "output_angle": Label("angle(y, q) / angle(k*, q) of the layer's output"),
    "exponent_fit": Label("log median β*_n against log n: exponent, its standard error, intercept"),
    "prefactor": Label("median β*_n (c_d n)^(−2/(d−1)) and the n → ∞ law's, each with its standard error"),
    # -- moderate-interaction
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
    # -- hardmax-limit
    "limit_beta": Label("inverse temperature β of the attention flow"),
    "flow_time": Label("time t of the flow", _T),
    "fw_step": Label("Frank–Wolfe step k"),
    "trap_beta": Label("inverse temperature β of the trapping run"),
    "xy": Label("coordinate of the plane"),
    "limit_distance": Label("rms distance D(β) between the attention and hardmax flows at t"),
    "limit_distance_max": Label("largest token distance between the attention and hardmax flows at t"),
    "self_weight": Label("a vertex token's attention on itself"),
    "concentration_time": Label("concentration time t_c: self-weight below 2/3", _T),
    "concentration_predicted": Label("concentration time log β − log u*", _T),
    "path_residual": Label("residual of the hardmax flow along the closed-form straight paths"),
    "tokens": Label("initial tokens (vertices first)"),
    "cells": Label("dominance cell of each token (index of its vertex)"),
    "fw_gap": Label("Frank–Wolfe gap G_k"),
    "trap_time": Label("time a vertex token stays within δ of its vertex", _T),
    "trap_speed": Label("initial speed of the fastest vertex token", "1 / model time unit"),
    # -- attnflow hist and attnflow fit
    "layer": Label("layer ℓ"),
    "edges": Label("bin edges of ⟨x_i, x_j⟩"),
    "sim_layer": Label("layer ℓ (simulated)"),
    "sim_time": Label("simulated time t of the layer", _T),
    "sim_histogram": Label("pairs ⟨x_i, x_j⟩ per bin, simulated"),
    "tv": Label("total variation distance"),
    "transition": Label("layer transition ℓ → ℓ + 1"),
    "tau": Label("time per layer τ", _T),
    "M": Label("fitted QᵀK per head"),
    "V": Label("fitted V per head"),
    "layer_error": Label("relative error one layer ahead, fitted model"),
    "identity_error": Label("relative error one layer ahead, identity map"),
    "linear_error": Label("relative error one layer ahead, linear map"),
    "rollout_error": Label("relative error of the rollout"),
    "loss": Label("fitting loss"),
    "fitted_histogram": Label("pairs ⟨x_i, x_j⟩ per bin, fitted model"),
    # -- attnflow probe (``_normed``: the same statistic of the layer-normed tokens)
    "effective_rank": Label("effective rank of the centred tokens (Roy–Vetterli)"),
    "intrinsic_dimension": Label("intrinsic dimension (TwoNN)"),
    "intrinsic_dimension_error": Label("standard error of the TwoNN dimension"),
    "knn_overlap": Label("overlap of the k nearest neighbours with the previous layer"),
    "first_token_norm_ratio": Label("‖x_1‖ / median of the other tokens' norms"),
    "block": Label("block ℓ (layer ℓ − 1 → ℓ)"),
    "first_token_attention": Label("a head's mean attention to the first token"),
    "sink_rate": Label("fraction of heads with mean attention to the first token > ε"),
}
for _name in (
    "histogram",
    "mean_inner_product",
    "clustered_fraction",
    "n_clusters",
    "energy",
    "effective_rank",
    "intrinsic_dimension",
    "intrinsic_dimension_error",
    "knn_overlap",
):
    LABELS[f"{_name}_normed"] = Label(f"{LABELS[_name].long_name}, layer-normed tokens", LABELS[_name].units)


def label(name: str) -> Label | None:
    """The label of a variable or coordinate ``name``; None when attnflow declares none."""
    return LABELS.get(name)


def attrs(name: str) -> dict[str, str]:
    """``{"long_name": ..., "units": ...}`` for ``name`` (no units for a pure number; empty when undeclared)."""
    found = LABELS.get(name)
    if found is None:
        return {}
    return {"long_name": found.long_name} | ({"units": found.units} if found.units else {})
