"""The Python API: unlearn and audit the model and data a user already has.

.. code-block:: python

    import unlearnkit as uk
    unlearned = uk.unlearn(model, method="scrub", forget=forget_ds, retain=retain_ds, epochs=3)
    report = uk.audit(original, unlearned, retrained, forget=forget_ds, retain=retain_ds, test=test_ds)
    print(report.verdict)
    report.save("audit/")          # audit.json, audit.md, audit.html

``forget`` / ``retain`` / ``test`` / ``val`` are each a ``torch.utils.data.Dataset``, a ``DataLoader``
or an ``(x, y)`` pair of tensors, with inputs exactly as the model takes them (already transformed
and normalised; :mod:`unlearnkit.data.user`). Any ``nn.Module`` that returns ``[batch, classes]``
logits works: its audit layers are found from one probe batch (:mod:`unlearnkit.models.discover`)
or named with ``layers=[...]`` by module path. ``uk.audit`` is
:func:`unlearnkit.audit.user.audit_models`; this module holds ``uk.unlearn``.

A thin layer over the code the CLI runs: ``unlearnkit unlearn`` calls :func:`unlearn_split` with the
split it builds from a dataset name (and ``unlearnkit audit`` calls
:func:`unlearnkit.audit.user.audit_split`).
"""
from __future__ import annotations

from torch import nn

from .audit.user import check_model, device_for, num_classes_of, read_parts
from .data.splits import UnlearningSplit
from .data.user import user_split
from .errors import UserError
from .methods import METHODS, UnlearningMethod
from .methods.names import method_names
from .models.discover import has_taps, prepare_taps

__all__ = ["unlearn", "unlearn_split"]


def _method(method: str | UnlearningMethod, split: UnlearningSplit, preset: str | None,
            hyperparameters: dict) -> UnlearningMethod:
    """The method object: given, or built by name from ``preset`` and ``hyperparameters`` (checked once)."""
    if isinstance(method, UnlearningMethod):
        if hyperparameters or preset:
            raise UserError("give hyperparameters either in the method object or as keywords, not both")
        return method
    if not isinstance(method, str) or not method.strip():
        raise UserError(f"method must be a method name (unlearnkit list methods), not {method!r}")
    (name,) = method_names([method], setting="vfl")
    cls = METHODS.get(name)
    return cls.from_preset(preset, None, **cls.task_defaults(split, dict(hyperparameters)))


def unlearn_split(model: nn.Module, method: UnlearningMethod, split: UnlearningSplit, *, device,
                  seed: int = 0, progress: bool = False):
    """Run ``method`` on a copy of ``model`` for ``split``; the :class:`~unlearnkit.methods.UnlearnResult`.
    A model without audit layers gets them first (:func:`~unlearnkit.models.discover.prepare_taps`),
    for the methods that read layers (PURGE)."""
    for part in ("retain", "val", "test"):
        if part in method.needs and not len(getattr(split, {"retain": "train_retain"}.get(part, part))):
            raise UserError(f"{method.name} needs {part} data: pass {part}=...")
    if not has_taps(model) and len(split.train_retain):
        try:
            prepare_taps(model, split.train_retain.x[:4].to(next(model.parameters()).device))
        except UserError:
            pass  # only a method that reads layers needs them, and it says so
    method.check_distributed()
    return method.unlearn(model, split, device=device, seed=seed, progress=progress)


def unlearn(model: nn.Module, method: str | UnlearningMethod, *, forget, retain=None, val=None, test=None,
            preset: str | None = None, seed: int = 0, device: str | None = None, progress: bool = False,
            **hyperparameters) -> nn.Module:
    """An unlearned copy of ``model`` (``model`` itself is not changed).

    ``method``: a name (``unlearnkit list methods``; aliases and plug-ins such as ``ec+duck`` too) or a
    method object. ``forget`` / ``retain`` / ``val`` / ``test``: Datasets, DataLoaders or ``(x, y)``
    tensors (only what the method needs is required). ``preset``: ``None`` = the reference's defaults
    (the method's dataclass defaults), or ``"small"``; ``hyperparameters`` override them and are checked
    before anything runs. ``retrain`` is a method too: it re-initialises a copy and trains it on
    ``retain`` (a reference for :func:`audit`). ``device``: ``None`` = where ``model`` is."""
    check_model(model, "model")
    dev = device_for(device, model)
    parts = read_parts(forget=forget, retain=retain, test=test, val=val)
    num_classes = num_classes_of(model, parts["forget"].x[:4], next(model.parameters()).device)
    split = user_split(**parts, num_classes=num_classes)
    chosen = _method(method, split, preset, hyperparameters)
    return unlearn_split(model, chosen, split, device=dev, seed=seed, progress=progress).model
