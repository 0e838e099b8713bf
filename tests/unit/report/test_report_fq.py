"""Forgetting quality in the leaderboard: forgetting_quality.json files read and checked where they
enter, grouped by task and original seed, and shown as mean ± the Student-t half-width by hand."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_report_tables import by_key, records, t_half  # noqa: F401  (records: the fixture)
from typer.testing import CliRunner

from unlearnkit.errors import UserError
from unlearnkit.report.fq import load_forgetting_quality
from unlearnkit.report.tables import build_tables
from unlearnkit.results import FORGETTING_QUALITY_SCHEMA


def fq_doc(seed, scores, dataset="digits", forget=None):
    forget = forget or {"kind": "classes", "classes": [3], "random": None, "indices_file": None}
    return {"schema": FORGETTING_QUALITY_SCHEMA, "config": {"seed": seed},
            "task": {"dataset": dataset, "model": "small_cnn", "forget": forget},
            "methods": {name: {"control": name in ("retrain", "original"), "final_score": v}
                        for name, v in scores.items()}}


def with_forget(forget, **task):
    """A good file whose task.forget is ``forget`` (and more task keys)."""
    doc = fq_doc(0, {"ga": 0.5})
    doc["task"] = {**doc["task"], "forget": forget, **task}
    return doc


def test_a_final_score_above_one_is_kept(tmp_path):
    """The final score is the forget score times two accuracy ratios (unlearned / retrained), which pass 1
    where the unlearned model is the more accurate: such a file is valid."""
    p = write(tmp_path / "forgetting_quality.json", fq_doc(0, {"ga": 1.004}))
    assert load_forgetting_quality([p])[("digits", "small_cnn", "class 3")] == {"ga": [1.004]}


def write(path, doc):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_files_group_by_task_and_seed_and_a_folder_is_searched(tmp_path):
    write(tmp_path / "a" / "forgetting_quality.json", fq_doc(0, {"ga": 0.5, "retrain": 0.9, "ft": None}))
    write(tmp_path / "b" / "forgetting_quality.json", fq_doc(1, {"ga": 0.7, "retrain": 0.8}))
    write(tmp_path / "c" / "forgetting_quality.json", fq_doc(0, {"ga": 0.1}, dataset="mnist5k"))
    fq = load_forgetting_quality([tmp_path])
    assert fq[("digits", "small_cnn", "class 3")] == {"ga": [0.5, 0.7], "retrain": [0.9, 0.8]}
    assert fq[("mnist5k", "small_cnn", "class 3")] == {"ga": [0.1]}
    # the same task and seed again: the later file wins, no seed counted twice
    again = write(tmp_path / "d.json", fq_doc(1, {"ga": 0.6}))
    fq = load_forgetting_quality([tmp_path / "a", tmp_path / "b", again])
    assert fq[("digits", "small_cnn", "class 3")]["ga"] == [0.5, 0.6]


def test_leaderboard_gains_the_column_only_when_given(records, tmp_path):  # noqa: F811
    plain = by_key(build_tables(records), "leaderboard")[0]
    assert "forgetting quality ↑" not in plain.header
    fq = {("digits", "small_cnn", "class 3"): {"ga": [0.5, 0.7], "retrain": [0.9, 0.8, 0.85]}}
    lb = by_key(build_tables(records, fq), "leaderboard")[0]
    col = lb.header.index("forgetting quality ↑")
    assert lb.header[col - 1] == "MIA AUROC"
    rows = {r[0]: r for r in lb.rows}
    assert rows["ga"][col] == f"{np.mean([0.5, 0.7]):.3f} ± {t_half([0.5, 0.7]):.3f}" == "0.600 ± 1.271"
    assert rows["retrain"][col] == f"0.850 ± {t_half([0.9, 0.8, 0.85]):.3f}"
    assert rows["ft"][col] == "—"
    assert "n = 2, 3" in lb.caption
    assert any(v["metric"] == "forgetting_quality" and v["method"] == "ga" for v in lb.values)


@pytest.mark.parametrize("content,message", [
    ("{not json", "not a readable JSON"),
    (json.dumps({"schema": "unlearnkit.results/1"}), "is not a forgetting_quality.json"),
    (json.dumps({**fq_doc(0, {"ga": "high"})}), "final_score must be a number >= 0 or null"),
    (json.dumps({**fq_doc(0, {"ga": -5})}), "final_score must be a number >= 0 or null, not -5"),
    (json.dumps({**fq_doc(0, {"ga": 0.5}), "methods": {"ga": {"forget_score": 1.5, "final_score": 0.5}}}),
     r"forget_score must be a number in \[0, 1\] or null"),
    # an empty forget set was dropped from the leaderboard without a word
    (json.dumps(with_forget({})), "task.forget names no forget set"),
    (json.dumps(with_forget({"kind": "classes", "classes": [], "random": None})), "task.forget names no forget set"),
    (json.dumps(with_forget({"kind": "classes", "classes": [-1]})), "task.forget.classes"),
    (json.dumps(with_forget({"kind": "classes", "classes": [99]}, num_classes=10)),
     "task.forget.classes must be a whole number in 0..9, not 99"),
    (json.dumps({**fq_doc(0, {}), "config": {"seed": "zero"}}), "config.seed must be a whole number"),
])
def test_bad_files_are_one_error(tmp_path, content, message):
    p = tmp_path / "forgetting_quality.json"
    p.write_text(content)
    with pytest.raises(UserError, match=message):
        load_forgetting_quality([p])


def test_missing_paths_are_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_forgetting_quality([tmp_path / "nope.json"])
    with pytest.raises(UserError, match="no forgetting_quality.json under"):
        load_forgetting_quality([tmp_path])


def test_cli_refuses_a_bad_file_before_writing_anything(tmp_path):
    from unlearnkit.cli import app

    bad = write(tmp_path / "forgetting_quality.json", {"schema": "x"})
    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["report", "--results", str(tmp_path / "none.json"), "--out", str(out),
                                   "--forgetting-quality", str(bad)])
    assert res.exit_code == 2 and "error:" in res.output and "forgetting_quality.json" in res.output
    assert not out.exists()
