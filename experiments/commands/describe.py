"""``attnflow list NAME``: what an experiment is and what a run of it takes, from its own declaration.

One page per experiment: its description and papers; its size at full size and with ``--quick`` (members, the
memory a run holds by the same estimate the preflight checks, the full run's measured time where the experiment
declares it); and every configuration key its run reads, with the value the experiment gives it, its ``--quick``
value and its one line of documentation. The keys the experiment sets come first, then those it leaves at their
defaults. The site's reference page of experiments is the same text (``docs/hooks``), so the two never differ.
"""

from __future__ import annotations

import math

from ...solvers.machine import format_bytes
from ..config import KEYS, Config, load_config, toml_literal
from ..run import memory, preflight

__all__ = ["Size", "size", "describe", "key_rows"]


def _count(value: int) -> str:
    """An integer with thin groups of three digits (552 960)."""
    return f"{value:,}".replace(",", " ")


def _bytes(nbytes: int) -> str:
    return f"{nbytes / 2**20:.0f} MiB" if nbytes < 2**30 else format_bytes(nbytes)


class Size:
    """A run's size: ensemble members (None for an experiment that is not a particle ensemble), how they are made
    up (d × β × seeds per run) and the bytes a run holds at most."""

    def __init__(self, members: int | None, nbytes: int, made_of: str = "") -> None:
        self.members = members
        self.nbytes = nbytes
        self.made_of = made_of

    def __str__(self) -> str:
        held = f"{_bytes(self.nbytes)} of memory at most"
        if self.members is None:
            return held
        return f"{_count(self.members)} members ({self.made_of}), {held}"


def _grid_configs(config: Config, experiment) -> list[Config]:
    """The configurations of an experiment made of several runs (its ``grid``), else ``[config]``."""
    if not experiment.grid:
        return [config]
    axes = list(experiment.grid.items())
    out = [config]
    for name, values in axes:
        out = [c.replace(**{name: v}) for c in out for v in values]
    return out


def size(config: Config, experiment) -> Size:
    """Members and peak memory of a run of ``config`` as ``experiment`` (a grid's runs one after another: the
    members add up, the memory is the largest run's)."""
    runs = _grid_configs(config, experiment)
    if experiment.run is not None:
        return Size(None, max(sum(experiment.memory(c).values()) for c in runs))
    members = sum(len(c.d) * len(c.beta) * c.seeds for c in runs)
    held = max(memory.estimate_bytes(c, needs=experiment.needs(c)) for c in runs)
    made_of = f"{len(config.d)} d × {len(config.beta)} β × {_count(config.seeds)} seeds"
    if len(runs) > 1:
        made_of += f" × {len(runs)} runs"
    return Size(members, held, made_of)


def _shown(value, width: int = 40) -> str:
    text = value if isinstance(value, str) and not value.startswith('"') else toml_literal(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def key_rows(full: Config, quick: Config, experiment) -> tuple[list[tuple[str, str, str, str]], list[str]]:
    """The keys a run reads: (key, value, --quick value, doc) for those the experiment sets, in the order of
    ``config.KEYS``, and the names of the others (read at their defaults)."""
    reads = preflight.keys_read(full, experiment) | preflight.keys_read(quick, experiment)
    own = set(experiment.defaults) | set(experiment.quick)
    rows, rest = [], []
    for name, key in KEYS.items():
        if name not in reads and name not in own:
            continue
        if name == "experiment":
            continue
        if name in own or full[name] != quick[name]:
            value, fast = _shown(full[name]), _shown(quick[name])
            rows.append((name, value, "=" if fast == value else fast, _shown(key.doc, 100)))
        else:
            rest.append(name)
    return rows, rest


def describe(experiment) -> str:
    """The text ``attnflow list NAME`` prints for ``experiment``."""
    full = load_config(None, [], base=dict(experiment.defaults))
    quick = load_config(None, [], base={**experiment.defaults, **experiment.quick})
    lines = [f"{experiment.name}: {experiment.description}"]
    if experiment.reference:
        lines.append(f"papers:   {experiment.reference}")
    lines.append(f"full run: {size(full, experiment)}; measured: {experiment.runtime or 'not measured'}")
    lines.append(f"--quick:  {size(quick, experiment)}")
    if experiment.grid:
        axes = ", ".join(f"{k} over {len(v)} values" for k, v in experiment.grid.items())
        lines.append(
            f"runs:     one per grid point ({axes}, {math.prod(len(v) for v in experiment.grid.values())} in all)"
        )
    rows, rest = key_rows(full, quick, experiment)
    header = ("key", "value", "--quick", "description")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    lines += ["", "keys it sets:"]
    for i, row in enumerate([header, *rows]):
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(row[:3], widths)) + "  " + row[3])
        if i == 0:
            lines.append("  " + "  ".join("-" * w for w in widths) + "  " + "-" * len(header[3]))
    if rest:
        lines += ["", "keys it reads at their defaults (attnflow list --keys): " + ", ".join(rest)]
    lines += ["", f"run it: attnflow run {experiment.name} [--quick] [--set KEY=VALUE ...]"]
    return "\n".join(line.rstrip() for line in lines)
