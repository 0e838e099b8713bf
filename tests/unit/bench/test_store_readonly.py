"""A store that is only read (`unlearnkit report --db`, `bench --dry-run`) is opened read-only and nothing is
written: not the database, not a -wal/-shm/-journal/.lock file beside it. The tests run as root, where
chmod does not stop a write, so they check the bytes, the folder's listing and that a write fails."""
from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from unlearnkit.bench.grid import load_suite
from unlearnkit.bench.store import ResultStore
from unlearnkit.cli import app
from unlearnkit.errors import UserError

runner = CliRunner()
SUITE = {"suite": "ro", "grids": [{"name": "class", "datasets": ["digits"], "tasks": [{"forget_classes": [3]}],
                                   "methods": ["GA"], "seeds": [0]}]}
METRICS = {"forget_acc": 1.0, "retain_acc": 99.0, "test_acc": 97.0, "test_forget_acc": 2.0, "test_retain_acc": 97.0,
           "mia_efficacy": 100.0, "mia_auc": 0.5, "gap": 1.0, "runtime_s": 2.0, "speedup": 5.0}


def result(cell) -> dict:
    """A finished cell as the bench records it (no training: the numbers are made up)."""
    entries = ([{"entry": "original", "metrics": {**METRICS, "forget_acc": 100.0}, "audit": None},
                {"entry": "retrain", "metrics": METRICS}] if cell.kind == "reference" else
               [{"entry": cell.method, "metrics": {**METRICS, "x": None}, "audit": {"verdict": "erased"},
                 "verdict": "erased"}])
    return {"ok": True, "entries": entries, "task_spec": {"kind": "classes"}, "hyperparameters": {"lr": 1},
            "provenance": {"split_hash": "s", "original_sha256": "o", "retrain_sha256": "r", "unlearned_sha256": "u",
                           "unlearnkit_version": "0", "git_commit": "c", "torch_version": "t", "device": "cpu"},
            "out_dir": "x", "started": "a", "finished": "b", "wall_s": 1.0}


def make_store(folder: Path) -> tuple[Path, Path]:
    """A suite file and a store holding all of its cells, finished."""
    folder.mkdir(parents=True, exist_ok=True)
    suite_file = folder / "ro.yaml"
    suite_file.write_text(yaml.safe_dump(SUITE))
    db = folder / "r.db"
    with ResultStore(db, exclusive=True) as s:
        run = s.begin_run("ro", str(suite_file), 2, 0, "local", 1)
        for cell in load_suite(suite_file).cells:
            s.record_cell(cell, result(cell), run)
        s.end_run(run, 1.0)
    (folder / "r.db.lock").unlink()  # the writer's lock file: a reader must not make one
    return suite_file, db


def snapshot(folder: Path, db: Path) -> tuple:
    st = db.stat()
    return sorted(os.listdir(folder)), db.read_bytes(), st.st_mtime_ns, st.st_size


@contextmanager
def read_only(folder: Path, db: Path):
    """chmod 0o444 the database and 0o555 its folder (restored afterwards, for the cleanup)."""
    modes = (stat.S_IMODE(folder.stat().st_mode), stat.S_IMODE(db.stat().st_mode))
    db.chmod(0o444)
    folder.chmod(0o555)
    try:
        yield
    finally:
        folder.chmod(modes[0])
        db.chmod(modes[1])


SIDE_FILES = ("r.db-wal", "r.db-shm", "r.db-journal", "r.db.lock")


@pytest.fixture
def sql_seen(monkeypatch):
    """Every SQLite connection opened meanwhile: its target and the statements it ran."""
    seen = []
    connect = sqlite3.connect

    def spy(target, *args, **kwargs):
        con = connect(target, *args, **kwargs)
        seen.append((str(target), statements := []))
        con.set_trace_callback(statements.append)
        return con

    monkeypatch.setattr(sqlite3, "connect", spy)
    return seen


def only_reads(seen) -> None:
    assert seen
    for target, statements in seen:
        assert target.startswith("file:///") and "?mode=ro" in target, target
        for sql in statements:
            assert sql.lstrip().upper().startswith(("SELECT", "PRAGMA TABLE_INFO", "PRAGMA INTEGRITY_CHECK")), sql


@pytest.mark.parametrize("name", ["store", "we?ird #%41 dir"])  # ?, # and % are quoted in the URI
def test_report_on_a_read_only_store_writes_nothing(tmp_path, name, sql_seen):
    folder = tmp_path / name
    _, db = make_store(folder)
    sql_seen.clear()
    before = snapshot(folder, db)
    assert not any((folder / f).exists() for f in SIDE_FILES)
    out = tmp_path / "report"
    with read_only(folder, db):
        r = runner.invoke(app, ["report", "--db", str(db), "--out", str(out)])
        assert r.exit_code == 0, (r.output, r.exception)
        assert snapshot(folder, db) == before
        assert not any((folder / f).exists() for f in SIDE_FILES)
    only_reads(sql_seen)  # no CREATE, no INSERT, no PRAGMA journal_mode
    assert (out / "report.html").is_file() and "gradient_ascent" in (out / "cells.csv").read_text()


def test_dry_run_on_a_read_only_store_writes_nothing(tmp_path, sql_seen):
    suite_file, db = make_store(tmp_path / "store")
    sql_seen.clear()
    folder = db.parent
    before = snapshot(folder, db)
    with read_only(folder, db):
        r = runner.invoke(app, ["bench", str(suite_file), "--db", str(db), "--dry-run"])
        assert r.exit_code == 0, (r.output, r.exception)
        assert "ro: 2 cells, 2 finished" in r.output
        assert snapshot(folder, db) == before
        assert not any((folder / f).exists() for f in SIDE_FILES)
    only_reads(sql_seen)
    r = runner.invoke(app, ["bench", str(suite_file), "--db", str(tmp_path / "none.db"), "--dry-run"])
    assert r.exit_code == 0 and "ro: 2 cells, 0 finished" in r.output
    assert not (tmp_path / "none.db").exists()  # a dry run creates no store either
    r = runner.invoke(app, ["bench", str(suite_file), "--db", str(tmp_path), "--dry-run"])
    assert r.exit_code == 2 and r.stderr == f"error: results database {tmp_path} is a folder, not a file\n", r.stderr


def test_a_read_only_store_refuses_writes(tmp_path):
    suite_file, db = make_store(tmp_path / "store")
    before = snapshot(db.parent, db)
    with ResultStore(db, create=False) as s:
        assert s.readonly and len(s.finished()) == 2 and s.integrity() == "ok"
        with pytest.raises(sqlite3.OperationalError, match="readonly database"):
            s.db.execute("INSERT INTO meta VALUES ('x', 'y')")
        with pytest.raises(sqlite3.OperationalError, match="readonly database"):
            s.begin_run("ro", None, 1, 0, "local", 1)
        s.db.execute("PRAGMA journal_mode=DELETE")  # SQLite answers, but a read-only file is not changed
    assert snapshot(db.parent, db) == before
    with pytest.raises(ValueError):
        ResultStore(db, create=False, exclusive=True)


def test_a_reader_sees_what_an_open_writer_committed(tmp_path):
    """While a bench writes, its -wal holds the newest cells: the reader reads them and adds no file."""
    suite_file, db = make_store(tmp_path / "store")
    with ResultStore(db) as writer:
        run = writer.begin_run("ro", None, 0, 2, "local", 1)
        listing = sorted(os.listdir(db.parent))
        assert "r.db-wal" in listing and "r.db-shm" in listing
        with ResultStore(db, create=False) as reader:
            assert [r["run_id"] for r in reader.runs()] == [1, run]
        assert sorted(os.listdir(db.parent)) == listing
    assert sorted(os.listdir(db.parent)) == ["r.db", "ro.yaml"]  # the writer's close removes them


def test_not_a_store(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        ResultStore(tmp_path / "none.db", create=False)
    assert not (tmp_path / "none.db").exists()
    with pytest.raises(UserError, match="is a folder"):
        ResultStore(tmp_path, create=False)
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(UserError, match="not an unlearnkit results database"):
        ResultStore(empty, create=False)
    assert empty.read_bytes() == b""  # no tables were made in it
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    with pytest.raises(UserError, match="no table cells, entries, runs, failures"):
        ResultStore(other, create=False)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(UserError, match="not a usable results database"):
        ResultStore(junk, create=False)
    r = runner.invoke(app, ["report", "--db", str(junk), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and r.stderr.startswith("error: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value, fragment", [
    ('{"forget_acc": "abc"}', "metrics.forget_acc must be a number (or null), not 'abc'"),
    ('{"forget_acc": [1]}', "metrics.forget_acc must be a number (or null), not a list"),
    ('[1.0]', "metrics must be a mapping, not a list"),
    ("not json", "metrics is not JSON"),
])
def test_a_store_row_that_is_not_numbers_is_one_error_line(tmp_path, value, fragment):
    """bench only stores a run's numbers; a store changed by hand is checked like a results.json."""
    _, db = make_store(tmp_path / "store")
    con = sqlite3.connect(db)
    con.execute("UPDATE entries SET metrics = ? WHERE entry = 'gradient_ascent'", (value,))
    con.commit()
    con.close()
    r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: results database {db}: cell ") and fragment in lines[0]
    assert "Traceback" not in r.output and not (tmp_path / "out").exists()


SETPRIV = shutil.which("setpriv")


@pytest.mark.skipif(os.geteuid() != 0 or SETPRIV is None, reason="needs root and setpriv (util-linux)")
@pytest.mark.heavy
def test_read_only_for_real_without_the_root_override(tmp_path):
    """As root without CAP_DAC_OVERRIDE the file modes hold, as for any user: report and dry run still work
    (plain ``mode=ro`` would fail here: SQLite wants to create -wal and -shm beside a WAL database)."""
    suite_file, db = make_store(tmp_path / "store")
    folder = db.parent
    before = snapshot(folder, db)
    limited = [SETPRIV, "--bounding-set=-dac_override,-dac_read_search,-fowner", sys.executable, "-m",
               "unlearnkit.cli"]
    with read_only(folder, db):
        probe = subprocess.run([SETPRIV, "--bounding-set=-dac_override,-dac_read_search,-fowner", "touch",
                                str(folder / "probe")], capture_output=True)
        if probe.returncode == 0:
            (folder / "probe").unlink()
            pytest.skip("setpriv could not drop the override here")
        r = subprocess.run([*limited, "report", "--db", str(db), "--out", str(tmp_path / "out")],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        r = subprocess.run([*limited, "bench", str(suite_file), "--db", str(db), "--dry-run"], capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0 and "ro: 2 cells, 2 finished" in r.stdout, r.stderr
        assert snapshot(folder, db) == before
    assert (tmp_path / "out" / "cells.csv").is_file()
