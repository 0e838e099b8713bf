"""Installable as a package (issue 31): the version in one place, ``--version``, a light CLI entry point,
the LICENSE pyproject names and the ``py.typed`` marker shipped as package data."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unlearnkit._version import __version__
from unlearnkit.cli import app
from unlearnkit.cli.app import _only_help

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "scipy", "matplotlib", "sklearn")


def test_version_option_prints_the_version_and_exits_0():
    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == f"unlearnkit {__version__}"


def test_the_cli_entry_point_imports_no_heavy_module():
    """``unlearnkit --help`` must not pay for torch or scipy: the entry point and ``import unlearnkit`` load
    them only when a command or a public name needs them (one subprocess: a fresh interpreter)."""
    code = ("import sys, unlearnkit, unlearnkit.cli; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_help_and_version_do_not_tune_the_allocator_but_a_command_does():
    assert _only_help([]) and _only_help(["--help"]) and _only_help(["--version"]) and _only_help(["run", "--help"])
    assert not _only_help(["list"])


def test_pyproject_license_version_and_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = meta["project"]
    assert project["license"] == "MIT"
    assert "LICENSE" in project["license-files"] and (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert project["dynamic"] == ["version"]  # read from src/unlearnkit/_version.py, one place
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "unlearnkit._version.__version__"}
    assert "py.typed" in meta["tool"]["setuptools"]["package-data"]["unlearnkit"]
    assert (ROOT / "src" / "unlearnkit" / "py.typed").is_file()
    # the dev extra installs what requirements-dev.txt adds (pins aside)
    dev = {r.split(">")[0].split("=")[0].split("[")[0].strip() for r in project["optional-dependencies"]["dev"]}
    assert {"timm", "ray", "optuna", "pytest", "hypothesis", "ruff"} <= dev
