"""One RK4 step of a block of SA members: the fused Pallas kernel (``SA(kernel="pallas")``) against the XLA path.

    python benchmarks/pallas_step.py                    # the figures' members: n = 32, d ∈ {8, 32, 128}
    python benchmarks/pallas_step.py --members 4096 --dtype float32 --repeat 20

Times, for each d, one step of the uniform grid's RK4 (``dense.py``: k1 given, three evaluations, the
stage combination, the normalization, and the velocity at the end point) over an ensemble of members with
per-member β, identity weights (Fig. 3) and random Q, K, V (Fig. 5): the XLA path, the step vmapped over
the members as ``run_dense`` traces it, and the kernel (``solvers/fused_rk4.py``), one launch per step. It
prints both times, their ratio and the largest difference of the states.

On a GPU this is the measurement that decides ``particles.blocked.PALLAS_AUTO`` (where ``kernel="auto"``
would take the kernel). Off a GPU the kernel runs in Pallas' interpreter: the script then only checks that
the kernel runs and agrees, and its ratio says nothing of the kernel's speed.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import attnflow as af
from attnflow.particles.fields import ensemble_axes
from attnflow.particles.sphere import normalize
from attnflow.solvers import fused_rk4


def best_time(fn, *args, repeat: int) -> float:
    """Best wall seconds of ``fn(*args)`` over ``repeat`` calls after one warm-up (compile) call."""
    jax.block_until_ready(fn(*args))
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def xla_step(field):
    """The uniform grid's RK4 step of ``field`` as the XLA loop takes it: (x, f, h) ↦ (x', F(x'))."""
    axes = ensemble_axes(field)[0]
    vfield = jax.vmap(lambda f, x: f(0.0, x), in_axes=(axes, 0))

    @jax.jit
    def step(field, x, f, h):
        k2 = vfield(field, x + (0.5 * h) * f)
        k3 = vfield(field, x + (0.5 * h) * k2)
        k4 = vfield(field, x + h * k3)
        xn = normalize(x + (h / 6.0) * (f + 2.0 * k2 + 2.0 * k3 + k4))
        return xn, vfield(field, xn)

    return lambda x, f, h: step(field, x, f, h)


def fused_step(parts, members, dtype):
    kernel = fused_rk4.FusedRK4(parts, members, dtype)
    return jax.jit(lambda x, f, h: kernel.step(x, h, f))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=256)
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--d", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    dtype = jnp.dtype(args.dtype)
    backend = jax.default_backend()
    interpreted = fused_rk4.interpreted()
    print(
        f"backend {backend} ({jax.devices()[0].device_kind}), jax {jax.__version__}, {args.members} members, "
        f"n = {args.n}, {dtype.name}; kernel {'interpreted' if interpreted else 'compiled'}"
    )
    print(f"{'d':>5} {'weights':>8} {'XLA step s':>11} {'kernel s':>10} {'XLA/kernel':>11} {'max |Δx|':>10}")
    betas = jnp.linspace(0.1, 9.0, args.members, dtype=dtype)
    for d in args.d:
        x = af.init.uniform(0, n=args.n, d=d, batch=args.members, dtype=dtype)
        keys = jax.random.split(jax.random.key(1), 3)
        random = tuple(
            jax.random.normal(k, (args.members, d, d), dtype) / np.sqrt(d) for k in keys
        )  # per-member Q, K, V as Fig. 5's ensembles
        for label, (Q, K, V) in (("identity", (None, None, None)), ("random", random)):
            field = af.SA(betas, Q, K, V, kernel="xla")
            f = jax.vmap(lambda fl, y: fl(0.0, y), in_axes=(ensemble_axes(field)[0], 0))(field, x)
            h = jnp.asarray(0.25, dtype)
            xla, fused = xla_step(field), fused_step((betas, Q, K, V), args.members, dtype)
            t_xla = best_time(xla, x, f, h, repeat=args.repeat)
            t_fused = best_time(fused, x, f, h, repeat=args.repeat)
            diff = float(jnp.max(jnp.abs(xla(x, f, h)[0] - fused(x, f, h)[0])))
            print(f"{d:>5} {label:>8} {t_xla:>11.3g} {t_fused:>10.3g} {t_xla / t_fused:>11.3g} {diff:>10.2g}")
    if interpreted:
        print("the kernel ran in Pallas' interpreter: the ratios measure the interpreter, not the kernel")


if __name__ == "__main__":
    main()
