"""The results schema (unlearnkit.results): one name per task and model for run, bench and report, and
which audit data a table reads."""
from __future__ import annotations

import pytest
from sample_results import sample_results  # tests/ is on sys.path (its conftest.py)

from unlearnkit.data.splits import ForgetSpec
from unlearnkit.results import (
    forget_label,
    group_audit,
    layer_value,
    main_layer,
    model_label,
    rests_on,
    retrain_view,
    task_label,
)


@pytest.mark.parametrize("suite_task,spec", [
    ({"forget_classes": [3]}, ForgetSpec(classes=(3,))),
    ({"forget_classes": [3, 8]}, ForgetSpec(classes=(3, 8))),
    ({"forget_random": 0.1}, ForgetSpec(random=0.1)),
    ({"forget_random": 100}, ForgetSpec(random=100)),
    ({"forget_indices": "lists/forget.txt"}, ForgetSpec(indices_file="lists/forget.txt")),
    ({"task": "data_mismatch", "forget_classes": [3], "concept": [1, 3]},
     ForgetSpec(classes=(3,), task="data_mismatch", concept=(1, 3))),
])
def test_a_run_and_its_suite_name_the_task_alike(suite_task, spec):
    """The report names a results.json's task as the suite that made it does (bench stores the suite's
    name)."""
    assert forget_label(spec.to_dict()) == task_label(suite_task)


def test_vfl_models_are_named_by_their_setting():
    task = sample_results()["task"]
    assert model_label(task) == task["model"]
    vfl = {**task, "setting": "vfl", "parties": 3}
    assert model_label(vfl) == f"vfl (3 parties, bottom {task['model']})"


def test_tables_read_the_data_the_verdict_rests_on():
    audit = sample_results()["models"]["gradient_ascent"]["audit"]
    data = rests_on(audit)
    assert data == "train" and main_layer(audit) == audit["penultimate_layer"]
    for key in ("lpr", "delta_lpr", "separability"):
        assert layer_value(audit, key) == audit["audit_data"][data]["layers"]["penultimate"][key]
        assert layer_value(audit, key) != audit["audit_data"]["test"]["layers"]["penultimate"][key]


def test_retrain_is_read_from_the_original_s_audit_when_there_is_one():
    models = sample_results()["models"]
    models["original"]["audit"]["layers"]["penultimate"]["lpr_retrained"] = 12.5
    pairs = [(name, e["audit"]) for name, e in models.items()]
    chosen = group_audit(pairs)
    assert chosen is models["original"]["audit"]
    assert group_audit(pairs[1:]) is models["gradient_ascent"]["audit"]
    assert group_audit([("retrain", None)]) is None
    view = retrain_view(chosen)
    assert view["verdict"] is None and layer_value(view, "lpr") == 12.5
    assert layer_value(view, "cka_original") == chosen["layers"]["penultimate"]["cka_retrain_original"]
