"""FCS (kgltop1): its two losses against hand-written formulas, its cosine schedule, and one epoch of its
three phases (one step each) against a hand computation on a tiny linear model."""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from test_method_ssd import Tiny, tiny_data  # the tiny linear model and data of the SSD tests

from unlearnkit.methods import METHODS
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.forget_contrast_strengthen import (
    ForgetContrastStrengthen,
    contrast_loss,
    cosine_step_lr,
    uniform_kl,
)


def run(method, model, forget, retain, seed=0):
    parts = MethodData(num_classes=3, forget=forget, retain=retain, forgotten_classes=(0,))
    return method._unlearn(copy.deepcopy(model), parts, None, torch.device("cpu"),
                           torch.Generator().manual_seed(seed), False).model


def test_uniform_kl_is_kl_from_the_uniform_distribution():
    z = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    p = torch.softmax(z, dim=1)
    by_hand = sum(sum((1 / 3) * (math.log(1 / 3) - math.log(p[i, c])) for c in range(3)) for i in range(2)) / 2
    assert abs(float(uniform_kl(z)) - by_hand) < 1e-6
    assert abs(float(uniform_kl(torch.full((4, 5), 7.0)))) < 1e-7


def test_contrast_loss_is_the_mean_negative_log_softmax_over_retain_and_stops_at_the_retain_side():
    f = torch.tensor([[1.0, 0.0], [0.5, -1.0]], requires_grad=True)
    r = torch.tensor([[0.0, 2.0], [1.0, 1.0], [-1.0, 0.5]], requires_grad=True)
    t = 1.15
    s = [[float(f[i].detach() @ r[j].detach()) / t for j in range(3)] for i in range(2)]
    by_hand = -sum(s[i][j] - math.log(sum(math.exp(v) for v in s[i])) for i in range(2) for j in range(3)) / 6
    loss = contrast_loss(f, r, t)
    assert abs(float(loss.detach()) - by_hand) < 1e-6
    loss.backward()
    assert f.grad is not None and r.grad is None


def test_cosine_step_lr_anneals_from_lr_to_eta_min():
    assert abs(cosine_step_lr(3e-4, 1e-6, 0, 10) - 3e-4) < 1e-15
    assert abs(cosine_step_lr(3e-4, 1e-6, 10, 10) - 1e-6) < 1e-15
    assert abs(cosine_step_lr(3e-4, 1e-6, 5, 10) - (3e-4 + 1e-6) / 2) < 1e-15


def _step(model, loss_of, lr, weight_decay=0.0):
    """One first SGD step (momentum has no effect on a first step) with weight decay."""
    params = list(model.parameters())
    grads = torch.autograd.grad(loss_of(model), params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p -= lr * (g + weight_decay * p)


def test_one_epoch_is_flatten_then_contrast_then_strengthen():
    torch.manual_seed(0)
    model = Tiny()
    forget, retain = tiny_data(5, lambda i: 0, 1), tiny_data(7, lambda i: 1 + i % 2, 2)
    m = ForgetContrastStrengthen(epochs=1, batch_size=32)  # one batch per phase: each optimizer steps once
    out = run(m, model, forget, retain)
    ref = copy.deepcopy(model)
    _step(ref, lambda net: uniform_kl(net(forget.x)), m.lr)
    _step(ref, lambda net: contrast_loss(net(forget.x), net(retain.x), m.temperature), m.forget_lr)  # t = 0
    _step(ref, lambda net: F.cross_entropy(net(retain.x), retain.y), m.retain_lr * 32 / 64, m.retain_weight_decay)
    assert torch.allclose(out.fc.weight, ref.fc.weight, atol=1e-6)
    assert torch.allclose(out.fc.bias, ref.fc.bias, atol=1e-6)
    assert not torch.allclose(out.fc.weight, model.fc.weight)


def test_defaults_are_deepunlearns_kgltop1_and_the_aliases_resolve():
    m = METHODS.get("kgltop1")()
    assert METHODS.get("FCS") is ForgetContrastStrengthen
    assert (m.epochs, m.batch_size, m.lr, m.momentum, m.weight_decay) == (8, 256, 0.005, 0.9, 0.0)
    assert (m.forget_lr, m.forget_momentum, m.forget_weight_decay, m.eta_min, m.temperature) == (
        3e-4, 0.9, 0.0, 1e-6, 1.15)
    assert (m.retain_lr, m.retain_momentum, m.retain_weight_decay, m.augment) == (1e-3, 0.9, 1e-2, False)
