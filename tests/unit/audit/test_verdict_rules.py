"""The verdict's rule chain on constructed measures: each rule, the families' error control, the equivalence."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from unlearnkit.audit import AuditConfig
from unlearnkit.audit.checks import Measure, holm, judge_all
from unlearnkit.audit.verdict import (
    RULES,
    collapsed,
    decide,
    distinguishable,
    erased,
    inside_untested,
    measurements,
    not_equivalent,
    not_forgotten,
    output_untested,
    overforgotten,
    suppressed,
    too_few,
    too_few_references,
    unmeasured,
)
from unlearnkit.errors import UserError

OUT = {"forget_acc": 0.0, "retain_acc": 99.0, "test_retain_acc": 98.0}
REFS = (0.0, 0.06, -0.06, 0.03, -0.03)  # sd 0.047: the original at 1.0 is 21 sd away (testable from 15.6 with 5)


def _measure(family="representation", name="separability", value=0.0, original=1.0, refs=REFS, data="train",
             layer="penultimate", sides="two", **kw):
    return Measure(family, name, data, layer if family == "representation" else None, sides, "u", value, original,
                   tuple(refs), **kw)


def _all_within(value=0.0):
    """One testable measure per family, the unlearned model at ``value`` everywhere."""
    return [_measure("output", "output confidence", value), _measure("representation", "separability", value),
            _measure("relearning", "relearning lr 0.01, 10 steps", value, recovery=True,
                     original=1.0, refs=(0.0, 0.004, 0.002, 0.001, 0.003)),
            _measure("heads", "head re-fit", value, recovery=True, refs=(0.0, 0.004, 0.002, 0.001, 0.003))]


def _m(measures, out_u=OUT, out_r=OUT, n_forget=100, n_refs=5, utility=None, config=AuditConfig()):
    return measurements(outputs_unlearned=out_u, outputs_retrained=out_r, checks=judge_all(measures, config),
                        n_forget={"train": n_forget}, sample_level=False, n_train_forget=n_forget, n_refs=n_refs,
                        config=config, utility=utility)


def test_the_rules_run_in_the_documented_order():
    assert RULES == (collapsed, not_forgotten, suppressed, overforgotten, too_few, too_few_references, unmeasured,
                     output_untested, inside_untested, not_equivalent, distinguishable, erased)


def test_holm_adjusted_p_values_by_hand():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def test_a_model_like_the_references_everywhere_is_erased():
    d = decide(_m(_all_within(0.0)))
    assert d.verdict == "erased"
    assert any("certified" in e for e in d.evidence)


def test_an_erased_verdict_with_fewer_references_than_an_attacked_audit_needs_says_so():
    """Below ``REFERENCES_UNDER_ATTACK`` the certificate names its known limit; from there on it does not."""
    from unlearnkit.audit.verdict import REFERENCES_UNDER_ATTACK

    strength = [e for e in decide(_m(_all_within(0.0), n_refs=5)).evidence if e.startswith("strength:")]
    assert len(strength) == 1 and "5 references" in strength[0] and f"{REFERENCES_UNDER_ATTACK} or more" in strength[0]
    d = decide(_m(_all_within(0.0), n_refs=REFERENCES_UNDER_ATTACK))
    assert d.verdict == "erased" and not any(e.startswith("strength:") for e in d.evidence)


def test_a_model_at_the_original_is_flagged_by_the_family_that_sees_it():
    ms = _all_within(0.0)
    ms[1] = _measure("representation", "separability", 1.0)
    d = decide(_m(ms))
    assert d.verdict == "suppressed" and any("representation family" in e for e in d.evidence)
    ms = _all_within(0.0)
    ms[0] = _measure("output", "output confidence", 1.0)
    assert decide(_m(ms)).verdict == "not_forgotten"
    ms = _all_within(0.0)
    ms[1] = _measure("representation", "separability", -1.0)
    assert decide(_m(ms)).verdict == "overforgotten"


def test_an_output_agreement_flag_reads_suppressed():
    ms = _all_within(0.0) + [_measure("output", "output agreement", 1.0, sides="upper")]
    assert decide(_m(ms)).verdict == "suppressed"


def test_keeping_a_third_of_the_original_is_not_certified_nor_flagged():
    ms = _all_within(0.0)
    # the original at 0.8 (17 sd: testable with 5), the model at 0.3: keeps 0.375, not shown below 0.5
    ms[1] = _measure("representation", "separability", 0.3, original=0.8)
    checks = judge_all(ms, AuditConfig())
    rep = next(c for c in checks if c.measure.family == "representation")
    assert rep.testable and not rep.within
    assert decide(_m(ms)).verdict in ("inconclusive", "suppressed")


def test_the_recovery_margin_is_tighter_than_the_kept_margin():
    refs = (0.0, 0.004, 0.002, 0.001, 0.003)
    kept = _measure("relearning", "relearning lr 0.01, 10 steps", 0.2, recovery=True, refs=refs)
    rep = _measure("representation", "separability", 0.2)
    by = {c.measure.family: c for c in judge_all([kept, rep], AuditConfig())}
    assert not by["relearning"].within and by["representation"].within


def test_the_flag_reads_the_log_odds_where_given_and_must_be_material():
    refs, log_refs = (0.0, 0.004, 0.002, 0.001, 0.003), (-6.0, -5.9, -6.1, -6.05, -5.95)
    m = _measure("relearning", "relearning lr 0.01, 10 steps", 0.3, recovery=True, refs=refs,
                 flag_values=(-0.5, 9.0, log_refs))
    c = judge_all([m], AuditConfig())[0]
    assert c.flag == "above" and not c.within and c.result.flag_high < 0  # the bound is on the log-odds
    assert decide(_m(_all_within(0.0) + [m])).verdict == "suppressed"
    # significant on the log-odds, but a kept fraction of 0.01 is far inside the 0.1 margin: certified, no flag
    small = _measure("relearning", "relearning lr 0.01, 10 steps", 0.012, recovery=True, refs=refs,
                     flag_values=(-4.0, 9.0, log_refs))
    c = judge_all([small], AuditConfig())[0]
    assert c.result.p_above < 1e-4 and c.flag == "" and c.within and c.deviates == "above"


def test_a_model_told_apart_from_the_references_within_the_margin_is_not_erased():
    """``erased`` says indistinguishable from retrain: every testable statistic certified, and none beyond the
    references' prediction bound (Holm), material or not; below on a recovery statistic does not count (less
    recovery is no evidence of keeping; re-estimated BatchNorm there depends on how BatchNorm is parametrised)."""
    refs, log_refs = (0.0, 0.004, 0.002, 0.001, 0.003), (-6.0, -5.9, -6.1, -6.05, -5.95)
    small = _measure("relearning", "relearning lr 0.01, 10 steps", 0.012, recovery=True, refs=refs,
                     flag_values=(-4.0, 9.0, log_refs))
    d = decide(_m(_all_within(0.0) + [small]))
    assert d.verdict == "inconclusive"
    assert any(e.startswith("told apart from the references at 1 of 5 informative statistics (relearning") and
               "above the references' prediction bound" in e for e in d.evidence)
    assert distinguishable(_m(_all_within(0.0))) is None
    bn = _measure("batchnorm", "BatchNorm re-estimated", 0.0, recovery=True, refs=refs,
                  flag_values=(-12.0, 9.0, log_refs))
    c = judge_all([bn], AuditConfig())[0]
    assert c.result.p_below < 1e-4 and c.deviates == "" and c.flag == "" and c.within
    assert c.to_dict()["deviates"] is None
    assert decide(_m(_all_within(0.0) + [bn])).verdict == "erased"
    below = _measure("relearning", "relearning lr 0.01, 10 steps", 0.0, recovery=True, refs=refs,
                     flag_values=(-12.0, 9.0, log_refs))
    assert judge_all([below], AuditConfig())[0].deviates == ""  # recovering less: no evidence of keeping
    sure = _measure("output", "output confidence", -0.8, original=10.0)  # refs 0 ± 0.08: more sure than any
    c = judge_all([sure], AuditConfig())[0]
    assert c.deviates == "below" and c.flag == "" and c.within and c.to_dict()["deviates"] == "below"
    assert decide(_m(_all_within(0.0)[1:] + [sure])).verdict == "inconclusive"


def test_a_statistic_that_does_not_flag_still_must_certify():
    # relearning at the sweep's longest budget: a genuine retrain may take off there at random (mnist5k, 0.74
    # where five references read 0.11-0.14), so it certifies but never flags, and leaves Holm's family
    refs, log_refs = (0.11, 0.12, 0.14, 0.13, 0.12), (-2.1, -2.0, -1.8, -1.9, -2.0)
    took_off = dict(recovery=True, refs=refs, original=0.99, flag_values=(1.05, 4.6, log_refs))
    flagging = judge_all([_measure("relearning", "relearning lr 0.01, 40 steps", 0.74, **took_off)], AuditConfig())[0]
    assert flagging.flag == "above"
    quiet = judge_all([_measure("relearning", "relearning lr 0.01, 40 steps", 0.74, flags=False, **took_off)],
                      AuditConfig())[0]
    assert quiet.flag == "" and quiet.p_holm == 1.0 and quiet.testable and not quiet.within
    assert quiet.to_dict()["can_flag"] is False and flagging.to_dict()["can_flag"] is True  # audit.json says so
    d = decide(_m(_all_within(0.0) + [quiet.measure]))
    assert d.verdict == "inconclusive" and any("not shown to keep less than its margin (0.1)" in e for e in d.evidence)
    d = decide(_m(_all_within(0.0) + [replace(quiet.measure, unlearned=0.12)]))
    assert d.verdict == "erased" and any(e.startswith("certified: all 5 testable statistics keep less than 0.5 (0.1 "
                                                      "for a recovery") for e in d.evidence)


def test_relearning_flags_everywhere_but_the_longest_budget():
    from unlearnkit.audit.relearning import Draw, RelearnPlan, flagging_budgets

    def plan(sweep):
        return RelearnPlan((Draw(np.arange(2), np.arange(2), np.arange(2, 4)),), np.zeros(0, dtype=np.int64),
                           sweep, 0)

    assert flagging_budgets(plan(((0.01, (5, 10, 20, 40)), (0.005, (10, 20, 40))))) == {5, 10, 20}
    assert flagging_budgets(plan(((0.01, (10,)),))) == {10}


def test_untestable_statistics_never_decide_erased_alone():
    far_refs = (0.0, 0.4, -0.4, 0.2, -0.2)  # the original 1.0 is only 3.2 sd away: cannot test
    ms = [_measure("output", "output confidence", 0.0), _measure("representation", "separability", 0.9,
                                                                 refs=far_refs)]
    d = decide(_m(ms))
    assert d.verdict == "inconclusive" and "positive control" in d.evidence[1]
    ms = [_measure("output", "output confidence", 0.0, refs=far_refs), _measure("representation")]
    assert decide(_m(ms)).verdict == "inconclusive"


def test_an_untested_audit_says_how_many_references_would_test_it():
    from unlearnkit.metrics.equivalence import judge

    mid_refs = (0.0, 0.1, -0.1, 0.05, -0.05)  # sd 0.079: the original at 0.8 is 10.1 sd away, untestable with 5
    ms = [_measure("output", "output confidence", 0.0, original=0.8, refs=mid_refs), _measure("representation")]
    d = decide(_m(ms))
    assert d.verdict == "inconclusive" and d.references_needed is not None and d.references_needed > 5
    assert f"about {d.references_needed} references would make output confidence (train data) testable" in \
        d.evidence[1]
    sd = float(np.std(mid_refs, ddof=1))
    more = list(np.linspace(-1, 1, d.references_needed))
    more = [v / float(np.std(more, ddof=1)) * sd for v in more]
    assert judge(0.0, 0.8, more, margin=AuditConfig().kept_margin).testable
    # 3.2 sd: no number of references would; both families untested: the inside family says so too
    far_refs = (0.0, 0.4, -0.4, 0.2, -0.2)
    ms = [_measure("output", "output confidence", 0.0, refs=far_refs),
          _measure("representation", "separability", 0.0, refs=far_refs)]
    d = decide(_m(ms))
    assert d.verdict == "inconclusive" and d.references_needed is None
    assert "no number of references up to 64 would: the original is 3.2 of the references' standard deviations " \
        "above them at the closest, output confidence (train data), where its margin (0.5) needs 9.1 with 64 " \
        "references" in d.evidence[1]
    assert d.evidence[2].startswith("nothing inside the model can be tested either: no number of references")


def test_one_reference_never_certifies():
    ms = [_measure(f, n, 0.0, refs=(0.0,)) for f, n in (("output", "output confidence"),
                                                         ("representation", "separability"))]
    d = decide(_m(ms, n_refs=1))
    assert d.verdict == "inconclusive" and d.references_needed == 5


def test_a_measure_the_unlearned_model_could_not_give_is_unmeasured():
    ms = _all_within(0.0) + [_measure("relearning", "relearning lr 0.01, 40 steps", math.nan, recovery=True,
                                      refs=(0.0, 0.004, 0.002, 0.001, 0.003))]
    d = decide(_m(ms))
    assert d.verdict == "inconclusive" and "could not be measured" in " ".join(d.evidence)


def test_a_reported_measure_does_not_decide():
    ms = _all_within(0.0) + [_measure("relearning", "relearning lr 0.01, 10 steps", 1.0, recovery=True,
                                      refs=(0.0, 0.004, 0.002, 0.001, 0.003), decides=False)]
    assert decide(_m(ms)).verdict == "erased"


def test_a_separated_unlearned_model_is_flagged_and_a_separated_reference_untestable():
    m = _measure(value=math.inf, separated=("unlearned",))
    c = judge_all([m], AuditConfig())[0]
    assert c.flag == "above" and c.p_holm == 0.0
    m = _measure(value=0.0, refs=(0.0, math.inf, 0.1, 0.2, 0.1), separated=("reference",))
    c = judge_all([m], AuditConfig())[0]
    assert not c.testable and c.flag == ""


def test_output_rules_come_first():
    ms = _all_within(0.0)
    assert decide(_m(ms, out_u={**OUT, "forget_acc": 90.0})).verdict == "not_forgotten"
    assert decide(_m(ms, out_u={**OUT, "retain_acc": 50.0})).verdict == "collapsed"


def test_too_few_forget_samples():
    assert decide(_m(_all_within(0.0), n_forget=5)).verdict == "inconclusive"


def test_not_equivalent_names_the_statistic_and_how_many_references_would_decide():
    ms = _all_within(0.0)
    ms[1] = _measure("representation", "separability", 0.25, refs=(0.0, 0.1, -0.1, 0.05, -0.05))
    d = decide(_m(ms))
    if d.verdict == "inconclusive":
        assert "separability" in " ".join(d.evidence)


def test_a_family_tells_a_genuine_retrain_apart_at_most_at_its_share():
    """Simulated: 24 correlated comparisons in one family (a layer's statistics on both audit data), K = 5
    Gaussian references and a genuine retrain drawn afresh each trial: Holm at the family's share (1/4) of
    ``told_apart_level`` (0.2) tells it apart (material or not) at most 5 % of the time, and at the family's share
    of the flag's budget (5 %, the default since the joint test) at most 1.25 % (+ Monte Carlo error)."""
    rng = np.random.default_rng(0)
    cfgs = {"default": AuditConfig(told_apart_level=0.2), "flag level": AuditConfig(told_apart_level=0.05)}
    n, rho, trials = 24, 0.5, 1500
    told = dict.fromkeys(cfgs, 0)
    cov = np.full((n, n), rho) + (1 - rho) * np.eye(n)
    for _ in range(trials):
        draws = rng.multivariate_normal(np.zeros(n), cov, size=6)
        ms = [_measure("relearning", f"c{j}", draws[5, j], original=20.0, refs=draws[:5, j]) for j in range(n)]
        for name, cfg in cfgs.items():
            told[name] += any(c.deviates for c in judge_all(ms, cfg))  # told apart (a flag is also material)
    assert told["default"] / trials <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / trials)
    assert told["flag level"] / trials <= 0.0125 + 3 * math.sqrt(0.0125 * 0.9875 / trials)
    assert told["flag level"] <= told["default"]


def test_the_told_apart_level_is_its_own_and_never_below_the_flags():
    """A deviation at Holm p between the flag's level and the told-apart level is told apart, not flagged; the
    level cannot be set below the flag's (a flag would then not be told apart)."""
    refs = (0.0, 0.1, -0.1, 0.05, -0.05)
    ms = [_measure("output", "output confidence", u, original=10.0, refs=refs) for u in (0.42, 0.0)]
    cs = judge_all(ms, AuditConfig(told_apart_level=0.2))
    p = cs[0].p_holm
    assert 0.00625 < p < 0.025 and cs[0].deviates == "above" and cs[0].flag == ""  # share 1/8 of 0.05 / 0.2
    assert judge_all(ms, AuditConfig())[0].deviates == ""  # the default level is the flag's (the joint test added)
    for bad in (0.01, 1.0, float("nan")):
        with pytest.raises(UserError, match="told_apart_level"):
            AuditConfig(told_apart_level=bad)
    # left unset it follows the flag's level, so another confidence is not refused (0.05 would be below 0.1)
    assert AuditConfig().told_apart_level == 0.05
    assert AuditConfig(confidence=0.9).told_apart_level == pytest.approx(0.1)


def test_the_utility_axis_qualifies_the_verdict_line():
    d = decide(_m(_all_within(0.0), utility={"flagged": True, "loss": 17.7, "by": "retain_acc", "budget": 2.0,
                                             "spread_bound": 1.0}))
    assert d.verdict == "erased" and any("utility: 17.7 points" in e for e in d.evidence)


def test_a_sample_request_certified_without_the_representation_says_what_it_rests_on():
    config = AuditConfig()
    ms = [m for m in _all_within() if m.family != "representation"]
    ms.append(_measure("output", "output membership", 0.0, sides="upper"))
    rec = measurements(outputs_unlearned=OUT, outputs_retrained=OUT, checks=judge_all(ms, config),
                       n_forget={"train": 60}, sample_level=True, n_train_forget=60, n_refs=5, config=config)
    d = decide(rec)
    assert d.verdict == "erased"
    line = next(e for e in d.evidence if e.startswith("sample request:"))
    assert "relearning of the forget rows' own labels" in line and "output membership" in line
    assert "no layer's representation could be tested" in line
    # a class request, or a sample request whose representation was tested, carries no such line
    assert not any(e.startswith("sample request:") for e in decide(_m(_all_within())).evidence)


def test_the_report_says_told_apart_where_a_certified_check_lies_beyond_the_bound():
    from unlearnkit.audit.tables import check_state

    refs, log_refs = (0.0, 0.004, 0.002, 0.001, 0.003), (-6.0, -5.9, -6.1, -6.05, -5.95)
    small = _measure("relearning", "relearning lr 0.01, 10 steps", 0.012, recovery=True, refs=refs,
                     flag_values=(-4.0, 9.0, log_refs))
    within = _measure("relearning", "relearning lr 0.01, 10 steps", 0.002, recovery=True, refs=refs,
                      flag_values=(-6.0, 9.0, log_refs))
    told, quiet = (judge_all([m], AuditConfig())[0].to_dict() for m in (small, within))
    assert check_state(told) == "told apart above" and check_state(quiet) == "certified"
