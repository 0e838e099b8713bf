"""Fixtures of the bad-input sweep (harness.py): the files every case draws from (made once per session) and
the guard that stops each command or function where its work would begin."""
from __future__ import annotations

import pytest
from harness import install_guard, make_files


@pytest.fixture(scope="session")
def sweep_files(tmp_path_factory, cache_dir):
    """The inputs; its checkpoint is an untrained small CNN of digits' shape (no case gets past the checks to
    use its weights, and the sweep needs no training: it stays fast)."""
    from unlearnkit import create_model

    model = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)
    return make_files(tmp_path_factory.mktemp("sweep-inputs"), model)


@pytest.fixture
def guard(monkeypatch):
    install_guard(monkeypatch)
