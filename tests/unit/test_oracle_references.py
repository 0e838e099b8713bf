"""``benchmarks/oracle_references.py``: a keeper's ground-truth probe read against K references, by hand."""
from __future__ import annotations

import math

import pytest
from bench_modules import benchmark_module
from scipy import stats


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("oracle_references")


def test_lower_p_is_the_student_t_prediction_tail_computed_by_hand(bench):
    refs = [0.0, 1.0, 2.0, 3.0, 4.0]  # mean 2, sd sqrt(2.5)
    scale = math.sqrt(2.5) * math.sqrt(1.2)
    assert bench.lower_p(2.0, refs) == pytest.approx(0.5)
    assert bench.lower_p(-1.0, refs) == pytest.approx(stats.t.cdf(-3.0 / scale, 4))
    assert bench.lower_p(-1.0, refs) < bench.lower_p(0.0, refs) < 0.5


def test_rows_read_the_first_k_references_and_the_pool_at_the_keepers_p(bench):
    refs = [0.02, 0.021, 0.019, 0.022, 0.018, 0.0101, 0.03, 0.025]  # losses; the sixth is as low as the keeper
    pool = [0.02, 0.03, 0.012, 0.025]
    keeper = {"family": "hardened", "probe": 0.01}
    rows = bench.rows_for(1, [5, 8], refs, pool, [keeper])
    assert [(r["k"], r["family"]) for r in rows] == [(5, None), (5, "hardened"), (8, None), (8, "hardened")]
    pool5, five, _, eight = rows
    logs5 = [math.log(v) for v in refs[:5]]
    assert five["p"] == pytest.approx(bench.lower_p(math.log(0.01), logs5))
    assert pool5["p"] == pytest.approx([bench.lower_p(math.log(v), logs5) for v in pool])
    assert five["p"] < 0.01 < eight["p"]  # one low reference among eight widens the spread
    lines = bench.table(rows, [5, 8])
    refused = sum(p < 0.05 for p in pool5["p"])  # the pool's 0.012 against references 0.018-0.022
    assert refused == 1
    assert lines[2].startswith(f"| 5 | 0.05 | 1/1 | {refused}/4 (25.0 %) | {five['p']:.3f} (seed 1 hardened) |")
    assert lines[5] == f"| 8 | 0.05 | 1/1 | 0/4 (0.0 %) | {eight['p']:.3f} (seed 1 hardened) |"  # the 0.012 no longer
