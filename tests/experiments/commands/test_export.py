"""``attnflow export`` on tiny causal language models built here (random weights, a word-level tokenizer): the
states and attention it writes against the models' own computations, then through ``attnflow hist`` and
``attnflow probe``."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from cli_helpers import cli, tree

WORDS = "the a cat dog sat ran on under mat log and then far away quickly slowly".split()
PROMPTS = [
    "the cat sat on the mat and then ran far away",
    "a dog ran quickly under the log",
    "the dog sat slowly on a mat then ran",
    "a cat ran under the mat and the dog sat",
    "then the cat ran away and a dog sat on the log",
]
TOKENS = 7  # the second prompt is the shortest: 7 words


def _tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]")


def _model(kind: str):
    """A two-block GPT-2 or Llama, d = 32, 2 heads, a vocabulary of 300, random weights (seeded)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=300, n_positions=64, n_embd=32, n_layer=2, n_head=2, bos_token_id=1, eos_token_id=1
        )
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config)


@pytest.fixture(params=["gpt2", "llama"])
def saved(request, tmp_path):
    """(model kind, its directory, the prompts file, the model in memory, the tokenizer)."""
    model, tokenizer = _model(request.param), _tokenizer()
    where = tmp_path / request.param
    model.save_pretrained(where)
    tokenizer.save_pretrained(where)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n\n")
    return request.param, where, prompts, model.eval(), tokenizer


def test_states_and_attention_match_the_model(saved, tmp_path):
    import torch

    kind, where, prompts, model, tokenizer = saved
    out = tmp_path / "states.npz"
    rc, stdout, err = cli(["export", where, "--prompts", prompts, "--out", out])
    assert rc == 0, err
    with np.load(out) as z:
        states, attention = z["states"], z["attention"]
    # the shortest prompt sets the common length; every array float32 with the config's sizes
    assert states.dtype == attention.dtype == np.float32
    assert states.shape == (3, 5, TOKENS, 32)
    assert attention.shape == (2, 5, 2, TOKENS, TOKENS)
    ids = torch.as_tensor([tokenizer(p)["input_ids"][:TOKENS] for p in PROMPTS])
    with torch.no_grad():
        if kind == "gpt2":  # token plus position embedding (dropout is off in evaluation)
            embedded = model.transformer.wte(ids) + model.transformer.wpe(torch.arange(TOKENS))
        else:
            embedded = model.model.embed_tokens(ids)
        last = model.base_model(input_ids=ids).last_hidden_state
    np.testing.assert_allclose(states[0], embedded.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(states[-1], last.numpy(), rtol=0, atol=1e-5)
    # softmax rows sum to 1; a token sees itself and the tokens before it only
    np.testing.assert_allclose(attention.sum(-1), 1.0, atol=1e-5)
    assert np.all(np.triu(attention, 1) == 0)
    assert np.all(attention[..., np.tri(TOKENS, dtype=bool)] > 0)
    provenance = json.loads(out.with_suffix(".json").read_text())
    assert provenance["model_type"] == kind
    assert provenance["token_ids"] == ids.tolist()
    assert (provenance["blocks"], provenance["heads"], provenance["d"]) == (2, 2, 32)
    # end to end: hist reads the file (the array named states) and finds blocks + 1 layers
    rc, _, err = cli(["hist", out, "--out", tmp_path / "hist", "--quiet", "--no-plot", "--no-cache"])
    assert rc == 0, err
    summary = json.loads((tmp_path / "hist" / "summary.json").read_text())
    assert len(summary["mean_inner_product"]) == 3
    # and probe: the attention array beside the states, its first-token attention the file's own
    rc, _, err = cli(
        ["probe", out, "--beta", 1, "--k", 3, "--out", tmp_path / "probe", "--quiet", "--no-plot", "--no-cache"]
    )
    assert rc == 0, err
    summary = json.loads((tmp_path / "probe" / "summary.json").read_text())
    assert summary["attention_key"] == "attention" and summary["sink_blocks"] == [1, 2]
    np.testing.assert_allclose(summary["first_token_attention"], attention[..., 0].mean(axis=(1, 2, 3)), atol=1e-6)


def test_tokens_and_prompt_count(saved, tmp_path):
    kind, where, prompts, model, tokenizer = saved
    out = tmp_path / "few.npz"
    rc, _, err = cli(["export", where, "--prompts", prompts, "--tokens", 4, "--prompts-count", 2, "--out", out])
    assert rc == 0, err
    with np.load(out) as z:
        assert z["states"].shape == (3, 2, 4, 32)
        assert z["attention"].shape == (2, 2, 2, 4, 4)
    rc, _, err = cli(["export", where, "--prompts", prompts, "--no-attention", "--out", tmp_path / "alone.npz"])
    assert rc == 0, err
    with np.load(tmp_path / "alone.npz") as z:
        assert z.files == ["states"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--tokens", 8], "--tokens 8: prompt 2 has only 7 tokens"),
        (["--prompts-count", 9], "--prompts-count 9: prompts file"),
        (["--out", "states.txt"], "expected a file name ending in .npz"),
    ],
)
def test_bad_input_writes_nothing(saved, tmp_path, monkeypatch, flags, message):
    kind, where, prompts, model, tokenizer = saved
    monkeypatch.chdir(tmp_path)
    before = tree(tmp_path)
    argv = ["export", where, "--prompts", prompts, *flags]
    rc, stdout, err = cli(argv if "--out" in flags else [*argv, "--out", "states.npz"])
    assert rc == 2
    assert err.count("\n") == 1 and message in err
    assert tree(tmp_path) == before


def test_existing_output_is_kept(saved, tmp_path):
    kind, where, prompts, model, tokenizer = saved
    out = tmp_path / "states.npz"
    out.write_bytes(b"mine")
    rc, _, err = cli(["export", where, "--prompts", prompts, "--out", out])
    assert rc == 2 and "exists" in err and "--overwrite" in err
    assert out.read_bytes() == b"mine"


def test_without_torch_names_the_extra(tmp_path, monkeypatch):
    """Without torch (or transformers) installed: one line naming the extra, status 2, nothing written."""
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a b c\n")
    rc, stdout, err = cli(["export", "some/model", "--prompts", prompts, "--out", tmp_path / "s.npz"])
    assert rc == 2
    assert err.count("\n") == 1 and 'pip install "attnflow[hf]"' in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt"]
