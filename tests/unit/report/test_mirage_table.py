"""One Mirage table: results.md (``unlearnkit run``) and report.md (``unlearnkit report``) print the same
numbers for the same results, read on the audit data the verdict rests on (``rests_on``)."""
from __future__ import annotations

import copy
import re

import pytest
from sample_results import sample_results  # tests/ is on sys.path (its conftest.py)

from unlearnkit.mirage_table import COLUMNS
from unlearnkit.report import load_records, make_report
from unlearnkit.runner import write_results

NUMBER = re.compile(r"[-+]?\d+\.\d+")


def numbers(cell: str) -> list[float]:
    return [float(x) for x in NUMBER.findall(cell)]


def markdown_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after the line starting with ``heading`` (header first)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    table = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif table:
            break
    return [r for r in table if not set("".join(r)) <= set("-")]  # without the |---| line


def results_md_table(results: dict, out) -> dict[str, dict[str, str]]:
    """results.md's Mirage table as ``{model: {column header: cell}}``."""
    write_results(results, out)
    header, *rows = markdown_rows((out / "results.md").read_text(), "## Representation (Mirage layout)")
    return {r[0]: dict(zip(header, r)) for r in rows}


def report_md_table(out, report) -> dict[str, dict[str, str]]:
    """report.md's Mirage table (metrics as rows) as ``{model: {row label: cell}}``."""
    records, _ = load_records(results=[out / "results.json"])
    make_report(records, report, ["test"])
    header, *rows = markdown_rows((report / "report.md").read_text(), "### Mirage layout")
    return {m: {r[0]: r[1 + i] for r in rows} for i, m in enumerate(header[1:])}


def resting_on(data: str, vfl: bool = False) -> dict:
    """The sample results with every audit's verdict resting on ``data``; ``vfl``: a VFL run whose
    audits also hold the transmitted ``embedding`` (with numbers of its own)."""
    res = copy.deepcopy(sample_results())
    for entry in res["models"].values():
        a = entry["audit"]
        if not a:
            continue
        if vfl:
            for d in a["audit_data"].values():
                pen = d["layers"]["penultimate"]
                d["layers"]["embedding"] = {**pen, "lpr": pen["lpr"] - 3.0,
                                            "delta_lpr": pen["delta_lpr"] + 0.5,
                                            "separability": pen["separability"] + 0.125}
            a["transmitted"] = {"layers": ["party0", "party1", "embedding"]}
        a["rests_on"] = data
        a["layers"] = a["audit_data"][data]["layers"]
    if vfl:
        res["task"].update(setting="vfl", parties=2, bottom="small_cnn")
    return res


@pytest.mark.parametrize("data,vfl", [("train", False), ("test", False), ("train", True)])
def test_results_md_and_report_md_print_the_same_mirage_numbers(tmp_path, data, vfl):
    res = resting_on(data, vfl)
    run = results_md_table(res, tmp_path / "run")
    rep = report_md_table(tmp_path / "run", tmp_path / "report")
    assert set(run) == set(rep) == set(res["models"])
    compared = 0
    for model in res["models"]:
        for col in COLUMNS:
            assert numbers(run[model][col.header]) == numbers(rep[model][col.label]), (model, col.header)
            compared += len(numbers(run[model][col.header]))
    assert compared >= len(COLUMNS) * len(res["models"]) - 1  # a number in every cell but retrain's ΔLPR

    # the numbers are those of the data the verdict rests on, at the layer Mirage reads
    layer = "embedding" if vfl else "penultimate"
    other = {"train": "test", "test": "train"}[data]
    audit = res["models"]["gradient_ascent"]["audit"]
    shown = audit["audit_data"][data]["layers"][layer]
    not_shown = audit["audit_data"][other]["layers"][layer]
    for col, key in (("LPR", "lpr"), ("F", "separability"), ("CKA orig.", "cka_original")):
        assert shown[key] != not_shown[key]
        assert numbers(run["gradient_ascent"][col]) == numbers(f"{shown[key]:.3f}" if col != "LPR" else
                                                                f"{shown[key]:.1f}")
    assert numbers(run["retrain"]["LPR"]) == [round(shown["lpr_retrained"], 1)]


def test_results_md_names_the_data_the_verdict_rests_on(tmp_path):
    res = resting_on("train")
    write_results(res, tmp_path)
    md = (tmp_path / "results.md").read_text()
    protocol = res["models"]["original"]["audit"]["audit_data"]["train"]["protocol"]
    assert f"on its train data ({protocol}), the data its verdict rests on" in md


def test_results_json_writes_a_nan_of_a_method_history_as_null(tmp_path):
    """EC's history on random forgetting has val_forget_acc = NaN (no forgotten-class val rows); results.json
    is strict JSON, so it is written as null instead of failing the run (a bench cell failed on it)."""
    import json

    res = copy.deepcopy(sample_results())
    name = next(k for k in res["models"] if k not in ("original", "retrain"))
    res["models"][name]["history"] = [{"epoch": 1, "val_forget_acc": float("nan")}]
    write_results(res, tmp_path)
    got = json.loads((tmp_path / "results.json").read_text())
    assert got["models"][name]["history"] == [{"epoch": 1, "val_forget_acc": None}]
