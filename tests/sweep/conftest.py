"""Fixtures of the bad-input sweep (harness.py): the files every case draws from (made once per session) and
the guard that stops each command or function where its work would begin."""
from __future__ import annotations

import pytest
from harness import install_guard, make_files


@pytest.fixture(scope="session")
def sweep_files(tmp_path_factory, digits_original, cache_dir):
    return make_files(tmp_path_factory.mktemp("sweep-inputs"), digits_original)


@pytest.fixture
def guard(monkeypatch):
    install_guard(monkeypatch)
