"""A run's interactive views (``attnflow plot DIR --interactive``): which pages its results allow, drawn as
attnflow's files.

A run gets a view for what it holds, asked of its ``RunResult``: the particles on the circle or the sphere
for every d = 2 or 3 whose states it kept (``view_particles_d3.html``), the mean-field density on S² as a
globe where it saved one (``view_density_globe.html``), and the phase diagram where it has the clustered
fraction over a grid of three or more β (``view_phase_diagram.html``, with Γ_∞,δ as the figure has it). The
particle views open at the last save time, a cluster's marker sized by its tokens; the globe takes the
figure's logarithmic scale and its limits (``style.density_limits``). :func:`missing` says, one line each,
why a run has none of a kind. The pages are drawn by ``plots/interactive.py`` and written by
``figures.write``, atomically and recorded in ``.attnflow.json`` like every figure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...particles import equiangular_ode, observables
from ...solvers import harmonics
from ..plots import interactive, style
from ..run.runner import RunResult
from . import figures

__all__ = ["views", "missing", "write", "PHASE_MIN_BETAS", "MAX_MEMBERS"]

PHASE_MIN_BETAS = 3
"""A run gets the phase-diagram view from this many values of β."""
MAX_MEMBERS = 12
"""The particle view shows at most this many members (the first seeds of each β, then the next β)."""


def _members(result: RunResult) -> list[tuple[int, int]]:
    """(β index, seed index) of the members shown: every seed of each β in turn, at most ``MAX_MEMBERS``;
    when the β grid alone is longer, the first seed of each of the first ``MAX_MEMBERS`` β."""
    n_beta, seeds = result.member_shape[1], result.member_shape[2]
    if n_beta * seeds <= MAX_MEMBERS:
        return [(b, s) for b in range(n_beta) for s in range(seeds)]
    if n_beta >= MAX_MEMBERS:
        return [(b, 0) for b in range(MAX_MEMBERS)]
    per_beta = MAX_MEMBERS // n_beta
    return [(b, s) for b in range(n_beta) for s in range(per_beta)]


def _shown(what: str, shown: int, total: int) -> str:
    return "" if shown == total else f"{what}: {shown} of {total}"


def _particles(result: RunResult, d: int):
    c = result.config
    xs = result.states(d)  # (β, seeds, T, n, d)
    members = _members(result)
    # per frame: the coordinates, a colour and a marker size per particle
    frames = interactive.frame_indices(len(result.ts), len(members) * c.n * (d + 2))
    chosen = np.stack([xs[b, s][frames] for b, s in members])  # (members, frames, n, d)
    # the clusters at the run's δ at every frame: a particle alone is grey, a cluster coloured as it forms
    labels = np.asarray(observables.clusters(np.asarray(chosen, dtype=np.float64), c.delta).labels)
    betas, seeds = np.asarray(c.beta, dtype=float), c.seed + np.arange(c.seeds)
    names = [f"β = {betas[b]:g}, seed {seeds[s]}" for b, s in members]
    where = "S²" if d == 3 else "the circle"
    title = f"{c.n} particles on {where} · {c.model.upper()}"
    if len(members) == 1:
        title += f", {names[0]}"
    parts = [
        f"colour: clusters, pairs with ⟨xᵢ, xⱼ⟩ ≥ 1 − δ (δ = {c.delta:g}); grey: a particle alone; "
        f"marker area: the cluster's tokens (up to {int(interactive.MAX_SIZE_RATIO**2)})",
        _shown("save times shown", len(frames), len(result.ts)),
        _shown("members shown", len(members), int(np.prod(result.member_shape[1:]))),
    ]
    note = " · ".join(p for p in parts if p)

    def draw(path):
        interactive.particles_page(result.ts[frames], chosen, labels, names, title=title, note=note, path=path)

    return draw


def _globe(result: RunResult):
    c = result.config
    density = result.stats["sphere_density"][0, 0, 0]  # (T, n_θ, n_φ), the first member
    theta, phi = _sphere_grid(result, density.shape[-2:])
    # the figure's scale: logarithmic, the limits of the member's density at every save time
    limits = style.density_limits(4 * np.pi * density)
    # per frame: the colours and the values on hover
    frames = interactive.frame_indices(len(result.ts), 2 * density[0].size)
    # thin the grid too where the frames would still be too many numbers
    stride = max(1, int(np.ceil(np.sqrt(2 * len(frames) * density[0].size / interactive.FRAME_NUMBERS))))
    values = 4 * np.pi * density[frames][:, :, ::stride]
    members = int(np.prod(result.member_shape[1:]))
    title = f"Mean-field density on S² · {c.model.upper()}, β = {float(c.beta[0]):g}"
    parts = [
        "4πρ: 1 is the uniform density",
        _shown("save times shown", len(frames), len(result.ts)),
        f"every {stride} longitude" if stride > 1 else "",
        f"the first of {members} members" if members > 1 else "",
    ]

    def draw(path):
        interactive.globe_page(
            result.ts[frames],
            theta,
            phi[::stride],
            values,
            title=title,
            note=" · ".join(p for p in parts if p),
            colorbar="4πρ",
            limits=limits,
            log=True,
            path=path,
        )

    return draw


def _sphere_grid(result: RunResult, shape) -> tuple[np.ndarray, np.ndarray]:
    """The colatitudes and longitudes of a saved density: the run's own coordinates when it stored them,
    else the solver's grid of its degree."""
    theta, phi = result.extra.get("colatitude"), result.extra.get("longitude")
    if theta is None or phi is None:
        grid = harmonics.sphere_grid(int(result.config.degree))
        theta, phi = grid.theta, grid.phi
    else:
        theta, phi = theta[0], phi[0]
    theta, phi = np.asarray(theta, dtype=float), np.asarray(phi, dtype=float)
    if (theta.size, phi.size) != tuple(shape):
        raise ValueError(f"the density's grid {tuple(shape)} is not the colatitudes × longitudes of the run")
    return theta, phi


def _phase(result: RunResult):
    c = result.config
    fraction = np.nanmean(result.stats["clustered_fraction"], axis=2)  # (d, β, T), mean over seeds
    by_d = {int(d): fraction[i] for i, d in enumerate(c.d)}
    title = f"Clustered fraction · {c.model.upper()}, n = {c.n}, δ = {c.delta:g}"
    note = f"fraction of pairs with ⟨xᵢ, xⱼ⟩ ≥ 1 − δ, mean over {c.seeds} seed{'s' if c.seeds > 1 else ''}"
    betas = np.asarray(c.beta, dtype=float)
    # Γ_∞,δ as the figure draws it, for the kernels whose equiangular ODE attnflow solves, over the grid's β ≥ 0
    # (the theorem's range; a run with negative β, as negative-beta, draws it over its positive part)
    curve = None
    positive = betas[betas >= 0]
    if c.model in equiangular_ode.MODELS and positive.size >= 2:
        curve = (np.asarray(equiangular_ode.gamma_curve(positive, c.n, c.delta, model=c.model)), positive)

    def draw(path):
        interactive.phase_page(
            result.ts,
            betas,
            by_d,
            title=title,
            note=note,
            log_time=c.save_spacing == "log",
            gamma_curve=curve,
            path=path,
        )

    return draw


def _kept_dims(result: RunResult) -> list[int]:
    return [int(d) for d in result.config.d if d in (2, 3)] if result.has_states else []


def views(result: RunResult) -> dict:
    """The interactive views of a run (file name → function drawing the page into a path), from what it holds."""
    out = {f"view_particles_d{d}.html": _particles(result, d) for d in _kept_dims(result)}
    if "sphere_density" in result.stats:
        out["view_density_globe.html"] = _globe(result)
    if "clustered_fraction" in result.stats and len(result.config.beta) >= PHASE_MIN_BETAS and len(result.ts) > 1:
        out["view_phase_diagram.html"] = _phase(result)
    return out


def missing(result: RunResult) -> list[str]:
    """Why the run has no particle view, one line each (empty when it has one)."""
    c = result.config
    if not result.has_states:
        return [
            f"no particle view: the run kept no states (save_states = {c.save_states!r}; "
            "a particle run keeps them with --set save_states=yes)"
        ]
    if not _kept_dims(result):
        return [f"no particle view: it draws d = 2 or 3, and this run has d = {list(c.d)}"]
    return []


def write(run_dir: Path, result: RunResult, kinds=None) -> list[Path]:
    """Draw the views of ``result`` (``kinds``: those named, all when None) into its directory ``run_dir``."""
    drawers = figures.select(views(result), kinds)
    if drawers:
        interactive.require_plotly()  # before anything is written
    return figures.write(Path(run_dir), drawers)
