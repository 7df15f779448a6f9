"""Interactive views (``attnflow plot DIR --interactive``): which pages a run gets from what it holds, that each
page is self-contained and holds the run's own numbers (every save time a frame, the particles where the run
saved them, the clusters at its δ, the density, the clustered fraction), and that it renders in a real
headless browser, without a JavaScript error, where one is installed (skipped where none is)."""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import SMALL, cli, tree
from run_helpers import sphere_density_run

from attnflow.experiments import plots
from attnflow.experiments.results import store, views
from attnflow.experiments.results.runs import load_result
from attnflow.experiments.run.runner import RunResult
from attnflow.particles import equiangular_ode as eq
from attnflow.particles import observables

pytest.importorskip("plotly")

from attnflow.experiments.plots import interactive  # noqa: E402  (after the skip: it draws with plotly)

N, T = 6, 5  # SMALL's particles and save times


def _small(path: Path, *sets: str) -> Path:
    cfg = path.parent / f"{path.name}.toml"
    cfg.write_text(SMALL, encoding="utf-8")
    rc, _, err = cli(["run", cfg, *(a for s in sets for a in ("--set", s)), "--no-plot", "--quiet", "--out", path])
    assert rc == 0, err
    return path


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory):
    """SMALL on S² (2 β × 2 seeds, states kept), on the circle with 3 β, and without states."""
    root = tmp_path_factory.mktemp("views")
    return {
        "sphere": _small(root / "sphere"),
        "circle": _small(root / "circle", "d=2", "beta=[1.0, 2.0, 4.0]"),
        "nostates": _small(root / "nostates", "save_states=no", "beta=1.0"),
    }


def page(path: Path) -> dict:
    """The figure a page draws: its data, layout and frames, read back from the HTML."""
    html = path.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    at = re.search(r"Plotly\.newPlot\(\s*\"attnflow-view\",\s*", html).end()
    data, end = decoder.raw_decode(html, at)
    layout, _ = decoder.raw_decode(html, re.compile(r",\s*").match(html, end).end())
    frames = []
    found = re.search(r"Plotly\.addFrames\('attnflow-view',\s*", html)
    if found:
        frames, _ = decoder.raw_decode(html, found.end())
    return {"html": html, "data": data, "layout": layout, "frames": frames}


def values(entry) -> np.ndarray:
    """An array as plotly writes it: a list, or base64 of a typed array ({"dtype", "bdata", "shape"})."""
    if isinstance(entry, dict):
        arr = np.frombuffer(base64.b64decode(entry["bdata"]), dtype=np.dtype(entry["dtype"]))
        shape = entry.get("shape")
        return arr.reshape([int(s) for s in str(shape).split(",")]) if shape else arr
    return np.asarray(entry, dtype=float)


@pytest.mark.slow
def test_a_run_gets_the_views_its_results_hold(small_runs):
    sphere, _ = load_result(small_runs["sphere"])
    circle, _ = load_result(small_runs["circle"])
    assert set(views.views(sphere)) == {"view_particles_d3.html"}  # two β: no phase diagram
    assert views.missing(sphere) == []
    assert set(views.views(circle)) == {"view_particles_d2.html", "view_phase_diagram.html"}
    bare = dataclasses.replace(sphere, xs=None)
    assert views.views(bare) == {}
    assert views.missing(bare) == [
        "no particle view: the run kept no states (save_states = 'auto'; a particle run keeps them with --set save_states=yes)"
    ]


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_particle_page_is_self_contained_and_holds_every_save_time(small_runs, tmp_path):
    run = tmp_path / "sphere"
    shutil.copytree(small_runs["sphere"], run)
    rc, out, err = cli(["plot", run, "--interactive"])
    assert rc == 0, err
    assert out.splitlines() == [str(run / "view_particles_d3.html")]
    assert "view_particles_d3.html" in store.owned_files(run)  # attnflow's file, replaced by the next plot
    fig = page(run / "view_particles_d3.html")
    # offline: plotly.js is in the page, no script is fetched
    assert not re.search(r"<script[^>]*\bsrc\s*=", fig["html"], re.I)
    assert len(fig["html"]) > 3_000_000 and "cdn.plot.ly/plotly" not in fig["html"][:2000]
    result, _ = load_result(run)
    xs = result.states(3)  # (β, seeds, T, n, 3)
    members = [(b, s) for b in range(2) for s in range(2)]
    # one frame per save time, in order, the slider reading their times
    assert [f["name"] for f in fig["frames"]] == [str(i) for i in range(T)]
    slider = fig["layout"]["sliders"][0]["steps"]
    assert [step["label"] for step in slider] == [interactive.time_label(t) for t in result.ts]
    # the clusters at the run's δ at every save time, of every member
    colors = [
        interactive.cluster_colors(observables.clusters(xs[b, s], result.config.delta).labels) for b, s in members
    ]
    for i, frame in enumerate(fig["frames"]):
        assert frame["layout"]["title"]["text"].endswith(f"t = {interactive.time_label(result.ts[i])}</span>")
        assert len(frame["data"]) == len(members)  # every member, the menu shows one
        for m, (trace, (b, s)) in enumerate(zip(frame["data"], members)):
            got = np.stack([values(trace[c]) for c in "xyz"], axis=-1)
            np.testing.assert_array_equal(got, xs[b, s, i].astype(np.float32))
            np.testing.assert_array_equal(values(trace["marker"]["color"]), colors[m][i])
    assert all(c[0].tolist() == [-1] * N for c in colors)  # from a uniform start every particle is alone
    assert fig["layout"]["scene"]["camera"]["eye"] == pytest.approx(interactive.facing(xs[0, 0, -1]))
    menu = fig["layout"]["updatemenus"][-1]["buttons"]
    assert [m["label"].split(" · ")[0] for m in menu] == [
        "β = 1, seed 0",
        "β = 1, seed 1",
        "β = 3, seed 0",
        "β = 3, seed 1",
    ]


def test_cluster_colours_follow_the_clusters_as_they_form_and_merge():
    labels = np.array(
        [
            [0, 1, 2, 3, 4],  # every particle alone
            [0, 0, 2, 3, 3],  # two clusters form, the larger first
            [0, 0, 0, 3, 3],  # particle 2 joins cluster 0, which keeps its colour
            [0, 0, 0, 0, 0],  # cluster 3 merges into cluster 0
        ]
    )
    np.testing.assert_array_equal(
        interactive.cluster_colors(labels),
        [[-1, -1, -1, -1, -1], [0, 0, -1, 1, 1], [0, 0, 0, 1, 1], [0, 0, 0, 0, 0]],
    )


@pytest.mark.slow
def test_long_runs_are_thinned_to_frames_the_page_names(small_runs, tmp_path):
    assert interactive.frame_indices(100, 10).tolist() == list(range(100))
    picked = interactive.frame_indices(1000, 10)
    assert len(picked) == interactive.MAX_FRAMES and picked[0] == 0 and picked[-1] == 999
    assert np.all(np.diff(picked) > 0)
    big = interactive.frame_indices(1000, interactive.FRAME_NUMBERS // 50)
    assert len(big) == 50 and picked[-1] == 999
    result, _ = load_result(small_runs["sphere"])
    long = dataclasses.replace(result, ts=np.linspace(0, 2, 400), xs=np.repeat(result.xs, 80, axis=3))
    path = tmp_path / "long.html"
    views.views(long)["view_particles_d3.html"](path)
    fig = page(path)
    assert len(fig["frames"]) == interactive.MAX_FRAMES
    assert f"save times shown: {interactive.MAX_FRAMES} of 400" in fig["layout"]["annotations"][0]["text"]
    labelled = [step["label"] for step in fig["layout"]["sliders"][0]["steps"] if step["label"]]
    assert len(labelled) <= interactive.SLIDER_LABELS and labelled[0] == "0" and labelled[-1] == "2"


def test_a_sphere_is_seen_from_where_its_particles_gather():
    gathered = np.array([[0.0, 1.0, 0.0], [0.1, 0.99, 0.0], [-0.1, 0.99, 0.0]])
    eye = interactive.facing(gathered / np.linalg.norm(gathered, axis=1, keepdims=True))
    r = np.hypot(np.hypot(eye["x"], eye["y"]), eye["z"])
    assert r == pytest.approx(interactive.CAMERA_DISTANCE)
    # above the cluster's azimuth (90°), raised 20° over its latitude (0°)
    assert np.degrees(np.arctan2(eye["y"], eye["x"])) == pytest.approx(90.0)
    assert np.degrees(np.arcsin(eye["z"] / r)) == pytest.approx(20.0)
    # particles spread evenly (mean near 0): the default camera
    spread = np.array([[1.0, 0, 0], [-1.0, 0, 0], [0, 1.0, 0], [0, -1.0, 0]])
    assert interactive.facing(spread) == interactive.CAMERA


def _sphere_density_run() -> tuple[RunResult, np.ndarray]:
    """A meanfield-sphere result holding a density that gathers around the north pole."""
    return sphere_density_run(20, 4)


def test_the_globe_holds_the_density_at_every_save_time(tmp_path):
    result, rho = _sphere_density_run()
    assert set(views.views(result)) == {"view_density_globe.html"}
    views.views(result)["view_density_globe.html"](tmp_path / "globe.html")
    fig = page(tmp_path / "globe.html")
    assert len(fig["frames"]) == len(result.ts)
    lo, hi = plots.style.density_limits(4 * np.pi * rho)
    for i, frame in enumerate(fig["frames"]):
        value = values(frame["data"][0]["customdata"])
        # the grid, its seam closed at longitude 2π, and a row at each pole (4πρ: 1 is uniform)
        assert value.shape == (rho.shape[1] + 2, rho.shape[2] + 1)
        np.testing.assert_allclose(value[1:-1, :-1], 4 * np.pi * rho[i], rtol=1e-6)
        np.testing.assert_allclose(value[1:-1, -1], 4 * np.pi * rho[i, :, 0], rtol=1e-6)
        # coloured on the figure's logarithmic scale
        color = values(frame["data"][0]["surfacecolor"])
        np.testing.assert_allclose(color, np.log10(np.maximum(value, lo)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values(fig["frames"][0]["data"][0]["customdata"]), 1.0, rtol=1e-6)  # uniform at t = 0
    surface = fig["data"][0]
    assert (surface["cmin"], surface["cmax"]) == pytest.approx((np.log10(lo), np.log10(hi)), rel=1e-6)
    assert hi == pytest.approx(float(4 * np.pi * rho.max()), rel=1e-6)
    x, y, z = (values(surface[c]) for c in "xyz")
    np.testing.assert_allclose(x**2 + y**2 + z**2, 1.0, atol=1e-12)  # on the unit sphere


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_phase_diagram_holds_the_clustered_fraction(small_runs, tmp_path):
    result, _ = load_result(small_runs["circle"])
    views.views(result)["view_phase_diagram.html"](tmp_path / "phase.html")
    fig = page(tmp_path / "phase.html")
    heatmap, outline, curve = fig["data"]  # the fraction and Γ_∞,δ (an outline under a dashed line)
    t_star = eq.gamma_curve(np.array([1.0, 2.0, 4.0]), result.config.n, result.config.delta)
    finite = np.isfinite(t_star)
    np.testing.assert_allclose(values(curve["x"])[finite], np.asarray(t_star)[finite], rtol=1e-6)
    np.testing.assert_allclose(values(heatmap["x"]), result.ts)
    np.testing.assert_allclose(values(heatmap["y"]), [1.0, 2.0, 4.0])
    expected = result.stats["clustered_fraction"][0].mean(axis=1)  # (β, T), the mean over seeds
    np.testing.assert_allclose(values(heatmap["z"]).reshape(expected.shape), expected, rtol=1e-6)
    assert "clustered fraction = %{z:.3f}" in heatmap["hovertemplate"]


def test_a_run_without_states_says_so_and_writes_nothing(small_runs, tmp_path):
    run = tmp_path / "nostates"
    shutil.copytree(small_runs["nostates"], run)
    before = tree(run)
    rc, out, err = cli(["plot", run, "--interactive"])
    assert rc == 0 and out == ""
    assert err.splitlines() == [
        "no particle view: the run kept no states (save_states = 'no'; a particle run keeps them with --set save_states=yes)",
        "no interactive views to draw",
    ]
    assert tree(run) == before


def test_without_plotly_the_views_are_refused_in_one_line(small_runs, tmp_path, monkeypatch):
    run = tmp_path / "sphere"
    shutil.copytree(small_runs["sphere"], run)
    before = tree(run)
    for name in [m for m in sys.modules if m == "plotly" or m.startswith("plotly.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly raises ImportError
    rc, out, err = cli(["plot", run, "--interactive"])
    assert rc == 2 and out == ""
    assert err.splitlines() == [
        'attnflow: error: interactive views need plotly, an optional dependency: pip install -e ".[views]" '
        "(or pip install plotly)"
    ]
    assert tree(run) == before


# -- in a real browser ----------------------------------------------------------------------------------

BROWSER = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))), None
)


def _browser(url: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--use-angle=swiftshader",  # WebGL (the 3-D scenes) without a GPU
            "--enable-unsafe-swiftshader",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1100,700",
            "--virtual-time-budget=5000",
            *flags,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
@pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) installed")
@pytest.mark.parametrize("view", ["particles_d3", "particles_d2", "phase_diagram", "density_globe"])
def test_the_page_renders_in_a_headless_browser(small_runs, tmp_path, view):
    if view == "density_globe":
        result, _ = _sphere_density_run()
    else:
        result, _ = load_result(small_runs["sphere" if view == "particles_d3" else "circle"])
    path, shot = tmp_path / f"view_{view}.html", tmp_path / f"{view}.png"
    views.views(result)[path.name](path)
    loaded = _browser(path.as_uri(), "--dump-dom", f"--screenshot={shot}")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    errors = [line for line in loaded.stderr.splitlines() if ":CONSOLE" in line and re.search("Uncaught|Error", line)]
    assert not errors, errors
    dom = loaded.stdout
    # plotly drew the figure: the div became a plot with its SVG layers (and a WebGL canvas for a 3-D scene)
    assert re.search(r'id="attnflow-view"[^>]*class="[^"]*js-plotly-plot', dom)
    assert dom.count('class="main-svg"') >= 2
    assert ("<canvas" in dom) == (view in ("particles_d3", "density_globe"))
    assert 'class="slider-container"' in dom or view == "phase_diagram"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (700, 1100)
    # not a blank page: the colours of the figure (a sphere, a circle of markers, a heatmap) are there
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1])[:, :3].round(2), axis=0)) > 50
