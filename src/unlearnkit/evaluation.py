"""Output-level evaluation of a model on an unlearning split: accuracies (percent) and MIA.

One forward pass per data part (train forget, train retain, full test) gives the logits every
metric here uses; the audit reuses the same pass for its layer features.

Test-set conventions (reference-specs §2.1, pitfall §6.5), both reported:
- ``salun`` (default): ``test_acc`` = accuracy on the test set *without* the forgotten classes
  (= ``test_retain_acc``) for class forgetting; the whole test set for sample forgetting.
- ``purge``: ``test_acc`` = accuracy on the whole test set, forgotten classes included.
``test_acc_full`` always holds the whole-test-set accuracy.

MIA:
- ``mia_efficacy``: SalUn's SVC attack on confidence (§2.2): members = the first ``len(shadow
  test)`` retained training samples, non-members = the (class-wise: retained-class) test set,
  target = the forget set; percent of the forget set predicted non-member (retrain ~100 for
  class forgetting).
- ``mia_auc``: PURGE's AUROC (§2.4): members = forget set, non-members = test samples of the
  forgotten classes (for sample forgetting, which has none: the test set), mean of the loss and
  confidence AUROCs (0.5 ideal).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from .metrics.accuracy import accuracy
from .metrics.mia import mia_auroc, svc_mia_efficacy
from .models.features import LOGITS, extract

TEST_CONVENTIONS = ("salun", "purge")
PARTS = ("train_forget", "train_retain", "test")


def model_outputs(model: nn.Module, split, layers: list[str] | tuple[str, ...] = (), device=None,
                  batch_size: int = 512) -> dict[str, dict[str, Tensor]]:
    """``{part: {layer: features, "logits": logits}}`` for the three data parts, one pass each."""
    want = [*layers, LOGITS]
    return {part: extract(model, getattr(split, part), want, batch_size, device) for part in PARTS}


def _test_parts(split, test_logits: Tensor) -> tuple[Tensor, Tensor]:
    f_idx = split.test_forget.index
    r_idx = split.test_retain.index
    return test_logits[f_idx], test_logits[r_idx]


def train_rows(outputs: dict, split, part, key: str = LOGITS) -> Tensor:
    """Rows of ``outputs`` (train_forget + train_retain) for ``part``, a subset of the training split."""
    pos = torch.cat([split.train_forget.index, split.train_retain.index])
    rows = torch.cat([outputs["train_forget"][key], outputs["train_retain"][key]])
    lookup = torch.full((int(pos.max()) + 1,), -1, dtype=torch.long)
    lookup[pos] = torch.arange(len(pos))
    return rows[lookup[part.index]]


def output_metrics(outputs: dict[str, dict[str, Tensor]], split, test_convention: str = "salun") -> dict:
    """Accuracies and MIA from :func:`model_outputs` (all in percent except ``mia_auc`` in [0, 1]).

    For a concept task (TARF, seed 002): ``forget_acc`` is UA over the whole target concept D_t,
    ``ua_f``/``ua_r`` split it into D_f and the false-remaining D_fr (model mismatch: the affected
    remaining D_ar, which should stay high), and ``retain_acc`` is over the true remaining D_r.
    With flipped labels ``forget_acc`` is on the flipped labels (those the original learned) and
    ``forget_true_acc`` on the true ones.
    """
    if test_convention not in TEST_CONVENTIONS:
        raise ValueError(f"test_convention must be one of {TEST_CONVENTIONS}")
    concept = split.spec.kind == "concept"
    lf, lt = outputs["train_forget"][LOGITS], outputs["test"][LOGITS]
    retain = split.retrain_data
    lr = train_rows(outputs, split, retain) if concept else outputs["train_retain"][LOGITS]
    ltf, ltr = _test_parts(split, lt)
    yf, yr = split.train_forget.y, retain.y
    ytf, ytr = split.test_forget.y, split.test_retain.y
    m = {
        "forget_acc": accuracy(lf, yf),
        "retain_acc": accuracy(lr, yr),
        "test_forget_acc": accuracy(ltf, ytf) if len(ytf) else math.nan,
        "test_retain_acc": accuracy(ltr, ytr),
        "test_acc_full": accuracy(lt, split.test.y),
    }
    if "true_label" in split.train_forget.aux:  # flipped labels (data/splits.py): accuracy on the true class too
        m["forget_true_acc"] = accuracy(lf, split.train_forget.aux["true_label"])
    if concept:
        target = split.extra["target"]
        other = split.extra["affected_retain" if split.extra["task"] == "model_mismatch" else "false_retain"]
        m["ua_f"] = m["forget_acc"]
        m["forget_acc"] = accuracy(train_rows(outputs, split, target), target.y)
        m["ua_r"] = accuracy(train_rows(outputs, split, other), other.y) if len(other) else math.nan
    m["test_acc"] = m["test_acc_full"] if test_convention == "purge" else m["test_retain_acc"]
    if not all(bool(torch.isfinite(z).all()) for z in (lf, lr, lt)):
        # a broken model (NaN/inf logits, e.g. after a diverged gradient ascent): accuracies are what
        # argmax gives, the MIA classifiers cannot be fitted on non-finite scores
        m.update(mia_efficacy=math.nan, mia_auc=math.nan)
        return {k: float(v) for k, v in m.items()}
    probs = lambda z: torch.softmax(z.double(), 1).numpy()  # noqa: E731
    # SalUn: shadow non-members = test (class-wise: retained classes), members = first len() retain samples
    n_shadow = min(len(ytr), len(yr))
    m["mia_efficacy"] = svc_mia_efficacy(probs(lr[:n_shadow]), yr[:n_shadow].numpy(), probs(ltr), ytr.numpy(),
                                         probs(lf), yf.numpy())
    if len(ytf):
        m["mia_auc"] = mia_auroc(lf, yf, ltf, ytf)
    else:  # sample-level forgetting: non-members are test samples
        m["mia_auc"] = mia_auroc(lf, yf, lt, split.test.y)
    return {k: float(v) for k, v in m.items()}


def evaluate(model: nn.Module, split, device=None, test_convention: str = "salun") -> dict:
    """Output metrics of ``model`` on ``split`` (one forward pass per part)."""
    return output_metrics(model_outputs(model, split, (), device), split, test_convention)


def finite_or_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not np.isfinite(x)) else x
