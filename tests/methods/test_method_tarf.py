"""TARF-specific behaviour: the k(t) schedule, the beta rules, the phases, identification, ablations."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from unlearnkit import ForgetSpec, make_split
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods.tarf import Tarf, ga_weight, identify_by_class, phase_of, top_fraction_threshold


def test_k_schedule_values_and_zero_crossing_at_T_minus_t0():
    ks = [ga_weight(t, 1.0, 10, 4) for t in range(10)]
    assert ks == pytest.approx([0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, 0.0, 0.0, 0.0])
    assert ga_weight(5.9, 2.0, 10, 4) > 0 and ga_weight(6, 2.0, 10, 4) == 0.0  # at T - t0, not at t0
    assert ga_weight(4, 1.0, 10, 4) > 0  # t = t0 is still ascending
    m = Tarf(epochs=10, t0=4)
    assert m.ga_end == 6


def test_phase_boundaries():
    assert [phase_of(t, 1, 6) for t in range(10)] == [1, 2, 2, 2, 2, 2, 3, 3, 3, 3]
    assert [phase_of(t, 3, 2) for t in range(5)] == [1, 1, 1, 3, 3]  # Phase I wins while t < t1


def test_beta_is_lowest_of_top_ten_percent():
    icon = torch.tensor([0.5, 9.0, 0.1, 7.0, 0.3, 0.2, 0.4, 8.0, 0.6, 0.7] * 2)  # 20 values, top 10 % = 2
    beta = top_fraction_threshold(icon, 0.9)
    assert beta == 9.0 and int((icon >= beta).sum()) == 2
    icon = torch.arange(30.0)
    assert top_fraction_threshold(icon, 0.9) == 27.0  # top 3 = 29, 28, 27
    assert top_fraction_threshold(torch.arange(5.0), 0.9) == 4.0  # at least one value
    assert top_fraction_threshold(icon, 0.8) == 24.0


def test_identify_rules_on_hand_vectors(digits_split):
    un = digits_split.train_retain.subset(torch.arange(30))  # top 10 % = 3 samples
    loss_o = torch.zeros(30)
    loss_t1 = torch.zeros(30)
    loss_t1[[3, 17, 25, 29]] = torch.tensor([5.0, -4.0, 3.0, 0.5])  # |change|: 5, 4, 3, 0.5
    m = Tarf(beta_rule="quantile", beta_quantile=0.9)
    mask, beta = m.identify(un, loss_o, un.y, loss_t1, un.y)
    assert beta == 3.0 and torch.nonzero(mask).flatten().tolist() == [3, 17, 25]
    mask, beta = Tarf(beta_rule="none").identify(un, loss_o, un.y, loss_t1, un.y)
    assert beta is None and not mask.any()


def test_per_class_rule_picks_the_classes_with_the_largest_accuracy_drop():
    labels = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    correct_o = torch.ones(7, dtype=torch.bool)
    correct_t1 = torch.tensor([True, True, False, False, True, False, True])
    assert identify_by_class(labels, correct_o, correct_t1, 1).tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert identify_by_class(labels, correct_o, correct_t1, 2).tolist() == [0, 0, 1, 1, 1, 1, 1]
    # saturated accuracies (classes 0 and 1 both at 0 %): the larger mean loss change wins the tie
    collapsed = torch.tensor([False, False, False, False, True, True, True])
    icon = torch.tensor([1.0, 1.0, 5.0, 5.0, 0.0, 0.0, 0.0])
    assert identify_by_class(labels, correct_o, collapsed, 1, icon).tolist() == [0, 0, 1, 1, 0, 0, 0]
    assert identify_by_class(labels, correct_o, collapsed, 1, -icon).tolist() == [1, 1, 0, 0, 0, 0, 0]
    # score="icon" ranks by the mean loss change alone
    assert identify_by_class(labels, correct_o, correct_t1, 1, icon, "icon").tolist() == [0, 0, 1, 1, 0, 0, 0]
    low_first = identify_by_class(labels, correct_o, correct_t1, 1, -icon + 10, "icon")
    assert low_first.tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_history_records_phases_k_and_identification(digits_split, digits_original):
    res = METHODS.get("tarf").from_preset("small", epochs=4, t0=1, t1=1, beta_rule="none").unlearn(
        digits_original, digits_split, seed=0)
    assert [h["phase"] for h in res.history] == [1, 2, 2, 3]
    assert [h["k"] for h in res.history] == pytest.approx([0.75, 0.5, 0.25, 0.0])
    assert [h["n_identified"] for h in res.history] == [0, 0, 0, 0]
    assert res.history[0]["retain_ce"] is None and res.history[-1]["ascent_ce"] is None
    assert res.stop_reason == "completed"


def test_without_phase_three_stops_at_ga_end(digits_split, digits_original):
    method = METHODS.get("tarf").from_preset("small", epochs=5, t0=2, t1=1, phase3=False, beta_rule="none")
    res = method.unlearn(digits_original, digits_split, seed=0)
    assert res.stop_reason == "no_phase3"
    assert [h["phase"] for h in res.history] == [1, 2, 2]


def test_identifies_the_hidden_part_of_the_target(digits, digits_original, tmp_path):
    """D_f = half of class 3; the other half hides in D_un (false remaining). After Phase I the
    ascent has moved the hidden 3s most, so they are the high-I_con samples that get identified."""
    threes = np.flatnonzero(digits.train.y.numpy() == 3)
    rng = np.random.default_rng(0)
    given = np.sort(rng.choice(threes, len(threes) // 2, replace=False))
    hidden = set(np.setdiff1d(threes, given).tolist())
    f = tmp_path / "half_of_3.txt"
    f.write_text(" ".join(map(str, given)))
    split = make_split(digits, ForgetSpec(indices_file=str(f)))
    method = METHODS.get("tarf").from_preset("small", epochs=4, t0=0, t1=3)
    res = method.unlearn(digits_original, split, seed=0)
    entry = next(h for h in res.history if "identified_index" in h)
    ident = set(entry["identified_index"])
    assert entry["n_identified"] == len(ident) == int(np.ceil(0.1 * len(split.train_retain)))
    recall = len(ident & hidden) / len(hidden)
    assert recall >= 0.9, f"only {recall:.0%} of the hidden 3s identified"


def test_bad_options_are_user_errors(digits_split, digits_original):
    with pytest.raises(UserError, match="n_target_classes"):
        Tarf(beta_rule="per_class").unlearn(digits_original, digits_split)
    with pytest.raises(UserError, match="t1"):
        Tarf(t1=0).unlearn(digits_original, digits_split)


@pytest.mark.parametrize("task, expected", [
    (None, {"beta_rule": "none"}),
    ("all_matched", {"beta_rule": "none"}),
    ("data_mismatch", {"beta_rule": "quantile"}),
    ("target_mismatch", {"beta_rule": "per_class", "n_target_classes": 1, "class_score": "icon"}),
])
def test_task_defaults_pick_the_identification_rule(task, expected, digits, digits_split):
    """TARF knows which rule each task implies (the runner asks every method, naming none)."""
    from unlearnkit.data.concepts import make_concept_split

    split = digits_split if task is None else make_concept_split(digits, task, 3)
    assert Tarf.task_defaults(split, {}) == expected
    given = {"beta_rule": "quantile"}
    assert Tarf.task_defaults(split, given) == given  # the user's choice wins
    assert Tarf.from_preset("small", **Tarf.task_defaults(split, {})).beta_rule == expected["beta_rule"]
    assert METHODS.get("finetune").task_defaults(split, {"lr": 0.1}) == {"lr": 0.1}  # the base: as given
