"""The Python API: unlearn and audit the model and data a user already has.

.. code-block:: python

    import unlearnkit as uk
    result = uk.unlearn(model, method="scrub", forget=forget_ds, retain=retain_ds, epochs=3)
    result.model, result.runtime_s, result.stop_reason, result.history
    report = uk.audit(original, result.model, retrained, forget=forget_ds, retain=retain_ds, test=test_ds)
    print(report.verdict)
    report.save("audit/")          # audit.json, audit.md, audit.html

``forget`` / ``retain`` / ``test`` / ``val`` are each a ``torch.utils.data.Dataset`` (items ``(input,
label)`` or dicts, as a Hugging Face dataset's), a ``DataLoader`` or an ``(x, y)`` pair of tensors,
with inputs exactly as the model takes them (already transformed and normalised;
:mod:`unlearnkit.data.user`). Any ``nn.Module`` that returns ``[batch, classes]`` logits works, or an
object with ``.logits``: its audit layers are found from one probe batch
(:mod:`unlearnkit.models.discover`) or named with ``layers=[...]`` by module path. ``uk.audit`` and
``uk.Auditor`` live in :mod:`unlearnkit.audit.user`; this module holds ``uk.unlearn``.

A thin layer over the code the CLI runs: ``unlearnkit unlearn`` calls :func:`unlearn_split` with the
split it builds from a dataset name (and ``unlearnkit audit`` calls
:func:`unlearnkit.audit.user.audit_split`).
"""
from __future__ import annotations

from torch import nn

from . import validate
from .audit.user import check_model, device_for, probe, read_parts
from .checkpoints import require_finite
from .data.splits import UnlearningSplit
from .data.user import user_split
from .errors import NonFiniteLossError, UserError
from .methods import METHODS, UnlearningMethod
from .methods.base import UnlearnResult
from .methods.names import method_names
from .models.discover import has_taps, prepare_taps, users_class

__all__ = ["unlearn", "unlearn_split", "UnlearnResult"]


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
    if preset is not None:
        validate.choice("preset", preset, ("reference", *(p for p in cls.PRESETS if "@" not in p and p != "reference")))
    return cls.from_preset(preset, None, **cls.task_defaults(split, dict(hyperparameters)))


def unlearn_split(model: nn.Module, method: UnlearningMethod, split: UnlearningSplit, *, device,
                  seed: int = 0, progress: bool = False) -> UnlearnResult:
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
            preset: str | None = None, seed: int = 0, device: str | None = None, progress: bool = True,
            input_key: str | None = None, label_key: str | None = None, **hyperparameters) -> UnlearnResult:
    """Unlearn ``forget`` from a copy of ``model`` (``model`` itself is not changed).

    Returns an :class:`~unlearnkit.UnlearnResult`: ``.model`` (the unlearned copy, of the model's own
    class), ``.runtime_s`` (the method's wall time), ``.stop_reason`` (``"completed"``, or why it
    stopped early) and ``.history`` (the method's per-epoch records). ``uk.audit`` takes the result
    itself as a model too.

    ``method``: a name (``unlearnkit list methods``; aliases and plug-ins such as ``ec+duck`` too) or a
    method object. ``forget`` (required) / ``retain`` / ``val`` / ``test``: Datasets (of pairs or of
    dicts, read with ``input_key`` / ``label_key`` as :func:`unlearnkit.audit` reads them), DataLoaders or
    ``(x, y)`` tensors (only what the method needs is required). ``preset``: ``None`` or ``"reference"`` =
    the reference's defaults (the method's dataclass defaults), or ``"small"``; ``hyperparameters``
    override them and are checked before anything runs. ``retrain`` is a method too: it re-initialises a
    copy and trains it on ``retain`` (a reference for :func:`audit`). ``seed``: 0..2**32-1. ``device``:
    ``None`` = where ``model`` is. ``progress``: the method's progress bars on stderr (off with ``False``
    or ``UNLEARNKIT_PROGRESS=0``).

    Every argument is checked before any work (a :class:`~unlearnkit.UserError` naming it): the model
    must be float32 (float64 and half models are refused, not converted: ``model.float()``) with
    trainable parameters and finite weights (a NaN or an infinity is refused, naming the tensor); forget rows
    may not also appear in ``retain``; no part may be on the ``meta`` device. Hyperparameters under which
    the loss becomes NaN or infinite end in a :class:`~unlearnkit.UserError` too (naming the method and the
    step; ``model`` is unchanged)."""
    model = require_finite(check_model(model, "model", trainable=True), "model")
    seed = validate.whole("seed", seed, low=0, high=validate.MAX_SEED)
    dev = device_for(device, model)
    if forget is None:
        raise UserError("forget is required: the rows to unlearn (a Dataset, a DataLoader or (x, y) tensors)")
    parts = read_parts(forget=forget, retain=retain, test=test, val=val, input_key=input_key, label_key=label_key)
    model, num_classes = probe(model, parts["forget"].x[:4], "model")
    split = user_split(**parts, num_classes=num_classes)
    chosen = _method(method, split, preset, hyperparameters)
    try:
        result = unlearn_split(model, chosen, split, device=dev, seed=seed, progress=bool(progress))
    except NonFiniteLossError as e:  # the hyperparameters diverge on this model: the caller's to change
        raise UserError(f"{e}; the model passed in is unchanged") from None
    result.model = users_class(result.model)
    return result
