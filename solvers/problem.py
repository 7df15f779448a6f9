"""A run as ``simulate`` understands it: its arguments checked once, and what every loop reads.

``describe`` validates ``simulate``'s arguments (one ValueError naming the argument and the valid
choices), casts the field and the initial states to the run's dtype and broadcasts them to the
ensemble, and returns a ``Problem``. The loops (``fixed_loop``, ``dense``, ``adaptive_loop``) each
build their compiled call from it; ``check_steps`` refuses, before anything is compiled, a
fixed-step run whose step vanishes against t0 or t1 or whose steps exceed ``max_steps``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..particles.checks import check_choice, check_int, check_real
from ..particles.fields import Field, ensemble_axes
from ..particles.init import from_array
from .methods import METHODS, names, spoken

SOLVERS = names()

GRID_ONLY = names(grid_only=True)
"""Fixed-step methods that always step on the uniform grid and interpolate their saves (``solvers/dense.py``)."""

ONE_STEP = names("fixed", grid_only=False)
"""Fixed-step methods that take one step at a time (``fixed.FixedStep``): what a stochastic field's splitting wraps."""

MAX_COUNTED_STEPS = 2**31 - 1
"""The most steps a fixed-step run takes per member, whatever ``max_steps``: its step counters are int32."""

PRECISIONS = {"float32": "float32", "tf32": "tensorfloat32", "bf16": "BF16_BF16_F32"}
"""The precisions of a run's matrix products, by name, as ``jax.default_matmul_precision`` names them:
"float32" full float32 products (``Precision.HIGHEST``; the default, and the only one of float64 runs),
"tf32" TensorFloat-32 products where the accelerator has them (``Precision.HIGH``: unit roundoff 2⁻¹¹ on
NVIDIA GPUs), "bf16" bfloat16 operands accumulated in float32 (the ``BF16_BF16_F32`` dot algorithm: 2⁻⁸)."""


@dataclass(frozen=True)
class Problem:
    """A checked run of ``simulate``: the field and states in the run's dtype, and its options.

    x0 is (members, n, d) whatever the input's shape; ``batched`` says whether the caller gave an
    ensemble (the result then keeps its member axis). ``jumps`` are the layer switches in
    (t0, t1); ``save_fn`` is the save function as (t, x, field); ``states``: no save function was
    given (the saves are the states); ``dense``: the run steps on the uniform grid; ``ensemble``: the
    members of the whole ensemble this run is a part of, for which its loop is chosen (≥ ``members``).
    """

    field: Any
    axes: Any
    x0: Any
    t0: float
    t1: float
    ts: np.ndarray
    solver: str
    dt: float | None
    rtol: float
    atol: float
    adaptive: bool
    dense: bool
    delta: float | None
    max_steps: int
    jumps: np.ndarray
    dtype: Any
    batched: bool
    save_fn: Callable
    states: bool
    key: Any
    group_size: Any
    shard: bool | None
    save_reads_time: bool
    ensemble: int
    precision: str = "float32"

    @property
    def members(self) -> int:
        return self.x0.shape[0]

    @property
    def fixed(self) -> bool:
        """A fixed-step method (or the grid's)."""
        return METHODS[self.solver].kind == "fixed"

    @property
    def fixed_dt(self) -> float:
        """dt, which every run of constant steps has: ``describe`` refuses one without it."""
        if self.dt is None:
            raise ValueError(f"dt is required to run {self.solver!r} with constant steps (e.g. dt=0.01)")
        return self.dt

    @property
    def matmul_precision(self) -> str:
        """The run's ``precision`` as ``jax.default_matmul_precision`` takes it (``PRECISIONS``)."""
        return PRECISIONS[self.precision]

    @property
    def noisy(self) -> bool:
        return self.field.noise_sigma is not None

    @property
    def traced(self) -> bool:
        """Under an outer trace (the caller's jit decides the layout and nothing can be raised)."""
        return any(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves((self.field, self.x0)))


def describe(
    field,
    x0,
    t1,
    *,
    ts,
    t0,
    solver,
    dt,
    rtol,
    atol,
    save,
    adaptive,
    stop_when_clustered,
    max_steps,
    group_size,
    dtype,
    key,
    dense,
    shard,
    save_reads_time,
    precision="float32",
    ensemble=None,
) -> Problem:
    """``simulate``'s arguments checked, as a ``Problem`` (see ``simulate`` for their meaning)."""
    check_choice("solver", solver, SOLVERS)
    check_choice("precision", precision, tuple(PRECISIONS))
    t0 = check_real("t0", t0)
    t1 = check_real("t1", t1, 0.0)
    if t1 <= t0:
        raise ValueError(f"t1 must be > t0 = {t0:g}, got {t1:g}")
    rtol = check_real("rtol", rtol, 0.0, strict_min=True)
    atol = check_real("atol", atol, 0.0, strict_min=True)
    if not isinstance(field, Field):
        raise ValueError(f"field must be an attnflow vector field such as af.SA(beta), got {type(field).__name__}")
    fixed = METHODS[solver].kind == "fixed"
    noisy = field.noise_sigma is not None
    if noisy and solver in GRID_ONLY:
        raise ValueError(
            f"{type(field).__name__} is a stochastic field: solver {solver!r} interpolates a smooth "
            f"path; integrate it with one of {', '.join(map(repr, ONE_STEP))} and dt"
        )
    if noisy and not fixed:
        raise ValueError(
            f"{type(field).__name__} is a stochastic field: integrate it with a fixed-step solver "
            f"({', '.join(map(repr, ONE_STEP))}) and dt, got solver={solver!r}"
        )
    if dt is None and fixed:
        raise ValueError(f"dt is required for the fixed-step solver {solver!r} (e.g. dt=0.01)")
    if dt is None and not adaptive:
        raise ValueError(f"dt is required to run {solver!r} with adaptive=False")
    if dt is not None:
        dt = check_real("dt", dt, 0.0, strict_min=True)
    if stop_when_clustered is not None:
        stop_when_clustered = check_real("stop_when_clustered", stop_when_clustered, 0.0, 2.0, strict_min=True)

    dtype = _run_dtype(x0, dtype)
    if precision != "float32" and dtype != jnp.dtype("float32"):
        raise ValueError(
            f"precision={precision!r} lowers the precision of float32 matrix products; a {dtype.name} run "
            "forms its products in float64: use dtype='float32', or leave precision='float32'"
        )
    sphere = field.geometry == "sphere"
    # in angles the methods that can step them, in R^d those that do not only rotate
    usable = names(angles=True) if field.in_angles else names(rotating=False)
    if not sphere and METHODS[solver].rotating:
        raise ValueError(
            f"solver {solver!r} moves particles by rotations of the sphere; the field "
            f"{type(field).__name__} lives in R^d: use {spoken(usable, quote='')}"
        )
    if field.in_angles and not METHODS[solver].angles:
        raise ValueError(
            f"solver {solver!r} steps points of the sphere with their unprojected velocity, which the "
            f"angles of {type(field).__name__} do not carry: give points (af.from_angles) to SA/USA, "
            f"or use {spoken(usable, quote='')}"
        )
    x0 = from_array(x0, dtype=dtype, unit=sphere)
    n, d = x0.shape[-2:]
    axes, batch_f = ensemble_axes(field)
    batch_x = x0.shape[0] if x0.ndim == 3 else None
    if batch_x is not None and batch_f is not None and batch_x != batch_f:
        raise ValueError(
            f"x0 has a batch of {batch_x} configurations but the field has {batch_f} members "
            "(e.g. beta values); they must match"
        )
    members = batch_x or batch_f or 1
    if ensemble is not None:
        ensemble = check_int("ensemble", ensemble, 1)
        if ensemble < members:
            raise ValueError(
                f"ensemble = {ensemble} counts the members of the whole ensemble this run is a part of, "
                f"at least its own {members}: give a number ≥ {members}, or None"
            )
    field.check(n, d, dtype)
    ts = _save_times(ts, t0, t1)
    jumps = _jump_times(field, t0, t1)
    max_steps = check_int("max_steps", max_steps, 1)
    field = jax.tree_util.tree_map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, field)
    return Problem(
        field=field,
        axes=axes,
        x0=jnp.broadcast_to(x0, (members, n, d)),
        t0=t0,
        t1=t1,
        ts=ts,
        solver=solver,
        dt=dt,
        rtol=rtol,
        atol=atol,
        adaptive=bool(adaptive),
        # adaptive solvers save from their dense output anyway
        dense=(bool(dense) and fixed) or solver in GRID_ONLY,
        delta=stop_when_clustered,
        max_steps=max_steps,
        jumps=jumps,
        dtype=dtype,
        batched=batch_x is not None or batch_f is not None,
        save_fn=_measured(_identity if save is None else _with_field(save), precision),
        states=save is None,
        key=key,
        group_size=group_size,
        shard=shard,
        save_reads_time=bool(save_reads_time),
        precision=precision,
        ensemble=members if ensemble is None else ensemble,
    )


def products(precision: str, dtype) -> str:
    """The precision a run of ``dtype`` forms its matrix products in: "float64" for a float64 run, else the
    run's ``precision`` ("float32", "tf32" or "bf16"), as ``Solution.precision`` and summary.json state it."""
    return "float64" if jnp.dtype(dtype) == jnp.dtype("float64") else precision


def _run_dtype(x0, dtype):
    """The run's dtype: ``dtype``, else x0's if it is a float, else the default float."""
    x0_dtype = getattr(x0, "dtype", None)
    if dtype is None:
        dtype = x0_dtype if x0_dtype is not None and jnp.issubdtype(x0_dtype, jnp.floating) else jnp.result_type(float)
    dtype = jnp.dtype(dtype)
    if dtype not in (jnp.dtype("float32"), jnp.dtype("float64")):
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype.name}")
    return dtype


def _save_times(ts, t0: float, t1: float) -> np.ndarray:
    """The save times (default t0 and t1), checked: finite, strictly increasing, inside [t0, t1]."""
    if ts is None:
        ts = np.array([t0, t1])
    ts = np.asarray(ts, dtype=float)
    if ts.ndim != 1 or ts.size < 1 or not np.all(np.isfinite(ts)):
        raise ValueError(f"ts must be a non-empty 1-D array of finite times, got shape {ts.shape}")
    if np.any(np.diff(ts) <= 0):
        raise ValueError("ts must be strictly increasing")
    if ts[0] < t0 - 1e-12 * max(1.0, abs(t0)) or ts[-1] > t1 + 1e-12 * max(1.0, abs(t1)):
        raise ValueError(f"ts must lie in [t0, t1] = [{t0:g}, {t1:g}], got [{ts[0]:g}, {ts[-1]:g}]")
    return ts


def _jump_times(field, t0: float, t1: float) -> np.ndarray:
    """Times in (t0, t1) where a part of the field switches (layer-wise weights), sorted (``Field.jump_times``)."""
    found = np.asarray(field.jump_times(t1, t0), dtype=float).ravel()
    return np.unique(found[(found > t0) & (found < t1)])


def check_steps(
    label: str, t0: float, t1: float, dt: float, steps, max_steps: int, dtype, *, at_least: bool = False
) -> None:
    """Refuse, in one ValueError line, a run of constant step ``dt`` over [t0, t1] whose step vanishes
    against t0 or t1 in ``dtype`` (t + dt == t), or which needs more than ``max_steps`` steps per member.

    steps     the steps per member (an int or float, inf when they overflow); with ``at_least``, a
              lower bound (the command line's preflight, before the save times that split steps exist)
    label     names the method in the message, e.g. "solver 'rk4'"
    """
    real, name = np.dtype(dtype).type, np.dtype(dtype).name
    h = min(float(dt), t1 - t0)  # a run shorter than dt takes one step of its length
    for t in (t0, t1):
        with np.errstate(over="ignore"):
            if not np.isfinite(real(t)):
                raise ValueError(f"t = {t:g} is beyond the range of {name}: use dtype float64")
        if real(t) + real(h) == real(t):
            what = f"dt = {dt:g}" if h == dt else f"the step t1 − t0 = {h:g}"
            remedy = "raise dt" if h == dt else "integrate over a longer interval"
            if name != "float64":
                remedy += " or use dtype float64"
            raise ValueError(
                f"{what} is below the resolution of {name} at t = {t:g} (added to t, it leaves t "
                f"unchanged; the spacing of {name} there is {float(np.spacing(real(t))):.3g}): "
                f"{remedy}"
            )
    limit = min(max_steps, MAX_COUNTED_STEPS)
    if steps <= limit:
        return
    count = (
        f"{int(steps)}"
        if steps <= 10 * limit
        else f"{float(steps):.3g}"
        if math.isfinite(steps)
        else "more than 1.8e+308"
    )
    span = f"{label} with dt = {dt:g} over [{t0:g}, {t1:g}] needs {'at least ' if at_least else ''}{count} steps"
    if max_steps <= MAX_COUNTED_STEPS:
        raise ValueError(f"{span}, more than max_steps = {max_steps}: raise dt, or pass a larger max_steps")
    raise ValueError(f"{span}, more than the {MAX_COUNTED_STEPS} steps a fixed-step run can count: raise dt")


def _identity(t, x, field):
    return x


_WRAPPED: dict = {}


def _with_field(save):
    """The user's save function as f(t, x, field); cached so repeated runs reuse compilations."""
    try:
        return _WRAPPED[save]
    except (KeyError, TypeError):
        pass
    try:
        params = [
            p
            for p in inspect.signature(save).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        takes_field = len(params) >= 3
    except (TypeError, ValueError):
        takes_field = False
    wrapped = save if takes_field else _TwoArgs(save)
    try:
        _WRAPPED[save] = wrapped
    except TypeError:
        pass
    return wrapped


def _measured(save_fn, precision: str):
    """The save function, computed at full precision whatever the run's ``precision``: its statistics
    compare inner products with 1 − δ (δ = 10⁻³), which TF32 or bfloat16 products would not resolve."""
    return save_fn if precision == "float32" else _FullPrecision(save_fn)


class _FullPrecision:
    """``fn`` traced with full float32 matrix products inside a run of lower precision."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, t, x, field):
        with jax.default_matmul_precision(PRECISIONS["float32"]):
            return self.fn(t, x, field)

    def __hash__(self):
        return hash(self.fn)

    def __eq__(self, other):
        return isinstance(other, _FullPrecision) and other.fn == self.fn


class _TwoArgs:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, t, x, field):
        return self.fn(t, x)

    def __hash__(self):
        return hash(self.fn)

    def __eq__(self, other):
        return isinstance(other, _TwoArgs) and other.fn == self.fn
