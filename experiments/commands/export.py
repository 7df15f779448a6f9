"""``attnflow export``: a Hugging Face causal language model's hidden states and attention weights on prompts.

Loads any causal LM that ``transformers``' ``AutoModelForCausalLM`` and ``AutoTokenizer`` load (a local
directory or a hub name), in float32 on the CPU with the eager attention (the implementation that returns
its weights), runs it on the prompts of a text file (one a line) cut to a common number of tokens, and
writes the ``.npz`` file that ``attnflow hist``, ``fit`` and ``probe`` read:

    states     (layers = blocks + 1, prompts, tokens, d) float32: the embedding output, then each block's
               (the model's ``hidden_states``; in ``transformers`` the last one is taken after the final norm)
    attention  (blocks, prompts, heads, tokens, tokens) float32: each row sums to 1, zero above the diagonal

and beside it a json file of provenance (the model, the versions, the prompts' token ids, and the name of
the states file it describes: the pair is attnflow's, and only such a pair is replaced, on ``--overwrite``;
a file of the user's at either name is never replaced). ``torch`` and
``transformers`` are the optional extra ``attnflow[hf]``; without them the command says so and exits 2.
Every check (the prompts, the token count, the memory, the output path) comes before the model is run, and
both files are written under temporary names and renamed into place: nothing is written on an error.
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
    "INSTALL_HINT",
    "read_prompts",
    "load_tokenizer",
    "load_model",
    "token_ids",
    "hidden_states",
    "PROVENANCE_FORMAT",
    "check_out",
    "write_pair",
    "export",
    "main",
]

INSTALL_HINT = 'attnflow export needs torch and transformers: pip install "attnflow[hf]"'
BATCH = 8  # prompts per forward pass


def _require_hf():
    """torch and transformers, or the one-line ValueError naming the extra that installs them."""
    try:
        return importlib.import_module("torch"), importlib.import_module("transformers")
    except ImportError:
        raise ValueError(INSTALL_HINT) from None


def read_prompts(path, count: int | None = None) -> list[str]:
    """The non-empty lines of a UTF-8 text file, the first ``count`` of them (all by default)."""
    label = f"prompts file {os.fspath(path)!r}"
    from ...particles.files import TEXT_LIMIT, read_regular  # here: the particles package imports equinox

    data = read_regular(
        path, label, limit=TEXT_LIMIT, error=ValueError, hint="; give a text file with one prompt a line"
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{label} is not UTF-8 text ({err.reason} at byte {err.start})") from None
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


PROVENANCE_FORMAT = "attnflow-export"
"""The ``format`` of the provenance file export writes beside its states file: what makes the pair attnflow's."""


def _label(path: Path) -> str:
    return f"--out {str(path)!r}" if path.suffix == ".npz" else f"the provenance file {str(path)!r}"


def _ours(provenance_path: Path, states_name: str) -> bool:
    """Whether ``provenance_path`` is the provenance export wrote for the states file ``states_name`` (or an
    earlier export's, which named no file and no format: its ``command`` and ``arrays``)."""
    try:
        from ...particles.files import TEXT_LIMIT, read_regular

        doc = json.loads(read_regular(provenance_path, "provenance", limit=TEXT_LIMIT).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    if not isinstance(doc, dict) or doc.get("command") != "export":
        return False
    if "format" not in doc:
        return isinstance(doc.get("arrays"), dict) and "states_file" not in doc
    return doc.get("format") == PROVENANCE_FORMAT and doc.get("states_file") == states_name


def check_out(out, overwrite: bool = False) -> Path:
    """Refuse an ``--out`` that export cannot write its pair at (the states file ``out`` and the provenance
    beside it, ``.json``); return the provenance's path. A pair is replaced only when export wrote it (the
    provenance names the states file, as export writes it) and ``overwrite`` asks; a file of the user's at
    either name, a link or a directory is never replaced."""
    out = Path(out)
    if out.suffix != ".npz":
        raise ValueError(f"--out {str(out)!r}: expected a file name ending in .npz")
    provenance_path = out.with_suffix(".json")
    if not out.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: the directory {str(out.parent)!r} does not exist")
    present = [p for p in (out, provenance_path) if os.path.lexists(p)]
    for path in present:
        if path.is_symlink():
            raise ValueError(
                f"{_label(path)} is a symbolic link (to {os.readlink(path)!r}); export writes only files of its "
                "own: choose another --out"
            )
        if path.is_dir():
            raise ValueError(f"{_label(path)} is a directory; give the .npz file to write")
        if not path.is_file():
            raise ValueError(f"{_label(path)} is not a regular file; choose another --out")
    if not present:
        return provenance_path
    # a states file is export's only with the provenance export wrote for it beside it
    theirs = provenance_path if os.path.lexists(provenance_path) else out
    if theirs == out or not _ours(provenance_path, out.name):
        raise ValueError(
            f"{_label(theirs)} exists and attnflow export did not write it (no provenance of its own for "
            f"{out.name!r} beside it); attnflow never replaces a file of yours, even with --overwrite: "
            "choose another --out"
        )
    if not overwrite:
        raise ValueError(
            f"--out {str(out)!r} exists (an earlier export); choose another name or pass --overwrite to replace it"
        )
    return provenance_path


def _temporary(path: Path) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp)


def _sync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def write_pair(out, arrays: dict[str, Any], provenance: dict, *, overwrite: bool = False) -> Path:
    """Write the states file ``out`` (.npz of ``arrays``) and its provenance beside it (.json, ``provenance``
    with the pair's ``format`` and ``states_file``), refusing first what ``check_out`` refuses; return the
    provenance's path.

    Both are written and synced under temporary names, checked again, then renamed into place, the states
    first and the provenance that describes them last; on any error, Ctrl-C included, the temporaries are
    removed and nothing of an earlier pair is changed."""
    out = Path(out)
    provenance_path = check_out(out, overwrite)
    doc = {"format": PROVENANCE_FORMAT, "states_file": out.name, **provenance}
    text = json.dumps(doc, indent=1) + "\n"
    temporaries: list[Path] = []
    try:
        states_tmp = _temporary(out)
        temporaries.append(states_tmp)
        with open(states_tmp, "wb") as f:  # a file object: np.savez would add .npz to a path's name
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        provenance_tmp = _temporary(provenance_path)
        temporaries.append(provenance_tmp)
        provenance_tmp.write_text(text, encoding="utf-8")
        _sync(provenance_tmp)
        check_out(out, overwrite)  # again: a file put there while the model ran is the user's too
        os.replace(states_tmp, out)
        temporaries.remove(states_tmp)
        os.replace(provenance_tmp, provenance_path)
        temporaries.remove(provenance_tmp)
    finally:
        for tmp in temporaries:
            tmp.unlink(missing_ok=True)
    return provenance_path


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
    check_out(out, overwrite)
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
    write_pair(out, arrays, provenance, overwrite=overwrite)
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
