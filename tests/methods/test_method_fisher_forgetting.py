"""FF: the vectorised expected Fisher equals the reference's batch-size-1 loop; the mean/variance rules."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.common import per_sample_grads
from unlearnkit.methods.fisher_forgetting import FisherForgetting, expected_fisher, fisher_mean_var


class TinyBN(nn.Module):
    """conv + BN + linear head, like the real models (BN must use running stats in eval)."""

    def __init__(self, k=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 2, 2)
        self.bn = nn.BatchNorm2d(2)
        self.fc = nn.Linear(2, k)
        self.unlearnkit_head = "fc"

    def forward(self, x):
        return self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3)))


def tiny(seed=0):
    torch.manual_seed(seed)
    m = TinyBN()
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m.eval()


def data(n=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    return ArrayData(torch.rand(n, 1, 3, 3, generator=g), torch.randint(0, 3, (n,), generator=g), (0.5,), (0.25,))


def loop_fisher(model, d):
    """The notebook's ``hessian``: batch size 1, one backward per class, p(y|x) * grad^2, / N."""
    acc = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    for x, _ in d.batches(1):
        out = model(x)
        prob = F.softmax(out, -1).detach()
        for y in range(out.shape[1]):
            model.zero_grad()
            F.cross_entropy(out, torch.tensor([y])).backward(retain_graph=True)
            for n, p in model.named_parameters():
                acc[n] += prob[0, y] * p.grad ** 2
    return {n: v / len(d) for n, v in acc.items()}


def test_vectorised_fisher_equals_loop():
    model, d = tiny(), data()
    vec = expected_fisher(model, d, 3, chunk=3, device="cpu")
    ref = loop_fisher(model, d)
    for n in ref:
        assert torch.allclose(vec[n], ref[n], rtol=1e-5, atol=1e-9), n


def test_per_sample_grads_equal_single_sample_backward():
    model, d = tiny(), data(4)
    x, y = next(d.batches(4))
    g = per_sample_grads(model, x, y)
    for i in range(4):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for n, p in model.named_parameters():
            assert torch.allclose(g[n][i], p.grad, atol=1e-6), n


def test_mean_var_rules():
    theta = torch.randn(3, 4)
    fisher = torch.rand(3, 4)
    mu, var = fisher_mean_var(theta, fisher, 1e-6, is_head=True, forget_classes=(1,))
    raw = (1 / (fisher + 1e-8)).clamp(max=1e3).clamp(max=1e2) * 1e-6
    expect = raw.mean(1, keepdim=True).expand_as(theta) * 10
    assert torch.allclose(var[[0, 2]], expect[[0, 2]])
    assert torch.allclose(var[1], torch.full((4,), 1e-3))
    assert torch.equal(mu[1], torch.zeros(4)) and torch.equal(mu[[0, 2]], theta[[0, 2]])
    # a non-head matrix: clamp 1e3, row mean over dim 1, no x10; a vector (BN/bias): x10
    _, v2 = fisher_mean_var(theta, torch.full((3, 4), 1e-9), 1e-6, is_head=False, forget_classes=(1,))
    assert torch.allclose(v2, torch.full((3, 4), 1e-3))
    _, v3 = fisher_mean_var(torch.zeros(5), torch.full((5,), 1e-9), 1e-6, is_head=False, forget_classes=())
    assert torch.allclose(v3, torch.full((5,), 1e-2))


def test_forgotten_rows_are_replaced_and_noise_is_seeded():
    model, d = tiny(), data(12)
    md = MethodData(num_classes=3, forget=d, retain=d, forgotten_classes=(2,))

    def run(seed):
        gen = torch.Generator().manual_seed(seed)
        return FisherForgetting(alpha=1e-8)._unlearn(copy.deepcopy(model), md, None, torch.device("cpu"), gen,
                                                     False).model

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a.fc.weight, b.fc.weight) and not torch.equal(a.fc.weight, c.fc.weight)
    assert a.fc.weight[2].abs().max() < 0.2  # ~N(0, 1e-3)
    assert torch.allclose(a.conv.weight, model.conv.weight, atol=1e-2)
