"""``attnflow list NAME``: an experiment's description, size and keys, from its declaration (commands/describe.py)."""

from __future__ import annotations

from cli_helpers import cli

from attnflow.experiments import builtin
from attnflow.experiments.commands import describe
from attnflow.experiments.config import load_config


def test_the_phase_diagram_tells_its_members_memory_and_time():
    rc, out, err = cli(["list", "fig3-phase-diagram"])
    assert rc == 0, err
    # 6 dimensions × 90 β × 1024 seeds, as in [GLPR] Fig. 3
    assert "552 960 members (6 d × 90 β × 1 024 seeds)" in out
    assert "192 members (2 d × 12 β × 8 seeds)" in out  # --quick
    assert "measured: 3.2 min cold" in out
    rows = {
        line.split()[0]: line.split()[1:3] for line in out.splitlines() if line.startswith("  ") and "  " in line[2:]
    }
    assert rows["d"] == ["[2,", "8,"] and rows["seeds"] == ["1024", "8"] and rows["solver"] == ["rk4", "="]
    assert "keys it reads at their defaults" in out and "noise" in out.split("keys it reads at their defaults")[1]


def test_the_memory_is_the_preflight_estimate_and_a_grid_adds_up_its_runs():
    fig3 = builtin.get("fig3-phase-diagram")
    config = load_config(None, [], base=dict(fig3.defaults))
    from attnflow.experiments.run import memory

    assert describe.size(config, fig3).nbytes == memory.estimate_bytes(config, needs=fig3.needs(config))
    fig5 = builtin.get("fig5-random-matrices")
    config = load_config(None, [], base=dict(fig5.defaults))
    assert describe.size(config, fig5).members == 4 * len(config.beta) * config.seeds * len(config.d)


def test_an_experiment_with_a_runner_of_its_own_lists_the_keys_it_reads():
    rc, out, err = cli(["list", "moderate-interaction"])
    assert rc == 0, err
    table = out.split("keys it sets:")[1].split("keys it reads")[0]
    assert {"token_counts", "interaction_c", "collapse_eigenvalue", "t1"} <= {
        line.split()[0] for line in table.splitlines() if line.strip() and not line.strip().startswith(("key", "-"))
    }
    assert "members" not in out.split("\n")[2]  # not a particle ensemble: the memory its runner declares, no members


def test_an_unknown_name_is_refused_with_the_valid_ones():
    rc, out, err = cli(["list", "fig4"])
    assert rc == 2 and out == ""
    assert "unknown experiment 'fig4'" in err and "fig4-circle" in err


def test_run_help_points_to_list_name():
    rc, out, _ = cli(["run", "--help"])
    assert rc == 0 and "attnflow list NAME" in out


def test_the_site_reference_page_is_the_same_text_for_every_experiment():
    import sys
    from pathlib import Path

    import pytest

    pytest.importorskip("mkdocs", reason='the hook is a MkDocs hook (pip install -e ".[docs]")')
    hooks = Path(__file__).resolve().parents[3] / "docs" / "hooks"
    sys.path.insert(0, str(hooks))
    try:
        import attnflow_docs
    finally:
        sys.path.remove(str(hooks))
    page = attnflow_docs.experiments_markdown()
    for experiment in [*builtin.EXPERIMENTS.values(), builtin.GENERIC]:
        assert f"## {experiment.name}\n\n```text\n{describe.describe(experiment)}\n```" in page
    assert "552 960 members (6 d × 90 β × 1 024 seeds)" in page
