"""A held-out MLP probe of the forgotten class: how easily a small non-linear read-out finds it in a layer.

:func:`heldout_log_loss` fits, for each probe seed, 5-fold stratified cross-validated MLPs (one hidden layer of 64
ReLU units, L2 ``alpha``, Adam at lr 1e-3 in minibatches of 200, a fixed number of epochs) to tell the forget rows
(``y`` = 1) from the retained ones, and returns each seed's held-out binary log loss over every row: lower means the
class is easier to find. All ``5 × len(seeds)`` fits are trained together as one batched problem (``torch.baddbmm``),
each with its own fold, scaler and start.

It is the ground truth's probe of the attack suite (``benchmarks/mlp_probe.py``: scikit-learn's ``MLPClassifier``
behind a ``StandardScaler``, the same folds, architecture, L2 and optimiser), batched. Differences from scikit-learn,
for batching: a fixed ``epochs`` (scikit-learn stops when the training loss has not improved by 1e-4 for 10 epochs:
116-124 epochs on a digits retrain); every fit's epoch as long as the smallest fold's; torch's Adam (scikit-learn's
but for where ε enters); float32; torch's random streams. ``benchmarks/mlp_probe_cost.py`` measured how the two
agree (Pearson r 0.983 of the log losses over 16 digits models; ``benchmarks/results/mlp_probe_cost.json``).

Invariance (what the audit's deciding numbers need, :mod:`unlearnkit.metrics.prepare`): the features are first
prepared by the one preparation every statistic uses (dead units by each unit's own scale, then each unit to mean 0,
variance 1, in float64), and the live units are put in a canonical order (by their standardised mean on the forget
rows), so that a copy of the layer with its units rescaled by powers of two (2**±100 included) and permuted reads
the same losses: each fit's starting weight for a unit does not depend on where the unit sits. Each fold's own
scaler then runs on the prepared units, as scikit-learn's does on the raw ones.

[INFERRED] No reference code for reading it in an audit: the probe is the one the attack suite defines keepers by
(docs/audit.md, "The attack suite the audit is scored on"); the audit's use of it is
:mod:`unlearnkit.audit.probe_test`.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .prepare import prepare

#: folds of the cross-validation (as the ground truth's probe)
FOLDS = 5


def _glorot(b: int, fan_in: int, fan_out: int, factor: float, g: torch.Generator) -> tuple[Tensor, Tensor]:
    """scikit-learn's MLP initialisation for ``b`` fits: weights and biases uniform in ±sqrt(factor / (in + out))."""
    bound = math.sqrt(factor / (fan_in + fan_out))
    w = (torch.rand(b, fan_in, fan_out, generator=g) * 2 - 1) * bound
    return w.requires_grad_(), ((torch.rand(b, 1, fan_out, generator=g) * 2 - 1) * bound).requires_grad_()


def canonical_units(x, y: np.ndarray) -> Tensor:
    """``x``'s live units (:func:`~unlearnkit.metrics.prepare.prepare`), standardised in float64 and ordered by their
    mean on the rows where ``y`` is 1 (a stable sort): the same matrix for any positive rescaling and permutation of
    ``x``'s units (exactly, for powers of two)."""
    z = prepare(x, whiten=False).standardised(x)
    key = z[torch.as_tensor(np.asarray(y) == 1)].mean(0)
    return z[:, torch.argsort(key, stable=True)]


def folds(y: np.ndarray, seeds: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (train, test) rows of each fit: ``StratifiedKFold(5, shuffle=True, random_state=seed)`` per seed."""
    from sklearn.model_selection import StratifiedKFold

    return [fold for s in seeds for fold in StratifiedKFold(FOLDS, shuffle=True, random_state=s).split(y, y)]


def heldout_log_loss(x, y: np.ndarray, seeds: list[int], *, hidden: int = 64, alpha: float = 1e-3,
                     epochs: int = 120, batch: int = 200, lr: float = 1e-3) -> list[float]:
    """Held-out (5-fold) binary log loss of the MLP probe of ``y`` on ``x``, one per seed in ``seeds`` (module
    docstring). ``x``: rows × units (non-finite values read as 0); ``y``: 0/1 with at least 5 rows of each."""
    y = np.asarray(y, dtype=np.float64)
    if min(int(y.sum()), int((1 - y).sum())) < FOLDS:
        raise ValueError(f"the MLP probe needs at least {FOLDS} rows of each class, got {int(y.sum())} and "
                         f"{int((1 - y).sum())}")
    z64 = canonical_units(x, y)
    if z64.shape[1] == 0:  # no live unit: nothing to read but the base rate
        p = float(y.mean())
        return [float(-(p * math.log(p) + (1 - p) * math.log(1 - p)))] * len(seeds)
    splits = folds(y, seeds)
    trains = [torch.as_tensor(tr) for tr, _ in splits]
    mu = torch.stack([z64[t].mean(0) for t in trains])
    sd = torch.stack([z64[t].std(0, unbiased=False) for t in trains])
    sd[sd <= 0] = 1.0
    z = ((z64[None] - mu[:, None]) / sd[:, None]).float()  # (fits, rows, units): each fit's own scaler
    yt = torch.as_tensor(y, dtype=torch.float32)
    g = torch.Generator().manual_seed(seeds[0])
    (w1, b1), (w2, b2) = _glorot(len(splits), z.shape[2], hidden, 6.0, g), _glorot(len(splits), hidden, 1, 2.0, g)
    opt = torch.optim.Adam([w1, b1, w2, b2], lr=lr)
    n_tr = min(len(t) for t in trains)

    def logits(rows: Tensor) -> Tensor:  # rows: (fits, m) -> (fits, m)
        xb = torch.gather(z, 1, rows[..., None].expand(-1, -1, z.shape[2]))
        return torch.baddbmm(b2, torch.relu(torch.baddbmm(b1, xb, w1)), w2).squeeze(-1)

    for _ in range(epochs):
        order = torch.stack([t[torch.randperm(len(t), generator=g)[:n_tr]] for t in trains])
        for i in range(0, n_tr, batch):
            rows = order[:, i:i + batch]
            fit = F.binary_cross_entropy_with_logits(logits(rows), yt[rows], reduction="none").mean(1)
            l2 = (w1 ** 2).sum((1, 2)) + (w2 ** 2).sum((1, 2))
            opt.zero_grad()
            (fit + 0.5 * alpha * l2 / rows.shape[1]).sum().backward()
            opt.step()
    p = np.zeros((len(seeds), len(y)))
    with torch.no_grad():
        for j, (_, te) in enumerate(splits):
            p[j // FOLDS, te] = torch.sigmoid(logits(torch.as_tensor(te)[None].expand(len(splits), -1))[j]).numpy()
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return [float(-(y * np.log(q) + (1 - y) * np.log(1 - q)).mean()) for q in p]
