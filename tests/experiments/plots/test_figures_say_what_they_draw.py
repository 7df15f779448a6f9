"""Figures a reader compares with the papers: panels laid out for their count, titles naming the member drawn,
integers as steps, colour bars in plain numbers, and the interactive pages agreeing with the figures (Γ_∞,δ,
the last time first, cluster sizes, one colour scale)."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import AxesImage

from attnflow.experiments import plots
from attnflow.experiments.plots import style


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith("$d =")]


@pytest.mark.parametrize(
    "count, shape", [(1, (1, 1)), (2, (1, 2)), (3, (1, 3)), (4, (2, 2)), (5, (2, 3)), (6, (2, 3)), (7, (3, 3))]
)
def test_panels_are_laid_out_for_their_count(count, shape):
    assert style.grid_shape(count, 3) == shape
    ts, betas = np.linspace(0, 30, 16), np.linspace(0.1, 9, 5)
    fraction = (ts[None, :] >= 5 + betas[:, None]).astype(float)
    dims = [2, 8, 32, 128, 512, 1024, 2048][:count]
    fig = plots.phase_diagram_grid(ts, betas, {d: fraction for d in dims})
    panels = _panels(fig)
    rows, cols = shape
    geometry = panels[0].get_subplotspec().get_geometry()[:2]
    assert geometry == (rows, cols)
    assert sum(not ax.get_visible() for ax in fig.axes) == rows * cols - count  # only the empty slots hidden
    for k, ax in enumerate(panels):
        below = k + cols < count
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_visible()]
        # every panel with none below it carries the time axis, its label and its tick labels
        assert (ax.get_xlabel() == plots.TIME_LABEL) == (not below), (count, k)
        assert ax.xaxis.get_tick_params()["labelbottom"] == (not below), (count, k)
        if not below:
            assert any(labels), (count, k)


def test_four_dimensions_fill_two_by_two_and_d2_keeps_its_time_axis():
    ts, betas = np.linspace(0, 30, 16), np.linspace(0.1, 9, 5)
    fraction = np.zeros((5, 16))
    fig = plots.phase_diagram_grid(ts, betas, {d: fraction for d in (2, 8, 32, 128)})
    panels = {ax.get_title(): ax for ax in _panels(fig)}
    assert len(fig.axes) == 5  # four panels and the colour bar: no hidden slot
    assert panels["$d = 2$"].get_subplotspec().rowspan.start == 0
    assert [ax.get_xlabel() for ax in panels.values()] == ["", "", plots.TIME_LABEL, plots.TIME_LABEL]
    assert [ax.get_ylabel() for ax in panels.values()] == [plots.BETA_LABEL, "", plots.BETA_LABEL, ""]


def test_a_trajectory_figure_names_its_seed():
    ts = np.linspace(0, 1, 5)
    angles = np.linspace(0, 2 * np.pi, 6, endpoint=False)
    xs = np.broadcast_to(np.stack([np.cos(angles), np.sin(angles)], -1), (5, 6, 2))
    fig = plots.circle_trajectories(ts, xs, beta=9.0, seed=0)
    assert fig.axes[0].get_title() == "Particles on the circle\n$n = 6$, $\\beta = 9$, seed 0"
    assert "seed" not in plots.circle_trajectories(ts, xs, beta=9.0).axes[0].get_title()
    x3 = np.broadcast_to(np.eye(3)[:2], (5, 2, 3))
    assert plots.sphere_trajectories(ts, x3, seed=7).axes[0].get_title().endswith("$n = 2$, seed 7")


def test_fig4_draws_seed_0_and_says_so(monkeypatch):
    """The README's Fig. 4 image is `attnflow run fig4-circle`'s trajectories of β = 9: its first seed, named."""
    from attnflow.experiments.builtin import fig4_circle

    seen = {}
    monkeypatch.setattr(plots, "circle_trajectories", lambda *args, **kw: seen.update(kw))

    class Result:
        config = type("Config", (), dict(d=[2], beta=[4.0, 9.0], seed=3, n=3))()
        ts = np.linspace(0, 1, 3)
        has_states = True
        stats = {"n_clusters": np.ones((1, 2, 1, 3))}

        def states(self, d):
            return np.ones((2, 1, 3, 3, 2))

    fig4_circle.figures(Result())["trajectories_beta9"](None)
    assert seen["seed"] == 3 and seen["beta"] == 9.0  # the first seed of the run, counted from its key seed


def test_morse_indices_are_drawn_as_steps_and_the_legend_covers_no_curve():
    from attnflow.experiments.studies.equilibria import equilibria_figures as ef

    betas = np.linspace(-3, 3, 7)
    index = np.array([[[0, 2], [0, 2], [0, 1], [1, 1], [1, 0], [2, 0], [2, 0]]], dtype=float)
    fig = ef.rest_point_indices(betas, [2], ["simplex", "pair"], index, thresholds=[-0.67], model="sa")
    ax = fig.axes[0]
    steps = [line for line in ax.get_lines() if str(line.get_gid()).startswith("steps ")]
    assert [line.get_drawstyle() for line in steps] == ["steps-mid", "steps-mid"]
    np.testing.assert_array_equal(steps[0].get_ydata(), [0, 0, 0, 1, 1, 2, 2])
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert box.y1 <= ax.get_window_extent().y0  # below the axes: over no curve


def test_the_continuation_and_extremizer_legends_lie_below_the_curves():
    from attnflow.experiments.studies.equilibria import equilibria_figures as ef

    grid = np.linspace(-2, 1, 7)
    path = dict(
        name="tetrahedron", n=4, d=3, beta=grid, eigen=np.stack([grid, grid / 2], 1), grid=grid,
        theory=np.stack([grid, grid / 2], 1), crossings=[0.0],
    )  # fmt: skip
    fig = ef.continuation_paths([path, path], model="usa")
    taus = np.array([-2.0, 0.5, 2.0, 8.0])
    energy, index = np.ones((4, 2)), np.zeros((4, 2))
    fig2 = ef.extremizer_sweep(taus, taus, energy, index, ["rectangle", "cross"], {}, path=None)
    for figure in (fig, fig2):
        figure.canvas.draw()
        (legend,) = figure.legends
        bottom = min(ax.get_window_extent().y0 for ax in figure.axes)
        assert legend.get_window_extent().y1 <= bottom
    assert [ax.get_legend() is None for ax in fig.axes] == [True, True]
    assert "continuation: eigenvalues along the branch" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_log_colour_bars_read_plain_numbers():
    assert style.plain_log_ticks(0.05, 20).tolist() == [0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20]
    assert style.plain_log_ticks(0.05, 5).tolist() == [0.05, 0.1, 0.2, 0.5, 1, 2, 5]
    assert style.plain_log_ticks(1e-5, 1).tolist() == [1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1]
    assert [style.plain_number(v) for v in (0.05, 4.0, 20.0, 1e-5, 1000.0)] == ["0.05", "4", "20", "0.00001", "1000"]
    assert style.density_limits(np.array([0.01, 1.0, 7.5])) == (0.05, 7.5)
    assert style.density_limits(np.array([0.8, 1.2])) == (0.5, 2.0)
    # the mean-field density on S²: 4πρ from 0.3 to 6 on a log scale, every label a plain number
    from attnflow.solvers import harmonics

    grid = harmonics.sphere_grid(12)
    rho = (1 + 0.9 * np.cos(grid.theta))[None, :, None] * np.ones((2, 1, grid.phi.size)) / (4 * np.pi)
    fig = plots.sphere_density_maps(grid.theta, grid.phi, [0.0, 1.0], rho)
    bar = fig.axes[-1]
    fig.canvas.draw()
    labels = [t.get_text() for t in bar.get_yticklabels() if t.get_text()]
    lo, hi = style.density_limits(4 * np.pi * rho)
    assert labels == [style.plain_number(t) for t in style.plain_log_ticks(lo, hi)]
    assert not [t.get_text() for t in bar.yaxis.get_minorticklabels() if t.get_text()]
    assert not any("times" in s or "^" in s for s in labels)
    # the histogram of inner products over time, logarithmic by default
    counts = np.array([[1.0, 10, 100, 1000]] * 3)
    fig = plots.histogram_over_time(np.arange(3.0), np.linspace(-1, 1, 5), counts)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[-1].get_yticklabels() if t.get_text()]
    assert labels == ["0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5"]


# --- interactive pages ----------------------------------------------------------------------------

go = pytest.importorskip("plotly.graph_objects")
from attnflow.experiments.plots import interactive  # noqa: E402  (after the skip: it draws with plotly)


def page(path: Path) -> dict:
    """The figure a page draws: its data, layout and frames, read back from the HTML."""
    html = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    at = re.search(r"Plotly\.newPlot\(\s*\"attnflow-view\",\s*", html).end()
    data, end = decoder.raw_decode(html, at)
    layout, _ = decoder.raw_decode(html, re.compile(r",\s*").match(html, end).end())
    found = re.search(r"Plotly\.addFrames\('attnflow-view',\s*", html)
    frames = decoder.raw_decode(html, found.end())[0] if found else []
    return {"data": data, "layout": layout, "frames": frames}


def values(entry) -> np.ndarray:
    if isinstance(entry, dict):
        arr = np.frombuffer(base64.b64decode(entry["bdata"]), dtype=np.dtype(entry["dtype"]))
        shape = entry.get("shape")
        return arr.reshape([int(s) for s in str(shape).split(",")]) if shape else arr
    return np.asarray(entry, dtype=float)


def test_the_particle_page_opens_at_the_last_time_with_clusters_sized(tmp_path):
    # 24 tokens on the circle: spread at t = 0; at t = 1 a cluster of 20, one of 3, and one alone
    angles0 = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    angles1 = np.array([0.0] * 20 + [2.0] * 3 + [4.0])
    xs = np.stack([np.stack([np.cos(a), np.sin(a)], -1) for a in (angles0, angles1)])[None]
    labels = np.stack([np.arange(24), np.array([0] * 20 + [20] * 3 + [23])])[None]
    interactive.particles_page([0.0, 1.0], xs, labels, ["seed 0"], title="t", path=tmp_path / "p.html")
    fig = page(tmp_path / "p.html")
    assert fig["layout"]["sliders"][0]["active"] == 1  # the last of the two frames
    assert fig["layout"]["title"]["text"].endswith("t = 1</span>")
    (trace,) = [t for t in fig["data"] if t.get("mode") == "markers"]
    np.testing.assert_allclose(values(trace["x"]), np.cos(angles1), atol=1e-6)  # the last frame's points
    base = interactive.MARKER_SIZE[2]
    sizes = values(trace["marker"]["size"])
    np.testing.assert_allclose(sizes[:20], 4 * base)  # √20 > 4: at most 4 times across
    np.testing.assert_allclose(sizes[20:23], np.sqrt(3) * base, rtol=1e-6)
    assert sizes[23] == base
    np.testing.assert_allclose(values(fig["frames"][0]["data"][0]["marker"]["size"]), base)  # all alone at t = 0
    assert interactive.cluster_sizes(labels[0]).tolist()[1] == [20] * 20 + [3] * 3 + [1]
    # ▶ plays every frame from the start
    play = fig["layout"]["updatemenus"][0]["buttons"][0]
    assert play["args"][0] == ["0", "1"] and play["args"][1]["fromcurrent"] is False


def test_the_phase_page_draws_gamma_as_the_figure_does(tmp_path):
    ts, betas = np.linspace(0, 30, 31), np.linspace(0.5, 6, 12)
    t_star = 5 + 0.3 * np.exp(0.6 * betas)
    t_star[-1] = np.inf
    fraction = (ts[None, :] >= t_star[:, None]).astype(float)
    interactive.phase_page(
        ts, betas, {2: fraction, 8: fraction}, title="t", gamma_curve=(t_star, betas), path=tmp_path / "ph.html"
    )
    fig = page(tmp_path / "ph.html")
    heatmaps = [t for t in fig["data"] if t["type"] == "heatmap"]
    lines = [t for t in fig["data"] if t["type"] == "scatter"]
    assert len(heatmaps) == 2 and len(lines) == 2  # the dark outline and the white dashed line
    (shown,) = [t for t in lines if t.get("showlegend")]
    assert shown["name"] == interactive.GAMMA_CURVE_NAME and shown["line"]["dash"] == "dash"
    x = values(shown["x"])
    np.testing.assert_allclose(x[:-1], t_star[:-1])
    assert x[-1] is None or np.isnan(x[-1])  # t* = ∞: a gap, as in the figure
    np.testing.assert_allclose(values(shown["y"]), betas)
    assert fig["layout"]["xaxis"]["range"] == [0.0, 30.0]
    # the menu picking d keeps Γ in view
    buttons = fig["layout"]["updatemenus"][0]["buttons"]
    assert [b["args"][0]["visible"] for b in buttons] == [[True, False, True, True], [False, True, True, True]]


def test_the_globe_takes_the_figure_scale(tmp_path):
    """The mean-field density on S², as meanfield-sphere's figure and its globe draw it: one log scale, equal limits."""
    from run_helpers import sphere_density_run

    from attnflow.experiments.builtin import meanfield_sphere
    from attnflow.experiments.results import views

    result, rho = sphere_density_run(12, 13)
    lo, hi = style.density_limits(4 * np.pi * rho)
    assert hi == pytest.approx(float(4 * np.pi * rho.max()))
    # the figure
    figure = meanfield_sphere.figures(result)["meanfield_sphere"](None)
    (image,) = {im.norm for ax in figure.axes for im in ax.get_children() if isinstance(im, AxesImage)}
    assert type(image).__name__ == "LogNorm" and (image.vmin, image.vmax) == pytest.approx((lo, hi))
    # the page
    views.views(result)["view_density_globe.html"](tmp_path / "globe.html")
    fig = page(tmp_path / "globe.html")
    surface = fig["data"][0]
    assert (10 ** surface["cmin"], 10 ** surface["cmax"]) == pytest.approx((lo, hi))
    ticks = style.plain_log_ticks(lo, hi)
    assert surface["colorbar"]["ticktext"] == [style.plain_number(t) for t in ticks]
    np.testing.assert_allclose(surface["colorbar"]["tickvals"], np.log10(ticks))
    assert surface["colorscale"][0][1] == "#000004"  # magma, the figure's colour map
    last = values(surface["customdata"])  # the page opens at the last time; hover reads 4πρ itself
    np.testing.assert_allclose(last[1:-1, :-1], 4 * np.pi * rho[-1], rtol=1e-6)
    np.testing.assert_allclose(values(surface["surfacecolor"]), np.log10(np.maximum(last, lo)), rtol=1e-5, atol=1e-6)
    assert fig["layout"]["sliders"][0]["active"] == len(result.ts) - 1
