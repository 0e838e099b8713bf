"""Suite expansion: counts, groups, stable ids, variants, deduplication, clear errors."""
from __future__ import annotations

import pytest

from unlearnkit.bench.grid import expand, load_suite, task_label
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS

GRID = {"suite": "t", "defaults": {"recipe": {"epochs": 2}},
        "grids": [{"name": "g", "datasets": ["digits"], "tasks": [{"forget_classes": [3]}, {"forget_random": 0.1}],
                   "methods": ["GA", {"name": "salun", "variants": [{"lr": 0.01}, {"lr": 0.05}]}],
                   "seeds": [0, 1]}]}


def test_expansion_counts_order_and_groups():
    cells = expand(GRID, "t")
    # 2 tasks x 2 seeds = 4 groups, each: 1 reference + GA + 2 salun variants
    assert len(cells) == 16
    assert [c.kind for c in cells[:4]] == ["reference", "method", "method", "method"]
    assert len({c.group for c in cells}) == 4
    labels = {c.label for c in cells}
    assert labels == {"reference", "gradient_ascent", "salun[lr=0.01]", "salun[lr=0.05]"}
    ga = next(c for c in cells if c.method == "gradient_ascent")
    assert ga.config["methods"] == ["gradient_ascent"] and ga.config["recipe"] == {"epochs": 2}
    sal = next(c for c in cells if c.label == "salun[lr=0.05]")
    assert sal.config["method_params"] == {"salun": {"lr": 0.05}}
    ref = cells[0]
    assert ref.config["methods"] == ["retrain"] and ref.config["method_params"] == {}
    assert "out" not in ref.config and "cache_dir" not in ref.config


def test_ids_are_the_configuration_and_duplicates_merge():
    a, b = expand(GRID, "t"), expand(GRID, "t")
    assert [c.cell_id for c in a] == [c.cell_id for c in b]
    assert len({c.cell_id for c in a}) == len(a)
    twice = {**GRID, "grids": GRID["grids"] * 2}
    assert len(expand(twice, "t")) == len(a)  # the same cell in two grids is one cell
    other = {**GRID, "defaults": {"recipe": {"epochs": 3}}}
    assert not {c.cell_id for c in expand(other, "t")} & {c.cell_id for c in a}


def test_all_means_every_method_but_retrain_and_vfl_only_ones_outside_vfl():
    grid = {"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["all"]}
    vfl_only = {n for n in METHODS.names() if METHODS.get(n).requires_vfl}
    assert "target" in vfl_only
    methods = {c.method for c in expand(grid, "t") if c.kind == "method"}
    assert methods == set(METHODS.names()) - {"retrain"} - vfl_only
    methods = {c.method for c in expand({**grid, "setting": "vfl"}, "t") if c.kind == "method"}
    assert methods == set(METHODS.names()) - {"retrain"}


def test_task_labels():
    assert task_label({"forget_classes": [3]}) == "class 3"
    assert task_label({"forget_classes": [3, 8]}) == "classes 3,8"
    assert task_label({"forget_random": 0.1}) == "random 10%"
    assert task_label({"forget_random": 100}) == "random 100"
    assert task_label({"task": "data_mismatch", "forget_classes": [3]}) == "data_mismatch 3"
    assert task_label({"forget_classes": [3], "name": "mine"}) == "mine"


@pytest.mark.parametrize("bad, message", [
    ({"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["gradient_ascnt"]}, "gradient_ascent"),
    ({"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": [{"name": "GA", "params": {"lrr": 1}}]},
     "unknown hyperparameter"),
    ({"datasets": ["digits"], "tasks": [{"forget_clases": [3]}], "methods": ["GA"]}, "forget_classes"),
    ({"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["GA"], "seedz": [1]}, "seeds"),
    ({"datasets": ["digits"], "tasks": [{"forget_classes": [3]}]}, "methods of grid"),
    ({"datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["target"]}, "add --setting vfl"),
    ({"defaults": {"out": "x"}, "datasets": ["digits"], "tasks": [{"forget_classes": [3]}], "methods": ["GA"]},
     "unknown key 'out' in defaults"),
])
def test_bad_suites_say_what_is_wrong(bad, message):
    with pytest.raises(UserError, match=message):
        expand(bad, "t")


def test_load_suite_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_suite(tmp_path / "nope.yaml")
    p = tmp_path / "bad.yaml"
    p.write_text("grids: [\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_suite(p)
    p.write_text("- 1\n")
    with pytest.raises(UserError, match="mapping"):
        load_suite(p)


def test_shipped_suites_expand():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3] / "benchmarks" / "configs"
    cpu = load_suite(root / "cpu.yaml")
    methods = {c.method for c in cpu.cells if c.kind == "method"}
    assert methods == set(METHODS.names()) - {"retrain"}
    kinds = {c.config.get("task") or ("random" if c.config.get("forget_random") else "class") for c in cpu.cells}
    assert kinds == {"class", "random", "all_matched", "target_mismatch", "model_mismatch", "data_mismatch"}
    assert {c.config["seed"] for c in cpu.cells} == {0, 1, 2, 3, 4}
    # seeds 3 and 4 only for unlearnkit's own method (claimed over 5 seeds) and its references
    assert {c.method for c in cpu.cells if c.config["seed"] > 2 and c.kind == "method"} == {"deep_reset"}
    gpu = load_suite(root / "gpu.yaml")
    assert {c.config["dataset"] for c in gpu.cells} >= {"cifar10", "cifar100"}
    assert {c.config["model"] for c in gpu.cells} == {"resnet18", "mirage_bottom"}
    assert {c.method for c in gpu.cells if c.kind == "method"} == set(METHODS.names()) - {"retrain"}
    assert {c.config["setting"] for c in gpu.cells if c.config["model"] == "mirage_bottom"} == {"vfl"}
    cur = load_suite(root / "current_audit_digits.yaml")
    assert {c.method for c in cur.cells if c.kind == "method"} == set(METHODS.names()) - {"retrain", "target"}
    # 5 references for the class grids, 8 for the sample requests
    assert {(bool(c.config.get("forget_classes")), c.config.get("references")) for c in cur.cells} == \
        {(True, None), (False, 8)}
    rest = load_suite(root / "current_audit_rest.yaml")  # the other blocks of docs/leaderboard.md
    assert {c.method for c in rest.cells if c.kind == "method" and c.config["dataset"] == "mnist5k"} == \
        set(METHODS.names()) - {"retrain", "target"}
    assert {c.config.get("references") for c in rest.cells if c.config["dataset"] == "mnist5k"} == {8}
    assert {c.config.get("task") for c in rest.cells if c.config["dataset"] == "digits"} >= \
        {"all_matched", "target_mismatch", "model_mismatch", "data_mismatch"}
    assert {c.config["setting"] for c in rest.cells if c.config["model"] == "mirage_bottom"} == {"vfl"}
