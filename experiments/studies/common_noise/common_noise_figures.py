"""The (β, d) diagram of antipodal pairs under common noise, with the closed-form threshold cosh 2β = d − 2."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from ...plots.style import BETA_LABEL, THEORY_COLOR, centers_to_edges, despine, finish, new_figure, title_text


def antipodal_diagram(
    betas, dims, fraction, *, threshold_curve, n: int, members: int, t1: float, title=None, path=None
) -> Figure:
    """The fraction of members with an antipodal pair at t1 over (β, d), ``fraction`` of shape (len(dims),
    len(betas)), with the curve ``threshold_curve`` = (d grid, β*(d)) where antipodal pairs start to attract."""
    betas, dims = np.asarray(betas, dtype=float), np.asarray(dims, dtype=float)
    fraction = np.asarray(fraction, dtype=float)
    if fraction.shape != (dims.size, betas.size):
        raise ValueError(f"fraction must have shape (len(dims), len(betas)) = {(dims.size, betas.size)}")
    fig = new_figure(6.4, 4.6)
    ax = fig.subplots()
    if betas.size > 1 and dims.size > 1:
        mesh = ax.pcolormesh(
            centers_to_edges(betas), centers_to_edges(dims), fraction, cmap="viridis", vmin=0.0, vmax=1.0
        )
    else:
        bb, dd = np.meshgrid(betas, dims)
        mesh = ax.scatter(bb.ravel(), dd.ravel(), c=fraction.ravel(), cmap="viridis", vmin=0.0, vmax=1.0, s=120)
    fig.colorbar(mesh, ax=ax, label="antipodal fraction at t1")
    grid, curve = threshold_curve
    ax.plot(curve, grid, color=THEORY_COLOR, lw=2, label="cosh 2β = d − 2 (λ_antipodal = 0)")
    ax.set_xlim(betas.min() - 0.1, betas.max() + 0.1)
    ax.set_ylim(dims.min() - 0.5, dims.max() + 0.5)
    ax.set_xlabel(BETA_LABEL)
    ax.set_ylabel("d")
    ax.legend(loc="upper left")
    despine(ax)
    ax.set_title(title_text("antipodal pairs under common noise", title, n=n, members=members, t1=t1))
    return finish(fig, path)
