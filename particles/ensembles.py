"""The ensemble axes of a field: which of its leaves carry one value per member of an ensemble.

A field is an ensemble when some of its parameters (β, weights, noise levels, ...) have one more
dimension than one member needs, as each module's ``event_ndim`` declares; ``simulate`` vmaps over those
leaves (and ``solvers/sharding.py`` splits them over devices)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .fields import Field


def ensemble_axes(field: Field) -> tuple[Field, int | None]:
    """vmap axes of a field's leaves (0 for ensemble axes, None otherwise) and the ensemble size.

    A leaf is an ensemble axis when it has one more dimension than its owner's ``event_ndim``
    says one member needs. All ensemble axes must have the same length.
    """
    paths_leaves, treedef = jax.tree_util.tree_flatten_with_path(field)
    axes: list[int | None] = []
    sizes: dict[str, int] = {}
    for path, leaf in paths_leaves:
        owner: Any = field  # the module or container that holds the leaf, walked down its path
        name = None
        for key in path:
            if name is not None:
                owner = getattr(owner, name) if isinstance(name, str) else owner[name]
            name = key.name if hasattr(key, "name") else key.idx
        event = getattr(owner, "event_ndim", {}).get(name) if isinstance(name, str) else None
        nd = np.ndim(leaf)
        if event is not None and nd == event + 1:
            axes.append(0)
            sizes[f"{type(owner).__name__}.{name}"] = np.shape(leaf)[0]
        elif event is not None and nd != event:
            raise ValueError(
                f"{type(owner).__name__}.{name} has shape {np.shape(leaf)}: expected {event} "
                f"dimensions for one member, or {event + 1} for an ensemble"
            )
        else:
            axes.append(None)
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{k} has {v}" for k, v in sizes.items())
        raise ValueError(f"ensemble axes of the field disagree in length: {listed}")
    return jax.tree_util.tree_unflatten(treedef, axes), (next(iter(sizes.values())) if sizes else None)
