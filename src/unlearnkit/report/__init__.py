"""Reports over benchmark results: the seed papers' table layouts, plots, HTML / Markdown / CSV.

``unlearnkit report --db results/unlearnkit.db --out DIR`` (or ``--results run/results.json``).
The report reads results (the store, results.json), never the code that made them.
"""
from .build import make_report
from .records import Record, load_records
from .tables import Table, build_tables

__all__ = ["Record", "Table", "build_tables", "load_records", "make_report"]
