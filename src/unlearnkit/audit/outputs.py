"""The outputs on the forget rows as deciding measures: their confidence, and whether example by example they
agree with what retrains output.

Per forget example the logit-scaled confidence of its label, φ = log(p_y / (1 − p_y)) (the NeurIPS 2023
unlearning challenge's transform, LiRA's scaling:
:func:`unlearnkit.metrics.forgetting_quality.logit_scaled_confidence`),
under every model. Two statistics per audit data (the training forget rows and, for class forgetting, the test
images of the class):

* ``output confidence``: the mean φ over the rows (two-sided: more confident than retrains = not forgotten,
  less = over-forgotten). Judged against the references it is U-LiRA's membership question at the level of
  one model (:mod:`unlearnkit.metrics.output_test` reports the per-example z form).
* ``output agreement``: does the model's φ rise and fall over the examples as a retrain's does? For a
  reference r, the correlation of φ_r with the mean φ of the other references; for the unlearned model and
  the original, the mean over r of the correlation with the same leave-one-out means (so every value is
  against K − 1 references); as −atanh(correlation) (Fisher's z: higher = less agreement), one-sided. A head
  row re-fitted so the mean φ matches an attacker's own retrain keeps the original's ordering of the examples
  (issue 42: correlation 0.46 with that retrain), which no retrain has (mnist5k class 3: retrains 0.90-0.95
  with the others' mean, the original −0.48).

[INFERRED] No reference code for the per-example agreement statistic; the confidence is the challenge's.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..metrics.forgetting_quality import logit_scaled_confidence
from .checks import Measure
from .context import ForwardPasses

#: correlations are clipped to this before Fisher's z (a perfect correlation would be infinite)
MAX_CORRELATION = 1.0 - 1e-9


def _phis(passes: ForwardPasses, split, sample_level: bool) -> dict[str, list[np.ndarray]]:
    """Per audit data, φ of its forget rows under [unlearned, original, *references]."""
    outs = [passes.out_u, passes.out_o, *passes.out_refs]

    def phi(logits, y) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return logit_scaled_confidence(logits, y)

    sets = {"train": [phi(o["train_forget"]["logits"], split.train_forget.y) for o in outs]}
    if not sample_level and len(split.test_forget):
        rows = torch.from_numpy(split.test_forget.index.numpy())
        sets["test"] = [phi(o["test"]["logits"][rows], split.test_forget.y) for o in outs]
    return sets


def _disagreement(v: np.ndarray, mean_others: np.ndarray) -> float:
    if v.size < 3 or not (np.isfinite(v).all() and np.isfinite(mean_others).all()):
        return math.nan
    if v.std() == 0 or mean_others.std() == 0:
        return math.nan
    c = float(np.corrcoef(v, mean_others)[0, 1])
    return -math.atanh(max(-MAX_CORRELATION, min(MAX_CORRELATION, c)))


def output_measures(passes: ForwardPasses, split, sample_level: bool) -> list[Measure]:
    """The output confidence and agreement (module docstring) on each audit data's forget rows."""
    out = []
    for data, (u, o, *refs) in _phis(passes, split, sample_level).items():
        if not u.size:
            continue
        means = [float(np.mean(p)) if np.isfinite(p).all() else math.nan for p in (u, o, *refs)]
        out.append(Measure("output", "output confidence", data, None, "two", "mean log-odds of the label",
                           means[0], means[1], tuple(means[2:])))
        k = len(refs)
        if k >= 2:
            r = np.asarray(refs)
            loo = [(r.sum(0) - r[i]) / (k - 1) for i in range(k)]
            ref_vals = tuple(_disagreement(r[i], loo[i]) for i in range(k))
            u_val, o_val = (float(np.mean([_disagreement(p, m) for m in loo])) for p in (u, o))
            out.append(Measure("output", "output agreement", data, None, "upper",
                               "−atanh corr(φ, other references' mean φ)", u_val, o_val, ref_vals))
    return out
