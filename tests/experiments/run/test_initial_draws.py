"""The runner's initial conditions: drawn in few programs, with the same numbers as the samplers themselves."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import load_config
from attnflow.experiments.run import runner
from attnflow.solvers import compilations, compiler


def _config(**sets):
    return load_config({"n": 6, "seeds": 5, "seed": 3, "dtype": "float64", **sets})


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_reduced_draws_are_the_samplers_own_for_every_d():
    """Member s of the reduced draw at dimension d is ``span.uniform(key(seed + s), n, d)``'s coordinates (the
    first key of its split): d is a program argument, and the numbers are those of d written into the program."""
    for d in (7, 40):
        config = _config(d=[d])
        y, frames = runner.span_initial_conditions(config, d)
        assert frames is None
        for s in range(config.seeds):
            k = jax.random.split(jax.random.key(config.seed + s))[0]
            expected = np.asarray(af.particles.span.uniform(k, config.n, d, dtype="float64"))
            np.testing.assert_allclose(np.asarray(y[s]), expected, rtol=0, atol=1e-15)
        # unit rows: points of the sphere in the span's coordinates
        np.testing.assert_allclose(np.linalg.norm(np.asarray(y), axis=-1), 1.0, atol=1e-15)


def test_reduced_draws_of_several_d_share_one_program():
    """The rows of a phase diagram with d > n (span reduction) compile the reduced sampler once."""
    with compilations.record() as compiled:
        for d in (9, 17, 33):  # unusual sizes: no other test has compiled them
            runner.span_initial_conditions(_config(d=[d], seeds=3, n=5), d)
    names = [c.name for c in compiled.compiled]
    assert names.count("jit(_draw_span_rows)") == 1, names


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("init", ["uniform", "orthogonal", "cap", "clusters"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_samplers_compiler_options_do_not_change_their_numbers(init, dtype, monkeypatch):
    """The samplers' programs are compiled with ``compiler.SAMPLER_OPTIONS_ON_CPU``: the same bits as XLA's
    default options give, except the cap's rotation in float64, which may move a coordinate by one unit in the
    last place (LLVM's level 1 contracts a product and a sum differently there)."""
    config = _config(d=[7], init=init, dtype=dtype)
    with_options = np.asarray(runner.initial_conditions(config, 7))
    monkeypatch.setattr(compiler, "SAMPLER_OPTIONS_ON_CPU", {})
    default = np.asarray(runner.initial_conditions(config, 7))
    if init == "cap" and dtype == "float64":
        np.testing.assert_allclose(with_options, default, rtol=0, atol=4 * np.finfo(np.float64).eps)
    else:
        assert np.array_equal(with_options, default)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_the_reduced_draws_compiler_options_do_not_change_their_numbers(monkeypatch):
    with_options = np.asarray(runner.span_initial_conditions(_config(d=[11]), 11)[0])
    monkeypatch.setattr(compiler, "SAMPLER_OPTIONS_ON_CPU", {})
    default = np.asarray(runner.span_initial_conditions(_config(d=[11]), 11)[0])
    assert np.array_equal(with_options, default)
