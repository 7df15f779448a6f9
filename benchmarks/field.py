"""The attention field's cost: machine bounds, the SA field against the matmul roofline, scaling in n and d.

    python benchmarks/field.py            # everything, n up to 10⁵ (about 1.5 minutes on 2 cores)
    python benchmarks/field.py --quick    # n up to 10⁴, fewer repeats (about 20 seconds)

Prints the machine's f32 matmul and (fused) exp throughput, the SA field at n = 4096, d = 128 in
float32 as a fraction of the matmul throughput (4 n² d FLOPs: the logits and the weighted sum),
and a table of time and memory per field evaluation against n and d, for the dense and the
blocked evaluation (``particles/blocked.py``); writes the plot ``benchmarks/scaling.png``.

Memory is what the compiled evaluation allocates besides its input: XLA's ``memory_analysis()``
(temporaries + output). On CPU the dense path runs as one fused kernel whose n × n logits XLA does
not list among its buffers, so for the dense path the n² logits are added (measured process
memory agrees: see ``rss_check``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import machine as _machine
import numpy as np

import attnflow as af
from attnflow.particles import blocked

HERE = os.path.dirname(os.path.abspath(__file__))
EVALS_PER_UNIT_TIME = 40  # RK4 at dt = 0.1: 4 evaluations per step, 10 steps per unit time


def machine() -> str:
    return _machine.describe()


def best_time(fn, *args, repeat: int = 3, budget: float = 10.0) -> float:
    """Best wall seconds of ``fn(*args)`` over ``repeat`` calls after one warm-up (compile) call,
    fewer when the calls are long (at most ``budget`` seconds of timed calls)."""
    jax.block_until_ready(fn(*args))
    best, spent = np.inf, 0.0
    for _ in range(repeat):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        dt = time.perf_counter() - t
        best, spent = min(best, dt), spent + dt
        if spent > budget:
            break
    return best


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def roofline(rounds: int = 5) -> dict:
    """f32 matmul (4096³) and fused exp throughput, and the SA field at n = 4096, d = 128, float32,
    default (blocked at this size) and dense.

    The four are timed in turn, ``rounds`` times, and each keeps its best time: a machine shared
    with other work then slows all of them alike rather than one.
    """
    size, n, d = 4096, 4096, 128
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.float32)
    e = jax.random.normal(jax.random.key(1), (1 << 24,), jnp.float32)
    x = af.init.uniform(2, n, d, dtype="float32")
    cases = {
        "matmul": (jax.jit(lambda a: a @ a), a),
        # the sum is fused with the exponentials, so nothing is written back: compute-bound
        "exp": (jax.jit(lambda e: jnp.sum(jnp.exp(e))), e),
        "default": (field_fn("sa", "auto"), x),
        "dense": (field_fn("sa", None), x),
    }
    best = {}
    for name, (fn, arg) in cases.items():
        jax.block_until_ready(fn(arg))
        best[name] = np.inf
    for _ in range(rounds):
        for name, (fn, arg) in cases.items():
            best[name] = min(best[name], _timed(fn, arg))
    matmul = 2 * size**3 / best["matmul"]
    flops = 4 * n * n * d  # the logits and the weighted sum, two n×n×d products
    out = dict(matmul_flops=matmul, exp_per_s=e.size / best["exp"])
    for name in ("default", "dense"):
        t = best[name]
        out[name] = dict(ms=t * 1e3, gflops=flops / t / 1e9, fraction=flops / t / matmul)
    return out


def field_fn(model: str, block):
    """A jitted drift of one configuration: SA, or USA in the rescaled time."""

    def f(x):
        beta = jnp.asarray(1.0, x.dtype)
        field = af.SA(beta, block=block) if model == "sa" else af.USA(beta, time="rescaled", block=block)
        return field(0.0, x)

    return jax.jit(f)


def memory_bytes(fn, x, dense: bool) -> int:
    """Bytes the compiled evaluation allocates besides its input (see the module docstring)."""
    stats = fn.lower(x).compile().memory_analysis()
    total = stats.temp_size_in_bytes + stats.output_size_in_bytes
    n = x.shape[0]
    logits = n * n * x.dtype.itemsize
    if dense and stats.temp_size_in_bytes < logits:
        total += logits
    return int(total)


def _row(n, d, path, t, mem) -> dict:
    print(
        f"  n = {n:>6}  d = {d:>3}  {path:<7}  {t * 1e3:10.2f} ms   "
        f"{EVALS_PER_UNIT_TIME * t:9.2f} s/unit time   {mem / 2**20:9.1f} MiB",
        flush=True,
    )
    return dict(n=n, d=d, path=path, s=t, unit_s=EVALS_PER_UNIT_TIME * t, bytes=mem)


def scaling(ns, ds, dtype: str = "float64", repeat: int = 3, dense_max: int = 10_000) -> list[dict]:
    """Time and memory of one SA evaluation per (n, d), blocked (n ≥ 10³) and dense (n ≤ dense_max)."""
    rows = []
    for d in ds:
        for n in ns:
            x = af.init.uniform(3, n, d, dtype=dtype)
            for path, block in (("dense", None), ("blocked", blocked.tile_side(n))):
                if (path == "dense" and n > dense_max) or (path == "blocked" and n < 1000):
                    continue
                fn = field_fn("sa", block)
                mem = memory_bytes(fn, x, dense=path == "dense")
                rows.append(_row(n, d, path, best_time(fn, x, repeat=repeat), mem))
    return rows


def large_n(n: int = 100_000, d: int = 3, steps: int = 3) -> dict:
    """SA and USA (rescaled time) at n = 10⁵, d = 3: one float64 evaluation each (after a first,
    compiling one), then ``steps`` RK4 steps of USA in float32 through ``af.simulate``."""
    x = af.init.uniform(4, n, d)
    out = {}
    for model in ("sa", "usa"):
        fn = field_fn(model, "auto")
        mem = memory_bytes(fn, x, dense=False)
        t = time.perf_counter()
        v = jax.block_until_ready(fn(x))
        first = time.perf_counter() - t
        t = time.perf_counter()
        jax.block_until_ready(fn(x))
        out[model] = dict(s=time.perf_counter() - t, first_s=first, bytes=mem, finite=bool(jnp.all(jnp.isfinite(v))))
    dt = 0.1
    t = time.perf_counter()
    sol = af.simulate(af.USA(1.0, time="rescaled"), x.astype(jnp.float32), steps * dt, solver="rk4", dt=dt)
    jax.block_until_ready(sol.x_final)
    out["rk4"] = dict(
        steps=steps,
        s=time.perf_counter() - t,
        on_sphere=float(jnp.max(jnp.abs(jnp.linalg.norm(sol.x_final, axis=-1) - 1.0))),
    )
    return out


_RSS_CODE = """
import sys, jax, attnflow as af
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
n, block = int(sys.argv[1]), (None if sys.argv[2] == "none" else int(sys.argv[2]))
x = af.init.uniform(0, n, 3)
f = jax.jit(lambda y: af.SA(1.0, block=block)(0.0, y))
jax.block_until_ready(f(x))
with open("/proc/self/clear_refs", "w") as g:  # restart the peak (VmHWM) from the current RSS
    g.write("5")
before = status("VmRSS")
jax.block_until_ready(f(x))
print(status("VmHWM") - before)
"""


def rss_check(n: int = 8192) -> dict:
    """Peak process memory of one SA evaluation (d = 3, float64) above the memory before it, dense and
    blocked, each in a fresh process (Linux: /proc/self/status). A rise below the allocator's reuse of
    freed pages can read as a few negative KiB; the caller prints such values as < 1 MiB."""
    out = {}
    for name, block in (("dense", "none"), ("blocked", str(blocked.tile_side(n)))):
        res = subprocess.run(
            [sys.executable, "-c", _RSS_CODE, str(n), block], capture_output=True, text=True, check=True
        )
        out[name] = int(res.stdout.split()[-1])
    return out


def plot(rows: list[dict], path: str, big: dict | None = None) -> None:
    """Time and memory per SA evaluation against n: one colour per d, dashed dense, solid blocked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ds = sorted({r["d"] for r in rows})
    colors = dict(zip(ds, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    styles = {"dense": ("--", "s"), "blocked": ("-", "o")}
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11.5, 4.6), constrained_layout=True)
    for d in ds:
        for name, (style, marker) in styles.items():
            sel = sorted((r for r in rows if r["d"] == d and r["path"] == name), key=lambda r: r["n"])
            if sel:
                ns = [r["n"] for r in sel]
                ax_t.plot(ns, [r["s"] for r in sel], style, marker=marker, color=colors[d])
                ax_m.plot(ns, [r["bytes"] / 2**20 for r in sel], style, marker=marker, color=colors[d])
    n_ref = np.array([1e3, 1e5])
    ref = [r["s"] for r in rows if r["n"] == 1000 and r["path"] == "blocked" and r["d"] == ds[0]]
    if ref:
        ax_t.plot(n_ref, ref[0] * (n_ref / 1e3) ** 2, ":", color="gray")
    ax_m.plot(np.array([1e2, 1e5]), 8 * np.array([1e2, 1e5]) ** 2 / 2**20, ":", color="gray")
    if big:
        ax_t.plot([100_000], [big["usa"]["s"]], "*", markersize=15, color=colors[ds[0]], markerfacecolor="none")
    ax_t.set_ylabel("seconds per evaluation")
    ax_t.set_title("time (×40 = seconds per unit of simulated time, RK4 dt = 0.1)", fontsize=10)
    ax_m.set_ylabel("MiB (temporaries + output)")
    ax_m.set_title("memory", fontsize=10)
    for ax in (ax_t, ax_m):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("number of particles n")
        ax.grid(True, which="major", alpha=0.3)
    handles = [Line2D([], [], color=colors[d], lw=2, label=f"d = {d}") for d in ds]
    handles += [
        Line2D([], [], color="k", linestyle=style, marker=marker, label=name)
        for name, (style, marker) in styles.items()
    ]
    ax_t.legend(
        handles=handles
        + [Line2D([], [], color="gray", linestyle=":", label="∝ n²")]
        + (
            [
                Line2D(
                    [],
                    [],
                    color=colors[ds[0]],
                    marker="*",
                    markersize=11,
                    linestyle="none",
                    markerfacecolor="none",
                    label="USA, rescaled time",
                )
            ]
            if big
            else []
        ),
        fontsize=8,
        loc="upper left",
    )
    ax_m.legend(
        handles=handles + [Line2D([], [], color="gray", linestyle=":", label="n × n float64 matrix")],
        fontsize=8,
        loc="upper left",
    )
    fig.suptitle("attnflow: one SA field evaluation, float64, 2-core CPU — dense vs blocked evaluation")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def integrators(n: int = 4096, d: int = 3, beta: float = 4.0, t1: float = 3.0) -> list[dict]:
    """Seconds per unit of simulated time of RK4 and AB4 (one evaluation per step) at large n, float64,
    31 saves on the dense grid, each with its error against RK4 at dt = 0.025 (the second of two
    runs timed: the first compiles)."""
    x0 = af.init.uniform(0, n, d)
    ts = np.linspace(0.0, t1, 31)
    field = af.SA(beta)
    ref = af.simulate(field, x0, t1, ts=ts, solver="rk4", dt=0.025, dense=True).xs
    rows = []
    for solver, dt in (("rk4", 0.1), ("ab4", 0.1), ("ab4", 0.05)):

        def once(solver=solver, dt=dt):
            return af.simulate(field, x0, t1, ts=ts, solver=solver, dt=dt, dense=True).xs.block_until_ready()

        xs = once()
        rows.append(dict(solver=solver, dt=dt, s_per_unit=_timed(once) / t1, error=float(jnp.max(jnp.abs(xs - ref)))))
    return rows


def run(quick: bool = False) -> None:
    print(f"machine: {machine()}")
    roof = roofline(rounds=3 if quick else 6)
    mm, ex = roof["matmul_flops"], roof["exp_per_s"]
    print(f"\nroofline: f32 matmul (4096³) {mm / 1e9:.0f} GFLOP/s, exp (fused sum of exp, f32) {ex / 1e9:.2f} G/s")
    for name in ("default", "dense"):
        r = roof[name]
        print(
            f"  SA field, n = 4096, d = 128, f32, {name:<7}: {r['ms']:6.1f} ms = {r['gflops']:5.0f} GFLOP/s "
            f"= {100 * r['fraction']:3.0f}% of matmul"
        )
    print(f"  (the 4096² exponentials alone need {4096**2 / ex * 1e3:.1f} ms at the measured exp rate)")

    print(
        f"\nscaling: one SA evaluation, float64 (per unit of simulated time: {EVALS_PER_UNIT_TIME} evaluations,"
        f" RK4 at dt = 0.1)"
    )
    rows = scaling((100, 1000, 10_000), (3, 32, 128), repeat=2 if quick else 3)
    big = None
    if not quick:
        big = large_n()
        rows.append(_row(100_000, 3, "blocked", big["sa"]["s"], big["sa"]["bytes"]))
        print("\nn = 10⁵, d = 3, float64 (blocked; the dense logits would take 80 GB)")
        for model, name in (("sa", "SA"), ("usa", "USA, rescaled time")):
            r = big[model]
            print(
                f"  {name:<19}: {r['s']:.2f} s per evaluation (first call, with compilation: {r['first_s']:.2f} s),"
                f" {r['bytes'] / 2**20:.1f} MiB, finite: {r['finite']}"
            )
        r = big["rk4"]
        print(
            f"  USA, rescaled time, float32, {r['steps']} RK4 steps of dt = 0.1 through af.simulate: "
            f"{r['s']:.1f} s with compilation = {r['s'] / (4 * r['steps']):.2f} s per evaluation "
            f"(max | |x_i| − 1 | = {r['on_sphere']:.1e})"
        )
        rows_i = integrators()
        base = rows_i[0]["s_per_unit"]
        print(
            "\nper unit of simulated time, SA n = 4096, d = 3, β = 4, float64, t ≤ 3 (error: max |x − x_ref| "
            "at 31 saves, ref RK4 dt = 0.025)"
        )
        for r in rows_i:
            print(
                f"  {r['solver']} dt = {r['dt']:<5}: {r['s_per_unit']:6.2f} s per unit time "
                f"({base / r['s_per_unit']:.1f}× rk4 dt = 0.1), error {r['error']:.1e}"
            )
        rss = rss_check()
        mib = {k: (f"{v / 2**20:.0f} MiB" if v >= 2**20 else "< 1 MiB") for k, v in rss.items()}
        print(
            f"\nmeasured peak process memory of one evaluation, n = 8192, d = 3, f64: dense {mib['dense']},"
            f" blocked {mib['blocked']} (the n² logits: {8192**2 * 8 / 2**20:.0f} MiB)"
        )
    out = os.path.join(HERE, "scaling.png")
    plot(rows, out, big)
    print(f"\nplot: {out}")


def main(argv=None) -> int:
    return _machine.script_main(run, __doc__, "n up to 10⁴ and fewer repeats (under a minute)", argv)


if __name__ == "__main__":
    sys.exit(main())
