"""The precision of a run's matrix products (``simulate(precision=...)``, the ``precision`` key).

The time loops are traced under the chosen precision: every product of the field in the stored,
lowered program carries it (HIGHEST for "float32", HIGH for "tf32", the BF16_BF16_F32 dot algorithm
for "bf16"), while the save function and the consensus test keep HIGHEST; each precision has its own
compiled and stored program. The default gives bitwise the states of a loop traced without any
precision; XLA's CPU forms float32 products in full precision whatever is asked, so on CPU "tf32" and
"bf16" give bitwise the float32 states too. float64 runs take the default alone.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import SMALL, cli, tree

import attnflow as af
from attnflow.experiments.config import load_config
from attnflow.experiments.run import field_config as fields
from attnflow.experiments.run import runner
from attnflow.solvers import programs, simulation
from attnflow.solvers.problem import describe

D = 12  # above sphere.SMALL_D: the attention is formed by matrix products
MARKS = {
    "float32": "precision = [HIGHEST, HIGHEST]",
    "tf32": "precision = [HIGH, HIGH]",
    "bf16": "lhs_precision_type = bf16, rhs_precision_type = bf16, accumulation_type = f32",
}
STATS = runner.statistics(1e-3, 0, False, ("pairs", "clusters", "energy"))


def problem_args(solver="rk4", save=None, precision="float32", delta=None):
    x0 = af.init.uniform(jax.random.key(3), 8, D, batch=3).astype(jnp.float32)
    field = af.SA(beta=jnp.asarray([0.5, 2.0, 8.0]))
    return (field, x0, 2.0), dict(
        ts=np.linspace(0, 2, 5),
        solver=solver,
        dt=0.25,
        save=save,
        precision=precision,
        dtype="float32",
        stop_when_clustered=delta,
    )


def run(**kw):
    args, kwargs = problem_args(**kw)
    return af.simulate(*args, **kwargs)


def leaves(sol):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves((sol.xs, sol.stats, sol.x_final, sol.steps, sol.t_event))]


def stored_products(store, known=()) -> tuple[set, list[str]]:
    """(the entries, the dot_general lines of the entries not in ``known``): the stored programs' StableHLO."""
    entries = set(store.glob(f"*{programs.SUFFIX}"))
    lines = []
    for path in sorted(entries - set(known)):
        blob = path.read_bytes()
        digest = blob.split(b"\n", 2)[1].split()[0].decode()
        text = jax.export.deserialize(bytearray(programs.Entry.unpack(blob, digest))).mlir_module()
        lines += [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    return entries, lines


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("solver", ["rk4", "ab4"])  # the fixed-step loop, the dense grid
@pytest.mark.parametrize("precision", list(MARKS))
def test_every_product_of_the_stored_loop_carries_the_precision(store, solver, precision):
    run(solver=solver, precision=precision)
    entries, dots = stored_products(store)
    assert len(entries) == 1 and programs.EVENTS["exported"] == 1
    # the field's two products (logits, weighted sum) per evaluation: rk4 evaluates 4 times per step
    assert len(dots) >= 8
    assert all(MARKS[precision] in line for line in dots), [line for line in dots if MARKS[precision] not in line][:2]
    others = [mark for name, mark in MARKS.items() if name != precision]
    assert not any(mark in line for line in dots for mark in others)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_statistics_and_the_consensus_test_keep_full_precision(store):
    """In a bf16 run the saves' products and the consensus test's (stop_when_clustered) are HIGHEST: the
    statistics add products at full precision only, and the field's are those of a run saving states."""

    def kinds(**kw):
        known, _ = stored_products(store)
        run(precision="bf16", **kw)
        _, dots = stored_products(store, known)
        low = sum(MARKS["bf16"] in line for line in dots)
        full = sum(MARKS["float32"] in line for line in dots)
        assert low + full == len(dots)
        return low, full

    low_states, full_states = kinds()
    low_consensus, full_consensus = kinds(delta=1e-3)
    low_stats, full_stats = kinds(save=STATS, delta=1e-3)
    assert low_states >= 8 and full_states == 0
    assert low_consensus == low_states and full_consensus >= 1  # the test at the start and after each step
    assert low_stats == low_states and full_stats > full_consensus  # the saves' Gram matrix


def test_the_precision_keys_the_stored_programs(store):
    """A warm run never reuses a program traced at another precision: one entry per precision, each loaded
    by a later process at its own precision."""
    run(precision="float32")
    run(precision="bf16")
    assert programs.EVENTS == {"exported": 2}
    entries, _ = stored_products(store)
    assert len(entries) == 2
    for precision in ("bf16", "tf32", "float32"):
        programs.forget()  # a new process
        programs.EVENTS.clear()
        before, _ = stored_products(store)
        run(precision=precision)
        after, dots = stored_products(store, before)
        if precision == "tf32":  # not stored before: traced, exported at its own precision
            assert programs.EVENTS == {"exported": 1} and len(after) == 3
            assert dots and all(MARKS["tf32"] in line for line in dots)
        else:
            assert programs.EVENTS == {"loaded": 1} and after == before


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_precision_keys_the_compiled_programs_of_a_process():
    """Without the store (and for a save function of the user's, never stored): the loop is traced again for
    another precision, not again for the same one. A run in bounded calls (rk4) traces the save function once more
    per run, for the shapes of its saves (``eval_shape``), whatever the precision: the same count for a repeated
    precision as for the one after it."""
    traces = []

    def save(t, x):
        traces.append(1)
        return jnp.sum(x)

    for solver in ("rk4", "tsit5"):
        counts = []
        for precision in ("float32", "bf16", "bf16", "float32"):
            run(solver=solver, save=save, precision=precision)
            counts.append(len(traces))
        shapes = counts[2] - counts[1]  # a run again at the same precision: its saves' shapes only (0 or 1)
        assert shapes in (0, 1) and counts[3] - counts[2] == shapes, (solver, counts)
        assert counts[1] - counts[0] > shapes, (solver, counts)  # another precision: the loop traced again


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("solver", ["rk4", "ab4", pytest.param("tsit5", marks=pytest.mark.slow)])  # tsit5: 30 s
def test_the_default_gives_the_states_of_a_loop_traced_without_precision(solver):
    """The loop as ``simulate`` ran it before it stated a precision (traced at JAX's default, the products
    unmarked): on CPU float32 products are full precision already, so the states are bitwise the same."""
    args, kwargs = problem_args(solver=solver, save=STATS, delta=1e-3)
    p = describe(
        *args,
        **kwargs,
        t0=0.0,
        rtol=1e-6,
        atol=1e-9,
        adaptive=True,
        max_steps=10**6,
        group_size=None,
        key=None,
        dense=False,
        shard=None,
        save_reads_time=True,
    )
    loop, loop_args = simulation.LOOPS[simulation.loop_for(p)](p, None)
    saved, x_final, steps, t_event, *_ = loop(
        field=p.field, axes=p.axes, x0=p.x0, save_fn=p.save_fn, delta=p.delta, progress=False, **loop_args
    )
    sol = af.simulate(*args, **kwargs)
    assert sol.precision == "float32"
    before = [np.asarray(a) for a in jax.tree_util.tree_leaves((saved, x_final, steps, t_event))]
    assert all(np.array_equal(a, b) for a, b in zip(before, leaves(sol), strict=True))


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_xla_cpu_forms_float32_products_in_full_precision_whatever_is_asked(precision):
    """What is true on CPU: the lowered products carry the lower precision (above), and XLA's CPU computes
    them in float32 anyway, bitwise. A bfloat16 product would have been seen: rounding this run's
    operands to bfloat16 moves their Gram matrix by more than 10⁻³ (2⁻⁸ relative)."""
    if jax.default_backend() != "cpu":
        pytest.skip("on accelerators the lower precision is honoured")
    full, low = run(precision="float32"), run(precision=precision)
    assert low.precision == precision
    assert all(np.array_equal(a, b) for a, b in zip(leaves(full), leaves(low), strict=True))
    x = np.asarray(full.x_final[0])
    rounded = np.asarray(jnp.asarray(x, jnp.bfloat16).astype(jnp.float32))
    assert np.max(np.abs(rounded @ rounded.T - x @ x.T)) > 1e-3


def test_the_solution_states_its_precision():
    assert run().precision == "float32"
    assert run(precision="tf32").precision == "tf32"
    x0 = af.init.uniform(0, 4, 3)  # float64
    assert af.simulate(af.SA(1.0), x0, 1.0, solver="rk4", dt=0.1).precision == "float64"


def test_simulate_refuses_a_lower_precision_for_float64_and_an_unknown_name():
    x0 = af.init.uniform(0, 4, 3)
    with pytest.raises(ValueError, match=r"precision='tf32' .* a float64 run .* use dtype='float32'"):
        af.simulate(af.SA(1.0), x0, 1.0, solver="rk4", dt=0.1, precision="tf32")
    with pytest.raises(ValueError, match=r"precision must be one of 'float32', 'tf32', 'bf16'; got 'fp16'"):
        af.simulate(af.SA(1.0), x0, 1.0, solver="rk4", dt=0.1, precision="fp16", dtype="float32")
    assert list(simulation.PRECISIONS) == ["float32", "tf32", "bf16"]


# -- the configuration key, through the command line --------------------------------------------------


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    ("sets", "expected"),
    [((), "float64"), (("dtype=float32",), "float32"), (("dtype=float32", "precision=bf16"), "bf16")],
)
def test_summary_json_states_the_precision(tmp_path, sets, expected):
    cfg = tmp_path / "small.toml"
    cfg.write_text(SMALL)
    out = tmp_path / "run"
    argv = ["run", cfg, "--json", "--no-plot", "--quiet", "--out", out, *(a for s in sets for a in ("--set", s))]
    rc, stdout, stderr = cli(argv)
    assert rc == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["precision"] == expected == json.loads(stdout)["precision"]
    assert summary["config"]["precision"] == ("bf16" if expected == "bf16" else "float32")


@pytest.mark.parametrize(
    ("sets", "fragments"),
    [
        (
            ("precision=tf32",),
            (
                """precision = "tf32" acts only with dtype = 'float32' (got dtype = "float64")""",
                'leave precision at its default "float32"',
            ),
        ),
        (("dtype=float32", "precision=fp16"), ("precision must be one of 'float32', 'tf32', 'bf16'; got 'fp16'",)),
        (("dtype=float64", "precision=bf16"), ("""precision = "bf16" acts only with dtype = 'float32'""",)),
    ],
)
def test_the_command_line_refuses_a_precision_its_run_cannot_take(tmp_path, monkeypatch, sets, fragments):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "small.toml").write_text(SMALL)
    before = tree(tmp_path)
    rc, stdout, stderr = cli(["run", "small.toml", "--no-plot", *(a for s in sets for a in ("--set", s))])
    assert rc == 2 and stdout == ""
    assert stderr.count("\n") == 1 and "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in stderr, (fragment, stderr)
    assert tree(tmp_path) == before  # nothing written
    assert not (tmp_path / "runs").exists()


def test_the_precision_key_reaches_simulate():
    config = load_config(None, ["dtype=float32", "precision=tf32"])
    assert config.precision == "tf32"
    assert fields.simulate_arguments(config, np.zeros(1))["precision"] == "tf32"
    # the particles of the mean-field experiments keep the default (their runs do not read the key)
    assert "precision" not in fields.simulate_arguments(config, np.zeros(1), method_only=True)
