"""`unlearnkit report`: numbers of the right type but out of their range (an accuracy of 1e308 or -50, a
verdict the audit never gives, a class the dataset does not have) end in one `error:` line before anything
is written, from a results.json and from a results store alike."""
from __future__ import annotations

import json

import pytest
from test_report_inputs import GA, assert_one_error_line, report, results, set_

from unlearnkit.errors import UserError
from unlearnkit.report.records import from_store
from unlearnkit.results import VERDICTS, metric_range

OUT_OF_RANGE = {
    "forget accuracy huge": (set_(f"{GA}.metrics.forget_acc", 1e308), ["metrics.forget_acc must be >= 0 and <= 100",
                                                                       "1e+308"]),
    "forget accuracy negative": (set_(f"{GA}.metrics.forget_acc", -50), ["metrics.forget_acc", "not -50"]),
    "retain accuracy above 100": (set_(f"{GA}.metrics.retain_acc", 100.5), ["metrics.retain_acc", "<= 100"]),
    "test forget accuracy negative": (set_(f"{GA}.metrics.test_forget_acc", -1), ["metrics.test_forget_acc"]),
    "an extra accuracy": (set_(f"{GA}.metrics.val_acc", 101), ["metrics.val_acc"]),
    "mia efficacy above 100": (set_(f"{GA}.metrics.mia_efficacy", 150), ["metrics.mia_efficacy", "<= 100"]),
    "mia auroc above 1": (set_(f"{GA}.metrics.mia_auc", 1.5), ["metrics.mia_auc", "<= 1", "not 1.5"]),
    "gap negative": (set_(f"{GA}.metrics.gap", -2), ["metrics.gap"]),
    "runtime negative": (set_(f"{GA}.metrics.runtime_s", -1), ["metrics.runtime_s must be >= 0"]),
    "verdict unknown": (set_(f"{GA}.audit.verdict", "banana"), ["audit.verdict must be one of", "'banana'"]),
    "forget class the dataset lacks": (set_("task.forget.classes", [99]),
                                       ["task.forget.classes must be a whole number in 0..9, not 99"]),
    "forget class negative": (set_("task.forget.classes", [-1]), ["task.forget.classes"]),
    "num_classes zero": (set_("task.num_classes", 0), ["task.num_classes"]),
    "no forget set": (set_("task.forget", {"kind": "classes", "classes": [], "random": None}),
                      ["task.forget names no forget set"]),
}


@pytest.mark.parametrize("case", list(OUT_OF_RANGE))
def test_an_out_of_range_results_json_is_one_error_line(case, tmp_path):
    change, fragments = OUT_OF_RANGE[case]
    path = tmp_path / "x.json"
    path.write_text(json.dumps(change(results())))
    assert_one_error_line(report(path, tmp_path), tmp_path, f"results.json {path}: ", *fragments)


def test_values_at_the_ends_of_their_ranges_are_reported(tmp_path):
    res = results()
    m = res["models"]["gradient_ascent"]["metrics"]
    m.update(forget_acc=0.0, retain_acc=100.0, mia_auc=1.0, mia_efficacy=0.0, speedup=None)
    res["task"]["forget"]["classes"] = [9]
    path = tmp_path / "x.json"
    path.write_text(json.dumps(res))
    r = report(path, tmp_path)
    assert r.exit_code == 0, r.output


def test_the_report_knows_the_audits_verdicts():
    """results.VERDICTS names the audit's verdicts without importing the auditor: the two stay equal."""
    from unlearnkit.audit.verdict import VERDICTS as AUDIT_VERDICTS

    assert tuple(VERDICTS) == tuple(AUDIT_VERDICTS)
    assert metric_range("test_retain_acc") == (0.0, 100.0) and metric_range("mia_auc") == (0.0, 1.0)
    assert metric_range("some_new_number") is None


def store_row(**metrics) -> dict:
    res = results()
    ga = res["models"]["gradient_ascent"]
    return {"cell_id": "c1", "entry": "gradient_ascent", "kind": "method", "label": "gradient_ascent",
            "dataset": "digits", "model": "small_cnn", "task": "class 3", "seed": 0, "config": {},
            "metrics": {**ga["metrics"], **metrics}, "audit": ga["audit"],
            **{k: None for k in ("config_hash", "split_hash", "original_sha256", "retrain_sha256",
                                 "unlearned_sha256", "unlearnkit_version", "git_commit", "torch_version",
                                 "device", "finished", "wall_s")}}


def test_a_stores_rows_are_range_checked_too(tmp_path):
    assert len(from_store(tmp_path / "s.db", [store_row()])) == 1
    with pytest.raises(UserError, match=r"cell c1 gradient_ascent: metrics.forget_acc must be >= 0 and <= 100"):
        from_store(tmp_path / "s.db", [store_row(forget_acc=-50)])
    row = store_row()
    row["audit"] = {**row["audit"], "verdict": "banana"}
    with pytest.raises(UserError, match="audit.verdict must be one of erased"):
        from_store(tmp_path / "s.db", [row])
