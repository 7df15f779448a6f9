"""Modules that moved (``moved.py``): a former path fails with a message naming the new one, which imports."""

from __future__ import annotations

import importlib

import pytest

from attnflow.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_former_module_path_names_where_it_lives_now(old):
    new = f"attnflow.{MOVED[old]}"
    with pytest.raises(ModuleNotFoundError, match=f"attnflow.{old} moved to {new}: import it from there"):
        importlib.import_module(f"attnflow.{old}")
    assert importlib.import_module(new).__name__ == new


def test_from_a_package_import_a_moved_module_says_the_same():
    with pytest.raises(ModuleNotFoundError, match="moved to attnflow.experiments.studies.noisy_transition.bifurcation"):
        from attnflow.experiments.builtin import bifurcation  # noqa: F401


def test_a_module_that_never_existed_is_an_ordinary_error():
    with pytest.raises(ModuleNotFoundError, match="No module named 'attnflow.particles.nowhere'"):
        importlib.import_module("attnflow.particles.nowhere")
