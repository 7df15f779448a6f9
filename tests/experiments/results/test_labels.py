"""The labels of what a run writes (``experiments/results/labels.py``): every statistic the package declares has
one, and ``af.load`` gives them as xarray's attributes (checked on every built-in experiment's quick run in
tests/experiments/builtin/test_experiments.py)."""

from __future__ import annotations

import pytest

from attnflow.experiments import builtin  # noqa: F401  (registers every experiment's statistics)
from attnflow.experiments.results import labels
from attnflow.experiments.results.dataset import SUMMARY_SERIES
from attnflow.experiments.results.rundir import STATE_DIMS
from attnflow.experiments.run import plan, runner


def test_every_declared_statistic_and_coordinate_has_a_label():
    names = {name for group in plan.GROUPS.values() for name in group}
    names |= set(runner.EXTRA_DIMS) | set(runner.STAT_DIMENSIONS) | set(SUMMARY_SERIES)
    names |= set(runner.STAT_DIMS) | {"xs", "steps", "t_clustered", "wall_time_s", "attention_matrix"}
    missing = sorted(n for n in names if labels.label(n) is None)
    assert not missing, f"add them to LABELS in experiments/results/labels.py: {missing}"
    assert set(STATE_DIMS) - {"particle", "coord"} <= set(labels.LABELS)  # dimensions without values need none


def test_attrs_are_the_long_name_and_units_where_there_are_any():
    assert labels.attrs("time") == {"long_name": "time t", "units": labels.TIME_UNITS}
    assert labels.attrs("beta") == {"long_name": "inverse temperature β"}
    assert labels.attrs("wall_time_s") == {"long_name": "wall time", "units": "s"}
    assert labels.attrs("no_such_variable") == {}


@pytest.mark.slow  # out of the quick tier: seconds of compilation or subprocesses; CI runs it
def test_a_study_label_asked_first_thing_in_a_new_process():
    """The labels, asked before any configuration is read (``af.load`` in a fresh process), reach the studies'
    declarations without a circular import: the configuration package, which registers the studies' keys, is
    imported first."""
    import subprocess
    import sys

    code = "from attnflow.experiments.results import labels; print(labels.attrs('gamma')['long_name'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "γ of β = γ log n"
