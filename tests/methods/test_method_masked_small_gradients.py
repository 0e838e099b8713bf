"""MSG (kgltop2): which convolution weights are re-initialised, and one fine-tuning step with the kept
weights' gradients scaled, checked by hand on a tiny convolutional model."""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.methods import METHODS
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.masked_small_gradients import (
    MaskedSmallGradients,
    annealed_lr,
    reinit_entries,
    small_gradient_mask,
)


class TinyConv(nn.Module):
    """A 3x3 convolution (18 weights, no bias, no BatchNorm) and a linear classifier on 4x4 images."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 3, padding=1, bias=False)
        self.fc = nn.Linear(32, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def data(n, label_of, seed):
    g = torch.Generator().manual_seed(seed)
    return ArrayData(torch.rand(n, 1, 4, 4, generator=g), torch.tensor([label_of(i) for i in range(n)]),
                     (0.0,), (1.0,))


def run(method, model, forget, retain, seed=0):
    parts = MethodData(num_classes=3, forget=forget, retain=retain, forgotten_classes=(0,))
    return method._unlearn(copy.deepcopy(model), parts, None, torch.device("cpu"),
                           torch.Generator().manual_seed(seed), False).model


def test_mask_holds_the_rounded_fraction_of_smallest_gradients_ties_to_the_lower_index():
    g = torch.tensor([[0.5, -0.1, 0.3], [0.1, -2.0, 0.0], [0.05, 0.7, -0.3]])
    mask = small_gradient_mask(g, 0.35)  # round(0.35 * 9) = round(3.15) = 3 entries
    # |g| ascending: 0.0 at (1,2), 0.05 at (2,0), then the tie 0.1 at (0,1) and (1,0): (0,1) comes first
    assert mask.tolist() == [[False, True, False], [False, False, True], [True, False, False]]
    assert small_gradient_mask(g, 0.45).sum() == 4  # round(4.05): both tied entries
    assert not small_gradient_mask(g, 0.0).any() and small_gradient_mask(g, 1.0).all()


def test_reinit_draws_kaiming_normal_fan_out_values_from_the_generator_only_where_masked():
    w = torch.randn(4, 3, 3, 3)
    mask = torch.rand(w.shape) < 0.5
    before = w.clone()
    reinit_entries(w, mask, torch.Generator().manual_seed(5))
    fresh = torch.randn(w.shape, generator=torch.Generator().manual_seed(5)) * math.sqrt(2.0 / (4 * 9))
    assert torch.equal(w[mask], fresh[mask])
    assert torch.equal(w[~mask], before[~mask])


def test_annealed_lr_rises_then_falls_as_the_reference_scheduler_per_epoch():
    assert [round(annealed_lr(0.3, e, 5), 12) for e in range(5)] == [0.1, 0.2, 0.3, 0.2, 0.1]
    assert [annealed_lr(1.0, e, 1) for e in range(1)] == [1.0]
    assert [annealed_lr(1.0, e, 2) for e in range(2)] == [1.0, 0.5]


def test_the_smallest_gradient_conv_weights_are_reinitialised_and_nothing_else():
    torch.manual_seed(0)
    model = TinyConv()
    forget, retain = data(6, lambda i: 0, 1), data(5, lambda i: 1 + i % 2, 2)  # subset = all of retain
    out = run(MaskedSmallGradients(epochs=0, batch_size=64), model, forget, retain)
    ref = copy.deepcopy(model)
    F.cross_entropy(ref(retain.x), retain.y).backward()
    (-F.cross_entropy(ref(forget.x), forget.y)).backward()  # g = grad CE(D_r subset) - grad CE(D_f)
    expected = small_gradient_mask(ref.conv.weight.grad, 0.3)
    assert int(expected.sum()) == round(0.3 * 18) == 5
    assert torch.equal(out.conv.weight != model.conv.weight, expected)
    assert torch.equal(out.fc.weight, model.fc.weight) and torch.equal(out.fc.bias, model.fc.bias)


def test_one_step_scales_the_kept_weights_gradient_by_kept_grad_scale():
    torch.manual_seed(1)
    model = TinyConv()
    forget, retain = data(4, lambda i: 0, 3), data(8, lambda i: 1 + i % 2, 4)
    kw = {"batch_size": 64, "momentum": 0.0, "weight_decay": 0.0, "kept_grad_scale": 0.25, "lr": 0.1}
    start = run(MaskedSmallGradients(epochs=0, **kw), model, forget, retain, seed=7)  # the same draws
    out = run(MaskedSmallGradients(epochs=1, **kw), model, forget, retain, seed=7)
    reinit = start.conv.weight != model.conv.weight
    loss = F.cross_entropy(start(retain.x), retain.y)
    g_conv, g_fc = torch.autograd.grad(loss, [start.conv.weight, start.fc.weight])
    scale = torch.where(reinit, 1.0, 0.25)
    assert torch.allclose(out.conv.weight, start.conv.weight - 0.1 * scale * g_conv, atol=1e-6)
    assert torch.allclose(out.fc.weight, start.fc.weight - 0.1 * g_fc, atol=1e-6)
    assert reinit.any() and (~reinit).any()


def test_defaults_are_deepunlearns_kgltop2_and_the_aliases_resolve():
    m = METHODS.get("kgltop2")()
    assert METHODS.get("MSG") is MaskedSmallGradients
    assert (m.lr, m.epochs, m.batch_size, m.init_rate, m.kept_grad_scale, m.momentum, m.weight_decay) == (
        1e-3, 5, 64, 0.3, 0.1, 0.9, 5e-4)
    assert not m.augment and m.bn_mode == "train"
