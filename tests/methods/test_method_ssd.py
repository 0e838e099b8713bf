"""SSD: selection and dampening factor checked on a tiny hand-made model."""
from __future__ import annotations

import copy

import torch
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.ssd import SelectiveSynapticDampening, dampen, grad_importance


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))


def tiny_data(n, label_of, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, 2, 2, generator=g)
    y = torch.tensor([label_of(i) for i in range(n)])
    return ArrayData(x, y, (0.0,), (1.0,))


def test_dampen_changes_only_selected_entries_by_the_right_factor():
    model = Tiny()
    torch.nn.init.normal_(model.fc.weight)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    imp_d = {n: torch.rand(p.shape) + 0.1 for n, p in model.named_parameters()}
    imp_f = {n: imp_d[n] * torch.tensor([0.5, 5.0, 20.0, 100.0]).repeat(p.numel())[: p.numel()].view(p.shape)
             for n, p in model.named_parameters()}
    alpha, lam = 10.0, 2.0
    dampen(model, imp_d, imp_f, alpha, lam)
    for n, p in model.named_parameters():
        sel = imp_f[n] > alpha * imp_d[n]
        expected = torch.where(sel, before[n] * torch.clamp(lam * imp_d[n] / imp_f[n], max=1.0), before[n])
        assert torch.allclose(p, expected)
        assert torch.equal(p[~sel], before[n][~sel])
        assert sel.any() and (~sel).any()


def test_factor_is_bounded_by_one():
    model = Tiny()
    before = model.fc.weight.detach().clone()
    imp_d = {n: torch.ones_like(p) for n, p in model.named_parameters()}
    imp_f = {n: torch.full_like(p, 11.0) for n, p in model.named_parameters()}
    dampen(model, imp_d, imp_f, 10.0, 100.0)  # lambda*imp_D/imp_f = 9.1 > 1 -> factor 1
    assert torch.equal(model.fc.weight, before)


def test_importance_is_mean_of_squared_batch_gradients():
    model = Tiny().eval()
    data = tiny_data(10, lambda i: i % 3, 0)
    imp = grad_importance(model, data, 4, "cpu", "ssd")
    expected = torch.zeros_like(model.fc.weight)
    for s in range(0, 10, 4):
        model.zero_grad()
        nn.functional.cross_entropy(model(data.x[s:s + 4]), data.y[s:s + 4]).backward()
        expected += model.fc.weight.grad ** 2
    assert torch.allclose(imp["fc.weight"], expected / 3)


def _unlearn(method, model, forget, retain):
    data = MethodData(num_classes=3, forget=forget, retain=retain, forgotten_classes=(0,))
    return method._unlearn(copy.deepcopy(model), data, None, torch.device("cpu"), torch.Generator(), False).model


def test_method_matches_manual_computation_on_tiny_model():
    torch.manual_seed(0)
    model = Tiny()
    forget = tiny_data(5, lambda i: 0, 1)
    retain = tiny_data(12, lambda i: 1 + i % 2, 2)
    out = _unlearn(SelectiveSynapticDampening(selection_weighting=1.5, batch_size=64), model, forget, retain)
    ref = copy.deepcopy(model).eval()
    imp_f = grad_importance(ref, forget, 64, "cpu", "ssd")
    imp_d = grad_importance(ref, ArrayData.concat([retain, forget]), 64, "cpu", "ssd")
    dampen(ref, imp_d, imp_f, 1.5, 1.0)
    for (n, p), (_, q) in zip(out.named_parameters(), ref.named_parameters()):
        assert torch.equal(p, q), n
    assert not torch.equal(out.fc.weight, model.fc.weight)
