"""Rest points of the particle system: Newton on the product of spheres, their spectrum, symmetries and Morse index.

A rest point of a field f is a configuration x (n, d) with f(t, x) = 0: on the sphere, every token's
tangent velocity P_{x_i} drift_i vanishes (docs/model.md §13). ``equilibrium(field, x)`` finds one from a
guess and says how unstable it is.

Coordinates. On (S^{d−1})^n the unknowns are tangent coordinates u ∈ R^{n(d−1)}: at the current point x,
each token has an orthonormal frame B_i (d × (d−1)) of x_i^⊥ (a Householder reflection), and
x(u)_i = (x_i + B_i u_i)/‖x_i + B_i u_i‖, a second-order retraction. The residual is F(u)_i = B_iᵀ f(t, x(u))_i
and its Jacobian J = ∂F/∂u at u = 0 is the field's JAX Jacobian restricted to the tangent spaces: at a rest
point it is the linearization of the flow, whatever the frames. Fields in R^d (Pre-LN, no layer norm) and in
angles (``Circle``) take every coordinate as an unknown.

Symmetries. A rotation x ↦ Rx that commutes with the flow makes every rest point one of a family, and its
generator A (antisymmetric) gives a zero eigenvalue with eigenvector (A x_i)_i. Which rotations commute is
asked of the field itself, by its Jacobian: the flow is equivariant under e^{sA} exactly when
Df(y)[Ay] = A f(y) for every y, a condition linear in A; it is tested at random configurations, first for
one random generator (which passes, with probability one, only when every rotation does), else for each
basis generator, whose null combinations span the field's symmetry algebra. For fields in angles the
rotation is the shift θ ↦ θ + s. The zero modes at x are the rank of the generators' vectors there:
d(d − 1)/2 when the tokens span R^d, d(d − 1)/2 − (d − r)(d − r − 1)/2 when they span r dimensions.
Newton's linear systems are bordered by these vectors (a phase condition), so the family's direction is
fixed and the system stays regular; the spectrum is that of J on the complement of the zero modes,
which are reported as exact zeros.

Gradient flows. SA and USA with V = QᵀK symmetric are gradient flows of E_β = (1/(2βn²)) Σ_ij e^{β⟨Qx_i,Kx_j⟩}
(docs/model.md §1.3): USA in the round metric (ẋ = n grad E_β), SA in the metric Σ_i Z_i⟨a_i, b_i⟩
(ẋ_i = n² grad_i E_β / Z_i, Z_i the softmax's row sum), both climbing E_β (and descending it with
V = −QᵀK). Whether a field is one of these is tested, not assumed: its velocity at random configurations
must equal c·grad E_β (round) or c·grad_i E_β / Z_i (attention metric) for one constant c, with E_β built
from the field's own ``kernel_logits``. Then the Riemannian Hessian of E_β at the rest point is computed
independently (the Hessian of E_β∘retraction, exact at a critical point), and the Morse index is that of
the potential the flow descends: the number of directions in which a climbing flow raises E_β, counted from the
Hessian alone. ``unstable`` is always counted from J's spectrum, so that Sylvester's law (J = W⁻¹ Hess E_β with
W the metric: the two counts agree) compares two computations, and a wrong energy or Hessian shows as a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_int, check_real, real_array
from ..particles.errors import ConvergenceError
from ..particles.fields import Field, ensemble_axes
from . import machine

__all__ = [
    "Equilibrium",
    "EquilibriumError",
    "equilibrium",
    "symmetry_algebra",
    "tangent_frames",
    "chart",
    "coordinates",
    "generator_vectors",
    "rest_point_spectrum",
    "energy_parts",
    "check_field",
    "Linearization",
    "check_memory",
    "newton",
    "analyze",
]

JACOBIAN_BYTES = 256 * 2**20
"""Memory for the tangent vectors pushed through the field at once when the Jacobian is formed."""
JACOBIAN_COPIES = (3, 8)
"""N×N arrays a linearization holds (N = n(d − 1)): on the device the identity pushed forward, the columns and
their transpose; on the host J, its eigenvalues' complex work arrays, the Hessian and Newton's bordered system."""
SYMMETRY_TOL = 1e-8
"""Relative size below which an equivariance defect counts as zero (generators, gradient structure)."""


class EquilibriumError(ConvergenceError):
    """Newton did not reach a rest point; ``result`` holds the last iterate (``converged`` False)."""

    def __init__(self, message: str, result: Equilibrium):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class Equilibrium:
    """A rest point and its linear stability (``equilibrium``'s result).

    x            (n, d) the rest point (float64); t: the time at which the field was frozen
    residual     the largest tangent velocity max_i ‖f(t, x)_i‖ there; converged, iterations: Newton's
    eigenvalues  the N = n(d − 1) eigenvalues of the tangent-space Jacobian (nd for fields in R^d or angles),
                 complex, sorted by real part, largest first; the zero modes are exact zeros
    zero_modes   how many eigenvalues the field's continuous symmetries make zero (rank of the generators at x)
    unstable     eigenvalues with real part > ``eig_tol``, zero modes not counted
    neutral      other eigenvalues with |real part| ≤ ``eig_tol``: a degenerate rest point, or a flow too slow
                 to resolve
    eig_tol      the threshold: 1e-9 × max(‖J‖_F off the zero modes, the largest drift ‖drift_i‖ at x)
    jacobian     (N, N) the tangent-space Jacobian in the frames ``frames`` ((n, d, d − 1); None off the sphere)
    generators   (N, zero_modes) orthonormal tangent vectors of the symmetry generators at x
    symmetries   (s, d, d) a basis of the field's symmetry algebra (antisymmetric A; for angles, one entry 1)
    gradient     "round", "attention" or None: the metric in which the field is a gradient flow of E_β
    climbs       whether the gradient flow raises E_β (SA, USA) rather than lowers it; None without one
    hessian      (N, N) the Riemannian Hessian of E_β at x in the frames; None without a gradient structure
    morse_index  the Morse index of the potential the flow descends (−E_β when it climbs), zero modes excluded,
                 from the Hessian alone (``unstable`` comes from the Jacobian: Sylvester's law makes them equal)
    energy       E_β(x) = (1/(2βn²)) Σ_ij e^{β⟨Qx_i,Kx_j⟩} for a gradient flow, else None
    """

    x: np.ndarray
    t: float
    residual: float
    converged: bool
    iterations: int
    eigenvalues: np.ndarray
    zero_modes: int
    unstable: int
    neutral: int
    eig_tol: float
    jacobian: np.ndarray
    frames: np.ndarray | None
    generators: np.ndarray
    symmetries: np.ndarray
    gradient: str | None = None
    climbs: bool | None = None
    hessian: np.ndarray | None = None
    morse_index: int | None = None
    energy: float | None = None

    @property
    def stable(self) -> bool:
        """Linearly stable modulo symmetries: every eigenvalue but the zero modes has negative real part."""
        return self.unstable == 0 and self.neutral == 0

    @property
    def index(self) -> int:
        """The number of unstable directions (``unstable``)."""
        return self.unstable


# -- coordinates ---------------------------------------------------------------------------------------


def tangent_frames(x) -> jax.Array:
    """(n, d, d − 1): for each unit row x_i an orthonormal basis of x_i^⊥, the last d − 1 columns of the
    Householder reflection that maps x_i to ±e_1 (smooth in x_i away from the sign switch)."""
    x = jnp.asarray(x)
    d = x.shape[-1]
    s = jnp.where(x[..., :1] >= 0, 1.0, -1.0)
    v = x.at[..., 0].add(s[..., 0])  # x + s e_1, of norm ≥ 1
    h = jnp.eye(d, dtype=x.dtype) - 2.0 * v[..., :, None] * v[..., None, :] / jnp.sum(v * v, axis=-1)[..., None, None]
    return h[..., :, 1:]


def chart(x, frames, u, sphere: bool):
    """The configuration at tangent coordinates u (flat) around x."""
    n, d = x.shape
    if not sphere:
        return x + u.reshape(n, d)
    y = x + jnp.einsum("nij,nj->ni", frames, u.reshape(n, d - 1))
    return y / jnp.linalg.norm(y, axis=-1, keepdims=True)


def coordinates(v, frames, sphere: bool):
    """Tangent coordinates (flat) of ambient tangent vectors v (n, d)."""
    if not sphere:
        return v.reshape(-1)
    return jnp.einsum("nij,ni->nj", frames, v).reshape(-1)


def check_memory(n: int, d: int, N: int, batch: int) -> None:
    """Refuse (one InputError line, ``machine.check_parts``) a linearization of n tokens in R^d (N tangent
    coordinates, ``batch`` directions pushed forward at once) whose Jacobian, which grows as (n·d)², cannot fit
    in the memory, before it is allocated: its copies on the device and the host (``JACOBIAN_COPIES``)."""
    where = f"[N = {N} tangent coordinates, n = {n}, d = {d}]"
    formed, directions = f"the tangent Jacobian as it is formed {where}", f"one batch of {batch} directions"
    parts = {
        formed: 8 * JACOBIAN_COPIES[0] * N * N,
        f"the tangent Jacobian's spectrum and Newton's systems {where}": 8 * JACOBIAN_COPIES[1] * N * N,
        directions: 8 * batch * (6 * n * n + 16 * n * d),
    }
    remedy = "fewer tokens (n) or dimensions (d): the Jacobian grows as (n·d)²"
    machine.check_parts(
        parts, f"the linearization of n = {n} tokens in d = {d}", remedy, on_device=(formed, directions)
    )


def _batch(n: int, d: int, N: int) -> int:
    per_direction = 8 * (6 * n * n + 16 * n * d) + 1
    return int(max(1, min(N, JACOBIAN_BYTES // per_direction)))


@eqx.filter_jit
def _linearize(field, t, x, frames, sphere: bool, batch: int):
    """F(0) and J = ∂F/∂u at u = 0, J formed column by column in batches of tangent directions."""
    N = x.shape[0] * (x.shape[1] - 1 if sphere else x.shape[1])

    def F(u):
        return coordinates(field(t, chart(x, frames, u, sphere)), frames, sphere)

    f0, lin = jax.linearize(F, jnp.zeros(N, x.dtype))
    cols = jax.lax.map(lin, jnp.eye(N, dtype=x.dtype), batch_size=batch)
    return f0, cols.T


@eqx.filter_jit
def _velocity(field, t, x):
    return field(t, x)


@eqx.filter_jit
def _drift(field, t, x):
    return field.drift(t, x)


# -- symmetries ----------------------------------------------------------------------------------------


def _antisymmetric_basis(d: int) -> np.ndarray:
    """(d(d − 1)/2, d, d): e_a e_bᵀ − e_b e_aᵀ for a < b."""
    a, b = np.triu_indices(d, 1)
    out = np.zeros((a.size, d, d))
    out[np.arange(a.size), a, b] = 1.0
    out[np.arange(a.size), b, a] = -1.0
    return out


def _random_states(field, n: int, d: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if field.in_angles:
        return [rng.uniform(0, 2 * np.pi, (n, d)) for _ in range(2)]
    ys = [rng.normal(size=(n, d)) for _ in range(2)]
    if field.geometry == "sphere":
        ys = [y / np.linalg.norm(y, axis=-1, keepdims=True) for y in ys]
    return ys


def symmetry_algebra(field: Field, n: int, d: int, t: float = 0.0, *, seed: int = 0) -> np.ndarray:
    """A basis (s, d, d) of the rotation generators A (antisymmetric) under which ``field`` is equivariant on
    configurations of n tokens in R^d: f(t, e^{sA}y) = e^{sA} f(t, y), tested as Df(y)[Ay] = A f(y) at two random
    configurations y, with the field's tangent Jacobian there (on the sphere the tangent components decide: the
    normal ones agree for every tangent field). One random generator is tested first (it passes, with probability
    one, only when the whole of so(d) does); otherwise each of the d(d − 1)/2 basis generators, and the null space
    of their defects is the algebra. For a field in angles (``in_angles``) the shift θ ↦ θ + s is tested, and a
    symmetric field returns one entry [[[1.0]]]. field: a field of one member (noise is ignored); n, d: the
    configuration's shape; t: the time; seed: of the random configurations.
    """
    field = field.deterministic()
    sphere = field.geometry == "sphere" and not field.in_angles
    lin = Linearization(field, t, n, d, sphere)
    states = []
    for y in _random_states(field, n, d, seed):
        frames, _, J = lin(y)
        states.append((y, frames, J, lin.velocity(y)))
    if field.in_angles:
        ok = all(
            np.linalg.norm(J @ np.ones(J.shape[1])) <= SYMMETRY_TOL * max(np.max(np.abs(J)), 1e-300) * J.shape[0]
            for _, _, J, _ in states
        )
        return np.ones((1, 1, 1)) if ok else np.zeros((0, 1, 1))
    if d < 2:
        return np.zeros((0, d, d))

    def defects(generators: np.ndarray) -> tuple[np.ndarray, float]:
        rows, scale = [], 0.0
        for y, frames, J, v in states:
            moved = np.stack([np.asarray(coordinates(jnp.asarray(y @ A.T), frames, sphere)) for A in generators], 1)
            turned = np.stack([np.asarray(coordinates(jnp.asarray(v @ A.T), frames, sphere)) for A in generators], 1)
            rows.append(J @ moved - turned)
            # the sizes of the terms, not of their results (both vanish for some generators, e.g. in d = 2)
            scale = max(
                scale, float(np.max(np.abs(J))) * float(np.max(np.abs(moved))) * J.shape[1], float(np.max(np.abs(v)))
            )
        return np.concatenate(rows, axis=0), max(scale, 1e-300)

    r = np.random.default_rng(seed + 1).normal(size=(d, d))
    D, scale = defects(((r - r.T) / np.sqrt(2.0))[None])
    if np.max(np.abs(D)) <= SYMMETRY_TOL * scale:
        return _antisymmetric_basis(d)
    basis = _antisymmetric_basis(d)
    D, scale = defects(basis)  # (2N, m): the defect of each generator
    _, sv, vt = np.linalg.svd(D, full_matrices=True)
    sv = np.concatenate([sv, np.zeros(basis.shape[0] - sv.size)])
    null = vt[sv <= SYMMETRY_TOL * scale]
    return np.einsum("sk,kij->sij", null, basis)


def generator_vectors(x: np.ndarray, symmetries: np.ndarray, frames, sphere: bool, angles: bool) -> np.ndarray:
    """(N, m) orthonormal tangent vectors spanning {(A x_i)_i : A in the algebra} at x."""
    n, d = x.shape
    N = n * (d - 1 if sphere else d)
    if symmetries.shape[0] == 0:
        return np.zeros((N, 0))
    if angles:
        vecs = np.ones((N, 1))
    elif symmetries.shape[0] == d * (d - 1) // 2 and d > 2:
        # the full algebra: generators in a frame adapted to span(x), those fixing every x_i left out
        u, s, _ = np.linalg.svd(x.T, full_matrices=True)
        r = int(np.sum(s > 1e-10 * max(s[0], 1e-300)))
        pairs = [(a, b) for a in range(r) for b in range(a + 1, d)]
        gens = (
            np.stack([np.outer(u[:, a], u[:, b]) - np.outer(u[:, b], u[:, a]) for a, b in pairs])
            if pairs
            else np.zeros((0, d, d))
        )
        vecs = (
            np.stack([np.asarray(coordinates(jnp.asarray(x @ A.T), frames, sphere)) for A in gens], axis=1)
            if pairs
            else np.zeros((N, 0))
        )
    else:
        vecs = np.stack([np.asarray(coordinates(jnp.asarray(x @ A.T), frames, sphere)) for A in symmetries], axis=1)
    if vecs.shape[1] == 0:
        return vecs
    q, s, _ = np.linalg.svd(vecs, full_matrices=False)
    keep = s > 1e-8 * max(float(s[0]), 1e-300)
    return q[:, keep]


# -- gradient structure --------------------------------------------------------------------------------


def _has_energy(field: Field) -> bool:
    """Whether E_β can be formed from the field: a kernel (``kernel_logits``) and a nonzero scalar β."""
    beta = field.temperature
    return beta is not None and np.ndim(beta) == 0 and float(beta) != 0.0


def energy_parts(field: Field, x):
    """(E(x), Z(x)): E = (1/(2βn²)) Σ_ij e^{ℓ_ij(x)} from the field's ``kernel_logits`` ℓ (summed over heads) and
    its row sums Z_i = Σ_j e^{ℓ_ij}."""
    n = x.shape[0]
    logits, beta = field.kernel_logits(x), field.temperature
    if logits is None or beta is None:
        raise ValueError(f"{type(field).__name__} has no kernel e^ℓ with a temperature β: E_β cannot be formed")
    w = jnp.exp(logits.reshape(-1, n, n))
    return jnp.sum(w) / (2.0 * beta * n * n), jnp.sum(w, axis=(0, 2))


@eqx.filter_jit
def _energy_terms(field, t, y, frames, batch: int):
    """At y: the velocity, the Riemannian gradient of E_β, the kernel's row sums Z, E_β, and the Hessian of
    E_β∘retraction at u = 0 (the Riemannian Hessian where y is a critical point), by columns in batches. One
    compiled function serves both the tests at random configurations and the rest point."""
    (e, z), grad = jax.value_and_grad(lambda x: energy_parts(field, x), has_aux=True)(y)
    g = grad - jnp.sum(grad * y, axis=-1, keepdims=True) * y
    N = y.shape[0] * (y.shape[1] - 1)
    along = jax.grad(lambda u: energy_parts(field, chart(y, frames, u, True))[0])
    _, lin = jax.linearize(along, jnp.zeros(N, y.dtype))
    H = jax.lax.map(lin, jnp.eye(N, dtype=y.dtype), batch_size=batch)
    return field(t, y), g, z, e, H


def _gradient_structure(lin: Linearization, seed: int):
    """("round" | "attention", c) where velocity = c·grad E_β (round) or c·grad_i E_β / Z_i at two random
    configurations; None when neither holds."""
    field, n, d = lin.field, lin.n, lin.d
    if not lin.sphere or field.kernel_logits(jnp.eye(d)[:1]) is None or not _has_energy(field):
        return None
    found: dict[str, list[float]] = {"round": [], "attention": []}
    for y in _random_states(field, n, d, seed + 7):
        v, g, z, _, _ = (np.asarray(a) for a in _energy_terms(field, lin.t, jnp.asarray(y), lin.frames(y), lin.batch))
        for name, w in (("round", g), ("attention", g / z[:, None])):
            ww = float(np.sum(w * w))
            if not (np.isfinite(ww) and ww > 0):
                continue
            c = float(np.sum(v * w)) / ww
            if np.linalg.norm(v - c * w) <= SYMMETRY_TOL * np.linalg.norm(v):
                found[name].append(c)
    for name, cs in found.items():
        if len(cs) == 2 and cs[0] != 0 and abs(cs[0] - cs[1]) <= SYMMETRY_TOL * abs(cs[0]):
            return name, cs[0]
    return None


# -- the spectrum at a rest point ----------------------------------------------------------------------


def _sorted(values) -> np.ndarray:
    values = np.asarray(values, dtype=complex)
    return values[np.lexsort((-values.imag, -values.real))]


def rest_point_spectrum(
    J: np.ndarray,
    G: np.ndarray,
    *,
    hessian: np.ndarray | None = None,
    metric: np.ndarray | None = None,
    climbs: bool = True,
    scale: float | None = None,
) -> tuple[np.ndarray, int, int, float]:
    """The spectrum of a tangent Jacobian J (N, N) whose kernel holds the orthonormal symmetry vectors G (N, m):
    (eigenvalues sorted by real part, largest first, with m exact zeros; unstable; neutral; eig_tol).

    The zero modes are moved out of the way by Brauer's theorem: J + s G Gᵀ has the eigenvalues of J with the m
    zeros of G replaced by s, taken above the spectral radius (s = 1 + 2‖J‖_F), so the m largest are dropped.
    With the ``metric`` of a gradient flow (the diagonal of W) the same is done to W^{1/2} J W^{−1/2}, similar to
    J and symmetric when J = ±W⁻¹H (checked, to 1e-10 of its norm; J's own eigenvalues otherwise), whose kernel is
    W^{1/2}G: real eigenvalues by a symmetric solver. Given the energy's ``hessian`` H as well, the operator is
    ±W^{−1/2} H W^{−1/2} instead (+ when the flow ``climbs``), congruent to ±H: its count of positive eigenvalues
    is the Morse index, from the Hessian alone. eig_tol = 1e-9 × ``scale`` (default: the largest |eigenvalue|; a
    stiff operator passes the rate of its slow modes); ``unstable`` counts real parts above it, ``neutral`` those
    within it.
    """
    m = G.shape[1]
    S = None
    if hessian is not None:
        if metric is None:
            raise ValueError("rest_point_spectrum: a hessian needs its metric (the diagonal of W)")
        root = np.sqrt(metric)
        S = (hessian / root[:, None]) / root[None, :] * (1.0 if climbs else -1.0)
    elif metric is not None:
        root = np.sqrt(metric)
        S = J * root[:, None] / root[None, :]
        if np.linalg.norm(S - S.T) > 1e-10 * max(float(np.linalg.norm(S)), 1e-300):
            S = None  # not symmetric in this metric: J's own eigenvalues
    if S is not None:
        S = 0.5 * (S + S.T)
        kernel = np.linalg.qr(G * root[:, None])[0] if m else G
        shift = 1.0 + 2.0 * float(np.linalg.norm(S))
        values = np.linalg.eigvalsh(S + shift * (kernel @ kernel.T)).astype(complex)
    else:
        shift = 1.0 + 2.0 * float(np.linalg.norm(J))
        values = np.linalg.eigvals(J + shift * (G @ G.T))
    reduced = _sorted(values)[m:]
    if scale is None:
        scale = float(np.max(np.abs(reduced))) if reduced.size else 0.0
    tol = 1e-9 * scale
    unstable = int(np.sum(reduced.real > tol))
    neutral = int(np.sum(np.abs(reduced.real) <= tol))
    return _sorted(np.concatenate([reduced, np.zeros(m, complex)])), unstable, neutral, tol


# -- Newton ---------------------------------------------------------------------------------------------


def check_field(field: Field, x) -> tuple[Field, np.ndarray, bool]:
    """(the field without noise, x as float64 with unit rows on the sphere, whether x lives on the sphere),
    or ValueError: a field of one member and one finite configuration (n, d) it can act on."""
    if not isinstance(field, Field):
        raise ValueError(f"equilibrium needs an attnflow field such as af.SA(beta), got {type(field).__name__}")
    _, members = ensemble_axes(field)
    if members is not None:
        raise ValueError(
            f"equilibrium takes a field of one member; this one has {members} (β or weights with a "
            "member axis): solve one member at a time"
        )
    x = real_array("x", x, " of shape (n, d)").astype(np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"x must be one configuration of shape (n, d), got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("x must be finite")
    field = field.deterministic()
    field.check(x.shape[0], x.shape[1], jnp.float64)
    sphere = field.geometry == "sphere" and not field.in_angles
    if sphere:
        if x.shape[1] < 2:
            raise ValueError("points of the sphere S^{d−1} need d ≥ 2")
        norms = np.linalg.norm(x, axis=-1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError("x has a zero row: every token must be a point of the sphere")
        x = x / norms
    return field, x, sphere


class Linearization:
    """A field frozen at time t, linearized on configurations of one shape: F (tangent velocity coordinates)
    and J (the tangent Jacobian) at any x, compiled once."""

    def __init__(self, field: Field, t: float, n: int, d: int, sphere: bool):
        self.field, self.t, self.sphere = field, float(t), sphere
        self.n, self.d = n, d
        self.N = n * (d - 1 if sphere else d)
        self.batch = _batch(n, d, self.N)
        check_memory(n, d, self.N, self.batch)

    def frames(self, x) -> jax.Array:
        return tangent_frames(jnp.asarray(x)) if self.sphere else jnp.zeros((self.n, self.d, 0))

    def __call__(self, x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(frames, F, J) at x."""
        frames = self.frames(x)
        f0, J = _linearize(self.field, self.t, jnp.asarray(x), frames, self.sphere, self.batch)
        return np.asarray(frames), np.asarray(f0), np.asarray(J)

    def velocity(self, x) -> np.ndarray:
        return np.asarray(_velocity(self.field, self.t, jnp.asarray(x)))

    def rate(self, x) -> float:
        """A rate the field sets at x, against which an eigenvalue is called zero: the largest ambient drift
        ‖drift_i‖ (the normal part, which a rest point on the sphere balances; 0 off the sphere)."""
        if not self.sphere:
            return 0.0
        return float(np.max(np.linalg.norm(np.asarray(_drift(self.field, self.t, jnp.asarray(x))), axis=-1)))

    def move(self, x, frames, step) -> np.ndarray:
        return np.asarray(chart(jnp.asarray(x), jnp.asarray(frames), jnp.asarray(step), self.sphere))


def _newton_step(J: np.ndarray, F: np.ndarray, G: np.ndarray, damping: float = 0.0) -> np.ndarray | None:
    """δ solving J δ + G μ = −F, Gᵀδ = 0 (damping = 0), or the Levenberg–Marquardt step
    (JᵀJ + λI + GGᵀ) δ = −JᵀF with λ = damping·max|J|²."""
    N, m = J.shape[0], G.shape[1]
    if damping == 0.0:
        A = np.block([[J, G], [G.T, np.zeros((m, m))]])
        rhs = np.concatenate([-F, np.zeros(m)])
        try:
            step = np.linalg.solve(A, rhs)[:N]
        except np.linalg.LinAlgError:
            return None
        return step if np.all(np.isfinite(step)) else None
    lam = damping * float(np.max(np.abs(J))) ** 2
    A = J.T @ J + lam * np.eye(N) + G @ G.T * max(lam, 1e-300)
    try:
        return np.linalg.solve(A, -J.T @ F)
    except np.linalg.LinAlgError:
        return None


def _search(lin: Linearization, x, frames, step, merit0: float):
    """Backtracking on ‖f‖²: the first of x(α step), α = 1, 1/2, …, 2⁻³⁰ that lowers it, else None."""
    alpha = 1.0
    for _ in range(31):
        y = lin.move(x, frames, alpha * step)
        v = lin.velocity(y)
        m = 0.5 * float(np.sum(v * v))
        if np.isfinite(m) and m <= (1.0 - 1e-4 * alpha) * merit0:
            return y
        alpha *= 0.5
    return None


def newton(lin: Linearization, x: np.ndarray, symmetries: np.ndarray, *, tol: float, max_iter: int):
    """Newton's iteration from x: (x, frames, F, J, residual, converged, iterations) at the last iterate."""
    for iteration in range(max_iter + 1):
        frames, F, J = lin(x)
        v = lin.velocity(x)
        residual = float(np.max(np.linalg.norm(v, axis=-1)))
        scale = float(np.max(np.abs(J))) if J.size else 0.0
        if not (np.isfinite(residual) and np.all(np.isfinite(J))):
            return x, frames, F, J, residual, False, iteration
        if residual <= tol * max(scale, 1e-300) or residual == 0.0:
            return x, frames, F, J, residual, True, iteration
        if iteration == max_iter:
            break
        G = generator_vectors(x, symmetries, frames, lin.sphere, lin.field.in_angles)
        merit0 = 0.5 * float(np.sum(v * v))
        moved = None
        for damping in (0.0, 1e-10, 1e-6, 1e-2):
            step = _newton_step(J, F, G, damping)
            if step is not None:
                moved = _search(lin, x, frames, step, merit0)
            if moved is not None:
                break
        if moved is None:
            break
        x = moved
    return x, frames, F, J, residual, False, iteration


def _scale(J: np.ndarray, G: np.ndarray, rate: float) -> float:
    """The rate against which eigenvalues are judged zero: the largest of ‖J‖_F off the zero modes and the field's
    own ``rate`` (which stays O(1) where J vanishes, at a degenerate rest point)."""
    reduced = J - (J @ G) @ G.T if G.shape[1] else J
    return max(float(np.linalg.norm(reduced)) if reduced.size else 0.0, rate)


def analyze(lin: Linearization, x: np.ndarray, frames, J: np.ndarray, symmetries: np.ndarray, seed: int = 0) -> dict:
    """The stability of a rest point x (``Equilibrium``'s fields from ``eigenvalues`` on)."""
    G = generator_vectors(x, symmetries, frames, lin.sphere, lin.field.in_angles)
    out: dict[str, Any] = dict(generators=G, gradient=None, climbs=None, hessian=None, morse_index=None, energy=None)
    scale = _scale(J, G, lin.rate(x))
    structure = _gradient_structure(lin, seed)
    if structure is not None:
        name, c = structure
        _, _, z, e, H = (
            np.asarray(a) for a in _energy_terms(lin.field, lin.t, jnp.asarray(x), jnp.asarray(frames), lin.batch)
        )
        weights = np.ones(lin.n) if name == "round" else z
        metric = np.repeat(weights / abs(c), lin.d - 1)
        # ±W^{−1/2}HW^{−1/2} is congruent to ±H: its positive eigenvalues count the directions in which the
        # potential the flow descends (−E_β when it climbs) has negative curvature, the Morse index. It is
        # counted from the energy's Hessian alone, so that Sylvester's law (index = unstable, from J) is a check
        _, morse, _, _ = rest_point_spectrum(J, G, hessian=H, metric=metric, climbs=c > 0, scale=scale)
        out.update(gradient=name, climbs=bool(c > 0), hessian=H, energy=float(e), morse_index=morse)
    else:
        metric = None
    # the Jacobian's own spectrum, in the gradient flow's metric (a similarity: real eigenvalues where J is
    # symmetric there), whatever the Hessian says
    eig, unstable, neutral, tol = rest_point_spectrum(J, G, metric=metric, scale=scale)
    out.update(eigenvalues=eig, zero_modes=G.shape[1], unstable=unstable, neutral=neutral, eig_tol=tol)
    return out


def equilibrium(
    field: Field, x, *, t: float = 0.0, tol: float = 1e-11, max_iter: int = 50, strict: bool = True, seed: int = 0
) -> Equilibrium:
    """A rest point of ``field`` near the guess x, by Newton's method on the product of spheres, and its stability.

    field     any attnflow field of one member: wrappers (layer norms, noise: its deterministic part), masks,
              heads, sums, layer-wise weights frozen at time t
    x         (n, d) the guess: points of the sphere (rows are normalized), vectors of R^d for fields in R^d,
              angles (n, 1) for ``Circle``; everything is computed in float64
    t         the time at which the field is frozen
    tol       the rest point is accepted when max_i ‖f(t, x)_i‖ ≤ tol × max|J| (J: the tangent Jacobian)
    max_iter  Newton iterations at most (≥ 0)
    strict    raise ``EquilibriumError`` (its ``result`` the last iterate) when Newton does not converge; with
              False the result comes back with ``converged`` False instead
    seed      of the random configurations on which the symmetries and the gradient structure are tested

    Each step solves the bordered system J δ + G μ = −F, Gᵀδ = 0 (G: the symmetry generators' tangent vectors),
    damped by a backtracking line search on ‖f‖², with Levenberg–Marquardt steps where it fails. Returns an
    ``Equilibrium`` (see there for every field).
    """
    t = check_real("t", t)
    tol = check_real("tol", tol, 0.0, strict_min=True)
    max_iter = check_int("max_iter", max_iter, 0)
    seed = check_int("seed", seed, 0)
    field, x, sphere = check_field(field, x)
    n, d = x.shape
    lin = Linearization(field, t, n, d, sphere)
    symmetries = symmetry_algebra(field, n, d, lin.t, seed=seed)
    x, frames, F, J, residual, converged, iterations = newton(lin, x, symmetries, tol=tol, max_iter=max_iter)
    result = Equilibrium(
        x=x,
        t=lin.t,
        residual=residual,
        converged=converged,
        iterations=iterations,
        jacobian=J,
        frames=frames if sphere else None,
        symmetries=symmetries,
        **analyze(lin, x, frames, J, symmetries, seed),
    )
    if not converged and strict:
        raise EquilibriumError(
            f"equilibrium: Newton did not reach a rest point in {iterations} iterations (largest tangent velocity "
            f"{residual:.3g}, tolerance {tol:g} × max|J| = {tol * float(np.max(np.abs(J))):.3g}); no rest point is "
            "returned: try another guess or more iterations (max_iter), or strict=False for the last iterate",
            result,
        )
    return result
