"""The spherical-harmonic transform of the mean field on S²: compile time, run time and memory against the degree L.

For each L: the tables' size, the compilation of one vmapped solve (two members, three steps' worth of
time), its temporary memory as XLA reports it, and the time of one right-hand side (one synthesis of ρ,
of the potential and of its gradient, and one weak divergence) once compiled; the ratio to L = 16 in the
same process. ``python benchmarks/meanfield_sphere.py [--max-degree 128]``.
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)

from attnflow.solvers import harmonics  # noqa: E402
from attnflow.solvers import sphere_meanfield as ms  # noqa: E402


def measure(L: int) -> dict:
    start = time.perf_counter()
    grid = harmonics.sphere_grid(L)
    tables = time.perf_counter() - start
    c0 = jnp.asarray(np.stack([ms.perturbed_uniform_sphere(s, L, 1e-3, min(12, L)) for s in range(2)]))
    kern = jnp.asarray(ms.scaled_kernel(np.array([5.0, 5.0]), L))
    beta = jnp.asarray([5.0, 5.0])

    batched = jax.jit(jax.vmap(functools.partial(ms.transport, grid=grid, model="sa")))
    start = time.perf_counter()
    compiled = batched.lower(c0, kern, beta).compile()
    compile_s = time.perf_counter() - start
    memory = compiled.memory_analysis()
    temp = getattr(memory, "temp_size_in_bytes", float("nan")) if memory is not None else float("nan")
    compiled(c0, kern, beta).block_until_ready()
    reps = max(3, int(2e8 / (grid.theta.size * (L + 1) ** 2 * 40)))
    start = time.perf_counter()
    for _ in range(reps):
        out = compiled(c0, kern, beta)
    out.block_until_ready()
    per_rhs = (time.perf_counter() - start) / reps / 2
    solve_start = time.perf_counter()
    ms.meanfield_sphere(np.asarray(c0[0]), 5.0, 0.5, L=L)
    solve_s = time.perf_counter() - solve_start
    bytes_tables = 3 * grid.P.size * 8
    return dict(
        L=L,
        grid=f"{grid.theta.size}×{grid.phi.size}",
        tables_mb=bytes_tables / 2**20,
        tables_s=tables,
        compile_s=compile_s,
        temp_mb=temp / 2**20,
        rhs_ms=per_rhs * 1e3,
        solve_s=solve_s,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-degree", type=int, default=128)
    args = parser.parse_args()
    degrees = [L for L in (16, 32, 64, 128, 256) if L <= args.max_degree]
    rows = [measure(L) for L in degrees]
    base = rows[0]
    print(
        f"{'L':>4} {'grid':>9} {'tables':>9} {'compile':>8} {'XLA temp':>9} {'rhs/member':>11} {'× L=16':>7} "
        f"{'solve t≤0.5 (cold)':>19}"
    )
    for r in rows:
        print(
            f"{r['L']:>4} {r['grid']:>9} {r['tables_mb']:>7.1f}MB {r['compile_s']:>7.2f}s {r['temp_mb']:>7.1f}MB "
            f"{r['rhs_ms']:>9.3f}ms {r['rhs_ms'] / base['rhs_ms']:>6.1f}× {r['solve_s']:>18.2f}s"
        )


if __name__ == "__main__":
    main()
