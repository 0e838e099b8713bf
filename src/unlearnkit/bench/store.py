"""The results store: one SQLite file in WAL mode (default ``results/unlearnkit.db``).

Tables (``sqlite3 results/unlearnkit.db .schema`` shows them):

* ``cells``: one row per *finished* cell: what it is (suite, grid, dataset, model, task, seed,
  method, variant, label, hyperparameters, configuration), its provenance (config hash, split
  hash, sha256 of the original, retrain and unlearned checkpoints, unlearnkit version, git commit,
  torch version, device), where its files are, which bench run made it and its wall time;
* ``entries``: the rows of a cell (``original`` and ``retrain`` for a reference cell, the method
  for a method cell): metrics, audit (JSON as in results.json), verdict, stop reason;
* ``metrics``: the same metrics in long form (cell_id, entry, name, value) for plain SQL;
* ``failures``: cells that raised, with the error (they are retried by the next call);
* ``runs``: one row per ``unlearnkit bench`` call (start, end, counts, executor).

A cell's rows are written in ONE transaction together with its ``cells`` row, so a ``kill -9``
leaves either the whole cell or nothing of it; WAL with ``synchronous=FULL`` keeps every
committed cell. Only the bench's main process writes; an exclusive lock file beside the database
stops a second ``unlearnkit bench`` from running the same cells at the same time. Readers
(``unlearnkit report``, ``unlearnkit bench --dry-run``) open it read-only (``create=False``) and
write nothing, so a store on read-only storage, or another user's, can be reported on. ``unlearnkit
tune`` keeps its Optuna studies in the same file; one that only ``tune`` has written reads as a store
without cells.
"""
from __future__ import annotations

import fcntl
import json
import math
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from .. import validate
from ..errors import UserError

SCHEMA_VERSION = "1"

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS runs (
    run_id INTEGER PRIMARY KEY AUTOINCREMENT, suite TEXT, suite_path TEXT, started TEXT, finished TEXT,
    n_cells INTEGER, n_skipped INTEGER, n_done INTEGER DEFAULT 0, n_failed INTEGER DEFAULT 0,
    executor TEXT, jobs INTEGER, wall_s REAL);
CREATE TABLE IF NOT EXISTS cells (
    cell_id TEXT PRIMARY KEY, suite TEXT, grid TEXT, kind TEXT, dataset TEXT, model TEXT, task TEXT,
    task_spec TEXT, seed INTEGER, method TEXT, variant TEXT, label TEXT, hyperparameters TEXT, config TEXT,
    config_hash TEXT, split_hash TEXT, original_sha256 TEXT, retrain_sha256 TEXT, unlearned_sha256 TEXT,
    unlearnkit_version TEXT, git_commit TEXT, torch_version TEXT, device TEXT,
    out_dir TEXT, run_id INTEGER, started TEXT, finished TEXT, wall_s REAL);
CREATE TABLE IF NOT EXISTS entries (
    cell_id TEXT, entry TEXT, metrics TEXT, audit TEXT, verdict TEXT, runtime_s REAL, stop_reason TEXT,
    preset TEXT, checkpoint TEXT, PRIMARY KEY (cell_id, entry));
CREATE TABLE IF NOT EXISTS metrics (
    cell_id TEXT, entry TEXT, name TEXT, value REAL, PRIMARY KEY (cell_id, entry, name));
CREATE TABLE IF NOT EXISTS failures (
    cell_id TEXT, run_id INTEGER, at TEXT, label TEXT, error TEXT, PRIMARY KEY (cell_id, run_id));
"""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _json(obj) -> str | None:
    return None if obj is None else json.dumps(obj, sort_keys=True, allow_nan=False)


class ResultStore:
    """Open (and create) the store at ``path``. ``exclusive=True`` takes the writer's lock.

    ``create=False`` opens an existing store **read-only** (``unlearnkit report``, ``bench --dry-run``):
    a missing file is a :class:`UserError`, and nothing is written, not even beside the database: no
    tables, no ``PRAGMA journal_mode``, no lock file, no ``-wal``/``-shm`` file (see :meth:`_open_readonly`).
    Any write through it fails with ``sqlite3.OperationalError`` (attempt to write a readonly database).
    """

    TABLES = ("cells", "entries", "runs", "failures")

    def __init__(self, path: str | Path, exclusive: bool = False, create: bool = True) -> None:
        self.path = Path(path).expanduser()
        self.readonly = not create
        self._lock = None
        if self.readonly:
            if exclusive:
                raise ValueError("a read-only store takes no writer's lock (exclusive=True needs create=True)")
            self.db = self._open_readonly()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if exclusive:
            self._lock = open(self.path.with_name(self.path.name + ".lock"), "w")
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._lock.close()
                raise UserError(f"another `unlearnkit bench` is writing {self.path}; wait for it or use "
                                f"another --db") from None
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(DDL)
            self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
        except sqlite3.DatabaseError as e:
            raise UserError(f"{self.path} is not a usable results database ({e})") from None

    def _open_readonly(self) -> sqlite3.Connection:
        """The store through SQLite's URI ``file:...?mode=ro`` (the path percent-quoted, so ``?``, ``#``
        and ``%`` in it are kept).

        ``mode=ro`` alone still creates ``-wal`` and ``-shm`` files beside a WAL database when none are
        there (and fails in a folder it may not write). They are there exactly while a writer has the
        store open (the last connection to close removes them); then the reader uses them, as SQLite
        needs to see the writer's committed cells. When they are not, no one has it open and the file
        is complete, so it is opened ``immutable=1``: read as it is, no lock, no file created. (A
        bench that starts writing in the milliseconds a report reads only appends to its own -wal; its
        cells show in the next report.)"""
        p = self.path
        validate.not_special("results database", p)
        if not p.exists():
            raise UserError(f"results database {p} does not exist (run `unlearnkit bench` first)")
        if not p.is_file():
            raise UserError(f"results database {p} is {'a folder' if p.is_dir() else 'not a regular file'}, "
                            f"not a file")
        in_use = any(p.with_name(p.name + suffix).exists() for suffix in ("-wal", "-journal"))
        uri = p.resolve().as_uri() + ("?mode=ro" if in_use else "?mode=ro&immutable=1")
        db = None
        try:
            db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            if db is not None:
                db.close()
            raise UserError(f"{p} is not a usable results database ({e})") from None
        missing = [t for t in self.TABLES if t not in tables]
        if len(missing) == len(self.TABLES) and "studies" in tables:
            # `unlearnkit tune` wrote it (Optuna's tables), no bench yet: a store without cells. Our tables
            # are made empty in the connection's own memory (TEMP), nothing is written to or beside the file
            db.execute("PRAGMA temp_store=MEMORY")
            db.executescript(DDL.replace("CREATE TABLE IF NOT EXISTS", "CREATE TEMP TABLE IF NOT EXISTS"))
            return db
        if missing:
            db.close()
            raise UserError(f"{p} is not an unlearnkit results database (no table {', '.join(missing)}; "
                            f"`unlearnkit bench` writes one)")
        return db

    def close(self) -> None:
        self.db.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing -------------------------------------------------------------------------------

    def finished(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT cell_id FROM cells")}

    def begin_run(self, suite: str, suite_path: str | None, n_cells: int, n_skipped: int, executor: str,
                  jobs: int) -> int:
        cur = self.db.execute("INSERT INTO runs (suite, suite_path, started, n_cells, n_skipped, executor, jobs) "
                              "VALUES (?, ?, ?, ?, ?, ?, ?)", (suite, suite_path, now(), n_cells, n_skipped,
                                                               executor, jobs))
        return int(cur.lastrowid)

    def end_run(self, run_id: int, wall_s: float) -> None:
        self.db.execute("UPDATE runs SET finished = ?, wall_s = ? WHERE run_id = ?", (now(), wall_s, run_id))

    def record_cell(self, cell, result: dict, run_id: int) -> None:
        """Store a finished cell and its rows atomically (a second record of the same cell is ignored)."""
        p = result["provenance"]
        with self.db:  # one transaction
            self.db.execute("BEGIN IMMEDIATE")
            cur = self.db.execute(
                "INSERT OR IGNORE INTO cells VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (cell.cell_id, cell.suite, cell.grid, cell.kind, cell.config["dataset"], cell.config["model"],
                 cell.task, _json(result["task_spec"]), cell.config["seed"], cell.method, _json(cell.variant),
                 cell.label, _json(result.get("hyperparameters")), _json(cell.config), cell.config_hash,
                 p.get("split_hash"), p.get("original_sha256"), p.get("retrain_sha256"),
                 p.get("unlearned_sha256"), p.get("unlearnkit_version"), p.get("git_commit"),
                 p.get("torch_version"), p.get("device"), result["out_dir"], run_id, result["started"],
                 result["finished"], result["wall_s"]))
            if cur.rowcount == 0:
                return
            for e in result["entries"]:
                self.db.execute("INSERT INTO entries VALUES (?,?,?,?,?,?,?,?,?)",
                                (cell.cell_id, e["entry"], _json(e["metrics"]), _json(e.get("audit")),
                                 e.get("verdict"), e.get("runtime_s"), e.get("stop_reason"), e.get("preset"),
                                 e.get("checkpoint")))
                self.db.executemany("INSERT INTO metrics VALUES (?,?,?,?)",
                                    [(cell.cell_id, e["entry"], k, float(v)) for k, v in e["metrics"].items()
                                     if isinstance(v, (int, float)) and math.isfinite(v)])
            self.db.execute("UPDATE runs SET n_done = n_done + 1 WHERE run_id = ?", (run_id,))

    def record_failure(self, cell, error: str, run_id: int) -> None:
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO failures VALUES (?,?,?,?,?)",
                            (cell.cell_id, run_id, now(), cell.describe(), error[-4000:]))
            self.db.execute("UPDATE runs SET n_failed = n_failed + 1 WHERE run_id = ?", (run_id,))

    # --- reading -------------------------------------------------------------------------------

    def integrity(self) -> str:
        return self.db.execute("PRAGMA integrity_check").fetchone()[0]

    def rows(self) -> list[dict]:
        """Every stored entry joined with its cell, JSON decoded (what ``unlearnkit report`` reads)."""
        self.db.row_factory = sqlite3.Row
        try:
            rows = self.db.execute(
                "SELECT c.*, e.entry, e.metrics, e.audit, e.verdict, e.runtime_s, e.stop_reason, e.preset, "
                "e.checkpoint FROM cells c JOIN entries e USING (cell_id) ORDER BY c.rowid, e.rowid").fetchall()
        finally:
            self.db.row_factory = None
        out = []
        for r in rows:
            d = dict(r)
            for key in ("task_spec", "variant", "hyperparameters", "config", "metrics", "audit"):
                try:
                    d[key] = json.loads(d[key]) if d[key] is not None else None
                except (TypeError, ValueError) as e:  # a store edited by hand or by another tool
                    raise UserError(f"results database {self.path}: cell {d['cell_id']} {d['entry']}: {key} is "
                                    f"not JSON ({e})") from None
            out.append(d)
        return out

    def runs(self) -> list[dict]:
        cols = [c[1] for c in self.db.execute("PRAGMA table_info(runs)")]
        return [dict(zip(cols, r)) for r in self.db.execute("SELECT * FROM runs ORDER BY run_id")]

    def failures(self) -> list[dict]:
        q = ("SELECT f.cell_id, f.run_id, f.at, f.label, f.error FROM failures f "
             "WHERE f.cell_id NOT IN (SELECT cell_id FROM cells) ORDER BY f.at")
        return [dict(zip(("cell_id", "run_id", "at", "label", "error"), r)) for r in self.db.execute(q)]
