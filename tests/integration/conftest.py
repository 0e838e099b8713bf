"""A tiny benchmark on digits, run once per session (in-process) and shared by the bench/report tests."""
from __future__ import annotations

from pathlib import Path

import pytest
from bench_helpers import TINY, TinyBench, write_suite
from typer.testing import CliRunner


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
