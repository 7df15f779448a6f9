"""Draw docs/img/hist_layers.png: ``attnflow hist`` on synthetic token states.

Run from the repository root: ``python docs/hist_example.py`` (about 20 s on a laptop CPU).
The "model" is a toy 12-layer transformer made of attnflow's own pieces: SA at β = 2 whose Q, K, V
are redrawn at random (Ginibre) in every layer, 2 prompts of 48 tokens in d = 32 starting in a cap
(embeddings with positive inner products, as real ones have). Its 13 states (the embeddings and
each layer's output) are saved as a float32 .npz, the way README.md says to dump a Hugging
Face model's hidden states, and compared with SA from layer 0 (Q = K = V = I) at β = 1 and 4, one
layer lasting τ = 0.3.
"""

import shutil
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import attnflow as af
from attnflow.experiments.commands.cli import main

LAYERS, TOKENS, D, PROMPTS = 13, 48, 32, 2

x0 = af.init.cap(1, TOKENS, D, angle=1.2, batch=PROMPTS)
toy = af.LayerWise.redrawn(af.SA(2.0), jax.random.key(2), "ginibre", D, LAYERS, 1.0)
sol = af.simulate(toy, x0, t1=LAYERS - 1.0, ts=jnp.arange(float(LAYERS)))
states = np.moveaxis(np.asarray(sol.xs), 0, 1).astype(np.float32)  # (layers, prompts, tokens, d)

with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "toy_states.npz"
    np.savez(path, hidden_states=states)
    main(
        [
            "hist",
            str(path),
            "--simulate-from",
            "0",
            "--beta",
            "1,4",
            "--layer-time",
            "0.3",
            "--quiet",
            "--out",
            str(Path(tmp) / "out"),
        ]
    )
    target = Path(__file__).parent / "img" / "hist_layers.png"
    shutil.copyfile(Path(tmp) / "out" / "histograms.png", target)
    print(target)
