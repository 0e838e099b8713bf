"""`unlearnkit bench` / `unlearnkit report` end to end on digits: resume, equality with `run`, the report
matches the store, kill -9 mid-grid then resume, the Ray executor gives the same cells."""
from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from bench_helpers import TINY, write_suite
from typer.testing import CliRunner

import unlearnkit
from unlearnkit.cli import app
from unlearnkit.report.stats import fmt, stat

runner = CliRunner()
VOLATILE = {"runtime_s", "speedup"}
NO_AUDIT = {**TINY, "defaults": {"recipe": {"epochs": 2}, "audit": False}}


def query(db: Path, sql: str, *args):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


def test_bench_stores_cells_with_provenance_and_resumes(tiny_bench):
    assert "4 cells run, 0 finished before, 0 failed" in tiny_bench.output
    cells = query(tiny_bench.db, "SELECT kind, config_hash, split_hash, original_sha256, retrain_sha256, "
                                 "unlearned_sha256, unlearnkit_version, torch_version, device, out_dir FROM cells")
    assert sorted(c[0] for c in cells) == ["method", "method", "reference", "reference"]
    for kind, *prov, out_dir in cells:
        assert all(prov[i] for i in (0, 1, 2, 3, 5, 6, 7)), prov
        assert (prov[4] is not None) == (kind == "method")
        assert (Path(out_dir) / "results.json").is_file()
    entries = query(tiny_bench.db, "SELECT entry, verdict FROM entries ORDER BY entry")
    assert [e[0] for e in entries] == ["gradient_ascent"] * 2 + ["original"] * 2 + ["retrain"] * 2
    assert all(v for e, v in entries if e != "retrain")  # every method and original audited once
    r = runner.invoke(app, tiny_bench.args())
    assert r.exit_code == 0, r.output
    assert "0 cells run, 4 finished before" in r.output
    runs = query(tiny_bench.db, "SELECT n_cells, n_skipped, n_done FROM runs ORDER BY run_id")
    assert runs[:2] == [(4, 0, 4), (4, 4, 0)]


def test_a_cell_gives_what_unlearnkit_run_gives(tiny_bench, tmp_path):
    (config,), = query(tiny_bench.db, "SELECT config FROM cells WHERE kind = 'method' AND seed = 0")
    cfg = json.loads(config)
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(json.dumps(cfg))
    r = runner.invoke(app, ["run", "--config", str(cfg_file), "--out", str(tmp_path / "run"), "--cache-dir",
                            str(tiny_bench.cache), "--no-progress", "--no-audit"])
    assert r.exit_code == 0, r.output
    ran = json.loads((tmp_path / "run" / "results.json").read_text())["models"]["gradient_ascent"]
    (metrics, sha), = query(tiny_bench.db, "SELECT e.metrics, c.unlearned_sha256 FROM entries e "
                                                  "JOIN cells c USING (cell_id) WHERE e.entry = 'gradient_ascent' "
                                                  "AND c.seed = 0")
    stored = json.loads(metrics)
    assert {k: v for k, v in stored.items() if k not in VOLATILE} == \
        {k: v for k, v in ran["metrics"].items() if k not in VOLATILE}
    assert sha == unlearnkit.load_checkpoint(tmp_path / "run" / "models" / "gradient_ascent.pt")[1]["sha256"]


def test_report_tables_match_the_store(tiny_report, tiny_bench):
    rows = list(csv.DictReader((tiny_report / "summary.csv").open()))
    html = (tiny_report / "report.html").read_text()
    checks = [("tarf", "gap", "SELECT m.value FROM metrics m JOIN cells c USING (cell_id) "
                              "WHERE m.entry = 'gradient_ascent' AND m.name = 'gap'", "{:.2f}"),
              ("mirage", "delta_lpr", "SELECT json_extract(audit, '$.layers.penultimate.delta_lpr') FROM entries "
                                      "WHERE entry = 'gradient_ascent'", "{:+.1f}"),
              ("purge", "mia_auc", "SELECT json_extract(metrics, '$.mia_auc') FROM entries "
                                   "WHERE entry = 'gradient_ascent'", "{:.3f}")]
    for table, name, sql, spec in checks:
        values = [v for (v,) in query(tiny_bench.db, sql)]
        assert len(values) == 2
        row = next(r for r in rows if r["table"] == table and r["metric"] == name and r["method"] == "gradient_ascent")
        assert float(row["mean"]) == pytest.approx(np.mean(values), rel=1e-12)
        assert float(row["std"]) == pytest.approx(np.std(values, ddof=1), rel=1e-12)
        shown = fmt(stat(values), spec)
        assert f"<td>{shown}" in html.replace("&#x27;", "'"), (table, shown)
    cells = list(csv.DictReader((tiny_report / "cells.csv").open()))
    assert len(cells) == query(tiny_bench.db, "SELECT count(*) FROM entries")[0][0]


def test_report_from_one_results_json(tiny_bench, tmp_path):
    (out_dir,), = query(tiny_bench.db, "SELECT out_dir FROM cells WHERE kind = 'method' AND seed = 1")
    r = runner.invoke(app, ["report", "--results", str(Path(out_dir) / "results.json"), "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    md = (tmp_path / "report.md").read_text()
    assert "| metric | retrain | original | gradient_ascent |" in md  # one run, the paper's layout
    assert "Layer by layer" in md and "| gradient_ascent | block1 |" in md


@pytest.mark.parametrize("args, message", [
    (["report", "--results", "nope.json"], "does not exist"),
    (["report", "--db", "nope.db"], "does not exist"),
    (["bench", "nope.yaml"], "suite file nope.yaml does not exist"),
])
def test_bad_input_is_one_line(args, message, tmp_path):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_bench_refuses_an_unknown_executor(tiny_bench):
    r = runner.invoke(app, tiny_bench.args("--executor", "spark"))
    assert r.exit_code == 2 and "unknown executor 'spark'" in r.output


def children(pid: int) -> list[int]:
    out = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat_file.parent.name))
    return out


def test_kill_9_mid_grid_loses_nothing_and_resumes(tmp_path, cache_dir):
    """A real `unlearnkit bench --jobs 2` killed with SIGKILL after some cells: its workers die with it,
    the store is intact, finished cells stay and are not run again, the next call runs exactly the rest."""
    suite = {**NO_AUDIT, "grids": [{**TINY["grids"][0], "methods": ["GA", "finetune"]}]}
    path = write_suite(tmp_path / "kill.yaml", suite)
    db, out = tmp_path / "kill.db", tmp_path / "cells"
    args = ["bench", str(path), "--db", str(db), "--out", str(out), "--cache-dir", str(cache_dir), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(Path(unlearnkit.__file__).parents[1]), "UNLEARNKIT_PROGRESS": "0"}
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "unlearnkit", *args, "--jobs", "2"], env=env, stdout=log,
                                stderr=log)
        deadline = time.time() + 240
        done = 0
        while time.time() < deadline and proc.poll() is None:
            try:
                done = query(db, "SELECT count(*) FROM cells")[0][0]
            except sqlite3.OperationalError:  # not created yet
                done = 0
            if done >= 2:
                break
            time.sleep(0.05)
        log = (tmp_path / "first.log").read_text()
        assert proc.poll() is None, f"the grid finished before it could be killed: {log}"
        workers = [c for c in children(proc.pid)  # forked workers (spawn_main when spawned); not the
                   if b"resource_tracker" not in Path(f"/proc/{c}/cmdline").read_bytes()]  # tracker
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(workers) == 2
    for _ in range(100):  # the workers get SIGKILL when their parent dies (PR_SET_PDEATHSIG)
        if not any(Path(f"/proc/{w}").exists() and "Z" not in Path(f"/proc/{w}/stat").read_text().split()[2]
                   for w in workers):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"worker processes {workers} outlived the killed bench")
    assert query(db, "PRAGMA integrity_check") == [("ok",)]
    before = dict((c, (f, r)) for c, f, r in query(db, "SELECT cell_id, finished, run_id FROM cells"))
    assert 2 <= len(before) < 6
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert f"{6 - len(before)} cells run, {len(before)} finished before, 0 failed" in r.output
    after = dict((c, (f, r)) for c, f, r in query(db, "SELECT cell_id, finished, run_id FROM cells"))
    assert len(after) == 6 and all(after[c] == before[c] for c in before)
    assert query(db, "SELECT finished IS NULL, n_skipped, n_done FROM runs ORDER BY run_id") == \
        [(1, 0, len(before)), (0, len(before), 6 - len(before))]
    for (cell_id, out_dir) in query(db, "SELECT cell_id, out_dir FROM cells"):
        runs_of_cell = (Path(out_dir) / "log.txt").read_text().count(" train / ")
        assert runs_of_cell == 1 or cell_id not in before, f"finished cell {cell_id} was run again"
    assert query(db, "PRAGMA integrity_check") == [("ok",)]


@pytest.mark.ray
def test_ray_executor_gives_the_same_cells(tmp_path, cache_dir):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'unlearnkit[ray]')")
    import torch

    suite = {**NO_AUDIT, "grids": [{**TINY["grids"][0], "seeds": [0]}]}
    path = write_suite(tmp_path / "ray.yaml", suite)

    def bench(name, *extra):
        r = runner.invoke(app, ["bench", str(path), "--db", str(tmp_path / f"{name}.db"), "--out",
                                str(tmp_path / name), "--cache-dir", str(cache_dir), "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        return query(tmp_path / f"{name}.db", "SELECT c.cell_id, e.entry, e.metrics, c.unlearned_sha256 FROM cells c "
                                              "JOIN entries e USING (cell_id) ORDER BY c.cell_id, e.entry")

    on_ray = bench("ray", "--executor", "ray", "--jobs", "2")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a Ray task has one CPU, hence one thread: same arithmetic, same numbers
    try:
        local = bench("local")
    finally:
        torch.set_num_threads(threads)
    assert len(on_ray) == 3

    def stable(rows):
        return [(c, e, {k: v for k, v in json.loads(m).items() if k not in VOLATILE}, s) for c, e, m, s in rows]
    assert stable(on_ray) == stable(local)


def test_a_failing_cell_is_recorded_and_retried(tmp_path, cache_dir):
    # a dataset not on disk here passes the suite's checks (a Ray cluster's workers may hold it) and fails in
    # its cells; a task the data cannot hold (a missing indices file...) is refused before any cell runs
    suite = {**NO_AUDIT, "grids": [{**TINY["grids"][0], "seeds": [0], "datasets": ["cifar10"]}]}
    path = write_suite(tmp_path / "fail.yaml", suite)
    args = ["bench", str(path), "--db", str(tmp_path / "f.db"), "--out", str(tmp_path / "cells"), "--cache-dir",
            str(cache_dir), "--data-dir", str(tmp_path / "no-data"), "--no-progress"]
    for _attempt in (1, 2):
        r = runner.invoke(app, args)
        assert r.exit_code == 1 and "2 cell(s) failed" in r.output and "FAILED" in r.output, r.output
        assert "0 finished before" in r.output  # failed cells are not finished: each call retries them
    failures = query(tmp_path / "f.db", "SELECT run_id, error FROM failures ORDER BY run_id")
    assert [f[0] for f in failures] == [1, 1, 2, 2] and all("not found under" in f[1] for f in failures)
    assert query(tmp_path / "f.db", "SELECT count(*) FROM cells") == [(0,)]
