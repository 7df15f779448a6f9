"""Draw docs/img/variants.png: how fast 32 tokens cluster under each model variant.

Run from the repository root: ``python docs/variants_gallery.py`` (about a minute on a laptop CPU).
Every variant starts from the same 16 uniform configurations on S³ (d = 4) at β = 4; the figure
shows the median number of clusters (δ = 10⁻³) against time.
"""

from pathlib import Path

import jax
import numpy as np
from matplotlib.figure import Figure

import attnflow as af

N, D, BETA, SEEDS, T1 = 32, 4, 4.0, 16, 60.0
TS = np.concatenate([[0.0], np.geomspace(0.05, T1, 80)])
X0 = af.init.uniform(0, N, D, batch=SEEDS)
rng = np.random.default_rng(0)
A, B, W = rng.normal(size=(16, D)) / 2, rng.normal(size=16), rng.normal(size=(D, 16)) / 4


def count(t, x, field):
    return af.n_clusters(field.directions(x), 1e-3)


def median_clusters(field, **kw):
    kw = kw or dict(solver="tsit5")
    sol = af.simulate(field, X0, T1, ts=TS, save=count, **kw)
    return np.median(np.asarray(sol.stats), axis=0)


weights = af.sample_weights(jax.random.key(1), D, "ginibre", members=SEEDS)
panels = {
    "attention": {
        "SA": af.SA(BETA),
        "USA (rescaled time)": af.USA(BETA, time="rescaled"),
        "2 heads": af.MultiHead.identity(BETA, 2, D),
        "causal mask": af.SA(BETA, mask="causal"),
        "Sinkhorn": af.Sinkhorn(BETA),
        "hardmax": af.Hardmax(),
        "SA + feed-forward": af.SA(BETA) + af.FeedForward(A, B, W, activation="tanh"),
        "linear attention": af.LinearAttention(),
        "least squares, α = 1": af.LeastSquaresAttention(1.0),
    },
    "normalization, weights, noise": {
        "Post-LN (SA)": af.SA(BETA),
        "Pre-LN": af.PreLN(af.SA(BETA)),
        "peri-LN": af.PeriLN(af.SA(BETA)),
        "nGPT, α = 0.5": af.NGPT(af.SA(BETA), alpha=0.5),
        "Ginibre Q, K, V": af.SA(BETA, **weights),
        "repulsive V = −I": af.SA(BETA, V=-np.eye(D)),
        "noise σ = 0.3": (af.Noisy(af.SA(BETA), 0.3), dict(solver="rk4", dt=0.02)),
    },
}

fig = Figure(figsize=(11, 4.2), layout="constrained")
axes = fig.subplots(1, 2, sharey=True)
for ax, (title, variants) in zip(axes, panels.items()):
    for i, (label, entry) in enumerate(variants.items()):
        field, kw = entry if isinstance(entry, tuple) else (entry, {})
        # alternate dash patterns so lines that coincide (e.g. no clustering at all) stay visible
        ax.step(
            TS[1:],
            median_clusters(field, **kw)[1:],
            where="post",
            label=label,
            lw=1.8,
            ls=("-", "--", "-.", ":")[i % 4],
        )
    ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel("time $t$")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
axes[0].set_ylabel("clusters (median of 16 starts)")
fig.suptitle(rf"$n = {N}$ tokens on $S^{{{D - 1}}}$, $\beta = {BETA:g}$, $\delta = 10^{{-3}}$")
out = Path(__file__).parent / "img" / "variants.png"
fig.savefig(out, dpi=130)
print(out)
