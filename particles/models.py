"""The attention models, declared once: every list of model names derives from here.

Each model is a :class:`Model`: its name (the configuration's ``model`` key), a one-line description,
how to build its attention term, which configuration keys it honours, and what it can do (β of either
sign, the angle form on the circle, attention blocked in O(n d) memory, an inverse temperature at all).
:data:`MODELS` holds them in the order the ``model`` choices are listed. The configuration's choices and
documentation, the rule refusing a key a model does not take, the memory estimate's dense-only models and
the tests' parametrizations all derive from this table. Adding an attention model is its field (a file
of ``particles/``) and one line here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax.numpy as jnp

from .fields import KERNEL_MODELS, Field, make
from .hardmax import Hardmax
from .linear import LeastSquaresAttention, LinearAttention
from .sinkhorn import Sinkhorn

__all__ = ["MODELS", "Model", "names", "query_key_product"]

_WEIGHTS = ("weights", "value")  # Q, K, V drawn per member (or V = −I): every model has Q, K, V
_LAYERS = ("layer_tau", "weights_file")  # weights per layer: ``LayerWise`` around an ``Attention``


@dataclasses.dataclass(frozen=True)
class Model:
    """One attention model and what it declares.

    name         the ``model`` key of a configuration
    doc          what it is, in a few words (the configuration's documentation)
    build        ``build(beta, Q=None, K=None, V=None, **options)``: the attention term of one layer, with
                 the model's ``options`` as keywords (configuration keys of the same names)
    options      the configuration keys ``build`` takes as keywords
    takes        the configuration's model keys (declared with ``model=True`` in experiments/config/keys.py,
                 which checks that every name here is one) that the model honours: its options, and the keys
                 that the configuration applies around it (heads, random or layer-wise weights, a feed-forward
                 term); a configuration setting a model key that some models take and this one does not is
                 refused, naming the model and the keys it takes (``experiments/config/rules.check_model_keys``)
    temperature  whether it has an inverse temperature β (linear, least-squares and hardmax attention do not)
    signed_beta  whether β < 0 is defined (the softmax subtracts the row maximum)
    circle       whether ``Circle``, the angle form on the circle, expresses it (d = 2, plain weights)
    dense_only   whether its attention is always the n × n matrix (no blocked O(n d) evaluation)
    bilinear     whether its logits depend on Q, K only through QᵀK (which may then be formed once)
    """

    name: str
    doc: str
    build: Callable[..., Field]
    options: tuple[str, ...] = ()
    takes: frozenset[str] = frozenset()
    temperature: bool = True
    signed_beta: bool = False
    circle: bool = False
    dense_only: bool = False
    bilinear: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "takes", frozenset(self.takes) | frozenset(self.options))

    def make(self, beta=1.0, Q=None, K=None, V=None, options: Mapping | None = None) -> Field:
        """The attention term with these weights; ``options`` maps keys (a configuration) to values, and
        only the model's own ``options`` are read from it."""
        chosen = {} if options is None else {k: options[k] for k in self.options}
        return self.build(beta, Q=Q, K=K, V=V, **chosen)

    def example(self, beta=1.5) -> Field:
        """A small instance with identity weights and the default options, for tests and documentation."""
        return self.build(jnp.asarray(beta))


def _kernel(model: str) -> Callable[..., Field]:
    def build(beta, Q=None, K=None, V=None, *, mask="none", positional="none", alibi_slope=1.0, rope_base=10000.0):
        position = dict(positional=positional, alibi_slope=alibi_slope) if positional != "none" else {}
        position = dict(positional=positional, rope_base=rope_base) if positional == "rope" else position
        return make(model, beta, Q=Q, K=K, V=V, mask=mask, **position)

    return build


def _sinkhorn(beta, Q=None, K=None, V=None, *, sinkhorn_tol=1e-9):
    return Sinkhorn(beta, Q, K, V, tol=sinkhorn_tol)


def _hardmax(beta, Q=None, K=None, V=None):
    return Hardmax(Q, K, V)


def _linear(beta, Q=None, K=None, V=None, *, linear_normalize="n", linear_feature="identity"):
    return LinearAttention(Q, K, V, normalize=linear_normalize, feature=linear_feature)


def _least_squares(beta, Q=None, K=None, V=None, *, alpha=1.0):
    return LeastSquaresAttention(alpha, Q, K, V)


_SOFTMAX = frozenset(("heads", *_WEIGHTS, *_LAYERS, "ff_width"))

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model(
            "sa",
            "SA, softmax self-attention ([GLPR] (2.3))",
            _kernel("sa"),
            ("mask", "positional", "alibi_slope", "rope_base"),
            _SOFTMAX,
            signed_beta=True,
            circle=True,
            bilinear=True,
        ),
        Model(
            "usa",
            "USA, unnormalized self-attention in [GLPR]'s time",
            _kernel("usa"),
            ("mask", "positional", "alibi_slope", "rope_base"),
            _SOFTMAX,
            signed_beta=True,
            circle=True,
            bilinear=True,
        ),
        Model(
            "usa-rescaled",
            "USA rescaled by e^{−β} (the time of arXiv 2410.06833)",
            _kernel("usa-rescaled"),
            ("mask", "positional", "alibi_slope", "rope_base"),
            _SOFTMAX,
            circle=True,
            bilinear=True,
        ),
        Model(
            "sinkhorn",
            "Sinkhorn (doubly stochastic) attention (arXiv 2110.11773)",
            _sinkhorn,
            ("sinkhorn_tol",),
            frozenset((*_WEIGHTS, *_LAYERS, "ff_width")),
            dense_only=True,
            bilinear=True,
        ),
        # non-smooth (Filippov): no feed-forward term; a Field, not an Attention, so no weights per layer
        Model(
            "hardmax",
            "hardmax attention without self-interaction, the β → ∞ limit ([GLPR] §9)",
            _hardmax,
            takes=frozenset(_WEIGHTS),
            temperature=False,
            dense_only=True,
            bilinear=True,
        ),
        Model(
            "linear",
            "linear attention, the kernel ⟨φ(Qx_i), φ(Kx_j)⟩",
            _linear,
            ("linear_normalize", "linear_feature"),
            frozenset((*_WEIGHTS, "ff_width")),
            temperature=False,
        ),
        Model(
            "least_squares",
            "regularized least-squares attention (arXiv 2305.10203)",
            _least_squares,
            ("alpha",),
            frozenset((*_WEIGHTS, "ff_width")),
            temperature=False,
        ),
    )
}
"""Every attention model by name, in the order the ``model`` choices are listed."""

if tuple(m.name for m in MODELS.values() if m.circle) != KERNEL_MODELS:  # the circle's models are the kernel's
    raise ImportError("the models of the kernel e^{β⟨Qx, Ky⟩} (fields.KERNEL_MODELS) must be those with circle=True")


def names(**flags) -> tuple[str, ...]:
    """Names of the models whose flags (attributes of :class:`Model`) have the given values, e.g.
    ``names(signed_beta=True)``; every model's name without flags."""
    fields = {f.name for f in dataclasses.fields(Model)}
    unknown = [f for f in flags if f not in fields]
    if unknown:
        raise ValueError(f"unknown Model flags: {', '.join(unknown)}")
    return tuple(m.name for m in MODELS.values() if all(getattr(m, f) == v for f, v in flags.items()))


def query_key_product(weights: Mapping, d: int) -> dict:
    """Sampled weights with Q, K (k × d each) replaced by Q = I, K = QᵀK where that is cheaper.

    For a bilinear model the logits ⟨Q x_i, K x_j⟩ = ⟨x_i, QᵀK x_j⟩ need QᵀK alone: formed once per
    member, it saves one of the two n × d × k products of every evaluation when 2k ≥ d (Fig. 5's square
    Ginibre Q, K at d = 128: a quarter of the evaluation's arithmetic). The members' draws are unchanged.
    """
    Q, K = weights.get("Q"), weights.get("K")
    if Q is None or K is None or 2 * Q.shape[-2] < d:
        return dict(weights)
    return dict(weights, Q=None, K=jnp.swapaxes(Q, -1, -2) @ K)
