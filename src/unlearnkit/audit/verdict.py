"""From the measurements to one verdict: an ordered chain of small rules over one record.

:func:`measurements` gathers everything the rules read into a :class:`Measurements` record:
output metrics, k-NN, the resurfacing checks, and one :class:`Comparison` per (audit data, layer,
statistic) with its p-value, Holm-adjusted over the whole family. :func:`decide` applies
:data:`RULES` in order; the first that returns a :class:`Decision` wins:

1. :func:`collapsed`: retained utility destroyed: train-retain or test-retain accuracy more than
   ``collapse_margin`` points below retrain's (the penultimate k-NN accuracy is reported, no longer
   read: cosine k-NN on raw features moves when units are rescaled).
2. :func:`not_forgotten`: forget accuracy (training forget set) more than ``not_forgotten_margin``
   points above retrain's, and significantly so (one-sided two-proportion z-test at ``confidence``), or
   the output membership test (:mod:`unlearnkit.metrics.output_test`, K >= 2 references) finds the
   model more confident on the forget set than retrains are (membership above retrain's: samples too).
3. :func:`suppressed`: the output forgets, but some comparison on either audit data is significantly
   *above* the tolerance after Holm's correction over the family (separability and, with K >= 2
   references, MMD² at every layer), or a resurfacing check that enters the verdict (BatchNorm
   recalibration, head re-fit; with K >= 2 references head relearning and relearning on canonical
   copies) brings the class back beyond retrain's.
4. :func:`overforgotten`: some comparison is significantly *below* 1/tolerance (two-sided tests), or the
   output membership test finds the forget set's outputs beyond retrain's on the forgotten side: the
   removal itself is detectable.
5. :func:`too_few`: fewer than ``min_forget`` forget samples on the data the verdict rests on.
6. :func:`no_positive_control`: no layer is testable on that data (a layer is testable where its
   statistic is defined and the original is clear of the tolerance: a per-layer positive control).
7. :func:`uncalibrated`: one retrained reference on an architecture whose constant tolerance was
   not validated (:mod:`unlearnkit.audit.tolerance`): pass 5 or more references.
8. :func:`not_equivalent`: some testable layer's interval still reaches the tolerance on either side,
   naming the layer and how many forget samples would decide (80 % power).
9. :func:`unmeasured`: a deciding attack could not be measured (relearning diverged).
10. :func:`output_untested`: the output membership test is not conclusive (fewer than 2 references,
    or no power: the original's outputs are inside retrain's range), so "indistinguishable at the output"
    is not shown.
11. :func:`blocked`: a resurfacing check that does not decide (one reference, or an architecture that
    cannot be canonicalised) brought the class back: no flag, but no certification either.
12. :func:`erased`: an equivalence claim (two one-sided tests, combined as an intersection-union test,
    which needs no multiplicity correction): every testable layer within tolerance of retrain, at least
    one testable layer, the output membership test within retrain's range with the original outside it;
    it names the layers it certifies and those it cannot test.

The false-flag budget 1 − ``confidence`` is split among the deciding checks (``config.BUDGET``): 3/8
to the layers' family, 1/8 to the output test, 1/4 each to head relearning and relearning. The
utility axis (:func:`unlearnkit.audit.core.utility_loss`) qualifies any verdict but ``collapsed``:
``erased · utility −17.7 pts`` (``AuditReport.verdict_line``) when retained accuracy is lost beyond
``utility_budget`` and the references' spread; the bare word means utility kept.

Rules 5-11 answer ``inconclusive``, each saying what would decide. The statistic
(:mod:`unlearnkit.audit.layers`) is the ratio of the Gaussian-unbiased Mahalanobis distance U of
forget vs retained features, unlearned over retrain, compared on the log scale at every layer of both
audit data: invariant to function-preserving reparametrisations, two-sided, and "cannot decide"
where it is not defined (a cap, too few rows, references that do not separate). ΔAUROC (the held-out
AUROC of the LDA discriminant) and Mirage's ΔLPR are reported beside it and read by no rule: they
saturate (a retrain separates an unseen digit at AUROC 99 %+).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from scipy import stats

from ..metrics.two_sample import fieller_p
from .config import AuditConfig
from .layers import Interval, LayerResult

VERDICTS = ("erased", "suppressed", "overforgotten", "collapsed", "not_forgotten", "inconclusive")
#: CKA (standardised units) to the original at or above which a layer counts as kept from the original,
#: when the references' CKA to the original is below it.
KEPT_CKA = 0.995
#: what the rules read (MMD² where it was computed: K >= 2 references); ΔAUROC and Mirage's ΔLPR are reported
STATS = ("separability", "mmd")


@dataclass(frozen=True)
class Comparison:
    """One (audit data, layer, statistic) against its tolerance, on the statistic's test scale
    (points for ``delta_auroc``, the natural log of the ratio for ``separability``)."""

    data: str
    layer: str
    stat: str
    value: float
    low: float
    high: float
    margin: float
    two_sided: bool
    original: float
    original_low: float
    original_high: float
    p: float = 1.0           # H0: within tolerance (|θ| ≤ margin two-sided, θ ≤ margin one-sided)
    p_holm: float = 1.0      # Holm-adjusted over the family
    status: str = "ok"       # "ok", "separated", or why the statistic is not defined at this layer
    kept: str = ""           # non-empty: the layer's representation is the original's (why)

    @property
    def defined(self) -> bool:
        """The statistic and its tolerance are defined here (a ratio, or an infinite one: "separated")."""
        return self.status in ("ok", "separated") and math.isfinite(self.margin)

    @property
    def within(self) -> bool:
        """Equivalence: the interval lies inside the tolerance."""
        return self.defined and self.high < self.margin and (not self.two_sided or self.low > -self.margin)

    @property
    def control(self) -> bool:
        """Positive control: the original's interval is clear of the tolerance."""
        return self.defined and (self.original_low > self.margin
                                 or (self.two_sided and self.original_high < -self.margin))

    @property
    def testable(self) -> bool:
        """Whether this layer can be certified: the statistic is defined and the original is clear of the
        tolerance here (a layer where even the original is within tolerance cannot show erasure)."""
        return self.defined and self.control

    def untestable_reason(self) -> str:
        if not math.isfinite(self.margin) or self.status not in ("ok", "separated"):
            return {"reference_not_separated": "the references themselves do not separate the forget set here",
                    "too_few_rows": "too few rows for the layer's dimension (n - p - 3 < 10)",
                    "reference_too_few_rows": "too few rows for the layer's dimension (n - p - 3 < 10)",
                    "reference_separated": "a reference separates the forget set without overlap (the statistic "
                                           "is at its cap)",
                    }.get(self.status, f"statistic not defined ({self.status})")
        why = "the original is not clear of the tolerance here"
        return f"{why}; {self.kept}" if self.kept else why

    def to_dict(self) -> dict:
        return {"data": self.data, "layer": self.layer, "stat": self.stat, "value": self.value,
                "interval": [self.low, self.high], "tolerance": self.margin, "two_sided": self.two_sided,
                "p": self.p, "p_holm": self.p_holm, "within": self.within, "control": self.control,
                "status": self.status, "testable": self.testable, "kept_from_original": self.kept or None}


@dataclass(frozen=True)
class Measurements:
    """Everything the rules read. ``outputs_*``: output metrics (retrain: mean of the references)."""

    outputs_unlearned: dict
    outputs_retrained: dict
    knn_unlearned: dict
    knn_retrained: dict
    comparisons: tuple[Comparison, ...]
    layers: dict[str, list[LayerResult]]
    rests_on: str
    n_forget: dict[str, int]
    sample_level: bool
    resurfacing: dict
    n_train_forget: int
    config: AuditConfig
    output: Any = None        # metrics.output_test.OutputTest of the training forget set (None: not run)
    utility: dict = field(default_factory=dict)  # core.utility_loss

    @property
    def alpha(self) -> float:
        return 1.0 - self.config.confidence

    @property
    def n_refs(self) -> int:
        """How many retrained references the tolerances rest on."""
        return max((r.tolerance.k for rs in self.layers.values() for r in rs if r.tolerance is not None), default=0)

    def on(self, data: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.data == data]

    def layer(self, data: str, name: str) -> LayerResult:
        return next(r for r in self.layers[data] if r.layer == name)


@dataclass
class Decision:
    verdict: str
    evidence: list[str] = field(default_factory=list)
    n_forget_needed: int | None = None


# --- the family of comparisons and its error control ------------------------------------------------

def p_value(iv: Interval, margin: float, log_scale: bool, two_sided: bool) -> float:
    """p-value of H0 "within tolerance" for one interval. Bootstrap draws (sorted, log scale) give
    (1 + #draws on the H0 side) / (B + 1); a t-interval gives the t tail with its ``se`` and ``df``;
    without either, 0 or 1 by whether the interval clears the tolerance."""
    m = math.log(margin) if log_scale else margin
    if iv.moments is not None:  # Fieller's pivot (MMD²: valid at a value at or below 0)
        up, down = fieller_p(iv.moments, margin)[0], fieller_p(iv.moments, 1.0 / margin)[1]
    elif iv.draws is not None and iv.draws.size:
        b = iv.draws.size
        up = (1 + np.searchsorted(iv.draws, m, side="right")) / (b + 1)
        down = (1 + b - np.searchsorted(iv.draws, -m, side="left")) / (b + 1)
    elif math.isfinite(iv.se) and iv.se > 0 and iv.df > 0:
        v = _scaled(iv, log_scale)[0]
        up = float(stats.t.sf((v - m) / iv.se, iv.df))
        down = float(stats.t.cdf((v + m) / iv.se, iv.df))
    else:
        lo, hi = _scaled(iv, log_scale)[1:]
        up, down = (0.0 if lo > m else 1.0), (0.0 if hi < -m else 1.0)
    return float(min(1.0, 2 * min(up, down))) if two_sided else float(up)


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


def _scaled(iv: Interval, log_scale: bool) -> tuple[float, float, float]:
    if not log_scale:
        return iv.value, iv.low, iv.high
    return tuple(math.log(v) if v > 0 else (-math.inf if v == v else math.nan) for v in (iv.value, iv.low, iv.high))


def _kept(r: LayerResult) -> str:
    """Why the layer's representation is the original's ('' when it is not): CKA to the original at or
    above :data:`KEPT_CKA` where the references' is below it."""
    cu, cr = r.cka_original, r.cka_retrain_original
    if math.isfinite(cu) and cu >= KEPT_CKA and (not math.isfinite(cr) or cr < KEPT_CKA):
        return f"the representation is kept from the original (CKA {cu:.3f} to it; references {cr:.3f})"
    return ""


def _comparison(data: str, r: LayerResult, stat: str, two_sided: bool) -> Comparison | None:
    log_scale = stat != "delta_auroc"
    iv, ivo, margin = {"delta_auroc": (r.delta_auroc, r.delta_auroc_original, r.auroc_margin),
                       "separability": (r.separability_ratio, r.separability_ratio_original, r.separability_margin),
                       "mmd": (r.mmd_ratio, r.mmd_ratio_original, r.mmd_margin)}[stat]
    if iv is None or ivo is None:
        return None
    m = math.log(margin) if log_scale and margin > 0 else (margin if not log_scale else math.nan)
    status = iv.status if iv.status != "ok" or ivo.status in ("ok", "separated") else f"original_{ivo.status}"
    v, lo, hi = _scaled(iv, log_scale)
    ov, olo, ohi = _scaled(ivo, log_scale)
    ok = status in ("ok", "separated") and math.isfinite(m)
    return Comparison(data, r.layer, stat, v, lo, hi, m, two_sided, ov, olo, ohi,
                      p_value(iv, margin, log_scale, two_sided) if ok else 1.0, 1.0, status, _kept(r))


def comparisons(layers: dict[str, list[LayerResult]], sample_level: bool) -> tuple[Comparison, ...]:
    """Every probed layer of every audit data x :data:`STATS`, two-sided (the claim is
    "indistinguishable": a representation far less separable than retrain's is a deviation too), with
    Holm-adjusted p-values over the family of those whose statistic is defined. ``sample_level`` is
    kept for the tolerance's level (:mod:`~unlearnkit.audit.tolerance`)."""
    family = [c for data, rs in layers.items() for r in rs if r.probed for s in STATS
              if (c := _comparison(data, r, s, True)) is not None]
    defined = [c for c in family if c.defined]
    adjusted = dict(zip(map(id, defined), holm([c.p for c in defined])))
    return tuple(Comparison(**{**c.__dict__, "p_holm": adjusted.get(id(c), 1.0)}) for c in family)


def measurements(*, outputs_unlearned: dict, outputs_retrained: dict, knn_unlearned: dict, knn_retrained: dict,
                 layers: dict[str, list[LayerResult]], rests_on: str, n_forget: dict[str, int], sample_level: bool,
                 resurfacing: dict, n_train_forget: int, config: AuditConfig, output=None,
                 utility: dict | None = None) -> Measurements:
    """The record the rules read, with the family of comparisons formed from ``layers``."""
    return Measurements(outputs_unlearned, outputs_retrained, knn_unlearned, knn_retrained,
                        comparisons(layers, sample_level), layers, rests_on, n_forget, sample_level, resurfacing,
                        n_train_forget, config, output, utility or {})


# --- the rules ----------------------------------------------------------------------------------------

def collapsed(m: Measurements) -> Decision | None:
    out_u, out_r, cfg = m.outputs_unlearned, m.outputs_retrained, m.config
    drops = {
        "retain accuracy": (out_u["retain_acc"], out_r["retain_acc"]),
        "test-retain accuracy": (out_u["test_retain_acc"], out_r["test_retain_acc"]),
    }
    ev = [f"{k} is {r - u:.1f} points below retrain's (collapse margin {cfg.collapse_margin:g}): "
          f"{u:.1f} vs {r:.1f}" for k, (u, r) in drops.items()
          if u is not None and r is not None and math.isfinite(r - u) and r - u > cfg.collapse_margin]
    return Decision("collapsed", ev) if ev else None


def not_forgotten(m: Measurements) -> Decision | None:
    cfg = m.config
    fu, fr = m.outputs_unlearned["forget_acc"], m.outputs_retrained["forget_acc"]
    pu, pr = fu / 100.0, fr / 100.0
    n_f = max(m.n_train_forget, 1)
    se = math.sqrt(max(pu * (1 - pu), 0.0) / n_f + max(pr * (1 - pr), 0.0) / n_f)
    significant = se == 0.0 or (pu - pr) / se > stats.norm.ppf(cfg.confidence)
    if fu - fr > cfg.not_forgotten_margin and significant:
        return Decision("not_forgotten", [
            f"forget accuracy {fu:.1f}% vs retrain's {fr:.1f}% (+{fu - fr:.1f} points, margin "
            f"{cfg.not_forgotten_margin:g}): the model still predicts the forget set"])
    if _output_flag(m) == "above":
        return Decision("not_forgotten", [output_line(m.output) + ": more confident on the forget set than a retrain "
                                          "would be (membership above retrain's)"])
    return None


def blocked(m: Measurements) -> Decision | None:
    """A resurfacing check that does not decide (one reference, or raw weights of an architecture that
    cannot be canonicalised) still withholds ``erased`` when it brings the class back beyond retrain:
    never a flag (its margin is not calibrated), but no certification on the strength of it."""
    fired = [r for r in m.resurfacing.values() if r.applicable and not r.in_verdict and r.resurfaced]
    if not fired:
        return None
    return Decision("inconclusive", [_resurface_line(r) + "; this check does not decide here ("
                                     + ("one reference: pass 5 to derive its margin" if m.n_refs < 2 else
                                        "not invariant for this architecture") + "), so erasure is not certified"
                                     for r in fired])


def suppressed(m: Measurements) -> Decision | None:
    flagged = [c for c in m.comparisons if c.defined and c.p_holm < m.alpha and c.value > 0]
    resurfaced = [r for r in m.resurfacing.values() if r.applicable and r.in_verdict and r.resurfaced]
    if not flagged and not resurfaced:
        return None
    ev = [_describe(c, m) for c in sorted(flagged, key=lambda c: c.p_holm)]
    ev += [_resurface_line(r) for r in resurfaced]
    return Decision("suppressed", ev)


def overforgotten(m: Measurements) -> Decision | None:
    """Some layer separates the forget data significantly *less* than retrain does, beyond the
    tolerance (Holm over the family, like :func:`suppressed`): the model is told apart from retrain
    by what it removed (e.g. a forget class whose features were pulled onto the retained data's)."""
    flagged = [c for c in m.comparisons if c.defined and c.p_holm < m.alpha and c.value < 0]
    below = _output_flag(m) == "below"
    if not flagged and not below:
        return None
    ev = [_describe(c, m) for c in sorted(flagged, key=lambda c: c.p_holm)]
    if below:
        ev.append(output_line(m.output) + ": the forget set's outputs sit beyond retrain's on the forgotten side")
    return Decision("overforgotten", ev + [
        "forgetting beyond what retraining leaves is itself detectable (the Streisand effect): the model is not "
        "indistinguishable from retrain"])


def too_few(m: Measurements) -> Decision | None:
    n, cfg = m.n_forget[m.rests_on], m.config
    if n >= cfg.min_forget:
        return None
    need = _need_for_control(m)
    tail = (f"; roughly {need} would be needed (for the original's interval to clear the tolerance; "
            f"intervals narrow as 1/sqrt(n))" if need else
            f"; at least {cfg.min_forget} would be needed to measure anything (with a handful of rows in "
            f"~100 dimensions every model separates them perfectly)")
    return Decision("inconclusive", [f"only {n} forget samples on the {m.rests_on} data (min_forget="
                                     f"{cfg.min_forget}): too few to certify anything{tail}"],
                    need or cfg.min_forget)


def no_positive_control(m: Measurements) -> Decision | None:
    main = m.on(m.rests_on)
    if any(c.testable for c in main):
        return None
    n = m.n_forget[m.rests_on]
    need = _need_for_control(m)
    within = all(abs(c.original) <= c.margin for c in main)
    tail = (" Even the original's point estimates are within tolerance: more data may only confirm that "
            "the forget set left no trace the audit can see" if within else "")
    return Decision("inconclusive", [
        f"positive control failed: the original model itself is not told apart from retrain at any layer on "
        f"the {m.rests_on} data ({n} forget samples), so a model that kept the original representation could "
        f"not be caught either, and erasure cannot be certified"
        + (f"; roughly {need} forget samples would be needed." if need else ".") + tail] + _untestable_lines(m),
        need)


def _uncalibrated(m: Measurements) -> list[LayerResult]:
    return [r for r in m.layers[m.rests_on] if r.probed and r.tolerance is not None
            and r.tolerance.source == "uncalibrated"]


def uncalibrated(m: Measurements) -> Decision | None:
    """One reference on an architecture whose constant tolerance was never validated: the spread of
    retrains is unknown, so equivalence to retrain cannot be claimed."""
    if not _uncalibrated(m):
        return None
    return Decision("inconclusive", [UNCALIBRATED + "; erasure is certified only with tolerances derived from "
                                                    "5 or more retrained references (--references 5)"])


UNCALIBRATED = ("the tolerance (2.2x, calibrated on small_cnn) was not validated for this architecture and one "
                "retrained reference cannot say how far retrains of other seeds differ from each other")


#: z quantiles of the "samples that would decide" power formula: a two-sided 95 % equivalence bound at 80 % power.
_Z_DECIDE = 1.959964 + 0.841621


def samples_to_decide(n: int, se: float, value: float, margin: float) -> int | None:
    """Forget samples for the equivalence test to succeed with 80 % power if the true log ratio were the
    observed ``value`` (its standard error ``se`` shrinking as 1/sqrt(n)): n (se (z_0.975 + z_0.8) /
    (margin − |value|))²; None when |value| is at or beyond the margin (no sample size decides)."""
    room = margin - abs(value)
    if not (room > 0 and math.isfinite(se) and se > 0):
        return None
    return int(math.ceil(n * (se * _Z_DECIDE / room) ** 2))


def not_equivalent(m: Measurements) -> Decision | None:
    open_ = [c for c in m.on(m.rests_on) if c.testable and not c.within]
    if not open_:
        return None
    n = m.n_forget[m.rests_on]
    worst = max(open_, key=lambda c: max(c.high - c.margin, -c.margin - c.low))
    se = (worst.high - worst.low) / (2 * stats.norm.ppf(0.5 + m.config.confidence / 2))
    need = samples_to_decide(n, se, worst.value, worst.margin)
    where = _where(open_)
    grow = ("" if m.rests_on != "train" or m.sample_level else
            " (the training forget set is the whole forgotten class and cannot grow: more test images of the class, "
            "or more references for a tighter tolerance, would)")
    return Decision("inconclusive", [
        f"not shown to be within tolerance of retrain on the {m.rests_on} data at {where}: e.g. "
        f"{_describe(worst, m)}. Erasure is certified only when every testable layer's interval lies inside the "
        f"tolerance" + (f"; about {need} forget samples would decide with 80 % power{grow}" if need else
                        "; its point estimate is itself beyond the tolerance, but not significantly so")]
        + _untestable_lines(m), need)


def unmeasured(m: Measurements) -> Decision | None:
    """A resurfacing check that decides could not be measured on the unlearned model (e.g. relearning
    diverged): erasure is not certified on the strength of an attack that did not run."""
    bad = [r for r in m.resurfacing.values() if r.applicable and r.in_verdict and getattr(r, "undecided", "")]
    if not bad:
        return None
    return Decision("inconclusive", [f"{r.name}: {r.undecided}" for r in bad])


def _output_flag(m: Measurements) -> str | None:
    """"above" / "below" when the output membership test flags the model, else None."""
    o = m.output
    return o.decision if o is not None and o.decision in ("above", "below") else None


def output_line(o) -> str:
    """The output membership test in words (T1: the mean z of the logit-scaled confidence over the forget set)."""
    t1 = o.mean_z
    if t1 is None:
        return f"output membership test: {o.status}"
    return (f"output membership test ({o.num_examples} forget examples, {o.num_references} references): mean z "
            f"{t1.value:+.2f} where retrains fall in [{t1.lower:+.2f}, {t1.upper:+.2f}] and the original at "
            f"{t1.original:+.2f}")


def output_untested(m: Measurements) -> Decision | None:
    """``erased`` means indistinguishable from retrain at the output too: without a conclusive output
    membership test (fewer than 2 references, no forget rows, degenerate outputs, or no power: the original
    itself is not told apart there) erasure is not certified."""
    o = m.output
    if o is not None and o.decision == "within":
        return None
    if o is None:
        why = "the output membership test did not run (no training forget rows)"
    elif o.status == "too_few_references":
        why = (f"the output membership test needs 2 or more retrained references ({o.num_references} given): pass "
               f"--references 5")
    elif o.status == "degenerate":
        why = "the output membership test cannot be computed (non-finite outputs, or references without spread)"
    else:
        need = f"; about {o.references_for_power} references would give it power" if o.references_for_power else ""
        why = (output_line(o) + ": the original itself is inside retrain's range, so the outputs cannot show "
               "erasure" + need)
    return Decision("inconclusive", [why + "; erasure is certified only where the outputs are shown to be "
                                           "retrain-like too"])


def _untestable_lines(m: Measurements) -> list[str]:
    main = m.on(m.rests_on)
    return [f"cannot test {c.layer} ({_stat_name(c.stat)}): {c.untestable_reason()}" for c in main
            if not c.testable]


def certified_layers(m: Measurements) -> list[str]:
    """The layers whose equivalence to retrain is shown on the data the verdict rests on (every testable
    statistic of the layer within tolerance, at least one)."""
    main = m.on(m.rests_on)
    layers = list(dict.fromkeys(c.layer for c in main if c.testable))
    return [name for name in layers if all(c.within for c in main if c.layer == name and c.testable)]


def _where(cs: list[Comparison]) -> str:
    """'layer (stat, stat), layer (stat)' in the family's order."""
    by = {}
    for c in cs:
        by.setdefault(c.layer, []).append(_stat_name(c.stat))
    return ", ".join(f"{layer} ({', '.join(stats)})" for layer, stats in by.items())


def erased(m: Measurements) -> Decision:
    main = m.on(m.rests_on)
    testable = [c for c in main if c.testable]
    best = max(testable, key=lambda c: c.original_low - c.margin)
    return Decision("erased", [
        f"certified at {_where(testable)}: each interval lies within tolerance of retrain on "
        f"the {m.rests_on} data ({m.n_forget[m.rests_on]} forget samples), where the original is clear of it; e.g. "
        f"{_plain(best, m)}", output_line(m.output) + ": retrain-like (the original is flagged)"]
        + _untestable_lines(m))


RULES: tuple[Callable[[Measurements], Decision | None], ...] = (
    collapsed, not_forgotten, suppressed, overforgotten, too_few, no_positive_control, uncalibrated, not_equivalent,
    unmeasured, output_untested, blocked, erased)


def decide(m: Measurements) -> Decision:
    """The first rule of :data:`RULES` that applies; past the output rules, the evidence starts with
    how the output compares with retrain's."""
    for rule in RULES:
        d = rule(m)
        if d is None:
            continue
        if d.verdict not in ("collapsed", "not_forgotten") and m.n_refs == 2:
            d.evidence.append("(caution) 2 references: the tolerance's t multiplier has 1 degree of freedom, so "
                              "it is very wide; 5 references are recommended")
        if d.verdict not in ("collapsed", "not_forgotten"):
            u, r = m.outputs_unlearned, m.outputs_retrained
            d.evidence.insert(0, f"output accuracy: forget accuracy {u['forget_acc']:.1f}% vs "
                                 f"retrain's {r['forget_acc']:.1f}%, test-retain accuracy "
                                 f"{u['test_retain_acc']:.1f}% vs {r['test_retain_acc']:.1f}%")
        if d.verdict == "suppressed" and _uncalibrated(m):
            d.evidence.append(f"(caution) {UNCALIBRATED}: a retrain of this architecture could differ by more")
        if rule is not blocked:
            d.evidence.extend(_reported_only(m))
        if d.verdict not in ("collapsed", "not_forgotten"):
            d.evidence.extend(_powerless(m))
        if m.utility.get("flagged") and d.verdict != "collapsed":
            u = m.utility
            d.evidence.append(f"utility: {u['loss']:.1f} points of {u['by'].replace('_acc', ' accuracy')} lost against "
                              f"retrain's (budget {u['budget']:g}"
                              + (f", references' spread {u['spread_bound']:.1f}" if u.get("spread_bound") else "")
                              + ")")
        return d
    raise AssertionError("the last rule always decides")  # pragma: no cover


# --- evidence text -----------------------------------------------------------------------------------

def _stat_name(stat: str) -> str:
    return {"delta_auroc": "ΔAUROC", "separability": "separability", "mmd": "MMD²"}[stat]


def _describe(c: Comparison, m: Measurements) -> str:
    r = m.layer(c.data, c.layer)
    what = "the forget samples" if m.sample_level else "the forgotten class"
    if c.stat == "delta_auroc":
        core = (f"ΔAUROC {c.value:+.1f} [{c.low:+.1f}, {c.high:+.1f}] points over retrain "
                f"(tolerance {c.margin:.1f})")
    else:
        core = (f"{_stat_name(c.stat)} {math.exp(c.value):.2f}x retrain's [{math.exp(c.low):.2f}, "
                f"{math.exp(c.high):.2f}] (tolerance {math.exp(c.margin):.2f}x)")
    if c.p_holm < m.alpha:
        direction = "still separates" if c.value > 0 else "separates less than retrain:"
        return (f"{c.layer} ({c.data} data) {direction} {what}: {core}, Holm-adjusted p = {c.p_holm:.2g}, "
                f"CKA to original {r.cka_original:.3f}")
    return f"{c.layer} ({c.data} data): {core}, the original at {_orig(c)}"


def _orig(c: Comparison) -> str:
    if c.stat == "delta_auroc":
        return f"{c.original:+.1f} [{c.original_low:+.1f}, {c.original_high:+.1f}]"
    return f"{math.exp(c.original):.2f}x [{math.exp(c.original_low):.2f}, {math.exp(c.original_high):.2f}]"


def _plain(c: Comparison, m: Measurements) -> str:
    r = m.layer(c.data, c.layer)
    if c.stat == "delta_auroc":
        return (f"{c.layer}: ΔAUROC {c.value:+.1f} [{c.low:+.1f}, {c.high:+.1f}] where the original shows "
                f"{_orig(c)}, CKA to retrain {r.cka_retrain:.3f}")
    return (f"{c.layer}: {_stat_name(c.stat)} {math.exp(c.value):.2f}x retrain's [{math.exp(c.low):.2f}, "
            f"{math.exp(c.high):.2f}] where the original shows {_orig(c)}, CKA to retrain {r.cka_retrain:.3f}")


def _need_for_control(m: Measurements) -> int | None:
    """Rough forget-set size for the original's interval to clear the tolerance at the comparison
    where it comes closest (intervals narrow as 1/sqrt(n)); None when nothing was measured."""
    main = m.on(m.rests_on)
    n = m.n_forget[m.rests_on]
    best = None
    for c in main:
        half = (c.original_high - c.original_low) / 2
        gap = abs(c.original) - c.margin
        if gap > 0 and half > 0 and math.isfinite(half):
            need = int(math.ceil(n * (half / gap) ** 2))
            best = need if best is None else min(best, need)
    return max(best, m.config.min_forget) if best else None


def _reported_only(m: Measurements) -> list[str]:
    """A resurfacing check that is reported, not decided on, still says when it brought the class back."""
    return ["(reported, not decided on) " + _resurface_line(r)
            for r in m.resurfacing.values() if r.applicable and not r.in_verdict and r.resurfaced]


def _powerless(m: Measurements) -> list[str]:
    """A resurfacing check that decides but cannot flag this class: its margin (from the references'
    spread) is at least what the forget accuracy could still rise above the references' level after the
    same attack (100 − their accuracy), so no outcome exceeds it. Said, so that its silence is not read as
    evidence."""
    lines = []
    for r in m.resurfacing.values():
        if not (r.applicable and r.in_verdict and r.margin is not None and r.retrain_forget_acc_after is not None):
            continue
        room = 100.0 - r.retrain_forget_acc_after
        if math.isfinite(r.margin) and r.margin >= room:
            lines.append(f"(no power) {_CHECK_WHAT.get(r.name, r.name)}: its margin ({r.margin:.1f} points, from "
                         f"the references' spread) is at least the {room:.1f} points the forget accuracy could rise "
                         f"above the references' {r.retrain_forget_acc_after:.1f}%, so it cannot flag this "
                         f"forget set; more references narrow it")
    return lines


_CHECK_WHAT = {"bn_recalibration": "re-estimating BatchNorm statistics on retained data",
               "head_refit": "re-fitting the head on frozen features from a few forget examples",
               "head_relearn": "a few SGD steps on the model's own head (body frozen, whitened features)",
               "relearn": "a few SGD steps on a handful of forget examples"}


def _resurface_line(r) -> str:
    what = _CHECK_WHAT.get(r.name, r.name)
    return (f"the forgotten data resurface after {what}: forget accuracy {r.forget_acc_before:.1f}% -> "
            f"{r.forget_acc_after:.1f}% (retrain under the same: {r.retrain_forget_acc_after:.1f}%, "
            f"margin {r.margin:g} points)")
