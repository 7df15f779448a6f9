"""``attnflow fit``: fit the particle model to a transformer's token states per layer (``solvers/fitting.py``).

Reads the states as ``attnflow hist`` does ((layers, tokens, d) or (layers, prompts, tokens, d) in an .npz or
.npy, without unpickling), fits β, the layer times, QᵀK and V (``--model``, ``--heads``, ``--rank``,
``--causal``, ...), and writes a run directory through the store: config.toml (the command), summary.json
(the parameters and the errors), results.npz (named dimensions, ``af.load`` reads it) and two figures:
the error per layer against the identity map and the best linear map, and the fitted model's
inner-product histograms, run freely from layer 0, over the observed ones ([GLPR] Fig. 1 as ``hist``
draws it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .. import plots
from ..config import to_toml
from ..results import store

__all__ = ["main", "run_fit", "load_result", "is_fit_run", "replot"]

BINS = 64


def _histograms(x: np.ndarray) -> np.ndarray:
    """Counts of ⟨x_i, x_j⟩ per layer pooled over prompts: x (L, P, n, d) → (L, BINS)."""
    from ...particles.observables import inner_product_histogram

    return np.asarray(inner_product_histogram(x, BINS)).sum(axis=1).astype(np.int64)


def run_fit(states: np.ndarray, options: dict, *, path: str = "", progress: bool = False) -> dict:
    """The fit and everything the directory holds: ``{"result", "observed", "fitted", "edges", "options"}``."""
    from ...particles.observables import histogram_edges
    from ...solvers.fitting import fit
    from .states import normalize_states

    x = normalize_states(states, f"states file {path!r}" if path else "the states")
    result = fit(x, **options, progress=progress)
    rollout = _rollout(result, x)
    return {
        "result": result,
        "observed": _histograms(x),
        "fitted": _histograms(rollout),
        "edges": np.asarray(histogram_edges(BINS)),
        "options": options,
        "path": path,
        "shape": list(states.shape),
    }


def _rollout(result, x: np.ndarray) -> np.ndarray:
    """The fitted model run freely from layer 0 through every layer, (L, P, n, d)."""
    import jax.numpy as jnp

    from ...solvers.simulation import simulate

    times = np.concatenate([[0.0], np.cumsum(result.tau)])
    field = result.field()
    sol = simulate(field, jnp.asarray(x[0]), float(times[-1]), ts=times, solver="rk4", dt=float(np.min(result.tau)) / 8)
    return np.moveaxis(np.asarray(sol.xs), 1, 0)


def summarize(fitted: dict) -> dict:
    from ..run.runner import versions

    r = fitted["result"]
    return {
        "command": "fit",
        "states": fitted["path"],
        "shape": fitted["shape"],
        "model": r.model,
        "heads": r.heads,
        "qk": r.qk,
        "v": r.v,
        "causal": r.causal,
        "beta": r.beta,
        "tau": r.tau.tolist(),
        "layer_error": r.layer_error.tolist(),
        "identity_error": r.identity_error.tolist(),
        "linear_error": r.linear_error.tolist(),
        "rollout_error": r.rollout_error.tolist(),
        "mean_error": float(np.mean(r.layer_error)),
        "mean_identity_error": float(np.mean(r.identity_error)),
        "mean_linear_error": float(np.mean(r.linear_error)),
        "gain_over_identity": float(np.mean(r.identity_error) / np.mean(r.layer_error)),
        "gain_over_linear": float(np.mean(r.linear_error) / np.mean(r.layer_error)),
        "held_out_prompts": r.held_out,
        "final_loss": float(r.loss[-1]) if r.loss.size else None,
        "wall_time_s": float(r.wall_time_s),
        "versions": versions(),
    }


def arrays(fitted: dict) -> tuple[dict, dict]:
    r = fitted["result"]
    out = {
        "transition": np.arange(1, r.tau.size + 1),
        "tau": r.tau,
        "M": r.M,
        "V": r.V,
        "layer_error": r.layer_error,
        "identity_error": r.identity_error,
        "linear_error": r.linear_error,
        "rollout_error": r.rollout_error,
        "loss": r.loss,
        "edges": fitted["edges"],
        "histogram": fitted["observed"],
        "fitted_histogram": fitted["fitted"],
    }
    dims = {
        "transition": ["transition"],
        "tau": ["transition"],
        "M": ["head", "row", "column"],
        "V": ["head", "row", "column"],
        "layer_error": ["transition"],
        "identity_error": ["transition"],
        "linear_error": ["transition"],
        "rollout_error": ["transition"],
        "loss": ["iteration"],
        "edges": ["edge"],
        "histogram": ["layer", "bin"],
        "fitted_histogram": ["layer", "bin"],
    }
    return out, dims


def config_toml(fitted: dict) -> str:
    r, options = fitted["result"], fitted["options"]
    table = {
        "command": "fit",
        "states": fitted["path"],
        "shape": fitted["shape"],
        "beta": r.beta,
        **{k: v for k, v in options.items() if v is not None},
    }
    return to_toml(table).replace("# attnflow configuration", "# attnflow fit", 1)


def figures(run: dict) -> dict:
    """Per-layer errors against the baselines; the fitted model's histograms over the observed ones."""
    name = Path(run["states"]).name if run["states"] else None
    layers = np.arange(run["histogram"].shape[0])
    beta = float(f"{run['beta']:.4g}")
    return {
        "fit_errors": lambda p: plots.fit_errors(
            run["layer_error"],
            run["identity_error"],
            run["linear_error"],
            run["rollout_error"],
            beta=beta,
            model=run["model"],
            held_out=run["held_out_prompts"],
            source=name,
            path=p,
        ),
        "fit_histograms": lambda p: plots.layer_histograms(
            layers,
            run["edges"],
            run["histogram"],
            simulated=run["fitted_histogram"][None],
            sim_layers=layers,
            betas=[beta],
            start=0,
            model=f"fitted {run['model'].upper()}",
            source=name,
            path=p,
        ),
    }


def _figure_inputs(summary: dict, data: dict) -> dict:
    return {
        "states": summary.get("states", ""),
        "beta": float(summary["beta"]),
        "model": summary["model"],
        "held_out_prompts": int(summary.get("held_out_prompts", 0)),
        **{
            k: data[k]
            for k in (
                "layer_error",
                "identity_error",
                "linear_error",
                "rollout_error",
                "edges",
                "histogram",
                "fitted_histogram",
            )
        },
    }


def is_fit_run(run_dir) -> bool:
    """Whether ``run_dir`` was written by ``attnflow fit`` (its config.toml says command = "fit")."""
    return store.command_of(run_dir) == "fit"


def load_result(run_dir) -> dict:
    """The summary and arrays of an ``attnflow fit`` directory (read without unpickling)."""
    files = store.read_run(Path(run_dir))
    try:
        return {"summary": files.summary, "arrays": files.arrays, **_figure_inputs(files.summary, files.arrays)}
    except KeyError as err:
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow fit directory (no {err})") from None


def replot(run_dir, kinds=None) -> list[Path]:
    """Redraw the figures of an ``attnflow fit`` directory in place (``attnflow plot DIR``)."""
    from ..results.figures import select, write

    return write(Path(run_dir), select(figures(load_result(run_dir)), kinds))


def print_report(summary: dict, out: Path) -> None:
    from ..results.runs import format_number as num

    L = len(summary["layer_error"]) + 1
    where = f"on {summary['held_out_prompts']} held-out prompts" if summary["held_out_prompts"] else "in sample"
    print(
        f"fit: {summary['states']}: {L} layers, {summary['model'].upper()} with {summary['heads']} head(s), "
        f"QᵀK {summary['qk']}, V {summary['v']}{', causal' if summary['causal'] else ''}; "
        f"{summary['wall_time_s']:.1f} s"
    )
    taus = ", ".join(num(t) for t in summary["tau"])
    print(f"  β = {num(summary['beta'], 4)}, layer times τ = {taus}")
    print(
        f"  one layer ahead ({where}): mean squared error {summary['mean_error']:.3e}; identity "
        f"{summary['mean_identity_error']:.3e} ({num(summary['gain_over_identity'])}× larger), best linear map "
        f"{summary['mean_linear_error']:.3e} ({num(summary['gain_over_linear'])}×)"
    )
    print(f"results in {out}/")
    for p in sorted(Path(out).iterdir()):
        if p.suffix == ".png":
            print(f"  {p.name}")


def main(args) -> int:
    """``attnflow fit`` (arguments parsed by ``cli.build_parser``): every check before any work."""
    from ..results.target import check_target, output_path
    from .states import read_states

    if args.rank is not None and args.qk_identity:
        raise ValueError("--rank r and --qk-identity both set QᵀK: give one")
    options = dict(
        model=args.model,
        heads=args.heads,
        causal=args.causal,
        qk=args.rank if args.rank is not None else ("identity" if args.qk_identity else "full"),
        v="identity" if args.v_identity else "full",
        shared_tau=args.shared_tau,
        horizon=args.horizon,
        substeps=args.substeps,
        adam_steps=args.steps,
        lbfgs_steps=args.lbfgs_steps,
        seed=args.seed,
    )
    states, key, saved_shape = read_states(args.states, args.key)
    if states.shape[0] < 2:
        raise ValueError(f"states file {args.states!r} has {states.shape[0]} layer: fit needs at least 2")
    d = states.shape[-1]
    if args.rank is not None and args.rank > d:
        raise ValueError(f"--rank {args.rank} exceeds d = {d}")
    if args.horizon > states.shape[0] - 1:
        raise ValueError(f"--horizon {args.horizon} exceeds the {states.shape[0] - 1} layer transitions")
    stem = Path(args.states).stem or "states"
    out = output_path(args.out, os.path.join("runs", f"fit-{stem}"))
    check_target(out, overwrite=args.overwrite, flag="--overwrite", user=True)
    fitted = run_fit(states, options, path=args.states, progress=not args.quiet)
    fitted["shape"] = list(saved_shape)
    summary = summarize(fitted)
    arrs, dims = arrays(fitted)
    run = _figure_inputs(summary, arrs)
    store.write_run(
        out,
        config_toml(fitted),
        summary,
        arrs,
        None if args.no_plot else figures(run),
        dims=dims,
        overwrite=args.overwrite,
    )
    if args.json:
        print(json.dumps(store.jsonable(summary, "summary"), indent=2, allow_nan=False))
    else:
        print_report(summary, out)
    return 0
