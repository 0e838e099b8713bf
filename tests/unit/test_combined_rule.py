"""``benchmarks/combined_rule.py``: audits judged again from their kept measures under each rule, counted by
hand-made rows (a model a little beyond the references everywhere: certified one statistic at a time, told apart
jointly), plain or gzipped."""
from __future__ import annotations

import gzip
import json
import statistics
from dataclasses import asdict

import pytest
from bench_modules import benchmark_module

from unlearnkit.audit.checks import Measure

REFS = (0.0, 0.1, -0.1, 0.05, -0.05)


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("combined_rule")


def _row(seed, model, shift, verdict="erased"):
    """An audit's kept measures: the output's confidence at the references' centre, ten representation statistics
    ``shift`` references' standard deviations above them (each statistic's references in another order)."""
    sd = statistics.stdev(REFS)
    ms = [Measure("output", "output confidence", "train", None, "two", "u", 0.0, 20.0, REFS)]
    ms += [Measure("representation", f"s{j}", "train", "penultimate", "two", "u", shift * sd, 20.0,
                   REFS[j % 5:] + REFS[:j % 5]) for j in range(10)]
    return {"seed": seed, "k": 5, "model": model, "audit_seed": 1, "verdict": verdict,
            "verdict_at": {"0.05": verdict, "0.2": verdict}, "measures": [asdict(m) for m in ms]}


def test_a_model_beyond_the_references_everywhere_is_certified_per_statistic_not_jointly(bench):
    keeper, genuine = _row(0, "hardened", 2.5), _row(0, "retrain100", 0.0)
    for level in (0.05, 0.2):
        assert bench.erased_under(keeper, level, joint=False)
        assert not bench.erased_under(keeper, level, joint=True)
        assert bench.erased_under(genuine, level, joint=True)
    # output-level verdicts of the audit as run are kept
    assert not bench.erased_under(_row(0, "retrain100", 0.0, verdict="not_forgotten"), 0.05, joint=True)


def test_table_counts_keepers_others_and_genuine_retrains(bench, tmp_path):
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"rows": [
        {"seed": 0, "family": "hardened", "pool_at_or_below": 0, "keeps_pool": False},
        {"seed": 0, "family": "hardened_keep3", "pool_at_or_below": 5, "keeps_pool": False}]}))
    run = tmp_path / "run.json.gz"  # gzipped, as the committed captures
    rows = [_row(0, "hardened", 2.5), _row(0, "hardened_keep3", 0.0), _row(0, "retrain100", 0.0)]
    run.write_bytes(gzip.compress(json.dumps({"rows": rows}).encode()))
    lines = bench.table([str(run)], [str(pool)])
    assert "| 5 | per-statistic 0.2 | 1/1 [2.5, 100.0 %] | 1/1 [2.5, 100.0 %] | 1/1 [2.5, 100.0 %] |" in lines
    assert "| 5 | 0.05 + joint, Student t (the default) | 0/1 [0.0, 97.5 %] | 1/1 [2.5, 100.0 %] | " \
        "1/1 [2.5, 100.0 %] |" in lines
    # no pool: the rows' own ground truth (keeps_class) says who keeps
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"rows": [dict(_row(1, "hardened", 2.5), keeps_class=True),
                                          dict(_row(1, "masked", 0.0), keeps_class=False)]}))
    lines = bench.table([str(plain)], [])
    assert "| 5 | per-statistic 0.2 | 1/1 [2.5, 100.0 %] | 1/1 [2.5, 100.0 %] | - |" in lines
    unknown = tmp_path / "other.json"
    unknown.write_text(json.dumps({"rows": [_row(1, "hardened", 0.0)]}))
    with pytest.raises(SystemExit, match="seed 1 hardened is in no --pool-json"):
        bench.table([str(unknown)], [str(pool)])


def test_the_student_t_testability_requires_fewer_statistics_of_a_genuine_retrain(bench):
    """A statistic with the original 13 reference sds out is required under the Gaussian testability (an
    open equivalence for a retrain 4.5 sds out: not erased) but only informative under Student t (erased: 4.5 sds is
    not told apart by Holm's rule at its family's share, nor jointly over two statistics)."""
    sd = statistics.stdev(REFS)
    row = _row(0, "retrain100", 0.0)
    row["measures"][1] = asdict(Measure("representation", "s0", "train", "penultimate", "two", "u", 4.5 * sd,
                                        13.0 * sd, REFS))
    assert not bench.erased_under(row, 0.05, joint=True, z_power=bench.Z_POWER)
    assert bench.erased_under(row, 0.05, joint=True)


def test_the_directional_variant_tells_apart_a_small_shift_the_mean_square_does_not(bench):
    """A model half to one reference sd above the references on all ten statistics: the joint test's mean square
    lets it through, the mean of the signed z's (every statistic towards the original) does not; a genuine retrain
    at their centre passes both."""
    for shift in (0.5, 1.0):
        row = _row(0, "hardened", shift)
        assert bench.erased_under(row, 0.05, joint=True)
        assert not bench.erased_under(row, 0.05, joint=True, directional=True)
    assert bench.erased_under(_row(0, "retrain100", 0.0), 0.05, joint=True, directional=True)
    assert "the default + directional 0.05 (not adopted)" in bench.RULES


def test_joint_p_is_the_level_at_which_the_default_stops_certifying(bench, tmp_path):
    """``joint_p`` (the sweep's reading): None where the default rule without its joint test does not certify, else
    the joint test's p, so that the default at level L certifies exactly when p >= L."""
    keeper, genuine = _row(0, "hardened", 2.5), _row(0, "retrain100", 0.0)
    assert bench.joint_p(_row(0, "retrain100", 0.0, verdict="not_forgotten")) is None
    pk, pg = bench.joint_p(keeper), bench.joint_p(genuine)
    assert pk < 0.05 <= pg
    for row, p in ((keeper, pk), (genuine, pg)):
        assert bench.erased_under(row, 0.05, joint=True) == (p >= 0.05)
    pool = tmp_path / "pool.json"
    pool.write_text(json.dumps({"rows": [{"seed": 0, "family": "hardened", "pool_at_or_below": 0,
                                          "keeps_pool": False}]}))
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"rows": [keeper, genuine]}))
    lines = bench.sweep([str(run)], [str(pool)], [pk / 2, (pk + pg) / 2])
    assert lines[2] == f"| 5 | {pk / 2:g} | 1/1 [2.5, 100.0 %] | - | 1/1 [2.5, 100.0 %] |"  # below both: both
    assert lines[3] == f"| 5 | {(pk + pg) / 2:g} | 0/1 [0.0, 97.5 %] | - | 1/1 [2.5, 100.0 %] |"  # the genuine one
    assert lines[4].startswith("K = 5: keepers' audits certified without the joint test: 1, their joint p ")
