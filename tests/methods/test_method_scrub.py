"""SCRUB: max-steps only in the first msteps epochs; step-decay learning rate."""
import pytest

from unlearnkit.methods import METHODS
from unlearnkit.methods.common import n_batches
from unlearnkit.methods.scrub import scrub_lr


def test_lr_schedule():
    lrs = [scrub_lr(1.0, e, [3, 5, 9], 0.1) for e in range(1, 11)]
    assert lrs == pytest.approx([1, 1, 1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.001])


def test_max_steps_only_in_first_msteps_epochs(digits_split, digits_original):
    m = METHODS.get("SCRUB").from_preset("small", epochs=2, msteps=1, lr_decay_epochs=[1])
    res = m.unlearn(digits_original, digits_split, original=digits_original, seed=0)
    nf = n_batches(digits_split.train_forget, m.forget_batch_size)
    assert [h["max_steps"] for h in res.history] == [nf, 0]
    assert [h["lr"] for h in res.history] == pytest.approx([m.lr, m.lr * 0.1])
    assert res.history[0]["forget_kl"] >= 0


def test_defaults_are_the_large_scale_notebook():
    m = METHODS.get("scrub")()
    assert (m.lr, m.epochs, m.msteps, m.gamma, m.alpha, m.kd_T) == (5e-4, 3, 2, 0.99, 0.001, 4.0)
    assert (m.forget_batch_size, m.retain_batch_size, m.lr_decay_epochs) == (512, 256, [3, 5, 9])
