"""Conformance suite: the same behavioural checks on every registered method (like sklearn's
check_estimator), on the bundled digits data and the small CNN -- except for methods that only work
on vertical federated models (``requires_vfl``: target), which get the digits VFL model (2 parties,
Mirage's bottom at width 16) instead, and are checked to refuse the small CNN."""
from __future__ import annotations

import copy
import json
import re
from dataclasses import fields

import pytest
import torch

from unlearnkit import ForgetSpec, make_split
from unlearnkit.errors import NonFiniteLossError
from unlearnkit.evaluation import evaluate
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.models.zoo import head_of

ALL = METHODS.names()


def fast(cls, **extra):
    """The small preset with loops shortened to one epoch, for the structural checks."""
    names = {f.name for f in fields(cls)}
    kw = {k: v for k, v in {"epochs": 1}.items() if k in names}
    if cls.name == "retrain":
        kw = {"recipe": {"lr": 0.05, "epochs": 1, "batch_size": 64}}
    if "base" in names:  # a plug-in: shorten its base method
        base = dict(cls.PRESETS.get("small", {}).get("base", {}))
        base_fields = {f.name for f in fields(METHODS.get(cls.name.split("+", 1)[1]))}
        kw = {"base": {**base, **({"epochs": 1} if "epochs" in base_fields else {})}}
    kw.update(extra)
    return cls.from_preset("small", **kw)


def model_for(cls, request):
    """The digits model a method is checked on: the VFL model for VFL-only methods, else the small CNN."""
    return request.getfixturevalue("digits_vfl_original" if cls.requires_vfl else "digits_original")


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def no_hooks(model):
    return all(not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks) for m in model.modules())


@pytest.mark.parametrize("name", ALL)
def test_does_not_mutate_and_keeps_shapes(name, digits_split, request):
    cls = METHODS.get(name)
    digits_original = model_for(cls, request)
    before = state(digits_original)
    xf = digits_split.train_forget.x.clone()
    res = fast(cls).unlearn(digits_original, digits_split, original=digits_original, seed=0)
    after = state(digits_original)
    assert all(torch.equal(before[k], after[k]) for k in before), "input model was mutated"
    assert torch.equal(xf, digits_split.train_forget.x), "input data was mutated"
    new = res.model.state_dict()
    if not cls.changes_head:
        assert {k: tuple(v.shape) for k, v in new.items()} == {k: tuple(v.shape) for k, v in before.items()}
    assert res.model is not digits_original
    assert no_hooks(res.model) and no_hooks(digits_original)
    assert res.runtime_s > 0 and isinstance(res.stop_reason, str)


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_weights(name, digits_split, request):
    m = fast(METHODS.get(name))
    digits_original = model_for(type(m), request)
    a = m.unlearn(digits_original, digits_split, original=digits_original, seed=3).model.state_dict()
    b = m.unlearn(digits_original, digits_split, original=digits_original, seed=3).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ALL)
def test_hyperparameters_round_trip(name):
    cls = METHODS.get(name)
    for preset in ("reference", "small"):
        m = cls.from_preset(preset)
        params = m.params()
        assert json.loads(json.dumps(params)) == json.loads(json.dumps(params))  # JSON-safe
        assert type(m)(**copy.deepcopy(params)) == m
    assert cls.paper, f"{name} must name its paper/reference"


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kind", ["one_sample", "random"])
def test_small_and_random_forget_sets(name, kind, digits, request, tmp_path):
    digits_original = model_for(METHODS.get(name), request)
    if kind == "one_sample":
        f = tmp_path / "idx.txt"
        f.write_text("7\n")
        split = make_split(digits, ForgetSpec(indices_file=str(f)))
        assert len(split.train_forget) == 1
    else:
        split = make_split(digits, ForgetSpec(random=0.05), seed=1)
    res = fast(METHODS.get(name)).unlearn(digits_original, split, original=digits_original, seed=0)
    assert all(torch.isfinite(p).all() for p in res.model.parameters())


@pytest.mark.parametrize("name", ALL)
def test_non_finite_stops_with_clear_error(name, digits_split, request):
    cls = METHODS.get(name)
    if cls.starts_from_scratch:
        pytest.skip(f"{name} re-initialises the model: a broken input model is not an error")
    broken = copy.deepcopy(model_for(cls, request))
    with torch.no_grad():
        head_of(broken).weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteLossError, match=re.escape(name)):
        fast(cls).unlearn(broken, digits_split, original=broken, seed=0)


@pytest.mark.parametrize("name", ALL)
def test_reduces_forget_accuracy_on_digits(name, digits_split, request):
    cls = METHODS.get(name)
    digits_original = model_for(cls, request)
    if not cls.reduces_forget_acc:
        pytest.skip(f"{name} does not claim to lower forget accuracy by itself")
    before = evaluate(digits_original, digits_split)["forget_acc"]
    kw = {"recipe": {"lr": 0.05, "epochs": 5, "batch_size": 64}} if cls.starts_from_scratch else {}
    res = cls.from_preset("small", "digits", **kw).unlearn(digits_original, digits_split, original=digits_original, seed=0)
    after = evaluate(res.model, digits_split)["forget_acc"]
    assert after < before - 20, f"{name}: forget accuracy {before:.1f} -> {after:.1f}"


@pytest.mark.parametrize("name", [n for n in ALL if METHODS.get(n).requires_vfl])
def test_vfl_only_methods_refuse_other_models(name, digits_split, digits_original):
    with pytest.raises(UserError, match="--setting vfl"):
        fast(METHODS.get(name)).unlearn(digits_original, digits_split, original=digits_original, seed=0)


def test_dataset_preset_overrides_the_shared_one():
    ssd = METHODS.get("ssd")
    assert ssd.from_preset("small").selection_weighting == 3.0
    assert ssd.from_preset("small", "digits").selection_weighting == 2.25
    assert ssd.from_preset("small", "mnist5k").selection_weighting == 3.0
    assert ssd.from_preset("small", "digits", selection_weighting=7.0).selection_weighting == 7.0
