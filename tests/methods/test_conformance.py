"""Conformance suite: the same behavioural checks on every registered method (like sklearn's
check_estimator), on the bundled digits data and the small CNN -- except for methods that only work
on vertical federated models (``requires_vfl``: target), which get the digits VFL model (2 parties,
Mirage's bottom at width 16) instead, and are checked to refuse the small CNN.

The structural checks run each method's ``PRESETS["test"]`` (timm's tiny test models: the cheapest
setting that still runs every part of the method); the forgetting check runs ``PRESETS["small"]``.
A new method file is picked up by the registry, so it is checked here without touching this file.
"""
from __future__ import annotations

import ast
import copy
import json
import math
import re
import typing
from dataclasses import fields
from pathlib import Path

import pytest
import torch

import unlearnkit.methods as methods_pkg
from unlearnkit import ForgetSpec, make_split
from unlearnkit.errors import NonFiniteLossError, UserError
from unlearnkit.evaluation import evaluate
from unlearnkit.methods import METHODS
from unlearnkit.methods.base import NEEDS, Interval, UnlearningMethod, constraint_of, register_method
from unlearnkit.models.zoo import head_of

ALL = METHODS.names()
#: the layers a method must never import (design.md, "Which way the imports run")
ABOVE_METHODS = {"audit", "bench", "cli", "runner", "report"}


def fast(cls):
    """The method with its test preset (the cheapest setting that runs all of it)."""
    return cls.from_preset("test")


def model_for(cls, request):
    """The digits model a method is checked on: the VFL model for VFL-only methods, else the small CNN."""
    return request.getfixturevalue("digits_vfl_original" if cls.requires_vfl else "digits_original")


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def no_hooks(model):
    return all(not (m._forward_hooks or m._forward_pre_hooks or m._backward_hooks) for m in model.modules())


def run_unwrapped(method, model, split):
    """``method._unlearn`` on ``model`` itself, prepared as :meth:`UnlearningMethod.unlearn` prepares its
    working copy, so that a test can look at the very model the method worked on."""
    original = None
    if "original" in method.needs:
        original = copy.deepcopy(model).eval()
        for p in original.parameters():
            p.requires_grad_(False)
    return method._unlearn(model, method.data_for(split), original, torch.device("cpu"),
                           torch.Generator().manual_seed(0), False)


@pytest.mark.parametrize("name", ALL)
def test_declares_reference_small_and_test_presets(name):
    cls = METHODS.get(name)
    assert {"reference", "small", "test"} <= set(cls.PRESETS), f"{name}: PRESETS needs reference, small, test"
    assert cls.paper, f"{name} must name its paper/reference"
    assert set(cls.needs) <= set(NEEDS)


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
def test_hyperparameters_round_trip_through_json(name):
    """Every preset's hyperparameters survive JSON (results.json, the resume hash) and rebuild an equal
    method, and ``params()`` rebuilds one without JSON too."""
    cls = METHODS.get(name)
    for preset in cls.PRESETS:
        preset, _, dataset = preset.partition("@")
        m = cls.from_preset(preset, dataset or None)
        params = m.params()
        assert type(m)(**json.loads(json.dumps(params))) == m, f"{name} ({preset}) does not survive JSON"
        assert type(m)(**copy.deepcopy(params)) == m


def _outside(rule: Interval):
    """A number just outside ``rule``."""
    if rule.low is not None:
        return rule.low if rule.low_open else rule.low - 1
    return rule.high if rule.high_open else rule.high + 1


def bad_values(cls) -> list[tuple[str, object]]:
    """``(field, value)`` pairs each of which must be refused: a wrong type for every field, NaN for
    every float, and a number outside the field's :class:`Interval` where it has one."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        hint = hints[f.name]
        kinds = {typing.get_origin(a) or a for a in (typing.get_args(hint) or (hint,)) if a is not type(None)}
        if kinds & {int, float}:
            out.append((f.name, "abc"))
            if float in kinds:
                out.append((f.name, math.nan))
        elif kinds & {list, tuple}:
            out.append((f.name, "abc"))
        elif str in kinds:
            out.append((f.name, 3))
            if f.name in cls.CHOICES or f.name == "bn_mode":
                out.append((f.name, "no-such-choice"))
        elif bool in kinds:
            out.append((f.name, "yes"))
        elif dict in kinds:
            out.append((f.name, 3))
        rule = constraint_of(cls, f.name)
        if rule is not None:
            out.append((f.name, [_outside(rule)] if kinds & {list, tuple} else _outside(rule)))
    return out


@pytest.mark.parametrize("name", ALL)
def test_bad_hyperparameters_are_refused_at_construction(name, monkeypatch):
    """Wrong type, NaN, out of its constraint: one UserError naming the field, from the constructor --
    before any model is copied (copying is made to fail here to prove it)."""
    cls = METHODS.get(name)

    def no_copy(*a, **k):
        raise AssertionError("a model was copied before the hyperparameters were checked")

    monkeypatch.setattr(copy, "deepcopy", no_copy)
    accepted = []
    for key, value in bad_values(cls):
        try:
            cls.from_preset("test", **{key: value})
        except UserError as e:
            assert key in str(e) and "\n" not in str(e), f"{name}: unclear error for {key}={value!r}: {e}"
        else:
            accepted.append(f"{key}={value!r}")
    assert not accepted, f"{name} accepted {', '.join(accepted)}"


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
        # and in the first layer, which a method that re-initialises the later ones (deep_reset) keeps
        first_layer(broken).weight.view(-1)[0] = float("nan")
    with pytest.raises(NonFiniteLossError, match=re.escape(name)):
        fast(cls).unlearn(broken, digits_split, original=broken, seed=0)


class Boom(Exception):
    """Raised by the test's own hook in the middle of a method."""


def first_layer(model):
    """The model's first module with parameters (the classifier may be replaced, e.g. by boundary_expand)."""
    return next(m for m in model.modules() if not list(m.children()) and list(m.parameters()))


@pytest.mark.parametrize("name", ALL)
def test_no_hook_left_on_the_model_when_a_method_raises(name, digits_split, request):
    """Captum's hook-removal check: an error raised in the middle of a method (at the first forward of
    the model's first layer, and half-way through the method's forwards, while its feature captures
    are active) leaves no hook behind on the model it worked on."""
    cls = METHODS.get(name)
    calls = []
    model = copy.deepcopy(model_for(cls, request))
    first_layer(model).register_forward_pre_hook(lambda module, inputs: calls.append(1))
    run_unwrapped(fast(cls), model, digits_split)
    for fail_at in sorted({1, (len(calls) + 1) // 2}):
        model = copy.deepcopy(model_for(cls, request))
        calls.clear()

        def boom(module, inputs, fail_at=fail_at):
            calls.append(1)
            if len(calls) == fail_at:
                raise Boom

        handle = first_layer(model).register_forward_pre_hook(boom)
        with pytest.raises(Boom):
            run_unwrapped(fast(cls), model, digits_split)
        handle.remove()
        assert no_hooks(model), f"{name} left a hook on the model after an error at forward {fail_at}"


@pytest.mark.heavy
@pytest.mark.parametrize("name", ALL)
def test_reduces_forget_accuracy_on_digits(name, digits_split, request):
    cls = METHODS.get(name)
    digits_original = model_for(cls, request)
    if not cls.reduces_forget_acc:
        pytest.skip(f"{name} does not claim to lower forget accuracy by itself")
    before = evaluate(digits_original, digits_split)["forget_acc"]
    kw = {"recipe": {"lr": 0.05, "epochs": 5, "batch_size": 64}} if cls.starts_from_scratch else {}
    res = cls.from_preset("small", "digits", **kw).unlearn(digits_original, digits_split, original=digits_original,
                                                           seed=0)
    after = evaluate(res.model, digits_split)["forget_acc"]
    assert after < before - 20, f"{name}: forget accuracy {before:.1f} -> {after:.1f}"


@pytest.mark.parametrize("name", [n for n in ALL if METHODS.get(n).accepts_extra_loss])
def test_an_attached_extra_loss_joins_every_step(name, digits_split, request):
    """A plug-in base adds ``extra_loss(model)`` at its steps: it is called, with the model worked on."""
    m = fast(METHODS.get(name))
    model = copy.deepcopy(model_for(type(m), request))
    seen = []

    def extra(mod):
        seen.append(mod)
        return torch.zeros(())

    run_unwrapped(m.with_extra_loss(extra), model, digits_split)
    assert seen and all(s is model for s in seen)
    assert m.extra_loss is None, "with_extra_loss must leave the method it was called on as it was"


def test_a_method_that_takes_no_extra_loss_refuses_one():
    name = next(n for n in ALL if not METHODS.get(n).accepts_extra_loss)
    with pytest.raises(TypeError, match="extra loss"):
        fast(METHODS.get(name)).with_extra_loss(lambda model: torch.zeros(()))


def test_declarations_are_checked_at_registration():
    """``needs``, CHOICES, CONSTRAINTS and PRESETS must name real things: a TypeError when the class is
    registered (not an ``assert`` in the middle of a run, which ``python -O`` would strip)."""
    from dataclasses import dataclass

    @dataclass
    class Bad(UnlearningMethod):
        lr: float = 0.1

    for attr, value, word in (("needs", frozenset({"forget", "labels"}), "labels"),
                              ("CONSTRAINTS", {"momentum": Interval(0, 1)}, "momentum"),
                              ("CHOICES", {"mode": ("a", "b")}, "mode"),
                              ("PRESETS", {"test": {"epochs": 1}}, "epochs")):
        cls = type("Bad", (Bad,), {attr: value})
        with pytest.raises(TypeError, match=word):
            register_method("no_such_method")(cls)
    assert "no_such_method" not in METHODS


def _imports(path: Path) -> set[str]:
    """The unlearnkit subpackages/modules a method module imports (relative and absolute, anywhere)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("unlearnkit.")}
        elif isinstance(node, ast.ImportFrom):
            parts = (node.module or "").split(".")
            if node.level == 0 and parts[0] == "unlearnkit":
                out |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
            elif node.level == 2:  # from ..x import y  /  from .. import x
                out |= {parts[0]} if node.module else {a.name for a in node.names}
    return out


def test_method_modules_import_nothing_above_them():
    """A method never grades itself or drives a run: no import of audit, bench, cli, runner or report."""
    folder = Path(methods_pkg.__file__).parent
    found = {p.name: sorted(_imports(p) & ABOVE_METHODS) for p in sorted(folder.glob("*.py"))}
    assert found and not {k: v for k, v in found.items() if v}
    assert _imports(folder / "base.py") >= {"registry", "validate"}  # the reader sees relative imports


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
