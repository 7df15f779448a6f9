"""``attnflow plot DIR``: redraw the figures of a run, or of every complete run of a sweep, in place; with
``--interactive`` their interactive views (HTML pages), and with ``--x AXIS --y STATISTIC`` a sweep's curve.

A directory written by ``attnflow hist``, ``fit`` or ``probe`` is redrawn by that command's own figures; any
other run by its experiment's (``results.figures``), its views by ``results.views`` and a sweep's curve by
``results.curves``. Only figures are written, each atomically, and only names attnflow owns there
(``.attnflow.json``) are replaced.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..results import curves, figures, runs, store, views
from . import fit, hist
from . import probe_command as probe

__all__ = ["replot"]


def replot(
    path: Path, kinds=None, *, interactive: bool = False, x: str | None = None, y: str | None = None
) -> list[Path]:
    """Redraw the figures (``kinds``: those named, all when None) of the run or sweep directory ``path``; with
    ``interactive`` its views instead; with ``x`` and ``y`` the sweep's curve of statistic y against axis x."""
    path = Path(path)
    if (x is None) != (y is None):
        raise ValueError("--x and --y go together: a sweep's statistic (--y) against one of its axes (--x)")
    if x is not None and y is not None:
        if kinds or interactive:
            raise ValueError("--x/--y draw a sweep's curve alone: leave out --kind and --interactive")
        return curves.write(path, x, y)
    if (path / store.MANIFEST_FILE).is_file():
        dirs = [path / r["name"] for r in store.read_manifest(path)["runs"] if store.is_complete(path / r["name"])]
    elif path.is_dir():
        dirs = [path]
    else:
        raise ValueError(f"{str(path)!r} is not a run or sweep directory")
    written = []
    for run_dir in dirs:
        if hist.is_hist_run(run_dir) or fit.is_fit_run(run_dir) or probe.is_probe_run(run_dir):
            if interactive:
                print(f"{run_dir}: no interactive views for a hist, fit or probe run", file=sys.stderr)
            elif hist.is_hist_run(run_dir):  # written by attnflow hist
                written += hist.replot(run_dir, kinds)
            elif probe.is_probe_run(run_dir):  # written by attnflow probe
                written += probe.replot(run_dir, kinds)
            else:  # written by attnflow fit
                written += fit.replot(run_dir, kinds)
        elif interactive:
            result, _ = runs.load_result(run_dir)
            for line in views.missing(result):
                print(f"{run_dir}: {line}" if len(dirs) > 1 else line, file=sys.stderr)
            written += views.write(run_dir, result, kinds)
        else:
            result, experiment = runs.load_result(run_dir)
            written += figures.write(run_dir, figures.select(figures.writers(result, experiment), kinds))
    if not written:
        print("no interactive views to draw" if interactive else "no figures to draw", file=sys.stderr)
    return written
