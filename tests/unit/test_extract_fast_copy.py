"""``extract`` on the CPU runs a convolutional model as its channels-last copy: the same features up to float
rounding, the model given unchanged, and a model whose forward cannot run channels-last run as it is."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.models.features import LOGITS, extract, fast_copy
from unlearnkit.models.zoo import Tap


class _Net(nn.Module):
    def __init__(self, use_view: bool):
        super().__init__()
        self.use_view = use_view
        self.conv = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.fc = nn.Linear(8 * 4 * 4, 5)
        self.unlearnkit_taps = {"conv": Tap("conv", channels=8), "penultimate": Tap("fc", "input")}

    def forward(self, x):
        h = self.conv(x)
        return self.fc(h.view(h.size(0), -1) if self.use_view else h.flatten(1))


def _data(n=40):
    g = torch.Generator().manual_seed(0)
    return ArrayData(torch.rand(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g),
                     (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def _plain(model, data):
    model.eval()
    with torch.no_grad():
        return model(data.normalize(data.x).contiguous())


def test_channels_last_copy_gives_the_same_features_and_leaves_the_model_alone():
    torch.manual_seed(0)
    model = _Net(use_view=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    copy_ = fast_copy(model, "cpu")
    assert copy_ is not model and copy_.conv[0].weight.is_contiguous(memory_format=torch.channels_last)
    data = _data()
    got = extract(model, data, ["conv", "penultimate", LOGITS], batch_size=16)
    assert torch.allclose(got[LOGITS], _plain(model, data), atol=1e-5)
    assert got["conv"].shape == (40, 8) and got["penultimate"].shape == (40, 128)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert model.conv[0].weight.is_contiguous()  # the caller's model keeps its memory order
    assert fast_copy(copy_, "cpu") is copy_  # already channels-last: used as it is


def test_a_forward_that_cannot_run_channels_last_runs_as_given():
    torch.manual_seed(0)
    model = _Net(use_view=True)
    data = _data()
    with pytest.raises(RuntimeError, match="view"):  # the channels-last copy cannot run it
        with torch.no_grad():
            fast_copy(model, "cpu").eval()(data.normalize(data.x).contiguous(memory_format=torch.channels_last))
    got = extract(model, data, ["penultimate", LOGITS], batch_size=16)
    assert torch.allclose(got[LOGITS], _plain(model, data), atol=1e-6)


def test_a_model_without_convolutions_is_not_copied():
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(12, 3))
    assert fast_copy(mlp, "cpu") is mlp


def _randomise_bn(model):
    g = torch.Generator().manual_seed(1)
    for mod in model.modules():
        if isinstance(mod, nn.BatchNorm2d):
            n = mod.num_features
            mod.running_mean.copy_(torch.randn(n, generator=g))
            mod.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(n, generator=g))


def test_batchnorm_folded_into_the_convolution_before_it_gives_the_same_function():
    from unlearnkit.models.zoo import small_cnn

    torch.manual_seed(0)
    model = small_cnn(10, image_size=8).eval()
    _randomise_bn(model)
    x = torch.randn(16, 1, 8, 8)
    with torch.no_grad():
        want = model(x)
        copy_ = fast_copy(model, "cpu")
        got = copy_(x.contiguous(memory_format=torch.channels_last))
    assert not any(isinstance(m, nn.BatchNorm2d) for m in copy_.modules())  # all four folded
    assert sum(isinstance(m, nn.BatchNorm2d) for m in model.modules()) == 4  # the model given keeps its own
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


class _Custom(nn.Sequential):
    def forward(self, x):  # does not run its children in order: nothing in it is folded
        return self[0](x) + self[1](x)


def test_folding_leaves_pairs_it_cannot_fold_exactly_alone():
    from unlearnkit.models.features import fold_batchnorm

    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    model = nn.Sequential(conv, _Custom(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)))
    model.unlearnkit_taps = {"c": Tap("0.0")}  # the convolution's own output is read: not folded
    model.eval()
    assert fold_batchnorm(model) == 0
    del model.unlearnkit_taps
    model[0][1].train()  # batch statistics: not folded
    assert fold_batchnorm(model) == 0
    model[0][1].eval()
    model[0][1].weight.data.fill_(1e38)
    model[0][1].running_var.fill_(1e-30)
    model[0][1].eps = 0.0
    assert fold_batchnorm(model) == 0  # the folded weights (about 1e53) are not finite in float32
    model[0][1].weight.data.fill_(1.0)
    model[0][1].eps = 1e-5
    assert fold_batchnorm(model) == 1 and isinstance(model[0][1], nn.Identity)
