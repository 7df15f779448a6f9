"""Train a small byte-level transformer on Python's own standard library and export its hidden states.

Run from the repository root::

    python docs/examples/train_small_transformer.py            # a few minutes on 2 CPU cores
    python docs/examples/train_small_transformer.py --quick    # under a minute, for CI

Everything needed ships with Python: the corpus is the standard library's own ``.py`` sources (the
directory ``sysconfig.get_paths()["stdlib"]``), read in sorted order and cut into bytes, so the
vocabulary is the 256 byte values. Nothing is downloaded.

The model is a causal decoder-only transformer written with equinox: a token and a learned
positional embedding, pre-LN blocks (x ← x + Attn(LN(x)), x ← x + MLP(LN(x))), a final layer norm and
an unembedding; ``--norm post`` makes the blocks post-LN (x ← LN(x + Attn(x)), x ← LN(x + MLP(x))),
``--norm none`` drops their layer norms (the final one stays), ``--no-mlp`` their MLPs. It is trained
with optax (AdamW, linear warm-up then cosine decay). The loss is printed in bits per byte, next to the
unigram entropy of the corpus (what a model that ignores the context would reach): a trained model ends
well below it.

After training, the residual stream of held-out prompts (files the model never saw) is saved after
the embedding and after each block, an array (layers = blocks + 1, prompts, tokens, d) of float32
in ``states.npz`` with the attention weights of every block and head — the input of ``attnflow hist`` and
``attnflow fit`` (``--key states``) — and the script runs both on it.
The output directory (``--out``, default runs/small-transformer) holds:

    states.npz    "states": (blocks + 1, prompts, tokens, d_model) float32, the residual stream;
                  "attention": (blocks, prompts, heads, tokens, tokens) float32, each row summing to 1
    weights.npz   per block and head, the attention's bilinear forms (see ``head_matrices``):
                  "qk": (blocks, heads, d, d) with logit(x, y) = LN(x)ᵀ qk LN(y) (1/√d_head included),
                  "ov": (blocks, heads, d, d) with head output = Σ_j A_ij ov LN(x_j),
                  and the layer norms' gains "ln1_gain", "ln2_gain" (blocks, d) where the blocks have them
                  (LN(x) is x itself with --norm post, whose blocks read the previous block's normed output,
                  and with --norm none)
    model.eqx     the trained parameters (equinox.tree_serialise_leaves; rebuild the model with the
                  sizes in settings.json, then equinox.tree_deserialise_leaves)
    settings.json the command's settings, the corpus, the run time and the losses
    hist/         the output of ``attnflow hist states.npz`` (histograms.png, summary.json, ...)
    fit/          the output of ``attnflow fit states.npz --causal``: the particle model fitted to the layers
                  (fit_errors.png against the identity and the best linear map, fit_histograms.png)

Determinism: the corpus is a sorted list of files, the initialization and the batches come from
``--seed``; two runs with the same flags on the same machine and Python give the same numbers.
(The corpus, hence the losses, depend on the Python version whose standard library is read.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

VOCAB = 256  # byte-level tokens: every byte value is a token, nothing is out of vocabulary


# -- settings ---------------------------------------------------------------------------------------

# The default run: a few minutes on 2 CPU cores. --quick overrides some of these (QUICK) so the whole
# script, `attnflow hist` included, runs in well under a minute; any flag given explicitly wins.
DEFAULTS = {
    "d_model": 64,
    "layers": 4,
    "heads": 4,
    "context": 128,
    "batch": 32,
    "steps": 1500,
    "lr": 3e-3,
    "warmup": 100,
    "weight_decay": 0.1,
    "corpus_mb": 4.0,
    "prompts": 16,
    "eval_every": 250,
    "eval_batches": 8,
}
QUICK = {
    "context": 64,
    "batch": 16,
    "steps": 300,
    "warmup": 20,
    "corpus_mb": 0.5,
    "prompts": 4,
    "eval_every": 100,
    "eval_batches": 4,
}


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a positive integer")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text}: expected a positive number")
    return value


def nonnegative_float(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text}: expected a number ≥ 0")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Train a small byte-level transformer on the Python standard library's sources, "
        "export the hidden states of held-out prompts and run `attnflow hist` on them.",
        epilog="Outputs in --out: states.npz, weights.npz, model.eqx, settings.json and hist/.",
    )
    p.add_argument("--out", default="runs/small-transformer", help="output directory [%(default)s]")
    p.add_argument("--seed", type=int, default=0, help="seed of the initialization and of the batches [%(default)s]")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"a run of under a minute (CI): {', '.join(f'{k}={v}' for k, v in QUICK.items())}",
    )
    g = p.add_argument_group("model")
    g.add_argument("--d-model", type=positive_int, help=f"width of the residual stream [{DEFAULTS['d_model']}]")
    g.add_argument("--layers", type=positive_int, help=f"transformer blocks [{DEFAULTS['layers']}]")
    g.add_argument("--heads", type=positive_int, help=f"attention heads, dividing --d-model [{DEFAULTS['heads']}]")
    g.add_argument("--context", type=positive_int, help=f"context length in bytes [{DEFAULTS['context']}]")
    g.add_argument(
        "--norm",
        choices=NORMS,
        default="pre",
        help="the blocks' layer norms: pre (x + Attn(LN(x))), post (LN(x + Attn(x))) or none [%(default)s]",
    )
    g.add_argument("--no-mlp", action="store_true", help="blocks of attention alone, without the MLP")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=positive_int, help=f"optimizer steps [{DEFAULTS['steps']}]")
    g.add_argument("--batch", type=positive_int, help=f"sequences per step [{DEFAULTS['batch']}]")
    g.add_argument("--lr", type=positive_float, help=f"peak learning rate [{DEFAULTS['lr']}]")
    g.add_argument("--warmup", type=int, help=f"linear warm-up steps, then cosine decay [{DEFAULTS['warmup']}]")
    g.add_argument(
        "--weight-decay",
        type=nonnegative_float,
        help=f"AdamW weight decay of the matrices [{DEFAULTS['weight_decay']}]",
    )
    g.add_argument(
        "--corpus-mb",
        type=positive_float,
        help=f"megabytes of standard-library source to read [{DEFAULTS['corpus_mb']}]",
    )
    g.add_argument("--eval-every", type=positive_int, help=f"steps between loss reports [{DEFAULTS['eval_every']}]")
    g.add_argument(
        "--eval-batches", type=positive_int, help=f"held-out batches per loss report [{DEFAULTS['eval_batches']}]"
    )
    g = p.add_argument_group("export")
    g.add_argument("--prompts", type=positive_int, help=f"held-out prompts to export [{DEFAULTS['prompts']}]")
    g.add_argument("--no-hist", action="store_true", help="do not run `attnflow hist` on the states")
    g.add_argument("--no-fit", action="store_true", help="do not run `attnflow fit` on the states")
    args = p.parse_args(argv)
    # Fill in what was not given: --quick's value, else the default.
    for key, value in DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, QUICK.get(key, value) if args.quick else value)
    if args.d_model % args.heads:
        p.error(f"--heads {args.heads} must divide --d-model {args.d_model}")
    if not 0 <= args.warmup < args.steps:
        p.error(f"--warmup {args.warmup}: expected 0 ≤ warmup < --steps ({args.steps})")
    return args


# -- the corpus -------------------------------------------------------------------------------------


def read_corpus(megabytes: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """Bytes of the standard library's top-level .py files, in sorted order, until ``megabytes``.

    About a tenth of the bytes is held out, whole files at a time (a file goes to the held-out set
    whenever that set holds less than 10% of the bytes read so far): the validation loss and the
    exported prompts come from files the model never trained on. Files are separated by a blank line.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.glob("*.py"))  # top level only: no tests, no vendored packages, no site-packages
    if not files:
        sys.exit(f"error: no .py files in the standard library directory {root}")
    budget = int(megabytes * 2**20)
    train, held, total, held_total, used = [], [], 0, 0, []
    for path in files:
        data = path.read_bytes() + b"\n\n"
        if held_total < 0.1 * total:
            held.append(data)
            held_total += len(data)
        else:
            train.append(data)
        used.append(path.name)
        total += len(data)
        if total >= budget and train and held:
            break
    train_tokens = np.frombuffer(b"".join(train), dtype=np.uint8)
    held_tokens = np.frombuffer(b"".join(held), dtype=np.uint8)
    info = {
        "stdlib": str(root),
        "python": sys.version.split()[0],
        "files": len(used),
        "first": used[0],
        "last": used[-1],
        "train_bytes": int(train_tokens.size),
        "heldout_bytes": int(held_tokens.size),
        "sha256": hashlib.sha256(b"".join(train) + b"".join(held)).hexdigest()[:16],
    }
    return train_tokens, held_tokens, info


def unigram_entropy_bits(tokens: np.ndarray) -> float:
    """Entropy of the byte frequencies, in bits per byte: the best loss without context."""
    counts = np.bincount(tokens, minlength=VOCAB).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def windows(tokens: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """Rows tokens[s : s + length] for each start s, as int32."""
    return tokens[starts[:, None] + np.arange(length)].astype(np.int32)


# -- the model --------------------------------------------------------------------------------------
# Every module maps one sequence (T,) or (T, d); batches are handled by jax.vmap.


class CausalSelfAttention(eqx.Module):
    """Multi-head causal self-attention without biases, so that each head is exactly two bilinear
    forms of its input: logits LN(x_i)ᵀ W_Qᵀ W_K LN(x_j) / √d_head and values W_O W_V LN(x_j)."""

    wq: jax.Array  # (heads, d_head, d): query of head h is wq[h] @ x
    wk: jax.Array  # (heads, d_head, d)
    wv: jax.Array  # (heads, d_head, d)
    wo: jax.Array  # (heads, d, d_head): head h adds wo[h] @ (its weighted values) to the stream
    heads: int = eqx.field(static=True)

    def __init__(self, d: int, heads: int, out_scale: float, *, key):
        kq, kk, kv, ko = jax.random.split(key, 4)
        dh = d // heads
        self.heads = heads
        self.wq = jax.random.normal(kq, (heads, dh, d)) / math.sqrt(d)
        self.wk = jax.random.normal(kk, (heads, dh, d)) / math.sqrt(d)
        self.wv = jax.random.normal(kv, (heads, dh, d)) / math.sqrt(d)
        self.wo = jax.random.normal(ko, (heads, d, dh)) * out_scale / math.sqrt(d)

    def weights(self, x):  # x: (T, d), the block's input to the attention → (heads, T, T)
        q = jnp.einsum("hed,td->hte", self.wq, x)
        k = jnp.einsum("hed,td->hte", self.wk, x)
        logits = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])  # (heads, T, T)
        causal = jnp.tril(jnp.ones(logits.shape[-2:], dtype=bool))  # token i sees tokens j ≤ i
        return jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)

    def apply(self, attn, x):  # the heads' outputs summed, (T, d), for weights attn (heads, T, T)
        v = jnp.einsum("hed,td->hte", self.wv, x)
        return jnp.einsum("hde,hte->td", self.wo, attn @ v)

    def __call__(self, x):
        return self.apply(self.weights(x), x)


class MLP(eqx.Module):
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, d: int, out_scale: float, *, key):
        k1, k2 = jax.random.split(key)
        self.up = eqx.nn.Linear(d, 4 * d, key=k1)
        down = eqx.nn.Linear(4 * d, d, key=k2)
        self.down = eqx.tree_at(lambda m: m.weight, down, down.weight * out_scale)

    def __call__(self, x):  # (T, d)
        return jax.vmap(lambda t: self.down(jax.nn.gelu(self.up(t))))(x)


NORMS = ("pre", "post", "none")


def _norm(layer, x):
    """A layer norm applied token by token, or nothing (``layer`` None: the model without normalization)."""
    return x if layer is None else jax.vmap(layer)(x)


class Block(eqx.Module):
    """One block, its normalization chosen by ``norm``:

    pre   x ← x + Attn(LN(x));  x ← x + MLP(LN(x))     (GPT-2 and later)
    post  x ← LN(x + Attn(x));  x ← LN(x + MLP(x))     (the original transformer, BERT)
    none  x ← x + Attn(x);      x ← x + MLP(x)

    Without the MLP (``mlp`` False) the block is its attention sublayer alone."""

    ln1: eqx.nn.LayerNorm | None
    attn: CausalSelfAttention
    ln2: eqx.nn.LayerNorm | None
    mlp: MLP | None
    post: bool = eqx.field(static=True)

    def __init__(self, d: int, heads: int, n_blocks: int, *, key, norm: str = "pre", mlp: bool = True):
        k1, k2 = jax.random.split(key)
        out_scale = 1 / math.sqrt(2 * n_blocks)  # the usual down-scaling of the residual branches
        self.post = norm == "post"
        self.ln1 = None if norm == "none" else eqx.nn.LayerNorm(d)
        self.ln2 = None if norm == "none" or not mlp else eqx.nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads, out_scale, key=k1)
        self.mlp = MLP(d, out_scale, key=k2) if mlp else None

    def trace(self, x):
        """The block's output (T, d) and its attention weights (heads, T, T)."""
        if self.post:
            attn = self.attn.weights(x)
            x = _norm(self.ln1, x + self.attn.apply(attn, x))
            if self.mlp is not None:
                x = _norm(self.ln2, x + self.mlp(x))
            return x, attn
        y = _norm(self.ln1, x)
        attn = self.attn.weights(y)
        x = x + self.attn.apply(attn, y)
        if self.mlp is not None:
            x = x + self.mlp(_norm(self.ln2, x))
        return x, attn

    def __call__(self, x):
        return self.trace(x)[0]


class Transformer(eqx.Module):
    tok: jax.Array  # (VOCAB, d) token embedding
    pos: jax.Array  # (context, d) learned positional embedding
    blocks: list
    ln_f: eqx.nn.LayerNorm
    unembed: eqx.nn.Linear

    def __init__(self, d: int, n_blocks: int, heads: int, context: int, *, key, norm: str = "pre", mlp: bool = True):
        kt, kp, kb, ku = jax.random.split(key, 4)
        self.tok = 0.02 * jax.random.normal(kt, (VOCAB, d))
        self.pos = 0.02 * jax.random.normal(kp, (context, d))
        self.blocks = [Block(d, heads, n_blocks, key=k, norm=norm, mlp=mlp) for k in jax.random.split(kb, n_blocks)]
        self.ln_f = eqx.nn.LayerNorm(d)  # every variant keeps the final layer norm before the unembedding
        self.unembed = eqx.nn.Linear(d, VOCAB, use_bias=False, key=ku)

    def residual_stream(self, tokens):
        """The states (blocks + 1, T, d), after the embedding then after each block, and the attention
        weights (blocks, heads, T, T)."""
        x = self.tok[tokens] + self.pos[: tokens.shape[0]]
        states, weights = [x], []
        for block in self.blocks:
            x, attn = block.trace(x)
            states.append(x)
            weights.append(attn)
        return jnp.stack(states), jnp.stack(weights)

    def __call__(self, tokens):  # (T,) int → logits (T, VOCAB)
        x = self.tok[tokens] + self.pos[: tokens.shape[0]]
        for block in self.blocks:
            x = block(x)
        return jax.vmap(lambda t: self.unembed(self.ln_f(t)))(x)


def head_matrices(model: Transformer) -> dict[str, np.ndarray]:
    """Per block and head the (d, d) matrices of the attention as a particle interaction:
    qk[l, h] = W_Qᵀ W_K / √d_head (the logit of i attending to j is yᵢᵀ qk yⱼ with y = LN(x) of block l)
    and ov[l, h] = W_O W_V (head h moves token i by Σ_j A_ij ov yⱼ). The layer norms' gains, which
    multiply y coordinate-wise before these forms apply, are saved alongside."""
    qk, ov = [], []
    for b in model.blocks:
        a = b.attn
        scale = 1 / math.sqrt(a.wq.shape[1])
        qk.append(jnp.einsum("hed,hef->hdf", a.wq, a.wk) * scale)
        ov.append(jnp.einsum("hde,hef->hdf", a.wo, a.wv))
    out = {"qk": np.asarray(jnp.stack(qk), np.float32), "ov": np.asarray(jnp.stack(ov), np.float32)}
    for name in ("ln1", "ln2"):  # a model without normalization (or without the MLP's) has no such gains
        norms = [getattr(b, name) for b in model.blocks]
        if all(n is not None for n in norms):
            out[f"{name}_gain"] = np.stack([np.asarray(n.weight, np.float32) for n in norms])
    return out


# -- training ---------------------------------------------------------------------------------------


def mean_loss_nats(model, batch):
    """Next-byte cross-entropy in nats, averaged over the batch (B, T + 1)."""
    logits = jax.vmap(model)(batch[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch[:, 1:]).mean()


def make_optimizer(args):
    schedule = optax.warmup_cosine_decay_schedule(0.0, args.lr, args.warmup, args.steps, end_value=args.lr / 10)

    # Weight decay on the matrices only, not on the layer norms' gains and biases.
    def decay_mask(params):
        return jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)

    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, b1=0.9, b2=0.99, weight_decay=args.weight_decay, mask=decay_mask),
    )


def train(args, train_tokens, held_tokens, entropy):
    model = Transformer(
        args.d_model,
        args.layers,
        args.heads,
        args.context,
        key=jax.random.key(args.seed),
        norm=args.norm,
        mlp=not args.no_mlp,
    )
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)))
    optimizer = make_optimizer(args)
    opt_state = optimizer.init(eqx.filter(model, eqx.is_array))

    @eqx.filter_jit
    def step(model, opt_state, batch):
        loss, grads = eqx.filter_value_and_grad(mean_loss_nats)(model, batch)
        updates, opt_state = optimizer.update(grads, opt_state, eqx.filter(model, eqx.is_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    evaluate = eqx.filter_jit(mean_loss_nats)

    # Batches: windows of context + 1 bytes at random offsets, from a numpy generator seeded by --seed.
    # The held-out batches are fixed once, so every report measures the same bytes.
    rng = np.random.default_rng(args.seed)
    span = args.context + 1
    if train_tokens.size <= span or held_tokens.size <= span:
        sys.exit(f"error: the corpus is too small for --context {args.context}; raise --corpus-mb")
    held_batches = [
        windows(held_tokens, rng.integers(0, held_tokens.size - span, args.batch), span)
        for _ in range(args.eval_batches)
    ]

    def held_out_bits(model):
        return float(np.mean([evaluate(model, b) for b in held_batches])) / math.log(2)

    print(
        f"model: {n_params:,} parameters (d_model={args.d_model}, {args.layers} blocks × {args.heads} heads, "
        f"context {args.context}); unigram entropy of the training bytes {entropy:.3f} bits/byte"
    )
    history, running, t0 = [], [], time.perf_counter()
    for i in range(1, args.steps + 1):
        batch = windows(train_tokens, rng.integers(0, train_tokens.size - span, args.batch), span)
        model, opt_state, loss = step(model, opt_state, batch)
        running.append(loss)
        if i % args.eval_every == 0 or i == args.steps:
            train_bits = float(np.mean(running)) / math.log(2)
            held_bits = held_out_bits(model)
            running = []
            history.append(
                {"step": i, "train_bits_per_byte": round(train_bits, 4), "heldout_bits_per_byte": round(held_bits, 4)}
            )
            print(
                f"step {i:5d}/{args.steps}  train {train_bits:.3f}  held-out {held_bits:.3f} bits/byte  "
                f"({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
    return model, n_params, history, time.perf_counter() - t0


# -- export -----------------------------------------------------------------------------------------


def prompt_batch(held_tokens: np.ndarray, prompts: int, length: int) -> np.ndarray:
    """``prompts`` windows of held-out text, evenly spaced, each starting at the beginning of a line."""
    starts = []
    for s in np.linspace(0, held_tokens.size - 2 * length, prompts).astype(int):
        newline = np.flatnonzero(held_tokens[s : s + length] == ord("\n"))
        starts.append(s + int(newline[0]) + 1 if newline.size else s)
    return windows(held_tokens, np.array(starts), length)


def export_states(model: Transformer, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The residual stream (blocks + 1, prompts, tokens, d) and the attention weights (blocks, prompts, heads,
    tokens, tokens) of ``prompts`` (prompts, tokens), float32."""
    states, attention = eqx.filter_jit(lambda m, p: jax.vmap(m.residual_stream)(p))(model, prompts)
    # (prompts, layers, ...) → (layers, prompts, ...)
    states = np.ascontiguousarray(np.moveaxis(np.asarray(states, np.float32), 0, 1))
    return states, np.ascontiguousarray(np.moveaxis(np.asarray(attention, np.float32), 0, 1))


def run_hist(states_path: Path, out: Path) -> int:
    """``attnflow hist STATES --out OUT``, in a fresh interpreter (the same one that runs this script)."""
    command = [
        sys.executable,
        "-m",
        "attnflow.experiments.commands.cli",
        "hist",
        str(states_path),
        "--key",
        "states",
        "--out",
        str(out),
        "--overwrite",
        "--quiet",
    ]
    print("$ attnflow hist", states_path, "--key states --out", out, "--overwrite --quiet", flush=True)
    return subprocess.run(command, check=False).returncode


def run_fit(states_path: Path, out: Path, quick: bool) -> int:
    """``attnflow fit STATES --causal --out OUT``: the particle model (causal SA, one head, full QᵀK and V, one time
    per layer) fitted to the layers, against the identity and the best linear map per layer."""
    # about 0.3 s a step on 2 cores for 16 prompts of 128 tokens at d = 64: two to three minutes
    steps = ["--steps", "40", "--lbfgs-steps", "20"] if quick else ["--steps", "150", "--lbfgs-steps", "40"]
    steps += ["--substeps", "4"]
    command = [
        sys.executable,
        "-m",
        "attnflow.experiments.commands.cli",
        "fit",
        str(states_path),
        "--key",
        "states",
        "--causal",
        "--out",
        str(out),
        "--overwrite",
        *steps,
    ]
    print("$ attnflow fit", states_path, "--key states --causal --out", out, "--overwrite", *steps, flush=True)
    return subprocess.run(command, check=False).returncode


OUTPUTS = ("states.npz", "weights.npz", "prompts.npz", "model.eqx", "settings.json", "hist", "fit")


def check_output_directory(out: Path) -> None:
    """Refuse, before training, an --out that holds anything but an earlier run of this script: its files are
    replaced on a rerun, and nothing else there may be."""
    if out.exists() and not out.is_dir():
        raise SystemExit(f"error: --out {out} is a file, not a directory")
    if not out.is_dir():
        return
    ours = (out / "settings.json").is_file() and "states_shape" in json.loads((out / "settings.json").read_text())
    others = sorted(p.name for p in out.iterdir() if p.name not in OUTPUTS)
    if others or (any(out.iterdir()) and not ours):
        what = ", ".join(others) if others else "and no settings.json of an earlier run"
        raise SystemExit(
            f"error: --out {out} holds files this script did not write ({what}); choose an empty or new directory"
        )


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    out = Path(args.out)
    check_output_directory(out)
    out.mkdir(parents=True, exist_ok=True)

    train_tokens, held_tokens, corpus = read_corpus(args.corpus_mb)
    entropy = unigram_entropy_bits(train_tokens)
    print(
        f"corpus: {corpus['files']} files of {corpus['stdlib']} ({corpus['first']} … {corpus['last']}), "
        f"{corpus['train_bytes']:,} bytes to train on, {corpus['heldout_bytes']:,} held out"
    )

    model, n_params, history, train_seconds = train(args, train_tokens, held_tokens, entropy)
    final = history[-1]
    print(
        f"final loss: held-out {final['heldout_bits_per_byte']:.3f} bits/byte "
        f"(train {final['train_bits_per_byte']:.3f}) vs unigram entropy {entropy:.3f} bits/byte; "
        f"trained in {train_seconds:.0f} s"
    )

    # The hidden states of held-out prompts, (layers = blocks + 1, prompts, tokens, d) in float32.
    prompts = prompt_batch(held_tokens, args.prompts, args.context)
    states, attention = export_states(model, prompts)
    np.savez(out / "states.npz", states=states, attention=attention)
    np.savez(out / "prompts.npz", tokens=prompts.astype(np.uint8))  # the prompts' bytes, to decode them
    np.savez(out / "weights.npz", **head_matrices(model))
    eqx.tree_serialise_leaves(out / "model.eqx", model)

    settings = {k: v for k, v in vars(args).items() if k not in ("out", "no_hist", "no_fit")}
    summary = {
        "settings": settings,
        "corpus": corpus,
        "parameters": int(n_params),
        "unigram_entropy_bits_per_byte": round(entropy, 4),
        "history": history,
        "final_heldout_bits_per_byte": final["heldout_bits_per_byte"],
        "final_train_bits_per_byte": final["train_bits_per_byte"],
        "train_seconds": round(train_seconds, 1),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "states_shape": list(states.shape),
    }
    (out / "settings.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(
        f"saved {out}/: states.npz {states.shape}, weights.npz (qk, ov: "
        f"{(args.layers, args.heads, args.d_model, args.d_model)}), model.eqx, prompts.npz, settings.json"
    )

    if not args.no_hist:
        rc = run_hist(out / "states.npz", out / "hist")
        if rc != 0:
            print(f"error: attnflow hist exited with status {rc}", file=sys.stderr)
            return rc
        figures = sorted((out / "hist").glob("*.png"))
        print("figures:", ", ".join(str(f) for f in figures) or "(none)")
    if not args.no_fit:
        rc = run_fit(out / "states.npz", out / "fit", args.quick)
        if rc != 0:
            print(f"error: attnflow fit exited with status {rc}", file=sys.stderr)
            return rc
    print(f"done in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
