"""Benchmark grids: a YAML suite expanded into cells, run on an executor, kept in a SQLite store.

``unlearnkit bench SUITE.yaml`` (see :mod:`unlearnkit.bench.grid` for the file's keys). A cell is
one ``unlearnkit run`` of one method (or the group's reference models) on one dataset, model,
forget task and seed; a finished cell is never run again, so an interrupted call resumes.
"""
from .cell import Machine, execute_cell
from .executors import LocalExecutor, RayExecutor, make_executor
from .grid import Cell, Suite, expand, load_suite
from .runner import BenchSummary, run_bench
from .store import ResultStore

__all__ = ["BenchSummary", "Cell", "LocalExecutor", "Machine", "RayExecutor", "ResultStore", "Suite",
           "execute_cell", "expand", "load_suite", "make_executor", "run_bench"]
