"""The CLI in-process (typer's CliRunner): run end to end on digits, determinism, bad input."""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from unlearnkit.cli import app

runner = CliRunner()
VOLATILE = {"runtime_s", "speedup"}


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def run_digits(out, cache, *extra, methods="finetune,GA"):
    return invoke("run", "--dataset", "digits", "--forget-classes", "3", "--methods", methods, "--epochs", "3",
                  "--seed", "0", "--references", "1", "--out", out, "--cache-dir", cache, "--no-progress", *extra)


def stable(results):
    out = {}
    for name, entry in results["models"].items():
        out[name] = {k: v for k, v in entry["metrics"].items() if k not in VOLATILE}
        if entry.get("audit"):
            out[name]["audit"] = {k: v for k, v in entry["audit"].items() if k != "timing"}
    return out


@pytest.mark.parametrize("what", ["datasets", "models", "methods", "metrics"])
def test_list(what):
    r = invoke("list", what)
    assert r.exit_code == 0, r.output
    assert {"datasets": "mnist5k", "models": "resnet18", "methods": "gradient_ascent", "metrics": "linear_cka"}[what] \
        in r.output


def test_run_end_to_end_and_deterministic(tmp_path):
    r = run_digits(tmp_path / "a", tmp_path / "cache-a")
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    assert res["schema"] == "unlearnkit.results/1"
    import torch
    here = {"torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    assert res["provenance"]["numerics"] == here
    assert res["provenance"]["reference_numerics"] == {"original": here, "retrain": here}  # trained just now
    assert set(res["models"]) == {"original", "retrain", "finetune", "gradient_ascent"}
    for entry in res["models"].values():
        assert {"forget_acc", "retain_acc", "test_acc", "test_forget_acc", "test_retain_acc", "mia_efficacy", "mia_auc",
                "gap", "h_mean", "runtime_s", "speedup"} <= set(entry["metrics"])
        assert "audit" in entry
    m = res["models"]
    assert m["original"]["metrics"]["forget_acc"] > 90 and m["retrain"]["metrics"]["forget_acc"] < 5
    assert m["retrain"]["metrics"]["gap"] == 0
    assert m["gradient_ascent"]["hyperparameters"]["lr"] > 0 and m["gradient_ascent"]["needs"] == ["forget"]
    assert (tmp_path / "a" / "results.md").read_text().count("|") > 20
    assert (tmp_path / "a" / "models" / "gradient_ascent.pt").exists()
    assert max(map(len, r.stdout.splitlines())) <= 100 and "gradient_ascent" in r.stdout  # the table fits 100 columns
    # same config and seed, trained again from scratch in another cache: the same numbers
    r2 = run_digits(tmp_path / "b", tmp_path / "cache-b")
    audit = res["models"]["gradient_ascent"]["audit"]
    assert audit["verdict"] in ("erased", "suppressed", "collapsed", "not_forgotten", "inconclusive")
    assert {"lpr", "delta_lpr", "delta_lpr_ci", "cka_original", "cka_retrain", "separability"} <= \
        set(next(iter(audit["layers"].values())))
    assert res["models"]["original"]["audit"]["verdict"] == "not_forgotten"
    assert (tmp_path / "a" / "audits" / "gradient_ascent" / "audit.html").exists()
    assert r2.exit_code == 0, r2.output
    assert stable(res) == stable(json.loads((tmp_path / "b" / "results.json").read_text()))
    # a second run reuses the cached references and the finished methods
    r3 = run_digits(tmp_path / "a", tmp_path / "cache-a", "--no-audit")
    assert "original: cached" in r3.output and "gradient_ascent: reusing" in r3.output


def test_config_file(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"dataset: digits\nforget_classes: [1]\nmethods: [GA]\nrecipe: {{epochs: 2}}\n"
                   f"out: {tmp_path / 'o'}\ncache_dir: {tmp_path / 'cache'}\n")
    r = invoke("run", "--config", cfg, "--no-progress")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "o" / "results.json").read_text())["task"]["forget"]["classes"] == [1]


def test_train_command(tmp_path):
    out = tmp_path / "orig.pt"
    r = invoke("train", "--dataset", "digits", "--model", "small_cnn", "--epochs", "1", "--out", out,
               "--cache-dir", tmp_path / "c")
    assert r.exit_code == 0, r.output
    from unlearnkit import load_checkpoint

    model, meta = load_checkpoint(out)
    assert meta["kind"] == "original"
    r = invoke("train", "--dataset", "digits", "--epochs", "1", "--retrain", "--out", out, "--cache-dir",
               tmp_path / "c")
    assert r.exit_code == 2 and "needs the forget set" in r.output


@pytest.mark.parametrize("args, msg", [
    (["--dataset", "mnist6k", "--forget-classes", "3"], "unknown dataset 'mnist6k'; did you mean 'mnist5k'"),
    (["--dataset", "digits", "--model", "smallcnn", "--forget-classes", "3"], "did you mean 'small_cnn'"),
    (["--dataset", "digits", "--forget-classes", "3", "--methods", "finetun"], "did you mean 'finetune'"),
    (["--dataset", "digits", "--forget-classes", "12"], "out of range"),
    (["--dataset", "digits", "--forget-classes", "0,1,2,3,4,5,6,7,8,9"], "every class"),
    (["--dataset", "digits", "--forget-classes", "x"], "whole numbers"),
    (["--dataset", "digits"], "say what to forget"),
    (["--dataset", "cifar10", "--forget-classes", "3"], "--download"),
    (["--dataset", "digits", "--forget-classes", "3", "--device", "cuda"], "no CUDA"),
    (["--dataset", "digits", "--forget-classes", "3", "--references", "0"], "references must be a whole number >= 1"),
])
def test_bad_input_one_line_exit_2(tmp_path, args, msg):
    r = invoke("run", *args, "--data-dir", tmp_path / "data", "--out", tmp_path / "o", "--cache-dir", tmp_path / "c",
               "--no-progress")
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and msg in errors[0], r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "o" / "results.json").exists()


def test_empty_forget_indices(tmp_path):
    f = tmp_path / "i.txt"
    f.write_text("")
    r = invoke("run", "--dataset", "digits", "--forget-indices", f, "--out", tmp_path / "o", "--no-progress")
    assert r.exit_code == 2 and "empty" in r.output


def test_ctrl_c_keeps_finished_checkpoints(tmp_path, monkeypatch):
    from unlearnkit.methods.gradient_ascent import GradientAscent

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(GradientAscent, "_unlearn", interrupted)
    r = run_digits(tmp_path / "o", tmp_path / "cache", "--no-audit")
    assert r.exit_code == 130 and "interrupted" in r.output
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2  # original and retrain kept
    assert not (tmp_path / "o" / "results.json").exists()
    monkeypatch.undo()
    r = run_digits(tmp_path / "o", tmp_path / "cache", "--no-audit")
    assert r.exit_code == 0 and "original: cached" in r.output and "retrain: cached" in r.output
    assert "finetune: reusing" in r.output  # finished before the interruption
