"""Issue 44's named cases: files wrong by type or by content, and values a dry run or a report let through.

Each ends in exit code 2, one ``error:`` line, no traceback and nothing written, before any work (the guard
of test_bad_input.py stops a command where its work would begin): an image folder with a ``.png`` that is not
an image or a class folder without images; a 2-D (or 0-d) array of forget indices (it was flattened); an
indices file whose text is not numbers (the error says where, never what: it quoted a system password file's
first line); ``bench --dry-run`` with what the real run refuses; a suite named ``../../../escape``; a
results.json whose ``config.forget_classes`` contradicts its task. And ``--help`` shows flags without a type.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from sample_results import sample_results
from test_bad_input import WorkStarted, assert_refused, baseline, files, guard, runner, with_options  # noqa: F401

from unlearnkit.cli import app

SECRET = "root:x:0:0:SECRET-LINE-44:/root:/bin/bash"


def image_folder(root: Path, broken: str | None = None) -> Path:
    """``root/train|test/<class>/*.png``: two classes of three 8x8 images each; ``broken``: ``text-png`` (a .png
    holding text), ``empty-class`` (a third class folder without images), ``fifo-png`` (a FIFO named .png)."""
    from PIL import Image

    for part in ("train", "test"):
        for c in ("cat", "dog"):
            d = root / part / c
            d.mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (8, 8), (40 * i, 80 if c == "cat" else 160, 0)).save(d / f"{i}.png")
    if broken == "text-png":
        (root / "train" / "cat" / "notes.png").write_text(SECRET + "\n")
    elif broken == "empty-class":
        (root / "train" / "emu").mkdir()
    elif broken == "fifo-png":
        os.mkfifo(root / "train" / "dog" / "pipe.png")
    return root


@pytest.mark.parametrize("broken,words", [
    ("text-png", ["notes.png", "cannot be read as an image"]),
    ("empty-class", ["emu", "holds no image"]),
    ("fifo-png", ["pipe.png", "FIFO"]),
])
def test_an_image_folder_with_a_bad_entry_is_one_line(broken, words, guard, tmp_path):  # noqa: F811
    """Were UnidentifiedImageError and FileNotFoundError tracebacks (and a FIFO would block forever)."""
    root = image_folder(tmp_path / "imgs", broken)
    out = tmp_path / "out"
    result = runner.invoke(app, ["train", "--dataset", f"imagefolder:{root}", "--out", str(out / "m.pt")])
    line = assert_refused(result, out, *words)
    assert all(w in line for w in words) and "SECRET" not in result.output, line


def test_a_good_image_folder_reaches_the_work(guard, tmp_path):  # noqa: F811
    root = image_folder(tmp_path / "imgs")
    result = runner.invoke(app, ["train", "--dataset", f"imagefolder:{root}", "--out", str(tmp_path / "m.pt")])
    assert isinstance(result.exception, WorkStarted), result.output


INDEX_COMMANDS = ["train", "run", "audit", "unlearn"]


@pytest.mark.parametrize("command", INDEX_COMMANDS)
@pytest.mark.parametrize("array,words", [
    (np.arange(12).reshape(3, 4), ["2-D array of shape (3, 4)", "1-D"]),
    (np.array(5), ["0-D array"]),
    (np.zeros((2, 10), dtype=bool), ["2-D array"]),
], ids=["2-D", "0-d", "2-D-mask"])
def test_forget_indices_must_be_one_dimensional(command, array, words, files, guard, tmp_path):  # noqa: F811
    path = tmp_path / "idx.npy"
    np.save(path, array)
    out = tmp_path / "out"
    args = with_options(baseline(command, files, out), ["--forget-indices", str(path)])
    line = assert_refused(runner.invoke(app, args), out, str(path))
    assert all(w in line for w in words), line


@pytest.mark.parametrize("content,where", [
    (SECRET + "\n", "item 1 of line 1"),
    ("1 2 3\n4, 5, six\n", "item 3 of line 2"),
    (b"1 2 \xff\xfe 3\n", "not UTF-8"),
])
def test_an_indices_file_that_is_not_numbers_is_never_quoted(content, where, files, guard, tmp_path):  # noqa: F811
    """``--forget-indices`` and a stream request's ``indices:`` file: the error says where the file stops being
    numbers, and quotes none of it."""
    path = tmp_path / "idx.txt"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out"
    args = baseline("train", files, out) + ["--forget-indices", str(path), "--retrain"]
    line = assert_refused(runner.invoke(app, args), out, where)
    assert "SECRET" not in line and "six" not in line, line
    requests = tmp_path / "requests.yaml"
    requests.write_text(f"- classes: [3]\n- indices: {path.name}\n")
    args = baseline("stream", {**files, "requests": str(requests)}, out)
    line = assert_refused(runner.invoke(app, args), out, where)
    assert "SECRET" not in line and "six" not in line, line


SUITE = {"suite": "t", "grids": [{"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["finetune"],
                                  "seeds": [0]}]}


@pytest.mark.parametrize("extra,suite,words", [
    ([], {"tasks": [{"forget_classes": [99]}]}, ["forget class 99 is out of range"]),
    (["--jobs", "0"], {}, ["--jobs"]),
    (["--executor", "bogus"], {}, ["unknown executor 'bogus'"]),
    (["--device", "meta"], {}, ["--device"]),
], ids=["class-99", "jobs-0", "executor-bogus", "device-meta"])
def test_bench_dry_run_refuses_what_the_run_refuses(extra, suite, words, guard, tmp_path):  # noqa: F811
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "grids": [{**SUITE["grids"][0], **suite}]}))
    out = tmp_path / "out"
    result = runner.invoke(app, ["bench", str(path), "--db", str(out / "s.db"), "--dry-run", *extra])
    assert_refused(result, out, *words)
    result = runner.invoke(app, ["bench", str(path), "--db", str(out / "s.db"), "--out", str(out), *extra])
    assert_refused(result, out, *words)


@pytest.mark.parametrize("name", ["../../../escape", "a/b", "..", ".", "tab\there", "x" * 101, ["x"]],
                         ids=["climbs-out", "a-folder", "dot-dot", "dot", "control-char", "too-long", "a-list"])
def test_a_suite_name_is_one_plain_folder_name(name, guard, tmp_path, monkeypatch):  # noqa: F811
    """A suite named ``../../../escape`` wrote its run files outside the working folder (results/<suite>)."""
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    path = work / "suite.yaml"
    path.write_text(yaml.safe_dump({**SUITE, "suite": name}))
    result = runner.invoke(app, ["bench", str(path), "--db", "s.db", "--no-progress"])
    assert_refused(result, work / "results", "suite")
    assert sorted(os.listdir(tmp_path)) == ["work"] and sorted(os.listdir(work)) == ["suite.yaml"]


def test_a_plain_suite_name_with_spaces_reaches_the_work(guard, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.chdir(tmp_path)
    for name in ("my suite v2", "2024-12"):
        (tmp_path / "suite.yaml").write_text(yaml.safe_dump({**SUITE, "suite": name}))
        result = runner.invoke(app, ["bench", "suite.yaml", "--db", "s.db", "--no-progress"])
        assert isinstance(result.exception, WorkStarted), result.output


def test_cell_folders_never_climb_out():
    from unlearnkit.bench.grid import _slug

    assert [_slug(t) for t in ("..", ".", "...", "a/../b", "random 10%")] == ["_", "_", "_", "a_.._b", "random_10"]


@pytest.mark.parametrize("change,words", [
    ({"forget_classes": [99]}, ["config.forget_classes", "99"]),
    ({"forget_classes": [4]}, ["config.forget_classes [4] contradicts task.forget.classes [3]"]),
    ({"forget_random": 0.1}, ["config.forget_random 0.1 contradicts"]),
], ids=["class-99", "another-class", "random-on-a-class-task"])
def test_report_refuses_a_config_that_contradicts_its_task(change, words, files, guard, tmp_path):  # noqa: F811
    res = sample_results()
    res["config"].update(change)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(res))
    out = tmp_path / "out"
    line = assert_refused(runner.invoke(app, ["report", "--results", str(path), "--out", str(out)]), out, *words)
    assert all(w in line for w in words), line


def test_report_accepts_a_config_that_agrees_with_its_task(files, guard, tmp_path):  # noqa: F811
    res = sample_results()
    res["config"].update(forget_classes=[3], forget_random=None)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(res))
    result = runner.invoke(app, ["report", "--results", str(path), "--out", str(tmp_path / "out")])
    assert isinstance(result.exception, WorkStarted), result.output


@pytest.mark.parametrize("args", [["--help"], ["unlearn", "--help"], ["bench", "--help"], ["run", "--help"]])
def test_help_shows_flags_without_a_value_type(args):
    """``--version <bool>`` read as if the flag took a value."""
    result = runner.invoke(app, args, terminal_width=160)
    assert result.exit_code == 0 and "<bool>" not in result.output, result.output
    assert "--help" in result.output
