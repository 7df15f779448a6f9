"""Train a family of small byte-level transformers and compare every member with the particle model.

Run from the repository root::

    python docs/examples/transformer_family.py            # the family of docs/trained.md (≈ 70 min on 2 CPU cores)
    python docs/examples/transformer_family.py --quick    # four tiny members, about a minute (CI)

The members are the model of ``train_small_transformer.py`` (byte-level, trained on Python's standard
library, nothing downloaded): a depth sweep at a base configuration (pre-LN, with the MLP, 4 heads; 2, 4, 8
and 12 blocks), one-factor variations of it at 4 blocks (post-LN, no layer norm in the blocks, no MLP, one
head) and the two other normalizations at 8 blocks. Every member is trained with the same sizes, seed and
batches. For each, on the same held-out prompts, the driver saves the residual stream (layers, prompts,
tokens, d) and the attention weights (blocks, prompts, heads, tokens, tokens) in ``models/NAME/states.npz``
and runs on it:

* ``attnflow fit --causal``: the particle model (causal SA, one head, full QᵀK and V, a time per layer)
  fitted to the layers; its error one layer ahead from the observed states (teacher-forced) and run freely
  from layer 0, against the identity map; the fraction of each layer's motion it explains,
  1 − error / identity error;
* ``attnflow probe --beta 1 --delta 0.1``: per layer of the tokens' directions the interaction energy E_β
  (β = 1 for every member, so that they compare) and whether it never decreases, as along the attention
  flow; the mean inner product, the fraction of pairs with ⟨x_i, x_j⟩ ≥ 0.9, the effective rank, the
  intrinsic dimension, the neighbours kept from layer to layer; per block the attention sinks (the heads
  whose mean attention to the first token exceeds 0.3);
* from the attention weights, the effective number of tokens a token attends to (``af.effective_tokens``).

It writes, in ``--out`` (default runs/transformer-family): ``family.json`` (every member's settings,
losses, times and measurements), ``family.md`` (the table), the figures ``energy.png``, ``clustering.png``,
``attention.png`` and ``fit.png``, and ``models/NAME/`` (settings.json, states.npz, fit/, probe/).
``--docs DIR`` copies the figures and family.json there too. A second run into the same ``--out`` reuses
what each member's settings.json records (training, fit, probe) when made with the same settings, and does
only what is missing. Deterministic on a given machine and Python (the corpus is the standard library of
the Python that runs it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_small_transformer, beside this file
import train_small_transformer as tst  # noqa: E402

# A depth sweep of the base (pre-LN, MLP, 4 heads), one-factor variations of it at 4 blocks, and the two other
# normalizations at 8 blocks as well (whether the attention sinks and the clustering they change grow with depth)
BASE = {"norm": "pre", "mlp": True, "heads": 4}
FULL_DEPTHS = (2, 4, 8, 12)
VARIATIONS = (
    ("post", {"norm": "post"}, (4, 8)),
    ("nonorm", {"norm": "none"}, (4, 8)),
    ("nomlp", {"mlp": False}, (4,)),
    ("1head", {"heads": 1}, (4,)),
)
FULL = {"d_model": 64, "context": 64, "batch": 16, "steps": 600, "warmup": 60, "corpus_mb": 2.0, "prompts": 10}
QUICK = {"d_model": 32, "context": 32, "batch": 8, "steps": 40, "warmup": 5, "corpus_mb": 0.3, "prompts": 5}
FIT_FULL = ["--steps", "100", "--lbfgs-steps", "30", "--substeps", "4"]
FIT_QUICK = ["--steps", "10", "--lbfgs-steps", "0", "--substeps", "2"]
DELTA = 0.1  # pairs with ⟨x_i, x_j⟩ ≥ 1 − δ count as clustered
BETA = 1.0  # the β of the energy E_β: one for every member, so that their energies compare
PROBE = ["--beta", str(BETA), "--delta", str(DELTA)]


def members(quick: bool) -> list[dict]:
    """The family: a name and the settings of each member."""
    if quick:  # every factor once, at depths 1 and 2
        chosen = [
            ("pre-1", {}, 1),
            ("pre-2", {}, 2),
            ("post-2", {"norm": "post", "heads": 1}, 2),
            ("nonorm-2", {"norm": "none", "mlp": False}, 2),
        ]
    else:
        chosen = [(f"pre-{L}", {}, L) for L in FULL_DEPTHS[:3]]
        chosen += [(f"{label}-{L}", change, L) for L in (4, 8) for label, change, depths in VARIATIONS if L in depths]
        chosen += [(f"pre-{L}", {}, L) for L in FULL_DEPTHS[3:]]
    return [{"name": name, "blocks": blocks, **BASE, **change} for name, change, blocks in chosen]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Train a family of small transformers (depth, normalization, MLP, heads) and compare each "
        "with the particle model: fit, energy, clustering, attention sinks.",
    )
    p.add_argument("--out", default="runs/transformer-family", help="output directory [%(default)s]")
    p.add_argument("--quick", action="store_true", help="four tiny members, about a minute (CI)")
    p.add_argument("--seed", type=int, default=0, help="seed of every member's initialization and batches [0]")
    p.add_argument("--steps", type=tst.positive_int, help="optimizer steps of every member [600; --quick: 40]")
    p.add_argument("--only", metavar="NAMES", help="a comma list of members to train (default: all)")
    p.add_argument("--no-fit", action="store_true", help="do not run attnflow fit")
    p.add_argument("--docs", metavar="DIR", help="also copy the figures and family.json to DIR")
    args = p.parse_args(argv)
    names = [m["name"] for m in members(args.quick)]
    if args.only is not None:
        unknown = [n for n in args.only.split(",") if n not in names]
        if unknown:
            p.error(f"--only: no member {unknown[0]!r}; the members are {', '.join(names)}")
    return args


def check_output_directory(out: Path) -> None:
    """Refuse an --out holding anything but an earlier run of this script (whose files are replaced)."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: --out {out} is a file, not a directory")
    ours = {"family.json", "family.md", "models", "energy.png", "clustering.png", "attention.png", "fit.png"}
    if out.is_dir() and any(out.iterdir()):
        others = sorted(p.name for p in out.iterdir() if p.name not in ours)
        if others or not ((out / "family.json").is_file() or (out / "models").is_dir()):
            what = ", ".join(others) if others else "and no family.json of an earlier run"
            raise SystemExit(f"error: --out {out} holds files this script did not write ({what}); choose another")


# -- measurements -----------------------------------------------------------------------------------


def attnflow_command(argv: list[str]) -> int:
    """An ``attnflow`` command, in this process."""
    from attnflow.experiments.commands import cli

    print("$ attnflow", " ".join(argv), flush=True)
    return cli.main(argv)


def probe_measures(summary: dict) -> dict:
    """From ``attnflow probe``'s summary.json: per layer of the tokens' directions (its "raw" family) the mean
    inner product, the clustered fraction, E_β, the effective rank, the intrinsic dimension and the neighbour
    overlap of consecutive layers; whether E_β never decreases; per block the sink rate and the first-token
    attention."""
    raw = summary["raw"]
    keys = ("mean_inner_product", "clustered_fraction", "energy", "effective_rank", "intrinsic_dimension")
    return {
        **{key: raw[key] for key in (*keys, "knn_overlap", "energy_monotone", "energy_monotone_fraction")},
        "sink_rate": summary["sink_rate"],
        "first_token_attention": summary["first_token_attention"],
        "first_token_norm_ratio": summary["first_token_norm_ratio"],
    }


def attention_measures(attention: np.ndarray) -> dict:
    """Per block, averaged over prompts, heads and the tokens after the first (which sees only itself): the
    effective number of tokens attended (the perplexity of a row, ``af.effective_tokens``)."""
    import attnflow as af

    effective = np.asarray(af.effective_tokens(attention))[..., 1:].mean(axis=(1, 2, 3))
    return {"effective_tokens": effective.tolist()}


def fit_measures(summary: dict) -> dict:
    layer, identity = np.asarray(summary["layer_error"]), np.asarray(summary["identity_error"])
    return {
        "beta": summary["beta"],
        "tau": summary["tau"],
        "layer_error": summary["layer_error"],
        "identity_error": summary["identity_error"],
        "linear_error": summary["linear_error"],
        "rollout_error": summary["rollout_error"],
        "explained": (1 - layer / identity).tolist(),
        "gain_over_identity": summary["gain_over_identity"],
        "gain_over_linear": summary["gain_over_linear"],
    }


# -- one member -------------------------------------------------------------------------------------


def train_member(member: dict, sizes: dict, args, corpus) -> dict:
    """Train one member, save its states and attention, run fit and probe on them: its entry of family.json.

    Each stage's result is kept in the member's settings.json as soon as it is done; a later run with the same
    sizes, seed and stage options reuses it instead of training (or fitting, or probing) again."""
    train_tokens, held_tokens, entropy = corpus
    out = Path(args.out) / "models" / member["name"]
    out.mkdir(parents=True, exist_ok=True)
    record = out / "settings.json"
    key = {**member, "sizes": sizes, "seed": args.seed}
    entry = json.loads(record.read_text()) if record.is_file() else {}
    if entry.get("key") != key or not (out / "states.npz").is_file():
        entry = {"key": key, **member, **train_and_export(member, sizes, args.seed, corpus, out)}
        record.write_text(json.dumps(entry, indent=2) + "\n")
    else:
        print(f"\n== {member['name']}: trained before ({record})", flush=True)
    with np.load(out / "states.npz") as z:
        attention = z["attention"]
    fit_options = FIT_QUICK if args.quick else FIT_FULL
    if not args.no_fit and entry.get("fit_options") != fit_options:
        start = time.perf_counter()
        argv = ["fit", str(out / "states.npz"), "--key", "states", "--causal", "--out", str(out / "fit")]
        rc = attnflow_command([*argv, "--overwrite", "--quiet", *fit_options])
        if rc != 0:
            raise SystemExit(f"error: attnflow fit exited with status {rc} on {member['name']}")
        entry["fit"] = fit_measures(json.loads((out / "fit" / "summary.json").read_text()))
        entry["fit_seconds"] = round(time.perf_counter() - start, 1)
        entry["fit_options"] = fit_options
    if entry.get("probe_options") != PROBE:
        start = time.perf_counter()
        argv = ["probe", str(out / "states.npz"), "--out", str(out / "probe"), "--overwrite", "--quiet", *PROBE]
        rc = attnflow_command(argv)
        if rc != 0:
            raise SystemExit(f"error: attnflow probe exited with status {rc} on {member['name']}")
        entry["probe"] = probe_measures(json.loads((out / "probe" / "summary.json").read_text()))
        entry["probe_seconds"] = round(time.perf_counter() - start, 1)
        entry["probe_options"] = PROBE
    entry.update(attention_measures(attention))
    record.write_text(json.dumps(entry, indent=2) + "\n")
    return entry


def train_and_export(member: dict, sizes: dict, seed: int, corpus, out: Path) -> dict:
    """Train the member with train_small_transformer's settings and save the states of the held-out prompts."""
    train_tokens, held_tokens, entropy = corpus
    argv = ["--seed", str(seed), "--layers", str(member["blocks"]), "--heads", str(member["heads"])]
    argv += ["--norm", member["norm"], "--eval-every", str(sizes["steps"])]
    argv += [] if member["mlp"] else ["--no-mlp"]
    for name in ("d_model", "context", "batch", "steps", "warmup", "corpus_mb", "prompts"):
        argv += ["--" + name.replace("_", "-"), str(sizes[name])]
    settings = tst.parse_args(argv)
    print(f"\n== {member['name']}: {member['blocks']} blocks, {label(member, False)}", flush=True)
    model, n_params, history, seconds = tst.train(settings, train_tokens, held_tokens, entropy)
    prompts = tst.prompt_batch(held_tokens, sizes["prompts"], sizes["context"])
    states, attention = tst.export_states(model, prompts)
    np.savez(out / "states.npz", states=states, attention=attention)
    return {
        "parameters": int(n_params),
        "train_seconds": round(seconds, 1),
        "heldout_bits_per_byte": history[-1]["heldout_bits_per_byte"],
        "train_bits_per_byte": history[-1]["train_bits_per_byte"],
        "unigram_bits_per_byte": round(entropy, 4),
        "states_shape": list(states.shape),
        "attention_rows_sum_error": float(np.abs(attention.sum(-1) - 1).max()),
    }


# -- the table and the figures ----------------------------------------------------------------------


def table(family: list[dict]) -> str:
    """The markdown table of family.json: one row per member."""
    head = (
        "| member | params | train s | held-out bits/byte | fit β | explained | fit ÷ identity error "
        "| fit ÷ linear error | E_β never drops | ⟨xᵢ, xⱼ⟩ first → last | clustered, last | effective rank "
        "first → last | sink rate, max | first-token attention, last |"
    )
    rows = [head, "|" + "---|" * (head.count("|") - 1)]
    for m in family:
        fit, probe = m.get("fit"), m["probe"]
        fit_cells = (
            [
                f"{fit['beta']:.1f}",
                f"{np.mean(fit['explained']):.2f}",
                f"{1 / fit['gain_over_identity']:.2f}",
                f"{1 / fit['gain_over_linear']:.2f}",
            ]
            if fit
            else ["–"] * 4
        )
        inner, rank = probe["mean_inner_product"], probe["effective_rank"]
        cells = [
            m["name"],
            f"{m['parameters'] / 1e3:.0f} k",
            f"{m['train_seconds']:.0f}",
            f"{m['heldout_bits_per_byte']:.2f}",
            *fit_cells,
            f"{'yes' if probe['energy_monotone'] else 'no'} ({probe['energy_monotone_fraction']:.0%} of prompts)",
            f"{inner[0]:.2f} → {inner[-1]:.2f}",
            f"{probe['clustered_fraction'][-1]:.2f}",
            f"{rank[0]:.0f} → {rank[-1]:.0f}",
            f"{max(probe['sink_rate']):.2f}",
            f"{probe['first_token_attention'][-1]:.2f}",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def groups(family: list[dict]) -> list[tuple[str, list[dict]]]:
    """The figures' columns: the depth sweep of the base, then every member at each depth that was varied."""
    sweep = [m for m in family if m["name"].startswith("pre-")]
    out = [("depth sweep: pre-LN, MLP, 4 heads", sweep)] if sweep else []
    for depth in sorted({m["blocks"] for m in family if not m["name"].startswith("pre-")}):
        out.append((f"at {depth} blocks", [m for m in family if m["blocks"] == depth]))
    return out


def label(m: dict, by_depth: bool) -> str:
    if by_depth:
        return f"{m['blocks']} block{'s' if m['blocks'] > 1 else ''}"
    parts = [{"pre": "pre-LN", "post": "post-LN", "none": "no LN"}[m["norm"]]]
    parts += [] if m["mlp"] else ["no MLP"]
    parts += [] if m["heads"] == BASE["heads"] else [f"{m['heads']} head"]
    return ", ".join(parts)


def draw(path: Path, family: list[dict], rows: list[tuple], title: str, xlabel: str) -> None:
    """One figure: a row per measurement (a function of a member → (x, y), its axis label and optionally its
    axis limits), a column per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    cols = groups(family)
    fig, axes = plt.subplots(
        len(rows), len(cols), figsize=(5.2 * len(cols), 3.0 * len(rows)), squeeze=False, sharey="row", sharex="col"
    )
    for c, (heading, chosen) in enumerate(cols):
        by_depth = c == 0 and heading.startswith("depth")
        colors = plt.get_cmap("viridis")(np.linspace(0, 0.85, len(chosen))) if by_depth else None
        for r, (measure, ylabel, *limits) in enumerate(rows):
            ax = axes[r, c]
            if limits:
                ax.set_ylim(*limits[0])
            for k, m in enumerate(chosen):
                xy = measure(m)
                if xy is None:
                    continue
                color = colors[k] if colors is not None else f"C{k}"
                ax.plot(*xy, marker="o", ms=3, lw=1.5, color=color, label=label(m, by_depth))
            ax.grid(alpha=0.3)
            if c == 0:
                ax.set_ylabel(ylabel)
            if r == 0:
                ax.set_title(heading, fontsize=10)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if r == len(rows) - 1:
                ax.set_xlabel(xlabel)
        axes[0, c].legend(fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def per_layer(key: str, start: int, source: str = "probe"):
    """A measurement per layer (start 0: of the states, from the embedding on) or per block (start 1), read from
    a member's probe results (``source`` "probe") or its own entry (None)."""

    def measure(m: dict):
        values = (m.get(source) or {}).get(key) if source else m.get(key)
        return None if values is None else (np.arange(start, start + len(values)), values)

    return measure


def per_transition(key: str):
    """A number of the fit per layer transition, against the later layer's index."""

    def measure(m: dict):
        fit = m.get("fit")
        return None if fit is None else (np.arange(1, len(fit[key]) + 1), fit[key])

    return measure


def figures(family: list[dict], out: Path) -> list[Path]:
    written = []
    specs = {
        "energy": (
            [
                (per_layer("energy", 0), f"E_β at β = {BETA:g}\n(1/2βn²) Σ e^(β⟨xᵢ, xⱼ⟩)"),
                (per_layer("knn_overlap", 1), "neighbours kept from\nthe layer before (k = 10)"),
            ],
            "Interaction energy per layer (the attention flow on the sphere never decreases it)",
            "layer (0: the embedding)",
        ),
        "clustering": (
            [
                (per_layer("mean_inner_product", 0), "mean ⟨xᵢ, xⱼ⟩"),
                (per_layer("clustered_fraction", 0), f"pairs with ⟨xᵢ, xⱼ⟩ ≥ {1 - DELTA:g}"),
                (per_layer("effective_rank", 0), "effective rank of the\ncentred tokens"),
            ],
            "The tokens' directions on the sphere, per layer",
            "layer (0: the embedding)",
        ),
        "attention": (
            [
                (per_layer("sink_rate", 1), "sink rate: heads with\nfirst-token attention > 0.3", (-0.03, 1.03)),
                (per_layer("first_token_attention", 1), "attention to the first token"),
                (per_layer("effective_tokens", 1, None), "effective tokens attended"),
            ],
            "Attention per block (averaged over heads, prompts and queries)",
            "block",
        ),
    }
    if any("fit" in m for m in family):
        specs["fit"] = (
            [
                (per_transition("explained"), "explained: 1 − error / identity"),
                (per_transition("rollout_error"), "free run from layer 0:\nmean squared error"),
            ],
            "The fitted particle model (causal SA), per layer, on held-out prompts",
            "layer ℓ (predicted from layer ℓ − 1, or run from layer 0)",
        )
    for name, (rows, title, xlabel) in specs.items():
        path = out / f"{name}.png"
        draw(path, family, rows, title, xlabel)
        written.append(path)
    return written


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out)
    check_output_directory(out)
    out.mkdir(parents=True, exist_ok=True)
    sizes = dict(QUICK if args.quick else FULL)
    if args.steps is not None:
        sizes["steps"] = args.steps
        sizes["warmup"] = min(sizes["warmup"], args.steps - 1)
    chosen = members(args.quick)
    if args.only is not None:
        chosen = [m for m in chosen if m["name"] in args.only.split(",")]
    train_tokens, held_tokens, corpus = tst.read_corpus(sizes["corpus_mb"])
    entropy = tst.unigram_entropy_bits(train_tokens)
    family = [train_member(m, sizes, args, (train_tokens, held_tokens, entropy)) for m in chosen]
    record = {
        "sizes": sizes,
        "seed": args.seed,
        "corpus": corpus,
        "delta": DELTA,
        "fit_options": None if args.no_fit else (FIT_QUICK if args.quick else FIT_FULL),
        "probe_options": PROBE,
        "seconds": round(time.perf_counter() - start, 1),
        "members": family,
    }
    (out / "family.json").write_text(json.dumps(record, indent=2) + "\n")
    (out / "family.md").write_text(table(family))
    written = figures(family, out)
    print("\n" + table(family))
    if args.docs:
        docs = Path(args.docs)
        docs.mkdir(parents=True, exist_ok=True)
        for path in [*written, out / "family.json"]:
            shutil.copyfile(path, docs / path.name)
    print(f"{len(family)} members in {time.perf_counter() - start:.0f} s; results in {out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
