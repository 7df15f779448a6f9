"""The ALiBi positional bias (Press, Smith, Lewis 2022; arXiv 2605.09213): −m (i − j) added to the causal
logits of SA and USA, the same in the dense and the blocked evaluations, refused where it has no meaning."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.particles import span


def manual_weights(x, beta, slope):
    x = np.asarray(x)
    n = len(x)
    i = np.arange(n)
    logits = beta * x @ x.T - slope * (i[:, None] - i[None, :])
    logits[np.triu(np.ones((n, n), bool), 1)] = -np.inf
    w = np.exp(logits - logits.max(1, keepdims=True))
    return w / w.sum(1, keepdims=True)


def test_alibi_weights_are_the_biased_causal_softmax():
    x = af.init.uniform(0, 12, 4)
    field = af.SA(1.5, mask="causal", positional="alibi", alibi_slope=0.7)
    np.testing.assert_allclose(field.attention_matrix(0.0, x), manual_weights(x, 1.5, 0.7), atol=1e-14)
    # slope 0 is plain causal attention
    plain = af.SA(1.5, mask="causal")
    zero = af.SA(1.5, mask="causal", positional="alibi", alibi_slope=0.0)
    np.testing.assert_array_equal(np.asarray(zero(0.0, x)), np.asarray(plain(0.0, x)))


@pytest.mark.slow
@pytest.mark.parametrize("cls", [af.SA, af.USA])
def test_blocked_evaluation_adds_the_same_bias(cls):
    x = af.init.uniform(1, 70, 3)
    dense = cls(2.0, mask="causal", positional="alibi", alibi_slope=0.3, block=None)(0.0, x)
    blocked = cls(2.0, mask="causal", positional="alibi", alibi_slope=0.3, block=16)(0.0, x)
    np.testing.assert_allclose(blocked, dense, rtol=0, atol=1e-13)


def test_a_steep_slope_leaves_every_token_with_itself():
    """With m ≫ β every token attends to itself only: SA's velocities vanish; token 1 never moves anyway."""
    x = af.init.uniform(2, 20, 3)
    v = np.asarray(af.SA(1.0, mask="causal", positional="alibi", alibi_slope=60.0)(0.0, x))
    assert np.max(np.abs(v)) < 1e-20
    v = np.asarray(af.SA(1.0, mask="causal", positional="alibi", alibi_slope=0.5)(0.0, x))
    assert np.max(np.abs(v[0])) == 0.0 and np.max(np.abs(v[1:])) > 1e-3


def test_the_bias_survives_the_reduction_to_the_span():
    n, d = 6, 20
    x = af.init.uniform(3, n, d)
    field = af.SA(2.0, mask="causal", positional="alibi", alibi_slope=0.4)
    basis, y = span.span_basis(x)
    reduced = field.in_span(basis)
    assert reduced.positional == "alibi"
    np.testing.assert_allclose(np.asarray(reduced(0.0, y)) @ np.asarray(basis).T, field(0.0, x), atol=1e-13)


def test_an_ensemble_of_slopes_runs_in_one_call():
    x0 = af.init.uniform(4, 10, 3)
    slopes = jnp.array([0.0, 0.5, 2.0])
    field = af.USA(1.0, mask="causal", positional="alibi", alibi_slope=slopes)
    batched = af.simulate(field, x0, 2.0, solver="rk4", dt=0.05)
    for m, slope in enumerate(slopes):
        one = af.simulate(
            af.USA(1.0, mask="causal", positional="alibi", alibi_slope=float(slope)), x0, 2.0, solver="rk4", dt=0.05
        )
        np.testing.assert_allclose(batched.x_final[m], one.x_final, atol=1e-13)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: af.SA(1.0, positional="alibi"), "needs mask='causal'"),
        (lambda: af.SA(1.0, mask="causal", positional="alibi", kernel="fused"), "not 'fused'"),
        (lambda: af.SA(1.0, mask="causal", positional="xpos"), "positional must be one of"),
        (lambda: af.SA(1.0, mask="causal", positional="decay"), "SA takes positional = 'none', 'alibi'"),
        (lambda: af.USA(1.0, positional="decay"), "needs mask='causal'"),
        (lambda: af.USA(1.0, mask="causal", positional="decay", block=16), "evaluated densely"),
        (lambda: af.SA(1.0, mask="causal", positional="alibi", alibi_slope=-1.0), "alibi_slope must be ≥ 0"),
    ],
)
def test_refusals(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_configuration_keys():
    c = load_config(None, ["positional=alibi", "mask=causal", "alibi_slope=0.25"])
    assert (c.positional, c.alibi_slope) == ("alibi", 0.25)
    for sets, message in (
        (["positional=alibi"], "set mask = 'causal'"),
        (["positional=decay", "model=usa", "mask=causal", "heads=2"], "heads = 1"),
        (["positional=alibi", "mask=causal", "model=sinkhorn"], "model 'sinkhorn' takes no mask"),
    ):
        with pytest.raises(ConfigError, match=message):
            load_config(None, sets)


@pytest.mark.slow
def test_multihead_alibi_is_each_heads_biased_softmax():
    """MultiHead adds −m_h (i − j) to head h: with one head it is SA/USA with ALiBi; with several, each head's
    matrix is the biased causal softmax of its block of coordinates, at its own slope."""
    from attnflow.particles.multihead import MultiHead

    rng = np.random.default_rng(4)
    x = rng.normal(size=(9, 4))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for model, cls in (("sa", af.SA), ("usa", af.USA)):
        one = MultiHead.identity(1.5, 1, 4, mask="causal", model=model, positional="alibi", alibi_slope=0.3)
        np.testing.assert_allclose(
            one(0.0, x), cls(1.5, mask="causal", positional="alibi", alibi_slope=0.3)(0.0, x), atol=1e-14
        )
    slopes = MultiHead.alibi_slopes(2)
    np.testing.assert_allclose(slopes, [2.0**-4, 2.0**-8])
    two = MultiHead.identity(2.0, 2, 4, mask="causal", positional="alibi", alibi_slope=slopes)
    A = np.asarray(jax.nn.softmax(two.logits(jnp.asarray(x)), axis=-1))
    for h in range(2):
        block = x[:, 2 * h : 2 * h + 2]
        np.testing.assert_allclose(A[h], manual_weights(block, 2.0, slopes[h]), atol=1e-14)
    # from a configuration: the first head has alibi_slope, the next ALiBi's geometric ratio
    from attnflow.experiments.run import field_config as models

    c = load_config(None, ["heads=4", "d=8", "mask=causal", "positional=alibi", "alibi_slope=0.5"])
    field = models.attention_field(c, 1.0, np.arange(1), 8)
    np.testing.assert_allclose(field.alibi_slope, 0.5 * 2.0 ** (-2.0 * np.arange(4)))
    with pytest.raises(ValueError, match="one slope per head"):
        MultiHead.identity(1.0, 2, 4, mask="causal", positional="alibi", alibi_slope=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="needs mask='causal'"):
        MultiHead.identity(1.0, 2, 4, positional="alibi")
