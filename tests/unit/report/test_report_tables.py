"""Report tables from hand-made records: mean ± 95 % interval over seeds, layouts, IDI, retrain views."""
from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from unlearnkit.report import make_report
from unlearnkit.report.records import Record, with_retrain_views
from unlearnkit.report.stats import fmt, stat, verdicts
from unlearnkit.report.tables import build_tables


def audit(delta, ci=(-1.0, 1.0), idi=None, verdict="suppressed"):
    layers = {name: {"lpr": 90 + delta, "delta_lpr": delta + i, "delta_lpr_ci": [ci[0] + i, ci[1] + i],
                     "cka_original": 0.9, "cka_retrain": 0.8, "separability": 0.5, "separability_ratio": 1.5,
                     "lpr_retrained": 88.0, "separability_retrained": 0.3, "cka_retrain_original": 0.7}
              for i, name in enumerate(["block1", "penultimate"])}
    a = {"verdict": verdict, "penultimate_layer": "penultimate", "layers": layers}
    if idi is not None:
        a["idi"] = {"idi": idi}
    return a


def metrics(**kw):
    base = {"forget_acc": 1.0, "retain_acc": 99.0, "test_acc": 97.0, "test_acc_full": 88.0, "test_forget_acc": 2.0,
            "test_retain_acc": 97.0, "mia_efficacy": 100.0, "mia_auc": 0.5, "gap": 1.0, "h_mean": 97.0,
            "runtime_s": 2.0, "speedup": 5.0}
    return {**base, **kw}


@pytest.fixture
def records():
    out = []
    for seed, (gap, delta) in enumerate([(1.0, 2.0), (2.0, 4.0), (4.5, 3.0)]):
        out.append(Record("digits", "small_cnn", "class 3", seed, "retrain", metrics(gap=0.0, test_forget_acc=0.0)))
        out.append(Record("digits", "small_cnn", "class 3", seed, "original", metrics(forget_acc=100.0),
                          audit(5.0, verdict="not_forgotten")))
        out.append(Record("digits", "small_cnn", "class 3", seed, "ga", metrics(gap=gap), audit(delta, idi=0.1 * seed)))
        out.append(Record("digits", "small_cnn", "class 3", seed, "ft", metrics(test_forget_acc=None, forget_acc=50.0),
                          audit(1.0, verdict="erased" if seed else "suppressed")))
    return with_retrain_views(out)


def by_key(tables, key):
    return [t for t in tables if t.key == key]


def t_half(values, confidence=0.95):
    """The half-width of the Student-t interval of the mean, by hand (scipy's t quantile)."""
    v = np.asarray(values, dtype=float)
    return student_t.ppf(0.5 + confidence / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v))


def test_mean_interval_and_formatting():
    s = stat([1.0, 2.0, 4.5, None, float("nan")])
    assert s.n == 3 and s.mean == pytest.approx(np.mean([1, 2, 4.5]))
    assert s.std == pytest.approx(np.std([1, 2, 4.5], ddof=1))
    # 4.302653 = t_{0.975, 2} (tables); std 1.8028 -> half-width 4.4785
    assert t_half([1, 2, 4.5]) == pytest.approx(4.302653 * 1.802776 / math.sqrt(3), rel=1e-5)
    assert fmt(s, "{:.2f}") == f"{np.mean([1, 2, 4.5]):.2f} ± {t_half([1, 2, 4.5]):.2f}" == "2.50 ± 4.48"
    assert fmt(stat([3.0]), "{:+.1f}") == "+3.0" and fmt(None) == "—" and stat([None]) is None
    assert verdicts(["erased", "erased"]) == "erased 2/2"
    assert verdicts(["erased", "suppressed", "erased"]) == "erased 2, suppressed 1 /3"


def test_tables_hold_the_numbers(records):
    tables = build_tables(records)
    tarf = by_key(tables, "tarf")[0]
    assert tarf.header == ["task", "data / model", "ga", "ft"]
    gaps = [1.0, 2.0, 4.5]
    assert tarf.rows[0][2] == f"{np.mean(gaps):.2f} ± {t_half(gaps):.2f}"

    mirage = by_key(tables, "mirage")[0]
    assert mirage.header[:3] == ["metric", "retrain", "original"]
    row = {r[0]: r[1:] for r in mirage.rows}
    deltas = np.array([2.0, 4.0, 3.0]) + 1  # penultimate = delta + 1 in these audits
    half = student_t.ppf(0.975, 2) * deltas.std(ddof=1) / math.sqrt(3)
    m = deltas.mean()
    assert row["ΔLPR (%) [CI]"][2] == f"{m:+.1f} ± {half:.1f}"
    assert row["ΔLPR (%) [CI]"][0] == "—"                    # retrain is the reference
    assert row["LPR (%)"][0] == "88.0 ± 0.0" and row["CKA to original"][0] == "0.700 ± 0.000"   # retrain's view
    assert row["y_u forget acc (%) ↓"][3] == "50.0 ± 0.0"           # no test forget samples: train forget acc
    assert row["verdict"][3] == "erased 2, suppressed 1 /3"

    ec = by_key(tables, "ec")[0]
    ec_rows = {r[0]: r for r in ec.rows}
    assert ec_rows["ga"][2] == f"{np.mean([0.0, 0.1, 0.2]):.3f} ± {t_half([0, 0.1, 0.2]):.3f}"
    assert ec_rows["ft"][2] == "—"                            # no IDI in that audit
    assert ec_rows["ga"][1] == "90.00 ± 0.00"

    purge = {r[0]: r for r in by_key(tables, "purge")[0].rows}
    assert purge["original"][5] == "—" and purge["ga"][1] == "88.0 ± 0.0" and purge["ga"][5] == "5.0 ± 0.0x"

    layers = by_key(tables, "layers")[0]
    assert [r[:2] for r in layers.rows if r[0] == "ga"] == [["ga", "block1"], ["ga", "penultimate"]]
    assert not any(r[0] == "retrain" for r in layers.rows)


def test_single_seed_uses_the_audit_interval():
    recs = with_retrain_views([Record("d", "m", "t", 0, "retrain", metrics()),
                               Record("d", "m", "t", 0, "ga", metrics(), audit(2.0, ci=(0.5, 3.5)))])
    mirage = by_key(build_tables(recs), "mirage")[0]
    row = {r[0]: r[1:] for r in mirage.rows}
    assert row["ΔLPR (%) [CI]"][1] == "+3.0 [+1.5, +4.5]"


def test_report_files_and_csv_match_the_tables(records, tmp_path):
    paths = make_report(records, tmp_path, ["test"])
    html = paths["html"].read_text()
    # trilemma, runtime, layer-wise ΔLPR, separability ratio per layer
    assert html.count("<table") == len(paths["tables"]) and html.count('src="data:image/png;base64,') == 4
    assert 'data-figure="separability"' in html
    assert "http" not in html.split("</head>")[0]               # nothing fetched
    md = paths["md"].read_text()
    assert "| metric | retrain | original | ga | ft |" in md and "report_files/trilemma.png" in md
    assert (tmp_path / "report_files" / "trilemma.png").stat().st_size > 1000
    rows = list(csv.DictReader(paths["summary"].open()))
    gap = next(r for r in rows if r["table"] == "tarf" and r["method"] == "ga")
    assert float(gap["mean"]) == pytest.approx(np.mean([1.0, 2.0, 4.5])) and gap["n"] == "3"
    cells = list(csv.DictReader(paths["cells"].open()))
    assert len(cells) == len(records)
    assert {c["verdict"] for c in cells if c["method"] == "ft"} == {"erased", "suppressed"}


def test_vfl_records_are_read_at_the_transmitted_embedding():
    """For a VFL model the tables read the concatenated embedding the parties transmit (Mirage's
    audit features), also for retrain's view; other models keep the penultimate layer."""
    def vfl_audit(verdict):
        a = audit(0.0, verdict=verdict)
        a["layers"]["embedding"] = {**a["layers"]["penultimate"], "lpr": 77.0, "lpr_retrained": 66.0,
                                    "delta_lpr": 11.0, "delta_lpr_ci": [10.0, 12.0]}
        a["transmitted"] = {"layers": ["party0", "party1", "embedding"]}
        return a

    recs = with_retrain_views([
        Record("digits", "mirage_bottom", "class 3", 0, "retrain", metrics(gap=0.0)),
        Record("digits", "mirage_bottom", "class 3", 0, "original", metrics(), vfl_audit("not_forgotten")),
        Record("digits", "mirage_bottom", "class 3", 0, "ga", metrics(), vfl_audit("suppressed")),
        Record("digits", "small_cnn", "class 3", 0, "retrain", metrics(gap=0.0)),
        Record("digits", "small_cnn", "class 3", 0, "ga", metrics(), audit(0.0))])
    mirage = {t.block[1]: {r[0]: r[1:] for r in t.rows} for t in by_key(build_tables(recs), "mirage")}
    assert mirage["mirage_bottom"]["LPR (%)"] == ["66.0", "77.0", "77.0"]
    assert mirage["mirage_bottom"]["ΔLPR (%) [CI]"][2] == "+11.0 [+10.0, +12.0]"
    assert mirage["small_cnn"]["LPR (%)"][1] == "90.0"          # penultimate of the plain model


def test_vfl_blocks_are_named_by_their_setting():
    from unlearnkit.results import model_label

    assert model_label({"setting": "vfl", "parties": 4, "model": "mirage_bottom"}) == \
        "vfl (4 parties, bottom mirage_bottom)"
    assert model_label({"setting": "standard", "parties": 2, "model": "small_cnn"}) == "small_cnn"
    assert model_label({"model": "small_cnn"}) == "small_cnn"    # stores and results.json written before VFL


def test_leaderboard_rows_and_its_own_page(records, tmp_path):
    from unlearnkit.report.build import make_report

    lb = by_key(build_tables(records), "leaderboard")[0]
    assert lb.header[0] == "method" and lb.header[-1] == "verdicts"
    rows = {r[0]: r for r in lb.rows}
    assert rows["ga"][3] == f"{np.mean([1.0, 2.0, 4.5]):.2f} ± {t_half([1.0, 2.0, 4.5]):.2f}"   # Gap
    assert rows["ga"][5] == "1.50 ± 0.00x" and rows["ga"][-1] == "suppressed 3/3"
    assert rows["ft"][-1] == "erased 2, suppressed 1 /3" and rows["retrain"][-1] == "—"
    page = tmp_path / "leaderboard.md"
    make_report(records, tmp_path / "r", ["hand-made"], leaderboard=page)
    text = page.read_text()
    assert text.startswith("# Leaderboard") and "### Leaderboard: digits / small_cnn, class 3" in text
    assert "Mirage layout" not in text and "### Leaderboard" in (tmp_path / "r" / "report.md").read_text()
