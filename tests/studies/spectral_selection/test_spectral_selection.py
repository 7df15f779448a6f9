"""The spectral-selection experiment (experiments/studies/spectral_selection/spectral_selection.py): the end-state
classes, the antipodal pair's closed-form map, the keys and refusals, and summary.json's ``mixed_q``."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.studies.spectral_selection import spectral_selection as ss
from attnflow.experiments.studies.spectral_selection.spectral_selection_theory import mixed_roots


def test_classify_names_consensus_splits_and_the_rest():
    e = np.eye(3)
    x = np.stack(
        [
            np.stack([e[0]] * 4),  # consensus on e_1
            np.stack([-e[2]] * 4),  # consensus on e_3 (−e_3 is the same state)
            np.stack([e[1], -e[1], e[1], e[1]]),  # three at e_2, one at −e_2
            np.stack([e[0], e[0], e[1], e[1]]),  # two eigendirections at once: other
            np.stack([e[0] * np.cos(0.1) + e[1] * np.sin(0.1)] * 4),  # 0.1 rad off e_1: 1 − cos 0.1 > ALIGN_TOL
        ]
    )
    codes, plus = ss.classify(x)
    assert codes.tolist() == [0, 4, 3, 6, 6]
    assert plus.tolist() == [4, 4, 3, -1, -1]
    assert [ss.OUTCOMES[c] for c in codes[:3]] == ["consensus e1", "consensus e3", "split e2"]


def test_grid_points_and_the_pair_rule():
    """Cell centres are unit vectors, symmetric under z → −z; the pair splits on e_max where ⟨y, Vy⟩ > 0, on e_min
    where it is negative: for λ = (1, 0.3, −0.6) that is |z| < √(1/1.6) on the meridian plane x–z."""
    points = ss.grid_points(8)
    assert points.shape == (8, 16, 3)
    np.testing.assert_allclose(np.linalg.norm(points, axis=-1), 1.0, atol=1e-15)
    np.testing.assert_allclose(points[::-1, :, 2], -points[:, :, 2], atol=1e-15)
    z = np.linspace(-0.99, 0.99, 41)
    y = np.stack([np.sqrt(1 - z**2), np.zeros_like(z), z], axis=-1)
    codes = ss.pair_theory(y, (1.0, 0.3, -0.6))
    np.testing.assert_array_equal(codes, np.where(np.abs(z) < np.sqrt(1 / 1.6), 1, 5))


def test_mixed_and_spectra_keys_take_rows_and_refuse_the_rest():
    c = load_config(None, ["experiment=spectral-selection", "mixed=[[1, 0.5, 2, 2, 1], [-0.5, 1, 3, 1, 2]]"])
    assert c.mixed == ((1.0, 0.5, 2.0, 2.0, 1.0), (-0.5, 1.0, 3.0, 1.0, 2.0))
    with pytest.raises(ConfigError, match=r"mixed must be a list of lists of finite numbers"):
        load_config(None, ["mixed=[1, 2, 3, 4, 5]"])
    with pytest.raises(ConfigError, match=r"mixed\[0\]\[1\] must be a finite number"):
        load_config(None, ["mixed=[[1, 'x', 2, 2, 1]]"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("mixed=[[1, 0.5, 2]]", r"mixed\[0\] must be \[a, b, beta, m, k\] \(5 numbers\)"),
        ("mixed=[[1, 0.5, 2, 1.5, 1]]", r"m and k are token counts"),
        ("mixed=[[1, 0, 2, 1, 1]]", r"a, b and beta must be nonzero"),
        ("spectra=[[1, 1, 0.5]]", r"spectra\[0\] must be 3 distinct eigenvalues"),
        ("beta=[0.0, 1.0]", r"takes β > 0"),
        ("seeds=4", r"does not read seeds"),
    ],
)
def test_refusals_name_the_problem(override, message):
    experiment = ss.EXPERIMENT
    config = load_config(None, [override], base={**experiment.defaults, **experiment.quick})
    with pytest.raises(ConfigError, match=message):
        experiment.check(config)


@pytest.mark.slow  # one small run: four compiled ensembles and the rest points' Jacobians
def test_cli_writes_mixed_q_of_every_set(tmp_path, capsys):
    from attnflow.experiments.commands.cli import main

    sets = [[1.0, 0.5, 2.0, 2, 1], [-0.5, 1.0, 3.0, 2, 1]]
    out = tmp_path / "run"
    rc = main(
        [
            "run",
            "spectral-selection",
            "--quick",
            "--set",
            "mixed=" + json.dumps(sets),
            "--set",
            "spectra=[[1.0, 0.3, -0.6]]",
            "--set",
            "starts=8",
            "--set",
            "map_resolution=4",
            "--set",
            "t1=20",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    mixed = json.loads((out / "summary.json").read_text())["mixed_q"]
    assert [[r["a"], r["b"], r["beta"], r["m"], r["k"]] for r in mixed] == sets
    for row, (a, b, beta, m, k) in zip(mixed, sets):
        np.testing.assert_allclose(row["q"], mixed_roots(a, b, beta, m, k), rtol=0, atol=1e-15)
        assert row["at_rest"] and max(row["velocity"]) <= 1e-10
    assert [len(r["q"]) for r in mixed] == [1, 2]
    bad = tmp_path / "bad"
    assert main(["run", "spectral-selection", "--quick", "--set", "mixed=[[1, 2]]", "--out", str(bad)]) == 2
    assert not bad.exists()


def test_an_end_on_a_slow_saddle_leaves_it_within_its_e_foldings():
    """λ = (1, 0.6, 0.3), β = 1: three tokens at e_1 and one at −e_1 are a saddle, barely (λ_2/λ_1 = 0.6 above
    σ(e², 3) = 0.5785), whose unstable eigenvalue 0.0169 lets a run to t1 = 150 end there; continued for
    SADDLE_EFOLDS e-foldings it leaves, so the atlas does not count it against the closed form."""
    from types import SimpleNamespace

    from attnflow.experiments.studies.spectral_selection.spectral_selection_theory import (
        pure_spectrum,
        pure_state,
        split_threshold,
    )

    lam = (1.0, 0.6, 0.3)
    assert split_threshold(np.exp(2.0), 3.0) == pytest.approx((np.e**2 - 3) * (3 * np.e**2 - 1) / (3 * (np.e**4 - 1)))
    assert split_threshold(np.exp(2.0), 3.0) < 0.6
    rate = float(pure_spectrum(lam, 0, 3, 1, 1.0)[0])
    assert 0 < rate < 0.02
    x = pure_state(3, 0, 3, 1)
    x[:, 1] += 1e-5 * np.array([1.0, -0.7, 0.4, 0.2])
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    codes, plus = ss.classify(x[None])
    assert (int(codes[0]), int(plus[0])) == (1, 3)  # on the unstable split at the start
    assert ss._kept(lam, 1.0, 1, 3, x[None], SimpleNamespace(t1=150.0, dt=0.1)) == 0
