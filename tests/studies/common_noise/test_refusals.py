"""The study's experiments refuse, in one line and before any work, the steps that would never end and the
settings their theory or loops cannot take (exit status 2, nothing written)."""

from __future__ import annotations

import pytest
from cli_helpers import cli


@pytest.mark.parametrize(
    "name,setting,named",
    [
        ("common-noise", "depth_dt=1e-300", "max_steps"),
        ("quadratic-form", "quadratic_dt=1e-300", "max_steps"),
        ("homogenized-flow", "homogenized_dt=1e-300", "max_steps"),
        ("homogenized-flow", "homogenized_samples=500", "acts only with attention_weights = 'random'"),
        ("coercive-noise", "coercive_dt=1e-300", "max_steps"),
        ("coercive-noise", "coercive_dt=0.03", "coercive_dt must divide the save interval 0.05"),
        ("coercive-noise", "d=[2]", "d ≥ 3"),
        ("coercive-noise", "beta=[1,2]", "one β"),
        ("antipodal-persistence", "depth_dt=1e-300", "max_steps"),
        ("antipodal-persistence", "persistence_n=[8,9]", "persistence_n must hold even token counts"),
        ("antipodal-persistence", "persistence_n=[0]", "persistence_n"),
        ("antipodal-persistence", "d=[2]", "d ≥ 3"),
        ("antipodal-persistence", "depth_dt=0.03", "whole multiple of 20 layers"),
    ],
)
def test_refusals_are_one_line_and_write_nothing(tmp_path, name, setting, named):
    out = tmp_path / "run"
    rc, _, err = cli(["run", name, "--quick", "--set", setting, "--out", out])
    assert rc == 2, err
    assert len(err.strip().splitlines()) == 1 and named in err, err
    assert not out.exists()
