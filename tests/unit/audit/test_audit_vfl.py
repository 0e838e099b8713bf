"""Transmitted-embedding diagnostics of VFL models (Mirage): the audit of what passive parties send."""
from __future__ import annotations

import pytest
from audit_helpers import masked_head

from unlearnkit import create_model
from unlearnkit.audit import audit, write_audit
from unlearnkit.audit.vfl import transmitted_diagnostics


@pytest.mark.heavy
def test_output_masked_vfl_model_is_caught_at_the_transmitted_embedding(
        digits_split, digits_vfl_original, digits_vfl_retrain, tmp_path):
    """Hiding class 3 in the active party's classifier leaves what the parties transmit untouched:
    the audit must flag the transmitted embedding (Mirage's illusion) and say so in audit.md/json."""
    masked = masked_head(digits_vfl_original)
    rep = audit(digits_vfl_original, masked, digits_vfl_retrain, digits_split)
    t = rep.transmitted
    assert t["layers"] == ["party0", "party1", "embedding"] and t["data"] == rep.rests_on
    assert rep.verdict == "suppressed"
    assert "embedding" in t["flagged"], t["summary"]
    assert t["summary"].startswith("what the passive parties transmit still separates")
    assert t["per_layer"]["embedding"]["lpr"] == rep.layer("embedding").lpr
    assert rep.to_dict()["transmitted"]["flagged"] == t["flagged"]
    paths = write_audit(rep, tmp_path)
    assert "## Transmitted-embedding diagnostics (VFL)" in paths["md"].read_text()
    assert "Transmitted-embedding diagnostics" in paths["html"].read_text()


def test_models_that_are_not_vfl_have_no_transmitted_section():
    from unlearnkit.audit import AuditConfig
    from unlearnkit.audit.verdict import measurements

    small = create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)
    m = measurements(outputs_unlearned={}, outputs_retrained={}, knn_unlearned={}, knn_retrained={},
                     layers={"train": []}, rests_on="train", n_forget={"train": 0}, sample_level=False,
                     resurfacing={}, n_train_forget=0, config=AuditConfig())
    assert transmitted_diagnostics(small, {"train": []}, m) == {}
