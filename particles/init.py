"""Initial configurations on (S^{d-1})^n, seeded and batchable.

Every sampler takes a ``jax.random`` key (or an int seed in [0, 2**63 − 1]), returns an (n, d)
array, or (batch, n, d) when ``batch`` is given (one independent draw per member, from ``batch``
keys split off ``key``). Arrays are float64 unless ``dtype`` says otherwise.
"""

from __future__ import annotations

import functools
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .checks import check_int, check_real
from .files import open_npy
from .sphere import expmap, normalize, project

__all__ = ["uniform", "orthogonal", "equiangular", "cap", "clusters", "from_array", "derived_seed"]


SEED_MAX = 2**63 - 1
"""The largest int seed: ``jax.random.key`` takes a signed 64-bit integer."""


def check_seed(seed) -> int:
    """``seed`` as an int, or a ValueError when it lies outside [0, 2**63 − 1]: above, jax overflows;
    below, it silently takes the seed modulo 2**64, which is how a wrapped seed + s would go unseen."""
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed must be an integer in [0, 2**63 - 1], got {int(seed)}")
    return int(seed)


def derived_seed(seed: int, offset: int) -> int:
    """The seed of a stream derived from ``seed`` (an experiment's other draws: ``seed + offset``), summed in
    Python integers and wrapped modulo 2**63 into [0, 2**63 − 1]: every seed a configuration accepts derives
    its streams, never an overflow of int64. The members' own seeds seed + s are not wrapped (a configuration
    whose seed + seeds − 1 passes 2**63 − 1 is refused), so they stay distinct."""
    return (int(seed) + int(offset)) % (SEED_MAX + 1)


def as_key(key):
    """A jax.random key from a key or an int seed (checked to [0, 2**63 − 1])."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return jax.random.key(check_seed(key))
    return key


def float_dtype(dtype):
    """The floating dtype of a draw (default: JAX's float, float64 under attnflow); ValueError otherwise."""
    dt = jnp.dtype(jnp.result_type(float) if dtype is None else dtype)
    if not jnp.issubdtype(dt, jnp.floating):
        raise ValueError(f"dtype must be a floating type such as 'float32' or 'float64', got {dt.name}")
    return dt


def _batched(sample, key, batch, dtype, arrays=(), static=()):
    """``sample(key, *arrays, *static)`` once, or vmapped over ``batch`` split keys.

    ``sample`` is a module-level function and ``static`` its hashable shape parameters: the draw is
    one compiled program per sampler and shapes (drawn eagerly, each of its operations would be
    compiled on its own for every new shape: ≈ 0.7 s for a uniform draw).
    """
    key = as_key(key)
    dt = float_dtype(dtype)
    if batch is not None:
        batch = check_int("batch", batch, 1)
    return _draw(key, tuple(arrays), sample=sample, batch=batch, dtype=dt, static=tuple(static))


@functools.partial(jax.jit, static_argnames=("sample", "batch", "dtype", "static"))
def _draw(key, arrays, *, sample, batch, dtype, static):
    def one(k):
        return sample(k, *arrays, *static)

    if batch is None:
        return one(key).astype(dtype)
    return jax.vmap(one)(jax.random.split(key, batch)).astype(dtype)


def _check_nd(n, d):
    return check_int("n", n, 1), check_int("d", d, 2)


def uniform(key, n: int, d: int, *, batch: int | None = None, dtype=None) -> Float[Array, "... n d"]:
    """n independent points, uniform on S^{d-1} (normalized Gaussians)."""
    n, d = _check_nd(n, d)
    return _batched(_uniform_sample, key, batch, dtype, static=(n, d))


def _uniform_sample(k, n, d):
    return normalize(jax.random.normal(k, (n, d)))


def _haar_frame(key, d: int, m: int):
    """m orthonormal vectors of R^d (rows), Haar-distributed."""
    g = jax.random.normal(key, (d, m))
    q, r = jnp.linalg.qr(g)
    return (q * jnp.sign(jnp.diagonal(r))).T


def orthogonal(key, n: int, d: int, *, batch: int | None = None, dtype=None) -> Float[Array, "... n d"]:
    """n mutually orthogonal unit vectors (a random orthonormal frame); needs d ≥ n. [GLPR] Thm 6.8, ρ0 = 0."""
    n, d = _check_nd(n, d)
    if d < n:
        raise ValueError(f"orthogonal needs d ≥ n (n = {n} orthogonal vectors in R^d), got d = {d}")
    return _batched(_haar_frame, key, batch, dtype, static=(d, n))


def equiangular(key, n: int, d: int, rho: float, *, batch: int | None = None, dtype=None) -> Float[Array, "... n d"]:
    """n unit vectors with ⟨x_i, x_j⟩ = ρ for all i ≠ j, randomly rotated ([GLPR] Thm 6.8).

    Allowed: −1/(n−1) ≤ ρ < 1. The Gram matrix (1−ρ)I + ρ11ᵀ has rank n, so d ≥ n is needed,
    except at the regular simplex ρ = −1/(n−1) (rank n−1), which fits in d ≥ n−1.
    """
    n, d = _check_nd(n, d)
    lower = -1.0 / (n - 1) if n > 1 else -1.0
    rho = check_real("rho", rho, lower, 1.0)
    if rho >= 1.0 and n > 1:
        raise ValueError(f"rho must be < 1 (ρ = 1 puts all points on top of each other), got {rho:g}")
    simplex = n > 1 and math.isclose(rho, lower, rel_tol=0, abs_tol=1e-12)
    rank = n - 1 if simplex else n
    if d < rank:
        need = "d ≥ n − 1 for the simplex" if simplex else "d ≥ n"
        raise ValueError(f"equiangular with n = {n}, rho = {rho:g} needs {need}, got d = {d}")
    # Gram matrix factor in its eigenbasis; the null direction of the simplex is dropped
    gram = (1.0 - rho) * np.eye(n) + rho * np.ones((n, n))
    lam, u = np.linalg.eigh(gram)
    factor = (u * np.sqrt(np.clip(lam, 0.0, None)))[:, n - rank :]
    return _batched(_equiangular_sample, key, batch, dtype, arrays=(factor,), static=(d, rank))


def _equiangular_sample(k, factor, d, rank):
    return factor @ _haar_frame(k, d, rank)


def _cap_angle_sampler(d: int, angle: float, grid: int = 4097):
    """Inverse CDF of the polar angle θ of a uniform point in the cap {θ ≤ angle}: density ∝ sin^{d−2} θ."""
    theta = np.linspace(0.0, angle, grid)
    dens = np.sin(theta) ** (d - 2)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(theta))])
    cdf /= cdf[-1]
    return jnp.asarray(cdf), jnp.asarray(theta)


def cap(
    key,
    n: int,
    d: int,
    angle: float = math.pi / 4,
    w=None,
    *,
    batch: int | None = None,
    dtype=None,
) -> Float[Array, "... n d"]:
    """n points uniform in the spherical cap {x : ∠(x, w) ≤ angle}.

    With angle < π/2 the cap lies in the open hemisphere {⟨x, w⟩ > 0} ([GLPR] Lemma 6.4).
    ``w`` defaults to a uniformly random direction per draw; a given ``w`` is normalized.
    """
    n, d = _check_nd(n, d)
    angle = check_real("angle", angle, 0.0, math.pi, strict_min=True)
    if w is not None:
        w = np.asarray(w, dtype=float)
        if w.shape != (d,) or not np.all(np.isfinite(w)) or not np.any(w):
            raise ValueError(f"w must be a finite nonzero vector of shape ({d},), got {w.tolist()}")
        w = jnp.asarray(w / np.linalg.norm(w))
    cdf, theta = _cap_angle_sampler(d, angle)
    return _batched(_cap_sample, key, batch, dtype, arrays=(cdf, theta, w), static=(n, d))


def _cap_sample(k, cdf, theta, w, n, d):
    kw, kt, kd = jax.random.split(k, 3)
    center = normalize(jax.random.normal(kw, (d,))) if w is None else w
    th = jnp.interp(jax.random.uniform(kt, (n,)), cdf, theta)
    direction = normalize(project(center, jax.random.normal(kd, (n, d))))
    return expmap(jnp.broadcast_to(center, (n, d)), th[:, None] * direction)


def clusters(
    key,
    n: int,
    d: int,
    k: int,
    spread: float = 0.05,
    *,
    batch: int | None = None,
    dtype=None,
) -> Float[Array, "... n d"]:
    """n points in k clusters: uniform random centres, particle i in cluster i mod k.

    Each point is the centre moved along a random tangent direction by a Gaussian angle of
    standard deviation ``spread`` (radians). Cluster sizes differ by at most one.
    """
    n, d = _check_nd(n, d)
    k = check_int("k", k, 1, n)
    spread = check_real("spread", spread, 0.0)
    return _batched(_clusters_sample, key, batch, dtype, arrays=(spread,), static=(n, d, k))


def _clusters_sample(key_, spread, n, d, k):
    kc, kt = jax.random.split(key_)
    centres = normalize(jax.random.normal(kc, (k, d)))[jnp.arange(n) % k]
    tangent = project(centres, jax.random.normal(kt, (n, d)))
    return expmap(centres, spread * tangent)


def from_array(a, *, dtype=None, unit: bool = True) -> Float[Array, "... n d"]:
    """A given configuration (array or path to a ``.npy`` file) of shape (n, d) or (batch, n, d).

    Rows are normalized to unit length (``unit=False`` keeps them, for dynamics in R^d), so any
    nonzero vectors are accepted; rows that are zero or not finite are errors. ``.npy`` files are
    read without unpickling.
    """
    if isinstance(a, (str, os.PathLike)):
        path = os.fspath(a)
        if not path.endswith(".npy"):
            raise ValueError(f"from_array reads .npy files; got {path!r}")
        try:
            a = open_npy(path)
        except FileNotFoundError:
            raise ValueError(f"initial-condition file {path!r} does not exist") from None
        if not isinstance(a, np.ndarray):
            a.close()
            raise ValueError(f"{path!r} is an .npz archive; from_array reads one array saved with numpy.save")
        a = np.array(a)
    if isinstance(a, jax.core.Tracer):  # under the caller's trace (jax.grad of a loss of x0): shapes only
        if a.ndim not in (2, 3):
            raise ValueError(f"initial configuration must have shape (n, d) or (batch, n, d), got {a.shape}")
        a = a.astype(float_dtype(dtype))
        return a / jnp.linalg.norm(a, axis=-1, keepdims=True) if unit else a
    arr = np.asarray(a)
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(f"initial configuration must be a real array, got dtype {arr.dtype}")
    if arr.ndim not in (2, 3):
        raise ValueError(f"initial configuration must have shape (n, d) or (batch, n, d), got {arr.shape}")
    min_d = 2 if unit else 1  # d = 1 holds angles on the circle, or a line in R^1
    if arr.shape[-1] < min_d or arr.shape[-2] < 1 or (arr.ndim == 3 and arr.shape[0] < 1):
        raise ValueError(
            f"initial configuration needs n ≥ 1 particles in d ≥ {min_d} dimensions, got shape {arr.shape}"
        )
    if not np.all(np.isfinite(arr)):
        raise ValueError("initial configuration has non-finite entries (nan or inf)")
    norms = np.linalg.norm(arr, axis=-1)
    if unit and np.any(norms == 0):
        bad = np.argwhere(norms == 0)[0].tolist()
        raise ValueError(f"initial configuration has a zero row at index {bad}; rows must be nonzero vectors")
    return jnp.asarray(arr / norms[..., None] if unit else arr, dtype=float_dtype(dtype))
