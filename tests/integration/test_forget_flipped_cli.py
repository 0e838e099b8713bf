"""``--forget-flipped`` on train, unlearn, audit, tune and forgetting-quality: checked where it enters, and
the split each command builds is the one ``run --forget-flipped`` makes. The work is stopped where it begins."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from unlearnkit import ForgetSpec, make_split
from unlearnkit.cli import app

runner = CliRunner()


class Reached(Exception):
    """Raised where a command's work would begin, carrying what it was handed."""


def _stop(monkeypatch, target: str, pick):
    def stop(*args, **kwargs):
        raise Reached(pick(*args, **kwargs))

    monkeypatch.setattr(target, stop)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, digits):
    """An untrained small_cnn checkpoint for digits (unlearn and audit only load it here)."""
    import torch

    from unlearnkit.checkpoints import save_checkpoint
    from unlearnkit.models.zoo import create_model

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "m.pt"
    save_checkpoint(create_model("small_cnn", digits.num_classes, in_channels=digits.in_channels,
                                 image_size=digits.image_size), path, {"kind": "original"})
    return str(path)


def args(command: str, tmp_path, ckpt: str, flipped: str = "0.05") -> list[str]:
    """A call of ``command`` on digits with ``--forget-flipped flipped``."""
    c = str(tmp_path / "cache")
    return {
        "train": ["train", "--dataset", "digits", "--retrain", "--out", str(tmp_path / "m.pt"), "--cache-dir", c],
        "unlearn": ["unlearn", "--checkpoint", ckpt, "--dataset", "digits", "--method", "finetune",
                    "--out", str(tmp_path / "u.pt"), "--no-progress"],
        "audit": ["audit", "--original", ckpt, "--unlearned", ckpt, "--retrained", ckpt, "--dataset", "digits",
                  "--out", str(tmp_path / "audit")],
        "tune": ["tune", "--dataset", "digits", "--method", "ssd", "--trials", "1", "--db", str(tmp_path / "s.db"),
                 "--out", str(tmp_path / "t.yaml"), "--cache-dir", c, "--no-progress"],
        "forgetting-quality": ["forgetting-quality", "--dataset", "digits", "--methods", "finetune", "--runs", "3",
                               "--out", str(tmp_path / "fq"), "--cache-dir", c, "--device", "cpu", "--no-progress"],
    }[command] + ["--forget-flipped", flipped]


#: where each command's work begins, and how to read the split (or the config) it was handed
STOPS = {
    "train": ("unlearnkit.training.reference_model", lambda kind, split, *a, **k: split),
    "unlearn": ("unlearnkit.api.unlearn_split", lambda net, unlearner, split, **k: split),
    "audit": ("unlearnkit.audit.audit_split", lambda o, u, refs, split, **k: split),
    "forgetting-quality": ("unlearnkit.forgetting_quality_experiment._reference",
                           lambda kind, task, *a, **k: task.split),
    "tune": ("unlearnkit.cli.tune._tune", lambda cfg, *a, **k: cfg),
}


@pytest.mark.parametrize("command", list(STOPS))
def test_the_option_reaches_runs_flipped_split(command, monkeypatch, tmp_path, ckpt, digits):
    target, pick = STOPS[command]
    _stop(monkeypatch, target, pick)
    r = runner.invoke(app, args(command, tmp_path, ckpt))
    assert isinstance(r.exception, Reached), r.output
    got = r.exception.args[0]
    if command == "tune":  # the RunConfig run's own path (runner.prepare) turns into the split
        from unlearnkit.runner import build_split
        from unlearnkit.tune import forget_text

        assert got.forget_flipped == 0.05 and forget_text(got) == "flipped 0.05"
        got = build_split(got, digits)
    assert got.spec == ForgetSpec(flipped=0.05)
    assert got.split_hash == make_split(digits, ForgetSpec(flipped=0.05), seed=0).split_hash


@pytest.mark.parametrize("command", list(STOPS))
@pytest.mark.parametrize("flipped, extra, msg", [("0.5", [], "--forget-flipped must be"),
                                                 ("0.05", ["--forget-classes", "3"], "exactly one of")])
def test_a_bad_flipped_request_is_one_error_line(command, flipped, extra, msg, monkeypatch, tmp_path, ckpt):
    _stop(monkeypatch, *STOPS[command])
    r = runner.invoke(app, args(command, tmp_path, ckpt, flipped) + extra)
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and msg in errors[0], r.output
    assert "Traceback" not in r.output
    assert not any(tmp_path.iterdir())  # refused before anything was written
