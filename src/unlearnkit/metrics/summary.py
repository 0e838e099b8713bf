"""Scalar summaries across metrics: TARF's Gap and EC's H-Mean."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def gap(
    unlearned: Mapping[str, float],
    retrained: Mapping[str, float],
    keys: Sequence[str] = ("ua", "ra", "ta", "mia"),
) -> float:
    """TARF "Gap" (Zhu et al., ICLR'26; reference-specs.md §2.8): mean over ``keys`` of |u − r|.

    All entries in percent, r = the model retrained on the task's true D_r. Worked example
    (CIFAR-10 model mismatch, SCRUB 95.14/99.81/94.22/15.38 vs Retrain 87.76/99.58/95.91/20.57)
    gives (7.38 + 0.23 + 1.69 + 5.19)/4 = 3.6225; the paper printed 2.60 (an arithmetic error
    flagged by its reviewers). A NaN entry makes the gap NaN. Raises KeyError naming any key
    missing from either dict.
    """
    if len(keys) == 0:
        raise ValueError("gap needs at least one key")
    missing = [k for k in keys if k not in unlearned or k not in retrained]
    if missing:
        raise KeyError(f"gap: keys {missing} missing from the unlearned or retrained results")
    return float(np.mean([abs(float(unlearned[k]) - float(retrained[k])) for k in keys]))


def h_mean(forget_acc: float, retain_acc: float) -> float:
    """EC's H-Mean (reference-specs.md §2.7, INFERRED — no code found): 2AB / (A + B), in percent.

    A = 100 − ``forget_acc`` (forgetting quality; EC uses test-forget accuracy, "TFA"),
    B = ``retain_acc`` (test-retain accuracy, "TRA"); both in percent. Returns 0.0 when
    A + B == 0.
    """
    a, b = 100.0 - float(forget_acc), float(retain_acc)
    if a + b == 0:
        return 0.0
    return float(2.0 * a * b / (a + b))
