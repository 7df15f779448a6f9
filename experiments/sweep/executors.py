"""Executors: where the tasks of a sweep run.

A sweep is cut into tasks, each one compiled, vmapped run (``Experiment.execute``) over a list of β values
(see ``sweep.py``). An executor runs the tasks and hands their results back as they finish; the
sweep (the client) alone writes run directories and the manifest, so the store's atomicity holds
wherever the work ran.

* ``LocalExecutor`` (default): one task after the other in this process. Needs nothing more.
* ``DaskExecutor``: the tasks as Dask futures, on a running cluster (``scheduler`` address: a
  ``dask scheduler`` with ``dask worker`` processes, dask-jobqueue on Slurm, Kubernetes...) or on a
  ``LocalCluster`` of ``workers`` processes started here. Workers are spawned, never forked, so
  JAX is never forked after import; each worker runs one task at a time and lets JAX allocate GPU
  memory on demand, so several workers can share a device. A worker that dies (killed, out of
  memory) takes its task with it; Dask reruns it on another worker, and the client still writes
  each run once. Needs the optional extra ``dask`` (``pip install "attnflow[dask]"``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..run.runner import RunResult

EXECUTORS = ("local", "dask")

# the schemes of Dask's network transports (distributed's comm backends; "inproc" reaches no other process)
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")
_ADDRESS = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>\d{1,5})"
)

# JAX reads these when its backend starts (at the first computation, not at import): set before
# a worker's first task, they let several worker processes share one GPU
WORKER_ENVIRONMENT = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "TF_CPP_MIN_LOG_LEVEL": "2"}


def check_scheduler_address(address) -> str:
    """Return ``address`` if it is a Dask scheduler address, SCHEME://HOST:PORT with one of
    :data:`SCHEDULER_SCHEMES`; else one ValueError line, at once and before any connection is tried
    (a Client given a malformed address raises, and then hangs for a minute in its cleanup)."""
    example = "e.g. tcp://10.0.0.5:8786"
    match = _ADDRESS.fullmatch(address) if isinstance(address, str) else None
    if match is None:
        raise ValueError(
            f"--scheduler {address!r} is not a Dask scheduler address: give SCHEME://HOST:PORT "
            f"with SCHEME one of {', '.join(SCHEDULER_SCHEMES)} ({example})"
        )
    if match["scheme"] not in SCHEDULER_SCHEMES:
        raise ValueError(
            f"--scheduler {address!r}: unknown scheme {match['scheme']!r}; Dask's are "
            f"{', '.join(SCHEDULER_SCHEMES)} ({example})"
        )
    if not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"--scheduler {address!r}: port {int(match['port'])} is not in 1 … 65535 ({example})")
    return address


@dataclass(frozen=True)
class Task:
    """One compiled call of a sweep: ``config`` (a plain dict, data only) with the β values of ``runs``."""

    key: str
    config: dict
    runs: tuple[int, ...]


def run_task(config: dict):
    """Run one task's configuration (in whatever process executes it) and return its RunResult."""
    for name, value in WORKER_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    from .. import builtin
    from ..config import validate

    checked = validate(config)
    return builtin.resolve(checked.experiment).execute(checked, progress=False)


class LocalExecutor:
    """The tasks one after the other, in this process (with progress bars when the config asks)."""

    name = "local"
    workers = 1

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, Any]]:
        """Yield (task, RunResult) in order, or (task, error) when the simulation failed
        (non-finite values, a solver that gave up); any other exception propagates."""
        from .. import builtin
        from ..config import validate

        for task in tasks:
            result: RunResult | FloatingPointError | RuntimeError
            try:
                config = validate(task.config)
                result = builtin.resolve(config.experiment).execute(config)
            except (FloatingPointError, RuntimeError) as err:
                result = err
            yield task, result

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DaskExecutor:
    """The tasks as Dask futures on a running cluster (``scheduler``) or on a new LocalCluster.

    scheduler  address of a running Dask scheduler, e.g. "tcp://10.0.0.5:8786"; None starts a
               LocalCluster of ``workers`` processes on this machine (one thread each).
    workers    processes of the LocalCluster (default: the number of CPU cores, at most 8).
    retries    reruns of a task whose function raised (a lost worker is rerun by Dask anyway).
    timeout    seconds to wait for the scheduler to answer.
    """

    name = "dask"

    def __init__(
        self, scheduler: str | None = None, workers: int | None = None, *, retries: int = 1, timeout: float = 30.0
    ):
        if scheduler is not None:
            check_scheduler_address(scheduler)
        try:
            import dask
            import distributed
        except ImportError:
            raise ValueError(
                '--executor dask needs Dask: pip install "attnflow[dask]" (or pip install "dask[distributed]")'
            ) from None
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        if scheduler is not None and workers is not None:
            raise ValueError("workers sizes a LocalCluster; with a scheduler address the cluster has its own workers")
        self.retries = retries
        self._cluster = None
        # spawned workers start a fresh interpreter: JAX's threads are never forked
        dask.config.set({"distributed.worker.multiprocessing-method": "spawn"})
        if scheduler is None:
            for name, value in WORKER_ENVIRONMENT.items():
                os.environ.setdefault(name, value)  # inherited by the spawned workers
            n = workers or min(os.cpu_count() or 1, 8)
            self._cluster = distributed.LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=logging.ERROR
            )
            self.client = distributed.Client(self._cluster, set_as_default=False)
        else:
            try:
                self.client = distributed.Client(scheduler, timeout=timeout, set_as_default=False)
            except (OSError, TimeoutError) as err:
                raise ValueError(f"cannot reach the Dask scheduler at {scheduler!r}: {err}") from None
        self.address = self.client.scheduler.address

    @property
    def workers(self) -> int:
        """Workers connected now (at least 1)."""
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    def worker_pids(self) -> dict[str, int]:
        """The process id of every worker, by address (to inspect or kill one)."""
        return self.client.run(os.getpid)

    def run(self, tasks: Iterable[Task]) -> Iterator[tuple[Task, Any]]:
        """Yield (task, RunResult or the exception it raised) as tasks finish."""
        import distributed

        tasks = list(tasks)
        futures = {}
        for task in tasks:
            fut = self.client.submit(run_task, task.config, key=task.key, pure=False, retries=self.retries)
            futures[fut] = task
        try:
            for fut in distributed.as_completed(list(futures), loop=self.client.loop):
                task = futures[fut]
                try:
                    yield task, fut.result()
                except Exception as err:  # the task's own error, or KilledWorker after repeated losses
                    yield task, err
                finally:
                    fut.release()
        finally:
            for fut in futures:
                if not fut.done():
                    fut.cancel()

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._cluster is not None:
                self._cluster.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_executor(name: str = "local", *, scheduler: str | None = None, workers: int | None = None):
    """The executor called ``name`` ("local" or "dask"); ``scheduler``/``workers`` are Dask's only."""
    if name not in EXECUTORS:
        raise ValueError(f"unknown executor {name!r}; choose one of: {', '.join(EXECUTORS)}")
    if name == "local":
        if scheduler is not None or workers is not None:
            flag = "--scheduler" if scheduler is not None else "--workers"
            raise ValueError(f"{flag} needs --executor dask (the local executor runs in this process)")
        return LocalExecutor()
    return DaskExecutor(scheduler, workers)
