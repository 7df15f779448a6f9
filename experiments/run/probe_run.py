"""``af.probe``: a model's residual stream measured layer by layer as the theory measures the particle model
(clustering, the interaction energy E_β and whether it climbs, rank and intrinsic dimension, how stable each
token's neighbourhood is, and, given the attention weights, attention sinks), and its result, ``ProbeResult``.

The measurements themselves are ``particles/probe.py``; here β is found (``af.fit`` with QᵀK = V = I, unless
given), the statistics are gathered over layers and prompts, and ``ProbeResult.save`` writes the run directory
through the store: config.toml, summary.json (every number), results.npz (named dimensions, ``af.load`` reads
it) and one figure per family of statistics (``experiments/plots/probe_figures.py``, imported only when a figure
is drawn). The command ``attnflow probe`` (``experiments/commands/probe_command.py``) reads the files and calls
``probe``.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import KEYS, to_toml
from ..results import store

__all__ = [
    "ProbeResult",
    "probe",
    "memory_parts",
    "check_memory",
    "bounded_real",
    "figure_inputs",
    "figure_writers",
    "FIT_OPTIONS",
]

# β from af.fit: SA with QᵀK = V = I, the flow whose energy E_β is (docs/model.md §1.3); short optimizer runs
# suffice for its one β and its layer times.
FIT_OPTIONS = {"model": "sa", "qk": "identity", "v": "identity", "adam_steps": 100, "lbfgs_steps": 50}
_SUFFIX = {"raw": "", "normed": "_normed"}
_PER_LAYER = ("mean_inner_product", "clustered_fraction", "intrinsic_dimension", "intrinsic_dimension_error")
_PER_PROMPT = ("n_clusters", "energy", "effective_rank")


@dataclass
class ProbeResult:
    """What ``af.probe`` measured: per family ("raw", "normed") and layer, and the attention sinks.

    ``families[name]`` holds, over the selected ``layers`` (L,) and the prompts (P): ``histogram`` (L, bins),
    ``mean_inner_product``, ``clustered_fraction`` (L,, means over prompts), ``n_clusters``, ``energy``,
    ``effective_rank`` (L, P), ``intrinsic_dimension`` and ``intrinsic_dimension_error`` (L,), ``knn_overlap``
    (L − 1,) and ``trend`` (``particles.probe.energy_trend``). ``sinks`` (None without attention) holds
    ``blocks``, ``first_token_attention`` (blocks, P, heads) and ``sink_rate`` (blocks,). ``summary()`` is
    summary.json; ``save(dir)`` writes the run directory.
    """

    layers: np.ndarray
    beta: float
    beta_source: str
    delta: float
    k: int
    epsilon: float
    bins: int
    shape: tuple
    tokens: int
    edges: np.ndarray
    families: dict
    first_token_norm_ratio: np.ndarray
    sinks: dict | None = None
    fitted: dict | None = None
    source: dict = field(default_factory=dict)
    wall_time_s: float = 0.0

    def summary(self) -> dict:
        """summary.json: the settings, every per-layer statistic as a list per family, the energy's verdicts."""
        from .runner import versions

        families = {name: _family_summary(f) for name, f in self.families.items()}
        raw = families["raw"]
        sinks = self.sinks
        return {
            "command": "probe",
            "states": self.source.get("states", ""),
            "key": self.source.get("key"),
            "attention_key": self.source.get("attention_key"),
            "shape": list(self.shape),
            "layers": self.layers.tolist(),
            "tokens": self.tokens,
            "beta": self.beta,
            "beta_source": self.beta_source,
            "fit": self.fitted,
            "delta": self.delta,
            "k": self.k,
            "knn_chance": self.k / (self.tokens - 1),
            "epsilon": self.epsilon,
            "bins": self.bins,
            "twonn_discard": _probe().TWONN_DISCARD,
            # the headline numbers: the raw family (the tokens' directions, the particle model's variables)
            "energy_monotone": raw["energy_monotone"],
            "energy_monotone_undefined": raw["energy_monotone_undefined"],
            "energy_monotone_fraction": raw["energy_monotone_fraction"],
            "effective_rank": raw["effective_rank"],
            "intrinsic_dimension": raw["intrinsic_dimension"],
            "knn_overlap": raw["knn_overlap"],
            "raw": raw,
            "normed": families["normed"],
            "sink_blocks": None if sinks is None else sinks["blocks"].tolist(),
            "sink_rate": None if sinks is None else sinks["sink_rate"].tolist(),
            "first_token_attention": None
            if sinks is None
            else sinks["first_token_attention"].mean(axis=(1, 2)).tolist(),
            "first_token_norm_ratio": self.first_token_norm_ratio.mean(axis=1).tolist(),
            "wall_time_s": float(self.wall_time_s),
            "versions": versions(),
        }

    def arrays(self) -> tuple[dict, dict]:
        """results.npz and its dimensions: per family (``_normed`` for the layer-normed one) on ``layer``,
        ``prompt``, ``bin``, ``transition`` (the later layer of each consecutive pair); the sinks on ``block``."""
        out: dict = {"layer": self.layers, "edges": self.edges, "transition": self.layers[1:]}
        dims: dict = {"layer": ["layer"], "edges": ["edge"], "transition": ["transition"]}
        for name, f in self.families.items():
            s = _SUFFIX[name]
            out[f"histogram{s}"], dims[f"histogram{s}"] = f["histogram"], ["layer", "bin"]
            for key in _PER_LAYER:
                out[key + s], dims[key + s] = f[key], ["layer"]
            for key in _PER_PROMPT:
                out[key + s], dims[key + s] = f[key], ["layer", "prompt"]
            out[f"knn_overlap{s}"], dims[f"knn_overlap{s}"] = f["knn_overlap"], ["transition"]
        out["first_token_norm_ratio"], dims["first_token_norm_ratio"] = self.first_token_norm_ratio, ["layer", "prompt"]
        if self.sinks is not None:
            out.update(
                block=self.sinks["blocks"],
                first_token_attention=self.sinks["first_token_attention"],
                sink_rate=self.sinks["sink_rate"],
            )
            dims.update(block=["block"], first_token_attention=["block", "prompt", "head"], sink_rate=["block"])
        return out, dims

    def config_toml(self) -> str:
        table = {
            "command": "probe",
            "states": self.source.get("states", ""),
            "shape": list(self.shape),
            "layers": self.layers.tolist(),
            "beta": self.beta,
            "beta_source": self.beta_source,
            "delta": self.delta,
            "k": self.k,
            "epsilon": self.epsilon,
            "bins": self.bins,
        }
        table.update({k: v for k, v in self.source.items() if k in ("key", "attention_key") and v is not None})
        return to_toml(table).replace("# attnflow configuration", "# attnflow probe", 1)

    def save(self, out, *, overwrite: bool = False, figures: bool = True) -> Path:
        """Write the run directory ``out`` atomically (config.toml, summary.json, results.npz, the figures);
        an existing run is replaced only with ``overwrite``. Returns its path."""
        summary = self.summary()
        arrs, dims = self.arrays()
        draw = figure_writers(figure_inputs(summary, arrs)) if figures else None
        return store.write_run(out, self.config_toml(), summary, arrs, draw, dims=dims, overwrite=overwrite)


def _probe():
    from ...particles import probe as measures

    return measures


def _family_summary(f: dict) -> dict:
    trend = f["trend"]
    return {
        "mean_inner_product": f["mean_inner_product"].tolist(),
        "clustered_fraction": f["clustered_fraction"].tolist(),
        "n_clusters": f["n_clusters"].mean(axis=1).tolist(),
        "energy": f["energy"].mean(axis=1).tolist(),
        "energy_monotone": trend["monotone"],
        "energy_monotone_undefined": trend["undefined"],
        "energy_trend_of": f["trend_of"],
        "energy_monotone_per_prompt": trend["monotone_per_prompt"].tolist(),
        "energy_monotone_fraction": trend["monotone_fraction"],
        "energy_increment_min": trend["increment_min"].tolist(),
        "energy_increment_median": trend["increment_median"].tolist(),
        "energy_increment_max": trend["increment_max"].tolist(),
        "effective_rank": f["effective_rank"].mean(axis=1).tolist(),
        "intrinsic_dimension": f["intrinsic_dimension"].tolist(),
        "intrinsic_dimension_error": f["intrinsic_dimension_error"].tolist(),
        "twonn_ratios_used": f["twonn_used"].tolist(),
        "knn_overlap": f["knn_overlap"].tolist(),
        "distinct_points": f["distinct"].tolist(),
        "degenerate": f["degenerate"],
    }


def _degenerate(name: str, distinct: np.ndarray, dim: np.ndarray, d: int) -> str | None:
    """A note on a family whose tokens take fewer than 3 distinct points in some layer and prompt (their TwoNN
    dimension, neighbours and rank describe rounding, not a shape), or whose TwoNN estimate is undefined; None
    when neither."""
    fewest = int(distinct.min()) if distinct.size else 0
    notes = []
    if fewest < 3:
        why = (
            " (with d = 2, layer norm's centring leaves every token at ±(1, −1)/√2)"
            if name == "normed" and d == 2
            else ""
        )
        notes.append(
            f"the {name} tokens take only {fewest} distinct point{'s' if fewest != 1 else ''} in some layer{why}: "
            "their TwoNN dimension and neighbours are undefined"
        )
    undefined = np.flatnonzero(~np.isfinite(dim))
    if undefined.size and not notes:
        notes.append(
            f"the TwoNN dimension of the {name} tokens is undefined in {undefined.size} layer(s): fewer than 3 tokens "
            "have a nearest neighbour apart from them"
        )
    return "; ".join(notes) or None


def _measure_family(x: np.ndarray, beta: float, delta: float, k: int, bins: int) -> dict:
    """Every statistic of one family's unit tokens x (L, P, n, d): ``layer_metrics`` over the layers (a compiled
    loop), then the pooled TwoNN estimate per layer and the neighbour overlaps of consecutive layers."""
    import jax.numpy as jnp

    measures = _probe()
    per = measures.layers_metrics(jnp.asarray(x), beta, delta, k=k, bins=bins)
    per = {name: np.asarray(v) for name, v in per.items()}
    trend = measures.trend_values(per)
    L = x.shape[0]
    dim, err, used = measures.twonn(per["twonn_ratios"].reshape(L, -1))
    distinct = per["distinct"].min(axis=1)  # (L,): the fewest distinct points over the prompts
    nb = per["neighbours"]
    overlap = np.asarray(measures.knn_overlap(nb[:-1], nb[1:])).mean(axis=-1)
    return {
        "histogram": per["histogram"].sum(axis=1).astype(np.int64),
        "mean_inner_product": per["mean_inner_product"].mean(axis=1),
        "clustered_fraction": per["clustered_fraction"].mean(axis=1),
        "n_clusters": per["n_clusters"].astype(np.int64),
        "energy": per["energy"],
        "effective_rank": per["effective_rank"],
        "intrinsic_dimension": dim,
        "intrinsic_dimension_error": err,
        "twonn_used": used,
        "knn_overlap": overlap,
        "trend": measures.energy_trend(trend[1]),
        "trend_of": trend[0],
        "distinct": distinct,
    }


def bounded_real(name: str, value, low: float, high: float = math.inf, *, strict: bool = True) -> float:
    """``value`` as a finite float above ``low`` (at least ``low`` unless ``strict``) and at most ``high``; else a
    ValueError naming ``name`` and the bounds (a bool is refused)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    if isinstance(value, bool) or not (math.isfinite(v) and (v > low if strict else v >= low) and v <= high):
        bound = f"> {low:g}" if strict else f"≥ {low:g}"
        upper = f" and ≤ {high:g}" if math.isfinite(high) else ""
        raise ValueError(f"{name} must be a finite number {bound}{upper}, got {value!r}")
    return v


def memory_parts(layers: int, prompts: int, n: int, d: int, *, fit: dict | None = None) -> dict[str, int]:
    """The bytes ``probe`` holds by what holds them, for ``layers`` measured layers of (prompts, n, d): one
    layer's pairwise n×n arrays at a time (``particles.probe.layer_metrics_bytes``), the states and their two
    families in float64, and, when β is fitted, ``af.fit``'s parts (``fit``: its options)."""
    plural = "s" if prompts != 1 else ""
    parts = {
        f"the pairwise n×n arrays of one layer [{n} tokens, {prompts} prompt{plural}]": _probe().layer_metrics_bytes(
            prompts, n, d
        ),
        f"the states and their two families [{layers} layers, {prompts} prompt{plural}, {n} tokens, d = {d}]": 8
        * 6
        * layers
        * prompts
        * n
        * d,
    }
    if fit is not None:
        from ...solvers.fitting import memory_parts as fit_parts

        options = {key: fit[key] for key in ("heads", "qk", "v", "horizon", "substeps", "lbfgs_steps") if key in fit}
        parts.update(
            {f"{what} (af.fit for β)": size for what, size in fit_parts(layers, prompts, n, d, **options).items()}
        )
    return parts


def check_memory(layers: int, prompts: int, n: int, d: int, *, fit: dict | None = None) -> None:
    """Refuse (one InputError line naming the largest part, ``machine.check_parts``) a probe whose arrays cannot
    fit in the memory, before any is allocated."""
    from ...solvers import machine

    parts = memory_parts(layers, prompts, n, d, fit=fit)
    pairs, states = list(parts)[:2]
    remedies = {
        pairs: "fewer tokens per prompt (the pairs grow as n²) or fewer prompts",
        states: "fewer layers (--layers) or prompts",
    }
    remedies.update({part: "a given β (--beta), which needs no fit" for part in list(parts)[2:]})
    machine.check_parts(parts, "probe", remedies, on_device=[pairs, *list(parts)[2:]])


def probe(
    states,
    *,
    attention=None,
    beta=None,
    delta=None,
    k: int = 10,
    epsilon: float | None = None,
    bins: int = 64,
    layers=None,
    fit_options: dict | None = None,
    progress: bool = False,
) -> ProbeResult:
    """Measure token states layer by layer as the particle model is measured.

    states      (layers, tokens, d) or (layers, prompts, tokens, d), a model's residual stream after each block.
    attention   optional weights (blocks = layers − 1, [prompts,] heads, tokens, tokens), each row summing to 1.
    beta        the inverse temperature of E_β; None: the β that ``af.fit`` finds on the raw family with
                QᵀK = V = I (``fit_options`` override ``FIT_OPTIONS``).
    delta       the clustering threshold δ (pairs with ⟨x_i, x_j⟩ ≥ 1 − δ; default: the experiments' 1e-3).
    k           neighbours per token for the overlap, 1 ≤ k ≤ tokens − 2.
    epsilon     the sink threshold ε on a head's mean attention to the first token (default 0.3).
    bins        histogram bins over [−1, 1].  layers: indices of the layers to measure (default: all).

    Every statistic is taken on two families: raw (each token scaled to unit length) and normed (each token
    centred over its d coordinates, then scaled to unit length: layer norm without gain and bias, over √d);
    ``particles/probe.py`` defines each. Bad input is a ValueError naming it, before any work.
    """
    from ...particles import checks
    from ...particles.errors import InputError

    start = time.perf_counter()
    measures = _probe()
    raw_in = checks.real_array("states", states, " (layers, tokens, d) or (layers, prompts, tokens, d)")
    if raw_in.dtype.kind == "b" or raw_in.ndim not in (3, 4):
        raise InputError(
            f"states must be a real array (layers, tokens, d) or (layers, prompts, tokens, d), got dtype "
            f"{raw_in.dtype} and shape {raw_in.shape}"
        )
    x_in = raw_in[:, None] if raw_in.ndim == 3 else raw_in
    L_all, P, n, d = x_in.shape
    if n < 3 or d < 2:
        raise ValueError(f"states of shape {raw_in.shape}: probe needs at least 3 tokens and d ≥ 2")
    if not np.all(np.isfinite(x_in)):
        raise ValueError("states have non-finite entries (nan or inf)")
    wanted = f"layers must name at least 2 of the states' {L_all} layers (0–{L_all - 1})"
    if layers is not None:
        try:
            given = np.asarray(layers)
        except (TypeError, ValueError):  # ragged nesting
            given = np.asarray(None)
        if given.dtype.kind not in "iu" or given.ndim != 1:  # 1.5 or True would be truncated to a layer silently
            raise InputError(f"{wanted} as a list of integers, got {layers!r}")
    chosen = np.arange(L_all) if layers is None else np.unique(given.astype(np.int64))
    if chosen.size < 2 or chosen.min() < 0 or chosen.max() >= L_all:
        raise InputError(f"{wanted}, got {layers!r}")
    delta = bounded_real("delta", KEYS["delta"].default if delta is None else delta, 0.0, 2.0)
    epsilon = bounded_real("epsilon", measures.SINK_EPSILON if epsilon is None else epsilon, 0.0, 1.0, strict=False)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n - 2:
        raise ValueError(f"k must be an integer between 1 and n − 2 = {n - 2} (n = {n} tokens), got {k!r}")
    k = int(k)
    bins = checks.check_int("bins", bins, 1, 100_000)
    if beta is not None:
        beta = bounded_real("beta", beta, 0.0)
    alpha = None
    if attention is not None:
        a = measures.check_attention(attention, L_all - 1, P if raw_in.ndim == 4 else None, n)
        alpha = measures.first_token_attention(a)  # (blocks, P, heads)
    check_memory(len(chosen), P, n, d, fit=None if beta is not None else {**FIT_OPTIONS, **(fit_options or {})})
    x = x_in[chosen]
    raw = measures.unit_states(x, "the states")
    normed = measures.layer_normed_states(x, "the states")

    fitted = None
    if beta is None:
        from ...solvers.fitting import fit

        options = {**FIT_OPTIONS, **(fit_options or {})}
        if progress:
            print(f"probe: β from af.fit on {len(chosen)} layers (QᵀK = V = I)", file=sys.stderr)
        result = fit(raw, **options, progress=progress)
        beta = float(result.beta)
        fitted = {
            "tau": result.tau.tolist(),
            "layer_error": float(np.mean(result.layer_error)),
            "identity_error": float(np.mean(result.identity_error)),
            **{key: options[key] for key in ("model", "qk", "v", "adam_steps", "lbfgs_steps")},
        }
    families = {}
    for name, values in (("raw", raw), ("normed", normed)):
        tick = time.perf_counter()
        families[name] = _measure_family(values, beta, delta, k, bins)
        families[name]["degenerate"] = _degenerate(
            name, families[name]["distinct"], families[name]["intrinsic_dimension"], d
        )
        if progress:
            print(
                f"probe: {name} tokens, {len(chosen)} layers measured ({time.perf_counter() - tick:.1f} s)",
                file=sys.stderr,
            )
    sinks = None
    if alpha is not None:
        later = chosen[chosen >= 1]
        blocks_alpha = alpha[later - 1]
        sinks = {
            "blocks": later,
            "first_token_attention": blocks_alpha,
            "sink_rate": measures.sink_rate(blocks_alpha, epsilon),
        }
    return ProbeResult(
        layers=chosen,
        beta=beta,
        beta_source="given" if fitted is None else "fit",
        delta=delta,
        k=k,
        epsilon=epsilon,
        bins=bins,
        shape=tuple(raw_in.shape),
        tokens=n,
        edges=np.linspace(-1.0, 1.0, bins + 1),
        families=families,
        first_token_norm_ratio=measures.first_token_norm_ratio(x),
        sinks=sinks,
        fitted=fitted,
        wall_time_s=time.perf_counter() - start,
    )


# -- the figures of a probe run -------------------------------------------------------------------


def figure_inputs(summary: dict, data: dict) -> dict:
    """What the figures of a probe run read: the settings of its summary and every array of results.npz."""
    keys = ("states", "beta", "beta_source", "delta", "k", "knn_chance", "epsilon", "raw", "normed")
    run = {key: summary.get(key) for key in keys}
    return run | {name: data[name] for name in data}


def figure_writers(run: dict) -> dict:
    """The figures of a probe run (name → a function drawing into a path), from ``figure_inputs``; matplotlib is
    imported when this is called."""
    from .. import plots

    name = Path(run["states"]).name if run.get("states") else None
    out = {
        "geometry": lambda p: plots.probe_geometry(run, source=name, path=p),
        "energy": lambda p: plots.probe_energy(run, source=name, path=p),
        "rank": lambda p: plots.probe_rank(run, source=name, path=p),
        "knn_overlap": lambda p: plots.probe_knn(run, source=name, path=p),
    }
    if "sink_rate" in run:
        out["sinks"] = lambda p: plots.probe_sinks(run, source=name, path=p)
    return out
