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

For sample requests (random, indices, flipped labels: :func:`unlearnkit.audit.data.is_sample_level`) a third,
per-example membership statistic (issue 43):

* ``output membership``: LiRA's offline test (Carlini et al. 2022, "Membership inference attacks from first
  principles", §IV-C, the OUT-only variant) per forget example: z_i = (φ_i − μ_i) / σ_i against the references'
  Gaussian for that example (the references are OUT models: trained without it), summarised over the examples
  as the root mean square of z (one-sided: higher = less like a retrain, example by example; a model that is too
  confident on half the examples and too unsure on the other half, its mean matched, is caught; the one-sided
  membership of the spec's §9 is the output confidence above). σ_i is the pooled variance of every example
  (LiRA's "global variance") below :data:`LIRA_PER_EXAMPLE_K` references, the example's own variance (floored
  at :data:`LIRA_VARIANCE_FLOOR` of the pooled one) from there on: the paper switches to per-example variances
  at about 64 shadow models, and the K = 8 and 16 this project measures (docs/audit.md, sample requests) stay on
  the pooled one. Every value is leave-one-out, as the agreement (reference-specs §9's aggregation): a
  reference against the other K − 1, the unlearned model and the original averaged over the same K
  leave-one-out sets. Not computed for class forgetting, where the per-example agreement covers this ground;
  the class attack suite was scored without it.

[INFERRED] No reference code for the per-example agreement statistic or the membership summary (the root mean
square of z); the confidence is the challenge's, the per-example Gaussian of OUT models LiRA's (paper, offline
variant).
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
#: from this many references on, the membership statistic uses each example's own variance (LiRA's switch at
#: about 64 shadow models); below, the pooled variance (LiRA's global variance)
LIRA_PER_EXAMPLE_K = 64
#: an example's own variance is at least this fraction of the pooled one (a handful of values can agree exactly)
LIRA_VARIANCE_FLOOR = 0.1


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


def membership(v: np.ndarray, others: np.ndarray, per_example: bool) -> float:
    """Root mean square over the examples of z_i = (v_i − μ_i) / σ_i, with μ_i, σ_i from ``others`` (rows:
    models, columns: examples; the module docstring says which σ); nan where anything is not finite."""
    if others.shape[0] < 2 or not (np.isfinite(v).all() and np.isfinite(others).all()):
        return math.nan
    mu, var = others.mean(0), others.var(0, ddof=1)
    pooled = float(var.mean())
    if pooled <= 0:
        return math.nan
    var = np.maximum(var, LIRA_VARIANCE_FLOOR * pooled) if per_example else np.full_like(var, pooled)
    return float(np.sqrt(np.mean((v - mu) ** 2 / var)))


def _membership_measure(data: str, u: np.ndarray, o: np.ndarray, refs: list[np.ndarray]) -> Measure | None:
    k = len(refs)
    if k < 3:
        return None
    r = np.asarray(refs)
    per_example = k >= LIRA_PER_EXAMPLE_K
    loo = [np.delete(r, i, axis=0) for i in range(k)]
    ref_vals = tuple(membership(r[i], loo[i], per_example) for i in range(k))
    u_val, o_val = (float(np.mean([membership(p, rest, per_example) for rest in loo])) for p in (u, o))
    sigma = "each example's own" if per_example else "pooled"
    return Measure("output", "output membership", data, None, "upper",
                   f"RMS of LiRA's per-example z ({sigma} variance)", u_val, o_val, ref_vals)


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
        lira = _membership_measure(data, u, o, refs) if sample_level else None
        if lira is not None:
            out.append(lira)
    return out
