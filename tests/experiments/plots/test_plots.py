"""Plots: the right data lands in the right artists, images are not blank, bad input is named."""

import ast
import importlib
import inspect
import pkgutil
import threading

import matplotlib as mpl
import numpy as np
import pytest
from matplotlib.collections import LineCollection, QuadMesh
from matplotlib.figure import Figure
from PIL import Image, ImageSequence

from attnflow.experiments import plots


def _flow(n, d, steps, *, beta=2.0, dt=0.1, seed=0):
    """A few explicit steps of SA (Q = K = V = I) with renormalization: (steps + 1, n, d)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = [x]
    for _ in range(steps):
        g = beta * x @ x.T
        a = np.exp(g - g.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        v = a @ x
        v -= np.sum(v * x, axis=1, keepdims=True) * x
        x = x + dt * v
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out.append(x)
    return np.array(out)


def _pixels(fig: Figure) -> np.ndarray:
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(float)


def _by_gid(ax, gid):
    found = [a for a in ax.get_children() if a.get_gid() == gid]
    assert found, f"no artist with gid {gid!r}"
    return found[0]


# --- phase diagrams -----------------------------------------------------------------------------


@pytest.fixture
def phase_data():
    ts = np.linspace(0, 30, 31)
    betas = np.linspace(0.1, 9, 12)
    t_star = 5 + 0.3 * np.exp(0.6 * betas)  # a boundary like Γ_{∞,δ}
    fraction = (ts[None, :] >= t_star[:, None]).astype(float)
    return ts, betas, fraction, (t_star, betas)


def test_phase_diagram_colour_range_data_and_curve(phase_data, tmp_path):
    ts, betas, fraction, curve = phase_data
    path = tmp_path / "sub" / "phase.png"
    fig = plots.phase_diagram(ts, betas, fraction, gamma_curve=curve, d=2, n=32, delta=1e-3, path=path)
    ax = fig.axes[0]
    mesh = next(c for c in ax.collections if isinstance(c, QuadMesh))
    assert (mesh.norm.vmin, mesh.norm.vmax) == (0.0, 1.0)
    np.testing.assert_array_equal(np.asarray(mesh.get_array()).reshape(fraction.shape), fraction)
    cbar_ax = fig.axes[1]
    assert cbar_ax.get_ylim() == pytest.approx((0.0, 1.0))
    assert "1-\\delta" in cbar_ax.get_ylabel()
    line = _by_gid(ax, "gamma_curve")
    np.testing.assert_allclose(line.get_xdata(), curve[0])
    np.testing.assert_allclose(line.get_ydata(), curve[1])
    assert ax.get_xlim() == (0.0, 30.0)
    assert "$d = 2$" in ax.get_title() and "10^{-3}" in ax.get_title()
    assert fig.legends and "Gamma" in fig.legends[0].get_texts()[0].get_text()
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size == (round(6.4 * plots.DPI), round(4.9 * plots.DPI))


def test_phase_diagram_curve_never_reaching_threshold_is_a_gap(phase_data):
    ts, betas, fraction, (t_star, b) = phase_data
    t_star = t_star.copy()
    t_star[-1] = np.inf
    fig = plots.phase_diagram(ts, betas, fraction, gamma_curve=(t_star, b))
    assert np.isnan(_by_gid(fig.axes[0], "gamma_curve").get_xdata()[-1])


def test_phase_diagram_grid_one_panel_per_d_shared_colorbar(phase_data):
    ts, betas, fraction, curve = phase_data
    by_d = {d: fraction * (k + 1) / 6 for k, d in enumerate((2, 8, 32, 128, 512, 1024))}
    fig = plots.phase_diagram_grid(ts, betas, by_d, gamma_curve=curve, n=32, delta=1e-3)
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title().startswith("$d =")]
    assert [ax.get_title() for ax in panels] == [f"$d = {d}$" for d in by_d]
    for ax, frac in zip(panels, by_d.values()):
        mesh = next(c for c in ax.collections if isinstance(c, QuadMesh))
        np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(frac.shape), frac)
        assert (mesh.norm.vmin, mesh.norm.vmax) == (0.0, 1.0)
    assert len(fig.axes) == 7  # six panels and one colour bar
    # Five panels in a 2×3 grid: the empty slot is hidden, not drawn.
    fig5 = plots.phase_diagram_grid(ts, betas, dict(list(by_d.items())[:5]))
    assert sum(not ax.get_visible() for ax in fig5.axes) == 1


# --- trajectories ---------------------------------------------------------------------------------


def test_circle_lines_are_the_unwrapped_angles():
    xs = _flow(10, 2, 60, beta=4.0)
    ts = np.linspace(0, 6, 61)
    counts = np.linspace(10, 3, 61).round()
    fig = plots.circle_trajectories(ts, xs, n_clusters=counts, beta=4.0)
    ax = fig.axes[0]
    lines = _by_gid(ax, "trajectories")
    assert isinstance(lines, LineCollection)
    theta = plots.unwrapped_angles(xs)
    segs = lines.get_segments()
    assert len(segs) == xs.shape[1]
    for i, seg in enumerate(segs):
        np.testing.assert_allclose(seg[:, 0], ts)
        np.testing.assert_allclose(seg[:, 1], theta[:, i])
    # A genuine unwrapping: same points on the circle, no jumps of 2π.
    raw = np.arctan2(xs[..., 1], xs[..., 0])
    np.testing.assert_allclose(np.exp(1j * theta), np.exp(1j * raw), atol=1e-12)
    assert np.abs(np.diff(theta, axis=0)).max() < np.pi
    step = _by_gid(fig.axes[1], "n_clusters")
    np.testing.assert_allclose(step.get_ydata(), counts)
    assert all(float(t).is_integer() for t in fig.axes[1].get_yticks())


def test_circle_cluster_across_the_branch_cut_is_one_band():
    # Two clusters: one straddling θ = ±π, one at θ = 0.3. Plain unwrap would split the first.
    final = np.array([np.pi - 0.01, -np.pi + 0.01, np.pi - 0.02, 0.3, 0.31])
    start = final + np.array([-0.3, 0.3, -0.2, 0.4, -0.4])
    theta = np.linspace(start, final, 20)
    xs = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    unwrapped = plots.unwrapped_angles(xs)
    assert np.ptp(unwrapped[-1, :3]) < 0.05
    np.testing.assert_allclose(np.exp(1j * unwrapped), np.exp(1j * theta), atol=1e-12)


def test_sphere_figure_not_blank_and_markers_at_the_points(tmp_path):
    xs = _flow(16, 3, 40, beta=1.0)
    ts = np.linspace(0, 4, 41)
    fig = plots.sphere_trajectories(ts, xs, beta=1.0, path=tmp_path / "sphere.png")
    ax = fig.axes[0]
    assert ax.name == "3d"
    img = _pixels(fig)
    assert img.std() > 20
    h, w, _ = img.shape
    centre = img[h // 2 - 20 : h // 2 + 20, w // 2 - 20 : w // 2 + 20]
    assert centre.mean() < 250  # the shaded sphere fills the middle, not white paper
    final, initial = _by_gid(ax, "final"), _by_gid(ax, "initial")
    np.testing.assert_allclose(np.column_stack(final._offsets3d), xs[-1])
    np.testing.assert_allclose(np.column_stack(initial._offsets3d), xs[0])
    assert _by_gid(ax, "sphere") is not None
    # The saved PNG shows the same picture.
    with Image.open(tmp_path / "sphere.png") as im:
        assert np.asarray(im.convert("L"), dtype=float).std() > 20


def test_pca_axes_report_explained_variance():
    # Points moving in a 2-D subspace of R^6: the top two components explain everything.
    rng = np.random.default_rng(1)
    plane = np.linalg.qr(rng.standard_normal((6, 2)))[0].T  # (2, 6) orthonormal rows
    xs = _flow(12, 2, 20) @ plane
    ts = np.linspace(0, 2, 21)
    fig = plots.pca_trajectories(ts, xs)
    ax = fig.axes[0]
    shares = [float(lbl.split("(")[1].split("%")[0]) for lbl in (ax.get_xlabel(), ax.get_ylabel())]
    assert sum(shares) == pytest.approx(100.0, abs=0.2)
    segs = _by_gid(ax, "trajectories").get_segments()
    assert len(segs) == 12 and segs[0].shape == (21, 2)
    # The projection is an isometry on the plane: pairwise distances are kept.
    proj = np.array([s[-1] for s in segs])
    np.testing.assert_allclose(np.linalg.norm(proj[0] - proj[1]), np.linalg.norm(xs[-1, 0] - xs[-1, 1]))
    fig3 = plots.pca_trajectories(ts, _flow(12, 5, 20), n_components=3)
    assert fig3.axes[0].name == "3d" and "PC3" in fig3.axes[0].get_zlabel()


def test_trajectories_dispatches_on_dimension():
    ts = np.linspace(0, 1, 6)
    assert plots.trajectories(ts, _flow(5, 2, 5), n_clusters=np.ones(6)).axes[0].get_ylabel().startswith("angle")
    assert plots.trajectories(ts, _flow(5, 3, 5), n_clusters=np.ones(6)).axes[0].name == "3d"
    assert "PC1" in plots.trajectories(ts, _flow(5, 7, 5)).axes[0].get_xlabel()


# --- histograms, energy, inner products, cluster counts -------------------------------------------


def test_histogram_over_time_normalized_columns_and_gamma():
    ts = np.linspace(0, 5, 11)
    edges = np.linspace(-1, 1, 21)
    rng = np.random.default_rng(2)
    counts = rng.integers(0, 50, size=(11, 20)).astype(float)
    counts[3] = 0  # an empty time must not break normalization
    gamma = np.tanh(ts)
    fig = plots.histogram_over_time(ts, edges, counts, gamma=gamma, d=128, n=32, beta=4)
    ax = fig.axes[0]
    mesh = next(c for c in ax.collections if isinstance(c, QuadMesh))
    shown = np.ma.filled(mesh.get_array(), 0.0).reshape(20, 11)
    totals = counts.sum(axis=1)
    expected = np.divide(counts, totals[:, None], out=np.zeros_like(counts), where=totals[:, None] > 0)
    np.testing.assert_allclose(shown, expected.T)
    assert isinstance(mesh.norm, mpl.colors.LogNorm)
    np.testing.assert_allclose(_by_gid(ax, "gamma").get_ydata(), gamma)
    assert ax.get_ylim() == (-1.0, 1.0)
    fig_r = plots.histogram_ridges(ts, edges, counts, times=[0, 2.5, 5], gamma=gamma)
    assert [round(float(_by_gid(fig_r.axes[0], f"gamma_{k}").get_xdata()[0]), 6) for k in range(3)] == [
        round(float(g), 6) for g in gamma[[0, 5, 10]]
    ]


def test_energy_and_clusters_plateaus_levels_log_axis():
    ts = np.logspace(-2, 4, 200)
    energy = np.where(ts < 10, 0.3, np.where(ts < 1000, 0.5, 1.0))
    n_clusters = np.where(ts < 10, 4, np.where(ts < 1000, 2, 1))
    plateaus = [(10, 1000, 0.5), (1000, 1e4, 1.0)]
    levels = [0.5, (1.0, "one cluster")]
    fig = plots.energy_and_clusters(
        ts, energy, n_clusters, plateaus=plateaus, levels=levels, logx=True, beta=30, n=8, seed=3
    )
    assert fig.get_suptitle().splitlines()[1].endswith("seed 3")  # one member's curves name it
    ax_e, ax_c = fig.axes
    assert ax_e.get_xscale() == "log" and ax_c.get_xscale() == "log"
    assert ax_e.get_shared_x_axes().joined(ax_e, ax_c)
    np.testing.assert_allclose(_by_gid(ax_e, "energy").get_ydata(), energy)
    np.testing.assert_allclose(_by_gid(ax_c, "n_clusters").get_ydata(), n_clusters)
    spans = [p for p in ax_e.patches if p.get_gid() is None]
    assert len(spans) == len(plateaus)
    labels = {t.get_text() for t in ax_e.texts}
    assert {"0.5", "one cluster"} <= labels
    _pixels(fig)  # draws without error


def test_inner_product_vs_ode_accepts_pairs_or_gram():
    xs = _flow(8, 64, 30, beta=1.0, dt=0.2)
    ts = np.linspace(0, 6, 31)
    gram = np.einsum("tid,tjd->tij", xs, xs)
    gamma = gram[:, 0, 1]
    fig = plots.inner_product_vs_ode(ts, gram, gamma, d=64, n=8, beta=1.0)
    ax, ax_err = fig.axes
    np.testing.assert_allclose(_by_gid(ax, "gamma").get_ydata(), gamma)
    assert len(_by_gid(ax, "pairs").get_segments()) == 8 * 7 // 2
    assert ax_err.get_yscale() == "log"
    iu = np.triu_indices(8, 1)
    fig2 = plots.inner_product_vs_ode(ts, gram[:, iu[0], iu[1]], gamma)
    np.testing.assert_allclose(
        [s[:, 1] for s in _by_gid(fig2.axes[0], "pairs").get_segments()],
        [s[:, 1] for s in _by_gid(ax, "pairs").get_segments()],
    )


def test_cluster_count_vs_time_median_per_beta():
    ts = np.linspace(0.5, 50, 100)
    rng = np.random.default_rng(3)
    counts = {b: rng.integers(1, 2 + int(b), size=(9, 100)) for b in (1.0, 4.0, 9.0)}
    fig = plots.cluster_count_vs_time(ts, counts, logx=True, n=32, d=2)
    ax = fig.axes[0]
    for b, arr in counts.items():
        np.testing.assert_allclose(_by_gid(ax, f"median_beta_{b:g}").get_ydata(), np.median(arr, axis=0))
    assert ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [r"$\beta = 1$", r"$\beta = 4$", r"$\beta = 9$"]


# --- animation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("d", [3, 2])
def test_animation_frame_count_and_no_blank_frame(tmp_path, d):
    xs = _flow(12, d, 39, beta=1.0, dt=0.3)
    ts = np.linspace(0, 12, 40)
    path = tmp_path / f"anim{d}.gif"
    fig = plots.animate_sphere(ts, xs, path=path, fps=10, beta=1.0, max_frames=8, dpi=40)
    with Image.open(path) as im:
        frames = [np.asarray(f.convert("RGB"), dtype=float) for f in ImageSequence.Iterator(im)]
    assert len(frames) == 8
    for frame in frames:
        body = frame[int(0.15 * frame.shape[0]) :]  # below the title
        assert body.std() > 5  # blank paper: 0
    assert not np.array_equal(frames[0], frames[-1])
    assert "t = 12.00" in fig.texts[0].get_text()


def test_animation_keeps_all_frames_when_few(tmp_path):
    xs = _flow(6, 3, 4)
    path = tmp_path / "few.gif"
    plots.animate_sphere(np.arange(5.0), xs, path=path, dpi=30)
    with Image.open(path) as im:
        assert im.n_frames == 5


# --- input checks and environment ------------------------------------------------------------------


def test_bad_input_names_the_argument(phase_data, tmp_path):
    ts, betas, fraction, curve = phase_data
    with pytest.raises(ValueError, match=r"fraction must have shape .*transposed"):
        plots.phase_diagram(ts, betas, fraction.T)
    with pytest.raises(ValueError, match=r"fraction .* \[0, 1\]"):
        plots.phase_diagram(ts, betas, fraction * 2)
    with pytest.raises(ValueError, match="gamma_curve"):
        plots.phase_diagram(ts, betas, fraction, gamma_curve=(curve[0], curve[1][:-1]))
    with pytest.raises(ValueError, match="ts must be strictly increasing"):
        plots.phase_diagram(ts[::-1], betas, fraction)
    xs3 = _flow(4, 3, 5)
    t6 = np.arange(6.0)
    with pytest.raises(ValueError, match=r"xs must hold points in dimension d = 2.*got d = 3"):
        plots.circle_trajectories(t6, xs3)
    with pytest.raises(ValueError, match=r"xs must hold points in dimension d = 3.*got d = 2"):
        plots.sphere_trajectories(t6, _flow(4, 2, 5))
    with pytest.raises(ValueError, match=r"xs must have shape \(T, n, d\) with T = len\(ts\) = 5"):
        plots.sphere_trajectories(t6[:5], xs3)
    with pytest.raises(ValueError, match=r"xs must have shape \(T, n, d\) \(3-D\)"):
        plots.trajectories(t6, xs3[0])
    with pytest.raises(ValueError, match="n_clusters"):
        plots.circle_trajectories(t6, _flow(4, 2, 5), n_clusters=np.ones(3))
    with pytest.raises(ValueError, match=r"counts must have shape \(len\(ts\), len\(edges\) - 1\)"):
        plots.histogram_over_time(t6, np.linspace(-1, 1, 5), np.ones((6, 5)))
    with pytest.raises(ValueError, match="plateaus"):
        plots.energy_and_clusters(t6, np.ones(6), None, plateaus=[(0, 1)])
    with pytest.raises(ValueError, match=r"counts_by_beta\[2\.0\]"):
        plots.cluster_count_vs_time(t6, {2.0: np.ones((3, 4))})
    with pytest.raises(ValueError, match=r"xs must hold points in dimension d = 2 or 3"):
        plots.animate_sphere(t6, _flow(4, 5, 5), path=tmp_path / "x.gif")
    with pytest.raises(ValueError, match="fractions_by_d"):
        plots.phase_diagram_grid(ts, betas, {})


def test_no_pyplot_and_no_latex_even_if_requested(phase_data, tmp_path):
    modules = [plots] + [
        importlib.import_module(f"{plots.__name__}.{m.name}") for m in pkgutil.iter_modules(plots.__path__)
    ]
    imported = set()
    for module in modules:
        tree = ast.parse(inspect.getsource(module))
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {
            f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert len(modules) > 1 and "matplotlib.figure.Figure" in imported
    assert not any("pyplot" in name for name in imported)
    ts, betas, fraction, curve = phase_data
    # A user's usetex=True must neither require LaTeX (absent on test machines) nor be changed.
    xs = _flow(5, 3, 4)
    with mpl.rc_context({"text.usetex": True}):
        figs = [
            plots.phase_diagram(ts, betas, fraction, gamma_curve=curve, delta=1e-3, path=tmp_path / "p.png"),
            plots.sphere_trajectories(np.arange(5.0), xs, beta=1.0, path=tmp_path / "s.png"),
            plots.animate_sphere(np.arange(5.0), xs, beta=1.0, path=tmp_path / "a.gif", dpi=30),
        ]
        assert mpl.rcParams["text.usetex"] is True
    for fig in figs:
        assert not any(t.get_usetex() for t in fig.findobj(mpl.text.Text))


def test_families_share_only_public_names_of_style():
    """Each family of figures imports from its siblings only the public names of ``style``."""
    for info in pkgutil.iter_modules(plots.__path__):
        tree = ast.parse(inspect.getsource(importlib.import_module(f"{plots.__name__}.{info.name}")))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                assert info.name != "style" and node.module == "style", (info.name, node.module)
                assert not [a.name for a in node.names if a.name.startswith("_")], info.name


def test_threads_draw_identical_pictures(phase_data):
    ts, betas, fraction, curve = phase_data
    images = [None] * 4

    def work(k):
        images[k] = _pixels(plots.phase_diagram(ts, betas, fraction, gamma_curve=curve))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for img in images[1:]:
        np.testing.assert_array_equal(img, images[0])
