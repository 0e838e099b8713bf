"""The audit's first step: one forward pass per model over the split's three parts.

Everything the audit measures afterwards comes from these tensors (every audit layer and the logits,
:func:`unlearnkit.evaluation.model_outputs`), except the resurfacing checks and IDI, which attack or
probe copies of the models. Passes the caller already made (``outputs``) are reused.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor, nn

from ..errors import UserError
from ..evaluation import model_outputs
from ..models.features import LOGITS
from ..models.zoo import audit_layers, taps_of
from .context import AuditContext, ForwardPasses

PARTS = ("train_forget", "train_retain", "test")


def as_model_list(retrained) -> list[nn.Module]:
    """``retrained`` (one model or several) as a non-empty list of models."""
    if isinstance(retrained, nn.Module):
        return [retrained]
    refs = list(retrained)
    if not refs or not all(isinstance(m, nn.Module) for m in refs):
        raise ValueError("retrained must be a model or a non-empty list of models")
    return refs


def checked_layers(layers: list[str], models: Sequence[nn.Module]) -> list[str]:
    """``layers``, each a tap of every model; a :class:`UserError` naming the missing ones otherwise
    (checked before any feature is extracted)."""
    for m in models:
        missing = [name for name in layers if name not in taps_of(m)]
        if missing:
            raise UserError(f"layer(s) {missing} not found in a model; it has {', '.join(taps_of(m))}")
    return layers


def _complete(out: dict | None, layers: Sequence[str]) -> bool:
    if not isinstance(out, dict):
        return False
    for part in PARTS:
        if part not in out or any(k not in out[part] for k in (*layers, LOGITS)):
            return False
    return True


def _outputs_for(model: nn.Module, given, layers: Sequence[str],
                 ctx: AuditContext) -> dict[str, dict[str, Tensor]]:
    """``given`` when it holds every layer and the logits of every part, else a fresh forward pass."""
    if _complete(given, layers):
        return given
    return model_outputs(model, ctx.split, list(layers), ctx.device, ctx.config.batch_size)


def same_vector_layers(layers: Sequence[str], outs: list[dict]) -> dict[str, str]:
    """Audit layers that read the same vector as a deeper one in every model (a ResNet's pooled last
    stage and its ``penultimate``, the average-pooled input of the head): ``{shallower: deeper}``.
    They are measured once, under the deeper name, so no layer counts twice in the verdict's family."""
    same: dict[str, str] = {}
    for i, a in enumerate(layers):
        for b in layers[i + 1:]:
            if all(o[part][a].shape == o[part][b].shape and torch.allclose(o[part][a], o[part][b], rtol=1e-5,
                                                                            atol=1e-6)
                   for o in outs for part in PARTS):
                same[a] = b
                break
    return same


def _non_finite_weights(model: nn.Module) -> list[str]:
    """Names of the floating-point parameters and buffers holding NaN or inf."""
    return [n for n, t in (*model.named_parameters(), *model.named_buffers())
            if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def _non_finite(bad_weights: list[str], out_u: dict | None, layers: Sequence[str]) -> str | None:
    """One line saying how the model is broken (non-finite weights or outputs), or None."""
    if bad_weights:
        more = f" and {len(bad_weights) - 3} more" if len(bad_weights) > 3 else ""
        return (f"the model has non-finite weights (NaN or inf in {', '.join(bad_weights[:3])}{more}): it "
                f"computes nothing, the forget set and everything else included")
    bad = [f"{part} {key}" for part, d in out_u.items() for key in (*layers, LOGITS)
           if key in d and not bool(torch.isfinite(d[key]).all())]
    if bad:
        return (f"the model's outputs are non-finite (NaN or inf at {', '.join(bad[:3])}"
                f"{' and more' if len(bad) > 3 else ''}): it computes nothing usable")
    return None


def _given_outputs(outputs: dict | None, n_refs: int) -> tuple[dict, list]:
    """(``outputs``, its ``retrained`` list padded to one entry per reference); ValueError on a length
    mismatch."""
    given = outputs or {}
    given_refs = given.get("retrained") or [None] * n_refs
    if len(given_refs) != n_refs:
        raise ValueError(f"outputs['retrained'] has {len(given_refs)} entries for {n_refs} retrained models")
    return given, given_refs


def forward_passes(original: nn.Module, unlearned: nn.Module, refs: list[nn.Module],
                   layers: Sequence[str] | None, ctx: AuditContext,
                   outputs: dict | None = None) -> ForwardPasses:
    """The unlearned model's pass first: when its weights or outputs are non-finite the audit stops there
    (``broken``). Then the original's and each reference's, and the audited layers without those that
    duplicate a deeper one (:func:`same_vector_layers`). ``layers`` default to the unlearned model's
    audit layers; ``outputs`` as :func:`unlearnkit.audit.audit` takes it (anything missing is computed)."""
    layers = checked_layers(list(layers) if layers else audit_layers(unlearned),
                            [original, unlearned, *refs])
    given, given_refs = _given_outputs(outputs, len(refs))
    passes = ForwardPasses(original, unlearned, refs, layers)
    bad_weights = _non_finite_weights(unlearned)
    passes.out_u = None if bad_weights else _outputs_for(unlearned, given.get("unlearned"), layers, ctx)
    passes.broken = _non_finite(bad_weights, passes.out_u, layers)
    if passes.broken:
        return passes
    passes.out_o = _outputs_for(original, given.get("original"), layers, ctx)
    passes.out_refs = [_outputs_for(m, g, layers, ctx) for m, g in zip(refs, given_refs)]
    passes.same_as = same_vector_layers(layers, [passes.out_o, passes.out_u, *passes.out_refs])
    passes.layers = [name for name in layers if name not in passes.same_as]
    return passes
