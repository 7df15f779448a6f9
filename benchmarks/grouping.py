"""Adaptive ensembles in groups: a few stiff members among many, with and without grouping.

    python benchmarks/grouping.py            # 256 members, 4 of them stiff, plus an even ensemble
    python benchmarks/grouping.py --quick    # 128 members, 2 stiff

A vmapped adaptive solve runs its while loop until its slowest member is done, so every member
pays for the stiffest one. ``simulate(..., group_size=G)`` solves groups of G members one after the
other, hardest first; by default (``group_size=None``) such ensembles run as a queue instead
(``solvers/queue.py``: slots refilled as members finish). The mixed ensemble is USA in [GLPR]'s time (velocities ~ e^β) at β = 1 with
a few members at β = 6; the even one is SA over β ∈ [0.5, 4], where steps hardly depend on β and
the automatic choice keeps one group. Timings: the best of 5 calls (3 with --quick) in this
process, after compiling.
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import machine as _machine
import numpy as np

import attnflow as af
from attnflow.particles.fields import ensemble_axes
from attnflow.solvers import adaptive_loop


def timed(fn, repeat: int) -> tuple[object, float]:
    out = jax.block_until_ready(fn())  # compile
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return out, best


def loop_work(steps: np.ndarray, size: int | None, order) -> int:
    """Members × iterations over the vmapped loops: Σ_groups size · max steps in the group."""
    if size is None:
        return steps.size * int(steps.max())
    s = steps[np.asarray(order)]
    s = np.concatenate([s, np.repeat(s[-1:], -s.size % size)])
    return int(size * s.reshape(-1, size).max(axis=1).sum())


def compare(title: str, field, x0, t1: float, sizes, repeat: int) -> None:
    print(f"\n{title}")
    axes, _ = ensemble_axes(field)
    base, first, same = None, None, True
    for size in sizes:
        sol, wall = timed(lambda size=size: af.simulate(field, x0, t1, group_size=size), repeat)
        steps = np.asarray(sol.steps)
        base = wall if base is None else base
        label = {0: "one group (ungrouped)", None: "automatic"}.get(size, f"group_size={size}")
        slots = adaptive_loop.queue_slots("tsit5", True, np.zeros(0), size, x0.shape[0], None)
        if slots:
            # the queue (solvers/queue.py): its own step control, so its steps differ a little
            print(
                f"  {label:<22} {f'queue, {slots} slots':<17} {wall:7.3f} s   loop work {steps.sum():>7d}"
                f"   speed-up {base / wall:4.2f}×   (steps: median {np.median(steps):.0f}, max {steps.max()})"
            )
            continue
        first = steps if first is None else first
        same &= np.array_equal(steps, first)
        used, order = adaptive_loop.grouping(size, field, axes, x0, 0.0)
        groups = "1 group" if used is None else f"groups of {used}"
        print(
            f"  {label:<22} {groups:<17} {wall:7.3f} s   loop work {loop_work(steps, used, order):>7d}"
            f"   speed-up {base / wall:4.2f}×"
        )
    print(
        f"  steps per member: median {np.median(first):.0f}, max {first.max()};"
        f" {'the same' if same else 'NOT the same'} in every grouping"
    )


def run(quick: bool = False) -> None:
    members, stiff, repeat = (128, 2, 3) if quick else (256, 4, 5)
    print(f"{os.cpu_count()} cores, jax {jax.__version__} on {jax.default_backend()}")
    rng = np.random.default_rng(0)
    beta = np.ones(members)
    beta[rng.choice(members, stiff, replace=False)] = 6.0
    x0 = af.init.uniform(0, 32, 3, batch=members)
    compare(
        f"USA (time='glpr'), n = 32, d = 3, t1 = 5, tsit5: {members} members, {stiff} at β = 6, the rest at β = 1",
        af.USA(jnp.asarray(beta), time="glpr"),
        x0,
        5.0,
        (0, None, 32, 64),
        repeat,
    )

    even = 2 * members
    x0 = af.init.uniform(1, 32, 2, batch=even)
    compare(
        f"SA, n = 32, d = 2, t1 = 10, tsit5: {even} members, β evenly in [0.5, 4]",
        af.SA(jnp.linspace(0.5, 4.0, even)),
        x0,
        10.0,
        (0, None, 64),
        repeat,
    )


def main(argv=None) -> int:
    return _machine.script_main(run, __doc__, "a smaller ensemble, fewer timings", argv)


if __name__ == "__main__":
    sys.exit(main())
