"""Audit layers of any ``nn.Module``: found from one probe batch, or named by module path.

Models built by :func:`unlearnkit.create_model` carry their audit layers (``unlearnkit_taps``) and
their classifier (``unlearnkit_head``). A model built anywhere else (a torchvision or timm model
created by hand, a user's own ``nn.Module``) gets them here, from one forward pass of a few example
rows with a forward hook on every named module (hooks always removed):

* **the classifier** is the last ``nn.Linear`` that ran and whose output is the model's output (the
  same tensor; else the last one whose output has the logits' shape);
* ``penultimate`` is the classifier's *input* (the vector it reads, whatever pooling or flattening
  happened before it, also in ``forward`` code outside any module);
* **stages** are the model's top-level children, in the order they ran, whose output is one tensor
  with a row per sample, except the classifier and the modules holding it: the containers among them
  with parameters (a ResNet's ``layer1..4``, a ViT's ``patch_embed`` and ``blocks``), or, for a
  model built from single layers only, every such layer with parameters. When one top-level child
  holds the whole network (``self.net = nn.Sequential(...)``), its children are read instead.

Why forward hooks and not ``torch.fx``: hooks see every model, traceable or not (data-dependent
control flow, timm's checkpointing wrappers), read the same module boundaries fx would give, and the
probe pass also checks that each chosen layer returns one tensor per sample, which a symbolic trace
cannot. One path for every model means one behaviour to test.

``layers=[...]`` names layers explicitly by module path (``"layer3"``, ``"features.4"``; the module's
output), or ``penultimate``; a name the model does not have is one :class:`UserError` line listing
what it has. A model without an ``nn.Linear`` classifier (a conv head, a bilinear one) has no
``penultimate`` and no stages found for it: its layers are audited when named by module path.
Nothing here changes a weight; the taps are attributes next to the parameters.

A model whose forward returns an object with ``.logits`` (a Hugging Face ``ModelOutput``), a dict with
``"logits"`` or a tuple whose first element is the logits is read through :func:`returning_logits`: the
same model (same parameters, module paths and state dict) whose forward returns the logits tensor,
which every part of the toolkit expects; :func:`users_class` gives the model its own class back.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Sequence

import torch
from torch import Tensor, nn

from .. import validate
from ..errors import UserError
from .zoo import Tap

PENULTIMATE = "penultimate"


def logits_of(out: object) -> Tensor | None:
    """The logits in a model's output: the tensor itself, ``out.logits``, ``out["logits"]`` or ``out[0]``;
    None when none of them is a tensor."""
    if isinstance(out, Tensor):
        return out
    if isinstance(out, Mapping) and isinstance(out.get("logits"), Tensor):
        return out["logits"]
    if isinstance(getattr(out, "logits", None), Tensor):
        return out.logits
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], Tensor):
        return out[0]
    return None


class ReturnsLogits:
    """Put before a model's class by :func:`returning_logits`: its forward returns :func:`logits_of` the
    class's own forward."""

    def forward(self, *args, **kwargs):
        return logits_of(super().forward(*args, **kwargs))


_ADAPTED: dict[type, type] = {}


def returning_logits(model: nn.Module, out: object) -> nn.Module:
    """``model`` itself when its output ``out`` (of one probe batch) is a tensor; else a model of a subclass
    of its class (:class:`ReturnsLogits` first) sharing its parameters, buffers and submodules, whose
    forward returns the logits. The user's model is not changed (taps and hooks set on the result stay
    there)."""
    if isinstance(out, Tensor) or isinstance(model, ReturnsLogits):
        return model
    cls = type(model)
    if cls not in _ADAPTED:
        _ADAPTED[cls] = type(cls.__name__, (ReturnsLogits, cls), {"__module__": cls.__module__,
                                                                  "__qualname__": cls.__qualname__})
    adapted = copy.copy(model)
    adapted.__class__ = _ADAPTED[cls]
    for key, value in vars(model).items():  # its registries (submodules, hooks): the same entries, new dicts
        if key.startswith("_") and isinstance(value, dict):
            vars(adapted)[key] = copy.copy(value)
    return adapted


def users_class(model: nn.Module) -> nn.Module:
    """``model`` with the user's class back (in place) when :func:`returning_logits` adapted it; returns it."""
    if isinstance(model, ReturnsLogits):
        model.__class__ = type(model).__bases__[1]
    return model


def has_taps(model: nn.Module) -> bool:
    return bool(getattr(model, "unlearnkit_taps", None))


def _module_calls(model: nn.Module, example: Tensor) -> tuple[list[tuple[str, object]], Tensor]:
    """``[(module path, its output)]`` in the order the modules first ran, and the model's output."""
    calls: dict[str, object] = {}
    handles = [mod.register_forward_hook(lambda m, a, out, name=name: calls.setdefault(name, out))
               for name, mod in model.named_modules() if name]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            logits = model(example)
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    if not isinstance(logits, Tensor) or logits.dim() != 2 or logits.shape[0] != example.shape[0]:
        raise UserError(f"the model must return logits of shape [batch, classes]; it returned "
                        f"{type(logits).__name__} {tuple(getattr(logits, 'shape', ()))}")
    return list(calls.items()), logits


class NoClassifier(UserError):
    """No ``nn.Linear`` produces the model's output: no ``penultimate``, layers must be named."""


def _classifier(model: nn.Module, calls: list[tuple[str, object]], logits: Tensor) -> str:
    linears = [(name, out) for name, out in calls if isinstance(model.get_submodule(name), nn.Linear)]
    for name, out in reversed(linears):
        if out is logits:
            return name
    for name, out in reversed(linears):
        if isinstance(out, Tensor) and out.shape == logits.shape:
            return name
    raise NoClassifier("cannot find the classifier: no nn.Linear produces the model's output; name the audit "
                       "layers by module path (layers=[...] / --layers)")


def _per_sample(out: object, n: int) -> bool:
    return isinstance(out, Tensor) and out.dim() >= 2 and out.shape[0] == n and out.is_floating_point()


def _stages(model: nn.Module, ran: dict[str, object], head: str, n: int, prefix: str = "") -> list[str]:
    """Stage paths among ``model``'s children (module docstring), descending into a child that holds
    the whole network."""
    children = [(f"{prefix}{name}", mod) for name, mod in model.named_children()]
    holder = [path for path, _ in children if head.startswith(path + ".")]
    candidates = [(path, mod) for path, mod in children
                  if path in ran and path != head and not head.startswith(path + ".") and _per_sample(ran[path], n)
                  and any(True for _ in mod.parameters())]
    if not candidates and holder:
        return _stages(model.get_submodule(holder[0][len(prefix):]), ran, head, n, holder[0] + ".")
    containers = [path for path, mod in candidates if any(True for _ in mod.children())]
    return containers or [path for path, _ in candidates]


def discover_taps(model: nn.Module, example: Tensor) -> tuple[dict[str, Tap], str]:
    """``(taps, head)`` of ``model`` from one forward pass of ``example`` (a few input rows)."""
    calls, logits = _module_calls(model, example)
    head = _classifier(model, calls, logits)
    ran = dict(calls)
    taps = {path: Tap(path, channels=_channels(model.get_submodule(path)))
            for path in _stages(model, ran, head, len(example))}
    taps[PENULTIMATE] = Tap(head, "input")
    return taps, head


def _channels(module: nn.Module) -> int | None:
    """The channel count of a stage's output when its last conv or norm says it (to tell NHWC from NCHW)."""
    last = None
    for mod in module.modules():
        if isinstance(mod, (nn.Conv2d, nn.BatchNorm2d, nn.LayerNorm, nn.Linear)):
            last = mod
    if isinstance(last, nn.Conv2d):
        return last.out_channels
    if isinstance(last, nn.BatchNorm2d):
        return last.num_features
    if isinstance(last, nn.Linear):
        return last.out_features
    if isinstance(last, nn.LayerNorm):
        return int(last.normalized_shape[-1])
    return None


def prepare_taps(model: nn.Module, example: Tensor, layers: Sequence[str] | None = None) -> list[str]:
    """Give ``model`` audit layers when it has none (:func:`discover_taps`) and add every module path
    named in ``layers``; returns the layers to audit (``layers``, else all of the model's). A model without
    an ``nn.Linear`` classifier has only the layers named (:class:`NoClassifier` when none is). ``layers`` is
    checked first (:func:`unlearnkit.validate.layer_names`: a list of distinct names, not a bare string, not
    empty), for the Python API and the command line alike."""
    layers = validate.layer_names("layers", layers)
    if not has_taps(model):
        try:
            model.unlearnkit_taps, model.unlearnkit_head = discover_taps(model, example)
        except NoClassifier:
            if not layers:
                raise
            model.unlearnkit_taps, model.unlearnkit_head = {}, None
    taps = dict(model.unlearnkit_taps)
    modules = dict(model.named_modules())
    for name in layers or ():
        if name in taps:
            continue
        if name == PENULTIMATE:
            raise UserError(f"layer {PENULTIMATE!r} is the input of an nn.Linear classifier, which this model "
                            f"does not have: name module paths only (layers=[...] / --layers)")
        if not name or name not in modules:
            shown = ", ".join(list(taps)[:12])
            raise UserError(f"layer {name!r} is neither an audit layer ({shown}) nor a module path of the "
                            f"model (such as {', '.join(n for n in list(modules)[1:6])})")
        taps[name] = Tap(name, channels=_channels(modules[name]))
    model.unlearnkit_taps = taps
    return list(layers) if layers else list(taps)
