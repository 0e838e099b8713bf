"""The audit's one rule: one model's value of a statistic against K retrained references and the original.

Every statistic the verdict reads (a layer's separability, a kernel probe's held-out fit, relearning after a
budget, the output's confidence, ...) is measured the same way on every model: the unlearned model ``u``, the
original ``o`` (the positive control) and K references ``r_1..r_K`` retrained without the forget set, with the
same rows, the same shot draws and the same audit seed. The statistic is oriented so that *more* means more of
the forgotten data (a reference sits low, the original high). Models are treated as exchangeable Gaussian draws
(a retrain's value varies with its seed and with the audit's sampling: both are in the references' spread s).

**Flag** (a deviation from retrain): u beyond the references' Gaussian *prediction* bound for one more retrain,
r̄ ± t_{K−1, 1−a} · s · sqrt(1 + 1/K) (exact for Gaussian values: a genuine retrain lands beyond it with
probability a per side). p-values are the t tail, for a Holm step over a family.

**Certify** (equivalence against a stated effect size). The *kept fraction* κ = (u − r̄) / (o − r̄) is the
share of the original's excess over the references that the model keeps (0 = at the references' centre, 1 =
the original). The claim "|κ| < δ" (the margin δ, ``margin``, a stated effect size: e.g. keeps less than half
of what the original holds) is tested by two one-sided t tests (Schuirmann 1987) of the linear forms
u − δo − (1 − δ)r̄ < 0 and u + δo − (1 + δ)r̄ > 0, whose variances are s²(1 + δ² + (1 ∓ δ)²/K) when u, o and
each reference carry the references' variance s² (conservative for o and u, whose own measurement noise is at
most s²): exactly Fieller's interval for the ratio κ (Fieller 1954), at level α per side. The margin is δ times
the original's excess, which does not depend on s; the references' spread only widens the interval (and
handing in widely spread references makes certification harder, never easier). A model exactly at the margin
(its expected value at r̄ + δ(o − r̄)) is certified with probability at most α, whatever the references drawn:
:func:`simulate_certify_rate` checks it.

**Testable** (a per-statistic positive control with power): the test could certify a genuine retrain, i.e. a
model t_{K−1, 0.995} prediction standard deviations from the references' centre would pass:
δ (o − r̄) ≥ t_{K−1, 1−α} · s · c + t_{K−1, 0.995} · s · sqrt(1 + 1/K) (c the larger of the two forms' factors).
A genuine retrain's standardised deviation (u − r̄) / (s sqrt(1 + 1/K)) is Student t with K − 1 degrees of
freedom (the references' s is estimated), so a testable statistic certifies it with probability >= 99 % when
retrains' values are Gaussian: the intersection over the dozens an audit tests keeps its power. (Until
2026-12-07 the Gaussian 2.576 stood for the t quantile, which at K = 5 is 4.60: a genuine retrain then failed a
statistic at the edge of testability in about 6 % of audits, not 1 %; on digits 35 of 348 genuine retrains'
audits at K = 5 failed that way, all of one retrain, ``docs/audit.md``.) It depends on the original and the
references only, never on the audited model. Where the original is not that far from the references (relative
to their spread), the statistic cannot show erasure at this margin and is reported, not required.

**Informative** (the positive control of a deviation): the original is far enough from the references for a
deviation there to be evidence of keeping, the same inequality with the Gaussian :data:`Z_POWER` (2.576) in
place of the t quantile: every testable statistic is informative. Flags, the told-apart tests and the joint
test (:mod:`unlearnkit.audit.joint`) read the informative statistics; certification needs the testable ones.

[INFERRED] No reference code exists for an unlearning audit of this form; the flag is the textbook Gaussian
prediction interval, the certification Schuirmann's two one-sided tests with Fieller's ratio. Pure: numpy and
scipy only.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy import special, stats

SIDES = ("two", "upper")
#: the informative requirement of :func:`judge` (module docstring): a retrain this many prediction standard
#: deviations from the references' centre would still be certified (the Gaussian 99 % two-sided quantile)
Z_POWER = 2.576
#: the testability requirement's two-sided probability: a retrain t_{K-1, POWER} prediction standard deviations
#: from the references' centre would still be certified (module docstring)
POWER = 0.995


def z_certify(k: int) -> float:
    """The testability requirement with K references: t_{K−1, 0.995} (:data:`POWER`; 4.60 at K = 5, 3.50 at 8,
    2.66 at 64), where a genuine retrain's standardised deviation is Student t (module docstring)."""
    return t_quantile(max(k - 1, 1), POWER)


@lru_cache(maxsize=4096)
def t_quantile(df: int, p: float) -> float:
    """The Student-t quantile t_{df, p}."""
    return float(stats.t.ppf(p, df))


def upper_prediction_bound(values: Sequence[float], confidence: float) -> float:
    """One-sided upper prediction bound at ``confidence`` for one more draw like ``values`` (Student-t with
    their own standard deviation: mean + t_{n-1, confidence} sd sqrt(1 + 1/n)); their mean where there is one
    value (no spread to read)."""
    vals = [float(v) for v in values]
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return mean + t_quantile(len(vals) - 1, confidence) * sd * math.sqrt(1 + 1 / len(vals))


#: the joint test's clip on each standardised deviation (:func:`joint_deviations`)
JOINT_CLIP = 4.0


def joint_z(values: np.ndarray, recovery: np.ndarray) -> np.ndarray:
    """The joint test's standardised deviations: checks x (K + 1) models, each model against the other K, clipped
    to ±:data:`JOINT_CLIP`, z⁺ on a recovery (:func:`joint_deviations`)."""
    x = np.asarray(values, dtype=float)
    m = x.shape[1]
    z = np.zeros_like(x)
    for i in range(m):
        others = np.delete(x, i, axis=1)
        sd = others.std(axis=1, ddof=1)
        ok = sd > 0
        z[ok, i] = (x[ok, i] - others[ok].mean(axis=1)) / sd[ok]
    z = np.clip(z, -JOINT_CLIP, JOINT_CLIP)
    z[recovery] = np.maximum(z[recovery], 0.0)
    return z


def joint_deviations(values: np.ndarray, recovery: np.ndarray) -> np.ndarray:
    """Each model's joint deviation (:mod:`unlearnkit.audit.joint`: each model standardised against the other
    K, z clipped to ±:data:`JOINT_CLIP`, z⁺ on a recovery, the cube root of the mean z²). ``values``: checks x
    (K + 1) models, the audited model first; ``recovery``: per check, whether only the side towards the original
    counts."""
    return np.cbrt((joint_z(values, recovery) ** 2).mean(axis=0))


@dataclass(frozen=True)
class RuleResult:
    """One statistic of one model judged against the references (module docstring).

    ``value`` / ``original`` / ``references``: the statistic's values; ``center``, ``spread``: the references'
    mean and sd; ``kept``: the kept fraction κ (nan when the original is not above the references);
    ``kept_low``/``kept_high``: its interval at 1 − 2α (Fieller; -inf/inf when unbounded); ``margin``: δ;
    ``flag_low``/``flag_high``: the prediction bounds (flag outside); ``p_above``/``p_below``: the flag's
    one-sided p-values; ``testable``: the positive control with power holds; ``within``: certified
    (testable and both one-sided equivalence tests reject); ``flag``: "above" / "below" / "" at this
    comparison's own ``flag_level`` (a family applies Holm on the p-values instead); ``status``: "ok" or why
    nothing could be judged ("too_few_references", "not_finite", "no_spread"); ``informative``: the positive
    control of a deviation holds (module docstring; True wherever ``testable`` is)."""

    value: float
    original: float
    references: tuple[float, ...]
    center: float
    spread: float
    kept: float
    kept_low: float
    kept_high: float
    margin: float
    sides: str
    flag_low: float
    flag_high: float
    p_above: float
    p_below: float
    testable: bool
    within: bool
    flag: str
    status: str = "ok"
    equiv_level: float = 0.05
    flag_level: float = 0.05
    informative: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["references"] = list(self.references)
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

    @property
    def p(self) -> float:
        """The flag's p-value (the smaller side; two-sided statistics double it)."""
        if self.sides == "upper":
            return self.p_above
        return min(1.0, 2.0 * min(self.p_above, self.p_below))

    @property
    def direction(self) -> str:
        """"above" or "below": the side the flag's one-sided p-values point to."""
        return "above" if self.p_above <= self.p_below else "below"


def _t_sf(x: float, df: int) -> float:
    return float(special.stdtr(df, -x))


def _certify(a: float, b: float, s: float, k: int, *, margin: float, level: float, sides: str) -> bool:
    """Both one-sided tests of |κ| < margin (upper only for one-sided statistics) reject at ``level``."""
    t = t_quantile(k - 1, 1.0 - level)
    up = a - margin * b < -t * s * math.sqrt(1.0 + margin ** 2 + (1.0 - margin) ** 2 / k)
    if sides == "upper":
        return up
    low = a + margin * b > t * s * math.sqrt(1.0 + margin ** 2 + (1.0 + margin) ** 2 / k)
    return up and low


def excess_to_test(k: int, *, margin: float, sides: str = "two", level: float = 0.05,
                   z_power: float | None = None) -> float:
    """The original's excess over K references, in their standard deviations, from which a statistic is
    testable (:func:`judge`'s positive control with power): a retrain ``z_power`` prediction standard
    deviations from their centre would still be certified (None: :func:`z_certify`, t_{K−1, 0.995}). 15.6 at
    K = 5, 12.1 at K = 8 and 9.1 at K = 64 for a two-sided statistic at the margin 0.5 (11.2 at K = 5 with the
    Gaussian :data:`Z_POWER`, the informative requirement); about 44 at the margin 0.1 with K = 64."""
    if z_power is None:
        z_power = z_certify(k)
    t_eq = t_quantile(k - 1, 1.0 - level)
    factor = math.sqrt(1.0 + margin ** 2 + (1.0 + margin) ** 2 / k) if sides == "two" else \
        math.sqrt(1.0 + margin ** 2 + (1.0 - margin) ** 2 / k)
    return (t_eq * factor + z_power * math.sqrt(1.0 + 1.0 / k)) / margin


def _testable(b: float, s: float, k: int, *, margin: float, sides: str, level: float,
              z_power: float | None) -> bool:
    """The positive control with power: the original's excess ``b`` over K references of spread ``s`` is large
    enough (:func:`excess_to_test`)."""
    return b > 0 and b >= s * excess_to_test(k, margin=margin, sides=sides, level=level, z_power=z_power)


def kept_interval(a: float, b: float, s: float, k: int, level: float) -> tuple[float, float]:
    """Fieller's interval for κ = a / b at confidence 1 − 2 ``level``: Var(a) = s²(1 + 1/K), Var(b) = s²(1 + 1/K),
    Cov(a, b) = s²/K (the references' mean is in both); (-inf, inf) when b is not clearly above 0."""
    t = t_quantile(k - 1, 1.0 - level)
    va = vb = s * s * (1.0 + 1.0 / k)
    cab = s * s / k
    # solve (a − κ b)² = t² (va − 2κ cab + κ² vb) for κ
    qa = b * b - t * t * vb
    qb = -2.0 * (a * b - t * t * cab)
    qc = a * a - t * t * va
    if qa <= 0:
        return -math.inf, math.inf
    disc = qb * qb - 4.0 * qa * qc
    if disc < 0:  # pragma: no cover - cannot happen when qa > 0 (the quadratic has real roots around a/b)
        return -math.inf, math.inf
    r = math.sqrt(disc)
    return (-qb - r) / (2.0 * qa), (-qb + r) / (2.0 * qa)


def judge(value: float, original: float, references: Sequence[float], *, margin: float, sides: str = "two",
          equiv_level: float = 0.05, flag_level: float = 0.05, z_power: float | None = None) -> RuleResult:
    """The rule (module docstring) for one statistic: ``value`` (the audited model), ``original`` and the
    references' ``references`` (K >= 2 values), oriented so that more = more of the forgotten data. ``margin``
    δ in (0, 1); ``sides`` "two" (a deviation either way counts, certification needs |κ| < δ) or "upper" (only
    more counts). ``equiv_level``: α of each one-sided equivalence test; ``flag_level``: the flag's level per
    side (a family passes its Bonferroni share, or reads the p-values for Holm); ``z_power``: the testability
    requirement (a retrain this many prediction standard deviations from the centre would be certified; None:
    :func:`z_certify`, t_{K−1, 0.995}: a genuine retrain passes a testable statistic with probability >= 99 %,
    so that the intersection over the dozens an audit tests keeps its power). ``informative`` reads the
    Gaussian :data:`Z_POWER` (or ``z_power`` where that is smaller)."""
    if sides not in SIDES:
        raise ValueError(f"sides must be one of {SIDES}, not {sides!r}")
    if not 0.0 < margin < 1.0:
        raise ValueError(f"margin must lie in (0, 1), got {margin}")
    refs = tuple(float(v) for v in references)
    k = len(refs)
    nan = math.nan
    values = (value, original, *refs)
    if k < 2 or not all(math.isfinite(v) for v in values):
        status = "too_few_references" if k < 2 else "not_finite"
        return RuleResult(float(value), float(original), refs, nan, nan, nan, -math.inf, math.inf, margin, sides,
                          -math.inf, math.inf, 1.0, 1.0, False, False, "", status, equiv_level, flag_level)
    center = float(np.mean(refs))
    s = float(np.std(refs, ddof=1))
    a, b = value - center, original - center
    if not s > 0:
        return RuleResult(value, original, refs, center, s, nan, -math.inf, math.inf, margin, sides, center, center,
                          1.0, 1.0, False, False, "", "no_spread", equiv_level, flag_level)
    pred = s * math.sqrt(1.0 + 1.0 / k)
    half = t_quantile(k - 1, 1.0 - flag_level) * pred
    p_above, p_below = _t_sf(a / pred, k - 1), _t_sf(-a / pred, k - 1)
    flag = "above" if a > half else ("below" if sides == "two" and a < -half else "")
    z_t = z_certify(k) if z_power is None else z_power
    testable = _testable(b, s, k, margin=margin, sides=sides, level=equiv_level, z_power=z_t)
    informative = testable or _testable(b, s, k, margin=margin, sides=sides, level=equiv_level,
                                        z_power=min(Z_POWER, z_t))
    kept = a / b if b > 0 else nan
    lo, hi = kept_interval(a, b, s, k, equiv_level) if b > 0 else (-math.inf, math.inf)
    within = testable and _certify(a, b, s, k, margin=margin, level=equiv_level, sides=sides)
    return RuleResult(value, original, refs, center, s, kept, lo, hi, margin, sides, center - half, center + half,
                      p_above, p_below, testable, within, flag, "ok", equiv_level, flag_level, informative)


def simulate_certify_rate(k: int, *, kept: float, margin: float, excess_sd: float = 10.0, sides: str = "two",
                          equiv_level: float = 0.05, trials: int = 20000, seed: int = 0) -> float:
    """How often :func:`judge` certifies a model whose expected value keeps ``kept`` of the original's excess,
    with K references drawn afresh each trial (Gaussian, sd 1), the original ``excess_sd`` sds above their
    population mean, and the model and the original with the references' variance. At ``kept`` = ``margin``
    this is the false-certification rate at the boundary (at most ``equiv_level``); at ``kept`` = 0 it is the
    power for a genuine retrain."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(trials):
        refs = rng.standard_normal(k)
        o = excess_sd + rng.standard_normal()
        u = kept * excess_sd + rng.standard_normal()
        hits += judge(u, o, refs, margin=margin, sides=sides, equiv_level=equiv_level, z_power=-math.inf).within
    return hits / trials


def references_to_test(r: RuleResult, max_references: int = 64) -> int | None:
    """The smallest number of references with which this statistic would be testable (the positive control
    with power, :func:`judge`'s default, t_{K−1, 0.995}), if the original's excess over the references and their
    spread stayed as measured: None when none up to ``max_references`` would (the original is too close to
    the references for any number of them: about (t + z) / margin of their standard deviations are needed)
    or nothing was measured."""
    if r.status != "ok" or not (r.original > r.center) or not r.spread > 0:
        return None
    b = r.original - r.center
    for k in range(max(len(r.references), 2), max_references + 1):
        if _testable(b, r.spread, k, margin=r.margin, sides=r.sides, level=r.equiv_level, z_power=None):
            return k
    return None


def references_to_certify(r: RuleResult, max_references: int = 64) -> int | None:
    """The smallest number of references with which this comparison would be certified if the values kept
    their centre, spread and the original's excess (the margin fixed): None when none up to
    ``max_references`` would (the model's own deviation is beyond the margin) or nothing was measured."""
    if r.status != "ok" or not (r.original > r.center):
        return None
    a, b, s = r.value - r.center, r.original - r.center, r.spread
    for k in range(max(len(r.references), 2), max_references + 1):
        if _certify(a, b, s, k, margin=r.margin, level=r.equiv_level, sides=r.sides):
            return k
    return None
