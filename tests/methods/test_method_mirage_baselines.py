"""Mirage's simplified baselines (mirage_lib.py): exact single steps on a tiny model; each is its own
class, apart from the original algorithm it is named after."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from test_method_ssd import Tiny, tiny_data  # the tiny linear model and data of the SSD tests

from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods import mirage_baselines as mirage_module
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.common import n_batches, random_labels
from unlearnkit.methods.mirage_baselines import nearest_other_label


def run(method, model, forget=None, retain=None, seed=0):
    data = MethodData(num_classes=3, forget=forget, retain=retain, forgotten_classes=(0,))
    return method._unlearn(copy.deepcopy(model), data, None, torch.device("cpu"),
                           torch.Generator().manual_seed(seed), False).model


def sgd_step(model, loss_fn, lr):
    """One plain SGD step (the first step of SGD with momentum equals it; no weight decay)."""
    ref = copy.deepcopy(model)
    loss = loss_fn(ref)
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    with torch.no_grad():
        for p, g in zip(ref.parameters(), grads):
            p -= lr * g
    return ref


def test_nearest_other_label_is_the_best_wrong_class():
    logits = torch.tensor([[5.0, 4.0, 1.0], [0.0, 2.0, 3.0], [1.0, 0.0, 9.0]])
    y = torch.tensor([0, 2, 1])
    assert nearest_other_label(logits, y).tolist() == [1, 1, 2]


def test_boundary_mirage_step_targets_the_current_models_nearest_wrong_class():
    torch.manual_seed(0)
    model, forget = Tiny(), tiny_data(6, lambda i: 0, 1)
    out = run(METHODS.get("boundary_mirage")(epochs=1, augment=False), model, forget=forget)

    def loss(m):  # CE to the argmax of the SAME forward's softmax with the true class zeroed
        z = m(forget.x)
        return F.cross_entropy(z, nearest_other_label(z, forget.y))

    ref = sgd_step(model, loss, 1e-3)
    assert torch.allclose(out.fc.weight, ref.fc.weight, atol=1e-7)
    assert not torch.equal(out.fc.weight, model.fc.weight)


def test_finetune_mirage_has_mirage_defaults_and_no_weight_decay():
    m = METHODS.get("finetune_mirage")()
    assert (m.lr, m.epochs, m.batch_size, m.weight_decay, m.momentum) == (1e-3, 5, 128, 0.0, 0.9)
    torch.manual_seed(0)
    model, retain = Tiny(), tiny_data(8, lambda i: 1 + i % 2, 2)
    out = run(METHODS.get("finetune_mirage")(epochs=1, augment=False, lr=0.1), model, retain=retain)
    ref = sgd_step(model, lambda r: F.cross_entropy(r(retain.x), retain.y), 0.1)
    assert torch.allclose(out.fc.weight, ref.fc.weight, atol=1e-6)
    assert torch.allclose(out.fc.bias, ref.fc.bias, atol=1e-6)


@pytest.mark.parametrize("name, original", [("ssd_mirage", "ssd"), ("fisher_mirage", "fisher_forgetting"),
                                            ("amnesiac_mirage", "amnesiac"), ("unsir_mirage", "unsir")])
def test_each_mirage_baseline_is_its_own_class(name, original):
    cls, orig = METHODS.get(name), METHODS.get(original)
    assert not issubclass(cls, orig) and cls.__module__.endswith("mirage_baselines")
    fields = {f.name for f in dataclasses.fields(orig)}
    assert "variant" not in fields and not any(f.startswith("mirage_") for f in fields)


def test_ssd_mirage_scales_selected_entries_by_point_nine():
    torch.manual_seed(0)
    model = Tiny()
    out = run(METHODS.get("ssd_mirage")(), model, tiny_data(5, lambda i: 0, 1), tiny_data(12, lambda i: 1 + i % 2, 2))
    ratio = out.fc.weight / model.fc.weight
    assert torch.all(torch.isclose(ratio, torch.tensor(1.0)) | torch.isclose(ratio, torch.tensor(0.9)))
    assert torch.isclose(ratio, torch.tensor(0.9)).any()
    with pytest.raises(UserError, match="damping"):
        METHODS.get("ssd_mirage")(damping=1.5)


def test_amnesiac_mirage_trains_on_forget_only_with_fresh_uniform_labels(monkeypatch, digits_split,
                                                                          digits_original):
    calls = []

    def spy(n, k, gen, exclude=None):
        calls.append(exclude)
        return random_labels(n, k, gen, exclude)

    monkeypatch.setattr(mirage_module, "random_labels", spy)
    m = METHODS.get("amnesiac_mirage")(epochs=1)
    assert (m.lr, m.batch_size, m.needs) == (1e-3, 128, frozenset({"forget"}))
    res = m.unlearn(digits_original, digits_split, seed=0)
    assert res.history[0]["samples"] == len(digits_split.train_forget)
    assert len(calls) == n_batches(digits_split.train_forget, m.batch_size)  # per batch, D_f only
    assert all(c is None for c in calls)  # the true class may be drawn


def test_fisher_mirage_clamps_weights_to_ten():
    torch.manual_seed(0)
    model = Tiny()
    out = run(METHODS.get("fisher_mirage")(), model, tiny_data(6, lambda i: 0, 1), tiny_data(6, lambda i: 1, 2))
    assert all(p.abs().max() <= 10.0 for p in out.parameters())
    with torch.no_grad():
        assert max(float((p - q).abs().max()) for p, q in zip(out.parameters(), model.parameters())) > 1.0
