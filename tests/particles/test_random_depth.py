"""The random-depth transformer (particles/random_depth.py): its layers' mean displacement is the Itô drift
σ²(d − 1)/(2d) q_i that the normalization produces, α = 1 tends to the deterministic flow, refusals."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.particles.errors import InputError
from attnflow.particles.random_depth import Attention, CommonNoise, RandomDepth
from attnflow.particles.sphere import normalize


def tokens(n, d, seed=0):
    return normalize(jax.random.normal(jax.random.PRNGKey(seed), (n, d)))


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(("heads", "per_head"), [(1, False), (2, False), (2, True)])
def test_mean_layer_step_is_the_ito_drift(heads, per_head):
    # antithetic G and −G cancel the step's linear term: what remains is the normalization's drift · dt + O(dt²)
    n, d, dt = 4, 5, 1e-4
    q = jax.random.normal(jax.random.PRNGKey(3), (heads, d, d))
    att = Attention(1.5, d, Q=q, heads=heads)
    model = RandomDepth(att, sigma=1.3, per_head=per_head)
    x = tokens(n, d)
    gs = jax.random.normal(jax.random.PRNGKey(1), (40_000, *model.noise_shape(d)))
    steps = jax.vmap(lambda g: 0.5 * (model.layer(x, g, 1 / dt) + model.layer(x, -g, 1 / dt)) - x)(gs)
    measured = steps.mean(axis=0) / dt
    want = CommonNoise.limit_of(model).ito_drift(x)
    se = steps.std(axis=0) / dt / np.sqrt(gs.shape[0])
    assert np.all(np.abs(measured - want) <= 4 * se + 0.01 * np.abs(want).max())
    # radial only (V̄ = 0): −σ²(d − 1)/(2d) q_i x_i, q_i = Σ_h |y^h_i|² per head, |Σ_h y^h_i|² shared
    y = att.means(x)
    qi = (y**2).sum(axis=(0, 2)) if per_head else (y.sum(axis=0) ** 2).sum(axis=-1)
    np.testing.assert_allclose(want, -(1.3**2) * (d - 1) / (2 * d) * qi[:, None] * x, atol=1e-14)


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_stratonovich_drift_is_tangent():
    x = tokens(3, 4, seed=2)
    sde = CommonNoise(Attention(2.0, 4, heads=2), sigma=0.7, vbar=0.3, per_head=True)
    b = sde.stratonovich_drift(x)
    np.testing.assert_allclose(jnp.sum(b * x, axis=-1), 0.0, atol=1e-14)
    assert float(jnp.abs(b - sde.ito_drift(x)).max()) > 1e-3  # the attention's own correction


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_alpha_one_tends_to_the_deterministic_flow():
    # α = 1, V̄ = I: the layers are Euler steps with retraction of ẋ = P_x(Σ_j A_ij x_j) (SA, V = I) plus noise
    # σ G_ℓ/(√d L) whose sum over L layers is O(L^{−1/2})
    n, d, beta = 4, 3, 1.0
    x0 = tokens(n, d, seed=5)
    want = af.simulate(af.SA(beta), x0, t1=1.0, solver="rk4", dt=1e-3).xs[-1]
    errors = []
    for L in (200, 800):
        model = RandomDepth(Attention(beta, d), sigma=1.0, vbar=1.0, alpha=1.0)
        gs = jax.random.normal(jax.random.PRNGKey(L), (64, L, 1, d, d))

        def path(g, model=model, layers=L):
            return jax.lax.fori_loop(0, layers, lambda k, x: model.layer(x, g[k], layers), x0)

        final = jax.vmap(path)(gs)
        errors.append(float(jnp.sqrt(jnp.mean(jnp.sum((final - want) ** 2, axis=-1)))))
    assert errors[1] < 0.03
    assert 1.6 < errors[0] / errors[1] < 2.5  # L^{−1/2}: a factor 2 for 4 times the layers


def test_refusals_name_the_choices():
    att = Attention(1.0, 3)
    with pytest.raises(InputError, match="alpha must be one of 0.5, 1"):
        RandomDepth(att, alpha=0.7)
    with pytest.raises(InputError, match="deterministic flow"):
        CommonNoise.limit_of(RandomDepth(att, alpha=1.0))
    with pytest.raises(InputError, match="centre the values"):
        CommonNoise.limit_of(RandomDepth(att, vbar=0.5))
    with pytest.raises(InputError, match="mask must be one of none, causal"):
        Attention(1.0, 3, mask="sliding")
