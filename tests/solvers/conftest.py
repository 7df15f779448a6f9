"""Fixtures of the solvers' tests."""

from __future__ import annotations

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from attnflow.solvers import compilation_cache as cc
from attnflow.solvers import programs

OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
)
"""JAX's options that the compilation cache sets, restored after each test that turns it on."""


@pytest.fixture
def store(tmp_path):
    """The compilation cache (and so the program store) in a fresh directory; JAX's options restored after."""
    before = {name: getattr(jax.config, name) for name in OPTIONS}
    assert cc.enable_compilation_cache(tmp_path / "cache") is not None
    programs.forget()
    programs.EVENTS.clear()
    yield tmp_path / "cache" / programs.SUBDIRECTORY
    compilation_cache.reset_cache()
    for name, value in before.items():
        jax.config.update(name, value)
    programs.forget()
