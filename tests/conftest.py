"""Fixtures shared by the tests of every layer (helpers to import live in ``cli_helpers.py``)."""

from __future__ import annotations

import gc

import jax
import pytest
from cli_helpers import SMALL


@pytest.fixture
def small_workdir(tmp_path, monkeypatch):
    """tmp_path as the working directory, holding ``small.toml`` (``cli_helpers.SMALL``: a run of a second)."""
    (tmp_path / "small.toml").write_text(SMALL, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """After each test module, let JAX drop the programs it traced and compiled for it: a worker that runs
    hundreds of modules otherwise keeps every one of them and grows to gigabytes."""
    yield
    jax.clear_caches()
    gc.collect()
