"""``unlearnkit stream`` and ``uk.unlearn_sequence`` in-process on digits: a short stream end to end, its
report section, resuming after an interruption (stored steps read, not recomputed; the same numbers),
and the retrain fallback (fired by a constructed verdict, never a trained model's)."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

import unlearnkit as uk
from unlearnkit.cli import app
from unlearnkit.methods.finetune import Finetune
from unlearnkit.results import VERDICTS

FAST_AUDIT = {"n_splits": 2, "bn_recalibration": False, "head_refit": False, "relearn": False}
REQUESTS = [{"classes": [3]}, {"random": 0.05}, {"classes": [7]}]
VOLATILE = {"runtime_s", "cumulative_cost_s", "cumulative_retrain_s", "train_time_s"}


def stable(steps):
    """The steps' numbers less the wall times."""
    def clean(d):
        return {k: v for k, v in d.items() if k not in VOLATILE}
    return [{**clean(s), "retrain": clean(s["retrain"]), "methods": {m: clean(r) for m, r in s["methods"].items()}}
            for s in steps]


def test_stream_end_to_end_and_its_report(tmp_path, cache_dir):
    req, cfg = tmp_path / "requests.yaml", tmp_path / "c.yaml"
    req.write_text("- classes: [3]\n- random: 0.05\n")
    cfg.write_text(f"audit_config: {json.dumps(FAST_AUDIT)}\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["stream", "--requests", str(req), "--config", str(cfg), "--dataset", "digits",
                                 "--methods", "finetune,GA", "--epochs", "2", "--references", "1", "--out", str(out),
                                 "--no-progress"])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "results.json").read_text())
    steps = res["stream"]["steps"]
    assert [s["request"] for s in steps] == ["class 3", "random 5 % of what remains"]
    assert res["stream"]["methods"] == ["finetune", "gradient_ascent"]
    assert steps[1]["n_deleted"] == steps[0]["n_forget"] + steps[1]["n_forget"]
    for s in steps:
        for rec in s["methods"].values():
            assert rec["verdict"] in VERDICTS
            assert {"forget_acc", "retain_acc", "test_acc", "gap", "separability", "cumulative_cost_s",
                    "cumulative_retrain_s", "fallback", "earlier"} <= set(rec)
            assert len(rec["earlier"]) == s["step"] - 1 and rec["fallback"] is False
    assert steps[1]["methods"]["finetune"]["cumulative_retrain_s"] == pytest.approx(
        steps[0]["retrain"]["train_time_s"] + steps[1]["retrain"]["train_time_s"])
    # the last step's rows as `run` writes them; the union of deleted indices beside them
    assert set(res["models"]) == {"original", "retrain", "finetune", "gradient_ascent"}
    assert len((out / "deleted_indices.txt").read_text().split()) == steps[1]["n_deleted"]
    assert (out / "steps" / "2" / "audits" / "finetune" / "audit.json").exists()
    assert "## Stream: 2 of 2 requests done" in (out / "results.md").read_text()
    assert "gradient_ascent" in r.output and "wrote" in r.output
    assert max(map(len, r.stdout.splitlines())) <= 100, r.stdout  # was 180 columns wide
    rep = CliRunner().invoke(app, ["report", "--results", str(out), "--out", str(tmp_path / "report")])
    assert rep.exit_code == 0, rep.output
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Request streams" in md and "| gradient_ascent | 2 | random 5 % of what remains |" in md
    assert (tmp_path / "report" / "report_files" / "stream.png").stat().st_size > 1000
    assert 'data-table="stream"' in (tmp_path / "report" / "report.html").read_text()


class Interrupt(KeyboardInterrupt):
    pass


def test_an_interrupted_stream_resumes_at_the_next_request_with_the_same_numbers(tmp_path, cache_dir, monkeypatch):
    calls = []
    real = Finetune._unlearn

    def counted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3 and not getattr(counted, "resumed", False):
            raise Interrupt()  # killed during request 3
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Finetune, "_unlearn", counted)
    run = dict(data="digits", epochs=2, audit=False)
    with pytest.raises(Interrupt):
        uk.unlearn_sequence("small_cnn", "finetune", REQUESTS, out=tmp_path / "a", **run)
    assert len(calls) == 3 and not (tmp_path / "a" / "steps" / "3" / "models" / "finetune.pt").exists()
    first = json.loads((tmp_path / "a" / "results.json").read_text())["stream"]["steps"]
    assert len(first) == 2
    counted.resumed = True
    calls.clear()
    resumed = uk.unlearn_sequence("small_cnn", "finetune", REQUESTS, out=tmp_path / "a", **run)
    assert len(calls) == 1  # steps 1-2 read from their checkpoints, step 3 computed
    assert resumed.steps[:2] == first  # read back exactly, wall times included
    calls.clear()
    whole = uk.unlearn_sequence("small_cnn", "finetune", REQUESTS, out=tmp_path / "b", **run)
    assert len(calls) == 3 and stable(whole.steps) == stable(resumed.steps)
    for a, b in zip(whole.models["finetune"].state_dict().values(), resumed.models["finetune"].state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("verdict, fires", [("suppressed", True), ("erased", False)])
def test_the_retrain_fallback_fires_when_the_verdict_is_not_erased(tmp_path, cache_dir, monkeypatch, verdict, fires):
    from unlearnkit import runner

    def constructed(self, name, model, outputs):  # a verdict set by the test, not measured
        self.models[name]["audit"] = {"verdict": verdict, "layers": {}, "penultimate_layer": None}

    monkeypatch.setattr(runner.Evaluation, "audit", constructed)
    res = uk.unlearn_sequence("small_cnn", "finetune", REQUESTS[:2], data="digits", epochs=2, fallback="retrain",
                              audit_config=FAST_AUDIT, references=1, out=tmp_path / "o")
    recs = [s["methods"]["finetune"] for s in res.steps]
    assert [r["fallback"] for r in recs] == [fires, fires] and [r["verdict"] for r in recs] == [verdict] * 2
    retrain_s = sum(s["retrain"]["train_time_s"] for s in res.steps)
    runtimes = sum(r["runtime_s"] for r in recs)
    assert recs[-1]["cumulative_cost_s"] == pytest.approx(runtimes + (retrain_s if fires else 0.0))
    stored, _ = uk.load_checkpoint(tmp_path / "o" / "steps" / "2" / "models" / "finetune.pt")
    retrain = next(p for p in cache_dir.glob("digits-small_cnn-retrain-*.pt")
                   if uk.load_checkpoint(p)[1]["key"]["split_hash"] == res.steps[1]["split_hash"])
    same = all(torch.equal(a, b) for a, b in zip(stored.state_dict().values(),
                                                  uk.load_checkpoint(retrain)[0].state_dict().values()))
    assert same is fires
    assert "fallback retrain" in (tmp_path / "o" / "results.md").read_text()
