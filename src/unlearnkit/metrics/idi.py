"""IDI, the Information Difference Index (Jeon et al., "An Information Theoretic Evaluation Metric
for Strong Unlearning", arXiv 2405.17878, ICLR'25 submission / AAAI'26; reference-specs §2.6).

No reference code exists ("code: to be confirmed"); what follows is the paper's definition with
the INFERRED parts of §2.6 named:

* Y = 1 for forget samples, 0 for retained ones, balanced (p(Y) = 1/2) [INFERRED: balanced draw].
* The mutual information between a layer's features Z_l and Y is estimated with InfoNCE, the two
  labels being the contrast set. With K = 2 candidates and p(Y) = 1/2 the InfoNCE bound reduces to
  I(Z; Y) >= log 2 - E[CE(softmax_y f(z)^T g(y), y)] [INFERRED derivation], in nats, at most log 2.
  :func:`infonce_mi` evaluates it from a critic's two scores per sample.
* ID(theta) = sum_l [ I_theta(Z_l; Y) - I_theta_r(Z_l; Y) ] against the model retrained without
  the forget set; IDI = ID(theta_u) / ID(theta_o): 0 = retrain-like, 1 = as informative as the
  original. The ICLR version reports negative IDIs (SCRUB -0.056), so the difference is signed by
  default (``clip=False``); an AAAI'26 summary writes max(0, .) per layer (``clip=True``). EC
  (seed 001) reports |IDI|.

The critic training itself needs the model and lives in ``unlearnkit.audit.idi``. Pure: numpy and
torch only.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

LOG2 = math.log(2.0)


def infonce_mi(scores, labels) -> float:
    """log 2 - mean cross-entropy of ``softmax(scores)`` (n x 2) against ``labels`` (n, in {0, 1}).

    The two-candidate InfoNCE lower bound on I(Z; Y) for balanced binary Y, in nats. Evaluated on
    samples the critic was not trained on it is a valid (noisy) lower bound and may come out
    negative for a poor critic; it is NOT clipped here.
    """
    s = np.asarray(scores.detach().cpu().double() if hasattr(scores, "detach") else scores, dtype=np.float64)
    y = np.asarray(labels.detach().cpu() if hasattr(labels, "detach") else labels).astype(np.int64)
    if s.ndim != 2 or s.shape[1] != 2 or s.shape[0] != y.shape[0]:
        raise ValueError(f"scores must be n x 2 and labels n; got {s.shape} and {y.shape}")
    if s.shape[0] == 0:
        raise ValueError("infonce_mi needs at least one sample")
    m = s.max(axis=1, keepdims=True)
    log_z = (m[:, 0] + np.log(np.exp(s - m).sum(axis=1)))
    ce = log_z - s[np.arange(s.shape[0]), y]
    return float(LOG2 - ce.mean())


def information_difference(mi: Sequence[float], mi_retrained: Sequence[float], clip: bool = False) -> float:
    """ID = sum over layers of I(model) - I(retrained) (nats); ``clip`` takes max(0, .) per layer."""
    a, r = np.asarray(mi, dtype=np.float64), np.asarray(mi_retrained, dtype=np.float64)
    if a.shape != r.shape:
        raise ValueError(f"one value per layer for both models: {a.shape} vs {r.shape}")
    d = a - r
    return float(np.maximum(d, 0.0).sum() if clip else d.sum())


def idi(mi_unlearned: Sequence[float], mi_original: Sequence[float], mi_retrained: Sequence[float],
        clip: bool = False) -> float:
    """IDI = ID(unlearned) / ID(original); NaN when ID(original) <= 0 (the original then carries no
    more information about the forget labels than retrain, and the index is undefined)."""
    num = information_difference(mi_unlearned, mi_retrained, clip)
    den = information_difference(mi_original, mi_retrained, clip)
    return num / den if den > 0 else math.nan
