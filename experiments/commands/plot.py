"""``attnflow plot DIR``: redraw the figures of a run, or of every complete run of a sweep, in place.

A directory written by ``attnflow hist`` or ``attnflow fit`` is redrawn by that command's own figures; any
other run by its experiment's (``results.figures``). Only figures are written, each atomically, and only
names attnflow owns there (``.attnflow.json``) are replaced.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..results import figures, runs, store
from . import fit, hist

__all__ = ["replot"]


def replot(path: Path, kinds=None) -> list[Path]:
    """Redraw the figures (``kinds``: those named, all when None) of the run or sweep directory ``path``."""
    path = Path(path)
    if (path / store.MANIFEST_FILE).is_file():
        dirs = [path / r["name"] for r in store.read_manifest(path)["runs"] if store.is_complete(path / r["name"])]
    elif path.is_dir():
        dirs = [path]
    else:
        raise ValueError(f"{str(path)!r} is not a run or sweep directory")
    written = []
    for run_dir in dirs:
        if hist.is_hist_run(run_dir):  # written by attnflow hist
            written += hist.replot(run_dir, kinds)
        elif fit.is_fit_run(run_dir):  # written by attnflow fit
            written += fit.replot(run_dir, kinds)
        else:
            result, experiment = runs.load_result(run_dir)
            written += figures.write(run_dir, figures.select(figures.writers(result, experiment), kinds))
    if not written:
        print("no figures to draw", file=sys.stderr)
    return written
