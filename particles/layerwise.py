"""Time-dependent (layer-wise) attention weights: Q(t), K(t), V(t) piecewise constant in t.

[GLPR] (2.3) allows Q, K, V to depend on t, the continuous layer index. ``LayerWise`` holds
stacks of L weight matrices and uses layer ℓ(t) = min(⌊t/τ⌋, L − 1) (0 for t < τ) on
[ℓτ, (ℓ+1)τ): layer ℓ of a transformer acts for τ time units. The authors' phase-diagram
script redraws random weights every few time units; ``LayerWise.redrawn`` does that with the
ensembles of ``sample_weights``, ``LayerWise.from_npz`` loads a user's trained weights.

The field jumps at the layer boundaries τ, 2τ, …, (L−1)τ (``jump_times``). An integrator is
exact to its order only if no step straddles a boundary and each step sees one layer: adaptive
solvers should step to prevbefore(b) and restart at nextafter(b) (diffrax's
``ClipStepSizeController(jump_ts=...)`` does), fixed steps should end on the boundaries and
evaluate a step [a, b] at times inside the open interval (a, b). ℓ(t) is computed by
comparing t with exactly the floats ``jump_times`` returns, so a time one ulp below a boundary
is in the earlier layer and the boundary itself in the later one.
"""

from __future__ import annotations

import os
import zipfile
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, Int

from .checks import as_matrix, check_int, check_real
from .fields import Attention, Field
from .files import regular_file
from .span import identity_scale, span_kernel, span_rank, span_weights
from .weights import member_keys, sample_weights

__all__ = ["LayerWise"]

_NAMES = ("Q", "K", "V")


def _is_none(v) -> bool:
    return v is None


def _one_layer(m):
    return None if m is None else m[..., None, :, :]


def _with_weights(inner: Attention, Q=None, K=None, V=None) -> Attention:
    """``inner`` with the given matrices in place of its own (those left None are kept)."""
    given = {name: m for name, m in zip(_NAMES, (Q, K, V)) if m is not None}
    if not given:
        return inner
    names = tuple(given)
    # inner's own Q/K/V may be None (the identity): is_leaf lets tree_at replace those nodes too
    return eqx.tree_at(
        lambda f: tuple(getattr(f, n) for n in names), inner, tuple(given[n] for n in names), is_leaf=_is_none
    )


class LayerWise(Field):
    """Attention with piecewise-constant weights: layer ℓ(t) = min(⌊t/τ⌋, L − 1) of the stacks.

        ẋ_i = P_{x_i}( Σ_j A_ij(t) V(t) x_j ),   (Q, K, V)(t) = (Qs, Ks, Vs)[ℓ(t)]   [GLPR] (2.3)

    inner   the attention field (``SA`` or ``USA``) that gives β, the normalization, the mask
            and the geometry; a stack left None keeps inner's own matrix (None: identity) in
            every layer.
    Qs, Ks  (L, k, d) stacks of query/key matrices; Vs (L, d, d) of value matrices. One more
            leading axis, (B, L, ·, ·), gives each of B ensemble members its own stack.
    tau     duration τ > 0 of one layer.
    """

    inner: Attention
    Qs: Float[Array, "L k d"] | None
    Ks: Float[Array, "L k d"] | None
    Vs: Float[Array, "L d d"] | None
    tau: float = eqx.field(static=True)
    n_layers: int = eqx.field(static=True)
    event_ndim: ClassVar[dict[str, int]] = {"Qs": 3, "Ks": 3, "Vs": 3}

    def __init__(self, inner: Field, Qs=None, Ks=None, Vs=None, tau: float = 1.0):
        if not isinstance(inner, Attention):
            raise ValueError(
                f"LayerWise wraps an attention field such as SA(beta) or USA(beta), got {type(inner).__name__}"
            )
        self.inner = inner
        self.Qs = as_matrix("Qs", Qs, ndim=3)
        self.Ks = as_matrix("Ks", Ks, ndim=3)
        self.Vs = as_matrix("Vs", Vs, ndim=3)
        self.tau = check_real("tau", tau, 0.0, strict_min=True)
        stacks = {n: s for n, s in (("Qs", self.Qs), ("Ks", self.Ks), ("Vs", self.Vs)) if s is not None}
        layers = {n: s.shape[-3] for n, s in stacks.items()}
        if len(set(layers.values())) > 1:
            listed = ", ".join(f"{n} has {v}" for n, v in layers.items())
            raise ValueError(f"the weight stacks must have the same number of layers L: {listed}")
        self.n_layers = next(iter(layers.values())) if layers else 1
        q = self.Qs if self.Qs is not None else inner.Q
        k = self.Ks if self.Ks is not None else inner.K
        if q is not None and k is not None and q.shape[-2:] != k.shape[-2:]:
            raise ValueError(
                f"queries and keys must have the same shape (k, d); got Q {q.shape[-2:]} and K {k.shape[-2:]}"
            )
        if self.Vs is not None and self.Vs.shape[-1] != self.Vs.shape[-2]:
            raise ValueError(f"Vs must hold square (d, d) matrices, got shape {self.Vs.shape}")

    # -- what a Field needs --------------------------------------------------------------------
    @property
    def geometry(self) -> str:  # type: ignore[override]  # the wrapped fields'; a class constant elsewhere
        return self.inner.geometry

    @property
    def beta(self):
        """β of the inner attention (for statistics such as the energy)."""
        return self.inner.beta

    def boundaries(self) -> np.ndarray:
        """The layer boundaries ℓτ, ℓ = 1..L−1 (float64), where the weights jump."""
        return self.tau * np.arange(1, self.n_layers, dtype=np.float64)

    def jump_times(self, t1: float, t0: float = 0.0) -> np.ndarray:
        """The layer boundaries b with t0 < b < t1: times an integrator must step to exactly.

        Only real jumps are listed: after (L−1)τ the last layer stays on. For diffrax:
        ``ClipStepSizeController(PIDController(...), jump_ts=field.jump_times(t1, t0))``.
        """
        b = self.boundaries()
        return b[(b > t0) & (b < t1)]

    def layer_index(self, t) -> Int[Array, ""]:
        """ℓ(t) = #{boundaries b ≤ t} = min(⌊t/τ⌋, L − 1), clipped at 0; traceable in t."""
        b = self.boundaries()
        t = jnp.asarray(t)
        if not jnp.issubdtype(t.dtype, jnp.floating):  # an integer time would round the boundaries
            t = t.astype(jnp.result_type(float))
        if b.size == 0:
            return jnp.zeros((), jnp.int32)
        # compare in t's own precision with the very floats jump_times hands to the solver
        return jnp.sum(t >= jnp.asarray(b, dtype=t.dtype)).astype(jnp.int32)

    def layer(self, ell) -> Attention:
        """The inner attention with layer ``ell``'s weights (``ell`` may be traced).

        For a per-member LayerWise (stacks (B, L, ·, ·)) this indexes the layer axis of every
        member, so the result carries per-member weights too.
        """
        pick = [None if s is None else jnp.take(s, ell, axis=-3) for s in (self.Qs, self.Ks, self.Vs)]
        return _with_weights(self.inner, *pick)

    def drift(self, t, x: Float[Array, "n d"]) -> Float[Array, "n d"]:
        return self.layer(self.layer_index(t)).drift(t, x)

    def inner_fields(self) -> tuple[Field, ...]:
        return (self.inner,)

    def attention_matrix(self, t, x: Float[Array, "n d"]) -> Float[Array, "n n"]:
        """The matrix of layer ℓ(t): A(x) with (Q, K, V) = (Qs, Ks, Vs)[ℓ(t)]."""
        return self.layer(self.layer_index(t)).attention_matrix(t, x)

    def growth_norm(self) -> float | None:
        """max_ℓ ‖Q_ℓᵀK_ℓ‖₂ when the inner attention is USA in [GLPR]'s time (``kernel_norm``), else None."""
        return None if self.inner.growth_norm() is None else self.kernel_norm()

    def check(self, n: int, d: int, dtype) -> None:
        # the inner field's own checks (shapes against d, USA's overflow bound on β‖QᵀK‖)
        # work on stacks too: they read the last two axes and maximize over the leading ones
        _with_weights(self.inner, self.Qs, self.Ks, self.Vs).check(n, d, dtype)

    def kernel_norm(self) -> float:
        """Largest ‖QᵀK‖₂ over layers (and members)."""
        return _with_weights(self.inner, self.Qs, self.Ks, self.Vs).kernel_norm()

    def in_span(self, U) -> LayerWise | None:
        """The layers' reductions, when every layer's V is a multiple of the identity (Vs, or inner's V).

        Layer ℓ becomes the inner attention on y = x U with K'_ℓ = UᵀQ_ℓᵀK_ℓ U and V'_ℓ = λ_ℓ I_r (as
        ``Attention.in_span``); the layer boundaries are unchanged. None as soon as one layer's V is
        not λI (the random ensembles but ``repulsive``), or for an unspecified frame (int U) when
        some layer's Q, K are not identities.
        """
        r = span_rank(U)
        if self.Vs is not None:
            scale = identity_scale(self.Vs)
            if scale is None:
                return None
            Vs, inner_v = scale[..., None, None] * jnp.eye(r, dtype=self.Vs.dtype), None  # every layer sets V
        else:
            own = span_weights(None, None, self.inner.V, r)
            if own is None:
                return None
            Vs, inner_v = None, own[2]
        if self.Qs is None and self.Ks is None:
            own = span_weights(self.inner.Q, self.inner.K, None, U)
            if own is None:
                return None
            Ks, inner_qk = None, own[:2]
        elif isinstance(U, (int, np.integer)):
            return None
        else:
            # a layer without its own Q (or K) uses inner's, the same in every layer: a layer axis of 1
            Q = self.Qs if self.Qs is not None else _one_layer(self.inner.Q)
            K = self.Ks if self.Ks is not None else _one_layer(self.inner.K)
            Ks, inner_qk = span_kernel(Q, K, U, inner_axes=1), (None, None)
        inner = eqx.tree_at(lambda f: (f.Q, f.K, f.V), self.inner, (*inner_qk, inner_v), is_leaf=_is_none)
        return LayerWise(inner, Ks=Ks, Vs=Vs, tau=self.tau)

    # -- constructors --------------------------------------------------------------------------
    @classmethod
    def redrawn(
        cls,
        inner: Field,
        key,
        ensemble: str,
        d: int,
        n_layers: int,
        tau: float = 1.0,
        *,
        members: int | None = None,
        k: int | None = None,
    ) -> LayerWise:
        """Fresh random weights every τ time units: n_layers independent draws of ``sample_weights``.

        Layer ℓ is ``sample_weights(fold_in(key, ℓ), d, ensemble)``. With ``members=B`` member m
        has the layers of ``redrawn(inner, fold_in(key, m), ...)``: stacks (B, L, ·, ·).
        ``inner`` must carry no weights of its own (the ensemble decides all of Q, K, V).
        """
        if not isinstance(inner, Attention):
            raise ValueError(
                f"LayerWise wraps an attention field such as SA(beta) or USA(beta), got {type(inner).__name__}"
            )
        own = [n for n in _NAMES if getattr(inner, n) is not None]
        if own:
            raise ValueError(
                f"redrawn draws Q, K and V from the ensemble; the inner field already has "
                f"{', '.join(own)}: pass e.g. SA(beta) without weights"
            )
        n_layers = check_int("n_layers", n_layers, 1)
        if members is None:
            w = sample_weights(key, d, ensemble, members=n_layers, k=k)
        else:
            # member m's stack is a members=L draw from its own key, so member m of a batch equals
            # the unbatched redrawn(fold_in(key, m)); the keys are traced, the shapes static
            w = jax.vmap(lambda km: sample_weights(km, d, ensemble, members=n_layers, k=k))(member_keys(key, members))
        return cls(inner, Qs=w["Q"], Ks=w["K"], Vs=w["V"], tau=tau)

    @classmethod
    def from_npz(cls, inner: Field, path, tau: float = 1.0) -> LayerWise:
        """Layer-wise weights from a user's ``.npz`` archive holding Q, K and/or V of shape (L, ·, ·).

        Write it with ``np.savez(path, Q=Qs, K=Ks, V=Vs)``: Q and K of shape (L, k, d), V of
        shape (L, d, d), real and finite. An array left out keeps inner's own matrix (None:
        the identity). Loaded without pickle.
        """
        path = os.fspath(path)
        if not os.path.lexists(path):
            raise ValueError(f"weights file not found: {path!r}")
        regular_file(path, f"weights file {path!r}", error=ValueError)  # a pipe or a device: never opened
        try:
            data = np.load(path, allow_pickle=False)
        except ValueError as err:  # numpy refuses pickled content without allow_pickle
            raise ValueError(f"{path}: not an .npz archive of numeric arrays ({err})") from None
        except (OSError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"{path}: cannot be read as an .npz archive ({err})") from None
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError(
                f"{path}: holds a single array; expected an .npz archive with arrays named "
                f"Q, K, V, written by np.savez(path, Q=..., K=..., V=...)"
            )
        with data:
            unknown = sorted(set(data.files) - set(_NAMES))
            if unknown:
                raise ValueError(
                    f"{path}: unexpected arrays {unknown}; expected only Q, K, V (shapes (L, k, d), "
                    f"(L, k, d), (L, d, d))"
                )
            present = [n for n in _NAMES if n in data.files]
            if not present:
                raise ValueError(
                    f"{path}: none of the arrays Q, K, V is present; the archive holds "
                    f"{sorted(data.files) or 'nothing'}"
                )
            arrays = {}
            for name in present:
                try:
                    arr = data[name]
                except ValueError:
                    raise ValueError(
                        f"{path}: array {name} is an object (pickled) array; save plain real arrays of shape (L, ·, ·)"
                    ) from None
                except MemoryError:  # a header claiming far more data than the archive holds
                    raise ValueError(
                        f"{path}: array {name} is corrupt (its header claims more data than this machine can hold)"
                    ) from None
                if arr.dtype == object or not (
                    np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
                ):
                    raise ValueError(f"{path}: array {name} has dtype {arr.dtype}; expected real numbers")
                if arr.ndim != 3:
                    want = "(L, d, d)" if name == "V" else "(L, k, d)"
                    raise ValueError(
                        f"{path}: array {name} has shape {arr.shape}; expected {want}, one matrix per layer"
                    )
                if not np.all(np.isfinite(arr)):
                    raise ValueError(f"{path}: array {name} has non-finite entries (nan or inf)")
                arrays[name] = arr
        layers = {n: a.shape[0] for n, a in arrays.items()}
        if len(set(layers.values())) > 1:
            raise ValueError(f"{path}: the arrays disagree on the number of layers L: {layers}")
        if "Q" in arrays and "K" in arrays and arrays["Q"].shape != arrays["K"].shape:
            raise ValueError(
                f"{path}: Q has shape {arrays['Q'].shape} but K has {arrays['K'].shape}; they must match (L, k, d)"
            )
        if "V" in arrays:
            v = arrays["V"]
            if v.shape[1] != v.shape[2]:
                raise ValueError(f"{path}: V has shape {v.shape}; expected square matrices (L, d, d)")
            for name in ("Q", "K"):
                if name in arrays and arrays[name].shape[2] != v.shape[1]:
                    raise ValueError(
                        f"{path}: {name} has shape {arrays[name].shape} but V has {v.shape}: "
                        f"the last axis of {name} must be d = {v.shape[1]}"
                    )
        return cls(inner, Qs=arrays.get("Q"), Ks=arrays.get("K"), Vs=arrays.get("V"), tau=tau)
