"""l1-sparse: the reference's linearly decaying l1 coefficient."""
import pytest

from unlearnkit.methods import METHODS
from unlearnkit.methods.l1_sparse import l1_alpha


def test_alpha_schedule_linear_decay():
    expected = [1e-4 * (1 - e / 10) for e in range(10)]
    assert [l1_alpha(1e-4, e, 10, 0) for e in range(10)] == pytest.approx(expected)
    with_tail = [1 - e / 8 for e in range(8)] + [0, 0]
    assert [l1_alpha(1.0, e, 10, 2) for e in range(10)] == pytest.approx(with_tail)
    assert l1_alpha(1.0, 0, 1, 1) == 0.0  # no l1 epochs at all


def test_history_records_the_schedule_and_penalty_shrinks_weights(digits_split, digits_original):
    cls = METHODS.get("l1")
    res = cls.from_preset("small", epochs=2, alpha=1e-3).unlearn(digits_original, digits_split, seed=0)
    assert [h["alpha"] for h in res.history] == pytest.approx([1e-3, 1e-3 / 2])
    l1 = lambda m: sum(float(p.detach().abs().sum()) for p in m.parameters())  # noqa: E731
    plain = cls.from_preset("small", epochs=2, alpha=0.0).unlearn(digits_original, digits_split, seed=0)
    assert l1(res.model) < l1(plain.model)
