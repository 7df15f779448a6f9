"""XLA compiler options for the time loops, by backend and by the kind of arithmetic a field does.

On CPUs, XLA hands dots, elementwise chains and reductions to the YNNPACK library only for the fusion
kinds its ``xla_cpu_experimental_ynn_fusion_type`` option lists. The attention of n tokens in
d > ``sphere.SMALL_D`` dimensions is two batched n × n products per member and evaluation; with dots
handed over too, those run ≈ 3× faster (two 32 × 32 × 32 products: 0.5 against 1.6 µs per member on the
2-core EPYC of ``benchmarks/README.md``) and the field twice as fast. Up to ``SMALL_D`` the row sums are
written coordinate by coordinate and on the circle (angles, or d = 2 term by term) there is no product
at all; there the same option slows the elementwise sums 3–4× (the d = 8 row of Fig. 3 ran 4× slower),
so those programs keep XLA's defaults. Other backends keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable

import jax

from ..particles.sphere import SMALL_D
from . import programs

PRODUCTS_ON_CPU = {
    "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_DOT,LIBRARY_FUSION_TYPE_ELTWISE,LIBRARY_FUSION_TYPE_REDUCE",
}
"""The options of CPU programs whose fields form batched matrix products (d > ``SMALL_D``)."""

PRODUCTS_FROM_D = SMALL_D + 1
"""Smallest dimension of the simulated coordinates whose fields form matrix products."""


def loop_options(d: int) -> dict[str, str]:
    """Compiler options for a time loop over configurations with ``d`` coordinates per token."""
    if d >= PRODUCTS_FROM_D and jax.default_backend() == "cpu":
        return dict(PRODUCTS_ON_CPU)
    return {}


SAMPLER_OPTIONS_ON_CPU = {"xla_backend_optimization_level": 1}
"""The options of CPU programs that draw initial conditions: LLVM's level 1 instead of its default 2 compiles the
samplers (threefry's rounds, the χ² rejection loop of the reduced draws) 2–3× faster and runs them as fast. The
uniform, reduced, orthogonal and clustered draws keep their bits; the cap's rotation in float64 may move a
coordinate by one unit in the last place (``tests/experiments/run/test_initial_draws.py``). They run once per run,
the time loops thousands of times: those keep the default."""


def sampler_options() -> dict[str, int]:
    """Compiler options for a program that draws initial conditions (``SAMPLER_OPTIONS_ON_CPU`` on CPUs)."""
    return dict(SAMPLER_OPTIONS_ON_CPU) if jax.default_backend() == "cpu" else {}


def jit_with_options(fn: Callable) -> Callable:
    """``eqx.filter_jit(fn)`` compiled with the options passed as ``compiler_options=`` at each call.

    One compiled function per distinct set of options, so that calls with the same options share
    their compilations (and the persistent cache) as ``eqx.filter_jit`` alone would. While the
    compilation cache is on, the traced and lowered program is kept on disk too (``programs.py``):
    a later process calls it without tracing again.
    """
    return programs.jit(fn)
