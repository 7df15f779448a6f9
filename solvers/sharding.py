"""Spreading a simulation over the local devices: the members of an ensemble, or the particles of one large run.

``simulate`` asks ``plan`` how to use ``jax.local_devices()``:

* members: the leading ensemble axis of x0 and of the field's ensemble leaves
  (``particles.fields.ensemble_axes``) is split over a 1-D mesh (axis ``MEMBERS``) with
  ``NamedSharding``; the batch is padded to a multiple of the device count by repeating its last
  member, and the padding is cut off the outputs. The compiled loops are the one-device ones:
  jit partitions them along the batch (GSPMD), members never talk to each other except in the
  loop's "is anyone still running" test.
* particles: a run with fewer members than devices whose attention is evaluated blocked
  (``particles/blocked.py``, large n) splits its particle axis instead (axis ``PARTICLE_AXIS``):
  each device holds a slice of the configuration, evaluates the attention of its query rows
  against all keys and values (gathered), and moves its own particles.

Either way every member's numbers are the one-device ones (to rounding; bitwise where XLA
picks the same kernels). With one device, or ``shard=False``, nothing here runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ..particles.blocked import PARTICLE_AXIS

MEMBERS = "members"
"""Name of the mesh axis over which ensemble members are split."""

__all__ = [
    "MEMBERS",
    "PARTICLE_AXIS",
    "Plan",
    "constrain_members",
    "cut",
    "group_size",
    "local_mesh",
    "pad_order",
    "place",
    "plan",
    "uses_blocked",
]


@dataclass(frozen=True)
class Plan:
    """How a run is spread: the mesh, the axis it splits (``MEMBERS`` or ``PARTICLE_AXIS``), the padded batch."""

    mesh: Mesh
    axis: str
    members: int  # members after padding (a multiple of the device count along MEMBERS)

    @property
    def devices(self) -> int:
        return int(self.mesh.devices.size)


def local_mesh(axis: str) -> Mesh:
    """A 1-D mesh over ``jax.local_devices()`` with the one axis ``axis``."""
    return Mesh(np.asarray(jax.local_devices()), (axis,))


def uses_blocked(field, n: int, dtype) -> bool:
    """True when some attention term of ``field`` evaluates n particles of ``dtype`` by the blocked path."""
    return field.uses_blocked(n, dtype)


def plan(shard: bool | None, field, n: int, members: int, dtype) -> Plan | None:
    """The sharding of a run of ``members`` members of n particles, or None to run on one device.

    shard None: automatic, on when there is more than one local device; False: never; True: when
    there is more than one local device (one device has nothing to split). Runs with fewer
    members than devices split their particles when the field's attention is blocked, otherwise
    their members (a single member then stays on one device).
    """
    if shard is not None and not isinstance(shard, (bool, np.bool_)):
        raise ValueError(f"shard must be None (automatic), True or False, got {shard!r}")
    devices = jax.local_device_count()
    if shard is False or devices < 2:
        return None
    if members < devices and n >= 8 * devices and uses_blocked(field, n, dtype):
        return Plan(local_mesh(PARTICLE_AXIS), PARTICLE_AXIS, members)
    if members < 2:
        return None
    return Plan(local_mesh(MEMBERS), MEMBERS, -(-members // devices) * devices)


def _pad(a, total: int):
    extra = total - a.shape[0]
    return a if extra == 0 else jnp.concatenate([a, jnp.broadcast_to(a[-1:], (extra,) + a.shape[1:])])


def place(p: Plan, x0, field, axes):
    """(x0, field) padded to ``p.members`` and laid out on ``p.mesh``.

    x0 is (members, n, d). Along MEMBERS, x0 and the field's ensemble leaves (``axes`` 0) are
    split on their first axis, the other leaves replicated. Along PARTICLE_AXIS, x0 is split on
    its particle axis (replicated when n is not a multiple of the device count: the attention is
    split all the same) and the field replicated.
    """
    replicated = NamedSharding(p.mesh, P())
    leaves, treedef = jax.tree_util.tree_flatten(field)
    batched = treedef.flatten_up_to(axes)  # type: ignore[attr-defined]  # jaxlib has no stubs for PyTreeDef
    if p.axis == MEMBERS:
        split = NamedSharding(p.mesh, P(MEMBERS))
        x0 = jax.device_put(_pad(x0, p.members), split)
        leaves = [
            jax.device_put(_pad(a, p.members), split)
            if b == 0
            else jax.device_put(a, replicated)
            if eqx.is_array(a)
            else a
            for a, b in zip(leaves, batched)
        ]
    else:
        rows = x0.shape[1] % p.devices == 0
        x0 = jax.device_put(x0, NamedSharding(p.mesh, P(None, PARTICLE_AXIS)) if rows else replicated)
        leaves = [jax.device_put(a, replicated) if eqx.is_array(a) else a for a in leaves]
    return x0, jax.tree_util.tree_unflatten(treedef, leaves)


def pad_order(p: Plan, order, members: int):
    """A member order (``adaptive_loop.grouping``) extended by the padding members, which come last."""
    if order is None or p.members == members:
        return order
    return jnp.concatenate([jnp.asarray(order), jnp.arange(members, p.members, dtype=jnp.asarray(order).dtype)])


def group_size(p: Plan, size: int | None) -> int | None:
    """A group size rounded up to a multiple of the device count, so every group splits evenly."""
    if size is None or p.axis != MEMBERS:
        return size
    return -(-size // p.devices) * p.devices


def cut(p: Plan, tree, members: int):
    """The outputs of the padded ensemble restricted to the first ``members`` members."""
    if p.members == members:
        return tree
    return jax.tree_util.tree_map(lambda a: a[:members], tree)


def constrain_members(a):
    """``a`` of shape (groups, size, ...) with its second axis split over MEMBERS when tracing under that mesh."""
    mesh = jax.sharding.get_abstract_mesh()
    if MEMBERS not in mesh.axis_names:
        return a
    return jax.lax.with_sharding_constraint(a, P(None, MEMBERS))
