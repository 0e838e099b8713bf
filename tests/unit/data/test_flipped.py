"""The flipped-label task ("delete mislabeled data", issue 29 item 4): split, cache keys, names, CLI, a run."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from unlearnkit import ForgetSpec, UserError, make_split
from unlearnkit.data.splits import flip_labels


def test_the_forget_rows_carry_flipped_labels_and_the_rest_is_clean(digits):
    split = make_split(digits, ForgetSpec(flipped=0.05), seed=0)
    true = digits.train.y
    n = len(true)
    forget = torch.as_tensor(split.forget_indices)
    assert split.spec.kind == "flipped" and len(forget) == round(0.05 * n)
    # the same rows random forgetting draws with the same seed (a uniform draw, not class-stratified)
    assert np.array_equal(split.forget_indices, make_split(digits, ForgetSpec(random=0.05), seed=0).forget_indices)
    assert torch.equal(split.train_forget.index, forget)
    assert torch.equal(split.true_forget_labels, true[forget])
    assert bool((split.train_forget.y != true[forget]).all())  # every one flipped, never to its own class
    assert int(split.train_forget.y.min()) >= 0 and int(split.train_forget.y.max()) < digits.num_classes
    # the original trains on split.train: the flipped labels there, the true ones everywhere else
    changed = torch.nonzero(split.train.y != true).flatten()
    assert torch.equal(changed, forget)
    assert torch.equal(split.train.aux["true_label"], true)
    assert torch.equal(split.train_retain.y, true[split.train_retain.index])  # the retain set is clean
    assert len(split.train_forget) + len(split.train_retain) == n
    assert len(split.test_forget) == 0 and len(split.test_retain) == len(split.test)  # sample-level
    assert split.forgotten_classes == ()
    assert torch.equal(digits.train.y, true)  # the bundle itself is untouched


def test_the_split_is_deterministic_given_its_seed(digits):
    a, b = (make_split(digits, ForgetSpec(flipped=0.05), seed=3) for _ in range(2))
    assert torch.equal(a.train.y, b.train.y) and a.split_hash == b.split_hash
    c = make_split(digits, ForgetSpec(flipped=0.05), seed=4)
    assert c.split_hash != a.split_hash and not np.array_equal(c.forget_indices, a.forget_indices)
    # same rows as random forgetting, yet another split (the labels differ)
    assert a.split_hash != make_split(digits, ForgetSpec(random=0.05), seed=3).split_hash


@pytest.mark.parametrize("num_classes", [2, 3, 10])
def test_a_flip_never_keeps_the_class_and_reaches_every_other(num_classes):
    y = np.repeat(np.arange(num_classes), 400)
    flipped = flip_labels(y, num_classes, np.random.RandomState(0))
    assert flipped.dtype == np.int64 and (flipped != y).all()
    assert ((flipped >= 0) & (flipped < num_classes)).all()
    for c in range(num_classes):  # each other class is a target of class c
        assert set(flipped[y == c]) == set(range(num_classes)) - {c}
    assert np.array_equal(flipped, flip_labels(y, num_classes, np.random.RandomState(0)))


def test_reference_cache_keys_follow_the_flip(digits):
    from unlearnkit.training import default_recipe, reference_key

    recipe = default_recipe("digits", "small_cnn")

    def key(kind, spec, seed=0):
        return reference_key(kind, make_split(digits, spec, seed=seed), "small_cnn", {}, recipe, 0)

    clean = key("original", ForgetSpec(random=0.05))
    flipped = key("original", ForgetSpec(flipped=0.05))
    assert flipped != clean and "label_noise" not in clean  # a clean split's key is what it was
    assert flipped["label_noise"] == make_split(digits, ForgetSpec(flipped=0.05), seed=0).extra["label_noise"]
    assert flipped == key("original", ForgetSpec(flipped=0.05))
    assert flipped != key("original", ForgetSpec(flipped=0.1))
    assert flipped != key("original", ForgetSpec(flipped=0.05), seed=1)
    assert key("retrain", ForgetSpec(flipped=0.05)) != key("retrain", ForgetSpec(random=0.05))


@pytest.mark.parametrize("value", [0, 0.5, 0.7, -0.1, math.nan, "a", True])
def test_bad_fractions_are_refused_by_name(value):
    from unlearnkit.config import RunConfig

    with pytest.raises(UserError, match="flipped"):
        ForgetSpec(flipped=value)
    with pytest.raises(UserError, match="forget_flipped"):
        RunConfig(dataset="digits", forget_flipped=value)


def test_one_forget_set_only():
    from unlearnkit.config import RunConfig

    with pytest.raises(UserError, match="exactly one"):
        ForgetSpec(flipped=0.05, random=0.1)
    with pytest.raises(UserError, match="not several"):
        RunConfig(dataset="digits", forget_flipped=0.05, forget_classes=[3])


def test_names_in_results_and_suites(tmp_path):
    from unlearnkit.bench.grid import expand
    from unlearnkit.results import check_forget, describe_forget, forget_label, task_label

    forget = ForgetSpec(flipped=0.05).to_dict()
    assert forget["kind"] == "flipped" and forget["flipped"] == 0.05
    assert "flipped" not in ForgetSpec(random=0.05).to_dict()  # results of other tasks are unchanged
    assert task_label({"forget_flipped": 0.05}) == forget_label(forget) == "flipped 5%"
    assert describe_forget(forget).startswith("flipped 0.05")
    check_forget("results.json", forget, 10)
    with pytest.raises(UserError, match="task.forget.flipped"):
        check_forget("results.json", {**forget, "flipped": 0.6}, 10)
    grid = {"datasets": ["digits"], "tasks": [{"forget_flipped": 0.05}, {"forget_classes": [3]}],
            "methods": ["finetune"], "seeds": [0]}
    cells = expand({"grids": [grid]}, "s")
    flipped = [c for c in cells if c.task == "flipped 5%"]
    assert len(flipped) == 2 and all(c.config["forget_flipped"] == 0.05 for c in flipped)
    # a suite without the task keeps its cell ids: no forget_flipped key in their configuration
    assert all("forget_flipped" not in c.config for c in cells if c.task == "class 3")


def test_a_bad_fraction_on_the_command_line_is_one_error_line(tmp_path):
    from unlearnkit.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", "--dataset", "digits", "--forget-flipped", "0.5", "--methods",
                                      "finetune", "--out", str(out), "--no-progress"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "forget_flipped" in lines[0], result.stderr
    assert "Traceback" not in result.output and not out.exists()


def test_a_tiny_run_reports_the_original_on_the_flipped_labels(digits, cache_dir, tmp_path):
    """A narrow small_cnn on digits, 1 epoch, finetune, no audit: the numbers are reported, not judged."""
    from unlearnkit.config import RunConfig
    from unlearnkit.runner import prepare, run_experiment

    cfg = RunConfig(dataset="digits", forget_flipped=0.05, methods=["finetune"], recipe={"epochs": 1},
                    model_kwargs={"width": 8, "hidden": 32}, method_params={"finetune": {"epochs": 1}},
                    audit=False, out=str(tmp_path / "run"), cache_dir=str(cache_dir))
    split = prepare(cfg, progress=False).split
    assert bool((split.train_forget.y != split.true_forget_labels).all())
    results = run_experiment(cfg, progress=False).to_dict()
    assert results["task"]["forget"]["kind"] == "flipped"
    assert results["task"]["n_train_forget"] == len(split.train_forget)
    for name in ("original", "retrain", "finetune"):
        m = results["models"][name]["metrics"]
        assert 0 <= m["forget_acc"] <= 100 and 0 <= m["forget_true_acc"] <= 100
        # the two label views are disjoint, so the two accuracies never add up past 100 %
        assert m["forget_acc"] + m["forget_true_acc"] <= 100 + 1e-9
    assert "forget true" in (tmp_path / "run" / "results.md").read_text()
