"""The tiny digits suite and what the bench tests share (imported by conftest.py and the tests)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

TINY = {"suite": "tiny",
        "defaults": {"recipe": {"epochs": 2}, "references": 1,
                     "audit_config": {"n_splits": 2, "bn_recalibration": False, "head_refit": False, "relearn": False}},
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
