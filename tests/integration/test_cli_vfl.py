"""``unlearnkit run/train --setting vfl --parties K`` in-process: the run, its audit of the transmitted
embeddings, the Mirage-layout table, and the one-line errors."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from unlearnkit import load_checkpoint
from unlearnkit.cli import app
from unlearnkit.models.vfl import VFLModel

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_vfl_run_audits_the_transmitted_embeddings(tmp_path):
    cfg = tmp_path / "vfl.yaml"
    cfg.write_text("dataset: digits\nsetting: vfl\nparties: 2\nforget_classes: [3]\nmodel_kwargs: {width: 8}\n"
                   "methods: [target]\nrecipe: {epochs: 3}\n")
    r = invoke("run", "--config", cfg, "--out", tmp_path / "run", "--cache-dir", tmp_path / "cache", "--no-progress")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    # 5 references by default, each recorded with its provenance (trained by the run)
    refs = res["models"]["target"]["audit"]["references"]
    assert len(refs) == 5 and len({r["sha256"] for r in refs}) == 5
    assert all(r["source"] == "unlearnkit run" for r in refs)
    assert res["task"]["setting"] == "vfl" and res["task"]["parties"] == 2
    assert res["task"]["bottom"] == "mirage_bottom" and res["config"]["model"] == "mirage_bottom"
    assert res["task"]["transmitted"] == ["party0", "party1", "embedding"]
    for name in ("original", "target"):
        t = res["models"][name]["audit"]["transmitted"]
        assert t["layers"] == ["party0", "party1", "embedding"] and t["summary"]
        assert (tmp_path / "run" / "audits" / name / "audit.md").read_text().count("Transmitted-embedding") == 1
    md = (tmp_path / "run" / "results.md").read_text()
    assert "vfl (2 parties, bottom mirage_bottom)" in md and "## Representation (Mirage layout)" in md
    assert "transmit (`embedding`)" in md and "| retrain |" in md and "| target |" in md
    model, _ = load_checkpoint(tmp_path / "run" / "models" / "target.pt")
    assert isinstance(model, VFLModel) and model.parties == 2
    assert "transmitted embeddings" in r.output


def test_train_vfl_on_flat_features_writes_a_k_party_checkpoint(tmp_path):
    r = invoke("train", "--dataset", "digits_flat", "--setting", "vfl", "--parties", "3", "--epochs", "1",
               "--out", tmp_path / "m.pt", "--cache-dir", tmp_path / "cache")
    assert r.exit_code == 0, r.output
    model, meta = load_checkpoint(tmp_path / "m.pt")
    assert isinstance(model, VFLModel) and model.bounds == [(0, 21), (21, 42), (42, 64)]
    assert meta["model"]["kwargs"]["bottom"] == "mlp"


@pytest.mark.parametrize("args, message", [
    (["--dataset", "digits", "--methods", "target"], "target unlearns vertical federated models only"),
    (["--dataset", "digits", "--setting", "vfl", "--parties", "0", "--methods", "target"], "parties"),
    (["--dataset", "digits", "--setting", "federated", "--methods", "target"], "setting must be"),
    (["--dataset", "digits_flat", "--methods", "finetune"], "flat features"),
])
def test_bad_vfl_input_is_one_line(tmp_path, args, message):
    r = invoke("run", *args, "--forget-classes", "3", "--out", tmp_path / "o", "--cache-dir", tmp_path / "c")
    assert r.exit_code == 2, r.output
    assert r.output.strip().startswith("error:") and message in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()
