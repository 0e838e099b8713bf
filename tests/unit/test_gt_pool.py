"""``benchmarks/gt_pool.py``: where a model sits among genuine retrains, counted on hand-made ground truths."""
from __future__ import annotations

import math

import numpy as np
import pytest
from bench_modules import benchmark_module


@pytest.fixture(scope="module")
def gp():
    return benchmark_module("gt_pool")


@pytest.fixture(scope="module")
def suite(gp):
    return gp.suite()


def _g(probe, relearn=0.0):
    return {"probe": probe, "relearn": {"10": relearn, "20": relearn, "50": relearn}}


# the suite's twelve (smallest 0.020) and eight more, one of them (0.012) below the twelve's keeper line 0.015
POOL = [_g(0.020 + 0.001 * i) for i in range(12)] + [_g(0.012)] + [_g(0.030 + 0.001 * i) for i in range(7)]


def test_placement_counts_the_pool_and_both_keeper_lines(gp, suite):
    m = _g(0.013)
    got = gp.placement(m, POOL, POOL[:12], suite)
    assert got["pool_at_or_below"] == 1 and got["pool_n"] == 20   # only the 0.012 retrain is at or below
    logs = np.log([g["probe"] for g in POOL])
    assert math.isclose(got["z_log_probe"], (math.log(0.013) - logs.mean()) / logs.std(ddof=1))
    assert got["keeps_12"] and not got["keeps_pool"]   # 0.013 < 0.75 x 0.020, not < 0.75 x 0.012
    lowest = gp.placement(_g(0.005), POOL, POOL[:12], suite)
    assert lowest["pool_at_or_below"] == 0 and lowest["keeps_12"] and lowest["keeps_pool"]


def test_relearning_keeper_uses_the_pools_maximum(gp, suite):
    pool = POOL[:12] + [_g(0.03, relearn=40.0)]
    got = gp.placement(_g(0.03, relearn=30.0), pool, pool[:12], suite)
    assert got["keeps_12"] and not got["keeps_pool"]   # 30 > 0 + 10 points, not > 40 + 10


def test_summary_lists_keepers_with_exact_bounds(gp, suite):
    rows = [{"seed": 1, "family": "hardened", "probe": 0.013, **gp.placement(_g(0.013), POOL, POOL[:12], suite)}]
    lines = gp.summary(rows, POOL)
    assert lines[0].startswith("genuine pool: 20 retrains, probe log loss 0.0120-0.0360")
    assert "| 1 | hardened | 0.0130 | 1/20 [0.1, 24.9 %] | True | False |" in lines


def test_refuses_an_unknown_family_before_any_work(gp, tmp_path, capsys):
    assert gp.main(["--families", "hardened,nope", "--out", str(tmp_path / "x.json")]) == 2
    assert "nope" in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_score_counts_pool_keepers_and_genuine_audits(gp):
    pool = {"rows": [{"seed": 1, "family": "hardened", "pool_at_or_below": 0, "keeps_pool": False},
                     {"seed": 1, "family": "hardened_keep3", "pool_at_or_below": 3, "keeps_pool": False},
                     {"seed": 2, "family": "hardened", "pool_at_or_below": 5, "keeps_pool": True}]}

    def row(seed, model, at02, k=5):
        return {"seed": seed, "k": k, "model": model, "audit_seed": 7, "verdict_at": {"0.05": "erased", "0.2": at02}}

    run = {"rows": [row(1, "hardened", "erased"), row(1, "hardened_keep3", "erased"),
                    row(2, "hardened", "inconclusive"), row(1, "retrain100", "erased"),
                    row(1, "retrain101", "inconclusive")]}
    lines = gp.score(pool, [run])
    # keepers: seed 1's hardened (below every genuine retrain) and seed 2's (by relearning); not hardened_keep3
    assert "| 5 | 0.05 | 2/2 [15.8, 100.0 %] | 2/2 [15.8, 100.0 %] |" in lines
    assert "| 5 | 0.2 | 1/2 [1.3, 98.7 %] | 1/2 [1.3, 98.7 %] |" in lines
    assert lines[-1] == "pool keepers `erased` at 0.2: seed 1 K = 5 hardened (audit seed 7)"


def test_refuses_a_pool_measured_otherwise_before_any_work(gp, tmp_path, capsys):
    earlier = tmp_path / "pool.json"
    earlier.write_text('{"args": {"probe_seeds": "11,22,33"}, "pool": [], "rows": []}')
    out = tmp_path / "x.json"
    assert gp.main(["--pool-json", str(earlier), "--probe-seeds", "1,2", "--out", str(out)]) == 2
    assert "probe seeds 11,22,33" in capsys.readouterr().err and not out.exists()


def test_an_unreadable_run_is_one_error_line(gp, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        gp.main(["--pool-json", str(tmp_path / "missing.json"), "--score", str(tmp_path / "also.json")])
    assert e.value.code == 2 and capsys.readouterr().err.startswith("error: cannot read ")
