"""``benchmarks/sample_requests.py --combine``: runs of disjoint seeds join into one summary only when their
ground truths used the same yardstick of genuine retrains; the same task and seed twice is refused."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bench_modules import benchmark_module

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return benchmark_module("sample_requests")


def _split_run(tmp_path: Path, genuine=(None, None)) -> list[str]:
    """The committed digits run cut in two files by seed (seeds 0-1 and 2-4), each with ``genuine`` in its args
    where given."""
    run = json.loads((ROOT / "benchmarks" / "results" / "sample_requests_digits.json").read_text())
    paths = []
    for i, (part, g) in enumerate(zip(((0, 1), (2, 3, 4)), genuine)):
        args = {**run["args"], "seeds": list(part)}
        args.pop("genuine", None)  # None: a run from before --genuine was recorded
        if g is not None:
            args["genuine"] = g
        path = tmp_path / f"part{i}.json"
        path.write_text(json.dumps({**run, "args": args, "rows": [r for r in run["rows"] if r["seed"] in part]}))
        paths.append(str(path))
    return paths


def test_combined_halves_give_the_whole_runs_summary(bench, tmp_path, capsys):
    whole = json.loads((ROOT / "benchmarks" / "results" / "sample_requests_digits.json").read_text())
    out = tmp_path / "all.json"
    assert bench.main(["--combine", *_split_run(tmp_path, (10, 10)), "--out", str(out)]) == 0
    joined = json.loads(out.read_text())
    assert len(joined["rows"]) == len(whole["rows"])
    assert joined["summary"] == whole["summary"]
    assert joined["summary"][-1] == "bit-identical copies that moved: 0"
    assert joined["args"][0]["seeds"] == [0, 1] and joined["args"][1]["seeds"] == [2, 3, 4]


def test_a_part_without_genuine_counts_as_its_default(bench, tmp_path):
    # the first part's default yardstick is 2 x 1 + 2 = 4 retrains, the second's 10: not the same ground truth
    with pytest.raises(SystemExit, match="different yardsticks"):
        bench.main(["--combine", *_split_run(tmp_path), "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_the_same_seed_twice_is_refused(bench, tmp_path):
    first = _split_run(tmp_path, (10, 10))[1]
    with pytest.raises(SystemExit, match="digits-flipped seed 2 at K = 8 is in both"):
        bench.main(["--combine", first, first, "--out", str(tmp_path / "x.json")])


def test_an_unreadable_or_foreign_file_is_one_error_line_and_nothing_written(bench, tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(SystemExit, match="--combine cannot read"):
        bench.main(["--combine", str(tmp_path / "missing.json"), "--out", str(out)])
    (tmp_path / "other.json").write_text('{"rows": []}')
    with pytest.raises(SystemExit, match="is not a sample_requests.py run"):
        bench.main(["--combine", str(tmp_path / "other.json"), "--out", str(out)])
    assert not out.exists()


def test_the_same_seeds_at_another_k_join(bench, tmp_path):
    run = json.loads(Path(_split_run(tmp_path, (10, 10))[0]).read_text())
    for k in (8, 16):
        part = {**run, "rows": [r for r in run["rows"] if r["k"] == k]}
        (tmp_path / f"k{k}.json").write_text(json.dumps(part))
    out = tmp_path / "both.json"
    assert bench.main(["--combine", str(tmp_path / "k8.json"), str(tmp_path / "k16.json"), "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["rows"]) == len(run["rows"])


def test_a_yardstick_without_the_last_seeds_retrains_is_an_error(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--seeds", "0,4", "--genuine", "8"])
    assert "--genuine 8 leaves out the held-out retrains of seed 4" in capsys.readouterr().err


def test_cached_truths_share_the_work_and_take_over_a_dead_lock(bench, tmp_path):
    computed = []

    def compute(g):
        computed.append(g)
        return {"probe": g / 1000}

    (tmp_path / "t-gt-retrain101.lock").touch()  # held by a live process: waited for, then read
    (tmp_path / "t-gt-retrain102.lock").touch()
    os.utime(tmp_path / "t-gt-retrain102.lock", (0, 0))  # a dead process's: taken over
    (tmp_path / "t-gt-retrain103.json").write_text('{"probe": 9}')  # computed before: read
    got = {}
    truths = bench.cached_truths("t", [100, 101, 102, 103], compute, tmp_path, poll_s=0.01)
    for g, gt in truths:
        got[g] = gt
        if len(got) == 3:  # the other process finishes 101
            (tmp_path / "t-gt-retrain101.json").write_text('{"probe": 7}')
            (tmp_path / "t-gt-retrain101.lock").unlink()
    assert computed == [100, 102]
    assert got == {100: {"probe": 0.1}, 101: {"probe": 7}, 102: {"probe": 0.102}, 103: {"probe": 9}}
    assert not list(tmp_path.glob("*.lock"))
    assert [g for g, _ in bench.cached_truths("t", [100, 101], compute, tmp_path)] == [100, 101]
    assert computed == [100, 102]  # all read back


def _gt_cache(tmp_path: Path, leave_out: int | None = None) -> Path:
    """The committed run's genuine retrains' ground truths, written as its cache would hold them."""
    run = json.loads((ROOT / "benchmarks" / "results" / "sample_requests_digits.json").read_text())
    cache = tmp_path / "cache"
    cache.mkdir()
    for r in run["rows"]:
        g = int(r["copy"][7:]) if r["family"] == "genuine" else None
        if g is not None and g != leave_out:
            (cache / f"digits-flipped-gt-retrain{g}.json").write_text(json.dumps(r["ground_truth"]))
    return cache


def test_rescore_joins_different_yardsticks_against_the_largest(bench, tmp_path):
    whole = json.loads((ROOT / "benchmarks" / "results" / "sample_requests_digits.json").read_text())
    parts = _split_run(tmp_path, (4, 10))
    first = json.loads(Path(parts[0]).read_text())
    for r in first["rows"]:  # as if judged against a smaller yardstick: the rescoring must restore the whole run's
        if r["family"] != "genuine":
            r["keeps_class"], r["keeps_why"], r["false_erased"] = (not r["keeps_class"]), "stale", True
    Path(parts[0]).write_text(json.dumps(first))
    out = tmp_path / "all.json"
    assert bench.main(["--combine", *parts, "--rescore", "--cache", str(_gt_cache(tmp_path)), "--out", str(out)]) == 0
    joined = json.loads(out.read_text())
    assert joined["rescored_against"] == 10
    key = lambda r: (r["seed"], r["k"], r["family"], r["copy"])  # noqa: E731
    want = {key(r): (r["keeps_class"], r["false_erased"]) for r in whole["rows"]}
    assert {key(r): (r["keeps_class"], r["false_erased"]) for r in joined["rows"]} == want
    assert joined["summary"] == whole["summary"]


def test_rescore_refuses_a_yardstick_missing_from_the_cache(bench, tmp_path):
    out = tmp_path / "x.json"
    with pytest.raises(SystemExit, match="needs the ground truth of digits-flipped-gt-retrain107.json"):
        bench.main(["--combine", *_split_run(tmp_path, (4, 10)), "--rescore", "--cache",
                    str(_gt_cache(tmp_path, leave_out=107)), "--out", str(out)])
    assert not out.exists()


def test_a_combined_file_joins_again(bench, tmp_path):
    whole = json.loads((ROOT / "benchmarks" / "results" / "sample_requests_digits.json").read_text())
    first = tmp_path / "first.json"
    k8 = []
    for i, path in enumerate(_split_run(tmp_path, (10, 10))):
        run = json.loads(Path(path).read_text())
        (tmp_path / f"k8_{i}.json").write_text(json.dumps({**run, "rows": [r for r in run["rows"] if r["k"] == 8]}))
        k8.append(str(tmp_path / f"k8_{i}.json"))
    assert bench.main(["--combine", *k8, "--out", str(first)]) == 0
    rest = tmp_path / "k16.json"
    rest.write_text(json.dumps({**whole, "args": {**whole["args"], "genuine": 10},
                                "rows": [r for r in whole["rows"] if r["k"] == 16]}))
    out = tmp_path / "all.json"
    assert bench.main(["--combine", str(first), str(rest), "--out", str(out)]) == 0
    joined = json.loads(out.read_text())
    assert len(joined["rows"]) == len(whole["rows"]) and len(joined["args"]) == 3
    assert joined["summary"] == whole["summary"]


def test_rescore_without_combine_is_one_usage_error(bench, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--rescore"])
    assert e.value.code == 2 and "--rescore only applies with --combine" in capsys.readouterr().err
