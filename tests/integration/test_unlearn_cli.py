"""``unlearnkit unlearn`` in-process: a checkpoint the user brings -> an unlearned checkpoint that
``unlearnkit audit`` reads (provenance in its meta, the caller's file untouched), and every bad value
as one ``error:`` line on stderr with exit code 2 before any work, leaving nothing behind."""
from __future__ import annotations

import json
import re

import pytest
import torch
from typer.testing import CliRunner

from unlearnkit import ForgetSpec, load_checkpoint, load_dataset, make_split, save_checkpoint
from unlearnkit.checkpoints import file_sha256
from unlearnkit.cli import app

runner = CliRunner()
FAST = ["--method", "finetune", "--param", "epochs=1", "--device", "cpu", "--no-progress"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def tree(path):
    """Every path under ``path`` (to see that a refused command created nothing)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture(scope="module")
def source(tmp_path_factory, digits_original):
    """The user's checkpoint: small_cnn trained on digits (the session's model), unlearnkit format."""
    path = tmp_path_factory.mktemp("user") / "original.pt"
    save_checkpoint(digits_original, path, {"kind": "original"})
    return path


def test_round_trip_train_unlearn_audit(tmp_path, source, cache_dir):
    ret = tmp_path / "retrain.pt"
    r = invoke("train", "--dataset", "digits", "--retrain", "--forget-classes", "3", "--out", ret,
               "--cache-dir", cache_dir, "--device", "cpu")
    assert r.exit_code == 0, r.output
    before = file_sha256(source)
    out = tmp_path / "new" / "unlearned.pt"
    r = invoke("unlearn", "--checkpoint", source, "--dataset", "digits", "--forget-classes", "3,3", *FAST,
               "--param", "lr=1e-2", "--seed", "1", "--out", out)
    assert r.exit_code == 0, r.output
    line = r.stdout.strip().splitlines()[-1]
    m = re.fullmatch(rf"wrote {re.escape(str(out))} \(method finetune, [\d.]+ s; forget acc ([\d.]+) %, "
                     rf"retain acc ([\d.]+) %\)", line)
    assert m, line
    assert file_sha256(source) == before  # the caller's checkpoint is untouched
    assert [p.name for p in out.parent.iterdir()] == ["unlearned.pt"]  # atomic: no temporary left

    model, meta = load_checkpoint(out)
    split = make_split(load_dataset("digits"), ForgetSpec(classes=(3,)))
    assert meta["kind"] == "unlearned" and meta["method"] == "finetune" and meta["preset"] == "small"
    assert meta["params"]["epochs"] == 1 and float(meta["params"]["lr"]) == 0.01
    assert meta["source_sha256"] == before and meta["source_checkpoint"] == str(source)
    assert meta["split_hash"] == split.split_hash and meta["forget"] == split.spec.to_dict()
    assert meta["seed"] == 1 and meta["data_seed"] == 0 and meta["runtime_s"] > 0
    assert meta["stop_reason"] and meta["versions"]["torch"] == torch.__version__
    assert meta["metrics"]["forget_acc"] == pytest.approx(float(m.group(1)), abs=0.05)
    assert meta["metrics"]["retain_acc"] == pytest.approx(float(m.group(2)), abs=0.05)
    assert meta["model"]["name"] == "small_cnn"

    r = invoke("audit", "--original", source, "--unlearned", out, "--retrained", ret, "--dataset", "digits",
               "--forget-classes", "3", "--out", tmp_path / "audit", "--no-resurface", "--n-splits", "2",
               "--device", "cpu", "--jobs", "1")
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "audit" / "audit.json").read_text())
    assert report["verdict"] in ("erased", "suppressed", "collapsed", "not_forgotten", "inconclusive")


def test_plain_state_dict_with_model_and_an_alias(tmp_path, digits_original):
    src = tmp_path / "weights.pt"
    torch.save(digits_original.state_dict(), src)
    out = tmp_path / "u.pt"
    r = invoke("unlearn", "--checkpoint", src, "--dataset", "digits", "--forget-random", "0.05", "--model",
               "small_cnn", "--method", "GA", "--param", "epochs=1", "--device", "cpu", "--no-progress",
               "--out", out)
    assert r.exit_code == 0, r.output
    assert "method gradient_ascent" in r.stdout
    _, meta = load_checkpoint(out, model_name="small_cnn")
    assert meta["method"] == "gradient_ascent" and meta["forget"]["kind"] == "random"
    assert meta["n_train_forget"] > 0


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "folder.pt").mkdir()
    (d / "corrupt.pt").write_bytes(b"not a checkpoint at all")
    (d / "afile").write_text("a file, not a folder")
    (d / "outdir").mkdir()
    return d


OUT = "{tmp}/sub/unlearned.pt"
CASES = {
    "missing checkpoint": (["--checkpoint", "{bad}/nope.pt"], OUT, "does not exist"),
    "checkpoint is a folder": (["--checkpoint", "{bad}/folder.pt"], OUT, "is a folder"),
    "corrupt checkpoint": (["--checkpoint", "{bad}/corrupt.pt"], OUT, "corrupt"),
    "out's parent is a file": ([], "{bad}/afile/u.pt", "is a file, not a folder"),
    "out is a folder": ([], "{bad}/outdir", "is a folder"),
    "out is the checkpoint": ([], "{src}", "is the --checkpoint itself"),
    "unknown method": (["--method", "finetun"], OUT, "did you mean 'finetune'"),
    "two methods": (["--method", "finetune,GA"], OUT, "one method per call"),
    "retrain": (["--method", "retrain"], OUT, "unlearnkit train --retrain"),
    "VFL-only method": (["--method", "target"], OUT, "vertical federated"),
    "param without =": (["--param", "epochs"], OUT, "key=value"),
    "param without key": (["--param", "=3"], OUT, "no hyperparameter name"),
    "param twice": (["--param", "lr=0.1", "--param", "lr=0.2"], OUT, "'lr' twice"),
    "param not YAML": (["--param", "lr=[1,"], OUT, "not valid YAML"),
    "unknown hyperparameter": (["--param", "epochz=1"], OUT, "unknown hyperparameter"),
    "hyperparameter of the wrong type": (["--param", "epochs=abc"], OUT, "epochs"),
    "forget-random 1.5": (["--forget-classes", None, "--forget-random", "1.5"], OUT, "--forget-random"),
    "forget-random nan": (["--forget-classes", None, "--forget-random", "nan"], OUT, "--forget-random"),
    "two forget options": (["--forget-random", "0.1"], OUT, "exactly one"),
    "no forget option": (["--forget-classes", None], OUT, "exactly one"),
    "forget-classes 99": (["--forget-classes", "99"], OUT, "out of range"),
    "forget-classes text": (["--forget-classes", "three"], OUT, "--forget-classes"),
    "negative seed": (["--seed", "-1"], OUT, "--seed"),
    "unknown preset": (["--preset", "tiny"], OUT, "--preset"),
    "unknown dataset": (["--dataset", "digitz"], OUT, "did you mean 'digits'"),
    "another architecture": (["--model", "resnet18"], OUT, "not a 'resnet18'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_one_line_exit_2_nothing_written(tmp_path, source, bad_files, case):
    changes, out_t, msg = CASES[case]
    fill = lambda s: s.format(tmp=tmp_path, bad=bad_files, src=source)  # noqa: E731
    opts = {"--checkpoint": str(source), "--dataset": "digits", "--forget-classes": "3",
            "--method": "finetune", "--device": "cpu"}
    extra = []
    for key, value in zip(changes[::2], changes[1::2]):
        if key in opts:
            opts[key] = value
        else:
            extra += [key, value]
    args = [a for k, v in opts.items() if v is not None for a in (k, fill(v))]
    out = fill(out_t)
    before_src, before_tmp, before_bad = file_sha256(source), tree(tmp_path), tree(bad_files)
    r = invoke("unlearn", *args, *[fill(a) for a in extra], "--no-progress", "--out", out)
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and msg in lines[0], r.stderr
    assert "Traceback" not in r.output and isinstance(r.exception, (SystemExit, type(None)))
    # nothing created, under --out or elsewhere
    assert tree(tmp_path) == before_tmp and tree(bad_files) == before_bad
    assert file_sha256(source) == before_src
