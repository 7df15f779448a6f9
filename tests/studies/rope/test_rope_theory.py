"""The closed forms of SA with rotary positions: resonant rings at rest (and not off resonance), their spectra by
Bessel aliasing against equilibrium's Jacobian, the softmax floor, the contraction bound, the frequency order."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from attnflow.experiments.studies.rope.rope_theory import (
    aliased_bessel,
    contraction_bound,
    floor_weight,
    resonant_theta,
    ring,
    ring_velocity,
    spectral_abscissa,
    twisted_spectrum,
)
from attnflow.experiments.studies.rope.twisted_states import ORDER_BETA, ordering_changes, ring_field
from attnflow.particles.fields import SA
from attnflow.solvers import simulate
from attnflow.solvers.equilibrium import equilibrium

jax.config.update("jax_enable_x64", True)


@pytest.mark.parametrize("n, q, s", [(12, 1, 4), (12, 2, 2), (9, 4, 3), (7, 2, 6)])
def test_resonant_rings_are_at_rest_and_others_turn(n, q, s):
    beta = 1.7
    assert np.max(np.abs(ring_velocity(beta, n, q, resonant_theta(n, s)))) < 1e-14
    assert np.max(np.abs(ring_velocity(beta, n, q, resonant_theta(n, s) + 0.1))) > 1e-3
    for d in (2, 4):
        x = ring(n, q, d, plane=0 if d == 2 else 1)
        assert np.max(np.abs(np.asarray(ring_field(beta, n, s, d)(0.0, jnp.asarray(x))))) < 1e-13


def test_aliased_bessel_sums_are_the_discrete_fourier_transform_of_the_weights():
    n, beta = 12, 2.3
    m = np.arange(n)
    for r in (5, 4, 6):  # coprime to 12, and not
        S, T = aliased_bessel(beta, n, r)
        weights = np.exp(beta * (np.cos(2 * np.pi * r * m / n) - 1.0))
        dft = np.array([np.sum(weights * np.exp(-2j * np.pi * ell * m / n)) for ell in range(n)]) / n
        np.testing.assert_allclose(S, dft.real, atol=1e-15)
        slope = beta * np.sin(2 * np.pi * r * m / n) * weights  # its transform is −i n T
        dft_t = np.array([np.sum(slope * np.exp(-2j * np.pi * ell * m / n)) for ell in range(n)]) / n
        np.testing.assert_allclose(-dft_t.imag, T, atol=1e-14)
        g = np.gcd(r, n)
        assert np.all(S[np.arange(n) % g != 0] == 0.0)  # non-coprime: aliasing misses the other residues


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
@pytest.mark.parametrize(
    "n, q, s, d, beta", [(12, 2, 3, 2, 0.8), (12, 2, 2, 2, 3.0), (8, 1, 2, 4, 1.5), (6, 1, 1, 2, 5.0)]
)
def test_twisted_spectrum_is_the_tangent_jacobians(n, q, s, d, beta):
    """The closed form against the eigenvalues of equilibrium's Jacobian at the ring, non-coprime q + s included."""
    found = equilibrium(ring_field(beta, n, s, d), ring(n, q, d, plane=0 if d == 2 else 1), max_iter=0)
    assert found.converged and found.zero_modes == 1  # the rotation of its plane, the only symmetry that moves it
    got = np.sort(found.eigenvalues.real)[::-1]
    want = twisted_spectrum(beta, n, q, s, d)
    np.testing.assert_allclose(got, want, atol=1e-12 * np.max(np.abs(want)))
    assert np.max(np.abs(found.eigenvalues.imag)) < 1e-12


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_ring_with_perturbed_phases_converges_back_to_the_ring():
    n, q, s, beta = 12, 2, 3, 1.2
    rng = np.random.default_rng(0)
    phi = 2 * np.pi * q * np.arange(n) / n + 1e-3 * rng.normal(size=n)
    guess = np.stack([np.cos(phi), np.sin(phi)], axis=1)
    found = equilibrium(ring_field(beta, n, s, 2), guess)
    assert found.residual <= 1e-10
    angles = np.unwrap(np.arctan2(found.x[:, 1], found.x[:, 0]))
    gaps = np.mod(np.diff(angles) - 2 * np.pi * q / n + np.pi, 2 * np.pi) - np.pi
    assert np.max(np.abs(gaps)) < 1e-10  # equally spaced again, up to the rotation


def test_floor_weight_bounds_every_attention_weight():
    rng = np.random.default_rng(1)
    n, d, beta = 7, 6, 1.3
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    A = np.asarray(SA(beta, positional="rope", rope_base=3.0).attention_matrix(0.0, jnp.asarray(x)))
    assert np.min(A) >= floor_weight(beta, n)
    assert floor_weight(beta, n) == pytest.approx(1.0 / (1.0 + 6.0 * np.exp(2.6)))


def test_non_obtuse_data_contract_no_slower_than_the_bound():
    rng = np.random.default_rng(2)
    n, d, beta = 6, 4, 0.5
    y = rng.normal(size=(n, d))
    y[:, 0] = np.abs(y[:, 0]) + 2.0
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    gram = y @ y.T
    assert gram.min() >= 0
    ts = np.linspace(0.0, 5.0, 11)
    xs = np.asarray(
        simulate(SA(beta, positional="rope", rope_base=2.0), jnp.asarray(y), 5.0, ts=jnp.asarray(ts), rtol=1e-10).xs
    )
    inner = np.min(np.einsum("tid,tjd->tij", xs, xs), axis=(1, 2))
    bound = contraction_bound(beta, n, inner[0], ts)
    assert np.all(inner >= bound - 1e-9)
    assert bound[0] == pytest.approx(inner[0]) and bound[-1] > bound[0]


def test_no_ordering_of_the_frequencies_holds_for_every_beta():
    """n = 12: the most stable resonance of the windings q = 2, 3, 4 changes between β = 0.1 and 8."""
    grid = np.linspace(*ORDER_BETA, 5)
    table = np.array([[[spectral_abscissa(b, 12, q, s) for b in grid] for s in range(1, 12)] for q in range(7)])
    assert ordering_changes(table) == [[2, 8, 3], [3, 6, 4], [4, 4, 6]]
    # ties never count: a table whose rows are equal has no change
    assert ordering_changes(np.zeros((2, 3, 4))) == []
