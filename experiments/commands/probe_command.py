"""``attnflow probe``: a model's residual stream, read from a states file, measured layer by layer by ``af.probe``.

The library function and its result (``probe``, ``ProbeResult``) are ``experiments/run/probe_run.py``, the
measurements ``particles/probe.py``; here the command's files are read (``states``), every argument is checked
before any work, the run directory is written through ``ProbeResult.save``, and a probe run is read back and
redrawn (``attnflow plot DIR``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..results import store
from ..run.probe_run import bounded_real, figure_inputs, figure_writers, probe

__all__ = ["main", "is_probe_run", "load_result", "replot"]


# -- the run directory read back ------------------------------------------------------------------


def is_probe_run(run_dir) -> bool:
    """Whether ``run_dir`` was written by ``attnflow probe`` (its config.toml says command = "probe")."""
    return store.command_of(run_dir) == "probe"


def load_result(run_dir) -> dict:
    """The summary and arrays of an ``attnflow probe`` directory, as its figures take them."""
    files = store.read_run(Path(run_dir))
    if "layer" not in files.arrays or "beta" not in files.summary:
        raise ValueError(f"{str(run_dir)!r} is not a complete attnflow probe directory")
    return figure_inputs(files.summary, files.arrays)


def replot(run_dir, kinds=None) -> list[Path]:
    """Redraw the figures of an ``attnflow probe`` directory in place (``attnflow plot DIR``)."""
    from ..results.figures import select, write

    return write(Path(run_dir), select(figure_writers(load_result(run_dir)), kinds))


# -- the command ----------------------------------------------------------------------------------


def _print_report(summary: dict, out: Path) -> None:
    from ..results.runs import format_number as num

    def series(values):
        return ", ".join("–" if v is None else num(v, 3) for v in values)

    shape = summary["shape"]
    print(
        f"probe: {summary['states']}: {len(summary['layers'])} layers of shape {tuple(shape[1:])}; "
        f"β = {num(summary['beta'], 4)} ({'fitted' if summary['beta_source'] == 'fit' else 'given'}); "
        f"{summary['wall_time_s']:.1f} s"
    )
    for name in ("raw", "normed"):
        f = summary[name]
        if f["energy_monotone"] is None:
            verdict = f"trend undefined: {f['energy_monotone_undefined']}"
        else:
            verdict = "never decreases" if f["energy_monotone"] else "decreases somewhere"
        fraction = f["energy_monotone_fraction"]
        share = "" if fraction is None else f" (monotone in {100 * fraction:.0f} % of prompts)"
        print(f"  {name}: E_β {verdict}{share}; mean cosine {series(f['mean_inner_product'])}")
        if f["degenerate"]:
            print(f"    degenerate: {f['degenerate']}")
        print(f"    effective rank {series(f['effective_rank'])}; TwoNN dimension {series(f['intrinsic_dimension'])}")
        print(
            f"    kNN overlap (k = {summary['k']}, chance {num(summary['knn_chance'], 3)}) {series(f['knn_overlap'])}"
        )
    if summary["sink_rate"] is not None:
        print(f"  sink rate (ε = {summary['epsilon']:g}) per block {series(summary['sink_rate'])}")
    print(f"results in {out}/")
    for p in sorted(Path(out).iterdir()):
        if p.suffix == ".png":
            print(f"  {p.name}")


def _keys(path: str, key: str | None, attention_key: str | None) -> tuple[str | None, str | None]:
    """The states' and the attention's array names: ``--attention-key`` (default "attention" when the archive
    holds one); without ``--key``, the states are the one other array."""
    from .states import array_names

    names = array_names(path)
    if attention_key is not None and names is not None and attention_key not in names:
        raise ValueError(
            f"--attention-key {attention_key!r}: states file {path!r} has no such array; it holds {', '.join(sorted(names))}"
        )
    if attention_key is not None and names is None:
        raise ValueError(f"--attention-key {attention_key!r}: states file {path!r} is not an .npz archive of arrays")
    if attention_key is None and names and "attention" in names and key != "attention":
        attention_key = "attention"
    if key is None and attention_key is not None and names:
        others = [name for name in names if name != attention_key]
        key = others[0] if len(others) == 1 else None
    if key is not None and key == attention_key:
        raise ValueError(f"--key and --attention-key both name {key!r}: the states and the attention are two arrays")
    return key, attention_key


def main(args) -> int:
    """``attnflow probe`` (arguments parsed by ``cli.build_parser``): every check before any work."""
    from ..results.target import check_target, output_path
    from .states import parse_layers, read_attention, read_states

    beta = None if args.beta is None else bounded_real("--beta", args.beta, 0.0)
    delta = None if args.delta is None else bounded_real("--delta", args.delta, 0.0, 2.0)
    epsilon = None if args.epsilon is None else bounded_real("--epsilon", args.epsilon, 0.0, 1.0, strict=False)
    key, attention_key = _keys(args.states, args.key, args.attention_key)
    states, key, saved_shape = read_states(args.states, key)
    layers = parse_layers(args.layers, states.shape[0])
    attention = None
    if attention_key is not None:
        attention = read_attention(args.states, attention_key)
    x = states[:, 0] if len(saved_shape) == 3 else states
    stem = Path(args.states).stem or "states"
    out = output_path(args.out, os.path.join("runs", f"probe-{stem}"))
    check_target(out, overwrite=args.overwrite, flag="--overwrite", user=True)
    result = probe(
        x,
        attention=attention,
        beta=beta,
        delta=delta,
        k=args.k,
        epsilon=epsilon,
        layers=layers,
        progress=not args.quiet,
    )
    result.source = {"states": args.states, "key": key, "attention_key": attention_key}
    result.shape = tuple(saved_shape)
    summary = result.summary()
    result.save(out, overwrite=args.overwrite, figures=not args.no_plot)
    if args.json:
        print(json.dumps(store.jsonable(summary, "summary"), indent=2, allow_nan=False))
    else:
        _print_report(summary, out)
    return 0
