"""``benchmarks/told_apart_level.py``: its tables count by hand-made rows, per level and per seed, and
``--combine`` joins runs of disjoint seeds only (the same genuine retrains, levels, K and families)."""
from __future__ import annotations

import json

import pytest
from bench_modules import benchmark_module


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("told_apart_level")


def _row(seed, k, model, keeps, at02, at005="erased"):
    return {"seed": seed, "k": k, "model": model, "audit_seed": 1, "keeps_class": keeps, "keeps_why": "",
            "verdict_at": {"0.05": at005, "0.2": at02}}


ROWS = [_row(0, 5, "retrain100", False, "erased"), _row(0, 5, "retrain101", False, "inconclusive"),
        _row(0, 5, "hardened", True, "inconclusive"), _row(1, 5, "retrain100", False, "erased"),
        _row(1, 5, "hardened", True, "erased"), _row(1, 5, "hardened_keep3", False, "erased")]


def test_tables_count_keepers_and_genuine_retrains(bench):
    lines = bench.table(ROWS, [0.05, 0.2], lambda x, n: (0.0, 1.0))
    # keepers: seed 0's hardened and seed 1's hardened (hardened_keep3 of seed 1 is no keeper)
    assert "| 5 | 0.05 | 2/2 [0, 100 %] | 3/3 [0, 100 %] |" in lines
    assert "| 5 | 0.2 | 1/2 [0, 100 %] | 2/3 [0, 100 %] |" in lines
    seeds = bench.per_seed(ROWS, 0.2)
    assert "| 5 | 0 | 0/1 | 1/2 |" in seeds and "| 5 | 1 | 1/1 | 1/1 |" in seeds


def _run(tmp_path, name, seeds, **args):
    base = {"seeds": seeds, "references": "5", "genuine": "12", "levels": "0.05,0.2", "families": "hardened"}
    path = tmp_path / name
    path.write_text(json.dumps({"args": {**base, **args}, "rows": [r for r in ROWS if r["seed"] in seeds]}))
    return str(path)


def test_combine_joins_disjoint_seeds(bench, tmp_path, capsys):
    out = tmp_path / "both.json"
    assert bench.main(["--combine", _run(tmp_path, "a.json", [0]), _run(tmp_path, "b.json", [1]),
                       "--out", str(out)]) == 0
    both = json.loads(out.read_text())
    assert len(both["rows"]) == len(ROWS) and "| 5 | 0.2 | 1/2" in "\n".join(both["table"])
    assert both["per_seed"] == bench.per_seed(ROWS, 0.05)  # the default level


@pytest.mark.parametrize("second, why", [({"seeds": [0]}, "seed 0 is in more than one run"),
                                         ({"genuine": "pair"}, "differ in --genuine")])
def test_combine_refuses_runs_that_do_not_join(bench, tmp_path, second, why):
    b = _run(tmp_path, "b.json", second.pop("seeds", [1]), **second)
    with pytest.raises(SystemExit, match=why):
        bench.main(["--combine", _run(tmp_path, "a.json", [0]), b, "--out", str(tmp_path / "x.json")])


def test_unknown_family_is_refused_before_any_work(bench, tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(SystemExit, match="unknown --families nope"):
        bench.main(["--families", "hardened,nope", "--out", str(out)])
    assert not out.exists()
