"""``unlearnkit forgetting-quality`` in-process: files, controls, reuse on a rerun, bad input."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from unlearnkit.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def fq_args(out, cache, *extra):
    """The command line; ``extra`` option/value pairs replace the base's (an option given twice is refused)."""
    opts = {"--dataset": "digits", "--forget-classes": "3", "--methods": "finetune", "--runs": "3", "--epochs": "2",
            "--out": out, "--cache-dir": cache}
    opts.update(zip(extra[::2], extra[1::2]))
    return ["forgetting-quality", *[a for kv in opts.items() for a in kv], "--no-progress"]


@pytest.fixture(scope="module")
def fq_run(tmp_path_factory):
    """3 retrains, 3 finetune runs, 3 control retrains and the original (about 25 s on one core)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small models: one thread is faster, and leaves the other core alone
    root = tmp_path_factory.mktemp("fq")
    try:
        r = invoke(*fq_args(root / "out", root / "cache"))
        assert r.exit_code == 0, r.output
        yield root, r.output
    finally:
        torch.set_num_threads(threads)


def test_files_and_json(fq_run):
    root, output = fq_run
    out = root / "out"
    for name in ("forgetting_quality.json", "forgetting_quality.md", "forgetting_quality.png"):
        assert (out / name).stat().st_size > 0, name
    assert (out / "forgetting_quality.png").read_bytes()[:4] == b"\x89PNG"
    res = json.loads((out / "forgetting_quality.json").read_text())
    assert res["schema"] == "unlearnkit.forgetting_quality/1"
    assert {"config", "provenance", "task", "retrained", "methods"} <= set(res)
    assert res["provenance"]["jobs"] == {"total": 10, "run": 10, "reused": 0}
    assert {"unlearnkit", "torch"} <= set(res["provenance"]["versions"])
    # what decides the bits besides the versions: one process, one thread (the fixture's), this CPU's kernels
    import torch
    here = {"torch_threads": 1, "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    assert res["provenance"]["numerics"] == [here]
    for job in (out / "jobs").glob("*.json"):
        assert json.loads(job.read_text())["numerics"] == here, job.name
    assert list(res["methods"]) == ["retrain", "finetune", "original"]
    n_forget = res["task"]["n_train_forget"]
    assert n_forget == len(res["task"]["forget_indices"]) > 0
    for name, row in res["methods"].items():
        assert row["runs"] == 3 and row["control"] == (name != "finetune")
        assert len(row["epsilons"]) == n_forget and all(0 <= e <= 50 for e in row["epsilons"])
        assert 0 <= row["forget_score"] <= 1 and row["final_score"] is not None
        assert {"mean", "std"} == set(row["retain_acc"]) == set(row["test_acc"]) == set(row["forget_acc"])
        assert row["max_epsilon"] == 1.0  # ceil(log 2)
    assert len(list((out / "jobs").glob("*.json"))) == 10
    md = (out / "forgetting_quality.md").read_text()
    assert "| retrain (control) | 3 |" in md and "| finetune | 3 |" in md
    assert "retrain (control)" in output and "wrote" in output


def test_controls_bracket_the_scale(fq_run):
    res = json.loads((fq_run[0] / "out" / "forgetting_quality.json").read_text())
    rows = res["methods"]
    assert rows["original"]["forget_score"] == 0.0  # a point mass: the peaky rule, eps = 50 everywhere
    assert set(rows["original"]["epsilons"]) == {50.0}
    assert rows["retrain"]["forget_score"] > rows["original"]["forget_score"]
    assert rows["retrain"]["forget_score"] >= rows["finetune"]["forget_score"]
    assert rows["original"]["forget_acc"]["std"] == pytest.approx(0.0, abs=1e-9)  # one model, 3 times


def test_rerun_reuses_every_job(fq_run):
    root, _ = fq_run
    out = root / "out"
    before = {p.name: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.json")}
    first = json.loads((out / "forgetting_quality.json").read_text())
    r = invoke(*fq_args(out, root / "cache"))
    assert r.exit_code == 0, r.output
    assert "0 jobs run, 10 reused" in r.output
    assert {p.name: p.stat().st_mtime_ns for p in (out / "jobs").glob("*.json")} == before
    again = json.loads((out / "forgetting_quality.json").read_text())
    assert again["provenance"]["jobs"] == {"total": 10, "run": 0, "reused": 10}
    for name, row in first["methods"].items():
        assert again["methods"][name]["epsilons"] == row["epsilons"]


@pytest.mark.parametrize("extra, msg", [
    (["--runs", "1"], "--runs must be at least 3"),
    (["--runs", "2"], "no bucket"),
    (["--methods", "finetun"], "did you mean 'finetune'"),
    (["--methods", "retrain"], "retrain is the reference here"),
    (["--runs-for", "finetune:2"], "method=count pairs"),
    (["--runs-for", "finetune=9"], "between 3 and 3"),
    (["--runs-for", "salun=3"], "not among the methods"),
    (["--forget-classes", "42"], "out of range"),
    (["--jobs", "0"], "--jobs must be at least 1"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, extra, msg):
    r = invoke(*fq_args(tmp_path / "o", tmp_path / "c", *extra))
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and msg in errors[0], r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "c").exists()


def test_runs_for_parsing():
    from unlearnkit.cli.forgetting_quality import parse_runs_for
    from unlearnkit.errors import UserError

    assert parse_runs_for("ec+cola=4, salun = 8") == {"ec+cola": 4, "salun": 8}
    assert parse_runs_for(None) == {}
    for bad in ("ec+cola", "=4", "salun=4,", "salun=x", "salun=4,salun=5"):
        with pytest.raises(UserError):
            parse_runs_for(bad)


def test_plot_prints_names_literally(tmp_path):
    from unlearnkit.forgetting_quality_experiment import plot

    row = {"control": False, "runs": 3, "forget_score": 0.5, "max_epsilon": 1.0, "epsilons": [0.1, 50.0, 0.7]}
    # an unbalanced "$" would make mathtext raise while drawing; "$x^2$" would be typeset
    plot({"methods": {"a$b": row, "$x^2$": dict(row, epsilons=None, forget_score=None)}}, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
