"""Amnesiac: one random *incorrect* label per forget sample (the benchmarks' relabelling variant)."""
import pytest

from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods import amnesiac as am_module
from unlearnkit.methods.common import random_labels


def test_ssd_variant_relabels_once_with_incorrect_labels(monkeypatch, digits_split, digits_original):
    calls = []

    def spy(n, k, gen, exclude=None):
        out = random_labels(n, k, gen, exclude)
        calls.append((out, exclude))
        return out

    monkeypatch.setattr(am_module, "random_labels", spy)
    m = METHODS.get("amnesiac").from_preset("small", epochs=1)
    res = m.unlearn(digits_original, digits_split, seed=0)
    assert len(calls) == 1  # drawn once, before training
    labels, true = calls[0]
    assert (labels != true).all() and len(labels) == len(digits_split.train_forget)
    assert res.history[0]["samples"] == len(digits_split.train_forget) + len(digits_split.train_retain)


def test_unknown_bn_mode_is_refused_when_the_method_is_built():
    with pytest.raises(UserError, match="bn_mode"):
        METHODS.get("amnesiac")(bn_mode="nope")
