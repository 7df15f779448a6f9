"""Figures of a run: the writers of a result, the one choice of them by name, and drawing them into a run directory.

Every command that draws figures (``run``, ``sweep``, ``hist``, ``fit``, ``plot``) goes through :func:`select`
(``--kind``) and :func:`write`; what attnflow draws there is recorded by the store (``.attnflow.json``), so a
user's own files are never replaced.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from .. import builtin
from . import store

__all__ = ["writers", "select", "write", "SUFFIXES"]


SUFFIXES = (".png", ".gif", ".html")
"""What attnflow draws: figures, animations and interactive views (``results/views.py``)."""


def _stem(name: str) -> str:
    return name.removesuffix(".png").removesuffix(".gif").removesuffix(".html")


def writers(result, experiment) -> dict:
    """The figure writers of a run of ``experiment`` (name → function drawing into a path): its own figures and
    those of the optional statistics it saved."""
    return {**experiment.figures(result), **builtin.statistics_figures(result)}


def select(figures: dict, kinds=None) -> dict:
    """The writers named in ``kinds`` (with or without ".png"/".gif"/".html"; all when None or empty), refusing a name
    the run does not have (``attnflow plot DIR --kind NAME``)."""
    if not kinds:
        return figures
    have = {_stem(name) for name in figures}
    unknown = [k for k in kinds if _stem(k) not in have]
    if unknown:
        raise ValueError(f"unknown figure {unknown[0]!r}; this run has: {', '.join(map(_stem, figures))}")
    wanted = {_stem(k) for k in kinds}
    return {name: draw for name, draw in figures.items() if _stem(name) in wanted}


def write(directory: Path, drawers: dict) -> list[Path]:
    """Draw figures into ``directory`` and add them to the directory's list of attnflow's files.

    Every figure is drawn to a temporary name first; only when all are drawn are they renamed into
    place, so a failure (a full disk: a StoreError naming the file and the OS error) leaves the
    directory as it was, temporaries removed. A file of the same name that attnflow did not write is
    never replaced: it is an error, before anything is drawn."""
    targets = {name: directory / (name if name.endswith(SUFFIXES) else f"{name}.png") for name in drawers}
    owned = store.owned_files(directory)
    for target in targets.values():
        if os.path.lexists(target) and target.name not in owned:
            raise ValueError(f"{str(target)!r} was not written by attnflow; move it away to draw this figure")
    drawn: dict[Path, Path] = {}
    try:
        for name, draw in drawers.items():
            target = targets[name]
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}{target.suffix}")
            drawn[target] = tmp
            try:
                draw(tmp)
            except OSError as err:
                raise store.StoreError(f"cannot write {target}: {err.strerror or err}") from err
        for target, tmp in drawn.items():
            os.replace(tmp, target)
    finally:
        for tmp in drawn.values():
            tmp.unlink(missing_ok=True)
    if drawn:
        store.record_files(directory, [target.name for target in drawn])
    return list(drawn)
