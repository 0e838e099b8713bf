"""The library logs through ``logging`` (issue 31): a NullHandler on ``unlearnkit``, library warnings a user
silences with the logger's level, and the CLI shows the same messages on stderr, literally."""
from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from unlearnkit import training
from unlearnkit.cli import app
from unlearnkit.cli.app import _ConsoleHandler, show_logs


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept():
    logger = logging.getLogger("unlearnkit")
    handler, level = Kept(), logger.level
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_the_package_logger_has_a_null_handler():
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("unlearnkit").handlers)


def test_a_library_warning_is_logged_and_can_be_silenced(kept, tmp_path):
    bad = tmp_path / "original.pt"
    bad.write_bytes(b"not a checkpoint")
    logging.getLogger("unlearnkit").setLevel(logging.WARNING)
    assert training._cached(bad, "original") is None
    [record] = kept.records
    assert record.name == "unlearnkit.training" and record.levelno == logging.WARNING
    assert "cached original model unusable" in record.getMessage()
    kept.records.clear()
    logging.getLogger("unlearnkit").setLevel(logging.ERROR)
    assert training._cached(bad, "original") is None
    assert kept.records == []


def test_the_cli_shows_library_messages_literally(capsys):
    logger = logging.getLogger("unlearnkit")
    level = logger.level
    try:
        show_logs()
        show_logs()  # once per process
        assert sum(isinstance(h, _ConsoleHandler) for h in logger.handlers) == 1
        logging.getLogger("unlearnkit.training").warning("cached %s model unusable", "[red]x$[/]")
        assert "cached [red]x$[/] model unusable" in capsys.readouterr().err
    finally:
        logger.handlers[:] = [h for h in logger.handlers if not isinstance(h, _ConsoleHandler)]
        logger.setLevel(level)


def test_a_command_turns_the_messages_on():
    logger = logging.getLogger("unlearnkit")
    level = logger.level
    try:
        assert CliRunner().invoke(app, ["list", "datasets"]).exit_code == 0
        assert any(isinstance(h, _ConsoleHandler) for h in logger.handlers)
    finally:
        logger.handlers[:] = [h for h in logger.handlers if not isinstance(h, _ConsoleHandler)]
        logger.setLevel(level)
