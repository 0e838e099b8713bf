"""PURGE-specific behaviour: A-GEM projection, frozen BatchNorm, the three stopping rules, targets."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from unlearnkit.methods import METHODS
from unlearnkit.methods.purge import agem_project, default_rep_layers, forget_target, representation_erasure
from unlearnkit.models.zoo import create_model


def flat_dot(a, b):
    return float(sum((x * y).sum() for x, y in zip(a, b)))


def test_agem_projection_on_hand_vectors():
    g_f = [torch.tensor([1.0, 0.0]), torch.tensor([[0.0]])]
    g_r = [torch.tensor([-1.0, 1.0]), torch.tensor([[0.0]])]
    g, projected = agem_project(g_f, g_r)
    assert projected
    # g_f - <g_f,g_r>/||g_r||^2 g_r = (1,0) + 0.5 (-1,1) = (0.5, 0.5)
    assert torch.allclose(g[0], torch.tensor([0.5, 0.5])) and torch.equal(g[1], g_f[1])
    assert flat_dot(g, g_r) == pytest.approx(0.0, abs=1e-7)


def test_agem_dot_is_over_all_parameters_flattened():
    # conflict in the first tensor, agreement in the second: the flattened dot (-1 + 3 = 2) is positive
    g_f = [torch.tensor([1.0]), torch.tensor([3.0])]
    g_r = [torch.tensor([-1.0]), torch.tensor([1.0])]
    g, projected = agem_project(g_f, g_r)
    assert not projected and g is g_f


def test_agem_random_vectors_end_non_negative():
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        g_f = [torch.randn(5, 3, generator=gen), torch.randn(4, generator=gen)]
        g_r = [torch.randn(5, 3, generator=gen), torch.randn(4, generator=gen)]
        g, projected = agem_project(g_f, g_r)
        assert flat_dot(g, g_r) >= -1e-5
        assert projected == (flat_dot(g_f, g_r) < 0)


def test_agem_skips_positive_dot_and_zero_reference():
    g_f = [torch.tensor([1.0, 2.0])]
    assert agem_project(g_f, [torch.tensor([1.0, 0.0])]) == (g_f, False)
    g, projected = agem_project(g_f, [torch.tensor([0.0, 0.0])])
    assert not projected and g is g_f


def test_representation_erasure_pulls_forget_to_detached_retain_mean():
    f = torch.tensor([[1.0, 1.0], [3.0, 3.0]], requires_grad=True)
    r = torch.tensor([[0.0, 0.0], [2.0, 2.0]], requires_grad=True)
    loss = representation_erasure({"a": f}, {"a": r})
    assert loss.item() == pytest.approx(((1 - 1) ** 2 * 2 + (3 - 1) ** 2 * 2) / 4)
    loss.backward()
    assert r.grad is None and f.grad is not None


def test_default_layers_are_last_two_stages_and_penultimate():
    assert default_rep_layers(create_model("small_cnn", 10, 1, 8)) == ["block2", "block3", "penultimate"]
    assert default_rep_layers(create_model("resnet18", 10)) == ["layer3", "layer4", "penultimate"]


def test_uniform_target_is_one_over_k_and_retain_confusion_is_the_mean_softmax(digits_split, digits_original):
    original = copy.deepcopy(digits_original).eval()  # as the method receives it: a frozen eval copy
    u = forget_target("uniform", original, digits_split.train_retain, 10, "cpu")
    assert torch.allclose(u, torch.full((1, 10), 0.1))
    p = forget_target("retain_confusion", original, digits_split.train_retain, 10, "cpu")
    with torch.no_grad():
        ref = torch.cat([torch.softmax(original(x), 1) for x, _ in digits_split.train_retain.batches(256)])
    assert p.shape == (1, 10) and torch.allclose(p[0], ref.mean(0), atol=1e-6)
    assert p[0, 3] < 0.05  # the forgotten class is (almost) never predicted on D_r


def bn_buffers(model):
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k}


@pytest.mark.parametrize("bn_mode", ["frozen", "train"])
def test_bn_running_stats(bn_mode, digits_split, digits_original):
    res = METHODS.get("purge").from_preset("small", epochs=1, bn_mode=bn_mode).unlearn(
        digits_original, digits_split, original=digits_original, seed=0)
    before, after = bn_buffers(digits_original), bn_buffers(res.model)
    same = all(torch.equal(before[k], after[k]) for k in before)
    assert same == (bn_mode == "frozen")
    if bn_mode == "frozen":
        assert res.history[0]["proj_rate"] > 0  # the A-GEM projection fires on conflicting batches


def test_stops_at_fa_target(digits_split, digits_original):
    res = METHODS.get("purge").from_preset("small").unlearn(digits_original, digits_split,
                                                           original=digits_original, seed=0)
    assert res.stop_reason == "fa_target"
    assert res.history[-1]["forget_acc"] <= 10.0 and len(res.history) < 15


def test_stops_on_retain_budget(digits_split, digits_original):
    # a budget below the initial retain CE fires at the first epoch end (and wins over fa_target,
    # as in the code)
    res = METHODS.get("purge").from_preset("small", retain_budget_factor=1e-3).unlearn(
        digits_original, digits_split, original=digits_original, seed=0)
    assert res.stop_reason == "retain_budget" and len(res.history) == 1
    assert res.history[0]["retain_ce"] > res.history[0]["retain_budget"]


def test_runs_to_max_epochs_when_no_rule_fires(digits_split, digits_original):
    method = METHODS.get("purge").from_preset("small", epochs=2, fa_target=-1.0, retain_budget_factor=1e9)
    res = method.unlearn(digits_original, digits_split, original=digits_original, seed=0)
    assert res.stop_reason == "max_epochs" and [h["epoch"] for h in res.history] == [1, 2]


def test_projection_switch_and_ga_objective_run(digits_split, digits_original):
    variants = ({"project": False}, {"forget_objective": "ga"},
                {"target": "uniform", "rep_layers": ["penultimate"]})
    for kw in variants:
        res = METHODS.get("purge").from_preset("small", epochs=1, **kw).unlearn(
            digits_original, digits_split, original=digits_original, seed=0)
        h = res.history[0]
        assert all(torch.isfinite(p).all() for p in res.model.parameters())
        if kw.get("project") is False:
            assert h["proj_rate"] == 0.0


def test_rejects_unknown_options(digits_split, digits_original):
    from unlearnkit.errors import UserError

    with pytest.raises(UserError, match="target"):
        METHODS.get("purge").from_preset("small", target="random").unlearn(
            digits_original, digits_split, original=digits_original)


def test_no_nn_module_left_in_train_mode_after_eval_checks():
    # per_sample_eval restores every module's flag, so frozen BN stays frozen between the FA checks
    from unlearnkit.data.arrays import ArrayData
    from unlearnkit.methods.common import per_sample_eval, set_train_mode

    m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.LazyLinear(3))
    data = ArrayData(torch.rand(4, 1, 5, 5), torch.tensor([0, 1, 2, 0]), (0.0,), (1.0,))
    m(torch.rand(2, 1, 5, 5))
    set_train_mode(m, "frozen")
    loss, pred = per_sample_eval(m, data, "cpu")
    assert loss.shape == (4,) and pred.shape == (4,)
    assert m.training and not m[1].training
