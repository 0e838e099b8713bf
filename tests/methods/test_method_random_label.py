"""RL: labels ~ Uniform over all K classes (the forgotten class included), drawn with the seed."""
import torch

from unlearnkit.methods import METHODS
from unlearnkit.methods import random_label as rl_module
from unlearnkit.methods.common import random_labels


def test_random_labels_cover_all_classes_including_true_one():
    gen = torch.Generator().manual_seed(0)
    y = random_labels(5000, 10, gen)
    counts = torch.bincount(y, minlength=10)
    assert (counts > 400).all() and (counts < 600).all()


def test_random_labels_exclude_never_returns_the_excluded_label():
    gen = torch.Generator().manual_seed(0)
    true = torch.randint(0, 10, (5000,), generator=gen)
    y = random_labels(5000, 10, gen, exclude=true)
    assert (y != true).all()
    assert set(y[true == 3].tolist()) == set(range(10)) - {3}


def test_forget_pass_uses_uniform_labels_over_all_classes(monkeypatch, digits_split, digits_original):
    drawn = []

    def spy(n, k, gen, exclude=None):
        out = random_labels(n, k, gen, exclude)
        drawn.append(out)
        return out

    monkeypatch.setattr(rl_module, "random_labels", spy)
    m = METHODS.get("RL").from_preset("small", epochs=1)
    res = m.unlearn(digits_original, digits_split, seed=0)
    labels = torch.cat(drawn)
    assert len(labels) == len(digits_split.train_forget)  # one fresh label per forget sample per epoch
    assert set(labels.tolist()) == set(range(10))  # the forgotten class 3 included
    assert [h["epoch"] for h in res.history] == [1]
