"""`unlearnkit audit --train-references K`: references the auditor trains, with seeds the party audited cannot know."""
from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from unlearnkit import load_checkpoint, save_checkpoint
from unlearnkit.audit.integrity import DRAWN, reference_seeds, scope, scope_evidence
from unlearnkit.cli import app


def test_reference_seeds_come_from_the_audit_seed_and_avoid_given_ones():
    a = reference_seeds(123, 16)
    assert a == reference_seeds(123, 16)  # repeatable with the audit seed
    assert len(set(a)) == 16 and all(0 <= s < 2 ** 31 - 1 for s in a)
    assert a[:4] == reference_seeds(123, 4)  # K is a prefix: more references keep the first ones
    assert set(a).isdisjoint(reference_seeds(124, 16))  # another audit seed, other references
    assert set(a).isdisjoint(range(0, 64))  # not the docs' or a run's seeds
    assert reference_seeds(123, 3, avoid=a[:2])[:1] == [a[2]]


def test_the_scope_says_drawn_only_when_the_audit_drew_every_reference():
    drawn = {"source": "unlearnkit (audit --train-references: seed drawn from the audit seed)", DRAWN: True}
    assert scope([drawn, drawn]) == {"drawn": True, "drawn_count": 2, "note": scope([drawn])["note"]}
    assert scope([drawn, {"source": "user"}])["drawn_count"] == 1
    for given in ([drawn, {"source": "user"}], [{"source": "unlearnkit run", "seed": 1}], [],
                  [{DRAWN: "yes"}]):  # a file, a run's guessable seeds, none, or a key that is not True
        got = scope(given)
        assert got["drawn"] is False
        assert f"{sum(r.get(DRAWN) is not True for r in given)} of {len(given)} references were given" in got["note"]
        assert "--train-references" in got["note"]
        assert scope_evidence("erased", got) == [f"references: {got['note']}"]
        assert scope_evidence("suppressed", got) == [] and scope_evidence("inconclusive", got) == []
    assert scope_evidence("erased", scope([drawn])) == []


@pytest.fixture()
def trained(tmp_path, monkeypatch):
    """An original trained by `unlearnkit train` (2 epochs: the references share its recipe) and its masked copy."""
    monkeypatch.setenv("UNLEARNKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("UNLEARNKIT_PROGRESS", "0")
    o = tmp_path / "o.pt"
    res = CliRunner().invoke(app, ["train", "--dataset", "digits", "--epochs", "2", "--out", str(o),
                                   "--device", "cpu"])
    assert res.exit_code == 0, res.output
    model, meta = load_checkpoint(o)
    with torch.no_grad():
        model.fc.bias[3] = -1e4  # the output masked, the representation the original's
    u = tmp_path / "u.pt"
    save_checkpoint(model, u, {"kind": "unlearned"})
    return o, u


def _audit(o, u, out, *extra):
    return CliRunner().invoke(app, ["audit", "--original", str(o), "--unlearned", str(u), "--dataset", "digits",
                                    "--forget-classes", "3", "--out", str(out), "--no-resurface", "--n-splits", "3",
                                    "--device", "cpu", *extra])


@pytest.mark.heavy  # trains an original and two references and runs two audits (about 15 s)
def test_trained_references_have_the_originals_recipe_seeds_from_the_audit_seed_and_repeat(trained, tmp_path):
    o, u = trained
    res = _audit(o, u, tmp_path / "a", "--train-references", "2", "--audit-seed", "123")
    assert res.exit_code == 0, res.output
    d = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert d["models"]["retrained"]["n"] == 2 and d["audit_seed"] == 123
    refs = d["references"]
    assert [r["seed"] for r in refs] == reference_seeds(123, 2)
    assert all(r["source"].startswith("unlearnkit (audit --train-references") for r in refs)
    assert all(r["recipe"]["epochs"] == 2 for r in refs)  # the original's recipe, not the default's 20 epochs
    assert d["references_scope"]["drawn"] is True  # the audit drew every reference: the party could not choose
    assert d["references_scope"]["note"] in (tmp_path / "a" / "audit.md").read_text()  # under the references' table
    assert d["references_scope"]["note"] in (tmp_path / "a" / "audit.html").read_text()
    again = _audit(o, u, tmp_path / "b", "--train-references", "2", "--audit-seed", "123")
    assert again.exit_code == 0, again.output
    assert [r["sha256"] for r in json.loads((tmp_path / "b" / "audit.json").read_text())["references"]] == \
        [r["sha256"] for r in refs]  # the same references (the model cache): the audit repeats


@pytest.mark.parametrize("extra, message", [
    ([], "--train-references K"),
    (["--train-references", "2", "--test-data", "{t}"], "--train-references trains on unlearnkit's split"),
    (["--train-references", "-1"], "--train-references"),
    (["--train-references", "65"], "--train-references"),
])
def test_bad_reference_options_are_one_line_before_any_work(tmp_path, extra, message):
    t = tmp_path / "t.pt"
    torch.save({"x": torch.zeros(2, 1, 8, 8), "y": torch.zeros(2, dtype=torch.long)}, t)
    model_file = tmp_path / "m.pt"
    from unlearnkit import create_model

    save_checkpoint(create_model("small_cnn", num_classes=10, in_channels=1, image_size=8), model_file, {})
    res = _audit(model_file, model_file, tmp_path / "o", *[e.format(t=t) for e in extra])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_an_original_that_does_not_name_its_recipe_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("UNLEARNKIT_CACHE", str(tmp_path / "cache"))
    from unlearnkit import create_model

    m = tmp_path / "m.pt"
    save_checkpoint(create_model("small_cnn", num_classes=10, in_channels=1, image_size=8), m, {"kind": "original"})
    res = _audit(m, m, tmp_path / "o", "--train-references", "2")
    assert res.exit_code == 2, res.output
    assert "does not say how it was trained" in res.output and "uk.train_references" in res.output
    assert not (tmp_path / "cache").exists()  # nothing trained


@pytest.mark.heavy  # trains an original (2 epochs)
def test_an_original_of_other_labels_is_refused_before_training(trained, tmp_path):
    o, u = trained
    res = CliRunner().invoke(app, ["audit", "--original", str(o), "--unlearned", str(u), "--dataset", "digits",
                                   "--forget-flipped", "0.05", "--train-references", "2", "--out", str(tmp_path / "a")])
    assert res.exit_code == 2, res.output
    assert "was trained on clean labels, unlike this forget request" in res.output
    assert not (tmp_path / "a").exists()
    assert not list((tmp_path / "cache").glob("*retrain*"))  # no reference trained


@pytest.mark.heavy  # trains an original (2 epochs)
def test_an_original_of_another_data_seed_is_refused_before_training(trained, tmp_path):
    o, u = trained
    res = _audit(o, u, tmp_path / "a", "--train-references", "2", "--data-seed", "1")
    assert res.exit_code == 2, res.output
    assert "another --data-seed?" in res.output
    assert not (tmp_path / "a").exists()
    assert not list((tmp_path / "cache").glob("*retrain*"))
