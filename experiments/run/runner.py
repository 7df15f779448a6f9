"""Run one configuration: an ensemble over d × β × seeds, statistics computed inside the compiled loop.

The members of a run are the Cartesian product of the configuration's ``d`` list, its ``beta``
list and ``seeds`` initial conditions. Members that share d share a compiled, vmapped call
(chunked to the ``memory_gb`` budget); the same seeds give the same initial conditions, and with
``noise`` the same Brownian paths (``fields.brownian_keys``), for every β, so differences across β are
the dynamics', not the sampling's. Nothing a member draws depends on its place among the calls, and
every call runs the time loop chosen for all the members of its d, so the numbers of a run do not
depend on how it is cut (``memory_gb``, progress).
"""

from __future__ import annotations

import functools
import importlib.metadata
import platform
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from dataclasses import field as dc_field

import jax
import jax.numpy as jnp
import numpy as np

from ... import particles
from ...particles import attention_stats, observables
from ...particles.energy import energy, normalized_energy
from ...solvers import MaxStepsError, NonFiniteError, Status, compiler, programs, simulate
from ...solvers.fusion import materialized
from ...solvers.progress import Counter
from ..config import Config
from . import field_config as fields
from . import plan, preflight
from .plan import GROUPS, statistics_groups


@dataclass
class RunResult:
    """Everything one run produced: its configuration, save times, statistics and (maybe) states.

    ``stats[name]`` has shape (len(d), len(beta), seeds, T[, ...]). ``xs``, when the states were kept,
    holds every d's states in one array of shape (len(d), len(beta), seeds, T, n, max d) (dimensions
    ``rundir.STATE_DIMS``), each d's points in its first d coordinates and NaN beyond them; read one d's
    states with :meth:`states`, which drops the padding.
    """

    config: Config
    ts: np.ndarray
    stats: dict[str, np.ndarray]
    xs: np.ndarray | None
    steps: np.ndarray
    t_event: np.ndarray
    wall_time_s: float
    extra: dict = dc_field(default_factory=dict)
    compilations: dict | None = None  # ``solvers.compilations.Compilations.summary()`` of the run, where recorded

    @classmethod
    def of_statistics(
        cls, config: Config, stats: dict, extra: dict, *, start: float, members=(1, 1, 1), ts=None
    ) -> RunResult:
        """The result of a runner that computes statistics alone (no states, no steps to count): ``members`` the
        (d, β, seed) shape its statistics carry, save times ``ts`` (one at 0 by default), timed from ``start``
        (a ``time.perf_counter()`` reading)."""
        return cls(
            config=config,
            ts=np.zeros(1) if ts is None else np.asarray(ts),
            stats=stats,
            xs=None,
            steps=np.zeros(members, dtype=np.int64),
            t_event=np.full(members, np.inf),
            wall_time_s=time.perf_counter() - start,
            extra=extra,
        )

    @property
    def member_shape(self) -> tuple[int, int, int]:
        return self.steps.shape

    def member(self, name: str) -> np.ndarray:
        """A statistic flattened to (members, T, ...), members ordered (d, β, seed)."""
        a = self.stats[name]
        return a.reshape((-1,) + a.shape[3:])

    @property
    def has_states(self) -> bool:
        """Whether the run kept its states (``save_states``; ``plan.keep_states``)."""
        return self.xs is not None

    def states(self, d: int | None = None) -> np.ndarray:
        """The states of the members of dimension ``d``, shape (len(beta), seeds, T, n, d): points of S^{d−1}.

        ``d`` may be left out when the run has a single d. ValueError when the run kept no states or
        ``d`` is not one of its dimensions.
        """
        dims = [int(v) for v in self.config.d]
        if d is None:
            if len(dims) > 1:
                raise ValueError(f"this run has several dimensions d = {dims}: name the one whose states you want")
            d = dims[0]
        if d not in dims:
            raise ValueError(f"d = {d} is not a dimension of this run; choose one of {dims}")
        if self.xs is None:
            raise ValueError(f"this run kept no states (save_states = {self.config.save_states!r})")
        return self.xs[dims.index(d), ..., :d]

    def beta_slice(self, sl: slice, config: Config) -> RunResult:
        """The members whose β lies in ``sl`` (an index range of the β list) as the run of ``config``,
        the wall time shared in proportion (a sweep's grid point cut from a merged run)."""
        share = len(range(*sl.indices(self.steps.shape[1]))) / self.steps.shape[1]
        return RunResult(
            config=config,
            ts=self.ts,
            stats={k: v[:, sl] for k, v in self.stats.items()},
            xs=None if self.xs is None else self.xs[:, sl],
            steps=self.steps[:, sl],
            t_event=self.t_event[:, sl],
            wall_time_s=self.wall_time_s * share,
            compilations=self.compilations,  # those of the ensemble the grid point ran in
        )


def save_times(config: Config) -> np.ndarray:
    """The save times: ``save_times`` if given, else ``n_save`` points on a linear or log grid."""
    if config.save_times:
        return np.asarray(config.save_times, dtype=float)
    t1, n_save = config.t1, config.n_save
    if config.save_spacing == "log" and t1 > 0:
        return np.concatenate([[0.0], np.geomspace(t1 * 10.0**-config.log_decades, t1, n_save - 1)])
    return np.linspace(0.0, t1, n_save)


def build_field(config: Config, beta, seeds=None, d: int | None = None):
    """The vector field of ``config`` for members with inverse temperatures ``beta`` and ``seeds``."""
    seeds = np.full(np.shape(beta), config.seed) if seeds is None else np.asarray(seeds)
    return fields.build_field(config, beta, seeds, config.d[0] if d is None else d)


def initial_conditions(config: Config, d: int) -> jnp.ndarray:
    """The ``seeds`` initial configurations (seeds, n, d) of a run; member s is drawn from seed ``seed + s``.

    So the member labelled seed s in results is exactly the run ``--set seed=s --set seeds=1``.
    """
    n, seeds, dtype = config.n, config.seeds, config.dtype
    init = config.init
    if init == "angles":
        theta = np.asarray(config.angles, dtype=float)
        points = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
        return jnp.broadcast_to(jnp.asarray(points, dtype=dtype), (seeds, n, 2))
    if init == "file":
        x = particles.init.from_array(config.init_file, dtype=dtype)
        if x.shape[-1] != d or x.shape[-2] != n:
            raise ValueError(
                f"init_file {config.init_file!r} holds shape {tuple(x.shape)}, but the run has n = {n}, d = {d}"
            )
        if x.ndim == 3 and x.shape[0] != seeds:
            raise ValueError(f"init_file {config.init_file!r} holds {x.shape[0]} configurations but seeds = {seeds}")
        return jnp.broadcast_to(x, (seeds, n, d))
    if init not in SAMPLERS:
        raise ValueError(f"unknown init {init!r}")
    # the parameters of the chosen sampler alone: the others' keys do not change the program
    params = tuple((name, config[name]) for name in SAMPLER_KEYS.get(init, ()))
    return _draw(
        config.seed + np.arange(seeds),
        init=init,
        n=n,
        d=d,
        dtype=dtype,
        params=params,
        compiler_options=compiler.sampler_options(),
    )


SAMPLERS: dict[str, Callable[..., jax.Array]] = {
    "uniform": lambda k, n, d, dtype: particles.init.uniform(k, n, d, dtype=dtype),
    "orthogonal": lambda k, n, d, dtype: particles.init.orthogonal(k, n, d, dtype=dtype),
    "equiangular": lambda k, n, d, dtype, rho: particles.init.equiangular(k, n, d, rho, dtype=dtype),
    "cap": lambda k, n, d, dtype, cap_angle: particles.init.cap(k, n, d, cap_angle, dtype=dtype),
    "clusters": lambda k, n, d, dtype, n_init_clusters, spread: particles.init.clusters(
        k, n, d, n_init_clusters, spread, dtype=dtype
    ),
}
"""The samplers of ``init``: (key, n, d, dtype, their own keys' values) → (n, d) points."""

SAMPLER_KEYS = {"equiangular": ("rho",), "cap": ("cap_angle",), "clusters": ("n_init_clusters", "spread")}
"""The configuration keys each sampler reads beyond n, d and dtype."""


@programs.jit
def _draw(seeds, *, init: str, n: int, d: int, dtype: str, params: tuple):
    """The initial configurations of ``seeds`` (an integer array): one compiled program, kept on disk with the
    compilation cache (``solvers/programs.py``), so that a warm run does not trace the samplers again."""
    keys = jax.vmap(jax.random.key)(seeds)
    return jax.vmap(lambda k: SAMPLERS[init](k, n, d, dtype, *(value for _, value in params)))(keys)


def span_initial_conditions(config: Config, d: int, frames: bool = False):
    """The ``seeds`` initial configurations as coordinates in the span of their tokens: (y, U), x = y Uᵀ.

    y has shape (seeds, n, n); U (seeds, d, n) holds orthonormal frames, or is None when ``frames`` is
    False and the configurations are drawn in reduced form. ``init = "uniform"`` draws y directly
    (``particles.span.uniform``: the Bartlett decomposition, O(n²) per member whatever d) and, with
    ``frames``, U Haar-distributed and independent of y, so x = y Uᵀ has exactly the law of
    ``initial_conditions`` (not the same points: member s draws both from seed + s). Every other init
    reduces the configurations of ``initial_conditions`` by QR (``particles.span.span_basis``).
    """
    n, seeds, dtype = config.n, config.seeds, config.dtype
    if config.init != "uniform":
        U, y = particles.span.span_basis(initial_conditions(config, d))
        return y, U
    if d < n:  # span_reduction reduces only d ≥ n
        raise ValueError(f"uniform configurations in the span need d ≥ n, got n = {n}, d = {d}")
    member_seeds = config.seed + np.arange(seeds)
    options = compiler.sampler_options()
    y = _draw_span_rows(member_seeds, np.int64(d), n=n, dtype=dtype, compiler_options=options)
    U = _draw_span_frames(member_seeds, d=d, n=n, dtype=dtype, compiler_options=options) if frames else None
    return y, U


@programs.jit
def _draw_span_rows(seeds, d, *, n: int, dtype: str):
    """The reduced uniform configurations (seeds, n, n) of ``seeds`` at dimension ``d``, a program argument: one
    compiled program for every d ≥ n of a run (the span rows of the phase diagram share it)."""
    keys = jax.vmap(jax.random.split)(jax.vmap(jax.random.key)(seeds))
    return jax.vmap(lambda k: particles.span.bartlett_rows(k, n, d))(keys[:, 0]).astype(dtype)


@programs.jit
def _draw_span_frames(seeds, *, d: int, n: int, dtype: str):
    """The Haar frames (seeds, d, n) of ``seeds``, independent of their rows (the second key of each seed's split)."""
    keys = jax.vmap(jax.random.split)(jax.vmap(jax.random.key)(seeds))
    return jax.vmap(lambda k: particles.span.haar_frame(k, d, n, dtype=dtype))(keys[:, 1])


def _in_span(field, frames, r: int):
    """``field`` on the coordinates of the span: with the members' ``frames``, or for any frame (None)."""
    reduced = field.in_span(r if frames is None else frames)
    if reduced is None:  # span_reduction asked a field of the same run
        raise RuntimeError(f"{type(field).__name__} does not reduce to the span of the tokens for every member")
    return reduced


@functools.cache
def statistics(
    delta: float,
    bins: int,
    keep_states: bool = False,
    groups: tuple[str, ...] = ("pairs", "clusters", "energy"),
    keep_attention: bool = False,
):
    """The on-the-fly statistics of a run (one cached function per (δ, bins, groups), so runs reuse compilations).

    Per member and save time, by group: "pairs": mean/min/max of ⟨x_i,x_j⟩ over i ≠ j and the
    fraction of pairs with ⟨x_i,x_j⟩ ≥ 1 − δ; "clustered": that fraction alone; "clusters": the
    number of clusters at threshold δ and Σ_q m_q²/n² over their sizes; "energy": E_β, its normalized form and the log-energy of
    the field's kernel; "attention": the spectral gap 1 − |λ₂|, the stationary distribution (n
    values), the mean row entropy and the mean effective number of attended tokens of the
    attention matrix A(t) (``particles.attention_stats``), and with ``keep_attention`` A(t) itself.
    With ``bins`` > 0, the histogram of pairwise inner products; with
    ``keep_states`` the configuration itself. The pair statistics share one pass over the pairs
    (``observables.pair_summary``).
    """
    groups = tuple(groups)

    def stats(t, x, field):
        if "attention" in groups:
            # the matrix the field itself forms, from the tokens as it sees them (angles, norms off the sphere)
            A = attention_stats.attention_matrix(field, x, t)
            out = attention_stats.attention_summary(A)
            if keep_attention:
                out["attention_matrix"] = A
        else:
            out = {}
        in_angles = field.in_angles  # also Coalesced(Circle)
        if "clustered" in groups and not {"pairs", "clusters"} & set(groups) and in_angles:
            # from the angles themselves: no sine and cosine per particle and save
            out["clustered_fraction"] = observables.clustered_fraction_of_angles(materialized(t, x), delta)
            if not ({"energy"} & set(groups) or bins or keep_states):
                return out  # nothing reads the points
        # tokens off the sphere (Pre-LN, no layer norm, angles) are measured and kept by direction
        # read n × n times by the pair statistics: written first (``solvers.fusion``)
        x = materialized(t, field.directions(x))
        if "pairs" in groups or "clusters" in groups:
            summary = observables.pair_summary(x, delta, clusters="clusters" in groups)
            out.update({k: v for k, v in summary.items() if any(k in GROUPS[g] for g in groups)})
        if "clustered" in groups and "clustered_fraction" not in out:
            out["clustered_fraction"] = observables.clustered_fraction(x, delta)
        if "energy" in groups:
            beta = jnp.nan if field.temperature is None else field.temperature  # β through wrappers
            out["normalized_energy"] = normalized_energy(x, beta)
            out["energy"] = energy(x, beta)
            logits = field.kernel_logits(x)
            if logits is not None:
                # log E = log Σ_ij e^{β⟨Qx_i,Kx_j⟩} − log(2βn²): the energy of the field's own kernel, never
                # overflowing; it increases along SA when QᵀK is symmetric and V = QᵀK ([GLPR] §3)
                # (NaN for β ≤ 0: E_β is then not positive)
                out["log_energy"] = jnp.where(
                    beta > 0,
                    jax.scipy.special.logsumexp(logits) - jnp.log(2.0 * jnp.maximum(beta, 1e-300) * x.shape[0] ** 2),
                    jnp.nan,
                )
        if bins:
            out["histogram"] = observables.inner_product_histogram(x, bins)
        if keep_states:
            out["states"] = x
        return out

    return stats


def run(config: Config, *, progress: bool | None = None, needs: Iterable[str] = (), checked: bool = False) -> RunResult:
    """Simulate every member of ``config`` and return its statistics (and states when small).

    ``needs``: groups of statistics computed whatever the ``statistics`` key says (those its
    experiment's figures and checks read; ``plan.statistics_groups``). ``checked``: ``preflight.check``
    has passed already (``Experiment.execute`` runs it with the experiment's own values).
    """
    needs = tuple(needs)
    if not checked:  # the keys it reads, its files and its memory, before anything is computed
        preflight.check(config, needs=lambda c: needs)
    show = config.progress if progress is None else progress
    ts = save_times(config)
    betas = np.asarray(config.beta, dtype=float)
    nb, seeds, nd = len(betas), config.seeds, len(config.d)
    members_per_d = nb * seeds
    keep = plan.keep_states(config, members_per_d, len(ts))
    groups = statistics_groups(config, needs)
    stats_fn = statistics(
        float(config.delta),
        int(config.histogram_bins),
        keep,
        groups,
        keep_attention="attention" in groups and plan.keep_attention(config, members_per_d, len(ts)),
    )
    start = time.perf_counter()

    # every d's states written in place into one array padded with NaN to the largest d, allocated at
    # the first chunk (its dtype the solver's): never a second copy of the trajectories
    per_d_stats, states, steps, events = [], None, [], []
    max_d = max(config.d)
    failed = []  # (d, member within d, time it stopped, cause, Status) of members that stopped short
    # an ensemble of several compiled calls reports the members done between them; one call reports the time its
    # members reached between the calls of about a second its loop runs in (``loop.segments``, ``loop.bounded``):
    # no program holds a callback, so all stay in the compilation cache and the stored programs, and progress
    # never changes how the members are cut
    chunks = {d: plan.chunk_size(config, d, members_per_d, len(ts), keep, groups) for d in config.d}
    calls = sum(-(-members_per_d // chunks[d]) for d in config.d)
    meter = Counter(nd * members_per_d, label="simulate").__enter__() if show and calls > 1 else None
    for which, d in enumerate(config.d):
        reduction = fields.span_reduction(config, d)
        if reduction is None:
            x0, frames = initial_conditions(config, d), None  # (seeds, n, d)
        else:
            # (seeds, n, n) coordinates; frames (seeds, d, n) where the field or the saved states need them
            x0, frames = span_initial_conditions(config, d, frames=reduction == "frame" or keep)
            if show:  # over a progress bar's unfinished line, if one is drawn
                note = f"d={d}: simulated in the {x0.shape[-1]}-dimensional span of the tokens (exact for this field)"
                print(f"\r{note:<80}", file=sys.stderr)
        if fields.in_angles(config, d):
            x0 = particles.to_angles(x0)  # the field moves angles; statistics see their points on the circle
        # on the host: each call's members are gathered by NumPy, not by a small program compiled per shape
        x0_host, frames = np.asarray(x0), None if frames is None else np.asarray(frames)
        beta_members = np.repeat(betas, seeds)
        seed_members = np.tile(config.seed + np.arange(seeds), nb)
        # member m starts from seed m mod seeds; gathered per chunk, never tiled over the β grid
        chunk = chunks[d]
        pieces = []
        for lo in range(0, members_per_d, chunk):
            hi = min(lo + chunk, members_per_d)
            # pad the last chunk to the common size so it reuses the compiled call
            idx = np.minimum(np.arange(lo, lo + chunk), members_per_d - 1)
            field = build_field(config, jnp.asarray(beta_members[idx]), seed_members[idx], d)
            if reduction == "any frame":
                field = _in_span(field, None, config.n)
            elif reduction is not None:
                assert frames is not None, "span_initial_conditions draws the frames of a reduction in them"
                field = _in_span(field, frames[idx % seeds], config.n)
            label = f"d={d}" if nd > 1 else "simulate"
            if members_per_d > chunk:
                label += f" [{lo // chunk + 1}/{-(-members_per_d // chunk)}]"
            # Brownian paths of noisy runs: each member's from its seed, never from its place in the call
            key = fields.brownian_keys(seed_members[idx]) if config.noise > 0 else None
            arguments = fields.simulate_arguments(
                config, ts, progress=label if show and meter is None else False, key=key
            )
            try:
                # every call runs the time loop chosen for all the members of d (progress never changes it)
                sol = simulate(
                    field,
                    x0_host[idx % seeds],
                    config.t1,
                    save=stats_fn,
                    save_reads_time="attention" in groups,
                    ensemble=members_per_d,
                    **arguments,
                )
            except (NonFiniteError, MaxStepsError) as err:
                # the other members go on; the error is raised with every member's statistics at the end
                sol = err.solution
                status, t_stop = np.atleast_1d(sol.status)[: hi - lo], np.atleast_1d(sol.t_stop)
                failed += [(d, lo + m, float(t_stop[m]), err.cause, status[m]) for m in np.flatnonzero(status)]
            piece = {k: np.asarray(v)[: hi - lo] for k, v in sol.stats.items()}
            if frames is not None and "states" in piece:  # statistics were computed from y; states go back to R^d
                piece["states"] = np.asarray(particles.span.to_ambient(piece["states"], frames[idx[: hi - lo] % seeds]))
            if "states" in piece:
                x = piece.pop("states")
                if states is None:
                    states = np.full((nd, nb, seeds, len(ts), config.n, max_d), np.nan, dtype=x.dtype)
                members = np.arange(lo, hi)  # in (β, seed) order
                states[which, members // seeds, members % seeds, ..., :d] = x
            if meter is not None:
                meter.advance(hi - lo, f"d={d}" if nd > 1 else "simulate")
            pieces.append((piece, np.asarray(sol.steps)[: hi - lo], np.asarray(sol.t_event)[: hi - lo]))
        merged = {k: np.concatenate([p[0][k] for p in pieces]) for k in pieces[0][0]}
        merged = {k: v.reshape((nb, seeds) + v.shape[1:]) for k, v in merged.items()}
        per_d_stats.append(merged)
        steps.append(np.concatenate([p[1] for p in pieces]).reshape(nb, seeds))
        events.append(np.concatenate([p[2] for p in pieces]).reshape(nb, seeds))
    if meter is not None:
        meter.__exit__(None, None, None)
    stats = {k: np.stack([s[k] for s in per_d_stats]) for k in per_d_stats[0]}
    result = RunResult(
        config=config,
        ts=ts,
        stats=stats,
        xs=states,
        steps=np.stack(steps),
        t_event=np.stack(events),
        wall_time_s=time.perf_counter() - start,
    )
    if failed:
        raise _stopped_short(result, failed)
    return result


def _stopped_short(result: RunResult, failed: list) -> NonFiniteError | MaxStepsError:
    """The error of a run whose ``failed`` members (d, member within d, t, cause, status) stopped short:
    a NonFiniteError naming those that became non-finite if any did, else a MaxStepsError."""
    bad = [f for f in failed if f[4] == Status.NON_FINITE]
    failed, error = (bad, NonFiniteError) if bad else (failed, MaxStepsError)
    seeds, seed0 = result.config.seeds, result.config.seed
    betas = np.asarray(result.config.beta, dtype=float)
    members = [(f[0], float(betas[f[1] // seeds]), seed0 + f[1] % seeds) for f in failed]
    (d, beta, seed), t, cause = members[0], failed[0][2], failed[0][3]
    others = f" (and {len(failed) - 1} other member{'s' if len(failed) > 2 else ''})" if len(failed) > 1 else ""
    what = (
        f"became non-finite after t = {t:.6g} (its last finite state)"
        if bad
        else f"stopped at t = {t:.6g} before t1 = {result.config.t1:g} (max_steps = {result.config.max_steps})"
    )
    return error(
        f"run: the member d = {d}, β = {beta:g}, seed = {seed}{others} {what}; {cause}",
        member=members[0],
        t=t,
        members=members,
        times=[f[2] for f in failed],
        cause=cause,
        result=result,
    )


STAT_DIMS = ("d", "beta", "seed", "time")
# the trailing dimensions of statistics with more than one value per member and time
EXTRA_DIMS = {
    "histogram": ["bin"],
    "stationary_distribution": ["particle"],
    "attention_matrix": ["particle", "attended"],
}


class StatDimensions(dict[str, list[str]]):
    """Statistic name → all its dimensions, for statistics that are not (d, beta, seed, time, ...), registered by
    the experiments that save them. One name has one layout: registering a name again with other dimensions is
    an error (two experiments saving different arrays under one name would write each other's layout)."""

    def __setitem__(self, name: str, dims: list[str]) -> None:
        if name in self and list(self[name]) != list(dims):
            raise ValueError(f"statistic {name!r} is registered with dimensions {self[name]}; got {list(dims)}")
        super().__setitem__(name, list(dims))

    def update(self, *args, **kwargs) -> None:
        for name, dims in dict(*args, **kwargs).items():
            self[name] = dims


STAT_DIMENSIONS = StatDimensions()


def versions() -> dict[str, str]:
    """Versions of attnflow and of what it runs on, recorded in every summary."""
    out = {"python": platform.python_version()}
    for dist in ("attnflow", "jax", "jaxlib", "diffrax", "equinox", "numpy"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "unknown"
    out["device"] = str(jax.devices()[0].platform)
    return out


def t_clustered(result: RunResult) -> np.ndarray:
    """Per member (d, β, seed order): the first save time at which every pair is within δ, NaN if never
    (NaN throughout when the run saved neither the "pairs" nor the "clustered" statistics)."""
    if "min_inner_product" in result.stats:
        together = result.member("min_inner_product") >= 1.0 - result.config.delta
    elif "clustered_fraction" in result.stats:
        # every pair within δ: the count of close pairs is n(n − 1), the fraction exactly 1
        together = result.member("clustered_fraction") >= 1.0
    else:
        return np.full(result.steps.size, np.nan)
    first = np.argmax(together, axis=1)
    return np.where(together.any(axis=1), result.ts[first], np.nan)
