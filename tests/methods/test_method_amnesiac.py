"""Amnesiac: one random *incorrect* label per forget sample (SSD variant); Mirage variant on D_f only."""
import pytest

from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods import amnesiac as am_module
from unlearnkit.methods.common import n_batches, random_labels


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


def test_mirage_variant_trains_on_forget_only_with_uniform_labels(monkeypatch, digits_split, digits_original):
    calls = []

    def spy(n, k, gen, exclude=None):
        calls.append(exclude)
        return random_labels(n, k, gen, exclude)

    monkeypatch.setattr(am_module, "random_labels", spy)
    m = METHODS.get("amnesiac").from_preset("mirage", epochs=1)
    assert m.variant == "mirage" and m.lr == 1e-3
    res = m.unlearn(digits_original, digits_split, seed=0)
    assert res.history[0]["samples"] == len(digits_split.train_forget)
    assert len(calls) == n_batches(digits_split.train_forget, m.batch_size)  # per batch, D_f only
    assert all(c is None for c in calls)  # the true class may be drawn


def test_unknown_variant_is_refused_when_the_method_is_built():
    with pytest.raises(UserError, match="variant must be one of ssd, mirage, not 'nope'"):
        METHODS.get("amnesiac")(variant="nope")
