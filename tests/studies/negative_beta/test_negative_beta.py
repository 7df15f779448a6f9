"""β < 0 (arXiv 2507.22857): accepted where the model is defined, refused elsewhere; the equilateral
triangle of three tokens on the circle attracts exactly below β = −2/3; random starts synchronize above
−0.16 and not all below −2/3."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import attnflow as af
from attnflow.experiments.config import ConfigError, load_config
from attnflow.experiments.run import field_config as models
from attnflow.particles.synchronization import NO_SYNC_BETA, SYNC_BETA, triangle_rate

TRIANGLE = np.stack([np.cos(2 * np.pi * np.arange(3) / 3 + 0.3), np.sin(2 * np.pi * np.arange(3) / 3 + 0.3)], -1)


def tangent_jacobian(field, x):
    """The 3 × 3 Jacobian of the angles' velocities at the points x (n, 2): d θ̇_i / d θ_j."""

    def angular(theta):
        pts = jnp.stack([jnp.cos(theta), jnp.sin(theta)], -1)
        v = field(0.0, pts)
        return jnp.sum(v * jnp.stack([-pts[:, 1], pts[:, 0]], -1), axis=-1)

    theta = jnp.arctan2(x[:, 1], x[:, 0])
    return np.asarray(jax.jacfwd(angular)(theta))


@pytest.mark.slow
@pytest.mark.parametrize("beta", [-2.0, -1.0, NO_SYNC_BETA, -0.3, 0.0, 0.5, 2.0])
@pytest.mark.parametrize("model", ["usa", "sa"])
def test_triangle_rate_is_the_linearization_at_the_triangle(beta, model):
    field = af.USA(beta) if model == "usa" else af.SA(beta)
    eig = np.sort(np.linalg.eigvals(tangent_jacobian(field, jnp.asarray(TRIANGLE))).real)
    mu = float(triangle_rate(beta, model))
    expected = np.sort([0.0, mu, mu])
    np.testing.assert_allclose(eig, expected, atol=1e-12)
    assert (mu < 0) == (beta < NO_SYNC_BETA - 1e-12)


def test_triangle_rate_changes_sign_at_minus_two_thirds():
    assert abs(float(triangle_rate(-2.0 / 3.0))) < 1e-15
    assert triangle_rate(-0.67) < 0 < triangle_rate(-0.66)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_at_large_negative_beta_stays_finite_and_exact(dtype):
    x = af.init.uniform(3, 16, 5).astype(dtype)
    for beta in (-1.0, -50.0, -1e4):
        v = np.asarray(af.SA(beta)(0.0, x))
        assert np.all(np.isfinite(v))
        xs = np.asarray(x, np.float64)
        logits = beta * xs @ xs.T
        a = np.exp(logits - logits.max(1, keepdims=True))
        a /= a.sum(1, keepdims=True)
        drift = a @ xs
        expected = drift - np.sum(drift * xs, 1, keepdims=True) * xs
        np.testing.assert_allclose(v, expected, atol=1e-5 if dtype == "float32" else 1e-12)


@pytest.mark.slow
def test_usa_at_negative_beta_is_the_gradient_ascent_of_its_energy():
    """USA is n ∇E_β projected for either sign of β: E_β never decreases along it, also for β < 0."""
    x0 = af.init.uniform(1, 12, 3)
    sol = af.simulate(af.USA(-1.5), x0, 20.0, ts=np.linspace(0, 20, 41), solver="dopri8", rtol=1e-10, atol=1e-12)
    g = np.einsum("tid,tjd->tij", np.asarray(sol.xs), np.asarray(sol.xs))
    e = np.exp(-1.5 * g).sum(axis=(1, 2)) / (2 * -1.5 * 12**2)
    assert np.all(np.diff(e) >= -1e-12) and e[-1] - e[0] > 1e-3


def test_usa_refuses_a_negative_beta_whose_weights_overflow():
    with pytest.raises(ValueError, match="overflow"):
        af.simulate(af.USA(-200.0), af.init.uniform(0, 8, 3).astype("float32"), 1.0, solver="rk4", dt=0.1)


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: af.USA(-1.0, time="rescaled"), "USA(time='rescaled')"),
        (lambda: af.Circle(-1.0), "Circle"),
        (lambda: af.Sinkhorn(-1.0), "Sinkhorn"),
        (lambda: af.MultiHead.identity(-1.0, 2, 4, model="usa-rescaled"), "MultiHead(model='usa-rescaled')"),
    ],
)
def test_fields_not_defined_for_negative_beta_refuse_it(make, name):
    with pytest.raises(ValueError, match=r"beta must be ≥ 0 for .*β < 0 runs with SA, USA") as err:
        make()
    assert name.split("(")[0] in str(err.value)


def test_fields_defined_for_negative_beta_take_it():
    assert float(af.SA(-1.0).beta) == -1.0 and float(af.USA(-0.5).beta) == -0.5
    assert np.all(np.asarray(af.MultiHead.identity(np.array([-1.0, 2.0]), 2, 4).beta) == [-1.0, 2.0])


def test_configuration_takes_negative_beta_only_with_sa_or_usa_and_in_the_plane():
    c = load_config(None, ["beta=-1:0.5:4", "d=[2]", "model=usa", "circle=auto"])
    assert c.beta == (-1.0, -0.5, 0.0, 0.5)
    assert not models.in_angles(c, 2)  # circle = 'auto' keeps points of the plane for β < 0
    assert models.in_angles(load_config(None, ["beta=[0.5]", "d=[2]", "model=usa", "circle=auto"]), 2)
    with pytest.raises(ConfigError, match="model 'sa' or 'usa'"):
        load_config(None, ["beta=-1", "model=sinkhorn"])
    with pytest.raises(ConfigError, match="angle form"):
        load_config(None, ["beta=-1", "d=[2]", "circle=yes"])


def test_experiments_of_positive_beta_refuse_a_negative_one(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnflow.experiments.commands.cli",
            "run",
            "fig3-phase-diagram",
            "--quick",
            "--set",
            "beta=[-1, 1]",
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "theory of beta ≥ 0" in proc.stderr and "negative-beta" in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_random_starts_synchronize_above_minus_0_16_and_not_all_below_minus_two_thirds():
    """[PRY]: n = 8 and n = 3 synchronize from every start at β ∈ {−0.16, −0.1, 0.3}; at β = −1.5 some of
    n = 3's starts end at the triangle, and n = 8's are not all synchronized either."""
    for n, betas in ((3, [SYNC_BETA, -0.1, 0.3, -1.5]), (8, [SYNC_BETA, -0.1, 0.3, -2.0])):
        members = 128
        beta = jnp.repeat(jnp.asarray(betas), members)
        x0 = af.init.uniform(7, n, 2, batch=beta.shape[0])
        sol = af.simulate(
            af.USA(beta),
            x0,
            400.0,
            solver="tsit5",
            rtol=1e-8,
            atol=1e-10,
            ts=np.array([400.0]),
            stop_when_clustered=1e-8,
        )
        x = np.asarray(sol.x_final)
        g = np.einsum("mid,mjd->mij", x, x)[:, ~np.eye(n, dtype=bool)]
        synced = (g.min(axis=1) >= 1 - 1e-6).reshape(len(betas), members)
        assert synced[:3].all(), (n, synced[:3].mean(axis=1))
        assert not synced[3].all()
        if n == 3:
            stuck = g.reshape(len(betas), members, -1)[3][~synced[3]]
            np.testing.assert_allclose(stuck, -0.5, atol=1e-4)
