"""CT (kgltop5): the kernel transposition makes the network read transposed images, non-square kernels
are left alone, and one fine-tuning step matches a hand computation."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from test_method_masked_small_gradients import TinyConv, data, run
from torch import nn

from unlearnkit.methods import METHODS
from unlearnkit.methods.conv_transpose import ConvTranspose, cosine_epoch_lr, transpose_kernels
from unlearnkit.models import zoo


def test_transposed_small_cnn_is_the_original_on_transposed_images():
    torch.manual_seed(0)
    model = zoo.create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)
    for m in model.modules():  # non-trivial BatchNorm statistics and affine parameters
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            nn.init.uniform_(m.weight, 0.5, 1.5)
            nn.init.uniform_(m.bias, -0.2, 0.2)
    model.eval()
    moved = copy.deepcopy(model)
    assert transpose_kernels(moved) == (4, 0)
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        assert torch.allclose(moved(x), model(x.transpose(2, 3)), atol=1e-5)
        assert not torch.allclose(moved(x), model(x), atol=1e-3)
    assert torch.equal(moved.block1[0].weight, model.block1[0].weight.transpose(2, 3))
    assert torch.equal(moved.fc.weight, model.fc.weight)


def test_non_square_kernels_are_skipped():
    model = nn.Sequential(nn.Conv2d(1, 2, (1, 3)), nn.Conv2d(2, 2, 3))
    before = copy.deepcopy(model)
    assert transpose_kernels(model) == (1, 1)
    assert torch.equal(model[0].weight, before[0].weight)
    assert torch.equal(model[1].weight, before[1].weight.transpose(2, 3))


def test_cosine_epoch_lr_is_the_reference_schedule_stepped_per_epoch():
    assert [round(cosine_epoch_lr(1.0, e, 3), 12) for e in range(3)] == [1.0, 0.75, 0.25]
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=4)
    for e in range(4):
        assert abs(opt.param_groups[0]["lr"] - cosine_epoch_lr(0.2, e, 4)) < 1e-12
        opt.step()
        sched.step()


def test_one_step_is_plain_sgd_from_the_transposed_weights():
    torch.manual_seed(2)
    model = TinyConv()
    retain = data(8, lambda i: i % 3, 4)
    out = run(ConvTranspose(epochs=1, lr=0.1, batch_size=64, weight_decay=1e-2), model, None, retain)
    start = copy.deepcopy(model)
    transpose_kernels(start)
    loss = F.cross_entropy(start(retain.x), retain.y)
    params = list(start.parameters())
    grads = torch.autograd.grad(loss, params)
    for (name, p), q, g in zip(out.named_parameters(), params, grads):
        assert torch.allclose(p, q - 0.1 * (g + 1e-2 * q), atol=1e-6), name  # first step: no momentum yet


def test_defaults_are_deepunlearns_kgltop5_and_the_aliases_resolve():
    m = METHODS.get("kgltop5")()
    assert METHODS.get("CT") is ConvTranspose
    assert (m.lr, m.epochs, m.batch_size, m.momentum, m.weight_decay, m.augment) == (1e-3, 3, 64, 0.9, 5e-4, False)
    assert ConvTranspose.needs == frozenset({"retain"})
