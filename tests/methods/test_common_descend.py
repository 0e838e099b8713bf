"""``methods.common.descend``, the step loop shared by the one-data-part methods, against a loop
written out by hand on a linear model: same weights, same history (sign, epoch info, means)."""
import torch
import torch.nn.functional as F
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.methods.common import descend


def _data(n=10):
    g = torch.Generator().manual_seed(0)
    return ArrayData(torch.rand(n, 1, 2, 2, generator=g), torch.randint(0, 3, (n,), generator=g), (0.5,), (0.25,))


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 3))


def test_descend_matches_a_hand_written_loop():
    data = _data()
    m1, m2 = _model(), _model()
    o1, o2 = torch.optim.SGD(m1.parameters(), lr=0.1), torch.optim.SGD(m2.parameters(), lr=0.1)
    seen = []
    hist = descend(m1, o1, data, lambda x, y: -F.cross_entropy(m1(x), y), epochs=2, batch_size=4,
                   gen=torch.Generator().manual_seed(3), device="cpu", augment=None, bn_mode="train",
                   method="t", label="forget_ce", progress=False, sign=-1.0,
                   epoch_info=lambda e: seen.append(e) or {"k": 10 * e})
    gen = torch.Generator().manual_seed(3)
    expected = []
    for epoch in range(2):
        losses = []
        for x, y in data.batches(4, shuffle=True, generator=gen, device="cpu"):  # 4 + 4 + 2 rows
            loss = -F.cross_entropy(m2(x), y)
            o2.zero_grad()
            loss.backward()
            o2.step()
            losses.append(float(loss.detach()))
        expected.append({"epoch": epoch + 1, "k": 10 * epoch, "forget_ce": -sum(losses) / 3})
    assert seen == [0, 1]
    assert hist == expected
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert torch.equal(a, b)
    assert m1.training
