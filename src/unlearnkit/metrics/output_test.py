"""The output membership test: is the unlearned model's confidence on the forget set that of a retrain?

References. The statistic per forget example is the NeurIPS 2023 unlearning challenge's
logit-scaled confidence φ = log(p_y / (1 − p_y)) (google-deepmind/unlearning_evaluation,
``metric.py``; computed by :func:`.forgetting_quality.logit_scaled_confidence`, LiRA's scaling), scored
against a Gaussian per example fitted to retrained models, as in LiRA (Carlini et al. 2022,
"Membership inference attacks from first principles") and its unlearning form U-LiRA (Hayes et al.
2024, "Inexact unlearning needs more careful evaluations to avoid a false sense of privacy"). With
the few references an audit can afford (K = 2..8) the per-example variances are too noisy, so the
Gaussians share one variance, LiRA's "global variance" variant for few shadow models.

The statistic. With φ_r(i) for references r ∈ R (K x n): μ_i = mean over R of φ_r(i); σ² the pooled
within-example variance (ddof 1 per example, n(K − 1) degrees of freedom); z_i = (φ(i) − μ_i) / σ. σ is
pooled over all K references, also where fewer are used (K = 2 leaves one reference out of two, whose
variance is not defined); a common σ is a common unit and changes no decision. Two aggregates:

* T1 (``mean_z``) = mean_i z_i, signed: > 0 the model is more confident on the forget set than
  retrain (membership: not forgotten), < 0 less (over-forgotten, itself a trace); tested two-sided.
* T2 (``log_var_ratio``) = log(mean_i z_i² / (1 + 1/K)), against all K references, one-sided upper:
  per-example distinguishability that may cancel in T1 (u's squared distance from the references'
  mean over what a retrain's would be).

[INFERRED] The aggregation and its calibration are ours (U-LiRA trains an attack per example on many
shadow models; an audit has a handful).

T1 leaves one reference out: each reference r gives a null value N_r = T1(r; R \\ {r}); the unlearned
model's value is A = mean_r T1(u; R \\ {r}), so both are computed against K − 1 references (under H0, u
is one more retrain). Flag when |A − mean(N)| > t_{K−1, 1−a/2} · s · sqrt(1 + 1/K) with
s = sd(N) · (K − 1)/K. T1 is a difference of model-level means x_m = mean_i φ_m(i) / σ: N_r =
K/(K − 1) · (x_r − x̄) and A = x_u − x̄, so s is the sample sd of the x_r and the rule is the textbook
Gaussian prediction interval for one more x, exact whenever the x_m are Gaussian (any correlation
across examples). Without the factor (K − 1)/K the bound would be K/(K − 1) times too wide: a
false-flag rate far under ``a`` at K = 2, 3 and the power lost with it.

T2 does not use the leave-one-out bound: that rule (a Gaussian prediction bound over the K values
log mean z²) flagged 4.1-6.7 % of genuine retrains at a nominal 2.5 % (1000 trials per cell, K = 3, 5, 8,
n = 150-500) when model-level effects (a per-model offset and slope, as real retrains have) are as
large as the per-example noise, because a squared model-level deviation is a folded quantity that K
values cannot studentise (``benchmarks/output_test_calibration.py``). Instead: under
H0 (Gaussian φ, any covariance Σ across examples) u − μ and the references' deviations are independent,
mean_i z_i² / (1 + 1/K) is a ratio Σ_j λ_j χ²_1 / (Σ_j λ_j χ²_{K−1} / (K − 1)) over Σ's eigenvalues,
whose upper tail is widest with a single component, F(1, K − 1) (more components pull the ratio
towards 1; checked by simulation, not proved), the case of one dominating model-level direction.
T2 is flagged above F_{1−a}(1, K − 1) = t²_{K−1, 1−a/2}: valid whatever Σ, conservative when
per-example noise dominates (then it finds only gross per-example departures).

``level`` is the total false-flag rate of this test, split evenly (Bonferroni): a = level / 2 to T1
(level / 4 per side) and level / 2 to T2. The p-values are the raw ones from the t distribution with
K − 1 degrees of freedom (for a Holm step in the verdict).

The original is the positive control: the test has power only if the original is flagged. Status
``no_power`` keeps a flag (the false-flag rate holds either way) but turns "within" into "untested".
A flag by T2 alone takes its direction from the sign of T1's deviation. φ depends on the logits only
(a per-row constant added to the logits moves nothing; scaling them, a temperature, is a real change
of the outputs and moves φ). Non-finite φ (inf or nan logits) gives status ``degenerate``, never a
crash and never "within".
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import special, stats

from ._arrays import as_float64
from .forgetting_quality import logit_scaled_confidence

STATUSES = ("ok", "too_few_references", "degenerate", "no_power")
DECISIONS = ("within", "above", "below", "untested")
#: the most references :func:`references_for_power` looks at
MAX_REFERENCES = 64


@dataclass(frozen=True)
class Aggregate:
    """One aggregate of the unlearned model, its null and its bounds (see the module docstring).

    ``value`` / ``original``: the unlearned model's / the original's value; ``null``: each reference's
    value against the others (for T1 the null the bounds are built from; for T2 shown for comparison,
    the bound being the F(1, K − 1) quantile); ``lower`` / ``upper``: flagged outside them (``lower`` =
    -inf for the one-sided T2); ``alpha``: this aggregate's share of the level; ``p`` / ``p_original``:
    p-values from the t distribution with K − 1 degrees of freedom; ``flagged`` / ``original_flagged``:
    outside the bounds."""

    name: str
    value: float
    original: float
    null: tuple[float, ...]
    lower: float
    upper: float
    alpha: float
    p: float
    p_original: float
    flagged: bool
    original_flagged: bool


@dataclass(frozen=True)
class OutputTest:
    """The output membership test of one unlearned model (see the module docstring).

    ``status`` in :data:`STATUSES`; ``decision`` in :data:`DECISIONS` ("above": more membership than
    retrain, not forgotten; "below": over-forgotten); ``mean_z`` (T1) and ``log_var_ratio`` (T2): None
    unless the test ran; ``control``: the original is flagged (the test has power);
    ``references_for_power``: the smallest K at which the original would be flagged if its deviation
    and the null's spread stayed as measured (None: not within :data:`MAX_REFERENCES`, or not
    measured); ``sigma``: the pooled σ, the unit of z."""

    status: str
    decision: str
    level: float
    num_references: int
    num_examples: int
    sigma: float
    mean_z: Aggregate | None
    log_var_ratio: Aggregate | None
    control: bool
    references_for_power: int | None

    def to_dict(self) -> dict:
        """JSON-safe dict (non-finite numbers as None)."""
        return _json_safe(asdict(self))


def _json_safe(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _json_safe(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_json_safe(v) for v in o]
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


@lru_cache(maxsize=4096)
def _t_quantile(k: int, alpha: float) -> float:
    """t_{K − 1, 1 − alpha}."""
    return float(stats.t.ppf(1.0 - alpha, k - 1))


def _two_sided_p(tau: float, k: int) -> float:
    """P(|t_{K−1}| > tau) (``special.stdtr``: the t CDF, without ``stats.t``'s per-call overhead)."""
    return float(2.0 * special.stdtr(k - 1, -abs(tau)))


def references_needed(deviation: float, spread: float, alpha: float,
                      max_references: int = MAX_REFERENCES) -> int | None:
    """The smallest K ≥ 2 with |``deviation``| > t_{K−1, 1−alpha/2} · ``spread`` · sqrt(1 + 1/K): the
    number of references at which a model that far from the null's center would be flagged by the
    two-sided prediction bound, the spread staying as it is. Returns None if no K up to
    ``max_references`` does (t falls only to the normal quantile) or the inputs are not finite."""
    if not (math.isfinite(deviation) and math.isfinite(spread)) or spread < 0:
        return None
    for k in range(2, max_references + 1):
        if abs(deviation) > _t_quantile(k, alpha / 2.0) * spread * math.sqrt(1.0 + 1.0 / k):
            return k
    return None


def _mean_z(u: np.ndarray, orig: np.ndarray, refs: np.ndarray, sigma: float, alpha: float) -> Aggregate:
    """T1: A = mean over r of mean_i z_i against R \\ {r}, its leave-one-out null N_r and their
    prediction bound (t_{K−1} · sd(N) · (K − 1)/K · sqrt(1 + 1/K) either side of mean(N))."""
    k = refs.shape[0]
    x = np.concatenate([refs, u[None], orig[None]]).mean(axis=1) / sigma   # model-level means, σ units
    loo = (x[:k].sum() - x[:k]) / (k - 1)                                   # [K]: mean of R \ {r}
    null, (value, original) = x[:k] - loo, (x[k:, None] - loo[None]).mean(axis=1)
    center, scale = float(null.mean()), float(null.std(ddof=1)) * (k - 1) / k * math.sqrt(1.0 + 1.0 / k)
    half = _t_quantile(k, alpha / 2.0) * scale
    p = [_two_sided_p(abs(v - center) / scale, k) if scale > 0 else math.nan for v in (value, original)]
    return Aggregate("mean_z", float(value), float(original), tuple(float(v) for v in null), center - half,
                     center + half, alpha, p[0], p[1], bool(abs(value - center) > half),
                     bool(abs(original - center) > half))


def _log_var_ratio(u: np.ndarray, orig: np.ndarray, refs: np.ndarray, sigma: float, alpha: float) -> Aggregate:
    """T2: log(mean_i z_i² / (1 + 1/K)) against all K references, flagged above 2 log t_{K−1, 1−alpha/2}
    (the F(1, K − 1) quantile); the null shown is each reference's value against the others."""
    k = refs.shape[0]
    mu = refs.mean(axis=0)
    with np.errstate(divide="ignore"):  # a model exactly at the references' mean: -inf, never flagged
        value, original = (float(np.log(np.mean(((m - mu) / sigma) ** 2) / (1.0 + 1.0 / k))) for m in (u, orig))
    null = ()
    if k > 2:
        loo = (refs.sum(axis=0, keepdims=True) - refs) / (k - 1)
        with np.errstate(divide="ignore"):
            null = tuple(float(v) for v in np.log(np.mean(((refs - loo) / sigma) ** 2, axis=1) / (1.0 + 1.0 / (k - 1))))
    upper = 2.0 * math.log(_t_quantile(k, alpha / 2.0))
    p = [_two_sided_p(math.exp(v / 2.0), k) for v in (value, original)]
    return Aggregate("log_var_ratio", value, original, null, -math.inf, upper, alpha, p[0], p[1],
                     bool(value > upper), bool(original > upper))


def _inputs(unlearned: Any, references: Any, original: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = as_float64(unlearned, "unlearned", ndim=1)
    o = as_float64(original, "original", ndim=1)
    r = np.asarray([as_float64(x, "references[i]", ndim=1) for x in references], dtype=np.float64) \
        if isinstance(references, Sequence) else as_float64(references, "references", ndim=2)
    n = u.shape[0]
    if n == 0:
        raise ValueError("unlearned has no forget examples")
    if o.shape[0] != n or (r.size and r.reshape(r.shape[0], -1).shape[1] != n):
        raise ValueError(f"unlearned ({n}), original ({o.shape[0]}) and every reference must hold the same "
                         f"forget examples; references has shape {r.shape}")
    return u, r.reshape(r.shape[0], n), o


def _untested(status: str, level: float, k: int, n: int, sigma: float = math.nan) -> OutputTest:
    return OutputTest(status, "untested", level, k, n, sigma, None, None, False, None)


def output_test(unlearned: Any, references: Any, original: Any, level: float = 0.05) -> OutputTest:
    """The output membership test of φ on the forget set (see the module docstring).

    ``unlearned``, ``original``: φ of the n forget examples under each model ([n]); ``references``:
    under K retrained models ([K, n], or a sequence of K arrays [n]). ``level`` in (0, 1): the total
    false-flag rate of this test for a genuine retrain, half to each aggregate. Returns an
    :class:`OutputTest`; K < 2 gives status ``too_few_references``, non-finite φ or σ = 0 (or a
    null without spread) ``degenerate``, an unflagged original ``no_power``.
    Raises ValueError for arrays of the wrong shape or a level outside (0, 1).
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    u, refs, orig = _inputs(unlearned, references, original)
    k, n = refs.shape
    if k < 2:
        return _untested("too_few_references", level, k, n)
    if not (np.isfinite(u).all() and np.isfinite(refs).all() and np.isfinite(orig).all()):
        return _untested("degenerate", level, k, n)
    sigma = float(np.sqrt(((refs - refs.mean(axis=0)) ** 2).sum() / (n * (k - 1))))
    if not (sigma > 0.0 and math.isfinite(sigma)):
        return _untested("degenerate", level, k, n, sigma)
    t1 = _mean_z(u, orig, refs, sigma, level / 2.0)
    if not t1.upper > t1.lower:  # the references' forget-set means are all the same: no spread to scale by
        return _untested("degenerate", level, k, n, sigma)
    t2 = _log_var_ratio(u, orig, refs, sigma, level / 2.0)
    control = t1.original_flagged or t2.original_flagged
    if t1.flagged or t2.flagged:
        decision = "above" if t1.value > float(np.mean(t1.null)) else "below"
    else:
        decision = "within" if control else "untested"
    spread = (t1.upper - t1.lower) / 2.0 / _t_quantile(k, t1.alpha / 2.0) / math.sqrt(1.0 + 1.0 / k)
    needed = [references_needed(t1.original - float(np.mean(t1.null)), spread, t1.alpha),
              references_needed(math.sqrt(math.exp(t2.original) * (1.0 + 1.0 / k)), 1.0, t2.alpha)]
    needed_k = min((x for x in needed if x is not None), default=None)
    return OutputTest("ok" if control else "no_power", decision, level, k, n, sigma, t1, t2, control, needed_k)


def output_test_from_logits(unlearned_logits: Any, reference_logits: Sequence[Any], original_logits: Any,
                            targets: Any, level: float = 0.05) -> OutputTest:
    """:func:`output_test` of the models' logits [n, classes] on the forget examples (``targets`` [n]),
    each turned into φ by :func:`.forgetting_quality.logit_scaled_confidence`."""
    def phi(x: Any) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):  # inf logits give nan φ: status "degenerate"
            return logit_scaled_confidence(x, targets)

    return output_test(phi(unlearned_logits), [phi(x) for x in reference_logits], phi(original_logits), level)
