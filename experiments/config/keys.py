"""Every configuration key, declared once: name, type, default, bounds and one line of documentation.

The core keys (what to simulate, the initial condition, the solver, what to save) come first, then
the model variant keys (heads, mask, norm, weights, feed-forward, noise...), then the keys that only
the core's experiments read or several studies share, then each study's own
(``experiments/studies/NAME/NAME_keys.py``, through ``studies.declared_keys``). All are in :data:`KEYS`
as soon as the config package is imported. :func:`register` adds a key from elsewhere (a plugin,
a test); the names of models and the other choice lists live here, once; the solvers' names come from
``solvers.methods``.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable

from ...particles.fields import POSITIONAL
from ...particles.models import MODELS as _MODEL_TABLE
from ...particles.modes import BETA_MAX
from ...solvers.methods import names
from .. import studies
from .toml import toml_literal
from .types import ConfigError, Key, shorten

__all__ = [
    "KEYS",
    "register",
    "SOLVERS",
    "FIXED_STEP_SOLVERS",
    "GRID_ONLY_SOLVERS",
    "SEED_MAX",
    "MODELS",
    "NORMS",
    "WEIGHTS",
    "ACTIVATIONS",
    "suggest",
    "unknown_key",
    "describe_keys",
    "model_keys",
]

SOLVERS = names()  # the integration methods, declared in solvers/methods.py
FIXED_STEP_SOLVERS = names("fixed")
GRID_ONLY_SOLVERS = names(
    grid_only=True
)  # fixed-step solvers that always step on the uniform grid and interpolate their saves
SEED_MAX = 2**63 - 1  # jax.random.key takes a signed 64-bit seed (particles.init.SEED_MAX)
MODELS = tuple(_MODEL_TABLE)  # the attention models, declared in particles/models.py
NORMS = ("post", "pre", "peri", "ngpt", "none")
WEIGHTS = ("identity", "ginibre", "wigner-psd", "ginibre-v-qk", "wigner-v-qk", "v-minus-qk", "repulsive")
ACTIVATIONS = ("relu", "tanh", "gelu", "sigmoid", "identity")

KEYS: dict[str, Key] = {}


def register(key: Key) -> Key:
    """Add ``key`` to :data:`KEYS` (re-registering an identical key is a no-op) and return it."""
    if not isinstance(key, Key):
        raise TypeError(f"register expects a Key, got {type(key).__name__}")
    old = KEYS.get(key.name)
    if old is not None and old != key:
        raise ConfigError(f"key {key.name!r} is already registered with a different definition")
    KEYS[key.name] = key
    return key


_CORE_KEYS = (
    Key("experiment", "str", "simulate", "the kind of experiment (a built-in experiment's name)"),
    Key(
        "model",
        "str",
        "sa",
        "attention: " + "; ".join(f"{m.name}, {m.doc}" for m in _MODEL_TABLE.values()),
        choices=MODELS,
        model=True,
    ),
    Key("n", "int", 32, "number of particles (tokens)", minimum=1),
    Key("d", "int_list", 3, "dimension of the ambient space R^d; a list sweeps it", minimum=2),
    Key(
        "beta",
        "float_list",
        1.0,
        "inverse temperature β; a list runs one ensemble per value (β < 0 with model sa or usa)",
        minimum=-BETA_MAX,
        maximum=BETA_MAX,
    ),
    Key("seeds", "int", 16, "ensemble size: independent initial conditions per β", minimum=1),
    Key(
        "seed",
        "int",
        0,
        "random seed of the first ensemble member (member s draws from seed + s ≤ 2**63 - 1)",
        minimum=0,
    ),
    Key(
        "init",
        "str",
        "uniform",
        "initial condition",
        choices=("uniform", "orthogonal", "equiangular", "cap", "clusters", "file", "angles"),
    ),
    Key(
        "angles",
        "float_list",
        (),
        "initial angles on the circle (init = 'angles', d = 2)",
        allow_empty=True,
        applies=("init", ("angles",)),
    ),
    Key(
        "rho",
        "float",
        0.0,
        "equiangular initial inner product ρ0 (init = 'equiangular')",
        minimum=-1.0,
        maximum=1.0,
        strict_max=True,
        applies=("init", ("equiangular",)),
    ),
    Key(
        "cap_angle",
        "float",
        math.pi / 4,
        "angular radius of the cap (init = 'cap')",
        minimum=0.0,
        strict_min=True,
        maximum=math.pi,
        applies=("init", ("cap",)),
    ),
    Key(
        "n_init_clusters",
        "int",
        3,
        "number of initial clusters (init = 'clusters')",
        minimum=1,
        applies=("init", ("clusters",)),
    ),
    Key(
        "spread",
        "float",
        0.05,
        "spread of the initial clusters (init = 'clusters')",
        minimum=0.0,
        applies=("init", ("clusters",)),
    ),
    Key("init_file", "str", "", "path of a .npy initial configuration (init = 'file')", applies=("init", ("file",))),
    Key("t1", "float", 15.0, "final time", minimum=0.0, strict_min=True),
    Key("n_save", "int", 151, "number of equally spaced save times in [0, t1]", minimum=2),
    Key(
        "save_times",
        "float_list",
        (),
        "explicit save times, increasing, within [0, t1]; override n_save when given",
        minimum=0.0,
        allow_empty=True,
    ),
    Key("solver", "str", "tsit5", "time integrator", choices=SOLVERS),
    Key(
        "dt",
        "float",
        0.0,
        "time step (0 = unset; required by euler, renormalized_euler, rk4, lie_euler, cg3, lie_trotter, ab4)",
        minimum=0.0,
    ),
    Key(
        "max_steps",
        "int",
        1_000_000,
        "the most steps per member (adaptive solvers stop there; longer fixed-step "
        "runs and more save times are refused before they start)",
        minimum=1,
    ),
    Key(
        "dense",
        "bool",
        False,
        "rk4: uniform steps of dt, saves interpolated between them (ab4 and the adaptive solvers always interpolate)",
    ),
    Key("rtol", "float", 1e-6, "relative tolerance of adaptive solvers", minimum=0.0, strict_min=True),
    Key("atol", "float", 1e-9, "absolute tolerance of adaptive solvers", minimum=0.0, strict_min=True),
    Key("dtype", "str", "float64", "floating-point precision", choices=("float32", "float64")),
    Key(
        "precision",
        "str",
        "float32",
        "matrix products of a float32 run: float32 (full), or faster on accelerators tf32 (unit roundoff "
        "2^-11 ≈ 4.9e-4, as large as δ = 1e-3) or bf16 (2^-8); statistics keep full precision",
        choices=("float32", "tf32", "bf16"),
        applies=("dtype", ("float32",)),
    ),
    Key(
        "delta",
        "float",
        1e-3,
        "clustering threshold: pairs with ⟨x_i,x_j⟩ ≥ 1−δ are together",
        minimum=0.0,
        strict_min=True,
        maximum=2.0,
    ),
    Key("save_spacing", "str", "linear", "spacing of the n_save save times", choices=("linear", "log")),
    Key(
        "log_decades",
        "float",
        4.0,
        "with save_spacing = 'log': save times span t1·10^-decades … t1",
        minimum=0.0,
        strict_min=True,
        maximum=30.0,
        applies=("save_spacing", ("log",)),
    ),
    Key("histogram_bins", "int", 0, "bins of the inner-product histograms saved per time (0 = none)", minimum=0),
    Key(
        "save_states", "str", "auto", "keep the trajectories (auto: when they are small)", choices=("auto", "yes", "no")
    ),
    Key(
        "save_members",
        "str",
        "auto",
        "write each member's statistics (auto: when they are small or the experiment's figures read them; "
        "else their means over the seeds)",
        choices=("auto", "yes", "no"),
    ),
    Key(
        "memory_gb",
        "float",
        2.0,
        "memory budget of one compiled batch; larger ensembles run in chunks (on a GPU, at least half its free memory)",
        minimum=0.0,
        strict_min=True,
    ),
    Key(
        "statistics",
        "str_list",
        ("pairs", "clusters", "energy"),
        "statistics saved per time: pairs (inner products, clustered fraction), clustered (the clustered fraction "
        "alone, cheapest), clusters (counts, levels), energy, "
        "attention (spectral gap, stationary law, entropy of the attention matrix)",
        choices=("pairs", "clustered", "clusters", "energy", "attention"),
    ),
    Key("progress", "bool", True, "show progress on stderr"),
    Key("stop_when_clustered", "bool", False, "stop a member once all its pairs are within δ/2 (one cluster)"),
    Key(
        "span",
        "bool",
        True,
        "simulate d > n runs in the span of the tokens where that is exact (V = λI, no noise "
        "or feed-forward): coordinates in R^n, states mapped back to R^d where saved",
    ),
)

# The variant keys compose the way the fields do (experiments/models.py builds them): an attention
# term (model, heads, mask, weights, value, layer_tau/weights_file), an optional feed-forward term
# (ff_*), a layer-norm scheme around the sum (norm), coalescing and noise on top.
_VARIANT_KEYS = (
    Key("heads", "int", 1, "attention heads; each has (d/heads)×d projections ([GLPR] (2.7))", minimum=1, model=True),
    Key(
        "mask",
        "str",
        "none",
        "attention mask: causal lets token i see tokens j ≤ i only",
        choices=("none", "causal"),
        model=True,
    ),
    Key(
        "positional",
        "str",
        "none",
        "positional weights (with mask = causal): alibi adds −m (i − j) to the logits; "
        "decay (usa) weighs j < i by e^{−m (i − j)} normalized over positions (arXiv 2605.09213); "
        "rope (any mask, even d) rotates queries and keys to their positions, β⟨Qx_i, R_{j−i}Kx_j⟩",
        choices=POSITIONAL,
        model=True,
    ),
    Key(
        "alibi_slope",
        "float",
        1.0,
        "the slope m per position of positional = 'alibi' or 'decay'; with heads = H > 1 "
        "head h has m·2^{−8(h−1)/H} (ALiBi's geometric slopes)",
        minimum=0.0,
        applies=("positional", ("alibi", "decay")),
        model=True,
    ),
    Key(
        "rope_base",
        "float",
        10000.0,
        "the base b of positional = 'rope': plane (2p, 2p + 1) of the k-dimensional queries and keys turns by "
        "i·b^{−2p/k} at position i (k = d, or d/heads per head)",
        minimum=0.0,
        strict_min=True,
        applies=("positional", ("rope",)),
        model=True,
    ),
    Key(
        "norm",
        "str",
        "post",
        "layer norm: post (the sphere), pre, peri, ngpt, or none (dynamics in R^d)",
        choices=NORMS,
        model=True,
    ),
    Key(
        "ngpt_alpha",
        "float",
        1.0,
        "step size α of the nGPT update (norm = 'ngpt')",
        minimum=0.0,
        strict_min=True,
        applies=("norm", ("ngpt",)),
        model=True,
    ),
    Key(
        "weights",
        "str",
        "identity",
        "Q, K, V: identity, or a random ensemble drawn per seed (Fig. 5)",
        choices=WEIGHTS,
        model=True,
    ),
    Key(
        "value",
        "str",
        "identity",
        "value matrix V with identity weights: identity or -identity (repulsive)",
        choices=("identity", "-identity"),
        model=True,
    ),
    Key(
        "layer_tau",
        "float",
        0.0,
        "redraw the random weights every τ time units (0: the same weights throughout)",
        minimum=0.0,
        model=True,
    ),
    Key(
        "weights_file",
        "str",
        "",
        ".npz of per-layer Q, K, V (arrays of shape (layers, ·, ·)), used every layer_tau",
        model=True,
    ),
    Key(
        "ff_width",
        "int",
        0,
        "hidden width m of a feed-forward term w σ(a x + b) (0: none, [GLPR] (2.8))",
        minimum=0,
        model=True,
    ),
    Key(
        "ff_activation",
        "str",
        "relu",
        "activation σ of the feed-forward term",
        choices=ACTIVATIONS,
        applies=("ff_width", ">0"),
        model=True,
    ),
    Key(
        "ff_scale",
        "float",
        1.0,
        "scale of the feed-forward output weights w",
        minimum=0.0,
        applies=("ff_width", ">0"),
        model=True,
    ),
    Key(
        "noise",
        "float",
        0.0,
        "noise strength σ of dX = … dt + σ P_X ∘ dW (κ = 2/σ²); needs a fixed-step solver",
        minimum=0.0,
        model=True,
    ),
    Key(
        "coalesce",
        "float",
        0.0,
        "tokens within ½‖x_i − x_j‖² ≤ coalesce of an earlier token move with it "
        "(particles/coalesce.py): removes the stiff contraction of collapsed clusters; 0 = off",
        minimum=0.0,
        model=True,
    ),
    Key(
        "circle",
        "str",
        "no",
        "integrate d = 2 runs of plain SA/USA in angles θ (n, 1), the circle fast path: "
        "yes, no, or auto (where the run allows it)",
        choices=("auto", "yes", "no"),
    ),
    Key(
        "sinkhorn_tol",
        "float",
        1e-9,
        "tolerance of the Sinkhorn normalization (model = 'sinkhorn')",
        minimum=0.0,
        strict_min=True,
        model=True,
    ),
    Key(
        "alpha",
        "float",
        1.0,
        "ridge regularization α of least-squares attention Q(KᵀK + αI)⁻¹KᵀV (model = 'least_squares')",
        minimum=0.0,
        strict_min=True,
        model=True,
    ),
    Key(
        "linear_normalize",
        "str",
        "n",
        "linear attention (model = 'linear'): divide the kernel sum by n, or by the row sum Σ_j⟨φ(Qx_i),φ(Kx_j)⟩",
        choices=("n", "sum"),
        model=True,
    ),
    Key(
        "linear_feature",
        "str",
        "identity",
        "feature map φ of linear attention: identity (the raw kernel "
        "⟨Qx_i,Kx_j⟩) or elu (elu + 1 > 0, Katharopoulos et al.)",
        choices=("identity", "elu"),
        model=True,
    ),
)

# the keys that only the core's experiments read, or several studies share, each documented with the experiments'
# names first (``experiment_key=True``: read only by the experiments that list them in their ``keys``)
_EXPERIMENT_KEYS = (
    Key(
        "degree",
        "int",
        32,
        "meanfield-sphere: the largest spherical-harmonic degree L of the density",
        minimum=2,
        experiment_key=True,
    ),
    Key(
        "modes",
        "int",
        256,
        "meanfield-circle: Fourier modes |k| < modes of the density (a grid of 2·modes angles)",
        minimum=2,
        experiment_key=True,
    ),
    Key(
        "perturbation",
        "float",
        1e-3,
        "meanfield-circle: amplitude ε of each mode k ≤ 16 of the initial density",
        minimum=0.0,
        experiment_key=True,
    ),
    Key(
        "particle_counts",
        "int_list",
        (),
        "meanfield-circle, meanfield-sphere, gaussian-closure: particle counts n "
        "compared with the density (or the closure)",
        minimum=1,
        allow_empty=True,
        experiment_key=True,
    ),
    Key(
        "context_lengths",
        "int_list",
        (),
        "long-context, selectivity: the context lengths n of one attention layer (selectivity: n keys per query)",
        minimum=2,
        allow_empty=True,
        experiment_key=True,
    ),
)

for _key in (*_CORE_KEYS, *_VARIANT_KEYS, *_EXPERIMENT_KEYS, *studies.declared_keys()):
    register(_key)
del _key


def model_keys() -> tuple[str, ...]:
    """The keys that change the model itself (declared with ``model=True``), in the order of :data:`KEYS`: the
    one list by which a model's variant keys are refused (``rules.check_model_keys``) and an experiment's theory
    checks are judged not to apply (``registry.changed_model_keys``)."""
    return tuple(name for name, key in KEYS.items() if key.model)


_UNDECLARED = sorted({k for m in _MODEL_TABLE.values() for k in m.takes} - set(model_keys()))
if _UNDECLARED:  # a model's ``takes`` names keys declared here, as model keys
    raise ImportError(f"particles/models.py: models take {', '.join(_UNDECLARED)}, which are not keys with model=True")


def suggest(name: str, valid: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the valid name nearest to ``name``, or ``""`` when none is near."""
    near = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f"; did you mean {near[0]!r}?" if near else ""


def unknown_key(name: str) -> ConfigError:
    """The error for a key name not in :data:`KEYS`, naming the nearest key, or else every key but the
    built-in experiments' own (those ``attnflow list --keys`` lists with the rest)."""
    hint = suggest(name, KEYS) if len(name) <= 60 else ""
    if not hint:
        common = [key for key, declared in KEYS.items() if not declared.experiment_key]
        hint = "; valid keys: " + ", ".join(common) + "; the built-in experiments' own keys: attnflow list --keys"
    return ConfigError(f"unknown key {shorten(name)!r}{hint}")


def describe_keys() -> str:
    """A text table of every key: name, type, default, and doc with the values allowed."""
    rows = [("key", "type", "default", "description")]
    for key in KEYS.values():
        default = toml_literal(key.default)
        if len(default) > 24:
            default = default[:21] + "..."
        doc = key.doc
        if key.choices is not None or key.minimum is not None or key.maximum is not None:
            doc += f" [{key.allowed()}]"
        rows.append((key.name, key.type, default, doc))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = []
    for i, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        if i == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(r[3]))
    return "\n".join(line.rstrip() for line in out)
