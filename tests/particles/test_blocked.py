"""Blocked (online-softmax) and fused evaluation of the attention fields: equal to the dense path, memory O(n d)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles import blocked


def _weights(d: int, k: int, seed: int = 0):
    keys = jax.random.split(jax.random.key(seed), 3)
    return dict(
        Q=jax.random.normal(keys[0], (k, d)) / np.sqrt(d),
        K=jax.random.normal(keys[1], (k, d)) / np.sqrt(d),
        V=jax.random.normal(keys[2], (d, d)) / np.sqrt(d),
    )


FIELDS = [("sa", {}), ("usa", {}), ("usa", {"time": "rescaled"})]


def _field(model, opts, beta, **kwargs):
    return (af.SA if model == "sa" else af.USA)(beta, **opts, **kwargs)


def _evaluate(fields, x):
    """Each field's velocity at x, all in one compiled call."""
    return jax.jit(lambda y: [f(0.0, y) for f in fields])(x)


@pytest.mark.slow
@pytest.mark.parametrize("model,opts", FIELDS)
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_blocked_drift_equals_dense(model, opts, mask):
    # n = 300 is not a multiple of the block: the padded keys must be masked out; Q, K are
    # rectangular (3×5); identity weights and narrow values (d = 3) are covered below
    n, d = 300, 5
    x = af.init.uniform(1, n, d)
    w = _weights(d, 3)
    beta = 4.0
    dense, tiles = _evaluate([_field(model, opts, beta, mask=mask, block=b, **w) for b in (None, 64)], x)
    scale = float(jnp.max(jnp.abs(dense)))
    np.testing.assert_allclose(tiles, dense, rtol=1e-12, atol=1e-13 * scale)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_blocked_huge_beta_is_finite_and_equals_dense(dtype):
    x = af.init.uniform(5, 100, 3, dtype=dtype)
    for make in (lambda **k: af.SA(1e4, **k), lambda **k: af.USA(1e4, time="rescaled", **k)):
        dense, tiles = _evaluate([make(block=None), make(block=48)], x)
        assert tiles.dtype == jnp.dtype(dtype)
        assert bool(jnp.all(jnp.isfinite(tiles)))
        # float32: e^{β(⟨⟩−m)} amplifies the rounding of ⟨⟩ by β, as in the dense path's own test
        tol = 1e-9 if dtype == "float64" else 1e-7 * 1e4
        np.testing.assert_allclose(tiles, dense, atol=tol * (1 + float(jnp.max(jnp.abs(dense)))))


def test_glpr_usa_keeps_the_e_to_the_m_factor_overflow_free():
    # velocities ~ e^β: 300 is far beyond float32's range for e^β alone, but fine in float64
    x = af.init.uniform(2, 100, 3)
    dense, tiles = _evaluate([af.USA(300.0, block=None), af.USA(300.0, block=32)], x)
    assert bool(jnp.all(jnp.isfinite(tiles)))
    np.testing.assert_allclose(tiles, dense, rtol=1e-10, atol=1e-12 * float(jnp.max(jnp.abs(dense))))


@pytest.mark.slow
def test_simulate_ensemble_through_the_blocked_path():
    # β per member: the block option is static, so ensemble_axes leaves it alone
    x0 = af.init.uniform(3, 100, 3)
    betas = np.array([1.0, 4.0])
    runs = {}
    for block in (None, 40):
        field = af.USA(betas, time="rescaled", mask="causal", block=block)
        runs[block] = af.simulate(field, x0, 0.2, solver="rk4", dt=0.1).xs
    assert runs[40].shape == (2, 2, 100, 3)
    np.testing.assert_allclose(runs[40], runs[None], atol=1e-13)


def test_forward_derivative_matches_dense():
    x = af.init.uniform(4, 40, 4)
    tangent = jax.random.normal(jax.random.key(9), x.shape)
    dense, tiles = jax.jit(
        lambda y, dy: [jax.jvp(lambda z, b=b: af.SA(3.0, block=b)(0.0, z), (y,), (dy,))[1] for b in (None, 16)]
    )(x, tangent)
    np.testing.assert_allclose(tiles, dense, atol=1e-12)


def _temp_bytes(field, x) -> int:
    stats = jax.jit(lambda y: field(0.0, y)).lower(x).compile().memory_analysis()
    return stats.temp_size_in_bytes


def test_blocked_memory_is_linear_in_n():
    # the smallest n ≥ 4096 at which "auto" leaves the dense path on this backend (n > 11585 on GPUs)
    limit = blocked.dense_limit_bytes()
    n = max(4096, 8 * (math.isqrt(limit // 8) // 8 + 1))
    d = 3
    x = af.init.uniform(0, n, d)
    # the dense path holds the n × n logits (inside one fused kernel on CPU, where
    # memory_analysis does not see them), the tiles O(n d + block²): here tiles of
    # 256 × 256 float64 would fit in the 1% of n² allowed
    assert _temp_bytes(af.SA(1.0, block=256), x) < n * n * 8 / 100
    # the default ("auto") switches to tiles at this size: n split into ⌈n / TILE⌉ equal tiles
    # (1024 × 1024 on CPU, a sixteenth of the matrix at n = 4096), about twice a tile's logits
    # in all (masked and unmasked tiles are separate buffers)
    tile = blocked.TILE["cpu" if jax.default_backend() == "cpu" else "accelerator"]
    side = -(-n // -(-n // tile))
    assert _temp_bytes(af.SA(1.0), x) < 2.7 * side * side * 8


def test_auto_switches_on_memory_per_member():
    limit = blocked.dense_limit_bytes()
    for dtype in (jnp.float32, jnp.float64):
        item = jnp.dtype(dtype).itemsize
        n_max = int(np.sqrt(limit / item))
        assert blocked.resolve_block("auto", n_max, dtype) is None
        block = blocked.resolve_block("auto", n_max + 8, dtype)
        assert block % 8 == 0 and block == blocked.tile_side(n_max + 8) <= max(blocked.TILE.values())
        assert blocked.resolve_block(None, 10**6, dtype) is None
    # forced tiles never exceed n (rounded up to a multiple of 8)
    assert blocked.resolve_block(4096, 100, jnp.float64) == 104


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize("mask", ["none", "causal"])
def test_fused_kernel_route_equals_dense(mask):
    # what GPU backends use for SA: jax.nn.dot_product_attention with β folded into the query;
    # rectangular Q, K (4×6) are padded to the values' width
    n, d = 70, 6
    x = af.init.uniform(6, n, d, dtype="float32")
    w = _weights(d, 4)
    dense, fused = _evaluate([af.SA(2.5, mask=mask, block=None, **w), af.SA(2.5, mask=mask, kernel="fused", **w)], x)
    assert fused.dtype == jnp.float32
    np.testing.assert_allclose(fused, dense, atol=2e-6)


def test_fused_kernel_refuses_what_it_cannot_compute():
    x64 = af.init.uniform(6, 10, 3)
    with pytest.raises(ValueError, match="float32"):
        af.SA(1.0, kernel="fused")(0.0, x64)
    with pytest.raises(ValueError, match="softmax attention only"):
        af.USA(1.0, kernel="fused")(0.0, x64.astype(jnp.float32))
    # on CPU, "auto" never takes the fused route
    assert blocked.resolve_kernel("auto", True, jnp.float32) == ("fused" if jax.default_backend() != "cpu" else "xla")


@pytest.mark.parametrize(
    "kwargs,message",
    [({"block": 0}, "block"), ({"block": "big"}, "block"), ({"block": 2.5}, "block"), ({"kernel": "cudnn"}, "kernel")],
)
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        af.SA(1.0, **kwargs)
