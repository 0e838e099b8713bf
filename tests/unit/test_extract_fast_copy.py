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
