"""Models whose truth is known, built to test the audit (what a gamer of the verdict would build).

* :func:`masked_head`: the original with the forgotten classes masked at the output (head row
  zeroed, bias -1e4): it never predicts them, its representation is exactly the original's;
* :func:`noised`: a copy with Gaussian noise on every weight (a scale of 0 is the model itself);
* :func:`head_retrained`: the original's features with a head re-fitted on the retained data only.

Used by the audit's tests and by ``benchmarks/audit_calibrate.py``, ``audit_error_rates.py`` and
``audit_validation.py``. Plain torch over a model: no training loop, no data loading.
"""
from __future__ import annotations

import copy

import torch


def masked_head(model, classes) -> torch.nn.Module:
    """A copy of ``model`` that never predicts ``classes``: their head rows zeroed, bias −1e4."""
    from ..models.zoo import head_of

    m = copy.deepcopy(model)
    head = head_of(m)
    with torch.no_grad():
        for c in classes:
            head.weight[c].zero_()
            head.bias[c] = -1e4
    return m


def noised(model, scale: float, seed: int = 0) -> torch.nn.Module:
    """A copy of ``model`` with Gaussian noise of ``scale`` x each tensor's std added to every weight
    (a model that computes nothing useful: the audit must call it collapsed)."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g) * scale * p.std())
    return m


def head_retrained(model, split, epochs: int = 3) -> torch.nn.Module:
    """A copy of ``model`` whose head was re-initialised and retrained on the retained data with the
    body frozen: the output forgets (no forget-class signal reaches the new head), the body holds the
    class."""
    from ..models.zoo import head_of

    m = copy.deepcopy(model).eval()
    head = head_of(m)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        head.weight.normal_(0, 0.01, generator=g)
        head.bias.zero_()
    opt = torch.optim.SGD(head.parameters(), lr=0.05, momentum=0.9)
    for _ in range(epochs):
        for xb, yb in split.train_retain.batches(128, shuffle=True, generator=g):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(m(xb), yb).backward()
            opt.step()
    return m
