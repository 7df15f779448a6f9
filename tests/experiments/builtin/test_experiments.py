"""The built-in experiments end to end: each runs once (its --quick size) through the command line, its
theory checks pass on the run read back from disk, and one number from the theory is checked here.

The quick configurations are exactly the ones ``attnflow validate --quick`` runs, so the two share
their compilations within one pytest session.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from cli_helpers import cli

import attnflow as af
from attnflow.experiments import builtin, plots, studies
from attnflow.experiments.config import KEYS, load_config
from attnflow.experiments.results import labels
from attnflow.experiments.results.runs import load_result
from attnflow.experiments.run import runner
from attnflow.particles import observables

NAMES = list(builtin.EXPERIMENTS)
SINGLE = [n for n in NAMES if not builtin.EXPERIMENTS[n].grid]  # experiments that are one run

# The quick tier (the README's `pytest`) runs the quick runs of these experiments, a few seconds each: particles
# on the circle, the gradient flow's energy on its staircase, a custom runner; the others (5–35 s of CPU each) run
# with `pytest -m slow`, as CI does. Every experiment's checks are also unit-tested in its own test module.
QUICK_TIER = {"fig4-circle", "staircase", "long-context"}


def tiered(names):
    """``names`` as parameters, those outside the quick tier marked slow."""
    return [name if name in QUICK_TIER else pytest.param(name, marks=pytest.mark.slow) for name in names]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name → the experiment run once with --quick (lazily), read back from its directory."""
    root = tmp_path_factory.mktemp("builtin")
    cache = {}

    def get(name: str) -> SimpleNamespace:
        if name not in cache:
            out = root / name
            rc, stdout, stderr = cli(["run", name, "--quick", "--quiet", "--out", out])
            assert rc == 0, stderr
            result, experiment = load_result(out)
            cache[name] = SimpleNamespace(out=out, stdout=stdout, result=result, experiment=experiment)
        return cache[name]

    return get


def registering_modules() -> list[str]:
    """The modules that register the built-in experiments, in the order they are imported: the core's, as
    ``experiments/builtin/__init__.py`` imports them, then the studies' (``studies.experiment_modules()``)."""
    source = Path(builtin.__file__).read_text(encoding="utf-8")
    imported = [
        f"{builtin.__name__}.{alias.name}"
        for node in ast.parse(source).body
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None
        for alias in node.names
    ]
    core = [m for m in imported if hasattr(importlib.import_module(m), "EXPERIMENT")]
    return core + studies.experiment_modules()


def test_list_shows_exactly_the_registry():
    rc, out, _ = cli(["list"])
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines()] == [*NAMES, "simulate"]  # and one's own configuration, last
    # the registry holds exactly the experiments that its modules register, in their import order: the core's
    # (the papers' figures first), then the shelf's in studies.STUDIES order
    modules = registering_modules()
    assert NAMES == [importlib.import_module(m).EXPERIMENT.name for m in modules]
    assert NAMES[:3] == ["fig3-phase-diagram", "fig5-random-matrices", "fig4-circle"]
    assert all(builtin.EXPERIMENTS[n] is importlib.import_module(m).EXPERIMENT for n, m in zip(NAMES, modules))


@pytest.mark.parametrize("name", tiered(SINGLE))
def test_builtin_experiment_passes_its_theory_checks(runs, name):
    r = runs(name)
    e = builtin.EXPERIMENTS[name]
    assert r.experiment is e
    # the run is the experiment's defaults with its quick overrides, nothing else
    expected = load_config(None, ["progress=false"], base={**e.defaults, **e.quick})
    assert r.result.config == expected
    checks = e.checks(r.result)
    assert checks, f"{name} has no theory check"
    failed = [c for c in checks if c.failed]
    assert not failed, failed
    # the report printed by the live run shows the same checks as the run read back from disk
    for c in checks:
        assert f"[ok  ] {c.name}: expected {c.expected}, measured {c.measured}" in r.stdout
    assert "FAIL" not in r.stdout
    # every figure of the experiment was written, as a real PNG or GIF
    for fig in e.figures(r.result):
        path = r.out / (fig if fig.endswith((".png", ".gif")) else f"{fig}.png")
        head = path.read_bytes()[:8]
        assert head == b"\x89PNG\r\n\x1a\n" if path.suffix == ".png" else head[:6] == b"GIF89a", path


# -- one number from the theory per experiment ------------------------------------------------------


@pytest.mark.slow  # outside the quick tier: its experiment's quick run
def test_fig3_overlays_the_gamma_curve(runs, monkeypatch):
    r = runs("fig3-phase-diagram")
    c = r.result.config
    captured = {}

    def capture(ts, betas, by_d, curve, **kw):
        captured.update(ts=ts, betas=betas, by_d=by_d, curve=curve, **kw)

    monkeypatch.setattr(plots, "phase_diagram_grid", capture)
    r.experiment.figures(r.result)["phase_diagram"](None)
    betas = np.linspace(0.5, 6.0, 12)
    np.testing.assert_allclose(captured["betas"], betas, rtol=1e-15)
    t_star, curve_betas = captured["curve"]
    np.testing.assert_allclose(curve_betas, betas, rtol=1e-15)
    np.testing.assert_allclose(t_star, np.asarray(af.particles.gamma_curve(betas, c.n, c.delta)), rtol=1e-12)
    assert sorted(captured["by_d"]) == [2, 32]
    frac = r.result.stats["clustered_fraction"]
    np.testing.assert_allclose(captured["by_d"][32], frac[1].mean(axis=1), rtol=1e-12)
    # Γ_∞,δ(β) is when the equiangular solution from ρ0 = 0 reaches 1 − δ
    gamma = np.asarray(af.equiangular(betas[3], c.n, np.array([0.0, t_star[3]])))
    assert gamma[-1] == pytest.approx(1 - c.delta, abs=1e-6)


def test_fig4_statistics_agree_with_the_saved_states(runs):
    r = runs("fig4-circle")
    c, xs = r.result.config, r.result.states(2)  # xs (β, seed, T, n, 2)
    assert xs.shape == (2, 6, 61, 32, 2)
    np.testing.assert_allclose(np.linalg.norm(xs, axis=-1), 1.0, atol=1e-12)  # on the circle
    last = xs[:, :, -1]
    counts = np.asarray(af.n_clusters(last, c.delta))
    np.testing.assert_array_equal(counts, r.result.stats["n_clusters"][0, :, :, -1])
    gram = np.einsum("bsid,bsjd->bsij", last, last)[..., ~np.eye(c.n, dtype=bool)]
    np.testing.assert_allclose(gram.mean(-1), r.result.stats["mean_inner_product"][0, :, :, -1], atol=1e-12)
    np.testing.assert_allclose(gram.min(-1), r.result.stats["min_inner_product"][0, :, :, -1], atol=1e-12)
    # SA with V = I is a gradient ascent flow of E_β: the energy never decreases
    assert np.min(np.diff(r.result.stats["normalized_energy"], axis=-1)) >= -1e-9


@pytest.mark.slow  # outside the quick tier: its experiment's quick run
def test_highdim_histograms_count_every_pair_and_concentrate_on_gamma(runs):
    r = runs("highdim-histogram")
    c = r.result.config
    hist = r.result.stats["histogram"][:, 0]  # (d, seeds, T, bins)
    assert hist.dtype.kind in "iu"
    np.testing.assert_array_equal(hist.sum(axis=(1, 3)), c.seeds * c.n * (c.n - 1) // 2)
    edges = np.asarray(observables.histogram_edges(c.histogram_bins))
    centres = (edges[1:] + edges[:-1]) / 2
    mean_from_hist = (hist * centres).sum(-1) / hist.sum(-1)
    mean = r.result.stats["mean_inner_product"][:, 0]
    assert np.max(np.abs(mean_from_hist - mean)) <= 1.0 / c.histogram_bins + 1e-12  # half a bin width
    # Thm 6.9: pairs follow γ_β(t) up to O(√(log d / d))
    gamma = np.asarray(af.equiangular(c.beta[0], c.n, r.result.ts))
    dev = np.abs(mean - gamma).max(axis=(1, 2))
    assert np.all(np.diff(dev) < 0)
    scaled = dev * np.sqrt(np.asarray(c.d) / np.log(c.d))
    assert scaled.max() / scaled.min() < 2.0


def test_orthogonal_start_follows_the_equiangular_ode(runs):
    r = runs("orthogonal-ode")
    c = r.result.config
    xs = r.result.states(c.d[0])  # (β, 1, T, n, n)
    off = ~np.eye(c.n, dtype=bool)
    for j, beta in enumerate(c.beta):
        gram = np.einsum("tid,tjd->tij", xs[j, 0], xs[j, 0])
        np.testing.assert_allclose(np.diagonal(gram, axis1=1, axis2=2), 1.0, atol=1e-12)
        gamma = np.asarray(af.equiangular(beta, c.n, r.result.ts, model="sa"))
        assert np.max(np.abs(gram[:, off] - gamma[:, None])) <= 1e-6
        np.testing.assert_allclose(gram[0][off], 0.0, atol=1e-12)  # an orthonormal frame at t = 0


@pytest.mark.slow  # outside the quick tier: its experiment's quick run
def test_sphere_movie_gif_has_one_frame_per_save_time(runs):
    from PIL import Image, ImageSequence

    r = runs("sphere-movie")
    c = r.result.config
    np.testing.assert_allclose(np.linalg.norm(r.result.states(3), axis=-1), 1.0, atol=1e-12)  # on S²
    with Image.open(r.out / "movie.gif") as gif:
        frames = [np.asarray(f.convert("RGB")).astype(np.int64) for f in ImageSequence.Iterator(gif)]
    assert len(frames) == min(c.n_save, 150) == 31
    for k, f in enumerate(frames):
        packed = (f[..., 0] << 16) | (f[..., 1] << 8) | f[..., 2]
        assert f.std() > 10 and len(np.unique(packed)) > 16, f"frame {k} is blank"
    # particles move: the first and the last frame differ in many pixels
    assert np.mean(np.any(frames[0] != frames[-1], axis=-1)) > 0.005
    assert np.min(np.diff(r.result.stats["normalized_energy"], axis=-1)) >= -1e-9


def _levels_by_parts(n: int) -> dict[int, set[float]]:
    """Σ m_q²/n² over the partitions of n, grouped by the number of parts."""

    def partitions(m, largest):
        if m == 0:
            yield ()
            return
        for first in range(min(m, largest), 0, -1):
            for rest in partitions(m - first, first):
                yield (first,) + rest

    out: dict[int, set[float]] = {}
    for p in partitions(n, n):
        out.setdefault(len(p), set()).add(sum(m * m for m in p) / n**2)
    return out


def test_staircase_plateaus_sit_on_partition_levels(runs):
    r = runs("staircase")
    c = r.result.config
    levels = _levels_by_parts(c.n)
    assert levels[2] == {17 / 25, 13 / 25} and levels[3] == {11 / 25, 9 / 25}
    ts = r.result.ts[1:]
    counts = r.result.stats["n_clusters"][0, 0, 0, 1:]
    energy = r.result.stats["normalized_energy"][0, 0, 0, 1:]
    level = r.result.stats["cluster_level"][0, 0, 0, 1:]
    for k, lv in zip(counts, level):  # Σm²/n² of the clusters found is a partition level with k parts
        assert min(abs(lv - v) for v in levels[int(k)]) <= 1e-12
    plateaus = []
    for k, group in itertools.groupby(range(len(ts)), key=lambda i: int(counts[i])):
        idx = list(group)
        if k < c.n and ts[idx[-1]] >= 10 * ts[idx[0]]:  # after a merge, at least a decade long
            plateaus.append((k, float(np.median(energy[idx]))))
    assert len(plateaus) >= 2
    ks = [k for k, _ in plateaus]
    assert ks == sorted(ks, reverse=True) and len(set(ks)) == len(ks)  # clusters only merge
    for k, e in plateaus:
        assert min(abs(e - v) for v in levels[k]) <= 0.01, (k, e)
    es = [e for _, e in plateaus]
    assert es == sorted(es)  # the staircase climbs
    assert plateaus[-1][0] == 1 and plateaus[-1][1] == pytest.approx(1.0, abs=0.01)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_metastability_log_time_grid_and_energy(runs, tmp_path):
    r = runs("metastability")
    c = r.result.config
    expected = np.concatenate([[0.0], np.geomspace(c.t1 * 10.0**-c.log_decades, c.t1, c.n_save - 1)])
    np.testing.assert_array_equal(r.result.ts, expected)
    assert np.min(np.diff(r.result.stats["normalized_energy"], axis=-1)) >= -1e-9
    # t_clustered (summary) is the first save time at which every pair is within δ
    together = r.result.member("min_inner_product") >= 1 - c.delta
    t_clustered = np.where(together.any(1), r.result.ts[np.argmax(together, axis=1)], np.nan)
    np.testing.assert_array_equal(runner.t_clustered(r.result), t_clustered)
    # the figure redrawn from disk is the one the run drew
    copy = tmp_path / "meta"
    shutil.copytree(r.out, copy)
    original = (copy / "cluster_counts.png").read_bytes()
    (copy / "cluster_counts.png").unlink()
    rc, out, err = cli(["plot", copy])
    assert rc == 0, err
    assert out.splitlines() == [str(copy / "cluster_counts.png")]
    assert (copy / "cluster_counts.png").read_bytes() == original


@pytest.mark.slow  # outside the quick tier: its experiment's quick run
def test_meanfield_density_grows_at_the_bessel_rates_and_forms_three_clusters(runs):
    from scipy import special

    r = runs("meanfield-circle")
    c, s = r.result.config, r.result.stats
    k = np.arange(1, 6)
    # docs/model.md §3, SA: mode k of the uniform density grows at k² I_k(β)/(β I_0(β))
    theory = k**2 * special.iv(k, 5.0) / (5.0 * special.iv(0, 5.0))
    np.testing.assert_allclose(s["growth_rate"][0, 0], np.broadcast_to(theory, (c.seeds, 5)), rtol=0.01)
    density = s["density"][0, 0]  # (seeds, T, 2·modes)
    assert density.shape == (c.seeds, c.n_save, 2 * c.modes)
    np.testing.assert_allclose(density.sum(-1) * np.pi / c.modes, 1.0, atol=1e-12)  # mass
    assert np.all(s["n_clusters"][0, 0, :, -1] == 3)
    assert np.all(np.diff(s["w1"][0, 0].mean(axis=0)) < 0)  # more particles, closer to the density


def test_member_labelled_seed_s_is_the_run_with_seed_s():
    base = load_config(None, ["n=6", "d=3", "seeds=2", "seed=0"])
    alone = base.replace(seed=1, seeds=1)
    x_pair = np.asarray(runner.initial_conditions(base, 3))
    x_alone = np.asarray(runner.initial_conditions(alone, 3))
    np.testing.assert_array_equal(x_pair[1], x_alone[0])


@pytest.mark.slow
@pytest.mark.filterwarnings("error::FutureWarning")  # laid out on the weights axis with every option of xarray named
def test_fig5_runs_the_four_ensembles_and_checks_the_gradient_flow(tmp_path):
    out = tmp_path / "fig5"
    rc, stdout, stderr = cli(["run", "fig5-random-matrices", "--quick", "--quiet", "--out", out])
    assert rc == 0, stderr
    e = builtin.EXPERIMENTS["fig5-random-matrices"]
    loaded = {w: load_result(out / f"weights={w}")[0] for w in e.grid["weights"]}
    checks = e.grid_checks(loaded)
    assert checks and all(c.passed for c in checks), checks
    assert "[ok  ] (d) V = QᵀK symmetric" in stdout and "FAIL" not in stdout
    # (d): QᵀK symmetric and V = QᵀK, so the kernel energy log E never decreases along any member
    log_e = loaded["wigner-v-qk"].stats["log_energy"]
    assert np.min(np.diff(log_e, axis=-1)) >= -1e-9 and np.max(log_e[..., -1] - log_e[..., 0]) > 1e-3
    assert (out / "phase_diagrams.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ds = af.load(out)
    assert list(ds["weights"].values) == e.grid["weights"]
    assert ds["clustered_fraction"].dims[0] == "weights"
    assert ds["weights"].attrs["long_name"] == KEYS["weights"].doc  # an axis named by its key's documentation
    unlabelled = [v for v in ds.variables if v != "weights" and labels.label(str(v)) is None]
    assert not unlabelled, f"no label in experiments/results/labels.py for {unlabelled}"
    assert all(ds[v].attrs["long_name"] for v in ds.variables)
    assert ds["wall_time_s"].attrs == {"long_name": "wall time", "units": "s"}


@pytest.mark.slow  # each experiment's quick run (shared with the theory checks' when both run)
@pytest.mark.parametrize("name", SINGLE)
def test_every_variable_of_the_quick_run_has_its_declared_label(runs, name):
    ds = af.load(runs(name).out)
    for var in ds.variables:
        declared = labels.label(str(var))
        assert declared is not None, f"{name}: {var!r} has no label in experiments/results/labels.py"
        assert ds[var].attrs["long_name"] == declared.long_name
        assert ds[var].attrs.get("units") == declared.units
    assert ds["time"].attrs["units"] == "model time units"


@pytest.mark.slow  # outside the quick tier: its experiment's quick run
def test_selectivity_writes_its_exponents_and_half_the_queries_select_at_the_median(runs):
    r = runs("selectivity")
    c, s = r.result.config, r.result.stats
    summary = json.loads((r.out / "summary.json").read_text())
    assert summary["d"] == list(c.d) and summary["exponent_theory"] == [2 / (d - 1) for d in c.d]
    for p, se, want in zip(summary["exponent"], summary["exponent_stderr"], summary["exponent_theory"]):
        assert abs(p / want - 1) <= 0.05 and 0 < se < 0.05 * want
    # at β̄, the median threshold at the longest context, the weight on the nearest key is ≥ 1/2 exactly for
    # the queries whose own threshold is ≤ β̄: half of them
    longest = int(np.argmax(c.context_lengths))
    for a in range(len(c.d)):
        top, threshold = s["ordered_weights"][a, 0, 0, 1, :, 0], s["threshold"][a, 0, 0, longest]
        beta = s["regime_beta"][a, 0, 0, 1]
        assert np.array_equal(top >= 0.5, threshold <= beta) and np.mean(top >= 0.5) == 0.5


CUSTOM = [n for n in NAMES if builtin.EXPERIMENTS[n].run is not None]  # experiments with runners of their own


@pytest.mark.slow  # runs each of them once more, its keys recorded
@pytest.mark.parametrize("name", CUSTOM)
def test_an_experiment_declares_exactly_the_keys_its_runner_reads(name, monkeypatch):
    from attnflow.experiments.config import Config
    from attnflow.experiments.config.keys import KEYS
    from attnflow.experiments.run.preflight import AMBIENT_KEYS

    e = builtin.EXPERIMENTS[name]
    config = load_config(None, ["progress=false"], base={**e.defaults, **e.quick})
    read = set()
    attribute, item, replace = Config.__getattr__, Config.__getitem__, Config.replace
    validating = []  # a derived configuration's validation reads every key: that is not the runner's reading

    def recording_attribute(self, key):
        if not validating:
            read.add(key)
        return attribute(self, key)

    def recording_item(self, key):
        if not validating:
            read.add(key)
        return item(self, key)

    def validated_replace(self, *args, **kwargs):
        validating.append(True)
        try:
            return replace(self, *args, **kwargs)
        finally:
            validating.pop()

    monkeypatch.setattr(Config, "__getattr__", recording_attribute)
    monkeypatch.setattr(Config, "__getitem__", recording_item)
    monkeypatch.setattr(Config, "replace", validated_replace)
    e.requires(config)  # what preflight reads of it, then the run
    e.memory(config)
    e.run(config, progress=False)
    monkeypatch.undo()
    declared = set(e.keys)
    assert read - AMBIENT_KEYS <= declared, f"{name} reads undeclared keys {sorted(read - declared)}"
    # a declared key is read, unless it acts only where another key is set otherwise: log spacing, save times
    # given as a list, the noisy mean field turned off (meanfield_time = 0)
    conditional = set()
    if config.save_spacing != "log" or config.save_times:
        conditional.add("log_decades")
    if config.save_times:
        conditional |= {"save_spacing", "n_save"}
    if "meanfield_time" in e.keys and config.meanfield_time == 0:
        conditional.add("modes")
    for key in e.keys:  # keys that act only where another key has certain values (``Key.applies``)
        applies = KEYS[key].applies
        if applies is not None and applies[1] != ">0" and config[applies[0]] not in applies[1]:
            conditional.add(key)
    assert declared - conditional <= read, f"{name} declares keys it never reads: {sorted(declared - read)}"


@pytest.mark.slow  # alone it runs hardmax-limit --quick (about 30 s); after the theory checks' test it is instant
def test_hardmax_limit_concentrates_at_log_beta_and_traps_at_the_closest_vertices(runs):
    from attnflow.experiments.studies.hardmax_limit.hardmax_limit_theory import (
        concentration_offset,
        limit_rate,
        trapping_exponent,
    )

    r = runs("hardmax-limit")
    c, s = r.result.config, r.result.stats
    tokens = s["tokens"][0, 0, 0]
    k = c.hull_vertices
    betas = np.asarray(c.limit_beta)
    assert s["limit_distance"].shape == (1, 1, 1, betas.size)
    # concentration: t_c = log β − log u*, u* from the tokens' distances to their vertices
    u = concentration_offset(tokens, k)
    np.testing.assert_allclose(s["concentration_predicted"][0, 0, 0], np.log(betas / u), rtol=1e-12)
    assert np.max(np.abs(s["concentration_time"][0, 0, 0] - np.log(betas / u))) <= 0.1
    # unit vertices in angular order: c = min ⟨v, v − v'⟩ = 1 − cos(the smallest angle between neighbours)
    angle = np.arctan2(tokens[:k, 1], tokens[:k, 0])
    gaps = np.mod(np.diff(angle, append=angle[0]), 2 * np.pi)
    assert trapping_exponent(tokens[:k])[0] == pytest.approx(1 - np.cos(gaps.min()), rel=1e-12)
    # the distance to the limit stays below the rate √(log(β+1)/β) and vanishes as β grows
    D = s["limit_distance"][0, 0, 0]
    assert np.all(D <= limit_rate(betas)) and D[-1] < 1e-6 * D[0]


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_model_key_the_experiment_does_not_set_makes_its_checks_not_applicable(tmp_path):
    # positional = alibi biases renyi-centres' causal logits: Lemma 5.1 and the parking count are not of that model
    out = tmp_path / "alibi"
    argv = ["run", "renyi-centres", "--quick", "--set", "positional=alibi", "--set", "seeds=2", "--no-plot"]
    rc, stdout, stderr = cli([*argv, "--quiet", "--out", out])
    assert rc == 0, stderr
    marks = [line.strip() for line in stdout.splitlines() if line.strip().startswith("[")]
    assert len(marks) == 2 and all(line.startswith("[n/a ]") for line in marks), stdout
    assert "Lemma 5.1" in marks[0] and "Rényi parking" in marks[1]
    assert all("this run sets positional = 'alibi'" in line for line in marks)
    result, experiment = load_result(out)
    assert [c.passed for c in experiment.theory_checks(result)] == [None, None]
    assert all(c.passed is not None for c in experiment.checks(result))  # computed, then judged not applicable
    # every key that changes the model is one of the list the decision reads, coalesce and alibi_slope included
    from attnflow.experiments.config.keys import model_keys

    assert {"positional", "alibi_slope", "coalesce", "norm", "noise", "heads", "model"} <= set(model_keys())
    assert {"n", "beta", "solver", "circle", "delta"}.isdisjoint(model_keys())
