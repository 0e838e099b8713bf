"""CU: the contrastive unlearning loss on hand-computed cases and against a loop transcription."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from unlearnkit.methods.contrastive import contrastive_unlearning_loss


def test_hand_computed_case():
    # z_u = [1, 0]; retain dots = [0.6, 0, 1] (tau 1) -> s = [-0.4, -1, 0]; positives: 1st and 3rd
    zu = torch.tensor([[1.0, 0.0]])
    zr = torch.tensor([[0.6, 0.8], [0.0, 1.0], [1.0, 0.0]])
    loss = contrastive_unlearning_loss(zu, zr, torch.tensor([0]), torch.tensor([0, 1, 0]), tau=1.0, single_class=False)
    # -[ (-1)/1 - 3 * log(e^-0.4 + e^0) / 1 ]
    assert loss.item() == pytest.approx(1 + 3 * math.log(1 + math.exp(-0.4)), rel=1e-6)


def test_single_class_row_without_positive_uses_log_p_zero():
    zu = torch.tensor([[1.0, 0.0]])
    zr = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # dots [1, 0], tau 0.5 -> s = [2, 0] - 2 = [0, -2]; no positive: L = -mean(s over negatives) = 1
    loss = contrastive_unlearning_loss(zu, zr, torch.tensor([3]), torch.tensor([1, 2]), tau=0.5, single_class=True)
    assert loss.item() == pytest.approx(1.0)
    # the random-sample mode leaves such rows out (the reference takes log 0 there)
    loss2 = contrastive_unlearning_loss(zu, zr, torch.tensor([3]), torch.tensor([1, 2]), tau=0.5, single_class=False)
    assert loss2.item() == 0.0 and torch.isfinite(loss2)


def loop_reference(zu, zr, yu, yr, tau, single_class):
    """Transcription of the reference Loss_v1 with explicit loops (rows with positives only)."""
    rows = []
    for i in range(len(zu)):
        s = [float(zu[i] @ zr[j]) / tau for j in range(len(zr))]
        m = max(s)
        s = [v - m for v in s]
        pos = [float(yu[i] == yr[j]) for j in range(len(zr))]
        neg = [1 - p for p in pos]
        p_sum = sum((math.exp(v) + 1e-20) * p for v, p in zip(s, pos))
        if single_class and sum(pos) == 0:
            p_sum += 1
        rows.append((sum(v * n for v, n in zip(s, neg)) - len(zr) * math.log(p_sum)) / sum(neg))
    return -sum(rows) / len(rows)


def test_matches_loop_transcription_of_reference():
    torch.manual_seed(0)
    zu = F.normalize(torch.randn(6, 5), dim=1)
    zr = F.normalize(torch.randn(6, 5), dim=1)
    yu = torch.tensor([0, 1, 2, 0, 1, 2])
    yr = torch.tensor([2, 1, 0, 0, 1, 2])   # every row has positives and negatives
    got = contrastive_unlearning_loss(zu, zr, yu, yr, tau=0.7, single_class=False)
    assert got.item() == pytest.approx(loop_reference(zu, zr, yu, yr, 0.7, False), rel=1e-5)
    yu1 = torch.full((6,), 9)               # single class: no positive anywhere
    got1 = contrastive_unlearning_loss(zu, zr, yu1, yr, tau=0.7, single_class=True)
    assert got1.item() == pytest.approx(loop_reference(zu, zr, yu1, yr, 0.7, True), rel=1e-5)


def test_minimising_pulls_forget_embedding_toward_other_classes():
    torch.manual_seed(0)
    zr = F.normalize(torch.randn(8, 4), dim=1)
    yr = torch.arange(8) % 4
    raw = torch.randn(1, 4, requires_grad=True)
    before = (F.normalize(raw, dim=1) @ zr.T).mean().item()
    opt = torch.optim.SGD([raw], lr=0.1)
    for _ in range(50):
        loss = contrastive_unlearning_loss(F.normalize(raw, dim=1), zr, torch.tensor([9]), yr, 0.7, True)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (F.normalize(raw, dim=1) @ zr.T).mean().item() > before
