"""The audit of the user's own models on the user's own data: ``unlearnkit.audit(...)``.

``unlearnkit.audit`` is this package and, called, :func:`audit_models` (the package's module class
is made callable in ``__init__``), so ``import unlearnkit as uk; uk.audit(original, unlearned,
retrained, forget=..., retain=..., test=...)`` works while ``unlearnkit.audit.AuditConfig`` and
``from unlearnkit.audit import audit`` keep meaning what they meant.

Inputs are Datasets, DataLoaders or ``(x, y)`` tensors (:mod:`unlearnkit.data.user`); a model without
audit layers gets them from one probe batch (:mod:`unlearnkit.models.discover`). ``unlearnkit audit``
(the CLI) calls :func:`audit_split` with the split it builds from a dataset name.
"""
from __future__ import annotations

import copy
from dataclasses import fields
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from .. import validate
from ..data.splits import UnlearningSplit
from ..data.user import as_array_data, user_split
from ..errors import UserError
from ..models.discover import prepare_taps
from ..runtime import resolve_device
from .config import AuditConfig
from .core import audit as _audit
from .render import write_audit
from .report import AuditReport

__all__ = ["AuditResult", "audit_models", "audit_split", "read_parts", "check_model", "num_classes_of",
           "device_for"]


class AuditResult(AuditReport):
    """An :class:`~unlearnkit.audit.AuditReport` (``verdict``, ``evidence``, ``layers``, ...) that can
    ``save`` itself."""

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``audit.json``, ``audit.md`` and ``audit.html`` into ``out_dir`` (atomically)."""
        return write_audit(self, out_dir)

    @classmethod
    def of(cls, report: AuditReport) -> "AuditResult":
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})


def check_model(model, role: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise UserError(f"{role} must be a torch.nn.Module, not {type(model).__name__}")
    if next(model.parameters(), None) is None:
        raise UserError(f"{role} has no parameters")
    return model


def device_for(device, model: nn.Module) -> torch.device:
    """``device`` when given, else where ``model``'s parameters are."""
    return resolve_device(device) if device is not None else next(model.parameters()).device


def _on(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device``: itself when it is there, else a copy (the user's model is not moved)."""
    if all(p.device == device for p in model.parameters()):
        return model
    return copy.deepcopy(model).to(device)


def num_classes_of(model: nn.Module, example, device: torch.device) -> int:
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(example.to(device))
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or out.dim() != 2:
        raise UserError(f"the model must return logits of shape [batch, classes]; it returned "
                        f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}")
    return int(out.shape[1])


def read_parts(**parts) -> dict:
    """Each given part in memory (:func:`~unlearnkit.data.user.as_array_data`), read once; None stays None."""
    return {k: (as_array_data(v, k) if v is not None else None) for k, v in parts.items()}


def _audit_config(config: AuditConfig | None, overrides: dict) -> AuditConfig:
    if config is not None and overrides:
        raise UserError("give either config=AuditConfig(...) or keyword overrides, not both")
    if config is not None:
        return config
    known = {f.name for f in fields(AuditConfig)}
    for key in overrides:
        if key not in known:
            raise UserError(f"unknown audit setting {key!r}{validate.suggestion(key, known)}; see "
                            f"unlearnkit.audit.AuditConfig")
    return AuditConfig(**overrides)


def audit_split(original: nn.Module, unlearned: nn.Module, retrained: Sequence[nn.Module], split: UnlearningSplit,
                *, layers: Sequence[str] | None = None, config: AuditConfig = AuditConfig(),
                device: torch.device) -> AuditResult:
    """The audit of ``unlearned`` against ``original`` and ``retrained`` on ``split``. Models without audit
    layers get them from one probe batch; the same layers must exist in every model (one architecture)."""
    models = [_on(m, device) for m in (original, unlearned, *retrained)]
    example = (split.train_retain if len(split.train_retain) else split.train_forget).x[:4].to(device)
    found = [prepare_taps(m, example, layers) for m in models]
    other = next((f for f in found[1:] if f != found[0]), None)
    if other is not None:
        raise UserError(f"the models do not share their audit layers ({found[0]} vs {other}): audit models of "
                        f"one architecture, or name the layers with layers=[...]")
    report = _audit(models[0], models[1], models[2:], split, layers=found[0], config=config, device=device)
    return AuditResult.of(report)


def audit_models(original: nn.Module, unlearned: nn.Module, retrained, *, forget, retain, test,
          layers: Sequence[str] | None = None, config: AuditConfig | None = None, device: str | None = None,
          **config_overrides) -> AuditResult:
    """Did ``unlearned`` really forget ``forget``? The audit (:func:`unlearnkit.audit.audit`) on the user's data.

    ``retrained``: one model retrained without ``forget``, or a list of them (retrained with different
    seeds: with two or more, each layer's tolerance comes from their spread; one certifies ``erased``
    only on the calibrated small CNN). ``test``: held-out data none of the models trained on (test
    accuracy, membership inference and, for class forgetting, its forgotten-class rows). ``layers``:
    module paths (or ``penultimate``) to audit; default: found automatically. ``config`` or keyword
    overrides of :class:`~unlearnkit.audit.AuditConfig` (e.g. ``n_splits=10``). Returns an
    :class:`AuditResult`: ``.verdict``, ``.evidence``, ``.save(dir)``."""
    models = [check_model(original, "original"), check_model(unlearned, "unlearned")]
    refs = [retrained] if isinstance(retrained, nn.Module) else list(retrained or [])
    if not refs:
        raise UserError("retrained must be a model retrained without the forget set, or a list of them")
    models += [check_model(m, "retrained") for m in refs]
    cfg = _audit_config(config, config_overrides)
    dev = device_for(device, original)
    parts = read_parts(forget=forget, retain=retain, test=test)
    classes = {num_classes_of(m, parts["forget"].x[:4], next(m.parameters()).device) for m in models}
    if len(classes) != 1:
        raise UserError(f"the models have different numbers of outputs: {sorted(classes)}")
    split = user_split(**parts, num_classes=classes.pop())
    return audit_split(models[0], models[1], models[2:], split, layers=layers, config=cfg, device=dev)
