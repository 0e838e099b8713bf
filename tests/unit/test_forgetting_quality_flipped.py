"""Forgetting quality: the bootstrap interval over forget examples, and the flipped-label task's split and labels."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from unlearnkit import ForgetSpec, UserError, load_dataset, make_split
from unlearnkit import forgetting_quality_experiment as fqm
from unlearnkit.metrics import final_score, forget_score
from unlearnkit.metrics.forgetting_quality_metric import example_points, forget_score_interval


def _binomial_quantile(n: int, p: float, q: float) -> int:
    """The smallest k with P(Binomial(n, p) <= k) >= q."""
    cdf = 0.0
    for k in range(n + 1):
        cdf += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        if cdf >= q:
            return k
    return n


# --- the interval, by hand


def test_equal_epsilons_give_a_degenerate_interval_at_the_point():
    assert forget_score_interval([0.2] * 40, 3) == (1.0, 1.0)      # every example in the first bucket
    assert forget_score_interval([0.7] * 40, 32) == (0.5, 0.5)     # every example in the second
    assert forget_score_interval([50.0] * 40, 32) == (0.0, 0.0)    # past the scale: 0


def test_two_examples_one_scoring_1_one_scoring_0():
    # a resample of 2 scores 0 (both the 0 one, p 1/4), 1/2 (p 1/2) or 1 (p 1/4): with 2000 draws the
    # 2.5th percentile lies among the ~500 zeros and the 97.5th among the ~500 ones
    assert forget_score_interval([0.0, 50.0], 3) == (0.0, 1.0)


def test_half_and_half_follows_the_binomial():
    # 100 examples, 50 scoring 1 and 50 scoring 0: a resample's score is Binomial(100, 1/2) / 100
    eps = [0.1] * 50 + [50.0] * 50
    low, high = forget_score_interval(eps, 3)
    assert low == pytest.approx(_binomial_quantile(100, 0.5, 0.025) / 100, abs=0.02)  # 0.40
    assert high == pytest.approx(_binomial_quantile(100, 0.5, 0.975) / 100, abs=0.02)  # 0.60
    assert forget_score_interval(eps, 3, level=0.5)[1] - forget_score_interval(eps, 3, level=0.5)[0] < high - low


def test_the_interval_is_seeded_and_contains_the_point():
    rng = np.random.default_rng(4)
    eps = np.concatenate([rng.uniform(0, 0.5, 30), rng.uniform(0.5, 1.0, 20), np.full(10, 50.0)])
    point = float(example_points(eps, 3).mean())
    low, high = forget_score_interval(eps, 3)
    assert low < point < high
    assert forget_score_interval(eps, 3) == (low, high)  # the same seed, the same interval
    assert forget_score_interval(eps, 3, seed=1) != (low, high)


def test_example_points_are_what_forget_score_averages():
    rng = np.random.default_rng(0)
    u, r = rng.normal(0, 1, (5, 30)), rng.normal(0.5, 1, (5, 30))
    fs = forget_score(u, r)
    assert fs.score == pytest.approx(example_points(fs.epsilons, 5).mean(), abs=0)
    assert list(example_points([0.0, 0.5, 1.0, 1.5, 50.0], 32)) == [1.0, 0.5, 0.25, 0.125, 0.0]


def test_bad_interval_arguments():
    for kwargs in ({"n_boot": 0}, {"n_boot": 1.5}, {"level": 1.0}, {"level": 0}):
        with pytest.raises(ValueError):
            forget_score_interval([0.1, 0.2], 3, **kwargs)
    with pytest.raises(ValueError, match="empty"):
        forget_score_interval([], 3)


# --- the intervals in a row and the table


def _records(confs: np.ndarray, retain: list[float], test: list[float]) -> list[dict]:
    return [{"job": f"j{i}", "seed": i, "confs": c.tolist(), "retain_acc": ra, "test_acc": ta, "forget_acc": 50.0,
             "runtime_s": 1.0, "wall_s": 1.0} for i, (c, ra, ta) in enumerate(zip(confs, retain, test))]


def test_a_row_has_both_intervals_and_the_final_one_is_scaled_like_its_point():
    rng = np.random.default_rng(1)
    recs = _records(rng.normal(0, 1, (4, 40)), [90.0, 92.0, 91.0, 89.0], [80.0, 82.0, 81.0, 79.0])
    refs = _records(rng.normal(0.3, 1, (4, 40)), [99.0] * 4, [90.0] * 4)
    row = fqm._row(recs, refs, False)
    low, high = forget_score_interval(row["epsilons"], 4)
    assert row["forget_score_ci"] == [low, high] and low <= row["forget_score"] <= high
    ratio = final_score(1.0, [90.0, 92.0, 91.0, 89.0], [99.0] * 4, [80.0, 82.0, 81.0, 79.0], [90.0] * 4)
    assert row["final_score"] == pytest.approx(row["forget_score"] * ratio)
    assert row["final_score_ci"] == pytest.approx([low * ratio, high * ratio])
    # a row written before the intervals (no *_ci keys) gets the same ones from its stored epsilons
    old = {k: v for k, v in row.items() if not k.endswith("_ci")}
    forget_ci, final_ci = fqm.row_intervals(old)
    assert forget_ci == row["forget_score_ci"] and final_ci == pytest.approx(row["final_score_ci"])


def test_the_table_shows_the_final_score_with_its_interval():
    acc = {"mean": 90.0, "std": 1.0}
    base = {"control": False, "runs": 3, "retain_acc": acc, "test_acc": acc, "forget_acc": acc}
    rows = {"a": {**base, "forget_score": 0.25, "final_score": 0.24, "forget_score_ci": [0.2, 0.3],
                  "final_score_ci": [0.221, 0.259], "epsilons": [0.1]},
            "b": {**base, "forget_score": None, "final_score": None, "epsilons": None},  # no score
            "old": {**base, "forget_score": 1.0, "final_score": 0.5, "epsilons": [0.1, 0.2]}}  # before the CI
    header, cells = fqm.table_rows({"methods": rows})
    col = header.index("final score [95% CI]")
    assert [c[col] for c in cells] == ["0.240 [0.221, 0.259]", "n/a", "0.500 [0.500, 0.500]"]


# --- the flipped-label task


def _config(**forget):
    return fqm._checked_config(dataset="digits", model="small_cnn", **{"forget_classes": None, "forget_random": None,
                               "forget_flipped": None, **forget}, methods="finetune", runs=3, runs_for=None,
                               seed=0, data_seed=1, epochs=None, preset="auto", out="o", cache_dir=None,
                               data_dir="data", download=False, device="cpu")


@pytest.mark.parametrize("value", [0.5, 0, -0.1, 1.2, float("nan"), float("inf"), "x"])
def test_a_bad_flipped_fraction_is_refused_naming_the_option(value):
    with pytest.raises(UserError, match="--forget-flipped"):
        _config(forget_flipped=value)


@pytest.mark.parametrize("forget", [{}, {"forget_flipped": 0.05, "forget_classes": "3"},
                                    {"forget_flipped": 0.05, "forget_random": 0.1}])
def test_exactly_one_forget_set(forget):
    with pytest.raises(UserError, match="exactly one of --forget-classes, --forget-random, --forget-flipped"):
        _config(**forget)


def test_the_flipped_task_is_runs_split_and_scores_the_flipped_labels(digits):
    from unlearnkit.config import RunConfig
    from unlearnkit.metrics import logit_scaled_confidence
    from unlearnkit.models.features import LOGITS, extract
    from unlearnkit.models.zoo import create_model
    from unlearnkit.runner import build_split

    cfg = _config(forget_flipped=0.05)[0]  # data seed 1
    assert cfg.forget_flipped == 0.05
    split = fqm._task(cfg).split
    bundle = load_dataset("digits", data_seed=1)  # as run loads it (runner.prepare)
    run_split = build_split(RunConfig(dataset="digits", forget_flipped=0.05, data_seed=1), bundle)
    assert split.split_hash == run_split.split_hash
    assert np.array_equal(split.forget_indices, run_split.forget_indices)
    assert torch.equal(split.train_forget.y, run_split.train_forget.y)  # the same flipped labels
    assert split.split_hash != make_split(digits, ForgetSpec(flipped=0.05), seed=0).split_hash  # data seed 0
    torch.manual_seed(0)
    model = create_model("small_cnn", digits.num_classes, in_channels=digits.in_channels,
                         image_size=digits.image_size)
    m = fqm.measure(model, split, "cpu")
    logits = extract(model, split.train_forget, [LOGITS], device="cpu")[LOGITS]
    assert m["confs"] == pytest.approx(logit_scaled_confidence(logits, split.train_forget.y).tolist())
    assert m["confs"] != pytest.approx(logit_scaled_confidence(logits, split.true_forget_labels).tolist())
    assert "forget_true_acc" in m and 0 <= m["forget_true_acc"] <= 100


def test_the_markdown_names_the_flipped_task_and_shows_the_interval():
    acc = {"mean": 90.0, "std": 1.0}
    row = {"control": False, "runs": 3, "retain_acc": acc, "test_acc": acc, "forget_acc": acc, "forget_score": 0.25,
           "final_score": 0.24, "forget_score_ci": [0.2, 0.3], "final_score_ci": [0.221, 0.259], "epsilons": [0.1],
           "max_epsilon": 1.0, "error": None}
    forget = ForgetSpec(flipped=0.05).to_dict()
    results = {"task": {"dataset": "digits", "model": "small_cnn", "forget": forget, "n_train_forget": 72,
                        "split_hash": "abc", "test_set": "the whole test set"},
               "config": {"runs": 3}, "methods": {"finetune": row}}
    md = fqm.results_markdown(results)
    assert md.startswith("# Forgetting quality: digits / small_cnn, forget flipped 0.05 (mislabeled training")
    assert "| finetune | 3 | 0.2500 | 0.240 [0.221, 0.259] |" in md
