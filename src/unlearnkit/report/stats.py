"""Mean ± 95 % interval over seeds, and how numbers are written in the tables.

Every aggregated cell reads ``mean ± h``: ``h`` is the half-width of the 95 % Student-t interval of the
mean over the ``n`` seeds (``t_{0.975, n-1} * std / sqrt(n)``), so ``[mean - h, mean + h]`` is the
interval. One seed is shown alone (with the audit's own interval where a cell has one): an anecdote,
which the tables' captions say."""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

DASH = "—"


@dataclass(frozen=True)
class Stat:
    """Mean, sample standard deviation (ddof=1; 0 for one seed) and count of the finite values."""

    mean: float
    std: float
    n: int
    low: float | None = None    # an interval, where one is shown
    high: float | None = None


def stat(values) -> Stat | None:
    vals = [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]
    if not vals:
        return None
    return Stat(float(np.mean(vals)), float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0, len(vals))


def seed_interval(s: Stat, confidence: float = 0.95) -> Stat:
    """``s`` with the Student-t interval of the mean over seeds (n >= 2)."""
    from scipy.stats import t

    half = float(t.ppf(0.5 + confidence / 2, s.n - 1)) * s.std / math.sqrt(s.n)
    return Stat(s.mean, s.std, s.n, s.mean - half, s.mean + half)


def half_width(s: Stat, confidence: float = 0.95) -> float:
    """The half-width of the Student-t interval of the mean over ``s.n >= 2`` seeds."""
    iv = seed_interval(s, confidence)
    return (iv.high - iv.low) / 2


def fmt(s: Stat | None, spec: str = "{:.1f}", suffix: str = "") -> str:
    """``mean ± h`` over n >= 2 seeds (``h``: the 95 % interval's half-width, module docstring); one
    seed: the value, with ``[low, high]`` when ``s`` carries the audit's interval."""
    if s is None:
        return DASH
    text = spec.format(s.mean)
    if s.n > 1:
        return text + " ± " + spec.replace("+", "").format(half_width(s)) + suffix
    text += suffix
    if s.low is not None and s.high is not None:
        text += f" [{spec.format(s.low)}, {spec.format(s.high)}]"
    return text


def verdicts(values) -> str:
    """``suppressed 3/3`` or ``erased 2, suppressed 1 /3``; a dash without any audit."""
    vals = [v for v in values if v]
    if not vals:
        return DASH
    counts = Counter(vals).most_common()
    if len(counts) == 1:
        return f"{counts[0][0]} {counts[0][1]}/{len(vals)}"
    return ", ".join(f"{v} {n}" for v, n in counts) + f" /{len(vals)}"
