"""From the measurements to one verdict: an ordered chain of small rules over one record.

:func:`measurements` gathers everything the rules read into a :class:`Measurements` record: the output
metrics and the judged deciding statistics (:class:`~unlearnkit.audit.checks.Check`: every statistic of every
family on every audit data, measured the same way on the unlearned model, the original and each reference,
judged by :func:`unlearnkit.metrics.equivalence.judge`). :func:`decide` applies :data:`RULES` in order; the
first that returns a :class:`Decision` wins:

1. :func:`collapsed`: retained utility destroyed: train-retain or test-retain accuracy more than
   ``collapse_margin`` points below retrain's.
2. :func:`not_forgotten`: forget accuracy more than ``not_forgotten_margin`` points above retrain's, and
   significantly so (one-sided two-proportion z-test at ``confidence``), and that margin beyond the references'
   own upper prediction bound (their seed-to-seed spread; the same as their mean where retrains all read 0 %);
   or the output's confidence on the forget rows is flagged *above* the references' (membership).
3. :func:`suppressed`: a family that looks inside the model (representation, relearning, heads, BatchNorm)
   flags it above the references: the representation keeps the forget data, or they come back under cheap
   tampering; or the output's per-example agreement is flagged (the forget examples ordered as by the
   original, not as by retrains: the original's function behind an output-level change).
4. :func:`overforgotten`: some family flags it *below* the references: the removal itself is detectable.
5. :func:`too_few`: fewer than ``min_forget`` forget samples.
6. :func:`too_few_references`: fewer than 2 references: one reference can flag at the output, never
   certify (nothing says how far retrains of other seeds differ).
7. :func:`unmeasured`: a deciding statistic could not be measured on the unlearned model (relearning diverged).
8. :func:`output_untested`: no output statistic is testable (the original is not far enough from the
   references, relative to their spread, for equivalence at the margin to be shown there); it says how many
   references would make one testable if the values stayed as measured, or that no number would.
9. :func:`inside_untested`: no statistic that looks inside the model is testable (the same).
10. :func:`not_equivalent`: some testable statistic's kept fraction is not shown to lie inside
    (−margin, margin): names it, its interval, and how many references would decide.
11. :func:`distinguishable`: every testable statistic certified, but some informative one (every testable
    statistic, and a few where the original is a little less far: :mod:`unlearnkit.metrics.equivalence`) lies
    beyond the references' prediction bound (Holm, the family's share of ``told_apart_level``, 0.05) by less than
    its margin, or all of them together do (:mod:`unlearnkit.audit.joint`, at ``joint_level``, 0.05), or the MLP
    probe test does (:mod:`unlearnkit.audit.probe_test`, at ``mlp_probe_level``, 0.2; read only where every other
    rule would certify): told apart
    from retrains, so not ``erased`` (a genuine retrain reads so in at most ``told_apart_level`` of audits by the
    first when retrains' values are Gaussian, and in 4-11 % by the second, simulated).
12. :func:`erased`: an intersection-union test: **every** testable statistic of every family, on both audit
    data, certified (its kept fraction's interval inside the margin), at least one at the output and one
    inside; it names what it certifies and what it could not test.

Flags use the references' prediction bounds with Holm's correction within each family at the family's
share of the false-flag budget (``config.BUDGET``): a genuine retrain is flagged in at most 1 −
``confidence`` of audits. ``erased`` is an equivalence claim: a model whose true kept fraction sits at the
margin on any one statistic is certified in at most 1 − ``confidence`` of audits (two one-sided tests,
:mod:`unlearnkit.metrics.equivalence`). The utility axis (:func:`unlearnkit.audit.core.utility_loss`)
qualifies any verdict but ``collapsed``: ``erased · utility −17.7 pts``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from scipy import stats

from ..metrics.equivalence import excess_to_test, references_to_certify, references_to_test, upper_prediction_bound
from .checks import INSIDE, Check
from .config import REFERENCES_UNDER_ATTACK, AuditConfig
from .joint import Joint
from .probe_test import ProbeTest

VERDICTS = ("erased", "suppressed", "overforgotten", "collapsed", "not_forgotten", "inconclusive")
#: CKA (standardised units) to the original at or above which a layer counts as kept from the original,
#: when the references' CKA to the original is below it (said in the evidence).
KEPT_CKA = 0.995


@dataclass(frozen=True)
class Measurements:
    """Everything the rules read. ``outputs_*``: output metrics (retrain: mean of the references);
    ``checks``: every judged deciding statistic; ``kept_layers``: layers whose representation is the
    original's (CKA, said in the evidence)."""

    outputs_unlearned: dict
    outputs_retrained: dict
    checks: tuple[Check, ...]
    n_forget: dict[str, int]
    sample_level: bool
    n_train_forget: int
    n_refs: int
    config: AuditConfig
    utility: dict = field(default_factory=dict)
    kept_layers: tuple[str, ...] = ()
    not_applicable: dict = field(default_factory=dict)  # family/check -> why it did not run
    reference_forget_acc: tuple[float, ...] = ()  # each reference's forget accuracy (percent)
    joint: Joint | None = None  # joint.joint_deviation: the joint told-apart test (None: not run)
    probe: ProbeTest | None = None  # probe_test: the MLP probe's told-apart test (None: not run)

    @property
    def alpha(self) -> float:
        return 1.0 - self.config.confidence

    def flagged(self, side: str, families=None) -> list[Check]:
        return [c for c in self.checks if c.flag == side and (families is None or c.measure.family in families)]

    @property
    def testable(self) -> list[Check]:
        return [c for c in self.checks if c.testable]

    @property
    def informative(self) -> list[Check]:
        return [c for c in self.checks if c.informative]


@dataclass
class Decision:
    verdict: str
    evidence: list[str] = field(default_factory=list)
    n_forget_needed: int | None = None
    references_needed: int | None = None


def measurements(*, outputs_unlearned: dict, outputs_retrained: dict, checks: list[Check], n_forget: dict[str, int],
                 sample_level: bool, n_train_forget: int, n_refs: int, config: AuditConfig, utility: dict | None = None,
                 kept_layers=(), not_applicable: dict | None = None, reference_forget_acc=(),
                 joint: Joint | None = None, probe: ProbeTest | None = None) -> Measurements:
    """The record the rules read."""
    return Measurements(outputs_unlearned, outputs_retrained, tuple(checks), n_forget, sample_level, n_train_forget,
                        n_refs, config, utility or {}, tuple(kept_layers), dict(not_applicable or {}),
                        tuple(float(a) for a in reference_forget_acc), joint, probe)


# --- evidence text -----------------------------------------------------------------------------------

def describe(c: Check) -> str:
    """One check in words: its kept fraction with the interval, the margin, and the references' range."""
    m, r = c.measure, c.result
    refs = [v for v in m.references if math.isfinite(v)]
    rng = f"references {min(refs):.2f} to {max(refs):.2f}" if refs else "references not measured"
    if "unlearned" in m.separated:
        return f"{m.label}: separates the forget rows without overlap where the references do not"
    if r.status != "ok":
        why = {"too_few_references": "fewer than 2 references", "not_finite": "not measured (not finite)",
               "no_spread": "the references do not differ at all", "capped": "a reference or the original is at "
               "the statistic's cap"}.get(r.status, r.status)
        return f"{m.label}: {why}"
    kept = (f"keeps {r.kept:+.2f} of the original's excess [{r.kept_low:+.2f}, {r.kept_high:+.2f}] (margin "
            f"±{r.margin:g})" if math.isfinite(r.kept) else "the original is not above the references")
    return (f"{m.label}: {m.unlearned:.2f} where the original is at {m.original:.2f} and the {rng}; {kept}")


def _flag_line(c: Check) -> str:
    side = "above" if c.flag == "above" else "below"
    return (f"{describe(c)}; {side} the references' prediction bound ({c.result.flag_low:.2f}, "
            f"{c.result.flag_high:.2f}), Holm-adjusted p = {c.p_holm:.2g} within the {c.measure.family} family")


def _families(cs: list[Check]) -> str:
    by: dict[str, list[str]] = {}
    for c in cs:
        m = c.measure
        by.setdefault(m.family, []).append(f"{m.name}{' @' + m.layer if m.layer else ''} ({m.data})")
    return "; ".join(f"{fam}: {', '.join(dict.fromkeys(items))}" for fam, items in by.items())


def certified_layers(m: Measurements) -> list[str]:
    """The layers whose every testable representation statistic is certified, at least one, on every audit
    data."""
    rep = [c for c in m.testable if c.measure.family == "representation"]
    layers = list(dict.fromkeys(c.measure.layer for c in rep))
    return [name for name in layers if all(c.within for c in rep if c.measure.layer == name)]


def untested_lines(m: Measurements) -> list[str]:
    """What could not be tested, per family, compactly."""
    lines = []
    for fam in ("output", *INSIDE):
        cs = [c for c in m.checks if c.measure.family == fam]
        if not cs:
            if fam in m.not_applicable:
                lines.append(f"{fam}: not run ({m.not_applicable[fam]})")
            continue
        reported = [c for c in cs if not c.measure.decides]
        if reported:
            lines.append(f"{fam}: reported only ({reported[0].measure.note})")
            continue
        un = [c for c in cs if not c.testable]
        if un:
            lines.append(f"{fam}: {len(un)} of {len(cs)} statistics cannot be tested here (the original is not far "
                         f"enough from the references, relative to their spread, to show equivalence at the margin"
                         f"), e.g. {un[0].measure.label}")
    if m.kept_layers:
        lines.append(f"kept from the original (CKA >= {KEPT_CKA} where the references' is below): "
                     f"{', '.join(m.kept_layers)}")
    return lines


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
    refs = [a for a in m.reference_forget_acc if math.isfinite(a)]
    bound = upper_prediction_bound(refs, cfg.confidence) if refs else fr  # one reference: its value
    if fu - fr > cfg.not_forgotten_margin and significant and fu - bound > cfg.not_forgotten_margin:
        spread = f", {fu - bound:.1f} beyond the references' spread (bound {bound:.1f}%)" if bound > fr + 0.05 else ""
        return Decision("not_forgotten", [
            f"forget accuracy {fu:.1f}% vs retrain's {fr:.1f}% (+{fu - fr:.1f} points{spread}, margin "
            f"{cfg.not_forgotten_margin:g}): the model still predicts the forget set"])
    flagged = [c for c in m.flagged("above", ("output",)) if c.measure.name == "output confidence"]
    if flagged:
        return Decision("not_forgotten", [_flag_line(c) + ": more confident on the forget set than a retrain "
                                                          "(membership)" for c in flagged])
    return None


def suppressed(m: Measurements) -> Decision | None:
    """A family that looks inside the model flags it above the references, or the output's per-example
    agreement does (its confidence is not above retrain's, but it orders the forget examples as the original
    does, not as retrains do: the original's function behind an output-level change)."""
    flagged = m.flagged("above", INSIDE) + [c for c in m.flagged("above", ("output",))
                                            if c.measure.name == "output agreement"]
    if not flagged:
        return None
    return Decision("suppressed", [_flag_line(c) + (": the forget examples are ordered as by the original, not as "
                                                    "by retrains" if c.measure.family == "output" else "")
                                   for c in sorted(flagged, key=lambda c: c.p_holm)])


def overforgotten(m: Measurements) -> Decision | None:
    """Some family flags the model *below* the references: the removal itself is detectable."""
    flagged = m.flagged("below")
    if not flagged:
        return None
    return Decision("overforgotten", [_flag_line(c) for c in sorted(flagged, key=lambda c: c.p_holm)] + [
        "forgetting beyond what retraining leaves is itself detectable (the Streisand effect): the model is not "
        "indistinguishable from retrain"])


def too_few(m: Measurements) -> Decision | None:
    n, cfg = m.n_train_forget, m.config
    if n >= cfg.min_forget:
        return None
    return Decision("inconclusive", [f"only {n} forget samples (min_forget={cfg.min_forget}): too few to certify "
                                     f"anything (with a handful of rows in ~100 dimensions every model separates "
                                     f"them)"], cfg.min_forget)


def too_few_references(m: Measurements) -> Decision | None:
    if m.n_refs >= 2:
        return None
    return Decision("inconclusive", [
        f"{m.n_refs} retrained reference: how far retrains of other seeds differ from each other is unknown, so "
        f"equivalence to retrain cannot be shown (it can only flag at the output); pass 5 or more "
        f"(--retrained several times, or --references 5)"], references_needed=5)


def unmeasured(m: Measurements) -> Decision | None:
    bad = [c for c in m.checks if c.unmeasured]
    if not bad:
        return None
    return Decision("inconclusive", [f"{c.measure.label} could not be measured on the unlearned model (e.g. relearning "
                                     f"diverged), so erasure is not certified on the strength of it" for c in bad[:3]])


def _need(cs: list[Check]) -> int | None:
    ks = [references_to_certify(c.result) for c in cs]
    ks = [k for k in ks if k is not None]
    return max(ks) if ks else None


def _to_test(cs: list[Check], max_references: int = 64) -> tuple[int | None, str]:
    """How many references would make one of the untested ``cs`` testable if the original's excess and the
    references' spread stayed as measured (the fewest over ``cs``), and a clause that says so; None and why
    not when no number up to ``max_references`` would."""
    need = [(k, c) for c in cs if (k := references_to_test(c.result, max_references)) is not None]
    if need:
        k, c = min(need, key=lambda kc: kc[0])
        return k, (f"about {k} references would make {c.measure.label} testable, if the original's excess and the "
                   f"references' spread stayed as measured")
    gaps = [((r.original - r.center) / r.spread, c) for c in cs
            if (r := c.result).status == "ok" and r.spread > 0]
    if not gaps:
        return None, "more references narrow the interval"
    sd, c = max(gaps, key=lambda g: g[0] / excess_to_test(max_references, margin=g[1].result.margin,
                                                            sides=g[1].result.sides, level=g[1].result.equiv_level))
    need = excess_to_test(max_references, margin=c.result.margin, sides=c.result.sides, level=c.result.equiv_level)
    return None, (f"no number of references up to {max_references} would: the original is {sd:.1f} of the "
                  f"references' standard deviations above them at the closest, {c.measure.label}, where its margin "
                  f"({c.result.margin:g}) needs {need:.1f} with {max_references} references: too little more than a "
                  f"retrain for equivalence to be shown")


def _untested(m: Measurements, inside: bool) -> list[Check] | None:
    """The deciding checks of the output family (``inside`` False) or of those inside the model, when none of
    them is testable; None when one is."""
    cs = [c for c in m.checks if (c.measure.family in INSIDE) == inside and c.measure.decides]
    return None if any(c.testable for c in cs) else cs


def output_untested(m: Measurements) -> Decision | None:
    cs = _untested(m, inside=False)
    if cs is None:
        return None
    need, clause = _to_test(cs)
    lines = ["no output statistic can be tested: the original's outputs on the forget rows are not far enough from "
             "the references' (relative to their spread) to show equivalence at the margin, so the outputs cannot "
             f"show erasure; {clause}"]
    inner = _untested(m, inside=True)
    if inner is not None:  # both must become testable for the audit to decide
        need_in, clause_in = _to_test(inner)
        need = max(need, need_in) if need is not None and need_in is not None else None
        lines.append(f"nothing inside the model can be tested either: {clause_in}")
    return Decision("inconclusive", lines + untested_lines(m), references_needed=need)


def inside_untested(m: Measurements) -> Decision | None:
    cs = _untested(m, inside=True)
    if cs is None:
        return None
    need, clause = _to_test(cs)
    return Decision("inconclusive", [
        "positive control failed: nothing that looks inside the model (representation, relearning, head checks) can "
        f"be tested here, so a model that kept the original's representation could not be caught either; {clause}"]
        + untested_lines(m), references_needed=need)


def _margins(cs: list[Check]) -> list[str]:
    """The margins ``cs`` were judged against, largest first: ``kept_margin``, and ``recovery_margin`` for a
    recovery under relearning or re-fitting."""
    return [f"{v:g}" for v in sorted({c.result.margin for c in cs}, reverse=True)]


def not_equivalent(m: Measurements) -> Decision | None:
    open_ = [c for c in m.testable if not c.within]
    if not open_:
        return None
    worst = max(open_, key=lambda c: max(c.result.kept_high - c.result.margin, -c.result.margin - c.result.kept_low)
                if math.isfinite(c.result.kept_high) else math.inf)
    need = _need(open_) if all(references_to_certify(c.result) for c in open_) else None
    tail = (f"; about {need} references would decide, if the values stayed as measured" if need else
            "; its kept fraction is itself near or beyond the margin: more references would not decide")
    ms = _margins(open_)
    what = f"its margin ({ms[0]})" if len(ms) == 1 else f"their margins ({', '.join(ms)})"
    return Decision("inconclusive", [
        f"not shown to keep less than {what} of the original's excess at "
        f"{len(open_)} of {len(m.testable)} testable statistics ({_families(open_)}); e.g. {describe(worst)}"
        + tail] + untested_lines(m), references_needed=need)


def distinguishable(m: Measurements) -> Decision | None:
    """Certified within the margins, yet told apart from the references: by some informative statistic, beyond their
    prediction bound (Holm, the family's share of ``told_apart_level``) by less than its margin, or jointly
    (:mod:`unlearnkit.audit.joint`: over every informative statistic at once, at ``joint_level``). ``erased`` says
    indistinguishable from retrain, so it is not certified."""
    off = [c for c in m.informative if c.deviates]
    joint = m.joint if m.joint is not None and m.joint.told_apart else None
    probe = m.probe if m.probe is not None and m.probe.told_apart else None
    if not off and joint is None and probe is None:
        return None
    lines = []
    if off:
        worst = min(off, key=lambda c: c.p_holm)
        lines.append(f"told apart from the references at {len(off)} of {len(m.informative)} informative statistics "
                     f"({_families(off)}), though each keeps less than its margin: e.g. {describe(worst)}, "
                     f"{worst.deviates} the references' prediction bound (Holm p = {worst.p_holm:.2g}); erased needs "
                     f"indistinguishable from retrain")
    if joint is not None:
        rms = [max(v, 0.0) ** 1.5 for v in (joint.value, min(joint.references), max(joint.references), joint.bound)]
        lines.append(f"told apart from the references jointly: over {joint.n_checks} informative statistics its "
                     f"standardised deviations' root mean square is {rms[0]:.2f} where each reference's, against "
                     f"the others, is {rms[1]:.2f} to {rms[2]:.2f} (bound {rms[3]:.2f}, p = {joint.p:.2g} at level "
                     f"{joint.level:g}), though each statistic keeps less than its margin; erased needs "
                     f"indistinguishable from retrain")
    if probe is not None:
        lines.append(f"told apart from the references by the MLP probe test: at {probe.layer} a held-out MLP probe "
                     f"finds the forgotten class with log loss {probe.value:.4f}, the references' "
                     f"{min(probe.references):.4f} to {max(probe.references):.4f} (lower: easier to find; p = "
                     f"{probe.p:.2g} at level {probe.level:g}); erased needs indistinguishable from retrain")
    return Decision("inconclusive", lines + untested_lines(m))


def erased(m: Measurements) -> Decision:
    testable = m.testable
    layers = certified_layers(m)
    best = {fam: [c for c in testable if c.measure.family == fam] for fam in ("output", *INSIDE)}
    ms = _margins(testable)
    what = ms[0] if len(ms) == 1 else f"{ms[0]} ({', '.join(ms[1:])} for a recovery under relearning or re-fitting)"
    lines = [f"certified: all {len(testable)} testable statistics keep less than {what} of the "
             f"original's excess over the references (95 % intervals inside the margin): {_families(testable)}"]
    if layers:
        lines.append(f"layers certified: {', '.join(layers)}")
    if m.sample_level and not best["representation"]:
        names = dict.fromkeys("relearning of the forget rows' own labels" if c.measure.family == "relearning" else
                              c.measure.name for c in testable)
        lines.append(f"sample request: certified on {', '.join(names)}; no layer's representation could be tested")
    for cs in best.values():
        if cs:
            lines.append(f"e.g. {describe(max(cs, key=lambda c: abs(c.result.kept)))}")
    if m.n_refs < REFERENCES_UNDER_ATTACK and m.probe is not None:
        lines.append(f"strength: {m.n_refs} references and the MLP probe test; against a party that attacks the audit "
                     f"with retrains of its own, the attack suite got none of its keepers certified at K = 5 with "
                     f"this test, on the digits audits its level was chosen on (docs/audit.md, \"The MLP probe "
                     f"test\"): where that is the threat, {REFERENCES_UNDER_ATTACK} or more references are the "
                     f"stronger evidence (16 on digits-sized data)")
    elif m.n_refs < REFERENCES_UNDER_ATTACK:
        lines.append(f"strength: {m.n_refs} references certify a method that forgets in good faith; against a party "
                     f"that attacks the audit with retrains of its own, the attack suite got a model that keeps the "
                     f"class certified with 5 references and none with {REFERENCES_UNDER_ATTACK} (docs/audit.md, "
                     f"\"How many references\"): where that is the threat, audit with {REFERENCES_UNDER_ATTACK} or "
                     f"more (16 on digits-sized data)")
    return Decision("erased", lines + untested_lines(m))


RULES: tuple[Callable[[Measurements], Decision | None], ...] = (
    collapsed, not_forgotten, suppressed, overforgotten, too_few, too_few_references, unmeasured, output_untested,
    inside_untested, not_equivalent, distinguishable, erased)


def decide(m: Measurements) -> Decision:
    """The first rule of :data:`RULES` that applies; past the output rules, the evidence starts with how the
    output accuracy compares with retrain's."""
    for rule in RULES:
        d = rule(m)
        if d is None:
            continue
        if d.verdict not in ("collapsed", "not_forgotten"):
            u, r = m.outputs_unlearned, m.outputs_retrained
            d.evidence.insert(0, f"output accuracy: forget accuracy {u['forget_acc']:.1f}% vs "
                                 f"retrain's {r['forget_acc']:.1f}%, test-retain accuracy "
                                 f"{u['test_retain_acc']:.1f}% vs {r['test_retain_acc']:.1f}%")
        if m.utility.get("flagged") and d.verdict != "collapsed":
            u = m.utility
            d.evidence.append(f"utility: {u['loss']:.1f} points of {u['by'].replace('_acc', ' accuracy')} lost against "
                              f"retrain's (budget {u['budget']:g}"
                              + (f", references' spread {u['spread_bound']:.1f}" if u.get("spread_bound") else "")
                              + ")")
        return d
    raise AssertionError("the last rule always decides")  # pragma: no cover
