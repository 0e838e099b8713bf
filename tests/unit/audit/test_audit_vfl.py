"""Transmitted-embedding diagnostics of VFL models (Mirage): the audit of what passive parties send."""
from __future__ import annotations

import pytest
from audit_helpers import masked_head

from unlearnkit import create_model
from unlearnkit.audit import audit, write_audit
from unlearnkit.audit.vfl import transmitted_diagnostics


@pytest.mark.heavy
def test_output_masked_vfl_model_is_caught_at_the_transmitted_embedding(
        digits_split, digits_vfl_original, digits_vfl_retrains, tmp_path):
    """Hiding class 3 in the active party's classifier leaves what the parties transmit untouched: the
    transmitted embedding reads as the original's (Mirage's illusion), never certified, and audit.md/json say
    what the parties send."""
    from unlearnkit.audit import AuditConfig

    masked = masked_head(digits_vfl_original)
    rep = audit(digits_vfl_original, masked, digits_vfl_retrains, digits_split, config=AuditConfig(audit_seed=3))
    t = rep.transmitted
    assert t["layers"] == ["party0", "party1", "embedding"] and t["data"] == rep.rests_on
    assert rep.verdict != "erased", rep.summary()
    emb = [c for c in rep.checks if c.measure.family == "representation" and c.measure.layer == "embedding"
           and c.measure.data == rep.rests_on]
    assert emb and all(c.result.kept == pytest.approx(1.0, abs=1e-6) for c in emb if c.result.status == "ok")
    assert t["per_layer"]["embedding"]["lpr"] == rep.layer("embedding").lpr
    assert rep.to_dict()["transmitted"]["flagged"] == t["flagged"]
    paths = write_audit(rep, tmp_path)
    assert "## Transmitted-embedding diagnostics (VFL)" in paths["md"].read_text()
    assert "Transmitted-embedding diagnostics" in paths["html"].read_text()


def test_models_that_are_not_vfl_have_no_transmitted_section():
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.verdict import measurements

    small = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)
    m = measurements(outputs_unlearned={}, outputs_retrained={}, checks=[], n_forget={"train": 0},
                     sample_level=False, n_train_forget=0, n_refs=0, config=AuditConfig())
    assert transmitted_diagnostics(small, {"train": []}, m, "train") == {}
