"""What every time loop shares: the members' bookkeeping, the consensus test, the saves, progress.

``simulate`` runs an ensemble through one of four loops: fixed steps between save times
(``fixed_loop``), steps on a uniform grid with interpolated saves (``dense``), diffrax's adaptive
solve vmapped over the members (``adaptive_loop``), and the adaptive queue (``queue``). Each keeps
only its stepping; what they all do to the members is here, once:

* ``Members``: which members still run, when one stopped at consensus (``stop_when_clustered``),
  when one last had a finite state, and how many steps each took; ``start`` and ``step_taken``
  (a member whose step is not finite is frozen at its last finite state, a member found clustered
  stops; both keep their state from then on);
* ``consensus``: the test of one cluster at threshold δ, on the tokens' directions;
* ``saves``: the save function vmapped over the members; ``hold_after``: saves past a member's end
  hold its final values; ``statistics_of``: the save function over states saved by the loop;
* ``report``: progress from inside a compiled loop (a host callback, only where progress is on and the loop runs
  in one call: on several devices, or under the caller's trace);
* ``segments``, ``intervals``, ``buffer``, ``members_like``: a fixed-step or grid run cut into calls of bounded
  wall time (about ``SEGMENT_S``), each over a range [k0, k1) of save intervals given as data (one program),
  with progress and interrupts between them and the same numbers as one call; ``bounded``: the same for a while
  loop whose length is not known in advance (the adaptive queue, diffrax's solves), cut by its iterations; ``wait``: a compiled
  call waited for without holding up Ctrl-C;
* ``fixed_trips``, ``steps_while``, ``where_moved``: the loops' shape on each backend (below);
* ``MemberParts``: a field's per-member leaves taken in another order (groups, the queue's slots);
* ``Status``: how a member's solve ended, the one code every loop returns per member (``status_of``
  for the fixed-step loops), which ``Solution.status`` holds.

Every loop returns (saves, final states, steps, event times, stop times, statuses): a member's stop
time is where it stopped short (its last finite state, or the time an adaptive solve reached at
``max_steps``), inf for a member that reached t1 or its event.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..particles.sphere import within
from . import compilations, machine
from . import progress as _progress

STATES_AFTER_LOOP_BYTES = 64 * 2**20
"""Adaptive solves whose states at all save times take at most this many bytes keep them and
compute the statistics afterwards, vectorized over members and times."""


def fixed_trips(traced: bool) -> bool:
    """Whether the fixed-step loops run loops of static length (their extra steps skipped) instead of while loops
    that end once no member runs: under the caller's trace (reverse-mode differentiation needs them), and on
    accelerators, where a while loop's condition and a conditional's predicate are read back by the host at
    every step (a round trip of tens of microseconds, more than a small ensemble's step costs there)."""
    return traced or machine.accelerated()


def steps_while(go: Callable, step: Callable, state, most: int | None, select: bool):
    """``step`` applied while ``go(state)``: a while loop (``most`` None), or ``most`` iterations each taking the
    step where ``go`` holds; with ``select`` the step is computed and selected (no conditional: the accelerators'
    form), else by ``jax.lax.cond`` (one branch runs: the form reverse mode goes through cheaply). The same steps
    are taken in every form, so the results are the same bits."""
    if most is None:
        return jax.lax.while_loop(go, step, state)
    if select:

        def body(_, s):
            taken = step(s)
            keep = go(s)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), taken, s)

        return jax.lax.fori_loop(0, most, body, state)
    return jax.lax.fori_loop(0, most, lambda _, s: jax.lax.cond(go(s), step, lambda s: s, s), state)


def where_moved(moved, values: Callable, last, *args, select: bool):
    """``values(*args)`` if ``moved`` else ``last``: by ``jax.lax.cond`` (one branch runs) or, with ``select``, both
    evaluated and selected (the accelerators' form, as in ``steps_while``)."""
    if select:
        out = values(*args)
        return jax.tree_util.tree_map(lambda a, b: jnp.where(moved, a, b), out, last)
    return jax.lax.cond(moved, values, lambda *a: last, *args)


class Status(enum.IntEnum):
    """How a member's solve ended (int8 per member, ``Solution.status``); only DONE reached its end.

    DONE        reached t1, or stopped at consensus
    MAX_STEPS   an adaptive solve took ``max_steps`` attempts before t1 (fixed-step runs are refused
                before they start instead)
    FAILED      an adaptive solve's step size underflowed, or its solver failed otherwise
    NON_FINITE  the state became NaN or infinite: frozen at its last finite state
    """

    DONE = 0
    MAX_STEPS = 1
    FAILED = 2
    NON_FINITE = 3


class Members(NamedTuple):
    """Per member of a fixed-step loop: running or not, and why it stopped.

    active   still stepping
    t_event  when it was found clustered (inf: never)
    t_fail   the time of its last finite state, where a step became non-finite (inf: never)
    steps    steps taken
    """

    active: jax.Array
    t_event: jax.Array
    t_fail: jax.Array
    steps: jax.Array


# a segmented run's carry holds the members' bookkeeping, and the stored programs (``programs.py``) serialize it
jax.export.register_namedtuple_serialization(Members, serialized_name="attnflow.solvers.loop.Members")


def status_of(m: Members) -> jax.Array:
    """Per member of a fixed-step loop, its ``Status``: NON_FINITE where a step was not finite, else DONE."""
    return jnp.where(jnp.isfinite(m.t_fail), Status.NON_FINITE, Status.DONE).astype(jnp.int8)


def consensus(axes, delta) -> Callable:
    """(field, x) ↦ per member, whether every pair of its tokens' directions is within δ (vmapped).

    On the directions: a field may move other coordinates (``Circle``: angles)."""
    return jax.vmap(lambda f, x: within(f.directions(x), delta), in_axes=(axes, 0))


def start(field, axes, x0, delta, t0) -> Members:
    """Every member running, except, with δ, those clustered already (their event at t0)."""
    members, dtype = x0.shape[0], x0.dtype
    if delta is None:
        active = jnp.ones(members, bool)
        t_event = jnp.full(members, jnp.inf, dtype)
    else:
        active = ~consensus(axes, delta)(field, x0)
        t_event = jnp.where(active, jnp.inf, t0).astype(dtype)
    return Members(active, t_event, jnp.full(members, jnp.inf, dtype), jnp.zeros(members, jnp.int32))


def _rows(mask, a):
    """``mask`` (members,) broadcast against a (members, ...) array."""
    return mask.reshape(mask.shape + (1,) * (a.ndim - 1))


def step_taken(m: Members, t, t_next, ok, new, old, clustered: Callable | None = None):
    """The members after a step from t to t_next whose results are finite where ``ok``.

    new, old   pytrees of (members, ...) arrays: the step's results and what a member that does
               not move keeps (its state at t, say)
    clustered  ``kept`` ↦ per member, whether it is one cluster (``consensus``), or None (no stop)

    Returns (members, kept): a member whose step is not finite stops with its last finite time t;
    kept holds ``new`` where a member moved, ``old`` elsewhere; a member that moved and is then
    clustered stops with its event at t_next.
    """
    t_fail = jnp.where(m.active & ~ok, t, m.t_fail)
    active = m.active & ok
    kept = jax.tree_util.tree_map(lambda a, b: jnp.where(_rows(active, a), a, b), new, old)
    steps = m.steps + active
    t_event = m.t_event
    if clustered is not None:
        hit = active & clustered(kept)
        t_event = jnp.where(hit, t_next, t_event)
        active = active & ~hit
    return Members(active, t_event, t_fail, steps), kept


def saves(save_fn, axes) -> Callable:
    """(field, t, x) ↦ ``save_fn(t, x_m, field_m)`` for every member m (t shared)."""
    return jax.vmap(lambda f, t, x: save_fn(t, x, f), in_axes=(axes, None, 0))


def report(progress: bool, t) -> None:
    """Tell the active progress display that every member reached t (nothing when progress is off)."""
    if progress:
        jax.debug.callback(_progress.report, -1, t)


SEGMENT_S = 1.0
"""The wall time a call of a segmented fixed-step or grid run aims at (``segments``): progress is reported, and
Ctrl-C or SIGTERM honoured, between calls, so within about this long."""

RATES: dict[Hashable, float] = {}
"""Seconds per unit of work (a step, or an iteration of a loop of static length) of each segmented program, by its
key (``segments``), as last measured in this process: a run's calls are sized from it, so that only the first
run of a program probes."""


def next_end(work: np.ndarray, k0: int, rate: float | None, target: float) -> int:
    """The end k1 > k0 of the next call over intervals k0 ≤ k < k1, whose work ends at ``work[k]`` (cumulative):
    one interval while the rate is unknown (a probe), else the most intervals whose work takes at most
    ``target`` seconds at ``rate``, at least one, all the rest when they fit."""
    if rate is None:
        return k0 + 1
    base = work[k0 - 1] if k0 > 0 else 0
    budget = base + target / max(rate, 1e-12)
    return max(k0 + 1, int(np.searchsorted(work, budget, side="right")))


def segments(call: Callable, carry, work, *, key: Hashable, at: Callable[[int], float], progress: bool = False):
    """(``carry``, the last call's ``ends``) after intervals 0 ≤ k < len(``work``) of a time loop, run as
    ``call(carry, k0, k1) -> (carry, ends)`` over segments [k0, k1) of about ``SEGMENT_S`` seconds each.

    ``work[k]`` is the work (steps) done by the end of interval k; the seconds per unit of work are kept in
    ``RATES[key]`` across calls and runs, so that a run whose rate is known goes in segments sized from it (in one
    call when it all fits), and only a program's first run probes with a first segment of one interval. A call
    that compiled (its first) teaches nothing. k0 and k1 go in as arrays, so that every segment runs the same
    compiled program; each call is waited for (``wait``), so that Python, and with it an interrupt
    (KeyboardInterrupt, the command line's SIGTERM), gets its turn during and between them; with ``progress``
    each segment's end ``at(k1)`` is reported (``progress.report``) from here, not from inside the program."""
    work = np.asarray(work, dtype=float)
    total, k0, ends = len(work), 0, None
    carry = _committed(carry)
    while k0 < total:
        rate = RATES.get(key)
        k1 = min(total, next_end(work, k0, rate, SEGMENT_S))
        (carry, ends), wall, compiled = _timed(call, carry, np.asarray(k0, np.int32), np.asarray(k1, np.int32))
        units = work[k1 - 1] - (work[k0 - 1] if k0 > 0 else 0.0)
        if not compiled and units > 0:
            RATES[key] = wall / units
        if progress:
            _progress.report(-1, at(k1))
        k0 = k1
    return carry, ends


PROBE_ITERATIONS = 16
"""The iterations of a bounded loop's probe (``bounded``): its call after the one that compiled, while its rate is
unknown."""


def bounded(call: Callable, carry, *, key: Hashable, report: Callable[[Any], None] | None = None):
    """The results of a while loop run as ``call(carry, first, budget) -> (carry, (more, done, count), results)``
    in calls of at most ``budget`` iterations each, about ``SEGMENT_S`` seconds, until ``more`` is false: the last
    call's ``results``.

    As ``segments``, for loops whose work is not known in advance (the adaptive queue's, diffrax's solves resumed
    from call to call): ``first`` is true in the first call only (the program replaces ``carry`` by the loop's
    start), ``done`` is the iterations the call ran, and the seconds per iteration are kept in ``RATES[key]``. While
    the rate is unknown a call runs ``PROBE_ITERATIONS``; the call that compiled teaches nothing. ``report(count)``
    is called after every call with the program's ``count`` (the members finished, the time reached)."""
    carry, first = _committed(carry), True
    while True:
        rate = RATES.get(key)
        budget = PROBE_ITERATIONS if rate is None else max(1, int(SEGMENT_S / max(rate, 1e-12)))
        (carry, (more, done, count), results), wall, compiled = _timed(
            call, carry, np.asarray(first), np.asarray(min(budget, 2**31 - 1), np.int32)
        )
        first = False
        if not compiled and int(done) > 0:
            RATES[key] = wall / int(done)
        if report is not None:
            report(count)
        if not bool(more):
            return results


def _committed(carry: Any) -> Any:
    """``carry`` committed to the device, as every later call's carry (the last call's output) is: uncommitted
    arrays in the first call only would change the arguments' placement, and compile it twice."""
    return jax.device_put(carry, jax.config.jax_default_device or jax.devices()[0])  # type: ignore[attr-defined]


def _timed(call: Callable, *args):
    """(``call(*args)``, waited for, its wall time in seconds, whether it compiled a program)."""
    with compilations.record() as compiled:
        began = time.perf_counter()
        out = wait(call(*args))
        wall = time.perf_counter() - began
    return out, wall, bool(compiled.items)


WAIT_S = 0.005
"""The longest pause between two looks of ``wait`` at a running call (the first looks come sooner): at most this long
is lost after a call ends, and an interrupt is raised within it."""


def wait(tree):
    """``tree`` once its arrays are computed, waited for so that the main thread keeps handling signals: JAX
    dispatches a compiled call and returns, and ``jax.block_until_ready`` holds the interpreter until the call
    ends, so Ctrl-C would wait for it. Here the arrays are looked at (``jax.Array.is_ready``) with pauses growing
    from 0.1 ms to ``WAIT_S``, during which an interrupt is raised at once; the call then goes on in the background
    until it ends (the process's exit does not wait for it)."""
    leaves = [a for a in jax.tree_util.tree_leaves(tree) if isinstance(a, jax.Array)]
    pause = 1e-4
    while not all(a.is_ready() for a in leaves):
        time.sleep(pause)
        pause = min(2 * pause, WAIT_S)
    return jax.block_until_ready(tree)  # raises what the call raised


def members_like(x0) -> Members:
    """A placeholder of ``Members``' shapes and dtypes for ``x0``'s members (host zeros, replaced by ``start``)."""
    m, dtype = x0.shape[0], x0.dtype
    zeros = [np.zeros(m, bool), np.zeros(m, dtype), np.zeros(m, dtype), np.zeros(m, np.int32)]
    return Members(*zeros)  # type: ignore[arg-type]  # host placeholders of the arrays ``start`` makes


def buffer(one, n_saves: int):
    """Host zeros for ``n_saves`` saves of shapes ``one`` (leaves (members, ...) → (members, n_saves, ...))."""
    return jax.tree_util.tree_map(lambda a: np.zeros((a.shape[0], n_saves) + tuple(a.shape[1:]), a.dtype), one)


def like(tree, template):
    """``tree`` with each leaf in its ``template`` leaf's dtype, never weakly typed: a segment's carry goes out as
    it came in, so that the next call runs the same program."""
    return jax.tree_util.tree_map(lambda a, b: jax.lax.convert_element_type(a, b.dtype), tree, template)


def started(k0, start: Callable, state):
    """``start()`` (the run's state at t0, in ``state``'s dtypes) for the call that begins the run (k0 = 0), else
    ``state``: the start is part of the segments' one program."""
    return jax.lax.cond(k0 == 0, lambda s: like(start(), s), lambda s: s, state)


def intervals(advance: Callable, state, saved, k0, k1):
    """(state, saved) after ``advance(state, k) -> (state, values)`` for k0 ≤ k < k1, the values of k < T written
    at save k of ``saved`` (leaves (members, T, ...)); those of later k (a run's stretch after its last save) are
    dropped."""
    n_saves = jax.tree_util.tree_leaves(saved)[0].shape[1]

    def write(b, v, k):
        at = jnp.minimum(k, n_saves - 1)
        held = jax.lax.dynamic_index_in_dim(b, at, 1, keepdims=False)
        return jax.lax.dynamic_update_index_in_dim(b, jnp.where(k < n_saves, v.astype(b.dtype), held), at, 1)

    def one(k, c):
        state, saved = c
        state, values = advance(state, k)
        return state, jax.tree_util.tree_map(lambda b, v: write(b, v, k), saved, values)

    return jax.lax.fori_loop(k0, k1, one, (state, saved))


def hold_after(ts, t_end, saved, held):
    """Saves at times after a member's end hold its final values.

    ts (T,); t_end (...,) per member (a scalar for one member); saved: leaves (..., T, ...);
    held: leaves (..., ...), the values at the end."""
    late = ts > jnp.expand_dims(t_end, -1)  # (..., T)

    def hold(s, h):
        mask = late.reshape(late.shape + (1,) * (s.ndim - late.ndim))
        return jnp.where(mask, jnp.expand_dims(h, late.ndim - 1).astype(s.dtype), s)

    return jax.tree_util.tree_map(hold, saved, held)


def keeps_states(x0, ts) -> bool:
    """Whether an adaptive loop saves states and leaves the statistics to ``statistics_of``."""
    return x0.size * len(ts) * x0.dtype.itemsize <= STATES_AFTER_LOOP_BYTES


def as_float(a):
    """``a`` as an inexact array (integer statistics travel as floats where saves may be inf)."""
    a = jnp.asarray(a)
    return a if jnp.issubdtype(a.dtype, jnp.inexact) else a.astype(jnp.result_type(float))


def statistics_of(field, axes, save_fn, ts, states):
    """``save_fn`` at every save of every member, from the saved states (members, T, n, d)."""

    def statistics(f, t, x):
        values = save_fn(t, x, f)
        # saves past the end of a failed solve hold inf, as diffrax leaves them
        ok = jnp.all(jnp.isfinite(x))
        return jax.tree_util.tree_map(lambda a: jnp.where(ok, as_float(a), jnp.inf).astype(a.dtype), values)

    # one save time of all members per iteration: batches of the size of the members' (cache-sized) arrays
    by_time = jax.lax.map(
        lambda k: jax.vmap(statistics, in_axes=(axes, None, 0))(field, ts[k], states[:, k]), jnp.arange(len(ts))
    )
    return jax.tree_util.tree_map(lambda a: jnp.moveaxis(a, 0, 1), by_time)


class MemberParts:
    """A field's per-member leaves (those with ensemble axis 0), to take them in another order.

    ``parts`` lists each leaf's per-member array (None for shared leaves); ``field(parts)`` rebuilds
    the field from taken parts, e.g. ``field([p[order] if p is not None else None for p in parts])``.
    """

    def __init__(self, field, axes):
        self.leaves, self.treedef = jax.tree_util.tree_flatten(field)
        self.batched = [a == 0 for a in self.treedef.flatten_up_to(axes)]
        self.parts = [leaf if b else None for leaf, b in zip(self.leaves, self.batched)]

    def take(self, fn: Callable[[Any], Any]) -> list:
        """``fn`` of each per-member leaf (None for shared ones)."""
        return [fn(p) if p is not None else None for p in self.parts]

    def field(self, parts):
        """The field whose per-member leaves are ``parts``."""
        return self.treedef.unflatten([p if b else leaf for leaf, p, b in zip(self.leaves, parts, self.batched)])
