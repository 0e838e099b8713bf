"""The output membership test (metrics/output_test.py) on constructed φ values."""
import json
import math

import numpy as np
import pytest
from scipy import stats

from unlearnkit.metrics.output_test import OutputTest, output_test, output_test_from_logits, references_needed

REFS = np.array([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, 3.0, 2.0], [2.0, 0.0, 1.0, 4.0]])
U = np.array([1.0, 2.0, 2.0, 3.0])
ORIG = np.array([5.0, 6.0, 7.0, 8.0])


def _loo_mean_z(model, refs, sigma):
    """T1 by the definition, example by example: mean over r of mean_i (φ(i) − μ_i(R \\ {r})) / σ."""
    k, n = refs.shape
    per_set = []
    for r in range(k):
        others = [refs[j] for j in range(k) if j != r]
        z = [(model[i] - sum(o[i] for o in others) / len(others)) / sigma for i in range(n)]
        per_set.append(sum(z) / n)
    return sum(per_set) / k


def test_hand_computed_k3():
    res = output_test(U, REFS, ORIG, level=0.1)
    # per-example sums of squares about the example's mean: 2, 2/3, 2, 2 -> σ² = (20/3) / (4 · 2)
    sigma = math.sqrt(5.0 / 6.0)
    assert res.status == "ok" and res.num_references == 3 and res.num_examples == 4
    assert res.sigma == pytest.approx(sigma)
    t1 = res.mean_z
    # model-level means: refs 1.5, 1.75, 1.75, u 2: N = (-0.25, 0.125, 0.125) / σ, A = (2 - 5/3) / σ
    assert t1.null == pytest.approx((-0.25 / sigma, 0.125 / sigma, 0.125 / sigma))
    assert t1.value == pytest.approx(1.0 / 3.0 / sigma)
    assert t1.value == pytest.approx(_loo_mean_z(U, REFS, sigma))
    assert t1.original == pytest.approx(_loo_mean_z(ORIG, REFS, sigma))
    others_mean = [(REFS.sum(axis=0) - REFS[r]) / 2 for r in range(3)]
    assert t1.null == pytest.approx([float(np.mean(REFS[r] - others_mean[r])) / sigma for r in range(3)])
    # bound: t_{2, 1 - 0.05/2} · s · sqrt(1 + 1/3), s = sd of the refs' means (1/sqrt 48) in σ units
    s = 1.0 / math.sqrt(48.0) / sigma
    half = stats.t.ppf(1 - 0.025, 2) * s * math.sqrt(4.0 / 3.0)
    assert (t1.lower, t1.upper) == pytest.approx((-half, half))
    assert t1.alpha == pytest.approx(0.05)
    assert t1.p == pytest.approx(2 * stats.t.sf((1.0 / 3.0 / sigma) / (s * math.sqrt(4.0 / 3.0)), 2))
    # T2 against all three references: mean z² / (1 + 1/3), flagged above t²_{2, 1 - 0.025}
    mu = REFS.mean(axis=0)
    ratio = np.mean(((U - mu) / sigma) ** 2) / (4.0 / 3.0)
    t2 = res.log_var_ratio
    assert t2.value == pytest.approx(math.log(ratio))
    assert t2.upper == pytest.approx(2 * math.log(stats.t.ppf(1 - 0.025, 2)))
    assert t2.p == pytest.approx(stats.f.sf(ratio, 1, 2))
    assert t2.null and len(t2.null) == 3
    assert not t1.flagged and not t2.flagged
    assert t1.original_flagged == (abs(t1.original) > half)
    assert res.control and res.decision == "within"


def _refs(k=5, n=60, seed=0):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=n)
    return (rng.normal(0, 3, n) + rng.normal(size=(k, 1)) + rng.normal(0, 0.5, (k, 1)) * g
            + rng.normal(size=(k, n)))


def _flat(d):
    d = dict(d)
    for key in ("mean_z", "log_var_ratio"):
        if d[key] is not None:
            d[key] = {**d[key], "null": sorted(d[key]["null"])}
    return d


def test_permuting_references_or_examples_changes_nothing():
    refs = _refs()
    u, orig = refs.mean(axis=0) + 0.3, refs.mean(axis=0) + 8.0
    base = _flat(output_test(u, refs, orig).to_dict())
    perm_refs = _flat(output_test(u, refs[[3, 0, 4, 2, 1]], orig).to_dict())
    cols = np.random.default_rng(1).permutation(refs.shape[1])
    perm_cols = _flat(output_test(u[cols], refs[:, cols], orig[cols]).to_dict())
    for other in (perm_refs, perm_cols):
        for key in ("status", "decision", "control", "references_for_power"):
            assert other[key] == base[key]
        for agg in ("mean_z", "log_var_ratio"):
            for field, v in base[agg].items():
                if isinstance(v, (str, bool)) or v is None:
                    assert other[agg][field] == v, (agg, field)
                else:
                    assert other[agg][field] == pytest.approx(v, rel=1e-9, abs=1e-12), (agg, field)


def test_reference_mean_is_within_and_shifts_are_flagged_by_direction():
    refs = _refs()
    mean = refs.mean(axis=0)
    orig = mean + 10.0
    res = output_test(mean, refs, orig)
    assert res.status == "ok" and res.control and res.decision == "within"
    assert res.mean_z.value == pytest.approx(0.0, abs=1e-9)
    assert output_test(mean + 10.0, refs, orig).decision == "above"
    assert output_test(mean - 10.0, refs, orig).decision == "below"


def test_per_example_departure_that_cancels_in_the_mean_is_flagged_by_t2():
    refs = _refs(k=8, n=200)
    mean = refs.mean(axis=0)
    u = mean + 30.0 * np.where(np.arange(200) % 2 == 0, 1.0, -1.0)   # mean deviation 0
    res = output_test(u, refs, mean + 10.0)
    assert not res.mean_z.flagged and res.log_var_ratio.flagged
    assert res.decision in ("above", "below")


def test_too_few_references():
    for k in (0, 1):
        res = output_test(U, REFS[:k], ORIG)
        assert (res.status, res.decision, res.control) == ("too_few_references", "untested", False)
        assert res.mean_z is None and res.num_references == k


def test_non_finite_or_constant_references_are_degenerate():
    for bad in (np.inf, -np.inf, np.nan):
        u = U.copy()
        u[1] = bad
        assert (output_test(u, REFS, ORIG).status, output_test(u, REFS, ORIG).decision) == ("degenerate", "untested")
        r = REFS.copy()
        r[2, 0] = bad
        assert output_test(U, r, ORIG).status == "degenerate"
    same = np.repeat(U[None], 3, axis=0)
    assert output_test(U + 1, same, ORIG).status == "degenerate"            # σ = 0
    flat_means = np.array([[0.0, 2.0], [2.0, 0.0], [1.0, 1.0]])            # σ > 0, every mean the same
    assert output_test(np.array([5.0, 5.0]), flat_means, np.array([9.0, 9.0])).decision == "untested"


def test_inf_logits_give_degenerate_not_a_crash():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(12, 4))
    y = rng.integers(0, 4, 12)
    refs = [logits + rng.normal(size=logits.shape) for _ in range(3)]
    bad = logits.copy()
    bad[3, y[3]] = np.inf
    res = output_test_from_logits(bad, refs, logits * 4, y)
    assert (res.status, res.decision) == ("degenerate", "untested")
    json.dumps(res.to_dict(), allow_nan=False)


def test_logits_shifted_per_row_change_nothing():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(30, 5))
    y = rng.integers(0, 5, 30)
    refs = [logits + rng.normal(size=logits.shape) for _ in range(4)]
    a = output_test_from_logits(logits, refs, logits * 5, y)
    b = output_test_from_logits(logits + rng.normal(size=(30, 1)) * 7, refs, logits * 5, y)
    assert a.mean_z.value == pytest.approx(b.mean_z.value) and a.decision == b.decision


def test_no_power_keeps_flags_but_never_reads_within():
    refs = _refs()
    mean = refs.mean(axis=0)
    res = output_test(mean, refs, mean)                  # the original looks like a retrain
    assert (res.status, res.control, res.decision) == ("no_power", False, "untested")
    assert output_test(mean + 10.0, refs, mean).decision == "above"


def test_references_needed():
    assert references_needed(100.0, 1.0, 0.05) == 2
    assert references_needed(1.0, 1.0, 0.05) is None                    # under the normal quantile 1.96
    k = references_needed(3.0, 1.0, 0.05)
    assert stats.t.ppf(0.975, k - 1) * math.sqrt(1 + 1 / k) < 3.0 <= stats.t.ppf(0.975, k - 2) * math.sqrt(
        1 + 1 / (k - 1))
    assert references_needed(math.nan, 1.0, 0.05) is None
    refs = _refs()
    res = output_test(refs.mean(axis=0), refs, refs.mean(axis=0) + 10.0)
    assert res.control and res.references_for_power <= res.num_references


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="level"):
        output_test(U, REFS, ORIG, level=1.5)
    with pytest.raises(ValueError, match="same forget examples"):
        output_test(U[:3], REFS, ORIG)
    with pytest.raises(ValueError, match="no forget examples"):
        output_test(U[:0], REFS[:, :0], ORIG[:0])


def test_to_dict_is_json_without_nan():
    res = output_test(U, REFS[:1], ORIG)
    assert isinstance(res, OutputTest)
    text = json.dumps(res.to_dict(), allow_nan=False)
    assert json.loads(text)["sigma"] is None
