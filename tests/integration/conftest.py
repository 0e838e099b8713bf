"""A tiny benchmark on digits, run once per session (in-process) and shared by the bench/report tests."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

TINY = {"suite": "tiny",
        "defaults": {"recipe": {"epochs": 2},
                     "audit_config": {"n_splits": 2, "n_bootstrap": 20, "bn_recalibration": False, "relearn": False}},
        "grids": [{"name": "class", "datasets": ["digits"], "tasks": [{"forget_classes": [3]}],
                   "methods": ["GA"], "seeds": [0, 1]}]}


@dataclass
class TinyBench:
    suite: Path
    db: Path
    out: Path
    cache: Path
    output: str
    report: Path | None = None

    def args(self, *extra) -> list[str]:
        return ["bench", str(self.suite), "--db", str(self.db), "--out", str(self.out), "--cache-dir",
                str(self.cache), "--no-progress", *extra]


def write_suite(path: Path, suite: dict) -> Path:
    path.write_text(yaml.safe_dump(suite))
    return path


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory, cache_dir) -> TinyBench:
    """4 cells: 2 seeds x (reference, gradient ascent), audited with 2 probe resplits (about 30 s)."""
    from unlearnkit.cli import app

    root = tmp_path_factory.mktemp("tiny-bench")
    tb = TinyBench(write_suite(root / "tiny.yaml", TINY), root / "tiny.db", root / "cells", cache_dir, "")
    r = CliRunner().invoke(app, tb.args())
    assert r.exit_code == 0, r.output
    tb.output = r.output
    return tb


@pytest.fixture(scope="session")
def tiny_report(tiny_bench) -> Path:
    from unlearnkit.cli import app

    out = tiny_bench.db.parent / "report"
    r = CliRunner().invoke(app, ["report", "--db", str(tiny_bench.db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    tiny_bench.report = out
    return out
