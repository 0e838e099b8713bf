"""COLA (inferred): the supervised contrastive loss against a loop implementation."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from unlearnkit.methods.cola import supcon_loss


def loop_supcon(z, y, tau):
    n, terms = len(z), []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        denom = math.log(sum(math.exp(float(z[i] @ z[a]) / tau) for a in others))
        pos = [p for p in others if y[p] == y[i]]
        if pos:
            terms.append(-sum(float(z[i] @ z[p]) / tau - denom for p in pos) / len(pos))
    return sum(terms) / len(terms)


def test_supcon_matches_loop():
    torch.manual_seed(0)
    z = F.normalize(torch.randn(7, 4), dim=1)
    y = torch.tensor([0, 0, 1, 1, 1, 2, 3])   # classes 2 and 3 have no positive: not anchors
    assert supcon_loss(z, y, 0.1).item() == pytest.approx(loop_supcon(z, y, 0.1), rel=1e-5)


def test_supcon_zero_without_positives():
    z = F.normalize(torch.randn(3, 4), dim=1)
    loss = supcon_loss(z, torch.tensor([0, 1, 2]), 0.1)
    assert loss.item() == 0.0
