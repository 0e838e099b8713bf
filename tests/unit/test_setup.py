"""README's set-up: the Makefile refuses a disk too full for the virtual environment before creating it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_refuses_a_full_disk_in_one_line_and_creates_nothing(tmp_path):
    venv = tmp_path / "venv"
    # A threshold no disk meets stands in for a full disk; the venv's parent is tmp_path.
    proc = subprocess.run(["make", "-C", str(ROOT), f"{venv}/bin/python", f"VENV={venv}", f"PY={sys.executable}",
                           "MIN_FREE_GIB=1000000000"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert f"GiB free in {tmp_path}" in errors[0] and "needs about 1000000000 GiB" in errors[0]
    assert not venv.exists()

