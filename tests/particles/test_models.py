"""The table of attention models (particles/models.py): every list derives from it, and every key is honoured or refused.

For every model and every variant key, a configuration that sets the key (with the keys it needs to act) either
is refused in one line naming the key, or builds a field that differs from the one without the key: nothing a
user sets is silently dropped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import KEYS, ConfigError, load_config
from attnflow.experiments.config import MODELS as MODEL_CHOICES
from attnflow.experiments.config.keys import model_keys
from attnflow.experiments.config.rules import variant_keys
from attnflow.experiments.run import field_config as config_models
from attnflow.experiments.run import memory, preflight, runner
from attnflow.particles import models
from attnflow.particles.fields import KERNEL_MODELS, ensemble_axes

N, D = 5, 4
X = af.init.uniform(7, N, D)
T = 1.3  # past the first layer switch of layer_tau = 0.5

# each variant key: the value set, and the keys it needs in order to act at all
VARIANT_KEYS = {
    "heads": (["heads=2"], []),
    "mask": (["mask=causal"], []),
    "positional": (["positional=alibi"], ["mask=causal"]),
    "alibi_slope": (["alibi_slope=0.3"], ["mask=causal", "positional=alibi"]),
    "weights": (["weights=ginibre"], []),
    "value": (["value=-identity"], []),
    "layer_tau": (["layer_tau=0.5"], ["weights=ginibre"]),
    "weights_file": (["weights_file=WEIGHTS"], ["layer_tau=0.5"]),
    "ff_width": (["ff_width=5"], []),
    "ff_activation": (["ff_activation=tanh"], ["ff_width=5"]),
    "ff_scale": (["ff_scale=2.5"], ["ff_width=5"]),
    "sinkhorn_tol": (["sinkhorn_tol=0.05"], []),
    "alpha": (["alpha=0.3"], []),
    "linear_normalize": (['linear_normalize="sum"'], ['linear_feature="elu"']),
    "linear_feature": (['linear_feature="elu"'], []),
    "norm": (["norm=pre"], []),
    "ngpt_alpha": (["ngpt_alpha=0.5"], ["norm=ngpt"]),
    "noise": (["noise=0.3"], ["solver=rk4", "dt=0.1"]),
    "coalesce": (["coalesce=0.01"], []),
    "beta": (["beta=2.5"], []),
}


@pytest.fixture(scope="module")
def weights_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("weights") / "layers.npz"
    np.savez(path, Q=rng.normal(size=(3, D, D)), K=rng.normal(size=(3, D, D)), V=rng.normal(size=(3, D, D)) / 2)
    return str(path)


def _config(model, sets, weights_file):
    sets = [s.replace("WEIGHTS", weights_file) for s in sets]
    return load_config(None, [f"model={model}", f"n={N}", f"d={D}", "seeds=1", "progress=false", *sets])


def _velocity(config):
    """The field of ``config``'s one member at time T on X, its noise and its coalescing threshold."""
    field = runner.build_field(config, jnp.asarray(config.beta, dtype=float), np.asarray([config.seed]), D)
    axes, members = ensemble_axes(field)
    v = field(T, X) if members is None else jax.vmap(lambda f: f(T, X), in_axes=(axes,))(field)[0]
    sigma = field.noise_sigma
    return np.asarray(v), None if sigma is None else np.asarray(sigma), field.coalesce_eps


@pytest.mark.slow
@pytest.mark.parametrize("model", list(models.MODELS))
@pytest.mark.parametrize("key", list(VARIANT_KEYS))
def test_every_key_changes_the_field_or_is_refused(model, key, weights_file):
    sets, needs = VARIANT_KEYS[key]
    try:
        base = _config(model, needs, weights_file)
    except ConfigError:
        pytest.skip(f"{model} refuses what {key} needs ({', '.join(needs)}): the case of those keys")
    try:
        config = _config(model, needs + sets, weights_file)
        preflight.check_keys_read(config)
    except ConfigError as err:
        message = str(err)
        assert key in message and "\n" not in message, message
        if key in variant_keys():  # a model key some models take: the model and what it takes are named
            assert f"model {model!r} takes no {key}" in message, message
        return
    v0, s0, c0 = _velocity(base)
    v1, s1, c1 = _velocity(config)
    changed = (not np.allclose(v0, v1, rtol=0, atol=1e-9)) or (s0 is None) != (s1 is None) or c0 != c1
    assert changed, f"model {model}: {key} is accepted but changes nothing"


@pytest.mark.slow
def test_the_tables_lists_derive_from_it():
    assert MODEL_CHOICES == tuple(models.MODELS)
    assert models.names(circle=True) == KERNEL_MODELS
    assert set(models.names(signed_beta=True)) == {"sa", "usa"}
    for name, spec in models.MODELS.items():
        assert f"{name}, {spec.doc}" in KEYS["model"].doc
        assert set(spec.options) <= spec.takes <= set(variant_keys()) <= set(model_keys())
        field = spec.example()
        x = af.init.uniform(1, 6, 3)
        v = np.asarray(field(0.0, x))
        assert v.shape == (6, 3) and np.all(np.isfinite(v))
        np.testing.assert_allclose(np.sum(v * np.asarray(x), axis=-1), 0.0, atol=1e-12)  # tangent to the sphere


def test_dense_only_models_are_counted_with_the_full_attention():
    # the memory estimate of a dense-only model at large n is the n × n attention: it grows like n²
    small = memory.estimate_bytes(load_config(None, ["model=hardmax", "n=2000", "seeds=1", "d=3"]))
    large = memory.estimate_bytes(load_config(None, ["model=hardmax", "n=4000", "seeds=1", "d=3"]))
    blocked = memory.estimate_bytes(load_config(None, ["model=sa", "n=4000", "seeds=1", "d=3"]))
    assert large / small > 3.5 and blocked < large / 4


def test_a_refused_model_key_names_the_models_that_take_it():
    with pytest.raises(
        ConfigError,
        match=r"model 'hardmax' takes no mask .* it takes weights, value: .*"
        r"\('sa', 'usa' or 'usa-rescaled'\)",
    ):
        load_config(None, ["model=hardmax", "mask=causal"])
    with pytest.raises(ConfigError, match="model 'linear' has no inverse temperature"):
        load_config(None, ["model=linear", "beta=[1, 2]"])


def test_sinkhorn_takes_weights_per_layer():
    c = load_config(None, ["model=sinkhorn", "weights=ginibre", "layer_tau=0.5", f"d={D}", f"n={N}", "t1=1.5"])
    field = config_models.build_field(c, jnp.asarray([1.0]), np.asarray([0]), D)
    assert isinstance(field, af.LayerWise) and isinstance(field.inner, af.Sinkhorn)
    assert field.Qs.shape[:2] == (1, 3)  # three layers over t1 = 1.5, drawn for the member
