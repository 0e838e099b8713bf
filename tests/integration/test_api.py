"""The Python API on models unlearnkit did not build: layer discovery, user data, uk.unlearn / uk.audit,
the runnable example, and the CLI on plain state dicts."""
from __future__ import annotations

import copy
import dataclasses
import html
import inspect
import json
import runpy
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from typer.testing import CliRunner

import unlearnkit as uk
from unlearnkit.audit import VERDICTS, AuditConfig
from unlearnkit.data.user import as_array_data, user_split
from unlearnkit.errors import UserError
from unlearnkit.models.discover import discover_taps, prepare_taps
from unlearnkit.models.features import extract

ROOT = Path(__file__).resolve().parents[2]
LIGHT = dict(n_splits=3, bn_recalibration=False, head_refit=False, head_relearn=False, relearn=False, n_jobs=1)


class Hand(nn.Module):
    """A hand-written model: activation and pooling in ``forward``, outside any module."""

    def __init__(self, c=1, k=4):
        super().__init__()
        self.stem = nn.Conv2d(c, 6, 3, padding=1)
        self.body = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1), nn.BatchNorm2d(8))
        self.out = nn.Linear(8, k)

    def forward(self, x):
        return self.out(torch.relu(self.body(torch.relu(self.stem(x)))).mean((2, 3)))


class Wrapped(nn.Module):
    """The whole network inside one child (``self.net``): discovery reads the child's children."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Sequential(nn.Conv2d(4, 4, 3), nn.ReLU()),
                                 nn.Flatten(), nn.Linear(4 * 4 * 4, 3))

    def forward(self, x):
        return self.net(x)


def toy(n=60, k=4, c=1, size=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % k
    x = torch.randn(n, c, size, size, generator=g) + y.view(-1, 1, 1, 1).float()
    return x, y


def test_discovery_on_a_torchvision_resnet18():
    torchvision = pytest.importorskip("torchvision")
    m = torchvision.models.resnet18(num_classes=5)
    taps, head = discover_taps(m, torch.randn(2, 3, 32, 32))
    assert head == "fc" and list(taps) == ["layer1", "layer2", "layer3", "layer4", "penultimate"]
    assert taps["penultimate"].at == "input" and taps["layer4"].channels == 512


def test_discovery_on_a_timm_vit_tiny():
    timm = pytest.importorskip("timm")
    m = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=3, img_size=32, depth=2)
    taps, head = discover_taps(m, torch.randn(2, 3, 32, 32))
    assert head == "head" and list(taps) == ["patch_embed", "blocks", "penultimate"]
    prepare_taps(m, torch.randn(2, 3, 32, 32))
    x = torch.randn(3, 3, 32, 32)
    from unlearnkit.data.arrays import ArrayData
    feats = extract(m, ArrayData(x, torch.zeros(3, dtype=torch.long), (0.0,) * 3, (1.0,) * 3), list(taps))
    assert feats["blocks"].shape == (3, 192) and feats["penultimate"].shape == (3, 192)


def test_discovery_on_hand_written_models():
    taps, head = discover_taps(Hand(), torch.randn(2, 1, 8, 8))
    assert head == "out" and list(taps) == ["body", "penultimate"]  # containers with parameters
    taps, head = discover_taps(Wrapped(), torch.randn(2, 1, 8, 8))
    assert head == "net.4" and list(taps) == ["net.2", "penultimate"]


def test_named_layers_by_module_path_and_refusals():
    m = Hand()
    assert prepare_taps(m, torch.randn(2, 1, 8, 8), ["stem", "body.1", "penultimate"]) == \
        ["stem", "body.1", "penultimate"]
    with pytest.raises(UserError, match="'nope' is neither an audit layer"):
        prepare_taps(m, torch.randn(2, 1, 8, 8), ["nope"])

    class NoLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 3, 8)

        def forward(self, x):
            return self.conv(x).flatten(1)

    with pytest.raises(UserError, match="cannot find the classifier"):
        discover_taps(NoLinear(), torch.randn(2, 1, 8, 8))


def test_dataset_loader_and_tensors_read_the_same():
    x, y = toy(10)
    a = as_array_data((x, y), "forget")
    b = as_array_data(TensorDataset(x, y), "forget")
    c = as_array_data(DataLoader(TensorDataset(x, y), batch_size=3), "forget")
    for d in (b, c):
        assert torch.equal(d.x, a.x) and torch.equal(d.y, a.y)
    assert torch.equal(next(a.batches(10))[0], x)  # the user's inputs, untouched by normalisation
    with pytest.raises(UserError, match="forget has 10 inputs but 9 labels"):
        as_array_data((x, y[:9]), "forget")
    with pytest.raises(UserError, match="retain must be a Dataset"):
        as_array_data("data.csv", "retain")


def test_user_split_tells_class_from_sample_forgetting():
    x, y = toy(40)
    f = y == 1
    split = user_split((x[f], y[f]), (x[~f], y[~f]), (x, y), num_classes=4)
    assert split.forgotten_classes == (1,) and len(split.test_forget) == 10 and len(split.test_retain) == 30
    assert torch.equal(split.train_forget.x, x[f])
    some = torch.arange(40) < 5
    split = user_split((x[some], y[some]), (x[~some], y[~some]), (x, y), num_classes=4)
    assert split.spec.kind == "samples" and split.forgotten_classes == () and len(split.test_forget) == 0
    with pytest.raises(UserError, match="labels outside 0..3"):
        user_split((x[f], y[f] + 10), (x[~f], y[~f]), num_classes=4)


def test_unlearn_takes_the_users_model_and_leaves_it_alone():
    x, y = toy(60)
    torch.manual_seed(0)
    model = Hand()
    before = copy.deepcopy(model.state_dict())
    f = y == 2
    result = uk.unlearn(model, "gradient_ascent", forget=TensorDataset(x[f], y[f]), lr=0.05, epochs=2)
    assert isinstance(result, uk.UnlearnResult) and type(result.model) is Hand
    assert result.stop_reason == "completed" and len(result.history) == 2 and result.runtime_s > 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert any(not torch.equal(v, result.model.state_dict()[k]) for k, v in before.items())
    with pytest.raises(UserError, match="finetune needs retain data"):
        uk.unlearn(model, "finetune", forget=(x[f], y[f]))
    with pytest.raises(UserError, match="unknown hyperparameter"):
        uk.unlearn(model, "gradient_ascent", forget=(x[f], y[f]), learning_rate=0.1)
    with pytest.raises(UserError, match="unknown method"):
        uk.unlearn(model, "gradient_ascnt", forget=(x[f], y[f]))


@pytest.mark.parametrize("build", ["hand", "resnet18", "vit"])
def test_audit_any_module_end_to_end(build, tmp_path):
    """Random weights, a few batches: the audit runs on each architecture, finds its layers, and writes
    its files; a reference audited as the 'unlearned' model is never flagged as not forgotten."""
    if build == "hand":
        make, c = (lambda: Hand(c=3)), 3
    elif build == "resnet18":
        tv = pytest.importorskip("torchvision")
        make, c = (lambda: tv.models.resnet18(num_classes=4)), 3
    else:
        timm = pytest.importorskip("timm")
        make, c = (lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=4,
                                             img_size=16, patch_size=8, depth=2)), 3
    x, y = toy(96, c=c, size=16)
    f = y == 0
    torch.manual_seed(0)
    original, unlearned, ref = make(), make(), make()
    report = uk.audit(original, unlearned, ref, forget=(x[f], y[f]), retain=TensorDataset(x[~f], y[~f]),
                      test=(x, y), **LIGHT)
    assert report.verdict in VERDICTS and report.penultimate == "penultimate"
    assert report.layer_names[-1] == "penultimate" and len(report.layer_names) >= 2
    written = report.save(tmp_path / "a")
    assert {p.name for p in written.values()} == {"audit.json", "audit.md", "audit.html"}


def test_audit_refuses_mixed_architectures_and_bad_settings():
    x, y = toy(40)
    f = y == 0
    parts = dict(forget=(x[f], y[f]), retain=(x[~f], y[~f]), test=(x, y))
    with pytest.raises(UserError, match="do not share their audit layers"):
        uk.audit(Hand(), Wrapped4(), Hand(), **parts)
    with pytest.raises(UserError, match="unknown audit setting 'n_split'"):
        uk.audit(Hand(), Hand(), Hand(), n_split=3, **parts)
    with pytest.raises(UserError, match="either config"):
        uk.audit(Hand(), Hand(), Hand(), config=AuditConfig(), n_splits=3, **parts)
    with pytest.raises(UserError, match="retrained must be"):
        uk.audit(Hand(), Hand(), [], **parts)


class Wrapped4(Wrapped):
    def __init__(self):
        super().__init__()
        self.net[-1] = nn.Linear(4 * 4 * 4, 4)


def test_uk_audit_is_a_function_and_the_subpackage_keeps_its_paths():
    import unlearnkit.audit as pkg
    import unlearnkit.audit.core as core
    from unlearnkit.audit import audit as split_audit

    assert inspect.isfunction(uk.audit) and uk.audit.__name__ == "audit" and pkg is uk.audit
    assert {"forget", "retain", "test", "progress"} <= set(inspect.signature(uk.audit).parameters)
    assert split_audit is core.audit and uk.audit.AuditConfig is AuditConfig is uk.AuditConfig
    assert Path(pkg.__file__).name == "__init__.py" and uk.audit.user.audit is uk.audit
    assert isinstance(sys.modules["unlearnkit.audit"], types.ModuleType)


def test_uk_audit_stays_the_function_whichever_is_imported_first():
    """Python binds a subpackage to its parent's attribute when it is first imported: not this one."""
    code = ("import inspect, pydoc, unlearnkit.audit.config\nimport unlearnkit as uk\n"
            "assert inspect.isfunction(uk.audit)\ntext = pydoc.render_doc(uk.audit)\n"
            "assert all(p in text for p in ('forget', 'retain', 'test')), text")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_bring_your_own_model_example_runs(tmp_path, monkeypatch, capsys):
    """The README's example, tiny: the masked model is never certified erased."""
    monkeypatch.setattr(sys, "argv", ["bring_your_own_model.py"])
    mod = runpy.run_path(str(ROOT / "examples" / "bring_your_own_model.py"))
    out = mod["main"](["--epochs", "3", "--width", "8", "--n-splits", "3", "--out", str(tmp_path / "byom")])
    assert out["masked"].verdict != "erased" and out["scrub"].verdict in VERDICTS
    assert (tmp_path / "byom" / "audit.html").is_file()
    assert "the original with class 3 masked at its output" in capsys.readouterr().out


def test_cli_audits_plain_torchvision_state_dicts(tmp_path):
    """``unlearnkit audit --model torchvision:resnet18`` on plain state dicts (random weights, digits)."""
    tv = pytest.importorskip("torchvision")
    from unlearnkit.cli import app

    paths = []
    for i in range(3):
        torch.manual_seed(i)
        m = tv.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, 7, 2, 3, bias=False)  # the user's one-channel stem
        paths.append(tmp_path / f"m{i}.pt")
        torch.save(m.state_dict(), paths[-1])
    r = CliRunner().invoke(app, ["audit", "--original", str(paths[0]), "--unlearned", str(paths[1]),
                                 "--retrained", str(paths[2]), "--model", "torchvision:resnet18", "--dataset",
                                 "digits", "--forget-classes", "3", "--no-resurface", "--n-splits", "3",
                                 "--layers", "layer3,penultimate",
                                 "--out", str(tmp_path / "audit")])
    assert r.exit_code == 0, r.output
    assert "verdict:" in r.output and (tmp_path / "audit" / "audit.json").is_file()


def _counted(model: nn.Module) -> list[int]:
    """A forward counter on ``model`` (a list holding the count)."""
    calls = [0]
    model.register_forward_hook(lambda m, a, out: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_auditor_passes_over_the_original_and_references_once(tmp_path):
    """Two unlearned models audited by one Auditor (and by uk.audit with a list): the original and the three
    references run forward only for the first audit; the reports equal one-off audits' (timing aside)."""
    x, y = toy(96, c=3, size=8)
    f = y == 0
    parts = dict(forget=(x[f], y[f]), retain=(x[~f], y[~f]), test=(x, y))
    torch.manual_seed(0)
    original, refs, unlearned = Hand(c=3), [Hand(c=3) for _ in range(3)], [Hand(c=3), Hand(c=3)]
    with torch.no_grad():  # untrained stand-ins for retrains: like a retrain, none predicts the forget class
        for r in refs:
            r.out.bias[0] = -100.0
    counts = [_counted(m) for m in (original, *refs)]
    auditor = uk.Auditor(original, refs, progress=False, **parts, **LIGHT)
    first = auditor.audit(unlearned[0])
    after_first = [c[0] for c in counts]
    second = auditor.audit(unlearned[1])
    assert [c[0] for c in counts] == after_first and all(n > 0 for n in after_first)
    assert len(auditor.cache) > 0
    # one-off audits draw from the Auditor's audit seed (else each draws its own, and its draws differ)
    both = uk.audit(original, unlearned, refs, progress=False, audit_seed=auditor.config.audit_seed, **parts, **LIGHT)
    assert isinstance(both, list) and len(both) == 2 and all(isinstance(r, uk.AuditResult) for r in both)
    for shared, alone in ((first, both[0]), (second, both[1])):
        assert shared.verdict == alone.verdict
        assert json.dumps({k: v for k, v in shared.to_dict().items() if k != "timing"}, sort_keys=True) == \
            json.dumps({k: v for k, v in alone.to_dict().items() if k != "timing"}, sort_keys=True)
    page = dataclasses.replace(first, evidence=["<script>alert(1)</script> & more"])._repr_html_()
    assert "&lt;script&gt;" in page and "<script>" not in page and page.count("<tr>") == 1 + len(first.layer_names)
    assert html.escape(first.verdict) in first._repr_html_()


class Output:
    """What a Hugging Face classifier returns: an object with ``.logits``."""

    def __init__(self, logits):
        self.logits = logits


class HFNet(Hand):
    def forward(self, pixel_values):
        return Output(super().forward(pixel_values))


class DictRows(torch.utils.data.Dataset):
    """A Hugging Face-style dataset: each item a dict (plus a field the model does not read)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"pixel_values": self.x[i], "label": int(self.y[i]), "file": f"img{i}.png"}


def test_dict_datasets_and_models_returning_logits_objects():
    x, y = toy(96, c=3, size=8)
    f = y == 0
    forget, retain, test = DictRows(x[f], y[f]), DictRows(x[~f], y[~f]), DictRows(x, y)
    torch.manual_seed(0)
    original = HFNet(c=3)
    result = uk.unlearn(original, "finetune", forget=forget, retain=retain, epochs=1, progress=False)
    assert type(result.model) is HFNet and isinstance(result.model(x[:2]), Output)  # the user's class back
    assert isinstance(original(x[:2]), Output) and not hasattr(original, "unlearnkit_taps")
    report = uk.audit(original, result, [HFNet(c=3)], forget=forget, retain=retain, test=test, progress=False,
                      **LIGHT)
    assert report.verdict in VERDICTS and report.layer_names[-1] == "penultimate"


class ConvOnly(nn.Module):
    """No nn.Linear: a 1x1 conv classifier, pooled."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 6, 3, padding=1), nn.ReLU())
        self.head = nn.Conv2d(6, 4, 1)

    def forward(self, x):
        return self.head(self.stem(x)).mean((2, 3))


def test_a_model_without_linear_layers_is_audited_at_its_named_layers():
    x, y = toy(80)
    f = y == 1
    parts = dict(forget=(x[f], y[f]), retain=(x[~f], y[~f]), test=(x, y))
    torch.manual_seed(0)
    models = [ConvOnly() for _ in range(3)]
    with pytest.raises(UserError, match="cannot find the classifier"):
        uk.audit(*models, **parts, progress=False, **LIGHT)
    with pytest.raises(UserError, match="'penultimate' is the input of an nn.Linear"):
        uk.audit(*models, layers=["stem", "penultimate"], **parts, progress=False, **LIGHT)
    report = uk.audit(*models, layers=["stem.0", "stem"], **parts, progress=False, **LIGHT)
    assert report.verdict in VERDICTS and report.layer_names == ["stem.0", "stem"]


def test_flat_rows_and_a_plain_mlp_unlearn_and_audit(digits):
    """sklearn-style [N, 64] rows (digits flattened) and an nn.Sequential MLP, end to end."""
    x, y = digits.train.x.flatten(1)[:400], digits.train.y[:400]
    f = y == 3
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    result = uk.unlearn(mlp, "gradient_ascent", forget=(x[f], y[f]), epochs=1, progress=False)
    assert isinstance(result.model, nn.Sequential) and result.model(x[:2]).shape == (2, 10)
    torch.manual_seed(1)
    reference = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))  # a stand-in: not the original
    report = uk.audit(mlp, result.model, reference, forget=(x[f], y[f]), retain=(x[~f], y[~f]),
                      test=(digits.test.x.flatten(1), digits.test.y), progress=False, **LIGHT)
    assert report.verdict in VERDICTS and report.layer_names[-1] == "penultimate"
