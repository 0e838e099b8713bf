"""The report: results.json's `audit` contract, and the three files write_audit produces."""
from __future__ import annotations

import base64
import json
import math

import pytest

from unlearnkit.audit import VERDICTS, write_audit

pytestmark = pytest.mark.heavy  # trains the audit references and runs whole audits: `make test`, not test-fast

LAYER_KEYS = {"lpr", "delta_lpr", "delta_lpr_ci", "cka_original", "cka_retrain", "separability", "delta_auroc",
              "delta_auroc_ci", "separability_ratio", "separability_ratio_ci", "auroc_margin", "mahalanobis"}


def _no_nan(obj):
    if isinstance(obj, float):
        assert math.isfinite(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _no_nan(v)
    elif isinstance(obj, list):
        for v in obj:
            _no_nan(v)


def test_to_dict_follows_the_results_json_contract(rep_erased):
    d = rep_erased.to_dict()
    json.dumps(d, allow_nan=False)  # JSON-safe: raises on NaN/inf or non-JSON types
    _no_nan(d)
    assert d["verdict"] in VERDICTS and d["verdict"] == rep_erased.verdict
    assert isinstance(d["evidence"], list) and all(isinstance(e, str) and e for e in d["evidence"])
    assert d["rests_on"] in ("test", "train") and d["rests_on_reason"]
    assert list(d["layers"]) == ["block1", "block2", "block3", "penultimate"]
    for name, layer in d["layers"].items():
        assert LAYER_KEYS <= set(layer), name
        for key in ("delta_lpr", "delta_auroc", "separability_ratio"):
            lo, hi = layer[f"{key}_ci"]
            assert lo <= layer[key] <= hi, (name, key)
        assert 0.0 <= layer["cka_original"] <= 1.0 + 1e-9 and 0.0 <= layer["cka_retrain"] <= 1.0 + 1e-9
    # both audit data choices are reported; the top-level layers are the ones the verdict rests on
    assert set(d["audit_data"]) == {"test", "train"}
    assert d["audit_data"][d["rests_on"]]["layers"] == d["layers"]
    assert d["audit_data"]["test"]["n_forget"] == 37
    for role in ("unlearned", "original", "retrained"):
        assert {"forget_acc", "retain_acc", "test_retain_acc", "mia_efficacy", "mia_auc"} <= set(
            d["models"][role]["outputs"])
        assert {"test_forget", "test_retain"} <= set(d["models"][role]["knn"])
    assert d["models"]["unlearned"]["fid_feat_to_retrain"] >= 0.0
    assert -1.0 <= d["models"]["unlearned"]["cosine_to_original"] <= 1.0
    rl = d["resurfacing"]["relearning"]
    assert rl["canonical"] and rl["plan"]["seed"] == d["audit_seed"] and rl["plan"]["held_out"]["test"] > 0
    # every deciding statistic, judged: kept fraction, interval, flag bounds, Holm-adjusted p-value
    checks = d["checks"]
    assert checks["size"] == len(checks["items"]) and checks["kept_margin"] == 0.5
    families = {c["family"] for c in checks["items"]}
    assert families == {"output", "representation", "relearning", "heads", "batchnorm"}
    for c in checks["items"]:
        assert c["p"] <= c["p_holm"] <= 1.0 and len(c["references"]) == 1
        assert not c["testable"] and not c["within"]  # one reference: nothing can be judged
    rep_layers = {(c["layer"], c["data"]) for c in checks["items"] if c["family"] == "representation"}
    assert len(rep_layers) == 8  # every layer of both audit data
    assert len(d["references"]) == 1 and len(d["references"][0]["sha256"]) == 64
    assert d["cka"].startswith("centered")


def test_missing_numbers_become_none_not_nan(rep_tiny):
    d = rep_tiny.to_dict()
    json.dumps(d, allow_nan=False)
    # sample-level forgetting: no forgotten test samples, so no test-forget accuracy or k-NN on them
    assert d["models"]["unlearned"]["outputs"]["test_forget_acc"] is None
    assert d["models"]["unlearned"]["knn"]["test_forget"] is None
    assert "test" not in d["audit_data"]
    assert d["n_forget_needed"] >= 10 and d["verdict"] == "inconclusive"


def test_write_audit_writes_json_markdown_and_self_contained_html(rep_suppressed, tmp_path):
    paths = write_audit(rep_suppressed, tmp_path / "audit")
    assert sorted(p.name for p in (tmp_path / "audit").iterdir()) == ["audit.html", "audit.json", "audit.md"]
    assert json.loads(paths["json"].read_text()) == json.loads(json.dumps(rep_suppressed.to_dict()))
    md = paths["md"].read_text()
    assert "# Unlearning audit: **suppressed**" in md
    assert md.count("| layer | sep. ratio [CI] |") == 2  # one table per audit data
    assert "## What the verdict reads" in md and "| family | statistic | where |" in md
    for layer in ("block1", "block2", "block3", "penultimate"):
        assert f"| {layer} |" in md and f"| {layer}, train |" in md
    assert "## What each number means" in md and "**checks**" in md and "**sep. ratio [CI]**" in md
    assert "## References" in md and f"audit seed {rep_suppressed.config.audit_seed}" in md
    html = paths["html"].read_text()
    imgs = html.split("src='data:image/png;base64,")[1:]
    assert len(imgs) == 4  # kept fractions, ΔAUROC with CIs, CKA per layer, PCA embedding
    for img in imgs:
        assert base64.b64decode(img.split("'")[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "http://" not in html and "https://" not in html  # nothing to fetch
    assert "Verdict: suppressed" in html


def test_summary_names_the_verdict_and_the_data(rep_suppressed):
    s = rep_suppressed.summary()
    assert s.startswith("verdict: suppressed (rests on the train data")
    assert "penultimate" in s


def test_markdown_and_html_show_the_checks_the_relearning_and_the_references(rep_erased5, tmp_path):
    paths = write_audit(rep_erased5, tmp_path / "k5")
    md, page = paths["md"].read_text(), paths["html"].read_text()
    assert "## Relearning (accuracy, reported)" in md and "| relearning (accuracy %) |" in md
    assert "<h2>What the verdict reads</h2>" in page and "<h2>References</h2>" in page
    d = json.loads(paths["json"].read_text())
    assert d["verdict_line"] == rep_erased5.verdict_line and len(d["references"]) == 5
    assert len({r["sha256"] for r in d["references"]}) == 5
    testable = [c for c in d["checks"]["items"] if c["testable"]]
    assert testable and all(c["kept_interval"][0] <= c["kept"] <= c["kept_interval"][1] for c in testable)
    # the joint told-apart test: recorded, over the informative statistics (every testable one among them), and
    # shown as the table's last row
    informative = [c for c in d["checks"]["items"] if c["informative"]]
    assert all(c["informative"] for c in testable) and len(informative) >= len(testable)
    joint = d["checks"]["joint"]
    assert joint["n_checks"] == len(informative) and len(joint["references"]) == 5 and joint["level"] == 0.05
    assert joint["told_apart"] == (joint["p"] < 0.05)
    assert f"| joint | joint deviation | {len(informative)} informative statistics |" in md
