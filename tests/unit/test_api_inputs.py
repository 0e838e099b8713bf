"""The Python API's bad arguments (issue 30): one ``unlearnkit.UserError`` naming the argument, raised
before any work (a guard stops the tests where unlearning or the audit's passes would begin); and the
inputs that must work: flat ``[N, D]`` rows for a plain MLP, dict items, models returning ``.logits``."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import unlearnkit as uk
from unlearnkit import UserError

D, K = 16, 4


class WorkStarted(Exception):
    """Raised where unlearning or the audit's forward passes would begin."""


@pytest.fixture(autouse=True)
def guard(monkeypatch):
    import unlearnkit.audit.user as user
    from unlearnkit.methods.base import UnlearningMethod

    def stop(*args, **kwargs):
        raise WorkStarted

    monkeypatch.setattr(UnlearningMethod, "unlearn", stop)
    monkeypatch.setattr(user, "model_outputs", stop)
    monkeypatch.setattr(user, "_audit", stop)


def mlp(d: int = D) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d, 8), nn.ReLU(), nn.Linear(8, K))


def rows(n: int = 40, d: int = D) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.arange(n) % K
    return torch.randn(n, d, generator=torch.Generator().manual_seed(0)) + y[:, None], y


def parts(n: int = 40, d: int = D) -> dict:
    x, y = rows(n, d)
    f = y == 1
    return {"forget": (x[f], y[f]), "retain": (x[~f], y[~f]), "test": (x, y)}


def refused(call, *names: str) -> str:
    """The UserError ``call`` raises; every one of ``names`` is in its message."""
    with pytest.raises(UserError) as info:
        call()
    message = str(info.value)
    assert all(name in message for name in names), message
    return message


def unlearn(model=None, **kw):
    args = {"forget": parts()["forget"], "retain": parts()["retain"], **kw}
    return lambda: uk.unlearn(model if model is not None else mlp(), "gradient_ascent", **args)


def audit(original=None, unlearned=None, retrained=None, **kw):
    args = {**parts(), **kw}
    return lambda: uk.audit(original if original is not None else mlp(), unlearned if unlearned is not None else mlp(),
                            retrained if retrained is not None else mlp(), **args)


def test_the_guard_is_reached_by_good_calls():
    """Good arguments get past every check (to the guard): the checks below are not refusing everything."""
    with pytest.raises(WorkStarted):
        unlearn()()
    with pytest.raises(WorkStarted):
        audit()()


def test_missing_data_is_named():
    refused(unlearn(forget=None), "forget")
    refused(lambda: uk.unlearn(mlp(), "finetune", forget=parts()["forget"]), "retain")
    for name in ("forget", "retain", "test"):
        refused(audit(**{name: None}), name)


def test_seed_and_preset_are_checked():
    refused(unlearn(seed=2**70), "seed")
    refused(unlearn(seed=-1), "seed")
    refused(unlearn(seed=1.5), "seed")
    assert "small" in refused(unlearn(preset="bogus"), "preset", "bogus")


def test_labels_must_be_class_indices():
    x, y = parts()["forget"]
    refused(unlearn(forget=(x, ["cat"] * len(x))), "forget", "labels")
    refused(unlearn(forget=(x, y.float() + 0.5)), "forget", "labels")
    refused(audit(test=(x, y + 10)), "test", "labels outside")


class Pairs(Dataset):
    """(input, class name) items: labels as text."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.zeros(D), "cat"


def test_text_labels_from_a_dataset_are_named():
    refused(unlearn(forget=Pairs()), "forget", "labels")


def test_retrained_and_unlearned_must_be_models():
    refused(audit(retrained=5), "retrained", "int")
    refused(audit(retrained=[mlp(), 5]), "retrained[1]")
    refused(audit(retrained=[]), "retrained")
    refused(audit(unlearned="model.pt"), "unlearned", "str")
    refused(lambda: uk.unlearn(5, "gradient_ascent", forget=parts()["forget"]), "model")


def test_float64_half_meta_and_frozen_models_are_refused():
    refused(unlearn(model=mlp().double()), "model", "float64")
    refused(unlearn(model=mlp().half()), "model", "float16")
    refused(audit(unlearned=mlp().double()), "unlearned", "float64")
    refused(audit(retrained=[mlp(), mlp().to(torch.bfloat16)]), "retrained[1]", "bfloat16")
    with torch.device("meta"):
        ghost = nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, K))
    refused(unlearn(model=ghost), "model", "meta")
    refused(audit(original=ghost), "original", "meta")
    refused(unlearn(model=mlp().requires_grad_(False)), "model", "requires_grad")


def test_inputs_the_model_cannot_take_name_the_model_and_the_data():
    refused(unlearn(model=mlp(d=D + 4)), "model", "forget", f"[4, {D}]")
    refused(audit(original=mlp(d=D + 4)), "original", "forget")
    x, y = parts()["retain"]
    refused(audit(retain=(x[:, :-1], y)), "retain", "shape")


def test_forget_rows_that_are_also_retained_are_counted():
    x, y = rows()
    f = y == 1
    some = torch.cat([x[~f], x[f][:3]]), torch.cat([y[~f], y[f][:3]])
    assert "3 of the 10 forget rows" in refused(unlearn(retain=some), "forget", "retain")
    refused(unlearn(forget=(x, y), retain=(x, y)), "all of the 40 forget rows")
    refused(audit(retain=(x, y)), "forget", "retain")


def test_empty_retain_is_named():
    x, y = rows()
    refused(unlearn(retain=(x[:0], y[:0])), "retain")
    refused(unlearn(retain=TensorDataset(x[:0], y[:0])), "retain", "empty")


def test_dict_items_with_unknown_keys_are_named():
    x, y = parts()["forget"]
    items = [{"pixels": xi, "target": yi} for xi, yi in zip(x, y)]
    refused(unlearn(forget=items), "forget", "input_key", "'pixels'")
    refused(unlearn(forget=items, input_key="pixels"), "forget", "label_key")
    refused(unlearn(forget=items, input_key="pixels", label_key="label"), "label_key", "'label'")
    refused(unlearn(input_key=3), "input_key")


def test_audit_settings_and_report_locations(tmp_path):
    refused(audit(n_split=3), "n_split")
    refused(audit(config={"n_splits": 3}), "config")
    from unlearnkit.audit.user import AuditResult

    report = AuditResult.__new__(AuditResult)
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    refused(lambda: report.save(plain), "out_dir", "is a file")
    refused(lambda: report.save(plain / "audit"), "out_dir", "cannot be written")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes anywhere
        pytest.skip("this user can write into a read-only folder")
    refused(lambda: report.save(locked / "audit"), "out_dir", "not writable")
    assert not (locked / "audit").exists()


def test_flat_rows_reach_the_method():
    """[N, D] rows for a plain MLP were refused with 'forget has 1 inputs but 80 labels'."""
    with pytest.raises(WorkStarted):
        unlearn()()
    from unlearnkit.data.user import as_array_data

    x, y = rows()
    data = as_array_data((x, y), "forget")
    xb, yb = next(data.batches(8))
    assert xb.shape == (8, D) and torch.equal(xb, x[:8]) and torch.equal(yb, y[:8])


class HFLike(nn.Module):
    """A model returning an output object (as Hugging Face models do), with ``.logits``."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(D, 8), nn.ReLU())
        self.classifier = nn.Linear(8, K)

    def forward(self, pixel_values):
        return SimpleNamespace(logits=self.classifier(self.body(pixel_values)), hidden=None)


class Wrapping(nn.Module):
    """A linear model whose output is ``wrap(logits)``."""

    def __init__(self, wrap):
        super().__init__()
        self.fc, self.wrap = nn.Linear(D, K), wrap

    def forward(self, v):
        return self.wrap(self.fc(v))


def test_logits_objects_dicts_and_tuples_are_read_without_changing_the_users_model():
    from unlearnkit.audit.user import probe
    from unlearnkit.models.discover import users_class

    x = rows()[0][:4]
    model = HFLike()
    adapted, k = probe(model, x, "model")
    assert k == K and isinstance(adapted(x), torch.Tensor) and isinstance(adapted, HFLike)
    assert not isinstance(model(x), torch.Tensor)  # the user's model still returns its object
    assert list(adapted.state_dict()) == list(model.state_dict())
    assert adapted.classifier is model.classifier  # the same parameters, no copy
    assert type(users_class(adapted)) is HFLike
    for wrap in (lambda z: {"logits": z}, lambda z: (z, None)):
        adapted, k = probe(Wrapping(wrap), x, "original")
        assert k == K and isinstance(adapted(x), torch.Tensor)
    refused(lambda: probe(nn.Sequential(nn.Linear(D, K), nn.Flatten(0)), x, "original"), "original",
            "[batch, classes]")


def test_dict_datasets_are_read_with_default_and_named_keys():
    from unlearnkit.data.user import as_array_data

    x, y = rows(12)

    class Dicts(Dataset):
        def __len__(self):
            return len(y)

        def __getitem__(self, i):
            return {"pixel_values": x[i], "label": int(y[i]), "id": f"row{i}"}

    for data in (Dicts(), DataLoader(Dicts(), batch_size=5), [{"image": xi, "labels": yi} for xi, yi in zip(x, y)]):
        got = as_array_data(data, "forget")
        assert torch.equal(got.x, x) and torch.equal(got.y, y)
    named = [{"img": xi, "cls": yi} for xi, yi in zip(x, y)]
    got = as_array_data(named, "forget", input_key="img", label_key="cls")
    assert torch.equal(got.x, x) and torch.equal(got.y, y)


def test_non_finite_original_or_reference_is_named_by_audit_and_auditor():
    """NaN weights of the original or a reference: refused before any pass, naming the argument, by uk.audit
    and by uk.Auditor alike (a broken *unlearned* model is audited: its verdict is collapsed)."""
    broken = mlp()
    with torch.no_grad():
        broken[0].weight[0, 0] = float("nan")
    refused(lambda: uk.Auditor(broken, mlp(), **parts()), "original", "non-finite")
    refused(lambda: uk.audit(mlp(), mlp(), [mlp(), broken], **parts()), "retrained[1]", "non-finite")


# --- issue 44: the last tracebacks and silent acceptances of the Python API ----------------------

def test_user_error_is_a_value_error():
    """README and usage.md promise it: ``except ValueError`` catches every refusal (the subclasses too)."""
    from unlearnkit.errors import CheckpointError, DataUnavailableError, UnknownNameError

    for cls in (UserError, CheckpointError, DataUnavailableError, UnknownNameError):
        assert issubclass(cls, ValueError), cls
    with pytest.raises(ValueError, match="seed"):
        unlearn(seed=-1)()


@pytest.mark.parametrize("layers,words", [
    (["penultimate", "penultimate"], ["layers", "'penultimate' twice"]),
    ([], ["layers is empty"]),
    ("penultimate", ["layers must be a list", "['penultimate']"]),
    (["penultimate", ""], ["layers[1]"]),
    ([3], ["layers[0]", "3"]),
    ({"penultimate": 1}, ["layers must be a list"]),
], ids=["duplicate", "empty", "a-string", "empty-name", "not-text", "a-dict"])
def test_layers_is_a_list_of_distinct_names(layers, words):
    """``layers=["penultimate", "penultimate"]`` was an IndexError, ``[]`` accepted, ``"penultimate"`` read as
    the layers p, e, n...: each is one UserError naming ``layers``, from uk.audit and uk.Auditor alike."""
    refused(audit(layers=layers), *words)
    refused(lambda: uk.Auditor(mlp(), [mlp(), mlp()], layers=layers, **parts()), *words)


def test_named_layers_still_work():
    with pytest.raises(WorkStarted):
        audit(layers=["penultimate"])()
    with pytest.raises(WorkStarted):
        audit(layers=("0", "penultimate"))()


def test_unlearn_refuses_a_model_with_non_finite_weights():
    """A NaN weight: one UserError naming ``model`` and the tensor, before any work (was NonFiniteLossError
    from the method's first step)."""
    broken = mlp()
    with torch.no_grad():
        broken[2].bias[0] = float("inf")
    refused(unlearn(model=broken), "model", "non-finite", "2.bias")


def test_hyperparameters_that_diverge_are_a_user_error(monkeypatch):
    """The loss becoming NaN under the caller's hyperparameters: a UserError (naming the method), not the
    method's NonFiniteLossError."""
    from unlearnkit.errors import NonFiniteLossError
    from unlearnkit.methods.base import UnlearningMethod

    def diverge(self, *args, **kwargs):
        raise NonFiniteLossError(f"{self.name}: loss became nan at step 2; lower its learning rate")

    monkeypatch.setattr(UnlearningMethod, "unlearn", diverge)
    refused(unlearn(lr=1e3), "gradient_ascent", "loss became nan", "unchanged")


@pytest.mark.parametrize("part", ["forget", "retain", "test"])
@pytest.mark.parametrize("which", ["inputs", "labels"])
def test_data_on_the_meta_device_is_named(part, which):
    """Tensors on the ``meta`` device (a shape, no values) were a NotImplementedError from the first copy."""
    x, y = parts()[part]
    data = (x.to("meta"), y) if which == "inputs" else (x, y.to("meta"))
    refused(audit(**{part: data}), part, which, "meta device")
    if part != "test":
        refused(unlearn(**{part: data}), part, which, "meta device")


def test_a_missing_test_argument_is_a_user_error():
    """usage.md promises a UserError naming ``test`` when it is left out (it was Python's TypeError)."""
    p = parts()
    refused(lambda: uk.audit(mlp(), mlp(), mlp(), forget=p["forget"], retain=p["retain"]), "test")
    refused(lambda: uk.Auditor(mlp(), mlp(), forget=p["forget"], retain=p["retain"]), "test")
