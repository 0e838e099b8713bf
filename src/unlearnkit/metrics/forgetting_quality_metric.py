"""Forgetting quality of the NeurIPS 2023 machine-unlearning challenge (Triantafillou et al.).

Reference: google-deepmind/unlearning_evaluation, ``metric.py`` (``compute_logit_scaled_confidence``,
``_get_double_threshold_rates``, ``_get_single_threshold_rates``, ``_get_epsilons``,
``compute_forget_score_from_confs``) and ``main.py`` (the final, utility-adjusted score), re-implemented
here on the CPU with numpy.

For every forget example, N unlearned and N retrained models give two samples of its
logit-scaled confidence. A family of threshold attacks tries to tell the two distributions apart;
each attack's false positive / false negative rates bound an (ε, δ) of the unlearning algorithm,
and the example's ε is the largest one found. ε falls in buckets of width 0.5; an example in the
k-th bucket scores 2^-k, and the forget score is the mean over the forget set (1 = retrain-like).

Deliberate differences from the reference (everything else follows it step by step):

- CPU and numpy instead of CUDA tensors. The rates are exact counts divided by N: each
  example's confidences are sorted once and a decision rule's counts are read with
  ``np.searchsorted`` (``count(c <= right) - count(c < left)``), vectorised over all thresholds,
  instead of the reference's tiled [models x thresholds] comparison tensors; all in float64 (the
  reference averages the 0/1 decisions in float32 and takes the logs of those float32 rates,
  which moves ε in about the 6th digit).
- The single-threshold grid is built with the formula of ``torch.linspace``'s CUDA kernel (the
  reference's grid: ``start + i*step`` in the first half, ``end - (n-1-i)*step`` in the second),
  in float64. The reference's ``torch.linspace`` has no dtype and so runs in torch's default
  float32: its endpoints and grid points are rounded to float32 (about 1e-7 relative, and the
  GPU may fuse the multiply-add), so a confidence that close to a grid point can fall on the
  other side of it there. The double-threshold grids are numpy float64 in both.
- The reference ends with ``assert thr_eps`` on a numpy array, which raises "the truth value of
  an array ... is ambiguous" whenever more than one threshold survives (that is, nearly always);
  we check that the array is non-empty (what the assert means) and raise ``ValueError`` otherwise.
- When both distributions of an example are point masses (largest range 0) the reference's
  peaky test divides 0 by 0; we return ``EPSILON_CAP`` if the two values differ (the two
  distributions are perfectly separable) and 0 if they are equal (indistinguishable).
- :func:`logit_scaled_confidence` works in float64 from the start; the reference subtracts the
  row max and exponentiates in the logits' own dtype (float32 for a model's logits) before
  normalising in float64, which saturates the confidence at about 103.6 (exp underflows to 0 in
  float32 for a logit ~104 below the max) where float64 goes on to about 745. It also leaves
  its input unchanged (the reference subtracts in place).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._arrays import _to_numpy, as_float64, as_labels

DELTA = 1e-5
EPSILON_CAP = 50.0
NUM_THRESHOLDS_PER_UNIT = 100
BUFFER = 2.0  # the double-threshold rule's slack around the peakier distribution
BUCKET_SIZE = 0.5


def logit_scaled_confidence(logits: Any, targets: Any) -> np.ndarray:
    """``log(p_y + 1e-45) - log(sum_{k != y} p_k + 1e-45)`` per row, float64 (LiRA's scaling).

    ``logits`` [n, K] (numpy or torch), ``targets`` [n] class indices. The softmax is computed in
    float64 after subtracting each row's max; the wrong-class mass is the sum of the other
    probabilities (not ``1 - p_y``, which would lose every digit once ``p_y`` is close to 1).
    """
    z = as_float64(logits, "logits", ndim=2)
    y = as_labels(targets, "targets")
    if y.shape[0] != z.shape[0]:
        raise ValueError(f"logits has {z.shape[0]} rows but targets has {y.shape[0]}")
    if y.size and (y.min() < 0 or y.max() >= z.shape[1]):
        raise ValueError(f"targets must lie in 0..{z.shape[1] - 1}")
    z = z - z.max(axis=1, keepdims=True)
    probs = np.exp(z)
    probs /= probs.sum(axis=1, keepdims=True)
    rows = np.arange(z.shape[0])
    p_correct = probs[rows, y].copy()
    probs[rows, y] = 0.0
    p_wrong = probs.sum(axis=1)
    return np.log(p_correct + 1e-45) - np.log(p_wrong + 1e-45)


def _epsilon_table(n: int, delta: float) -> np.ndarray:
    """ε of an attack with ``kf`` false positives and ``kn`` false negatives out of ``n`` each, [n+1, n+1].

    inf where both are 0 (perfect separation), nan where exactly one is 0 (discarded: too few
    samples to tell), else ``max(0, max(log(1-δ-fpr) - log(fnr), log(1-δ-fnr) - log(fpr)))``
    (a log of a negative number, at a rate of 1, is nan and left out of the max; both nan: discarded).
    """
    rate = np.arange(n + 1, dtype=np.float64) / n
    fpr, fnr = rate[:, None], rate[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(1 - delta - fpr) - np.log(fnr)
        b = np.log(1 - delta - fnr) - np.log(fpr)
        eps = np.fmax(a, b)  # nan only where both are nan, as np.nanmax
    eps = np.where(np.isnan(eps), eps, np.maximum(eps, 0.0))
    eps[0, :] = np.nan
    eps[:, 0] = np.nan
    eps[0, 0] = np.inf
    return eps


def _inside_counts(sorted_c: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """How many of ``sorted_c`` satisfy ``left[j, k] <= c <= right[j]``: ``count(c <= right) -
    count(c < left)``, 0 where left > right."""
    n_le_right = np.searchsorted(sorted_c, right, side="right")[:, None]
    n_lt_left = np.searchsorted(sorted_c, left, side="left")
    return np.maximum(n_le_right - n_lt_left, 0)


def _double_threshold_counts(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false positives, false negatives) of every rule "positive iff left <= c <= right".

    As the reference: 'positive' becomes the distribution with the smaller range (the other one
    on a tie); right thresholds ``ceil((max-min)*100)`` points over
    ``[pos.min()+width-2, pos.max()+2]``, and for each right threshold ``r`` 400 left ones over
    ``[r-width-2, r-width+2]``, ``width`` = the smaller range.
    """
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    width = neg_diff if pos_diff > neg_diff else pos_diff
    if pos_diff >= neg_diff:
        pos, neg = neg, pos
    lo = pos.min() + width - BUFFER
    hi = pos.max() + BUFFER
    right = np.linspace(lo, hi, num=int(np.ceil((hi - lo) * NUM_THRESHOLDS_PER_UNIT)))
    n_left = int(np.ceil(2 * BUFFER * NUM_THRESHOLDS_PER_UNIT))
    # [n_right, n_left]: row j is np.linspace(right[j] - width - 2, right[j] - width + 2, 400)
    left = np.linspace(right - width - BUFFER, right - width + BUFFER, num=n_left, axis=1)
    n = len(pos)
    false_neg = n - _inside_counts(np.sort(pos), left, right)
    false_pos = _inside_counts(np.sort(neg), left, right)
    return false_pos.ravel(), false_neg.ravel()


def _torch_linspace(start: float, end: float, steps: int) -> np.ndarray:
    """``torch.linspace(start, end, steps)`` by its CUDA kernel's formula, in float64 (the
    reference's call runs in float32, torch's default dtype)."""
    if steps == 1:
        return np.array([start])
    step = (end - start) / (steps - 1)
    i = np.arange(steps)
    half = steps // 2
    return np.where(i < half, start + step * i, end - step * (steps - i - 1))


def _single_threshold_counts(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false positives, false negatives) of every rule "positive iff c >= t".

    ``ceil((max-min)*100)`` thresholds over the pooled confidences' [min, max]; 'positive' is the
    distribution with the larger median (as chosen by the caller).
    """
    pooled = np.concatenate([pos, neg])
    lo, hi = pooled.min(), pooled.max()
    t = _torch_linspace(lo, hi, int(np.ceil((hi - lo) * NUM_THRESHOLDS_PER_UNIT)))
    n = len(pos)
    false_neg = np.searchsorted(np.sort(pos), t, side="left")  # positives below t
    false_pos = n - np.searchsorted(np.sort(neg), t, side="left")  # negatives at or above t
    return false_pos, false_neg


def _example_epsilon(pos: np.ndarray, neg: np.ndarray, table: np.ndarray, index: int) -> float:
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    largest, smallest = max(pos_diff, neg_diff), min(pos_diff, neg_diff)
    if largest == 0:  # two point masses (the reference divides 0 by 0 here)
        return 0.0 if pos[0] == neg[0] else EPSILON_CAP
    if smallest / largest < 0.01:  # one distribution is very peaky: the reference's "really bad" case
        return EPSILON_CAP
    eps = []
    for false_pos, false_neg in (_double_threshold_counts(pos, neg), _single_threshold_counts(pos, neg)):
        e = table[false_pos, false_neg]
        eps.append(e[~np.isnan(e)])
    kept = np.concatenate(eps)
    if kept.size == 0:
        raise ValueError(f"forget example {index}: every threshold gave a nan epsilon (the reference's "
                         f"'Something went wrong'); the confidences are too close together to test")
    return float(kept.max())


def _confs_pair(unlearned_confs: Any, retrained_confs: Any) -> tuple[np.ndarray, np.ndarray]:
    u = as_float64(unlearned_confs, "unlearned_confs", ndim=2)
    r = as_float64(retrained_confs, "retrained_confs", ndim=2)
    if u.shape != r.shape:
        raise ValueError(f"unlearned_confs {u.shape} and retrained_confs {r.shape} must both be "
                         f"[num models, num examples] of the same shape")
    if u.shape[0] < 2:
        raise ValueError(f"need at least 2 models on each side, got {u.shape[0]}")
    if not (np.isfinite(u).all() and np.isfinite(r).all()):
        raise ValueError("confidences must be finite")
    return u, r


def per_example_epsilons(unlearned_confs: Any, retrained_confs: Any, delta: float = DELTA) -> np.ndarray:
    """ε of every forget example, in [0, ``EPSILON_CAP``] (``metric.py::_get_epsilons``).

    ``unlearned_confs``, ``retrained_confs``: [num models, num examples] logit-scaled
    confidences. Per example the 'positive' distribution is the retrained one if its median is
    larger, else the unlearned one; if the smaller range over the larger is under 1 % the example
    gets ``EPSILON_CAP``; otherwise ε is the largest over the double- and single-threshold rule
    families (see the module docstring for how this differs from the reference).
    """
    u, r = _confs_pair(unlearned_confs, retrained_confs)
    retrain_is_positive = np.median(r, axis=0) > np.median(u, axis=0)
    pos = np.where(retrain_is_positive, r, u)
    neg = np.where(retrain_is_positive, u, r)
    table = _epsilon_table(u.shape[0], delta)
    eps = np.array([_example_epsilon(pos[:, i], neg[:, i], table, i) for i in range(u.shape[1])])
    return np.clip(eps, 0.0, EPSILON_CAP)


@dataclass(frozen=True)
class ForgetScore:
    """The forget score and what it is made of."""

    score: float
    epsilons: np.ndarray                        # per forget example, in [0, EPSILON_CAP]
    max_epsilon: float                          # ceil(log(num_models - 1)): where the scale ends
    buckets: tuple[tuple[float, float], ...]    # (start, points): eps in [start, start + 0.5)
    num_models: int


def score_buckets(num_models: int) -> tuple[float, tuple[tuple[float, float], ...]]:
    """``(max_epsilon, ((start, points), ...))``: buckets of width 0.5 from 0 scoring 1, 1/2, 1/4, ...
    while the bucket's end is at most ``max_epsilon = ceil(log(num_models - 1))``."""
    max_epsilon = float(math.ceil(math.log(num_models - 1))) if num_models > 1 else -math.inf
    buckets, start, points = [], 0.0, 1.0
    while start + BUCKET_SIZE <= max_epsilon:
        buckets.append((start, points))
        points /= 2
        start += BUCKET_SIZE
    return max_epsilon, tuple(buckets)


def forget_score(unlearned_confs: Any, retrained_confs: Any, delta: float = DELTA) -> ForgetScore:
    """The challenge's forget score (``metric.py::compute_forget_score_from_confs``), in [0, 1].

    An example scores the points of the first bucket with ``eps < start + 0.5`` (0 past the
    last bucket); the score is the mean over the forget examples. With N models the scale ends
    at ``ceil(log(N - 1))``: N = 32 gives 8 buckets (1 ... 1/128), N = 3 two, and N = 2 none (every
    method then scores 0).
    """
    u, _ = _confs_pair(unlearned_confs, retrained_confs)
    eps = per_example_epsilons(unlearned_confs, retrained_confs, delta)
    max_epsilon, buckets = score_buckets(u.shape[0])
    points = example_points(eps, u.shape[0])
    return ForgetScore(float(points.sum()) / len(eps) if len(eps) else math.nan, eps, max_epsilon, buckets, u.shape[0])


def example_points(epsilons: Any, num_models: int) -> np.ndarray:
    """Each forget example's points, float64: those of the first bucket of :func:`score_buckets`
    (``num_models`` models each side) with ``eps < start + 0.5``, 0 past the last bucket. The forget
    score is their mean."""
    eps = as_float64(epsilons, "epsilons", ndim=1)
    _, buckets = score_buckets(num_models)
    out = np.zeros(eps.shape[0])
    left = np.ones(eps.shape[0], dtype=bool)
    for start, points in buckets:
        hit = left & (eps < start + BUCKET_SIZE)
        out[hit] = points
        left &= ~hit
    return out


def forget_score_interval(epsilons: Any, num_models: int, n_boot: int = 2000, seed: int = 0,
                          level: float = 0.95) -> tuple[float, float]:
    """A percentile bootstrap interval over forget examples of the forget score: ``(low, high)``.

    The per-example epsilons are resampled with replacement ``n_boot`` times (numpy generator of
    ``seed``: the same interval for the same epsilons), each resample scored as :func:`forget_score`
    scores (:func:`example_points`, ``num_models`` models each side), and the ``(1 - level) / 2`` and
    ``(1 + level) / 2`` percentiles of those scores returned. Drawing a resample's count of each
    distinct points value from a multinomial is the same distribution as drawing its examples, and
    costs ``n_boot`` x (number of buckets) instead of ``n_boot`` x (number of examples).
    It counts the variation from which examples make up the forget set, not that from which models
    were trained (the epsilons are taken as fixed). Equal epsilons give the point score at both ends.
    The utility-adjusted score's interval is :func:`final_score` of each end (a positive factor moves
    every draw alike, so its percentiles are the scaled ones). INFERRED: the challenge's metric.py reports
    the score without an interval; this one is the project's.
    """
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a whole number >= 1, not {n_boot!r}")
    if not (isinstance(level, (int, float)) and 0 < level < 1):
        raise ValueError(f"level must be in (0, 1), not {level!r}")
    points = example_points(epsilons, num_models)
    if points.size == 0:
        raise ValueError("epsilons is empty: no forget example to resample")
    values, counts = np.unique(points, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = rng.multinomial(points.size, counts / points.size, size=int(n_boot)) @ values / points.size
    low, high = np.percentile(draws, [50 * (1 - level), 50 * (1 + level)])
    return float(low), float(high)


def final_score(forget_score: float, unlearned_retain_accs: float | Sequence[float],
                retrained_retain_accs: float | Sequence[float], unlearned_test_accs: float | Sequence[float],
                retrained_test_accs: float | Sequence[float]) -> float:
    """The utility-adjusted score (``main.py``): ``forget_score * (RA_u / RA_r) * (TA_u / TA_r)``,
    each accuracy the mean over its models (any unit, the same on both sides)."""
    def mean(x: Any) -> float:
        return float(np.mean(_to_numpy(x).astype(np.float64)))

    return float(forget_score) * (mean(unlearned_retain_accs) / mean(retrained_retain_accs)) * \
        (mean(unlearned_test_accs) / mean(retrained_test_accs))
