"""Mirage's simplified baselines (mirage_lib.py): exact single steps on a tiny model, and the thin
``*_mirage`` subclasses run exactly the ``variant="mirage"`` code of the original method's file."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from test_method_ssd import Tiny, tiny_data  # the tiny linear model and data of the SSD tests

from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods.base import MethodData
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


@pytest.mark.parametrize("name, original, kwargs", [
    ("ssd_mirage", "ssd", {"variant": "mirage"}),
    ("fisher_mirage", "fisher_forgetting", {"variant": "mirage"}),
    ("amnesiac_mirage", "amnesiac", {"variant": "mirage", "lr": 1e-3, "epochs": 5, "batch_size": 128}),
    ("unsir_mirage", "unsir", {"variant": "mirage"}),
])
def test_thin_subclass_runs_the_mirage_variant_of_the_original(name, original, kwargs):
    torch.manual_seed(0)
    model = Tiny()
    forget, retain = tiny_data(6, lambda i: 0, 1), tiny_data(12, lambda i: 1 + i % 2, 2)
    a = run(METHODS.get(name)(), model, forget, retain, seed=4)
    b = run(METHODS.get(original)(**kwargs), model, forget, retain, seed=4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.fc.weight, model.fc.weight)
    assert METHODS.get(name).from_preset("small").variant == "mirage"
    with pytest.raises(UserError, match=original):
        METHODS.get(name)(variant="reference")


def test_fisher_mirage_clamps_weights_to_ten():
    torch.manual_seed(0)
    model = Tiny()
    out = run(METHODS.get("fisher_mirage")(), model, tiny_data(6, lambda i: 0, 1), tiny_data(6, lambda i: 1, 2))
    assert all(p.abs().max() <= 10.0 for p in out.parameters())
    with torch.no_grad():
        assert max(float((p - q).abs().max()) for p, q in zip(out.parameters(), model.parameters())) > 1.0
