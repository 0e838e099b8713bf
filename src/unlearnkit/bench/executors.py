"""Executors: run cells and report them as they start and finish.

``LocalExecutor(jobs=1)`` runs cells one after the other in this process; ``jobs=N > 1`` in N
worker processes, each with ``cores // N`` torch threads and killed with the parent on Linux, so a
``kill -9`` of ``unlearnkit bench`` leaves no orphan at work. On Linux the workers are forked from
this process on a machine without a GPU (:func:`start_method`): they start at once, with torch
imported and the data already loaded (a spawned worker imports torch again, ~7 s, which cost a
small-model workload its whole parallel gain). Elsewhere they are spawned.
Callers :meth:`~LocalExecutor.start` the workers before showing a progress bar, so no other
thread of this process (the bar's refresh) runs at the fork. ``RayExecutor`` submits
each cell as a Ray task (``num_cpus=1``, and ``num_gpus=1`` when the cluster has GPUs) to the
cluster at ``address``, or to a local Ray started for the call. Both yield
``("start", cell, None)`` and ``("done", cell, result)`` events; only the caller writes the store.
At most as many cells are in flight as there are workers, so "running" is what really runs.

``run(items, machine, fn)`` calls ``fn(item, machine)`` for each item: ``fn`` is a top-level
function of plain picklable data that returns a dict and never raises for a failing item (it
returns ``{"ok": False, "error": ...}``); bench runs :func:`~unlearnkit.bench.cell.execute_cell`
(the default), ``unlearnkit forgetting-quality`` its own jobs.
"""
from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Callable, Iterator

from ..errors import UserError
from ..runtime import die_with_parent, gpu_device_nodes, start_method  # noqa: F401 (re-exported)
from .cell import Machine, execute_cell
from .grid import Cell

Event = tuple[str, Cell, "dict | None"]  # or another item type, with another fn
Execute = Callable[[Any, Machine], dict]


def _init_worker(threads: int) -> None:
    die_with_parent()
    os.environ["UNLEARNKIT_PROGRESS"] = "0"
    import torch

    torch.set_num_threads(threads)  # before any torch op here: a forked worker never enters the parent's
    # OpenMP pool (torch runs single-threaded ops inline), as torch's own DataLoader workers do
    from ..runtime import tune_cpu_allocator

    tune_cpu_allocator()  # reuse freed memory here too (a no-op when the parent already did)


def _ready() -> int:
    return os.getpid()


class LocalExecutor:
    name = "local"

    def __init__(self, jobs: int = 1) -> None:
        if jobs < 1:
            raise UserError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None

    def start(self) -> None:
        """Start the worker processes now (``jobs > 1``), before the caller starts other threads."""
        if self.jobs == 1 or self._pool is not None:
            return
        import multiprocessing as mp

        threads, how = max(1, (os.cpu_count() or 1) // self.jobs), start_method()
        self._pool = ProcessPoolExecutor(self.jobs, mp_context=mp.get_context(how), initializer=_init_worker,
                                         initargs=(threads,))
        if how == "fork":  # the first task forks every worker, here and now
            self._pool.submit(_ready).result()

    def run(self, cells: list[Cell], machine: Machine, fn: Execute = execute_cell) -> Iterator[Event]:
        if self.jobs == 1:
            for cell in cells:
                yield "start", cell, None
                yield "done", cell, fn(cell, machine)
            return
        self.start()
        pool, self._pool = self._pool, None
        try:
            todo, running = iter(cells), {}
            while True:
                while len(running) < self.jobs and (cell := next(todo, None)) is not None:
                    running[pool.submit(fn, cell, machine)] = cell
                    yield "start", cell, None
                if not running:
                    return
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    cell = running.pop(fut)
                    try:
                        result = fut.result()
                    except Exception as e:  # a worker that died (out of memory, a signal)
                        result = {"ok": False, "error": f"worker process failed: {type(e).__name__}: {e}"}
                    yield "done", cell, result
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


class RayExecutor:
    """Cells as Ray tasks. ``address=None`` starts a local Ray with ``num_cpus`` CPUs for the call.

    On a cluster every node needs unlearnkit installed (``pip install unlearnkit[ray]``) and, for
    the cache to be shared, ``--out`` and ``--cache-dir`` on a filesystem all nodes see.
    """

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        self.address, self.num_cpus = address, num_cpus

    def start(self) -> None:
        """Nothing to start ahead: Ray starts (or joins) its cluster in :meth:`run`."""

    def _ray(self):
        if self.address is None:
            # a local Ray: keep it on the loopback interface and send no usage statistics
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        try:
            import ray
        except ImportError:
            raise UserError("--executor ray needs Ray: pip install 'unlearnkit[ray]'") from None
        return ray

    def run(self, cells: list[Cell], machine: Machine, fn: Execute = execute_cell) -> Iterator[Event]:
        ray = self._ray()
        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=self.address, num_cpus=self.num_cpus if self.address is None else None,
                         include_dashboard=False, log_to_driver=False, configure_logging=False)
            except ConnectionError as e:
                raise UserError(f"cannot reach the Ray cluster at {self.address}: {e}") from None
        try:
            resources = ray.cluster_resources()
            gpus = int(resources.get("GPU", 0))
            task = ray.remote(num_cpus=1, num_gpus=1 if gpus else 0, max_retries=0)(fn)
            slots = max(1, gpus or int(resources.get("CPU", 1)))
            todo, running = iter(cells), {}
            while True:
                while len(running) < slots and (cell := next(todo, None)) is not None:
                    running[task.remote(cell, machine)] = cell
                    yield "start", cell, None
                if not running:
                    return
                finished, _ = ray.wait(list(running), num_returns=1)
                for ref in finished:
                    cell = running.pop(ref)
                    try:
                        result = ray.get(ref)
                    except Exception as e:  # the task's worker died
                        result = {"ok": False, "error": f"Ray task failed: {type(e).__name__}: {e}"}
                    yield "done", cell, result
        finally:
            if started_here:
                ray.shutdown()


def make_executor(kind: str, jobs: int = 1, address: str | None = None) -> LocalExecutor | RayExecutor:
    if kind == "local":
        if address:
            raise UserError("--address is for --executor ray")
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(address, num_cpus=jobs if jobs > 1 else None)
    raise UserError(f"unknown executor {kind!r}; choose local or ray")
