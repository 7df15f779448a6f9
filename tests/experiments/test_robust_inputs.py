"""Input that the commands and the public functions must refuse or report, never turn into a traceback or a
number: arrays that grow as n² or d² beyond the machine's memory (refused before they are allocated, the part
that needs the memory named), a NaN energy (its trend is undefined, not a verdict), degenerate inputs (one
token, two-point data) and the API's counts, tolerances and complex input.

The memory tests never allocate the arrays they are about: the machine's memory is patched down to sizes the
real arrays fit in many times over, or the refusal comes before any allocation."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import cli

import attnflow as af
from attnflow.particles.errors import InputError
from attnflow.solvers import machine

MiB = 2**20


@pytest.fixture
def small_machine(monkeypatch):
    """A machine of 64 MiB: the states of the tests fit in it, their pairwise arrays do not."""
    monkeypatch.setattr(machine, "machine_bytes", lambda: 64 * MiB)


def circle_states(n: int, layers: int = 2, d: int = 2, seed: int = 0) -> np.ndarray:
    """(layers, n, d) tokens with random directions, in float32."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(layers, n, d)).astype(np.float32)


def one_line_refusal(rc: int, stderr: str, *words: str) -> str:
    assert rc == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- 2. memory checked before the n×n and (n·d)² arrays ------------------------------------------------------


def test_shared_preflight_names_the_largest_part_and_the_machine(monkeypatch):
    monkeypatch.setattr(machine, "machine_bytes", lambda: 2**30)
    machine.check_parts({"small": 100, "large": 2**29}, "this", "less")  # 0.5 GiB + 100 bytes fit in 1 GiB
    with pytest.raises(InputError) as err:
        machine.check_parts({"the states": 2**29, "the pairwise n×n arrays [tokens]": 3 * 2**30}, "probe", "fewer")
    assert str(err.value) == (
        "probe needs about 3.5 GiB of memory (mostly the pairwise n×n arrays [tokens], 3.0 GiB), "
        "more than this machine's 1.0 GiB; try fewer"
    )
    monkeypatch.setattr(machine, "machine_bytes", lambda: None)
    machine.check_parts({"anything": 2**80}, "this", "less")  # unknown memory: nothing refused


def test_shared_preflight_checks_jax_arrays_against_an_accelerators_memory(monkeypatch):
    monkeypatch.setattr(machine, "machine_bytes", lambda: 8 * 2**30)
    monkeypatch.setattr(machine, "device_memory", lambda: (2**30, 2**29))  # a 1 GiB accelerator
    parts = {"the Jacobian": 3 * 2**29, "the host's copies": 6 * 2**30}
    with pytest.raises(InputError, match=r"mostly the Jacobian, 1.5 GiB\), more than the accelerator's 1.0 GiB"):
        machine.check_parts(parts, "this", "less", on_device=["the Jacobian"])
    machine.check_parts(parts, "this", "less")  # 7.5 GiB on the host alone: fits its 8 GiB
    with pytest.raises(InputError, match=r"more than this machine's 8.0 GiB"):
        machine.check_parts({**parts, "the host's copies": 9 * 2**30}, "this", "less")


def test_probe_cli_refuses_pairwise_arrays_beyond_memory(tmp_path, small_machine):
    path = tmp_path / "states.npz"
    np.savez(path, states=circle_states(2000))  # 32 kB of states, 2000² pairs per layer
    out = tmp_path / "out"
    rc, _, stderr = cli(["probe", path, "--beta", 1, "--out", out, "--quiet", "--no-plot"])
    one_line_refusal(rc, stderr, "memory", "pairwise", "2000 tokens")
    assert not out.exists()


def test_probe_cli_refuses_60000_tokens_before_allocating(tmp_path, monkeypatch):
    monkeypatch.setattr(machine, "machine_bytes", lambda: 16 * 2**30)
    path = tmp_path / "big.npz"
    np.savez(path, states=circle_states(60000))  # a 1 MB file whose pairs need 60000² numbers per layer
    out = tmp_path / "out"
    rc, _, stderr = cli(["probe", path, "--beta", 1, "--out", out, "--quiet"])
    one_line_refusal(rc, stderr, "memory", "pairwise")
    assert not out.exists()


def test_af_probe_refuses_pairwise_arrays_beyond_memory(small_machine):
    with pytest.raises(InputError, match="pairwise"):
        af.probe(circle_states(2000), beta=1.0)


def test_fit_refuses_a_billion_heads_naming_them():
    states = circle_states(4, d=4)
    with pytest.raises(InputError, match=r"^fit needs about .* of memory .*1000000000 heads"):
        af.fit(states, heads=1_000_000_000, adam_steps=1, lbfgs_steps=0)


def test_fit_cli_refuses_a_billion_heads(tmp_path):
    path = tmp_path / "states.npz"
    np.savez(path, states=circle_states(4, d=4))
    out = tmp_path / "out"
    rc, _, stderr = cli(["fit", path, "--heads", 1_000_000_000, "--out", out, "--quiet", "--no-plot"])
    one_line_refusal(rc, stderr, "memory", "heads")
    assert not out.exists()


def test_fit_refuses_weights_beyond_memory(small_machine):
    # M and V at d = 2048 are 32 MiB each, and the optimizer keeps several copies of them
    states = np.random.default_rng(0).normal(size=(2, 3, 2048)).astype(np.float32)
    with pytest.raises(InputError, match="weights"):
        af.fit(states, adam_steps=1, lbfgs_steps=0)


@pytest.mark.parametrize("command", ["fit", "probe"])
def test_d_60000_is_refused_before_its_d_by_d_weights(tmp_path, monkeypatch, command):
    monkeypatch.setattr(machine, "machine_bytes", lambda: 16 * 2**30)
    path = tmp_path / "wide.npz"
    np.savez(path, states=np.random.default_rng(0).normal(size=(2, 3, 60000)).astype(np.float32))
    out = tmp_path / "out"
    extra = ["--k", 1] if command == "probe" else []  # three tokens: one neighbour apart from the nearest
    rc, _, stderr = cli([command, path, "--out", out, "--quiet", "--no-plot", *extra])
    one_line_refusal(rc, stderr, "memory", "d = 60000")
    assert not out.exists()


def test_hist_cli_refuses_pairwise_arrays_beyond_memory(tmp_path, small_machine):
    path = tmp_path / "states.npz"
    np.savez(path, states=circle_states(2000))
    out = tmp_path / "out"
    rc, _, stderr = cli(["hist", path, "--out", out, "--quiet", "--no-plot"])
    one_line_refusal(rc, stderr, "memory", "pairwise")
    assert not out.exists()


def test_equilibrium_refuses_a_jacobian_beyond_memory(monkeypatch):
    monkeypatch.setattr(machine, "machine_bytes", lambda: MiB)
    x = np.asarray(af.init.uniform(0, n=200, d=3))  # N = 400 tangent coordinates: J is 1.3 MB
    with pytest.raises(InputError, match="Jacobian") as err:
        af.equilibrium(af.SA(1.0), x)
    assert "n = 200" in str(err.value)
    with pytest.raises(InputError, match="Jacobian"):
        af.RestPoints(lambda b: af.USA(b), x, 0.5)


def test_equilibrium_at_30000_tokens_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(machine, "machine_bytes", lambda: 16 * 2**30)
    x = np.asarray(af.init.uniform(0, n=30000, d=3))  # a 28.8 GB Jacobian
    with pytest.raises(InputError, match="Jacobian"):
        af.equilibrium(af.SA(1.0), x)


# -- 6. a NaN energy is no verdict ---------------------------------------------------------------------------


def test_energy_trend_of_non_finite_values_is_undefined():
    from attnflow.particles.probe import energy_trend

    values = np.array([[1.0, 2.0], [np.nan, 3.0], [4.0, 4.0]])
    trend = energy_trend(values)
    assert trend["monotone"] is None
    assert "not finite" in trend["undefined"]
    assert trend["monotone_fraction"] == 1.0  # the one prompt whose values are finite climbs
    assert trend["monotone_per_prompt"].tolist() == [None, True]
    defined = energy_trend(np.array([[1.0], [0.5]]))
    assert defined["monotone"] is False and defined["undefined"] is None


def test_probe_at_beta_1e308_reports_the_energy_trend_undefined(tmp_path):
    path = tmp_path / "states.npz"
    np.savez(path, states=circle_states(12, layers=3, d=3))
    out = tmp_path / "out"
    rc, stdout, stderr = cli(["probe", path, "--beta", "1e308", "--k", 3, "--out", out, "--quiet", "--no-plot"])
    assert rc == 0, stderr
    assert stderr == ""  # no warning of NumPy's about the NaNs
    assert "decreases somewhere" not in stdout and "never decreases" not in stdout
    assert "E_β trend undefined" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["energy_monotone"] is None
    assert "not finite" in summary["energy_monotone_undefined"]
    assert summary["raw"]["energy_monotone"] is None and summary["normed"]["energy_monotone"] is None


# -- 7. degenerate inputs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("experiment", ["renyi-centres", "noisy-transition"])
def test_one_token_is_refused(tmp_path, experiment):
    out = tmp_path / "out"
    rc, _, stderr = cli(["run", experiment, "--quick", "--set", "n=1", "--out", out, "--no-plot"])
    one_line_refusal(rc, stderr, "n = 1")
    assert not out.exists()


def test_two_point_layer_normed_tokens_have_no_twonn_dimension(tmp_path):
    # in d = 2, centring leaves every token at ±(1, −1)/√2: two points, no intrinsic dimension
    states = circle_states(40, layers=3)
    result = af.probe(states, beta=1.0, k=3)
    summary = result.summary()
    assert all(v is None or np.isnan(v) for v in summary["normed"]["intrinsic_dimension"])
    assert "2 distinct points" in summary["normed"]["degenerate"]
    assert summary["raw"]["degenerate"] is None
    assert all(0.5 < v < 1.5 for v in summary["raw"]["intrinsic_dimension"])  # the circle: dimension 1
    path = tmp_path / "states.npz"
    np.savez(path, states=states)
    rc, stdout, stderr = cli(["probe", path, "--beta", 1, "--k", 3, "--out", tmp_path / "out", "--quiet", "--no-plot"])
    assert rc == 0, stderr
    assert "degenerate" in stdout


# -- 10. the API's arguments -----------------------------------------------------------------------------


def test_equilibrium_refuses_complex_input_naming_it():
    x = np.asarray(af.init.uniform(0, n=3, d=2)).astype(complex)
    with pytest.raises(InputError, match=r"^x must be a real array.*complex"):
        af.equilibrium(af.SA(1.0), x)


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("max_iter", -5, r"max_iter must be an integer ≥ 0, got -5"),
        ("max_iter", 2.5, r"max_iter must be an integer ≥ 0"),
        ("tol", 0.0, r"tol must be a finite number > 0"),
        ("tol", float("nan"), r"tol must be a finite number > 0"),
        ("t", float("inf"), r"t must be a finite number"),
        ("seed", -1, r"seed must be an integer ≥ 0"),
    ],
)
def test_equilibrium_refuses_bad_counts_and_tolerances(argument, value, message):
    x = np.asarray(af.init.uniform(0, n=3, d=2))
    with pytest.raises(InputError, match=message):
        af.equilibrium(af.SA(1.0), x, **{argument: value})


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("max_points", 0, r"max_points must be an integer ≥ 2, got 0"),
        ("max_points", -3, r"max_points must be an integer ≥ 2"),
        ("max_newton", 0, r"max_newton must be an integer ≥ 1"),
        ("tol", -1.0, r"tol must be a finite number > 0"),
        ("locate_tol", 0.0, r"locate_tol must be a finite number > 0"),
        ("ds", float("nan"), r"ds must be a finite number > 0"),
    ],
)
def test_continuation_refuses_bad_counts_and_tolerances(argument, value, message):
    x = np.asarray(af.init.uniform(0, n=3, d=2))
    system = af.RestPoints(lambda b: af.USA(b), x, 0.5)
    with pytest.raises(InputError, match=message):
        af.continuation(system, x, 0.5, p_range=(-1.5, 0.5), **{argument: value})


def test_continuation_refuses_complex_start():
    x = np.asarray(af.init.uniform(0, n=3, d=2))
    system = af.RestPoints(lambda b: af.USA(b), x, 0.5)
    with pytest.raises(InputError, match=r"^start must be a real array.*complex"):
        af.continuation(system, x.astype(complex), 0.5, p_range=(-1.5, 0.5))


def test_probe_refuses_complex_states_naming_them():
    with pytest.raises(InputError, match=r"^states must be a real array.*complex"):
        af.probe(circle_states(5).astype(complex), beta=1.0)


@pytest.mark.parametrize(
    "argument, value, message",
    [
        ("rho0", np.full(16, 1 / (2 * np.pi)) + 0j, r"^rho0 must be a real array.*complex"),
        ("rtol", 0.0, r"^rtol must be a finite number > 0"),
        ("max_steps", 0, r"^max_steps must be an integer ≥ 1, got 0"),
        ("modes", 1.5, r"^modes must be an integer ≥ 2"),
    ],
)
def test_meanfield_circle_refuses_bad_arguments_naming_them(argument, value, message):
    arguments = {"rho0": lambda theta: 1 + 0.1 * np.cos(theta), **{argument: value}}
    with pytest.raises(InputError, match=message):
        af.meanfield_circle(arguments.pop("rho0"), 1.0, 1.0, **arguments)


@pytest.mark.parametrize("layers", [[0, 1.5], [True, False], "01"])
def test_probe_refuses_layers_that_are_not_integer_indices(layers):
    with pytest.raises(InputError, match=r"^layers must name at least 2 of the states' 2 layers \(0–1\)"):
        af.probe(circle_states(5), beta=1.0, k=2, layers=layers)
