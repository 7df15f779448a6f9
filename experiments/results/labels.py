"""What the arrays of a run mean: a long name, and units where there are any, for every variable and coordinate
attnflow writes, declared once.

The core's are here; each study declares its own beside its keys (``experiments/studies/NAME/NAME_keys.py``).
``af.load`` puts them in each variable's ``attrs`` (``long_name``, ``units``), so that xarray's plots label
their axes ("time t [model time units]", "inverse temperature β"). Every name a built-in experiment, ``hist``
or ``fit`` writes has a label (:func:`every_label`) (a test runs each experiment and checks); a sweep's other axes are
configuration keys, named by their one line of documentation (``config.KEYS``). Time is measured in the
model's own units (the dynamics have no physical clock); β, inner products, energies and fractions have no
units.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

__all__ = ["Label", "LABELS", "TIME_UNITS", "RATE_UNITS", "every_label", "label", "attrs"]

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


@functools.cache
def every_label() -> dict[str, Label]:
    """The core's labels (:data:`LABELS`) and every study's (``studies.declared_labels``), which never relabel a
    core name."""
    from .. import studies

    theirs = studies.declared_labels()
    clash = sorted(name for name in theirs.keys() & LABELS.keys() if theirs[name] != LABELS[name])
    if clash:
        raise ImportError(f"studies relabel core names: {', '.join(clash)}")
    return LABELS | theirs


def label(name: str) -> Label | None:
    """The label of a variable or coordinate ``name``; None when attnflow declares none."""
    return every_label().get(name)


def attrs(name: str) -> dict[str, str]:
    """``{"long_name": ..., "units": ...}`` for ``name`` (no units for a pure number; empty when undeclared)."""
    found = label(name)
    if found is None:
        return {}
    return {"long_name": found.long_name} | ({"units": found.units} if found.units else {})
