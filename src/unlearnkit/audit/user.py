"""The audit of the user's own models on the user's own data: ``uk.audit(...)`` and :class:`Auditor`.

``unlearnkit.audit`` (the top-level name) is the function :func:`audit` of this module: ``import
unlearnkit as uk; uk.audit(original, unlearned, retrained, forget=..., retain=..., test=...)``. The
subpackage keeps its import paths (``from unlearnkit.audit import AuditConfig``, ``import
unlearnkit.audit.core``; ``from unlearnkit.audit import audit`` is still the audit of a split,
:func:`unlearnkit.audit.core.audit`), and the function carries the subpackage's names as attributes,
so ``uk.audit.AuditConfig`` keeps working too.

:class:`Auditor` holds one original, its retrained references and the data: their forward passes and
every number that does not depend on the unlearned model are computed once
(:class:`~unlearnkit.audit.memo.AuditCache`, as ``unlearnkit run`` does for its methods) and reused for
every unlearned model audited after. ``uk.audit`` with a list of unlearned models uses one.

Inputs are Datasets, DataLoaders or ``(x, y)`` tensors, items pairs or dicts
(:mod:`unlearnkit.data.user`); a model returning an object with ``.logits`` is read through
:func:`~unlearnkit.models.discover.returning_logits`; a model without audit layers gets them from one
probe batch (:mod:`unlearnkit.models.discover`). ``unlearnkit audit`` (the CLI) calls
:func:`audit_split` with the split it builds from a dataset name.
"""
from __future__ import annotations

import copy
import sys
from dataclasses import fields
from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from .. import validate
from ..data.splits import UnlearningSplit
from ..data.user import as_array_data, user_split
from ..errors import UserError
from ..evaluation import model_outputs
from ..models.discover import logits_of, prepare_taps, returning_logits
from ..progress import bar
from ..runtime import resolve_device
from .config import AuditConfig
from .core import audit as _audit
from .core import with_audit_seed
from .memo import AuditCache
from .render import write_audit
from .report import AuditReport

__all__ = ["AuditResult", "Auditor", "audit", "audit_models", "audit_split", "read_parts", "check_model", "probe",
           "device_for"]


class AuditResult(AuditReport):
    """An :class:`~unlearnkit.audit.AuditReport` (``verdict``, ``evidence``, ``layers``, ...) that can
    ``save`` itself; shown as a table in a notebook (``_repr_html_``)."""

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write ``audit.json``, ``audit.md`` and ``audit.html`` into ``out_dir`` (made when missing; each file
        written atomically); returns ``{"json": path, "md": path, "html": path}``. A :class:`UserError`
        naming ``out_dir``, before anything is written, when it is a file or cannot be written."""
        return write_audit(self, validate.output_dir("out_dir", out_dir))

    @classmethod
    def of(cls, report: AuditReport) -> "AuditResult":
        return cls(**{f.name: getattr(report, f.name) for f in fields(report)})


def check_model(model, role: str, *, trainable: bool = False) -> nn.Module:
    """``model`` when unlearnkit can use it (an object holding it as ``.model``, such as the result of
    :func:`unlearnkit.unlearn`, gives that model). A :class:`UserError` naming ``role`` when it is not an
    ``nn.Module``, has no parameters, is on the meta device, has parameters of another floating dtype than
    the default (float32: float64 and half models are refused, not converted; ``model.float()`` converts
    them), or, with ``trainable``, has no parameter that requires a gradient."""
    if not isinstance(model, nn.Module) and isinstance(getattr(model, "model", None), nn.Module):
        model = model.model
    if not isinstance(model, nn.Module):
        raise UserError(f"{role} must be a torch.nn.Module, not {type(model).__name__}")
    params = list(model.parameters())
    if not params:
        raise UserError(f"{role} has no parameters")
    if any(t.is_meta for t in (*params, *model.buffers())):
        raise UserError(f"{role} is on the meta device (its weights hold no values): load them first, e.g. "
                        f"{role}.to_empty(device='cpu') then {role}.load_state_dict(...)")
    want = torch.get_default_dtype()
    other = sorted({str(p.dtype).replace("torch.", "") for p in params if p.is_floating_point() and p.dtype != want})
    if other:
        raise UserError(f"{role} has {', '.join(other)} parameters; unlearnkit computes in "
                        f"{str(want).replace('torch.', '')}: convert it first ({role}.float())")
    if trainable and not any(p.requires_grad for p in params):
        raise UserError(f"{role} has no trainable parameter (requires_grad is False everywhere): unlearning "
                        f"changes weights; unfreeze them first ({role}.requires_grad_(True))")
    return model


def device_for(device, model: nn.Module) -> torch.device:
    """``device`` when given, else where ``model``'s parameters are."""
    return resolve_device(device) if device is not None else next(model.parameters()).device


def _on(model: nn.Module, device: torch.device) -> nn.Module:
    """``model`` on ``device``: itself when it is there, else a copy (the user's model is not moved)."""
    if all(p.device == device for p in model.parameters()):
        return model
    return copy.deepcopy(model).to(device)


def probe(model: nn.Module, example: torch.Tensor, role: str, where: str = "forget") -> tuple[nn.Module, int]:
    """One forward pass of ``example`` (a few rows of ``where``) through ``model`` in eval mode:
    ``(the model to use, its number of classes)``; the model to use is ``model`` itself, or, when it
    returns an object with ``.logits`` (a dict with ``"logits"``, a tuple), the same model returning the
    logits (:func:`~unlearnkit.models.discover.returning_logits`). A :class:`UserError` naming ``role``
    and ``where`` when the model cannot take these inputs or returns no ``[batch, classes]`` logits."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model(example.to(next(model.parameters()).device))
    except Exception as e:  # noqa: BLE001 - whatever fails here, the inputs do not fit the model
        lines = str(e).strip().splitlines() or [type(e).__name__]
        raise UserError(f"{role} cannot take the inputs of {where} (shape {list(example.shape)}): "
                        f"{lines[0]}") from None
    finally:
        model.train(was_training)
    logits = logits_of(out)
    if logits is None or logits.dim() != 2 or logits.shape[0] != example.shape[0]:
        shape = tuple(getattr(logits if logits is not None else out, "shape", ()))
        raise UserError(f"{role} must return logits of shape [batch, classes] (a tensor, or an object with "
                        f".logits); on {where} it returned {type(out).__name__} {shape}")
    return returning_logits(model, out), int(logits.shape[1])


def read_parts(*, input_key: str | None = None, label_key: str | None = None, **parts) -> dict:
    """Each given part in memory (:func:`~unlearnkit.data.user.as_array_data`, dict items read with
    ``input_key`` / ``label_key``), read once; None stays None."""
    for name, key in (("input_key", input_key), ("label_key", label_key)):
        if key is not None:
            validate.text(name, key)
    return {k: (as_array_data(v, k, input_key=input_key, label_key=label_key) if v is not None else None)
            for k, v in parts.items()}


def _audit_config(config: AuditConfig | None, overrides: dict) -> AuditConfig:
    if config is not None and overrides:
        raise UserError("give either config=AuditConfig(...) or keyword overrides, not both")
    if config is not None:
        if not isinstance(config, AuditConfig):
            raise UserError(f"config must be an unlearnkit.audit.AuditConfig, not {type(config).__name__}")
        return config
    known = {f.name for f in fields(AuditConfig)}
    for key in overrides:
        if key not in known:
            raise UserError(f"unknown audit setting {key!r}{validate.suggestion(key, known)}; see "
                            f"unlearnkit.audit.AuditConfig")
    return AuditConfig(**overrides)


def _roles(value, name: str = "retrained") -> list[str]:
    """The argument names of one model or of each model of a list: ``retrained`` / ``retrained[0]``, ..."""
    return [f"{name}[{i}]" for i in range(len(value))] if isinstance(value, (list, tuple)) else [name]


def _references(retrained) -> list[nn.Module]:
    """``retrained`` (one model or a list) as a list of checked models."""
    if isinstance(retrained, (list, tuple)) and not retrained:
        raise UserError("retrained must be a model retrained without the forget set, or a list of them")
    models = retrained if isinstance(retrained, (list, tuple)) else [retrained]
    return [check_model(m, role) for m, role in zip(models, _roles(retrained))]


def _unlearned(unlearned) -> list[nn.Module]:
    """``unlearned`` (one model or a list) as a list of checked models."""
    if isinstance(unlearned, (list, tuple)) and not unlearned:
        raise UserError("unlearned must be a model or a non-empty list of models")
    models = unlearned if isinstance(unlearned, (list, tuple)) else [unlearned]
    return [check_model(m, role) for m, role in zip(models, _roles(unlearned, "unlearned"))]


def _shared_layers(models: Sequence[nn.Module], example: torch.Tensor, layers: Sequence[str] | None) -> list[str]:
    """The audit layers of ``models`` (:func:`~unlearnkit.models.discover.prepare_taps`), which all must share."""
    found = [prepare_taps(m, example, layers) for m in models]
    other = next((f for f in found[1:] if f != found[0]), None)
    if other is not None:
        raise UserError(f"the models do not share their audit layers ({found[0]} vs {other}): audit models of "
                        f"one architecture, or name the layers with layers=[...]")
    return found[0]


def audit_split(original: nn.Module, unlearned: nn.Module, retrained: Sequence[nn.Module], split: UnlearningSplit,
                *, layers: Sequence[str] | None = None, config: AuditConfig = AuditConfig(),
                device: torch.device, references: list[dict] | None = None, say=None) -> AuditResult:
    """The audit of ``unlearned`` against ``original`` and ``retrained`` on ``split``. Models without audit
    layers get them from one probe batch; the same layers must exist in every model (one architecture).
    ``references``: each reference's provenance (seed, recipe, source); ``say``: one line per finished stage."""
    models = [_on(m, device) for m in (original, unlearned, *retrained)]
    example = (split.train_retain if len(split.train_retain) else split.train_forget).x[:4].to(device)
    found = _shared_layers(models, example, layers)
    report = _audit(models[0], models[1], models[2:], split, layers=found, config=config, device=device,
                    references=references, say=say)
    return AuditResult.of(report)


class Auditor:
    """One original, its retrained reference(s) and the data, audited against any number of unlearned models.

    .. code-block:: python

        auditor = uk.Auditor(original, retrained,      # a list of 5 retrains: the recommended number
                             forget=forget_ds, retain=retain_ds, test=test_ds)
        scrub_report = auditor.audit(scrub_model)
        salun_report = auditor.audit(salun_model)     # the references are not passed over again

    Everything is checked when the auditor is made (the models, the data, the settings; a
    :class:`UserError` names the argument). The original's and the references' forward passes (every audit
    layer and the logits) are made by the first :meth:`audit`, and so is every number that does not depend
    on the unlearned model (probe scores, k-NN accuracies, feature distances, resurfacing of the
    references: :class:`~unlearnkit.audit.memo.AuditCache`); later audits reuse them and pass over only the
    new model. The arguments are those of :func:`audit`.
    """

    def __init__(self, original: nn.Module, retrained, *, forget=None, retain=None, test=None,
                 layers: Sequence[str] | None = None, config: AuditConfig | None = None, device: str | None = None,
                 progress: bool = True,
                 input_key: str | None = None, label_key: str | None = None, **config_overrides) -> None:
        from ..checkpoints import require_finite_models

        original, refs, ref_roles = check_model(original, "original"), _references(retrained), _roles(retrained)
        # NaN weights of the original or a reference: refused now, named (a broken unlearned model is "collapsed")
        require_finite_models(original=original, retrained=retrained)
        # one audit seed for every model this auditor audits (the references' numbers are computed once); a fresh
        # one when the config has none: the party audited cannot know the draws in advance
        self.config = with_audit_seed(_audit_config(config, config_overrides))
        for name, part in (("forget", forget), ("retain", retain), ("test", test)):
            if part is None:
                raise UserError(f"{name} is required: the audit compares the models on the forget set, the "
                                f"retained training data and held-out test data (forget=, retain=, test=)")
        self.device, self.progress, self.named_layers = device_for(device, original), bool(progress), layers
        parts = read_parts(forget=forget, retain=retain, test=test, input_key=input_key, label_key=label_key)
        self.example = parts["forget"].x[:4]
        probed = [probe(m, self.example, role) for m, role in zip((original, *refs), ("original", *ref_roles))]
        self.num_classes = _one_class_count([k for _, k in probed])
        self.split = user_split(**parts, num_classes=self.num_classes)
        models = [_on(m, self.device) for m, _ in probed]
        self.original, self.refs = models[0], models[1:]
        self.layers = _shared_layers(models, self.split.train_retain.x[:4].to(self.device), layers)
        self.cache = AuditCache()
        self._outputs: list[dict] | None = None

    def _prepared(self, model: nn.Module, role: str) -> nn.Module:
        """``model`` ready to audit: checked, probed on the forget rows, on the device, with the layers of
        the original."""
        model, k = probe(check_model(model, role), self.example, role)
        if k != self.num_classes:
            raise UserError(f"{role} has {k} outputs, the original {self.num_classes}")
        model = _on(model, self.device)
        _shared_layers([self.original, model], self.split.train_retain.x[:4].to(self.device), self.named_layers)
        return model

    def _reference_outputs(self, progress) -> list[dict]:
        """The original's and the references' forward passes, made once."""
        if self._outputs is None:
            outputs = []
            for i, m in enumerate((self.original, *self.refs)):
                progress.update(0, now="original" if i == 0 else f"reference {i}/{len(self.refs)}")
                outputs.append(model_outputs(m, self.split, self.layers, self.device, self.config.batch_size))
                progress.update(1)
            self._outputs = outputs
        return self._outputs

    def audit(self, unlearned) -> AuditResult | list[AuditResult]:
        """The audit of ``unlearned`` (a model, or a list of them: a list of results, in order) against the
        original and the references; returns an :class:`AuditResult` (``.verdict``, ``.evidence``,
        ``.save(dir)``). Every model is checked before any is audited."""
        roles = _roles(unlearned, "unlearned")
        models = [self._prepared(m, role) for m, role in zip(_unlearned(unlearned), roles)]
        steps = (0 if self._outputs is not None else 1 + len(self.refs)) + len(models)
        reports = []
        with bar(steps, "audit", enabled=self.progress) as progress:
            outputs = self._reference_outputs(progress)
            for model, role in zip(models, roles):
                progress.update(0, now=role)
                report = _audit(self.original, model, self.refs, self.split, layers=self.layers, config=self.config,
                                device=self.device, cache=self.cache,
                                outputs={"original": outputs[0], "retrained": outputs[1:]})
                reports.append(AuditResult.of(report))
                progress.update(1, done=f"{role}: {report.verdict}")
        return reports if isinstance(unlearned, (list, tuple)) else reports[0]


def _one_class_count(counts: list[int]) -> int:
    if len(set(counts)) != 1:
        raise UserError(f"the models have different numbers of outputs: {sorted(set(counts))}")
    return counts[0]


def audit(original: nn.Module, unlearned, retrained, *, forget=None, retain=None, test=None,
          layers: Sequence[str] | None = None, config: AuditConfig | None = None, device: str | None = None,
          progress: bool = True,
          input_key: str | None = None, label_key: str | None = None,
          **config_overrides) -> AuditResult | list[AuditResult]:
    """Did ``unlearned`` really forget ``forget``? The representation audit of the user's models on the user's data.

    Compares ``unlearned`` with ``original`` and with models retrained without ``forget``, layer by layer,
    and returns an :class:`AuditResult`: ``.verdict`` (``erased``, ``suppressed``, ``overforgotten``,
    ``collapsed``, ``not_forgotten``, ``inconclusive``), ``.evidence`` (plain words), every number behind it, and
    ``.save(dir)`` (audit.json / .md / .html). Every draw of the audit (relearning shots, probe splits) comes
    from a fresh audit seed unless ``audit_seed=`` (or ``config``) gives one; it is recorded in the result.

    Args:
        original: the model before unlearning (any ``nn.Module`` returning ``[batch, classes]`` logits, or
            an object with ``.logits``, such as a Hugging Face model's output).
        unlearned: the unlearned model, or a list of them (then a list of results: the original's and the
            references' passes and numbers are computed once, see :class:`Auditor`). The result of
            :func:`unlearnkit.unlearn` is taken as its ``.model``.
        retrained: a list of models retrained without ``forget`` (different seeds, the same recipe as the
            original; 5 to 8 recommended, 16 on digits-sized data where the party audited may attack the audit:
            the verdict compares the unlearned model with their spread, and one reference can flag but never
            certify ``erased``); duplicates, the original, or a model that still predicts ``forget`` are refused.
        forget: the training rows to forget (required, as are retain and test).
        retain: the retained training rows.
        test: held-out rows none of the models trained on. Each of the three is a ``Dataset`` (of
            ``(input, label)`` pairs or dicts), a ``DataLoader`` or ``(x, y)`` tensors, inputs exactly as
            the model takes them (images ``[N, C, H, W]`` or flat rows ``[N, D]``).
        layers: module paths (or ``penultimate``) to audit; default: found from one probe batch. A model
            without an ``nn.Linear`` classifier needs them named.
        config: an :class:`~unlearnkit.audit.AuditConfig`, or give its fields as keywords
            (``n_splits=10``), not both.
        device: where to compute (``"cpu"``, ``"cuda"``); default: where ``original`` is.
        progress: a progress bar on stderr (off with ``False`` or ``UNLEARNKIT_PROGRESS=0``).
        input_key, label_key: the keys of dict items (default: ``pixel_values`` / ``image`` / ``input`` /
            ``x`` and ``label`` / ``labels`` / ``y``).

    Every argument is checked before any work (a :class:`~unlearnkit.UserError` naming it). Models must
    be float32 (float64 and half models are refused, not converted: ``model.float()``).
    """
    _unlearned(unlearned)
    auditor = Auditor(original, retrained, forget=forget, retain=retain, test=test, layers=layers, config=config,
                      device=device, progress=progress, input_key=input_key, label_key=label_key,
                      **config_overrides)
    return auditor.audit(unlearned)


#: the name this function had (``unlearnkit.audit.audit_models``)
audit_models = audit
# ``unlearnkit.audit`` is this function, and the name used to be the subpackage: the function carries the
# subpackage's namespace (the same dict), so attribute paths through it (``uk.audit.AuditConfig``,
# ``unlearnkit.audit.user``, ``import unlearnkit.audit as pkg; pkg.__file__``) resolve as they did.
audit.__dict__ = sys.modules[__package__].__dict__
