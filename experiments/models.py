"""From configuration keys to a vector field: every model variant reachable from TOML and ``--set``.

The keys compose the way the fields do: an attention term (``model``, ``heads``, ``mask``,
``weights``, ``value``, ``layer_tau``/``weights_file``), an optional feed-forward term
(``ff_width``), a layer-norm scheme wrapped around the sum (``norm``), and noise on top
(``noise``). Combinations that make no sense are refused with one clear line.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..particles import fields
from .config import FIXED_STEP_SOLVERS, GRID_ONLY_SOLVERS, KEYS, Config, ConfigError, Key, register, register_check

MODELS = ("sa", "usa", "usa-rescaled", "sinkhorn", "hardmax", "linear", "least_squares")
_UNNORMALIZED = ("linear", "least_squares")  # no softmax, no β
ATTENTION_STATISTICS_MAX_N = 1024  # the "attention" statistics form A(t) (n×n) and its spectrum at every save
NORMS = ("post", "pre", "peri", "ngpt", "none")
WEIGHTS = ("identity", "ginibre", "wigner-psd", "ginibre-v-qk", "wigner-v-qk", "v-minus-qk", "repulsive")
ACTIVATIONS = ("relu", "tanh", "gelu", "sigmoid", "identity")

for _key in (
    Key("heads", "int", 1, "attention heads; each has (d/heads)×d projections ([GLPR] (2.7))", minimum=1),
    Key("mask", "str", "none", "attention mask: causal lets token i see tokens j ≤ i only", choices=("none", "causal")),
    Key("norm", "str", "post", "layer norm: post (the sphere), pre, peri, ngpt, or none (dynamics in R^d)",
        choices=NORMS),
    Key("ngpt_alpha", "float", 1.0, "step size α of the nGPT update (norm = 'ngpt')", minimum=0.0, strict_min=True),
    Key("weights", "str", "identity", "Q, K, V: identity, or a random ensemble drawn per seed (Fig. 5)",
        choices=WEIGHTS),
    Key("value", "str", "identity", "value matrix V with identity weights: identity or -identity (repulsive)",
        choices=("identity", "-identity")),
    Key("layer_tau", "float", 0.0, "redraw the random weights every τ time units (0: the same weights throughout)",
        minimum=0.0),
    Key("weights_file", "str", "", ".npz of per-layer Q, K, V (arrays of shape (layers, ·, ·)), used every layer_tau"),
    Key("ff_width", "int", 0, "hidden width m of a feed-forward term w σ(a x + b) (0: none, [GLPR] (2.8))", minimum=0),
    Key("ff_activation", "str", "relu", "activation σ of the feed-forward term", choices=ACTIVATIONS),
    Key("ff_scale", "float", 1.0, "scale of the feed-forward output weights w", minimum=0.0),
    Key("noise", "float", 0.0, "noise strength σ of dX = … dt + σ P_X ∘ dW (κ = 2/σ²); needs a fixed-step solver",
        minimum=0.0),
    Key("coalesce", "float", 0.0, "tokens within ½‖x_i − x_j‖² ≤ coalesce of an earlier token move with it "
        "(particles/coalesce.py): removes the stiff contraction of collapsed clusters; 0 = off", minimum=0.0),
    Key("circle", "str", "no", "integrate d = 2 runs of plain SA/USA in angles θ (n, 1), the circle fast path: "
        "yes, no, or auto (where the run allows it)", choices=("auto", "yes", "no")),
    Key("sinkhorn_tol", "float", 1e-9, "tolerance of the Sinkhorn normalization (model = 'sinkhorn')",
        minimum=0.0, strict_min=True),
    Key("alpha", "float", 1.0, "ridge regularization α of least-squares attention Q(KᵀK + αI)⁻¹KᵀV "
        "(model = 'least_squares')", minimum=0.0, strict_min=True),
    Key("linear_normalize", "str", "n", "linear attention (model = 'linear'): divide the kernel sum by n, "
        "or by the row sum Σ_j⟨φ(Qx_i),φ(Kx_j)⟩", choices=("n", "sum")),
    Key("linear_feature", "str", "identity", "feature map φ of linear attention: identity (the raw kernel "
        "⟨Qx_i,Kx_j⟩) or elu (elu + 1 > 0, Katharopoulos et al.)", choices=("identity", "elu")),
):
    register(_key)
del _key


@register_check
def _check_combinations(c: Config) -> None:
    """Refuse combinations of variant keys that have no meaning, naming the keys involved."""
    if c.model == "hardmax" and c.heads > 1:
        raise ConfigError("model = 'hardmax' has a single head; got heads = %d" % c.heads)
    if c.model == "sinkhorn" and c.mask == "causal":
        raise ConfigError("model = 'sinkhorn' cannot be combined with mask = 'causal' "
                          "(a causal matrix is not doubly stochastic)")
    if c.heads > 1:
        bad = [d for d in c.d if d % c.heads]
        if bad:
            raise ConfigError(f"heads must divide d: heads = {c.heads} does not divide d = {bad[0]}")
    if c.value == "-identity" and c.weights != "identity":
        raise ConfigError(f"value = '-identity' applies to identity weights; with weights = {c.weights!r} "
                          "use weights = 'repulsive' or 'v-minus-qk'")
    if c.weights_file and c.weights != "identity":
        raise ConfigError("give either weights_file (user weights per layer) or a random weights ensemble, not both")
    if (c.weights_file or (c.layer_tau > 0 and c.weights != "identity")) and c.layer_tau <= 0:
        raise ConfigError("weights_file needs layer_tau > 0, the time each layer's weights act")
    one_step = [s for s in FIXED_STEP_SOLVERS if s not in GRID_ONLY_SOLVERS]  # what a Strang splitting wraps
    if c.noise > 0 and c.solver not in one_step:
        raise ConfigError(f"noise > 0 integrates an SDE with fixed steps: set solver to one of "
                          f"{', '.join(one_step)} and dt (got solver = {c.solver!r})")
    grid_only = c.solver in GRID_ONLY_SOLVERS
    if (grid_only or (c.dense and c.solver in FIXED_STEP_SOLVERS)) and (c.noise > 0 or c.layer_tau > 0):
        what, fix = (f"solver = {c.solver!r}", "use solver = 'rk4'") if grid_only else ("dense = true",
                                                                                          "set dense = false")
        raise ConfigError(f"{what} interpolates a smooth deterministic path: it does not combine with noise > 0 "
                          f"or layer_tau > 0 (weights switching during the run); {fix}")
    if c.norm in ("pre", "peri", "none") and c.solver in ("lie_euler", "cg3"):
        raise ConfigError(f"norm = {c.norm!r} moves tokens in R^d; solver {c.solver!r} only rotates on the sphere")
    if c.circle == "yes":
        changed = _not_plain(c)
        if tuple(c.d) != (2,) or c.model not in _CIRCLE_MODELS or changed:
            raise ConfigError("circle = 'yes' is the angle form of plain SA/USA on the circle: it needs d = 2, "
                              "model sa/usa/usa-rescaled and no other variant key"
                              + (f" (got {', '.join(changed)})" if changed else "")
                              + "; circle = 'auto' uses it only where it applies")
        if c.solver in _ROTATING:
            raise ConfigError(f"circle = 'yes' integrates angles in R; solver {c.solver!r} rotates on the sphere")
    if c.coalesce > 0 and c.norm in ("pre", "peri", "none"):
        raise ConfigError(f"coalesce moves tokens on the sphere together; norm = {c.norm!r} leaves the sphere "
                          "(use norm = 'post' or 'ngpt', or coalesce = 0)")
    if c.ff_width and c.model == "hardmax":
        raise ConfigError("a feed-forward term needs a smooth attention model (sa, usa, sinkhorn), not hardmax")
    if c.model in _UNNORMALIZED:
        other = ("heads = %d" % c.heads if c.heads > 1 else "mask = 'causal'" if c.mask == "causal"
                 else "weights_file" if c.weights_file else "layer_tau = %g" % c.layer_tau if c.layer_tau > 0
                 else None)
        if other:
            raise ConfigError(f"model = {c.model!r} is one attention term with fixed Q, K, V; it does not combine "
                              f"with {other} (heads, masks and layer-wise weights are those of softmax attention)")
    if "attention" in c.statistics:
        stochastic = c.model not in _UNNORMALIZED or (
            c.model == "linear" and c.linear_normalize == "sum" and c.linear_feature == "elu")
        if not stochastic:
            raise ConfigError(f"statistics 'attention' treat the attention matrix as a random walk, but model = "
                              f"{c.model!r} has signed weights; use linear_normalize = 'sum' with linear_feature = "
                              f"'elu' (model = 'linear'), or leave 'attention' out of statistics")
        if c.n > ATTENTION_STATISTICS_MAX_N:
            raise ConfigError(f"statistics 'attention' form the n×n attention matrix and its spectrum at every save "
                              f"time: n ≤ {ATTENTION_STATISTICS_MAX_N}, got n = {c.n}")


def _member_keys(seeds: np.ndarray):
    """One key per member, from the member's seed: members with the same seed share their weights."""
    return jax.vmap(jax.random.key)(jnp.asarray(seeds))


def attention_field(config: Config, beta, seeds: np.ndarray, d: int):
    """The attention term: model, heads, mask, weights, value and layer-wise weights."""
    from ..particles.layerwise import LayerWise
    from ..particles.weights import sample_weights

    model, mask = config.model, config.mask
    layered = bool(config.weights_file) or (config.layer_tau > 0 and config.weights != "identity")
    mats = {}
    if config.weights != "identity" and not layered:
        mats = jax.vmap(lambda k: sample_weights(k, d, config.weights))(_member_keys(seeds))
    elif config.value == "-identity":
        mats = {"V": -np.eye(d)}
    mats = {k: v for k, v in mats.items() if v is not None}
    if model == "hardmax":
        from ..particles.hardmax import Hardmax

        return Hardmax(**mats)
    if model == "sinkhorn":
        from ..particles.sinkhorn import Sinkhorn

        return Sinkhorn(beta, tol=config.sinkhorn_tol, **mats)
    if model == "linear":
        from ..particles.linear import LinearAttention

        return LinearAttention(**mats, normalize=config.linear_normalize, feature=config.linear_feature)
    if model == "least_squares":
        from ..particles.linear import LeastSquaresAttention

        return LeastSquaresAttention(config.alpha, **mats)
    if config.heads > 1:
        from ..particles.multihead import MultiHead

        if mats or layered:
            raise ConfigError("heads > 1 uses the block-identity heads; random or layer-wise weights need heads = 1")
        return MultiHead.identity(beta, config.heads, d, mask=mask, model=model)
    inner = fields.make(model, beta, mask=mask, **mats)
    if config.weights_file:
        return LayerWise.from_npz(inner, config.weights_file, config.layer_tau)
    if layered:
        n_layers = max(1, int(np.ceil(config.t1 / config.layer_tau)))
        plain = fields.make(model, 1.0)
        stacks = jax.vmap(lambda k: LayerWise.redrawn(plain, k, config.weights, d, n_layers, config.layer_tau))(
            _member_keys(seeds))
        return LayerWise(inner, Qs=stacks.Qs, Ks=stacks.Ks, Vs=stacks.Vs, tau=config.layer_tau)
    return inner


_CIRCLE_MODELS = ("sa", "usa", "usa-rescaled")
_ROTATING = ("lie_euler", "cg3")


def _not_plain(c: Config) -> list[str]:
    """The variant keys of ``c`` that take a run off plain SA/USA (which the angle form cannot express)."""
    return ([k for k in ("heads", "mask", "norm", "weights", "value", "ff_width", "weights_file")
             if c[k] != KEYS[k].default] + [k for k in ("noise",) if c[k] > 0])


def in_angles(config: Config, d: int) -> bool:
    """Whether the members of dimension ``d`` run in angles (``Circle``): circle = 'yes' (validated to
    apply), or 'auto' for d = 2 with plain SA/USA and a solver that does not rotate on the sphere."""
    if config.circle == "yes":
        return True
    return (config.circle == "auto" and d == 2 and config.model in _CIRCLE_MODELS and not _not_plain(config)
            and config.solver not in _ROTATING)


def build_field(config: Config, beta, seeds: np.ndarray, d: int):
    """The whole field of a configuration for members with inverse temperatures ``beta`` and ``seeds``."""
    if in_angles(config, d):
        from ..particles.circle import Circle

        field = Circle(beta, model=config.model)
        if config.coalesce > 0:
            from ..particles.coalesce import Coalesced

            field = Coalesced(field, config.coalesce)
        return field
    field = attention_field(config, beta, seeds, d)
    if config.ff_width:
        from ..particles.feedforward import FeedForward

        # one feed-forward layer for the whole run, drawn from the run's seed
        key = jax.random.fold_in(jax.random.key(config.seed), 2**31 - 1)
        ka, kb, kw = jax.random.split(key, 3)
        m = config.ff_width
        field = field + FeedForward(jax.random.normal(ka, (m, d)) / np.sqrt(d), jax.random.normal(kb, (m,)),
                                    config.ff_scale * jax.random.normal(kw, (d, m)) / np.sqrt(m),
                                    activation=config.ff_activation)
    if config.norm != "post":
        from ..particles import layernorm

        wrap = {"pre": layernorm.PreLN, "peri": layernorm.PeriLN, "none": layernorm.NoLN}
        field = (layernorm.NGPT(field, alpha=config.ngpt_alpha) if config.norm == "ngpt"
                 else wrap[config.norm](field))
    if config.coalesce > 0:
        from ..particles.coalesce import Coalesced

        field = Coalesced(field, config.coalesce)
    if config.noise > 0:
        from ..particles.noise import Noisy

        field = Noisy(field, config.noise)
    return field


@functools.lru_cache(maxsize=64)
def span_reduction(config: Config, d: int) -> str | None:
    """Whether the members of dimension ``d`` are simulated in the span of their n tokens, and how.

    "any frame" where the reduced field is the same in every frame (Q = K = identity: it is the field
    at dimension n), "frame" where it needs each member's frame (random Q, K enter as UᵀQᵀK U), None
    where the run is simulated in R^d: ``span`` off, d ≤ n, angles on the circle, or a field that
    answers None to ``in_span`` (its span is not invariant: V ≠ λI, noise, feed-forward, ...). Asks a
    one-member field of the run, built as the run builds its fields (once per configuration and d).
    """
    n = config.n
    if not config.span or d <= n or n < 2 or in_angles(config, d):
        return None
    probe = build_field(config, jnp.asarray([float(config.beta[0])]), np.asarray([config.seed]), d)
    if probe.in_span(n) is not None:
        return "any frame"
    if probe.in_span(jnp.eye(d, n)) is not None:
        return "frame"
    return None


def describe() -> str:
    """One paragraph per variant key group, for ``attnflow list --keys``."""
    return ("model: " + ", ".join(MODELS) + "; norm: " + ", ".join(NORMS) + "; weights: " + ", ".join(WEIGHTS))
