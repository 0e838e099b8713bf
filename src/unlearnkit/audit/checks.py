"""Every deciding number of an audit as one :class:`Measure`, judged by one rule into a :class:`Check`.

A measure is one statistic (a layer's separability on one audit data, the kernel probe, relearning after a
budget, a head check, BatchNorm recalibration, the output's confidence or its per-example agreement) with its
value on the unlearned model, the original and each reference, all measured the same way (the same rows, the
same shot draws, the same audit seed). :func:`judge_all` applies :func:`unlearnkit.metrics.equivalence.judge`
to each (the kept fraction against the margin ``config.kept_margin``; the references' prediction bound for a
flag) and Holm's step-down correction within each family at the family's share of the false-flag budget
(``config.BUDGET``), so a genuine retrain is flagged by a family with probability at most its share, and by the
audit at most 1 − ``confidence`` (Bonferroni across families). Only informative statistics flag (the positive
control: the original is far from the references there; every testable statistic is informative, and a few
more, :mod:`unlearnkit.metrics.equivalence`), and only they enter Holm's family; and a flag must be
material: the kept fraction's estimate beyond the margin (a deviation that is significant against references
that happen to agree closely, but smaller than the margin, is no evidence of keeping the forget data). A
deviation at the family's share of ``config.told_apart_level`` (0.05, Holm; material or not) is recorded as
``Check.deviates`` ("told apart"): the model can be told from retrains there, so the verdict does not certify it
either (:func:`unlearnkit.audit.verdict.distinguishable`), except below the references on a recovery statistic.
It costs a genuine retrain its certificate, never an accusation. One statistic at a time, five references let
models keeping a third of the original's excess through (they sit a little beyond the references on most
statistics at once): :mod:`unlearnkit.audit.joint` reads them together.

Families: ``output`` (the model's own outputs on the forget rows), ``representation`` (every audited layer),
``relearning`` (whole-model SGD from shots), ``heads`` (a head re-fitted or relearnt on frozen features) and
``batchnorm`` (statistics re-estimated on retained data).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..metrics.equivalence import RuleResult, judge
from .config import BUDGET, AuditConfig

FAMILIES = ("output", "representation", "relearning", "heads", "batchnorm")
#: the families that look inside the model (``erased`` needs a testable one, and the output family)
INSIDE = ("representation", "relearning", "heads", "batchnorm")


@dataclass(frozen=True)
class Measure:
    """One deciding statistic (module docstring), oriented so that more = more of the forgotten data.

    ``sides``: "two" (a deviation either way counts) or "upper"; ``unit``: what the values are;
    ``decides``: False where the statistic is reported only (e.g. relearning of an architecture that cannot be
    canonicalised, whose raw SGD a rescaling of units moves); ``separated``: roles ("unlearned", "original",
    "reference") whose statistic is at its cap (groups separated without overlap). ``recovery``: the values are a
    recovery under attack (the mean probability of the true class after relearning, a head re-fit, BatchNorm
    re-estimation: certified against ``recovery_margin``, else ``kept_margin``); ``flag_values``: (unlearned,
    original, references) on the scale the flag reads when it is not the values' (the log-odds: Gaussian
    across retrains where probabilities near 0 are skewed); ``flags``: False where a deviation is no evidence
    against a retrain because retrains' own values are heavy-tailed there (relearning at the sweep's longest
    budget: a genuine retrain lies above a 5-reference Gaussian prediction bound 11-14 % of the time at lr 0.01,
    not 5 %; ``benchmarks/relearn_spread.py``). Such a statistic is still certified (``erased`` needs it within
    the margin); it only never flags."""

    family: str
    name: str
    data: str
    layer: str | None
    sides: str
    unit: str
    unlearned: float
    original: float
    references: tuple[float, ...]
    decides: bool = True
    note: str = ""
    separated: tuple[str, ...] = ()
    recovery: bool = False
    flag_values: tuple | None = None
    flags: bool = True

    @property
    def label(self) -> str:
        where = f"{self.layer}, " if self.layer else ""
        return f"{self.name} ({where}{self.data} data)"


@dataclass(frozen=True)
class Check:
    """A :class:`Measure` judged: ``result`` (the rule), ``p_holm`` (Holm-adjusted within the family),
    ``flag`` ("above" / "below" / "": a deviation from retrain at the family's share of the budget),
    ``unmeasured`` (the unlearned model's value could not be measured where everything else was), ``deviates``
    ("above" / "below" / "": beyond the references' prediction bound at the family's share of the budget, Holm,
    material or not: the model can be told from retrains there, a flag when it is also material)."""

    measure: Measure
    result: RuleResult
    p_holm: float
    flag: str
    unmeasured: bool = False
    deviates: str = ""

    @property
    def testable(self) -> bool:
        return self.measure.decides and self.result.testable

    @property
    def within(self) -> bool:
        return self.testable and self.result.within

    @property
    def informative(self) -> bool:
        """A deviation here is evidence (the flags, the told-apart tests and the joint test read it): every
        testable statistic, and those where the original is a little less far from the references
        (:mod:`unlearnkit.metrics.equivalence`, "Informative")."""
        return self.measure.decides and self.result.informative

    def to_dict(self) -> dict:
        m, r = self.measure, self.result
        return {"family": m.family, "name": m.name, "data": m.data, "layer": m.layer, "sides": m.sides,
                "unit": m.unit, "decides": m.decides, "note": m.note or None,
                "unlearned": _finite(m.unlearned), "original": _finite(m.original),
                "references": [_finite(v) for v in m.references],
                "kept": _finite(r.kept), "kept_interval": [_finite(r.kept_low), _finite(r.kept_high)],
                "margin": r.margin, "flag_bounds": [_finite(r.flag_low), _finite(r.flag_high)],
                "p": r.p, "p_holm": self.p_holm, "flag": self.flag or None, "testable": self.testable,
                "informative": self.informative,
                "within": self.within, "status": r.status, "unmeasured": self.unmeasured,
                "separated": list(m.separated) or None, "can_flag": m.flags, "deviates": self.deviates or None}


def _finite(v: float):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def holm(p: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979), in the input order."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adj = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adj[i] = running
    return adj


def _separated(m: Measure) -> tuple[str, float] | None:
    """A statistic at its cap decides by itself: (flag, p) when only the unlearned model (or it and the
    original) separates the forget rows without overlap; None otherwise."""
    if "unlearned" in m.separated and "reference" not in m.separated:
        return "above", 0.0
    return None


def judge_all(measures: list[Measure], config: AuditConfig) -> list[Check]:
    """Every measure judged (module docstring), in the order given."""
    alpha = 1.0 - config.confidence
    results = []
    for m in measures:
        margin = config.recovery_margin if m.recovery else config.kept_margin
        r = judge(m.unlearned, m.original, m.references, margin=margin, sides=m.sides,
                  equiv_level=alpha, flag_level=alpha)
        if m.flag_values is not None:  # the flag reads the other scale
            fu, fo, frefs = m.flag_values
            f = judge(fu, fo, frefs, margin=margin, sides=m.sides, equiv_level=alpha, flag_level=alpha)
            r = replace(r, flag_low=f.flag_low, flag_high=f.flag_high, p_above=f.p_above, p_below=f.p_below,
                        flag=f.flag) if f.status == "ok" else replace(r, p_above=1.0, p_below=1.0, flag="")
        if "reference" in m.separated or ("original" in m.separated and "unlearned" not in m.separated):
            r = _untestable(r)  # a cap among the references, or an original at its cap: no ratio to read
        results.append(r)
    checks: list[Check | None] = [None] * len(measures)
    for family in FAMILIES:
        idx = [i for i, m in enumerate(measures) if m.family == family]
        # a statistic flags where it is testable (the original itself is far from the references there): a
        # deviation where it is not is no evidence of keeping the forget data, and there the references' values
        # are where a Gaussian prediction bound is least safe (a genuine retrain's head relearnt for 40 steps
        # reached 0.88 where 8 references reached 0.67-0.82 and the original 1.00: flagged before this rule)
        live = [i for i in idx if measures[i].decides and measures[i].flags and
                ((results[i].status == "ok" and results[i].informative) or _separated(measures[i]))]
        ps = [(_separated(measures[i]) or ("", results[i].p))[1] for i in live]
        adjusted = dict(zip(live, holm(ps)))
        level, told_level = alpha * BUDGET[family], config.told_apart_level * BUDGET[family]
        for i in idx:
            m, r = measures[i], results[i]
            p_holm = adjusted.get(i, 1.0)
            capped = _separated(m)
            # a flag is a significant deviation (beyond the references' prediction bound, Holm) that is also
            # material: the model's kept fraction itself beyond the margin. A genuine retrain of digits relearnt
            # to 0.019 where five references sat at 0.028-0.032 and the original at 1.000 (kept -0.01) was
            # flagged below before this rule: significant against references that agree closely, immaterial
            material = capped is not None or (math.isfinite(r.kept) and abs(r.kept) > r.margin)
            side = (capped[0] if capped else r.direction) if i in adjusted else ""
            if side == "below" and m.sides == "upper":
                side = ""
            flag = side if material and p_holm < level else ""
            # told apart from retrains (material or not; blocks erased), but not below on a recovery statistic
            # (relearning, heads, BatchNorm): recovering less than retrains by less than the margin is no evidence
            # of keeping the forget data, near 0 is where the retrains' lower tail is least Gaussian (a genuine
            # small_cnn retrain of digits relearnt to 0.01 in 5 steps where five references read 0.01-0.02 was told
            # apart below, Holm p = 0.011), and re-estimated BatchNorm there depends on how BatchNorm is
            # parametrised (a folded or canonical BatchNorm, re-estimated, computes another function)
            # at its own, larger level (``told_apart_level``): it costs a genuine retrain its certificate, never
            # a flag, and a keeper at the margin's edge is caught only by a test with the power to tell it apart
            deviates = "" if (side == "below" and m.recovery) or p_holm >= told_level else side
            unmeasured = m.decides and not math.isfinite(m.unlearned) and not capped and \
                math.isfinite(m.original) and all(math.isfinite(v) for v in m.references)
            checks[i] = Check(m, r, p_holm, flag, unmeasured, deviates)
    return [c for c in checks if c is not None]


def _untestable(r: RuleResult) -> RuleResult:
    return replace(r, testable=False, within=False, status="capped", informative=False)
