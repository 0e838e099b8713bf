"""IU: what the reference WoodFisher recursion computes, and the method's update on a tiny model.

Derivation (see the module docstring): with ``A_j = I + (1/N) sum_{i=1..j} s_i s_i^T`` the step
``k <- k - (k.s)/(N + o.s) o`` is Sherman-Morrison for ``A_j^-1 v`` whenever ``o = A_{j-1}^-1 s_j``.
The recursion keeps ``o = A_{j-1}^-1 g_0`` (it only rescales ``o``), so it is exact when every sample
gradient equals ``g_0``, giving ``N (N I + sum_{i>=1} g g^T)^-1 v``; in general ``k - v`` stays
parallel to ``g_0``.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from unlearnkit.data.arrays import ArrayData
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.influence import InfluenceUnlearning, flat_sample_grads, woodfisher_ihvp


def test_recursion_is_exact_inverse_for_identical_gradients():
    torch.manual_seed(0)
    d, m, n_damp = 6, 9, 5.0
    g = torch.randn(d, dtype=torch.float64)
    v = torch.randn(d, dtype=torch.float64)
    k = woodfisher_ihvp(v, [g] * (m + 1), n_damp)           # sample 0 only seeds o
    explicit = n_damp * torch.linalg.solve(n_damp * torch.eye(d, dtype=torch.float64) + m * torch.outer(g, g), v)
    assert torch.allclose(k, explicit, atol=1e-10)


def test_recursion_only_corrects_along_first_gradient():
    torch.manual_seed(1)
    d = 8
    grads = [torch.randn(d, dtype=torch.float64) for _ in range(20)]
    v = torch.randn(d, dtype=torch.float64)
    k = woodfisher_ihvp(v, grads, 3.0)
    diff = k - v
    g0 = grads[0] / grads[0].norm()
    assert torch.allclose(diff, (diff @ g0) * g0, atol=1e-10)  # k - v is parallel to g_0
    assert diff.norm() > 1e-6
    # and it is *not* the full inverse (N I + sum g g^T)^-1 N v
    hessian = 3.0 * torch.eye(d, dtype=torch.float64) + sum(torch.outer(g, g) for g in grads[1:])
    full = 3.0 * torch.linalg.solve(hessian, v)
    assert not torch.allclose(k, full, atol=1e-3)


def test_single_sample_returns_v():
    v = torch.randn(5)
    assert torch.equal(woodfisher_ihvp(v, [torch.randn(5)], 1000.0), v)


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 5)
        self.fc = nn.Linear(5, 3)

    def forward(self, x):
        return self.fc(torch.tanh(self.fc1(x.flatten(1))))


def arrays(n, seed, labels):
    g = torch.Generator().manual_seed(seed)
    return ArrayData(torch.rand(n, 1, 2, 2, generator=g), torch.tensor(labels), (0.0,), (1.0,))


def test_update_matches_manual_computation():
    torch.manual_seed(0)
    model = Tiny().eval()
    forget = arrays(4, 1, [0, 0, 0, 0])
    retain = arrays(9, 2, [1, 2, 1, 2, 1, 2, 1, 2, 1])
    method = InfluenceUnlearning(alpha=3.0, damping=7.0, num_samples=6, batch_size=4, chunk_size=4)
    out = method._unlearn(copy.deepcopy(model), MethodData(3, forget=forget, retain=retain), None,
                          torch.device("cpu"), torch.Generator(), False).model

    params = list(model.parameters())

    def flat_grad(x, y):
        loss = F.cross_entropy(model(x), y, reduction="sum")
        return torch.cat([g.reshape(-1) for g in torch.autograd.grad(loss, params)])

    nf, nr = 4, 9
    v = flat_grad(forget.x, forget.y) / (nf + nr) - flat_grad(retain.x, retain.y) * nf / ((nf + nr) * nr)
    samples = [flat_grad(retain.x[i:i + 1], retain.y[i:i + 1]) for i in range(6)]
    vec = list(flat_sample_grads(model, retain.subset(torch.arange(6)), 4, "cpu"))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(samples, vec))
    k = woodfisher_ihvp(v, samples, 7.0)
    expected = torch.cat([p.reshape(-1) for p in params]) + 3.0 * k
    got = torch.cat([p.reshape(-1) for p in out.parameters()])
    assert torch.allclose(got, expected, atol=1e-6)
