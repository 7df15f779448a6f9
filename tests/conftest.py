"""Fixtures shared by the tests of every layer (helpers to import live in ``cli_helpers.py``)."""

from __future__ import annotations

import gc
import os
import signal

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


def pytest_sessionfinish(session):
    """A pytest-xdist worker that has run its tests ignores Ctrl-C from then on. When the run ends, xdist closes
    each worker's connection, and one still busy 5 s later (collecting a heap of compiled programs) is sent SIGINT
    by execnet; that interrupt lands in whatever runs, often hypothesis's or JAX's garbage-collection callback,
    and was printed as an unraisable KeyboardInterrupt after the summary."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        except ValueError:  # not the main thread: nothing to protect
            pass
