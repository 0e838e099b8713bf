"""The SQLite store: WAL, atomic cells, a cell stored once, failures retried, one writer at a time."""
from __future__ import annotations

import sqlite3

import pytest

from unlearnkit.bench.grid import expand
from unlearnkit.bench.store import ResultStore
from unlearnkit.errors import UserError

CELLS = expand({"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["GA"], "seeds": [0]}, "t")


def result(cell, value=1.0):
    entries = ([{"entry": "original", "metrics": {"forget_acc": value}}, {"entry": "retrain", "metrics": {}}]
               if cell.kind == "reference" else [{"entry": cell.method, "metrics": {"forget_acc": value, "x": None},
                                                  "audit": {"verdict": "erased"}, "verdict": "erased"}])
    return {"ok": True, "entries": entries, "task_spec": {"kind": "classes"}, "hyperparameters": {"lr": 1},
            "provenance": {"split_hash": "s", "original_sha256": "o", "retrain_sha256": "r", "unlearned_sha256": "u",
                           "unlearnkit_version": "0", "git_commit": "c", "torch_version": "t", "device": "cpu"},
            "out_dir": "x", "started": "a", "finished": "b", "wall_s": 1.0}


def test_store_round_trip_and_once_only(tmp_path):
    with ResultStore(tmp_path / "r.db", exclusive=True) as s:
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        run = s.begin_run("t", None, 2, 0, "local", 1)
        for c in CELLS:
            s.record_cell(c, result(c), run)
        s.record_cell(CELLS[1], result(CELLS[1], value=99.0), run)  # a second record is ignored
        assert s.finished() == {c.cell_id for c in CELLS}
        rows = s.rows()
        assert [r["entry"] for r in rows] == ["original", "retrain", "gradient_ascent"]
        assert rows[2]["metrics"]["forget_acc"] == 1.0 and rows[2]["audit"]["verdict"] == "erased"
        assert rows[2]["unlearned_sha256"] == "u" and rows[2]["config_hash"] == CELLS[1].config_hash
        assert s.db.execute("SELECT value FROM metrics WHERE entry='gradient_ascent' AND name='forget_acc'"
                            ).fetchall() == [(1.0,)]
        assert s.runs()[0]["n_done"] == 2
        assert s.integrity() == "ok"


def test_failed_cell_is_listed_until_it_succeeds(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        run = s.begin_run("t", None, 2, 0, "local", 1)
        s.record_failure(CELLS[1], "RuntimeError: boom", run)
        assert [f["cell_id"] for f in s.failures()] == [CELLS[1].cell_id]
        assert CELLS[1].cell_id not in s.finished()
        s.record_cell(CELLS[1], result(CELLS[1]), run)
        assert s.failures() == []


def test_a_cell_is_written_whole_or_not_at_all(tmp_path):
    with ResultStore(tmp_path / "r.db") as s:
        run = s.begin_run("t", None, 1, 0, "local", 1)
        bad = result(CELLS[1])
        bad["entries"][0]["metrics"] = {"forget_acc": float("nan")}  # not JSON: the insert fails midway
        bad["entries"][0]["audit"] = {"v": float("nan")}
        with pytest.raises(ValueError):
            s.record_cell(CELLS[1], bad, run)
        assert s.finished() == set()
        assert s.db.execute("SELECT count(*) FROM entries").fetchone()[0] == 0


def test_one_writer_at_a_time_and_bad_files(tmp_path):
    with ResultStore(tmp_path / "r.db", exclusive=True):
        with pytest.raises(UserError, match="another `unlearnkit bench`"):
            ResultStore(tmp_path / "r.db", exclusive=True)
        with ResultStore(tmp_path / "r.db") as reader:  # readers are fine
            assert reader.finished() == set()
    with pytest.raises(UserError, match="does not exist"):
        ResultStore(tmp_path / "none.db", create=False)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(UserError, match="not a usable results database"):
        ResultStore(junk)
    assert sqlite3.connect(tmp_path / "r.db").execute("PRAGMA integrity_check").fetchone()[0] == "ok"
