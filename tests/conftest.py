"""Fixtures shared by the tests of every layer (helpers to import live in ``cli_helpers.py``)."""

from __future__ import annotations

import gc
import os
import signal

# The tests never write into the user's compilation cache (~/.cache/attnflow/jax, or $ATTNFLOW_CACHE_DIR): off for
# this process and the processes it starts, before attnflow is imported (cli_helpers imports it), so that neither
# the command line run in-process nor attnflow's default for Python turns it on. A test that wants the cache gives
# it a directory of its own (ATTNFLOW_CACHE_DIR in a child's environment, or enable_compilation_cache(tmp_path)).
os.environ["ATTNFLOW_CACHE_DIR"] = "off"

import jax  # noqa: E402
import pytest  # noqa: E402
from cli_helpers import SMALL  # noqa: E402


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
