"""`unlearnkit report --results`: a results.json that is JSON but not usable ends in one `error:` line
(exit 2, no traceback, no report folder), never in a report whose cells.csv carries a non-number."""
from __future__ import annotations

import copy
import csv
import json
import math

import pytest
from sample_results import sample_results  # tests/ is on sys.path (its conftest.py)
from typer.testing import CliRunner

from unlearnkit.cli import app

runner = CliRunner()


def results() -> dict:
    return sample_results()


def report(path, tmp_path):
    return runner.invoke(app, ["report", "--results", str(path), "--out", str(tmp_path / "out")])


def assert_one_error_line(r, tmp_path, *fragments):
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.output and "Traceback" not in r.stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    assert not (tmp_path / "out").exists()


def test_a_good_results_json_reports(tmp_path):
    res = results()
    res["models"]["gradient_ascent"]["metrics"]["mia_auc"] = math.nan  # Python's json writes NaN: read as null
    path = tmp_path / "results.json"
    path.write_text(json.dumps(res))
    r = report(path, tmp_path)
    assert r.exit_code == 0, r.output
    cells = list(csv.DictReader((tmp_path / "out" / "cells.csv").open()))
    assert [c["method"] for c in cells] == ["original", "retrain", "gradient_ascent"]
    ga = cells[2]
    assert float(ga["forget_acc"]) == 1.0 and ga["mia_auc"] == "" and ga["test_forget_acc"] == ""
    assert float(ga["delta_lpr_penultimate"]) == 3.0 and ga["verdict"] == "suppressed"
    r = report(tmp_path, tmp_path)  # the folder of a results.json
    assert r.exit_code == 0, r.output


def set_(keys: str, value):
    """Set (or, with value DELETE, remove) a dotted key of the results dict."""
    def change(res):
        *parents, last = keys.split(".")
        d = res
        for k in parents:
            d = d[k]
        if value is DELETE:
            del d[last]
        else:
            d[last] = copy.deepcopy(value)
        return res
    return change


DELETE = object()
GA = "models.gradient_ascent"
BAD = {
    "no models": (set_("models", {}), ["holds no models"]),
    "models missing": (set_("models", DELETE), ["models is missing"]),
    "models a list": (lambda res: {**res, "models": list(res["models"].values())},
                      ["models must be a mapping", "not a list"]),
    "a model row a list": (set_(GA, [1.0, 2.0]), [f"{GA} must be a mapping, not a list"]),
    "a model without metrics": (set_(f"{GA}.metrics", DELETE), [f"{GA}.metrics is missing"]),
    "metrics null": (set_(f"{GA}.metrics", None), [f"{GA}.metrics must be a mapping, not null"]),
    "metrics a list": (set_(f"{GA}.metrics", [1.0, 2.0]), [f"{GA}.metrics must be a mapping, not a list"]),
    "a metric a string": (set_(f"{GA}.metrics.forget_acc", "abc"),
                          [f"{GA}.metrics.forget_acc must be a number", "not 'abc'"]),
    "a metric a list": (set_(f"{GA}.metrics.gap", [1.0]), [f"{GA}.metrics.gap must be a number", "not a list"]),
    "a metric a bool": (set_(f"{GA}.metrics.gap", True), [f"{GA}.metrics.gap must be a number", "not true"]),
    "a metric a mapping": (set_("models.retrain.metrics.speedup", {"x": 1}),
                           ["models.retrain.metrics.speedup must be a number", "not a mapping"]),
    "a metric infinite": (set_(f"{GA}.metrics.speedup", math.inf),
                          [f"{GA}.metrics.speedup must be a finite number", "not inf"]),
    "an extra metric a string": (set_(f"{GA}.metrics.ua_f", "12%"), [f"{GA}.metrics.ua_f", "not '12%'"]),
    "task not a mapping": (set_("task", "digits"), ["task must be a mapping, not 'digits'"]),
    "task a list": (set_("task", ["digits"]), ["task must be a mapping, not a list"]),
    "missing task": (set_("task", DELETE), ["task is missing"]),
    "task without dataset": (set_("task.dataset", DELETE), ["task.dataset is missing"]),
    "dataset a number": (set_("task.dataset", 7), ["task.dataset must be text, not 7"]),
    "task without forget": (set_("task.forget", DELETE), ["task.forget is missing"]),
    "forget a list": (set_("task.forget", [3]), ["task.forget must be a mapping, not a list"]),
    "forget classes text": (set_("task.forget.classes", "3"), ["task.forget.classes must be a list", "not '3'"]),
    "forget class not whole": (set_("task.forget.classes", [3.5]), ["task.forget.classes[0] must be a whole number"]),
    "forget random text": (set_("task.forget.random", "10%"), ["task.forget.random must be a number", "'10%'"]),
    "vfl without parties": (set_("task.setting", "vfl"), ["task.parties is missing"]),
    "missing config": (set_("config", DELETE), ["config is missing"]),
    "seed text": (set_("config.seed", "0"), ["config.seed must be a whole number", "'0'"]),
    "provenance a list": (set_("provenance", []), ["provenance must be a mapping", "not a list"]),
    "versions text": (set_("provenance.versions", "2.4"), ["provenance.versions must be a mapping", "'2.4'"]),
    "audit a list": (set_(f"{GA}.audit", []), [f"{GA}.audit must be a mapping", "not a list"]),
    "verdict a number": (set_(f"{GA}.audit.verdict", 1), [f"{GA}.audit.verdict must be text", "not 1"]),
    "audit layers a list": (set_(f"{GA}.audit.layers", ["penultimate"]), [f"{GA}.audit.layers must be a mapping"]),
    "an audit number text": (set_(f"{GA}.audit.layers.penultimate.delta_lpr", "n/a"),
                             [f"{GA}.audit.layers.penultimate.delta_lpr must be a number", "not 'n/a'"]),
    "an audit interval text": (set_(f"{GA}.audit.layers.penultimate.delta_lpr_ci", "[1, 2]"),
                               [f"{GA}.audit.layers.penultimate.delta_lpr_ci must be a list [low, high]"]),
    "an audit interval end text": (set_(f"{GA}.audit.layers.penultimate.delta_lpr_ci", [1.0, "x"]),
                                   [f"{GA}.audit.layers.penultimate.delta_lpr_ci[1] must be a number"]),
    "idi text": (set_(f"{GA}.audit.idi.idi", "0.3"), [f"{GA}.audit.idi.idi must be a number", "not '0.3'"]),
    "transmitted layers text": (set_(f"{GA}.audit.transmitted", {"layers": "embedding"}),
                                [f"{GA}.audit.transmitted.layers must be a list"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_results_json_is_one_error_line(case, tmp_path):
    change, fragments = BAD[case]
    path = tmp_path / "x.json"
    path.write_text(json.dumps(change(results())))
    r = report(path, tmp_path)
    assert_one_error_line(r, tmp_path, f"results.json {path}: " if "no models" not in case else str(path),
                          *fragments)


@pytest.mark.parametrize("content, fragment", [
    ("[1, 2]", "is not an unlearnkit results.json"),                     # JSON, but a list
    ("{}", "is not an unlearnkit results.json"),                         # an empty object
    ('{"schema": "other/1", "models": {}}', "no schema unlearnkit.results/1"),
    ("{not json", "is not a results.json"),
    ("", "is not a results.json"),
])
def test_not_a_results_json(content, fragment, tmp_path):
    path = tmp_path / "x.json"
    path.write_text(content)
    assert_one_error_line(report(path, tmp_path), tmp_path, fragment)


def test_a_folder_and_a_missing_file(tmp_path):
    folder = tmp_path / "x.json"
    folder.mkdir()  # a folder (without a results.json in it) where a file belongs
    assert_one_error_line(report(folder, tmp_path), tmp_path, "does not exist")
    (folder / "results.json").mkdir()  # a folder named results.json
    assert_one_error_line(report(folder, tmp_path), tmp_path, "is a folder")
    assert_one_error_line(report(tmp_path / "none.json", tmp_path), tmp_path, "does not exist")


def test_out_and_db_are_checked_before_any_work(tmp_path):
    good = tmp_path / "results.json"
    good.write_text(json.dumps(results()))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out, fragment in [(blocker, "--out"), (blocker / "sub", "--out")]:
        r = runner.invoke(app, ["report", "--results", str(good), "--out", str(out)])
        assert r.exit_code == 2 and r.stderr.startswith(f"error: {fragment} ") and len(r.stderr.splitlines()) == 1
    for db, fragment in [(tmp_path / "none.db", "does not exist"), (tmp_path, "is a folder")]:
        r = runner.invoke(app, ["report", "--db", str(db), "--out", str(tmp_path / "out")])
        assert r.exit_code == 2 and r.stderr.startswith("error: --db ") and fragment in r.stderr, r.stderr
        assert len(r.stderr.splitlines()) == 1 and not (tmp_path / "out").exists()
