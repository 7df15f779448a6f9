"""``attnflow hist``: inner-product histograms of a transformer's token states, layer by layer.

[GLPR] Fig. 1 shows, for a trained transformer (ALBERT), the histogram of the pairwise inner
products ⟨x_i, x_j⟩ (i < j) of the token states after each layer, normalized to unit length as
layer norm does: they drift towards 1 as the tokens cluster. This module draws the same figure from
hidden states a user saves from any model, an array (layers, tokens, d) or (layers, batch, tokens, d)
in an ``.npz`` or ``.npy`` file, read without unpickling and checked from its header first.

With ``--simulate-from ℓ0`` it also starts the simulator from layer ℓ0's normalized states, with
Q = K = V = I (or any model the simulation keys of ``--set`` describe) and each inverse temperature
of ``--beta``, maps layer ℓ to time t = (ℓ − ℓ0)·τ (``--layer-time τ``), and compares the model's
later layers with the simulation at those times: the simulated histograms drawn over the model's,
and the Wasserstein distance W1 between the two distributions of inner products per layer. With batched states the
pairs of every prompt (within the prompt, never across prompts) are pooled, for the model and
for the simulation alike.

The output is a run directory written atomically by the store: config.toml (the command),
summary.json, results.npz (histograms with named dimensions) and the figures.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import plots
from ..config import KEYS, ConfigError, load_config, parse_override, to_toml
from ..results import store
from ..run import memory
from .states import layer_index, normalize_states, parse_layers, read_states

__all__ = [
    "pair_inner_products",
    "wasserstein1",
    "compute",
    "memory_parts",
    "check_memory",
    "load_result",
    "replot",
    "main",
]

MAX_BINS = 100_000

# Keys the states or the command itself fix: the rest of ``--set`` (model, solver, dt, rtol, atol,
# dtype, and the variant keys heads, mask, norm, ...) describes the simulation.
FIXED_KEYS = {
    "n": "the number of tokens comes from the states",
    "d": "d comes from the states",
    "beta": "give β with --beta",
    "t1": "times come from --layer-time",
    "save_times": "times come from --layer-time",
    "n_save": "times come from --layer-time",
    "seeds": "the start is layer ℓ0's states (one member per prompt)",
    "init": "the start is layer ℓ0's states",
    "init_file": "the start is layer ℓ0's states",
    "histogram_bins": "give the bins with --bins",
    "experiment": "hist is its own command",
}
_SIM_KEYS = ("model", "n", "d", "beta", "seeds", "seed", "t1", "save_times", "solver", "dt", "rtol", "atol", "dtype")
_IGNORED_KEYS = (
    "angles",
    "rho",
    "cap_angle",
    "n_init_clusters",
    "spread",
    "save_spacing",
    "log_decades",
    "save_states",
    "statistics",
    "stop_when_clustered",
    "delta",
    "memory_gb",
    "progress",
    "circle",
)


# -- pair statistics ------------------------------------------------------------------------------


def pair_inner_products(x: np.ndarray) -> np.ndarray:
    """⟨x_i, x_j⟩ over the pairs i < j of each configuration of x (..., n, d), pooled and sorted,
    clipped to [−1, 1] (rounding can leave ±1 by a few ulps, as ``inner_product_histogram`` assumes)."""
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[-2]
    iu, ju = np.triu_indices(n, 1)
    g = np.einsum("...id,...jd->...ij", x, x)[..., iu, ju]
    return np.sort(np.clip(g, -1.0, 1.0).ravel())


def memory_parts(layers: int, prompts: int, n: int, *, simulated: int = 0) -> dict[str, int]:
    """The bytes ``compute`` holds by what holds them for ``layers`` layers of (prompts, n) tokens, with
    ``simulated`` simulated layers (β values × later layers; 0 without a simulation): the sorted pair inner
    products of every layer, kept for the mean and the distances W1 (n(n − 1)/2 each, their sort's copy), one
    layer's n×n Gram matrix with its pair indices, and the histograms' pairwise arrays of all layers at once."""
    plural = "s" if prompts != 1 else ""
    pairs = n * (n - 1) // 2
    return {
        f"the pairwise inner products of every layer [{layers + simulated} layers, {prompts} prompt{plural}, "
        f"{n} tokens]": 8 * 2 * (layers + simulated) * prompts * pairs,
        f"one layer's n×n Gram matrix and its pair indices [{n} tokens]": 8 * prompts * (n * n + 3 * pairs),
        f"the histograms' pairwise arrays [{layers} layers at once, {n} tokens]": 8 * 2 * layers * prompts * n * n,
    }


def check_memory(layers: int, prompts: int, n: int, *, simulated: int = 0) -> None:
    """Refuse (one InputError line naming the largest part, ``machine.check_parts``) a ``hist`` whose pairwise
    arrays, which grow as n², cannot fit in the memory, before any is allocated."""
    from ...solvers import machine

    parts = memory_parts(layers, prompts, n, simulated=simulated)
    machine.check_parts(
        parts,
        "hist",
        "fewer tokens per prompt (the pairs grow as n²), or fewer layers (--layers) or prompts",
        on_device=list(parts)[2:],
    )


def wasserstein1(a: np.ndarray, b: np.ndarray) -> float:
    """W1 between two empirical distributions with the same number of atoms, given sorted:
    the mean of |a_(k) − b_(k)| (the optimal coupling of sorted samples on the line)."""
    return float(np.mean(np.abs(np.asarray(a) - np.asarray(b))))


def _histograms(x: np.ndarray, bins: int) -> np.ndarray:
    """Counts of ⟨x_i, x_j⟩ per layer, pooled over prompts: x (L, B, n, d) → (L, bins)."""
    from ...particles.observables import inner_product_histogram

    return np.asarray(inner_product_histogram(x, bins)).sum(axis=1).astype(np.int64)


def _total_variation(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """½ Σ |p − q| of two histograms (counts) along the last axis, each normalized to sum 1."""
    p = p / p.sum(axis=-1, keepdims=True)
    q = q / q.sum(axis=-1, keepdims=True)
    return 0.5 * np.abs(p - q).sum(axis=-1)


# -- the simulation -------------------------------------------------------------------------------


def _betas(text: str) -> tuple[float, ...]:
    try:
        _, value = parse_override(f"beta={text}")
        return KEYS["beta"].coerce(value)
    except ConfigError as err:
        raise ValueError(f"--beta {text}: {err}") from None


def simulation_config(sets, betas, n: int, d: int, ts: np.ndarray, batch: int):
    """The run configuration of the simulation: ``--set`` keys on top of the states' n, d, the times and β."""
    for text in sets:
        name = text.partition("=")[0].strip()
        if name in FIXED_KEYS:
            raise ValueError(f"--set {text}: hist sets {name} itself ({FIXED_KEYS[name]})")
        if name in _IGNORED_KEYS:
            raise ValueError(f"--set {text}: {name} has no effect on hist's simulation")
    base = {
        "n": n,
        "d": d,
        "beta": list(betas),
        "seeds": batch,
        "t1": float(ts[-1]),
        "save_times": [float(t) for t in ts],
        "save_states": "yes",
        "progress": True,
    }
    try:
        return load_config(None, list(sets), base=base)
    except ConfigError as err:
        raise ValueError(str(err)) from None


def simulate_layers(x0: np.ndarray, config, ts: np.ndarray, *, progress: bool) -> tuple[np.ndarray, int]:
    """States at ``ts`` from x0 (B, n, d) for each β of ``config``: (len(β), B, len(ts), n, d), and the steps."""
    import jax
    import jax.numpy as jnp

    from ...solvers import simulate
    from ..run import field_config as fields

    betas = np.asarray(config.beta, dtype=float)
    batch = x0.shape[0]
    members = len(betas) * batch
    field = fields.build_field(config, jnp.asarray(np.repeat(betas, batch)), np.full(members, config.seed), config.d[0])
    arguments = fields.simulate_arguments(
        config,
        jnp.asarray(ts),
        progress="hist: simulate" if progress else False,
        key=jax.random.key(config.seed) if config.noise > 0 else None,
    )
    sol = simulate(field, jnp.asarray(np.tile(x0, (len(betas), 1, 1)), dtype=config.dtype), config.t1, **arguments)
    xs = np.asarray(sol.xs, dtype=np.float64)
    return xs.reshape((len(betas), batch) + xs.shape[1:]), int(round(float(np.mean(np.asarray(sol.steps)))))


# -- the command ----------------------------------------------------------------------------------


@dataclass
class HistResult:
    """What ``attnflow hist`` computed: the model's histograms and, optionally, the simulation's."""

    states: str
    key: str | None
    shape: tuple
    layers: np.ndarray  # (L,) the layers shown
    edges: np.ndarray  # (bins + 1,)
    counts: np.ndarray  # (L, bins) the model's histograms, pooled over prompts
    mean_inner_product: np.ndarray  # (L,)
    # the simulation: from_layer, layer_time, config, layers (K,), times (K,), counts (nβ, K, bins),
    # w1 and tv (nβ, K), steps
    sim: dict | None = None
    wall_time_s: float = 0.0


def compute(
    states: np.ndarray,
    *,
    path: str = "",
    key: str | None = None,
    shape=None,
    layers=None,
    bins: int = 64,
    simulate_from: int | None = None,
    layer_time: float = 1.0,
    config=None,
    progress: bool = False,
) -> HistResult:
    """Histograms of the states (L, B, n, d) at ``layers`` and, from layer ``simulate_from`` on, those of
    the simulation ``config`` describes (one member per β and prompt), layer ℓ at time
    t = (ℓ − simulate_from)·layer_time."""
    from ...particles.observables import histogram_edges

    start = time.perf_counter()
    label = f"states file {path!r}" if path else "the states"
    layers = np.arange(states.shape[0]) if layers is None else np.asarray(layers)
    simulated = 0 if simulate_from is None else len(config.beta) * int(np.sum(layers >= simulate_from))
    check_memory(len(layers), states.shape[1], states.shape[2], simulated=simulated)
    x = normalize_states(states, label)
    counts = _histograms(x[layers], bins)
    pairs = [pair_inner_products(x[l]) for l in layers]
    result = HistResult(
        states=path,
        key=key,
        shape=tuple(states.shape if shape is None else shape),
        layers=layers,
        edges=np.asarray(histogram_edges(bins)),
        counts=counts,
        mean_inner_product=np.array([p.mean() for p in pairs]),
    )
    if simulate_from is not None:
        later = layers >= simulate_from
        sim_layers = layers[later]
        ts = (sim_layers - simulate_from) * float(layer_time)
        if ts[0] != 0.0:
            ts = np.concatenate([[0.0], ts])  # simulate() saves from t0; the start is dropped below
        xs, steps = simulate_layers(x[simulate_from], config, ts, progress=progress)
        xs = xs[:, :, -len(sim_layers) :]  # (nβ, B, K, n, d)
        xs = normalize_states(xs.reshape((-1,) + xs.shape[2:]), "the simulation").reshape(*xs.shape)
        sim_counts = np.stack([_histograms(np.moveaxis(xs[i], 1, 0), bins) for i in range(xs.shape[0])])
        model_pairs = [p for p, keep in zip(pairs, later) if keep]
        w1 = np.array(
            [
                [wasserstein1(pair_inner_products(xs[i, :, k]), model_pairs[k]) for k in range(len(sim_layers))]
                for i in range(xs.shape[0])
            ]
        )
        result.sim = {
            "from_layer": int(simulate_from),
            "layer_time": float(layer_time),
            "config": config,
            "layers": sim_layers,
            "times": (sim_layers - simulate_from) * float(layer_time),
            "counts": sim_counts,
            "w1": w1,
            "tv": _total_variation(sim_counts, counts[later][None]),
            "steps": steps,
        }
    result.wall_time_s = time.perf_counter() - start
    return result


def _sim_summary(result: HistResult) -> dict | None:
    sim = result.sim
    if sim is None:
        return None
    config = sim["config"]
    after = sim["layers"] > sim["from_layer"]
    mean_w1 = sim["w1"][:, after].mean(axis=1) if after.any() else np.zeros(len(config.beta))
    return {
        "from_layer": sim["from_layer"],
        "layer_time": sim["layer_time"],
        "model": config.model,
        "solver": config.solver,
        "beta": list(config.beta),
        "layers": sim["layers"].tolist(),
        "times": sim["times"].tolist(),
        "w1": sim["w1"].tolist(),
        "tv": sim["tv"].tolist(),
        "mean_w1": mean_w1.tolist(),
        "best_beta": float(config.beta[int(np.argmin(mean_w1))]),
        "steps": sim["steps"],
    }


def summarize(result: HistResult) -> dict:
    """summary.json (and ``--json``): the input, the layers, and the distances of the simulation."""
    from ..run.runner import versions

    return {
        "command": "hist",
        "states": result.states,
        "key": result.key,
        "shape": list(result.shape),
        "layers": result.layers.tolist(),
        "bins": int(result.counts.shape[1]),
        "pairs_per_layer": int(result.counts[0].sum()),
        "mean_inner_product": result.mean_inner_product.tolist(),
        "simulation": _sim_summary(result),
        "wall_time_s": float(result.wall_time_s),
        "versions": versions(),
    }


def arrays(result: HistResult) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """results.npz: histograms with named dimensions (layer, bin; beta, sim_layer for the simulation)."""
    out = {
        "layer": result.layers,
        "edges": result.edges,
        "histogram": result.counts,
        "mean_inner_product": result.mean_inner_product,
    }
    dims = {"layer": ["layer"], "edges": ["edge"], "histogram": ["layer", "bin"], "mean_inner_product": ["layer"]}
    if result.sim is not None:
        sim = result.sim
        out.update(
            beta=np.asarray(sim["config"].beta, dtype=float),
            sim_layer=sim["layers"],
            sim_time=sim["times"],
            sim_histogram=sim["counts"],
            w1=sim["w1"],
            tv=sim["tv"],
        )
        dims.update(
            beta=["beta"],
            sim_layer=["sim_layer"],
            sim_time=["sim_layer"],
            sim_histogram=["beta", "sim_layer", "bin"],
            w1=["beta", "sim_layer"],
            tv=["beta", "sim_layer"],
        )
    return out, dims


def config_toml(result: HistResult) -> str:
    """config.toml: the command (the states, the layers, the bins) and the simulation's resolved keys."""
    top = {
        "command": "hist",
        "states": result.states,
        "shape": list(result.shape),
        "bins": int(result.counts.shape[1]),
        "layers": result.layers.tolist(),
    }
    if result.key is not None:
        top["key"] = result.key
    text = to_toml(top).replace("# attnflow configuration", "# attnflow hist", 1)
    if result.sim is not None:
        config = result.sim["config"].to_dict()
        # the keys a simulation depends on, and any other key --set changed (heads, mask, ...)
        keep = [
            k
            for k, v in config.items()
            if k in _SIM_KEYS
            or (k not in FIXED_KEYS and k not in _IGNORED_KEYS and KEYS[k].coerce(v) != KEYS[k].default)
        ]
        sim = {
            "from_layer": result.sim["from_layer"],
            "layer_time": result.sim["layer_time"],
            **{k: config[k] for k in keep},
        }
        text += "\n[simulation]\n" + to_toml(sim).split("\n", 1)[1]
    return text


def figures(result: HistResult) -> dict:
    """The figure writers: histograms per layer ([GLPR] Fig. 1) and, with a simulation, the distances."""
    sim = result.sim
    common = {}
    if sim is not None:
        config = sim["config"]
        common = dict(
            simulated=sim["counts"],
            sim_layers=sim["layers"],
            betas=list(config.beta),
            start=sim["from_layer"],
            model=config.model,
        )
    name = Path(result.states).name if result.states else None
    writers = {
        "histograms": lambda p: plots.layer_histograms(
            result.layers, result.edges, result.counts, source=name, path=p, **common
        )
    }
    if sim is not None:
        writers["distance"] = lambda p: plots.layer_distances(
            sim["layers"],
            sim["w1"],
            list(sim["config"].beta),
            start=sim["from_layer"],
            layer_time=sim["layer_time"],
            model=sim["config"].model,
            source=name,
            path=p,
        )
    return writers


def is_hist_run(run_dir) -> bool:
    """Whether ``run_dir`` was written by ``attnflow hist`` (its config.toml says command = "hist")."""
    return store.command_of(run_dir) == "hist"


def load_result(run_dir) -> HistResult:
    """A HistResult back from the directory ``attnflow hist`` wrote (arrays read without unpickling)."""
    run_dir = Path(run_dir)
    files = store.read_run(run_dir)
    table, summary, data = files.config, files.summary, files.arrays
    try:
        result = HistResult(
            states=table["states"],
            key=table.get("key"),
            shape=tuple(table["shape"]),
            layers=data["layer"],
            edges=data["edges"],
            counts=data["histogram"],
            mean_inner_product=data["mean_inner_product"],
            wall_time_s=float(summary.get("wall_time_s", 0.0)),
        )
        if "simulation" in table:
            sim = dict(table["simulation"])
            start, tau = sim.pop("from_layer"), sim.pop("layer_time")
            result.sim = {
                "from_layer": int(start),
                "layer_time": float(tau),
                "config": load_config(sim),
                "layers": data["sim_layer"],
                "times": data["sim_time"],
                "counts": data["sim_histogram"],
                "w1": data["w1"],
                "tv": data["tv"],
                "steps": (summary.get("simulation") or {}).get("steps", 0),
            }
    except (KeyError, TypeError, ConfigError) as err:
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow hist directory (no {err})") from None
    return result


def replot(run_dir, kinds=None) -> list[Path]:
    """Redraw the figures of an ``attnflow hist`` directory in place (``attnflow plot DIR``)."""
    from ..results.figures import select, write

    return write(Path(run_dir), select(figures(load_result(run_dir)), kinds))


def print_report(result: HistResult, out: Path) -> None:
    shape = result.shape
    L, n, d = shape[0], shape[-2], shape[-1]
    prompts = f" × {shape[1]} prompts" if len(shape) == 4 else ""
    key = "" if result.key is None else f" [{result.key}]"
    print(
        f"hist: {result.states}{key}: {L} layers{prompts} × {n} tokens, d = {d}; "
        f"{len(result.layers)} layers shown, {result.counts.shape[1]} bins; {result.wall_time_s:.1f} s"
    )
    s = _sim_summary(result)
    if s is not None:
        print(
            f"  simulation from layer {s['from_layer']} ({s['model']}, {s['solver']}), layer ℓ at "
            f"t = (ℓ − {s['from_layer']})·{s['layer_time']:g}"
        )
        for beta, w in zip(s["beta"], s["mean_w1"]):
            mark = "  ← closest" if len(s["beta"]) > 1 and beta == s["best_beta"] else ""
            print(f"  β = {beta:g}: W1(model, simulation) = {w:.4g} (mean over the later layers){mark}")
    print(f"results in {out}/")
    for p in sorted(Path(out).iterdir()):
        if p.suffix == ".png":
            print(f"  {p.name}")


def main(args) -> int:
    """``attnflow hist`` (arguments parsed by ``cli.build_parser``): every check before any work."""
    from ..results.target import check_target, output_path

    simulating = args.simulate_from is not None
    if not simulating:
        given = [
            flag
            for flag, value in (("--beta", args.beta), ("--layer-time", args.layer_time), ("--set", args.set or None))
            if value
        ]
        if given:
            raise ValueError(f"{given[0]} applies to the simulation: add --simulate-from LAYER")
    elif args.beta is None:
        raise ValueError("--simulate-from needs --beta B (or B1,B2,... to compare several)")
    if args.bins > MAX_BINS:
        raise ValueError(f"--bins {args.bins}: at most {MAX_BINS} bins")
    layer_time = 1.0
    if args.layer_time is not None:
        try:
            layer_time = float(args.layer_time)
        except ValueError:
            layer_time = float("nan")
        if not (math.isfinite(layer_time) and layer_time > 0):
            raise ValueError(
                f"--layer-time expects a finite number > 0 (the time of one layer), got {args.layer_time!r}"
            )
    betas = _betas(args.beta) if simulating else ()
    states, key, saved_shape = read_states(args.states, args.key)
    n_layers, batch, n, d = states.shape
    layers = parse_layers(args.layers, n_layers)
    config = start = None
    if simulating:
        start = layer_index(args.simulate_from, n_layers, "--simulate-from")
        later = layers[layers > start]
        if later.size == 0:
            raise ValueError(
                f"--simulate-from {start}: no layer after it to compare with "
                f"(the layers shown end at {layers[-1]}; the states have {n_layers})"
            )
        ts = np.concatenate([[0.0], (later - start) * layer_time])
        config = simulation_config(args.set, betas, n, d, ts, batch)
        if args.quiet:
            config = config.replace(progress=False)
        try:
            memory.check_fits(config)
        except ConfigError as err:
            raise ValueError(str(err)) from None
    stem = Path(args.states).stem or "states"
    out = output_path(args.out, os.path.join("runs", f"hist-{stem}"))
    check_target(out, overwrite=args.overwrite, flag="--overwrite", user=True)
    normalize_states(states, f"states file {args.states!r}")  # zero tokens are refused before any work
    result = compute(
        states,
        path=args.states,
        key=key,
        shape=saved_shape,
        layers=layers,
        bins=args.bins,
        simulate_from=start,
        layer_time=layer_time,
        config=config,
        progress=bool(config is not None and config.progress),
    )
    summary = summarize(result)
    arrs, dims = arrays(result)
    store.write_run(
        out,
        config_toml(result),
        summary,
        arrs,
        None if args.no_plot else figures(result),
        dims=dims,
        overwrite=args.overwrite,
    )
    if args.json:
        print(json.dumps(store.jsonable(summary, "summary"), indent=2, allow_nan=False))
    else:
        print_report(result, out)
    sys.stdout.flush()
    return 0
