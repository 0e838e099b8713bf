"""``unlearnkit audit --forget-data/--retain-data/--test-data``: the user's own tensors (a ``torch.save`` of
``{"x": x, "y": y}`` or ``(x, y)``), each checked where it enters (one ``error:`` line, exit 2, nothing written),
and a ``warning:`` line on stderr for every part unlearnkit substitutes from its own split."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from unlearnkit.cli import app

runner = CliRunner()
FAST = ["--no-resurface", "--n-splits", "2", "--device", "cpu", "--jobs", "1"]


@pytest.fixture(scope="module")
def user(tmp_path_factory, digits_original, digits_retrain, digits_split):
    """The user's files: plain state dicts of the session's digits model and a retrain (the reference), and the
    split's parts as tensor files (normalised by the user's pipeline: here unlearnkit's normalisation applied
    once, by hand)."""
    d = tmp_path_factory.mktemp("user-data")
    torch.save(digits_original.state_dict(), d / "w.pt")
    torch.save(digits_retrain.state_dict(), d / "r.pt")
    for name, part in (("forget", digits_split.train_forget), ("retain", digits_split.train_retain),
                       ("test", digits_split.test)):
        x, y = part.normalize(part.x), part.y
        torch.save({"x": x, "y": y} if name != "test" else (x, y), d / f"{name}.pt")
    return d


def audit(user, out, *extra):
    w = str(user / "w.pt")
    args = ["audit", "--original", w, "--unlearned", w, "--retrained", str(user / "r.pt"), "--model", "small_cnn",
            "--dataset", "digits", "--out", str(out), *FAST, *map(str, extra)]
    return runner.invoke(app, args)


def data(user, *roles):
    return [a for r in roles for a in (f"--{r}-data", user / f"{r}.pt")]


class WorkStarted(Exception):
    """Raised where the audit itself would begin (the warnings come before it)."""


@pytest.fixture
def stop_at_the_audit(monkeypatch):
    import unlearnkit.audit

    def stop(*args, **kwargs):
        raise WorkStarted

    monkeypatch.setattr(unlearnkit.audit, "audit_split", stop)


def warnings_of(result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.startswith("warning:")]


def test_all_three_files_audit_the_users_data_without_a_warning(user, tmp_path, digits_split):
    r = audit(user, tmp_path / "a", *data(user, "forget", "retain", "test"))
    assert r.exit_code == 0, r.output
    assert warnings_of(r) == [], r.stderr
    report = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert report["verdict"]
    # the audited forget rows are the file's (class 3 of the training data: the split's own count)
    assert str(len(digits_split.train_forget)) in json.dumps(report)
    # the reference's provenance: its weights' sha256, and that the user supplied it (a plain state dict)
    (ref,) = report["references"]
    assert len(ref["sha256"]) == 64 and ref["source"].startswith("user (--retrained ") and "r.pt" in ref["source"]
    assert isinstance(report["audit_seed"], int)  # drawn fresh, recorded


def test_each_substituted_part_is_named_in_a_warning_on_stderr(user, tmp_path, stop_at_the_audit):
    r = audit(user, tmp_path / "a", *data(user, "forget"), "--forget-classes", "3")
    assert isinstance(r.exception, WorkStarted), r.output
    lines = warnings_of(r)
    assert len(lines) == 2, r.stderr
    assert lines[0].startswith("warning: --retain-data not given: the retain set is unlearnkit's digits split")
    assert lines[1].startswith("warning: --test-data not given: the test set is unlearnkit's digits split")
    assert "forget-data not given" not in r.stderr and "warning" not in r.stdout


def test_plain_state_dicts_on_unlearnkits_split_are_warned_about(user, tmp_path, stop_at_the_audit):
    r = audit(user, tmp_path / "a", "--forget-classes", "3")
    assert isinstance(r.exception, WorkStarted), r.output
    (line,) = warnings_of(r)
    assert "plain state dicts" in line and "--forget-data, --retain-data and --test-data" in line


def _bad(tmp_path, payload, name="bad.pt"):
    path = tmp_path / name
    if isinstance(payload, bytes):
        path.write_bytes(payload)
    else:
        torch.save(payload, path)
    return path


x8 = torch.zeros(4, 1, 8, 8)
y4 = torch.tensor([3, 3, 3, 3])
BAD = {
    "not a tensor file": (b"plain text", "cannot be read as a tensor file"),
    "dict without y": ({"x": x8}, "without the key(s) 'y'"),
    "a lone tensor": (x8, "holds Tensor"),
    "float labels": ({"x": x8, "y": y4.float()}, "integer class indices"),
    "labels out of range": ({"x": x8, "y": torch.tensor([3, 3, 10, -1])}, "0..9"),
    "NaN inputs": ({"x": x8.clone().fill_(float("nan")), "y": y4}, "non-finite"),
    "lengths differ": ({"x": x8, "y": y4[:3]}, "shaped [N, ...]"),
    "3 channels": ({"x": torch.zeros(4, 3, 8, 8), "y": y4}, "[N, 1, ...]"),
    "labels of another shape": ({"x": x8, "y": y4[:, None]}, "shaped [N, ...]"),
    "an object": ({"x": x8, "y": y4, "extra": torch.nn.Linear(2, 2)}, "cannot be read as a tensor file"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_tensor_file_is_one_error_line(case, user, tmp_path):
    payload, expected = BAD[case]
    bad = _bad(tmp_path, payload)
    out = tmp_path / "out"
    r = audit(user, out, "--forget-data", bad, *data(user, "retain", "test"))
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --forget-data"), r.stderr
    assert expected in lines[0], lines[0]
    assert "Traceback" not in r.output and not out.exists()


def test_forget_options_are_refused_when_every_part_is_a_file(user, tmp_path):
    out = tmp_path / "out"
    r = audit(user, out, *data(user, "forget", "retain", "test"), "--forget-classes", "3")
    assert r.exit_code == 2 and r.stderr.startswith("error: --forget-classes is not needed"), r.output
    assert not out.exists()


def test_a_missing_forget_request_is_refused_when_a_part_is_substituted(user, tmp_path):
    r = audit(user, tmp_path / "out", *data(user, "forget", "retain"))
    assert r.exit_code == 2 and "exactly one of --forget-classes" in r.stderr, r.output


def test_a_cifar_stem_resnet_given_as_torchvision_resnet18_points_to_the_zoos(tmp_path):
    from unlearnkit.models.zoo import create_model

    w = tmp_path / "r.pt"
    torch.save(create_model("resnet18", num_classes=10, in_channels=1, image_size=8).state_dict(), w)
    r = runner.invoke(app, ["audit", "--original", str(w), "--unlearned", str(w), "--retrained", str(w),
                            "--model", "torchvision:resnet18", "--dataset", "digits", "--forget-classes", "3",
                            "--out", str(tmp_path / "out"), *FAST])
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith("give --model resnet18)"), line
