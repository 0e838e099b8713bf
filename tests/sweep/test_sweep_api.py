"""The sweep over the public Python functions (``unlearnkit.__all__``'s callables): each against the families of
harness.py. Contract: harness.assert_api_refused (one UserError, a ValueError, one line naming the argument,
before any work: the guard stops unlearning, the audit's passes and a stream's steps), or acceptance where the
case says why. tests/unit/test_api_inputs.py holds the finer cases of uk.unlearn and uk.audit."""
from __future__ import annotations

import pytest
import torch
from harness import FAMILIES, HOSTILE, SECRET, assert_api_refused
from torch import nn

import unlearnkit as uk

D, K = 16, 4


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, 8), nn.ReLU(), nn.Linear(8, K))


def parts(n: int = 40) -> dict:
    y = torch.arange(n) % K
    x = torch.randn(n, D, generator=torch.Generator().manual_seed(0)) + y[:, None]
    f = y == 1
    return {"forget": (x[f], y[f]), "retain": (x[~f], y[~f]), "test": (x, y)}


def nan_model() -> nn.Module:
    m = mlp()
    with torch.no_grad():
        m[0].weight[0, 0] = float("nan")
    return m


def unlearn(**kw):
    args = {"method": "finetune", **parts(), **kw}
    args.pop("test")
    model = args.pop("model", None) or mlp()
    return lambda: uk.unlearn(model, args.pop("method"), **args)


def audit(**kw):
    args = {"original": mlp(), "unlearned": mlp(), "retrained": [mlp(), mlp()], **parts(), "progress": False, **kw}
    return lambda: uk.audit(args.pop("original"), args.pop("unlearned"), args.pop("retrained"), **args)


def auditor(**kw):
    args = {"original": mlp(), "retrained": [mlp(), mlp()], **parts(), "progress": False, **kw}
    return lambda: uk.Auditor(args.pop("original"), args.pop("retrained"), **args)


def sequence(**kw):
    args = {"model": "small_cnn", "method": "finetune", "requests": [{"classes": [3]}], **kw}
    return lambda: uk.unlearn_sequence(args.pop("model"), args.pop("method"), args.pop("requests"), **args)


def refs(**kw):
    args = {"make_model": mlp, **parts(), "k": 2, "progress": False, **kw}
    args.pop("test")
    return lambda: uk.train_references(args.pop("make_model"), **args)


def split(**kw):
    def call():
        bundle = kw.pop("bundle", None) or uk.load_dataset("digits")
        return uk.make_split(bundle, kw.pop("spec", None) or uk.ForgetSpec(classes=(3,)), **kw)
    return call


def _nan_x():
    x, y = parts()["forget"]
    x = x.clone()
    x[0, 0] = float("nan")
    return x, y


def _dup_forget():
    p = parts()
    return torch.cat([p["retain"][0], p["forget"][0]]), torch.cat([p["retain"][1], p["forget"][1]])


#: (family, what, the call, words the message names)
CASES = [
    # uk.unlearn
    ("wrong type", "unlearn model=str", lambda f: unlearn(model="model.pt"), ["model"]),
    ("wrong type", "unlearn method=3", lambda f: unlearn(method=3), ["method"]),
    ("wrong type", "unlearn forget=5", lambda f: unlearn(forget=5), ["forget"]),
    ("wrong type", "unlearn seed='0'", lambda f: unlearn(seed="0"), ["seed"]),
    ("wrong type", "unlearn epochs='x'", lambda f: unlearn(epochs="x"), ["epochs"]),
    ("empty", "unlearn method=''", lambda f: unlearn(method=""), ["method"]),
    ("empty", "unlearn forget empty", lambda f: unlearn(forget=(torch.zeros(0, D), torch.zeros(0).long())),
     ["forget"]),
    ("huge", "unlearn seed 2**70", lambda f: unlearn(seed=2**70), ["seed"]),
    ("huge", "unlearn epochs 10**30", lambda f: unlearn(epochs=10**30), ["epochs"]),
    ("huge", "unlearn lr 1e300", lambda f: unlearn(lr=1e300), ["lr"]),
    ("NaN/inf", "unlearn lr nan", lambda f: unlearn(lr=float("nan")), ["lr"]),
    ("NaN/inf", "unlearn NaN weights", lambda f: unlearn(model=nan_model()), ["model", "non-finite"]),
    ("NaN/inf", "unlearn NaN inputs", lambda f: unlearn(forget=_nan_x()), ["forget", "non-finite"]),
    ("duplicate", "unlearn forget rows in retain", lambda f: unlearn(retain=_dup_forget()), ["forget", "retain"]),
    ("contradictory", "unlearn method object + keywords",
     lambda f: unlearn(method=uk.unlearn.__globals__["METHODS"].get("finetune")(), epochs=2), ["not both"]),
    ("hostile name", "unlearn method escape", lambda f: unlearn(method=HOSTILE[0]), ["method"]),
    ("hostile name", "unlearn method markup", lambda f: unlearn(method=HOSTILE[2]), ["method"]),
    ("hostile name", "unlearn unknown keyword", lambda f: unlearn(**{"bogus\x1b[31m": 1}), ["bogus"]),
    # uk.train_references
    ("wrong type", "train_references make_model=model", lambda f: refs(make_model=mlp()), ["make_model"]),
    ("wrong type", "train_references fit=3", lambda f: refs(fit=3), ["fit"]),
    ("wrong type", "train_references k='8'", lambda f: refs(k="8"), ["k"]),
    ("wrong type", "train_references recipe=list", lambda f: refs(recipe=[0.1]), ["recipe"]),
    ("empty", "train_references seeds=[]", lambda f: refs(k=None, seeds=[]), ["seeds"]),
    ("empty", "train_references retain empty", lambda f: refs(retain=(torch.zeros(0, D), torch.zeros(0).long())),
     ["retain"]),
    ("huge", "train_references k 10**30", lambda f: refs(k=10**30), ["k"]),
    ("huge", "train_references seed 2**40", lambda f: refs(k=None, seeds=[0, 2**40]), ["seeds"]),
    ("NaN/inf", "train_references recipe lr nan", lambda f: refs(recipe={"lr": float("nan")}), ["lr"]),
    ("NaN/inf", "train_references NaN retain", lambda f: refs(retain=_nan_x()), ["retain", "non-finite"]),
    ("duplicate", "train_references seeds twice", lambda f: refs(k=None, seeds=[1, 1]), ["seeds"]),
    ("duplicate", "train_references forget rows in retain", lambda f: refs(retain=_dup_forget()), ["forget"]),
    ("contradictory", "train_references fit + recipe", lambda f: refs(fit=lambda m, d, s: m, recipe={}),
     ["not both"]),
    ("contradictory", "train_references k and seeds", lambda f: refs(k=3, seeds=[0, 1]), ["k", "seeds"]),
    ("hostile name", "train_references recipe key escape", lambda f: refs(recipe={HOSTILE[0]: 1}), ["recipe"]),
    # uk.audit and uk.Auditor
    ("wrong type", "audit retrained=5", lambda f: audit(retrained=5), ["retrained"]),
    ("wrong type", "audit layers dict", lambda f: audit(layers={"penultimate": 1}), ["layers"]),
    ("wrong type", "audit n_splits='x'", lambda f: audit(n_splits="x"), ["n_splits"]),
    ("empty", "audit retrained=[]", lambda f: audit(retrained=[]), ["retrained"]),
    ("empty", "audit layers=[]", lambda f: audit(layers=[]), ["layers"]),
    ("empty", "Auditor test empty", lambda f: auditor(test=(torch.zeros(0, D), torch.zeros(0).long())), ["test"]),
    ("huge", "audit n_splits 10**30", lambda f: audit(n_splits=10**30), ["n_splits"]),
    ("NaN/inf", "audit confidence nan", lambda f: audit(confidence=float("nan")), ["confidence"]),
    ("NaN/inf", "Auditor NaN original", lambda f: auditor(original=nan_model()), ["original", "non-finite"]),
    ("duplicate", "audit layers twice", lambda f: audit(layers=["penultimate", "penultimate"]), ["twice"]),
    ("contradictory", "audit config + keywords", lambda f: audit(config=uk.AuditConfig(), n_splits=3), ["config"]),
    ("hostile name", "audit layers string", lambda f: audit(layers="penultimate"), ["layers"]),
    ("hostile name", "audit layer ../", lambda f: audit(layers=["../../etc"]), ["layer"]),
    ("hostile name", "Auditor input_key escape", lambda f: auditor(input_key=3), ["input_key"]),
    # uk.unlearn_sequence
    ("wrong type", "sequence model=module", lambda f: sequence(model=mlp()), ["model"]),
    ("empty", "sequence requests=[]", lambda f: sequence(requests=[]), ["requests", "empty"]),
    ("empty", "sequence data=''", lambda f: sequence(data=""), ["dataset"]),
    ("huge", "sequence epochs 10**30", lambda f: sequence(epochs=10**30), ["epochs"]),
    ("NaN/inf", "sequence seed nan", lambda f: sequence(seed=float("nan")), ["seed"]),
    ("NaN/inf", "sequence random nan", lambda f: sequence(requests=[{"random": float("nan")}]), ["random"]),
    ("special file", "sequence out FIFO", lambda f: sequence(out=f.bad["fifo"]), ["out"]),
    ("special file", "sequence indices FIFO", lambda f: sequence(requests=[{"indices": str(f.bad["fifo"])}]),
     ["FIFO"]),
    ("non-UTF-8", "sequence indices non-UTF-8", lambda f: sequence(requests=[{"indices": str(f.bad["non-utf8"])}]),
     ["not UTF-8"]),
    ("duplicate", "sequence a class twice", lambda f: sequence(requests=[{"classes": [3]}, {"classes": [3]}]),
     ["class 3"]),
    ("contradictory", "sequence two kinds", lambda f: sequence(requests=[{"classes": [3], "random": 0.1}]),
     ["exactly one"]),
    ("hostile name", "sequence indices password file", lambda f: sequence(requests=[{"indices": str(f.bad["secret"])}]),
     ["item 1 of line 1"]),
    ("hostile name", "sequence data ../", lambda f: sequence(data="../../etc"), ["dataset"]),
    # checkpoints
    ("wrong type", "load_checkpoint(3)", lambda f: (lambda: uk.load_checkpoint(3)), ["path"]),
    ("wrong type", "save_checkpoint(str)", lambda f: (lambda: uk.save_checkpoint("x", f.root / "x.pt")),
     ["create_model"]),
    ("empty", "load_checkpoint('')", lambda f: (lambda: uk.load_checkpoint("")), ["path"]),
    ("empty", "load_checkpoint empty file", lambda f: (lambda: uk.load_checkpoint(f.bad["empty"])), ["corrupt"]),
    ("huge", "load_checkpoint huge file", lambda f: (lambda: uk.load_checkpoint(f.bad["huge"])), ["checkpoint"]),
    ("special file", "load_checkpoint /dev/zero", lambda f: (lambda: uk.load_checkpoint("/dev/zero")),
     ["character device"]),
    ("special file", "load_checkpoint FIFO", lambda f: (lambda: uk.load_checkpoint(f.bad["fifo"])), ["FIFO"]),
    ("special file", "save_checkpoint onto a FIFO", lambda f: (lambda: uk.save_checkpoint(_small(), f.bad["fifo"])),
     ["FIFO"]),
    ("special file", "save_checkpoint onto a socket",
     lambda f: (lambda: uk.save_checkpoint(_small(), f.bad["socket"])), ["socket"]),
    ("wrong type", "save_checkpoint onto a folder", lambda f: (lambda: uk.save_checkpoint(_small(), f.root)),
     ["folder"]),
    ("non-UTF-8", "load_checkpoint non-UTF-8 bytes", lambda f: (lambda: uk.load_checkpoint(f.bad["non-utf8"])),
     ["corrupt"]),
    ("hostile name", "load_checkpoint password file", lambda f: (lambda: uk.load_checkpoint(f.bad["secret"])),
     ["corrupt"]),
    # data, splits, models
    ("wrong type", "load_dataset(3)", lambda f: (lambda: uk.load_dataset(3)), ["dataset"]),
    ("empty", "load_dataset('')", lambda f: (lambda: uk.load_dataset("")), ["dataset"]),
    ("huge", "load_dataset data_seed 2**70", lambda f: (lambda: uk.load_dataset("digits", data_seed=2**70)),
     ["data_seed"]),
    ("NaN/inf", "load_dataset data_seed nan", lambda f: (lambda: uk.load_dataset("digits", data_seed=float("nan"))),
     ["data_seed"]),
    ("hostile name", "load_dataset escape", lambda f: (lambda: uk.load_dataset(HOSTILE[0])), ["dataset"]),
    ("wrong type", "ForgetSpec classes 'abc'", lambda f: (lambda: uk.ForgetSpec(classes="abc")), ["classes"]),
    ("empty", "ForgetSpec()", lambda f: (lambda: uk.ForgetSpec()), ["exactly one"]),
    ("NaN/inf", "ForgetSpec random nan", lambda f: (lambda: uk.ForgetSpec(random=float("nan"))), ["random"]),
    ("contradictory", "ForgetSpec classes + random", lambda f: (lambda: uk.ForgetSpec(classes=(3,), random=0.1)),
     ["exactly one"]),
    ("wrong type", "make_split of a name", lambda f: split(bundle="digits"), ["bundle"]),
    ("huge", "make_split class 99", lambda f: split(spec=uk.ForgetSpec(classes=(99,))), ["class 99"]),
    ("huge", "make_split seed 2**70", lambda f: split(seed=2**70), ["seed"]),
    ("special file", "make_split indices FIFO", lambda f: split(spec=uk.ForgetSpec(indices_file=str(f.bad["fifo"]))),
     ["FIFO"]),
    ("wrong type", "create_model(3)", lambda f: (lambda: uk.create_model(3, num_classes=10)), ["model"]),
    ("empty", "create_model num_classes 0", lambda f: (lambda: uk.create_model("small_cnn", num_classes=0)),
     ["num_classes"]),
    ("huge", "create_model num_classes 10**30", lambda f: (lambda: uk.create_model("small_cnn", num_classes=10**30)),
     ["num_classes"]),
    ("NaN/inf", "create_model image_size nan",
     lambda f: (lambda: uk.create_model("small_cnn", num_classes=10, image_size=float("nan"))), ["image_size"]),
    ("hostile name", "create_model ../", lambda f: (lambda: uk.create_model("../../x", num_classes=10)), ["model"]),
    ("wrong type", "audit_layers of a plain module", lambda f: (lambda: uk.audit_layers(mlp())), ["audit layers"]),
    ("NaN/inf", "AuditConfig confidence nan", lambda f: (lambda: uk.AuditConfig(confidence=float("nan"))),
     ["confidence"]),
]


def _small():
    return uk.create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}|{c[1]}" for c in CASES])
def test_every_public_function_against_each_family(case, sweep_files, guard):
    family, _, build, words = case
    before = {p.name for p in sweep_files.root.iterdir()}
    assert_api_refused(build(sweep_files), tuple(words))
    assert {p.name for p in sweep_files.root.iterdir()} == before  # nothing written beside the inputs
    assert SECRET not in str(sweep_files.bad["secret"].name)


def test_every_family_is_swept_from_python():
    assert set(FAMILIES) <= {c[0] for c in CASES}, set(FAMILIES) - {c[0] for c in CASES}


def test_every_public_function_is_swept():
    """Each public callable of ``unlearnkit.__all__`` is named by a case (or here, with why not)."""
    exempt = {"tune_cpu_allocator": "takes no argument", "capture": "a context manager over a model's layers "
              "(layers checked as uk.audit's are)", "extract": "the lower-level pass; its inputs come from the API",
              "AuditReport": "built by the audit, not by users", "AuditResult": "built by the audit",
              "UnlearnResult": "built by uk.unlearn", "UnlearningSplit": "built by make_split",
              "StreamResults": "built by the stream", "UserError": "the error itself", "DATASETS": "a registry",
              "MODELS": "a registry"}
    named = " ".join(c[1] for c in CASES).lower()
    aliases = {"unlearn_sequence": "sequence", "make_split": "make_split", "Auditor": "auditor"}
    missing = [n for n in uk.__all__ if not n.startswith("__") and n not in exempt
               and aliases.get(n, n).lower() not in named]
    assert not missing, missing
