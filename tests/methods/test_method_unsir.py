"""UNSIR: the error-maximising noise, the retain subset, and how it differs from Mirage's version."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.methods.unsir import error_maximizing_noise, first_per_class


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x.flatten(1))


def test_noise_maximises_error_and_is_seeded():
    torch.manual_seed(0)
    model = Tiny()
    kw = {"batch_size": 16, "steps": 30, "lr": 0.1, "l2": 0.1, "device": "cpu", "method": "unsir"}
    a = error_maximizing_noise(model, 1, (1, 2, 2), gen=torch.Generator().manual_seed(0), **kw)
    b = error_maximizing_noise(model, 1, (1, 2, 2), gen=torch.Generator().manual_seed(0), **kw)
    start = torch.randn((16, 1, 2, 2), generator=torch.Generator().manual_seed(0))
    assert torch.equal(a, b)
    target = torch.ones(16, dtype=torch.long)
    with torch.no_grad():
        assert F.cross_entropy(model(a), target) > F.cross_entropy(model(start), target)
    assert all(p.grad is None for p in model.parameters())  # only the noise is differentiated


def test_first_per_class_keeps_order():
    y = torch.tensor([1, 0, 1, 2, 1, 0, 2, 1])
    data = ArrayData(torch.zeros(8, 1, 1, 1), y, (0.0,), (1.0,))
    sub = first_per_class(data, [1, 2], 2)
    assert sub.index.tolist() == [0, 2, 3, 6]


def test_unsir_and_mirages_unsir_differ_on_digits(digits_split, digits_original):
    from unlearnkit.methods import METHODS

    quick = dict(noise_steps=2, noise_copies=1, repair_epochs=1)
    ref = METHODS.get("unsir").from_preset("small", **quick).unlearn(digits_original, digits_split, seed=0)
    mir = METHODS.get("unsir_mirage")(epochs=1).unlearn(digits_original, digits_split, seed=0)
    assert [h["phase"] for h in ref.history] == ["impair", "repair"]
    assert [h["phase"] for h in mir.history] == ["ascent", "repair"]
