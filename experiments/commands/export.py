"""``attnflow export``: a Hugging Face causal language model's hidden states and attention weights on prompts.

Loads any causal LM that ``transformers``' ``AutoModelForCausalLM`` and ``AutoTokenizer`` load (a local
directory or a hub name), in float32 on the CPU with the eager attention (the implementation that returns
its weights), runs it on the prompts of a text file (one a line) cut to a common number of tokens, and
writes the ``.npz`` file that ``attnflow hist``, ``fit`` and ``probe`` read:

    states     (layers = blocks + 1, prompts, tokens, d) float32: the embedding output, then each block's
               (the model's ``hidden_states``; in ``transformers`` the last one is taken after the final norm)
    attention  (blocks, prompts, heads, tokens, tokens) float32: each row sums to 1, zero above the diagonal

and beside it a json file of provenance (the model, the versions, the prompts' token ids). ``torch`` and
``transformers`` are the optional extra ``attnflow[hf]``; without them the command says so and exits 2.
Every check (the prompts, the token count, the memory, the output path) comes before the model is run, and
the file is written atomically: nothing is written on an error.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "add_arguments",
    "INSTALL_HINT",
    "read_prompts",
    "load_tokenizer",
    "load_model",
    "token_ids",
    "hidden_states",
    "export",
    "main",
]

INSTALL_HINT = 'attnflow export needs torch and transformers: pip install "attnflow[hf]"'
BATCH = 8  # prompts per forward pass


def add_arguments(p, positive_int) -> None:
    """``attnflow export``'s arguments on its subparser ``p`` (``positive_int``: the command line's type)."""
    p.add_argument("model", metavar="MODEL", help="a local model directory or a Hugging Face hub name")
    for flag, metavar, kind, text in (
        ("--prompts", "FILE", str, "a UTF-8 text file, one prompt a line (required)"),
        ("--tokens", "N", positive_int, "cut every prompt to its first N tokens (default: the shortest one's length)"),
        ("--prompts-count", "P", positive_int, "the first P prompts of the file (default: all)"),
        ("--out", "STATES.npz", str, "the states file to write, its provenance beside it as .json (required)"),
    ):
        p.add_argument(flag, metavar=metavar, type=kind, required=flag in ("--prompts", "--out"), help=text)
    p.add_argument("--no-attention", action="store_true", help="save the hidden states alone, not the attention")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")


def _require_hf():
    """torch and transformers, or the one-line ValueError naming the extra that installs them."""
    try:
        return importlib.import_module("torch"), importlib.import_module("transformers")
    except ImportError:
        raise ValueError(INSTALL_HINT) from None


def read_prompts(path, count: int | None = None) -> list[str]:
    """The non-empty lines of a UTF-8 text file, the first ``count`` of them (all by default)."""
    label = f"prompts file {os.fspath(path)!r}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{label} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{label} is a directory; give a text file with one prompt a line") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{label} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise ValueError(f"cannot read {label} ({err.strerror or err})") from None
    prompts = [line.strip() for line in text.splitlines() if line.strip()]
    if not prompts:
        raise ValueError(f"{label} holds no prompt; write one prompt a line")
    if count is not None:
        if count > len(prompts):
            raise ValueError(f"--prompts-count {count}: {label} holds only {len(prompts)} prompts")
        prompts = prompts[:count]
    return prompts


def _loading(what: str, name: str, load):
    """``load()``, its failure one line naming ``what`` and ``name``."""
    try:
        return load()
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load the {what} of {name!r} ({first})") from None


def load_tokenizer(name: str):
    """The tokenizer of a local directory or hub name."""
    _, transformers = _require_hf()
    return _loading("tokenizer", name, lambda: transformers.AutoTokenizer.from_pretrained(name))


def load_model(name: str):
    """The causal language model of a local directory or hub name: float32, eager attention, evaluation mode,
    loaded without a progress bar (stderr keeps to one line per problem)."""
    torch, transformers = _require_hf()
    transformers.utils.logging.disable_progress_bar()
    model = _loading(
        "causal language model",
        name,
        lambda: transformers.AutoModelForCausalLM.from_pretrained(name, attn_implementation="eager"),
    )
    torch.set_grad_enabled(False)
    return model.float().eval()


def token_ids(tokenizer, prompts: list[str], tokens: int | None) -> np.ndarray:
    """The prompts' token ids (prompts, tokens), each cut to ``tokens`` (default: the shortest prompt's length)."""
    ids = [list(tokenizer(p)["input_ids"]) for p in prompts]
    lengths = [len(i) for i in ids]
    if tokens is None:
        tokens = min(lengths)
    short = [k for k, n in enumerate(lengths) if n < tokens]
    if short:
        k = short[0]
        raise ValueError(
            f"--tokens {tokens}: prompt {k + 1} has only {lengths[k]} tokens ({len(short)} prompt(s) are shorter); "
            "lower --tokens or lengthen the prompts"
        )
    if tokens < 2:
        raise ValueError(f"the prompts are cut to {tokens} token(s); the states need at least 2 (--tokens N ≥ 2)")
    return np.array([i[:tokens] for i in ids], dtype=np.int64)


def _check_memory(shape: tuple, heads: int, attention: bool) -> None:
    from ..run import memory

    layers, prompts, tokens, d = shape
    need = 4 * layers * prompts * tokens * d * 2  # the states, and their copy into one array
    if attention:
        need += 4 * (layers - 1) * prompts * heads * tokens * tokens * 2
    have = memory.machine_bytes()
    if have is not None and need > have:
        raise ValueError(
            f"the export needs about {memory.format_bytes(need)} of memory, more than this machine's "
            f"{memory.format_bytes(have)}; use fewer --prompts-count or --tokens, or --no-attention"
        )


def hidden_states(model, ids: np.ndarray, attention: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """The model's hidden states (blocks + 1, prompts, tokens, d) and attention weights (blocks, prompts, heads,
    tokens, tokens), float32, on token ids (prompts, tokens), ``BATCH`` prompts per forward pass."""
    torch, _ = _require_hf()
    states, weights = [], []
    for start in range(0, ids.shape[0], BATCH):
        batch = torch.as_tensor(ids[start : start + BATCH])
        out = model(input_ids=batch, output_hidden_states=True, output_attentions=attention, use_cache=False)
        states.append(np.stack([h.float().numpy() for h in out.hidden_states]))
        if attention:
            weights.append(np.stack([a.float().numpy() for a in out.attentions]))
    return np.concatenate(states, axis=1), (np.concatenate(weights, axis=1) if attention else None)


def _write_atomically(path: Path, write) -> None:
    """``write(temporary path)``, then rename it to ``path``: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_out(out: Path, overwrite: bool) -> Path:
    if out.suffix != ".npz":
        raise ValueError(f"--out {str(out)!r}: expected a file name ending in .npz")
    if out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a directory; give the .npz file to write")
    if out.exists() and not overwrite:
        raise ValueError(f"--out {str(out)!r} exists; choose another name or pass --overwrite")
    if not out.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: the directory {str(out.parent)!r} does not exist")
    return out.with_suffix(".json")


def export(
    model_name: str,
    prompts_path,
    out,
    *,
    tokens: int | None = None,
    count: int | None = None,
    attention: bool = True,
    overwrite: bool = False,
) -> dict:
    """Write the states file ``out`` (.npz) and its provenance (the same name, .json); return the provenance."""
    torch, transformers = _require_hf()
    out = Path(out)
    provenance_path = _check_out(out, overwrite)
    prompts = read_prompts(prompts_path, count)
    ids = token_ids(load_tokenizer(model_name), prompts, tokens)
    model = load_model(model_name)
    config = model.config
    blocks, d = int(config.num_hidden_layers), int(config.hidden_size)
    heads = int(config.num_attention_heads)
    _check_memory((blocks + 1, ids.shape[0], ids.shape[1], d), heads, attention)
    states, weights = hidden_states(model, ids, attention)
    arrays: dict[str, Any] = {"states": states} if weights is None else {"states": states, "attention": weights}
    provenance = {
        "command": "export",
        "model": model_name,
        "model_type": config.model_type,
        "blocks": blocks,
        "heads": heads,
        "d": d,
        "prompts_file": os.fspath(prompts_path),
        "prompts": int(ids.shape[0]),
        "tokens": int(ids.shape[1]),
        "token_ids": ids.tolist(),
        "arrays": {k: list(v.shape) for k, v in arrays.items()},
        "dtype": "float32",
        "last_layer": "the model's last hidden state, after its final norm where it has one",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    if not all(math.isfinite(float(np.abs(a).max())) for a in arrays.values()):
        raise ValueError(f"the model {model_name!r} produced non-finite hidden states on these prompts")

    def write_arrays(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would add .npz to a path's name
            np.savez(f, **arrays)

    _write_atomically(out, write_arrays)
    _write_atomically(provenance_path, lambda tmp: tmp.write_text(json.dumps(provenance, indent=1) + "\n"))
    return provenance


def main(args) -> int:
    """``attnflow export`` (arguments parsed by ``cli.build_parser``)."""
    _require_hf()  # first: the one message that names the extra
    provenance = export(
        args.model,
        args.prompts,
        args.out,
        tokens=args.tokens,
        count=args.prompts_count,
        attention=not args.no_attention,
        overwrite=args.overwrite,
    )
    shapes = ", ".join(f"{k} {tuple(v)}" for k, v in provenance["arrays"].items())
    print(
        f"export: {args.model} ({provenance['model_type']}), {provenance['prompts']} prompts of "
        f"{provenance['tokens']} tokens: {shapes}"
    )
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.json')}")
    return 0
