"""The joint told-apart test (``audit/joint.py``): its statistic by hand, its error rate simulated with references
drawn afresh, its power against a model a little beyond the references everywhere, and its place in the verdict."""
from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from unlearnkit.audit import AuditConfig
from unlearnkit.audit.checks import Measure, judge_all
from unlearnkit.audit.joint import CLIP, joint_deviation, joint_deviations
from unlearnkit.audit.verdict import decide, measurements
from unlearnkit.errors import UserError

OUT = {"forget_acc": 0.0, "retain_acc": 99.0, "test_retain_acc": 98.0}


def _measure(family, name, value, refs, original=20.0, recovery=False):
    layer = "penultimate" if family == "representation" else None
    return Measure(family, name, "train", layer, "two", "u", value, original, tuple(refs), recovery=recovery)


def _by_hand(rows, recovery):
    """The module docstring's definition with the standard library, model by model."""
    out = []
    for i in range(len(rows[0])):
        zs = []
        for row, rec in zip(rows, recovery):
            others = row[:i] + row[i + 1:]
            z = (row[i] - statistics.mean(others)) / statistics.stdev(others)
            z = max(-CLIP, min(CLIP, z))
            zs.append(max(z, 0.0) if rec else z)
        out.append((sum(z * z for z in zs) / len(zs)) ** (1 / 3))
    return out


def test_joint_deviation_by_hand():
    rows = [[0.15, 0.0, 0.2, -0.1, 0.1], [5.0, 1.0, 1.2, 0.8, 1.1], [0.05, 0.3, 0.1, 0.2, 0.25]]
    recovery = [False, False, True]  # the third: below the others, so only z+ = 0 counts for the audited model
    got = joint_deviations(np.array(rows), np.array(recovery))
    assert got == pytest.approx(_by_hand(rows, recovery), rel=1e-12)
    # the second row's audited value is 33 sd above the others: clipped to 4
    z0 = [(0.15 - 0.05) / statistics.stdev([0.0, 0.2, -0.1, 0.1]), CLIP, 0.0]
    assert got[0] == pytest.approx((sum(z * z for z in z0) / 3) ** (1 / 3), rel=1e-12)


def test_the_joint_test_reads_testable_statistics_and_needs_three_references():
    refs = (0.0, 0.1, -0.1, 0.05, -0.05)
    ms = [_measure("representation", f"s{j}", 0.02 * j, refs) for j in range(4)]
    ms.append(_measure("representation", "untestable", 9.0, refs, original=0.2))  # not testable: not read
    j = joint_deviation(judge_all(ms, AuditConfig()), 0.05)
    assert j.n_checks == 4 and len(j.references) == 5 and j.level == 0.05
    assert j.value == pytest.approx(joint_deviations(np.array([[m.unlearned, *m.references] for m in ms[:4]]),
                                                     np.zeros(4, bool))[0])
    assert joint_deviation(judge_all([_measure("output", "c", 0.0, (0.0, 0.1))], AuditConfig()), 0.05) is None


def _simulate(k, rho, trials, shift=0.0, tail=None, seed=0):
    """Told apart jointly (and, beside it, by the per-statistic rule at 0.05), 24 statistics in two families
    with equicorrelation ``rho``, K references and a model drawn afresh each trial; the model ``shift`` sd
    towards the original on every statistic."""
    rng = np.random.default_rng(seed)
    n = 24
    joint = per_stat = 0
    cfg = AuditConfig()
    for _ in range(trials):
        x = math.sqrt(rho) * rng.standard_normal((1, k + 1)) + math.sqrt(1 - rho) * rng.standard_normal((n, k + 1))
        if tail:
            x = x / np.sqrt(rng.chisquare(tail, size=(1, k + 1)) / tail)
        x[:, 0] += shift
        ms = [_measure("representation" if j % 2 else "output", f"s{j}", x[j, 0], x[j, 1:], original=60.0)
              for j in range(n)]  # the original far enough for every statistic to be testable
        checks = judge_all(ms, cfg)
        joint += joint_deviation(checks, cfg.joint_level).told_apart
        per_stat += any(c.deviates for c in checks)
    return joint / trials, per_stat / trials


@pytest.mark.parametrize("k,rho,tail", [(5, 0.0, None), (5, 0.5, None), (5, 0.9, None), (8, 0.5, 3)])
def test_a_genuine_retrain_is_told_apart_jointly_near_the_level(k, rho, tail):
    """Measured (this seed, 1500 trials): 5.6-10.6 % against the level's 5 % (the K + 1 joint deviations share
    their references, and with correlated statistics the cube root of a mean of squares is still skewed right):
    the bound asserted is 14 %, a rate the simulation's noise (0.8 points) does not reach from the measured
    ones."""
    rate, _ = _simulate(k, rho, 1500, tail=tail)
    assert rate <= 0.14


def test_a_model_a_little_beyond_the_references_everywhere_is_told_apart_jointly_not_one_by_one():
    """Two prediction standard deviations towards the original on each of 24 statistics (correlation 0.5, K = 5):
    the per-statistic rule (Holm at the family's share of 0.05) rarely tells it apart; the joint test mostly
    does (the attack suite's ``hardened`` models sit there, docs/audit.md)."""
    joint, per_stat = _simulate(5, 0.5, 400, shift=2.0 * math.sqrt(1 + 1 / 5), seed=1)
    assert joint > 0.5 and per_stat < 0.35 and joint > per_stat + 0.2


def test_told_apart_jointly_is_inconclusive_and_says_so():
    refs = (0.0, 0.1, -0.1, 0.05, -0.05)
    sd = statistics.stdev(refs)
    ms = [_measure("output", "output confidence", 0.0, refs)]
    # each statistic's references in another order, so that no reference is extreme on every one
    ms += [_measure("representation", f"s{j}", 2.5 * sd, refs[j % 5:] + refs[:j % 5]) for j in range(10)]
    cfg = AuditConfig()
    checks = judge_all(ms, cfg)
    assert all(c.within for c in checks) and not any(c.deviates for c in checks)  # each statistic passes

    def verdict(joint):
        return decide(measurements(outputs_unlearned=OUT, outputs_retrained=OUT, checks=checks,
                                   n_forget={"train": 100}, sample_level=False, n_train_forget=100, n_refs=5,
                                   config=cfg, joint=joint))

    j = joint_deviation(checks, cfg.joint_level)
    assert j.told_apart
    d = verdict(j)
    assert d.verdict == "inconclusive" and any("told apart from the references jointly" in e for e in d.evidence)
    assert verdict(None).verdict == "erased"  # the same checks without the joint test


@pytest.mark.parametrize("bad", [0.0, 0.6, float("nan")])
def test_joint_level_is_validated(bad):
    with pytest.raises(UserError, match="joint_level"):
        AuditConfig(joint_level=bad)
