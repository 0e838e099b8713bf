"""`unlearnkit audit`, through the CLI's app."""
from __future__ import annotations

import json

import pytest
from audit_helpers import masked_head
from typer.testing import CliRunner

from unlearnkit import create_model, save_checkpoint
from unlearnkit.cli import app as cli_app

pytestmark = pytest.mark.heavy  # trains the audit references and runs whole audits: `make test`, not test-fast


@pytest.fixture(scope="module")
def app():
    return cli_app


@pytest.fixture(scope="module")
def ckpts(original, retrain0, retrain1, tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpts")
    paths = {}
    for name, m in (("original", original), ("unlearned", masked_head(original)), ("r0", retrain0),
                    ("r1", retrain1)):
        paths[name] = d / f"{name}.pt"
        save_checkpoint(m, paths[name], {"kind": name})
    five = create_model("small_cnn", num_classes=5, in_channels=1, image_size=8)
    paths["five"] = d / "five.pt"
    save_checkpoint(five, paths["five"], {})
    return paths


def _args(ckpts, out, *extra, unlearned="unlearned"):
    return ["audit", "--original", str(ckpts["original"]), "--unlearned", str(ckpts[unlearned]),
            "--retrained", str(ckpts["r0"]), "--dataset", "digits", "--out", str(out), *extra]


def test_audit_command_prints_the_verdict_and_writes_three_files(app, ckpts, tmp_path):
    out = tmp_path / "audit"
    res = CliRunner().invoke(app, _args(ckpts, out, "--retrained", str(ckpts["r1"]), "--forget-classes", "3",
                                        "--n-splits", "3", "--no-resurface", "--device", "cpu"))
    assert res.exit_code == 0, res.output
    # two references: the t quantiles have one degree of freedom, so the masked original (the original's
    # representation) is never certified; whether it is flagged moves with the CPU's kernels
    assert "verdict: suppressed" in res.output or "verdict: inconclusive" in res.output, res.output
    assert "checks (" in res.output and "audit seed" in res.output
    assert sorted(p.name for p in out.iterdir()) == ["audit.html", "audit.json", "audit.md"]
    d = json.loads((out / "audit.json").read_text())
    assert d["verdict"] in ("suppressed", "inconclusive")
    assert d["models"]["retrained"]["n"] == 2  # --retrained is repeatable
    assert d["config"]["n_splits"] == 3 and d["resurfacing"]["relearning"] == {}
    assert isinstance(d["audit_seed"], int) and len(d["references"]) == 2
    assert all(r["source"].startswith("unlearnkit (--retrained") or r["source"].startswith("user")
               for r in d["references"])


@pytest.mark.parametrize("extra, unlearned, message", [
    (["--forget-classes", "12"], "unlearned", "out of range"),
    ([], "unlearned", "exactly one of --forget-classes"),
    (["--forget-classes", "3", "--forget-random", "0.1"], "unlearned", "exactly one of"),
    (["--forget-classes", "3"], "five", "5 classes"),
    (["--forget-classes", "x"], "unlearned", "comma-separated whole numbers"),
    (["--forget-classes", "3", "--audit-data", "both"], "unlearned", "audit_data"),
])
def test_bad_input_is_one_line_and_exit_code_2(app, ckpts, tmp_path, extra, unlearned, message):
    res = CliRunner().invoke(app, _args(ckpts, tmp_path / "o", *extra, unlearned=unlearned))
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and message in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_missing_checkpoint_is_a_user_error(app, ckpts, tmp_path):
    args = _args(ckpts, tmp_path / "o", "--forget-classes", "3")
    args[args.index("--original") + 1] = str(tmp_path / "nope.pt")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2 and "does not exist" in res.output


@pytest.mark.parametrize("where", ["weights", "outputs"])
def test_broken_model_is_collapsed_with_one_line(app, ckpts, original, tmp_path, where):
    """A gradient ascent that diverged leaves NaN weights; the audit says collapsed, not a scikit-learn error."""
    import copy

    import torch

    broken = copy.deepcopy(original)
    with torch.no_grad():
        if where == "weights":
            broken.fc.weight.fill_(float("nan"))
        else:  # finite weights whose activations overflow to inf
            broken.fc1[0].weight.mul_(1e38)
            broken.fc.weight.mul_(1e38)
    path = tmp_path / "broken.pt"
    save_checkpoint(broken, path, {"kind": "unlearned"})
    res = CliRunner().invoke(app, ["audit", "--original", str(ckpts["original"]), "--unlearned", str(path),
                                   "--retrained", str(ckpts["r0"]), "--dataset", "digits",
                                   "--forget-classes", "3", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert got["verdict"] == "collapsed"
    assert len(got["evidence"]) == 1 and "non-finite" in got["evidence"][0]
    assert (tmp_path / "a" / "audit.html").exists()
