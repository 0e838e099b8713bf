"""``benchmarks/reference_choice.py``: a party that hands in the references it picks from its own retrains, on
hand-made audits (a model beyond eight references jointly that five of them, chosen, certify)."""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import asdict

import numpy as np
import pytest
from bench_modules import benchmark_module

from unlearnkit.audit.checks import Measure

#: eight references: four close to 0, four far from it (the ones a party picks to widen the spread)
REFS = (-1.0, 1.0, -0.9, 0.9, 0.0, 0.01, -0.01, 0.005)


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("reference_choice")


def _row(model, u, verdict="erased"):
    ms = [Measure("output", "output confidence", "train", None, "two", "u", float(np.mean(REFS)), 60.0, REFS)]
    ms += [Measure("representation", f"s{j}", "train", "penultimate", "two", "u", u, 60.0, REFS) for j in range(10)]
    return {"seed": 0, "k": 8, "model": model, "audit_seed": 1, "verdict": verdict, "keeps_class": True,
            "measures": [asdict(m) for m in ms]}


def test_with_references_keeps_the_chosen_ones_in_every_measure(bench):
    row = _row("hardened", 1.0)
    row["measures"][0]["flag_values"] = [0.0, 1.0, list(REFS)]
    got = bench.with_references(row, (5, 6, 7))
    assert all(m["references"] == [0.01, -0.01, 0.005] for m in got["measures"])
    assert got["measures"][0]["flag_values"] == [0.0, 1.0, [0.01, -0.01, 0.005]]
    assert list(row["measures"][1]["references"]) == list(REFS)  # the row itself untouched


def test_choices_are_all_of_them_or_a_distinct_random_sample(bench):
    rng = np.random.default_rng(0)
    every = bench.choices(8, 5, None, rng)
    assert len(every) == math.comb(8, 5) == len(set(every))
    some = bench.choices(16, 5, 40, rng)
    assert len(some) == 40 == len(set(some)) and all(len(c) == 5 and list(c) == sorted(c) for c in some)


def test_a_party_that_picks_gets_a_model_certified_that_the_eight_tell_apart(bench, tmp_path):
    cheat = _row("hardened", 2.0)
    assert not bench.combined_rule.erased_under(cheat, 0.05, True, None)  # all eight: told apart
    run = tmp_path / "run.json.gz"
    run.write_bytes(gzip.compress(json.dumps({"rows": [cheat, _row("masked", 0.0, verdict="not_forgotten")]})
                                  .encode()))
    got = bench.run([str(run)], 5, 8, None, None)
    keeper = got["counts"]["keeper"]
    assert keeper["audits"] == 2 and keeper["some_choice"] == 1 and keeper["choices"] == 56  # not_forgotten: no choice
    assert 0 < keeper["certifying_choices"] < 56
    assert got["won"] and got["won"][0]["model"] == "hardened"
    lines = bench.table(got["counts"])
    assert lines[2].startswith("| keeper | 1/2 [")


@pytest.mark.parametrize("argv, message", [
    (["--pick", "8", "--of", "8"], "--pick must be at least 2 and below --of"),
    (["--pick", "1"], "--pick must be at least 2"),
    (["--max-choices", "0"], "--max-choices must be at least 1"),
    (["--pick", "5", "--of", "8", "--add-drawn", "2", "--k", "9"], "--k must be at least --of + --add-drawn (10)"),
    (["--add-drawn", "-1"], "--add-drawn must be at least 0"),
    (["--pick", "5"], "no such run"),
])
def test_bad_arguments_are_one_error_line_before_any_work(bench, argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        bench.main([str(tmp_path / "missing.json"), *argv, "--out", str(tmp_path / "out.json")])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_the_auditor_adds_references_drawn_from_those_the_party_did_not_pick_from(bench, tmp_path, monkeypatch):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"rows": [_row("hardened", 2.0)]}))
    seen = []
    monkeypatch.setattr(bench.combined_rule, "erased_under",
                        lambda row, *a: seen.append(tuple(row["measures"][1]["references"])) or False)
    got = bench.run([str(run)], 3, 5, None, None, add_drawn=2)
    assert got["counts"]["keeper"]["choices"] == math.comb(5, 3) == len(seen)
    drawn = {r[3:] for r in seen}
    assert len(drawn) == 1 and set(next(iter(drawn))) <= set(REFS[5:])  # one draw per audit, from the rest
    assert all(set(r[:3]) <= set(REFS[:5]) for r in seen)
    assert bench.run([str(run)], 3, 5, None, None, add_drawn=2, k=16)["counts"]["keeper"]["audits"] == 0
    assert bench.run([str(run)], 3, 5, None, None, add_drawn=4)["counts"]["keeper"]["audits"] == 0  # 8 < 5 + 4
