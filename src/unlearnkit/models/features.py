"""Layer taps: read named layers with forward hooks that are always removed (as captum does).

``capture(model, layers)`` is a context manager yielding a dict filled on every forward pass;
``extract(model, data, layers)`` runs ONE pass over the data and returns pooled ``[N, D]``
features of every requested layer, plus ``"logits"`` when asked for, so accuracy, MIA and the
representation audit all come from the same forward pass.
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn
from torch.nn.utils.fusion import fuse_conv_bn_weights

from .zoo import Tap, taps_of

LOGITS = "logits"


def pool(t: Tensor, tap: Tap | None = None) -> Tensor:
    """Pool a layer output to one vector per sample: global average over space or tokens."""
    if t.dim() == 2:
        return t
    if t.dim() == 3:  # (B, tokens, C)
        return t.mean(1)
    if t.dim() == 4:
        return t.mean((1, 2)) if _channels_last(t, tap) else t.mean((2, 3))
    return t.flatten(2).mean(2)


def _channels_last(t: Tensor, tap: Tap | None) -> bool:
    return bool(tap is not None and tap.channels and t.shape[-1] == tap.channels and t.shape[1] != tap.channels)


def _join_axis(t: Tensor, tap: Tap, pooled: bool) -> int:
    """Where a multi-part tap's parts are concatenated: features of pooled vectors, tokens of
    ``(B, T, C)`` outputs, the width of ``NCHW`` (``NHWC``) maps."""
    if pooled or t.dim() <= 3:
        return 1
    return 2 if _channels_last(t, tap) else 3


@contextmanager
def capture(model: nn.Module, layers: Sequence[str], pooled: bool = True, detach: bool = True
            ) -> Iterator[dict[str, Tensor]]:
    """Record the named layers' outputs (or inputs) on each forward; hooks removed even on error.

    ``detach=False`` keeps the graph (for losses on representations, e.g. PURGE's erasure term).
    A tap with ``parts`` (a VFL model's layer-wise taps) is joined across its parts, see :class:`Tap`.
    """
    taps = taps_of(model)
    missing = [name for name in layers if name not in taps]
    if missing:
        raise KeyError(f"unknown layer(s) {missing}; this model has {list(taps)}")
    store: dict[str, Tensor] = {}
    pending: dict[str, dict[int, Tensor]] = {}
    handles = []

    def record(name: str, tap: Tap, value: Tensor, part: int | None = None) -> None:
        v = value.detach() if detach else value
        v = pool(v, tap) if pooled else v
        if part is None:
            store[name] = v
            return
        got = pending.setdefault(name, {})
        got[part] = v
        if len(got) == len(tap.parts):  # the last party's part arrived: join them in party order
            store[name] = torch.cat([got[i] for i in range(len(tap.parts))], dim=_join_axis(v, tap, pooled))
            pending.pop(name)

    try:
        for name in layers:
            tap = taps[name]
            for part, module in enumerate(tap.parts) if tap.parts else [(None, tap.module)]:
                mod = model.get_submodule(module)
                if tap.at == "input":
                    handles.append(mod.register_forward_pre_hook(
                        lambda m, args, name=name, tap=tap, part=part: record(name, tap, args[0], part)))
                else:
                    handles.append(mod.register_forward_hook(
                        lambda m, args, out, name=name, tap=tap, part=part: record(name, tap, out, part)))
        yield store
    finally:
        for h in handles:
            h.remove()


def fast_copy(model: nn.Module, device: torch.device | str) -> nn.Module:
    """The model to run inference with: on the CPU, a copy of a convolutional model with its 4-D weights in
    channels-last memory order and every eval-mode BatchNorm2d that directly follows a Conv2d in an
    ``nn.Sequential`` folded into it (:func:`fold_batchnorm`); the same function up to float rounding. oneDNN's
    convolutions and max pooling run faster on it: small_cnn, one pass of 512 mnist rows, one thread, idle
    machine: 392 ms in the default order, 234 ms in this one, of which max pooling 100 ms against 14 ms; with
    the BatchNorms folded 195 ms against 245-259 ms (2026-12-07, the other core busy). Else ``model`` itself
    (already channels-last, no 4-D weight, another device, or a model that cannot be deep-copied)."""
    if torch.device(device).type != "cpu":
        return model
    convs = [p for p in model.parameters() if p.dim() == 4]
    if not convs or all(p.is_contiguous(memory_format=torch.channels_last) for p in convs):
        return model
    try:
        out = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - a model deepcopy refuses runs as it is, only slower
        return model
    fold_batchnorm(out)
    return out.to(memory_format=torch.channels_last)


@torch.no_grad()
def fold_batchnorm(model: nn.Module) -> int:
    """Fold, in place, every eval-mode ``BatchNorm2d`` with running statistics that comes right after a
    ``Conv2d`` (groups any; the classes themselves, not subclasses, without hooks) in an ``nn.Sequential`` (one
    that runs its children in order) into that convolution (torch's ``fuse_conv_bn_weights``: weight
    ``w γ / sqrt(var + eps)``, bias ``(b − mean) γ / sqrt(var + eps) + β``, on float64 copies, then cast back) and
    replace it by ``nn.Identity``: the same
    function up to float rounding, one pass over the activations fewer. A pair is left alone when an audit tap
    reads between the two (the convolution's output or the BatchNorm's input) or when a folded value would not be
    finite (extreme rescalings). Returns the number of BatchNorms folded."""
    taps = getattr(model, "unlearnkit_taps", None) or {}
    tapped = {(t, tap.at) for tap in taps.values() for t in (tap.parts or (tap.module,))}
    folded = 0
    for prefix, seq in model.named_modules():
        if not isinstance(seq, nn.Sequential) or type(seq).forward is not nn.Sequential.forward:
            continue  # a subclass with its own forward may not run its children in order
        names = list(seq._modules)
        for a, b in zip(names, names[1:]):
            conv, bn = seq._modules[a], seq._modules[b]
            if not (type(conv) is nn.Conv2d and type(bn) is nn.BatchNorm2d and not bn.training
                    and bn.running_mean is not None and bn.running_var is not None) or _hooked(conv, bn):
                continue
            qual = f"{prefix}.{a}" if prefix else a
            if (qual, "output") in tapped or ((f"{prefix}.{b}" if prefix else b), "input") in tapped:
                continue
            weight, shift = fuse_conv_bn_weights(_f64(conv.weight), _f64(conv.bias), _f64(bn.running_mean),
                                                 _f64(bn.running_var), bn.eps, _f64(bn.weight), _f64(bn.bias))
            weight, shift = weight.detach().to(conv.weight.dtype), shift.detach().to(conv.weight.dtype)
            if not (bool(torch.isfinite(weight).all()) and bool(torch.isfinite(shift).all())):
                continue
            fused = copy.deepcopy(conv)
            fused.weight = nn.Parameter(weight, requires_grad=False)
            fused.bias = nn.Parameter(shift, requires_grad=False)
            seq._modules[a], seq._modules[b] = fused, nn.Identity()
            folded += 1
    return folded


def _f64(t: Tensor | None) -> Tensor | None:
    return None if t is None else t.detach().double()


def _hooked(*modules: nn.Module) -> bool:
    return any(m._forward_hooks or m._forward_pre_hooks for m in modules)


@torch.no_grad()
def extract(model: nn.Module, data, layers: Sequence[str], batch_size: int = 512,
            device: torch.device | str | None = None) -> dict[str, Tensor]:
    """Pooled features ``{layer: Tensor[N, D]}`` of all ``layers`` (and ``"logits"``) in one pass.

    ``data`` is an :class:`~unlearnkit.data.arrays.ArrayData` (test transform, no augmentation).
    The model is put in ``eval()`` and restored to its previous mode afterwards. Results on CPU. On the CPU a
    convolutional model runs as its channels-last copy (:func:`fast_copy`); ``model`` is not changed.
    """
    device = device or next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        runner = fast_copy(model, device)
        if runner is not model:
            try:
                return _one_pass(runner, data, layers, batch_size, device, channels_last=True)
            except RuntimeError:  # e.g. a .view() of a channels-last map in the model's forward: as given
                pass
        return _one_pass(model, data, layers, batch_size, device, channels_last=False)
    finally:
        model.train(was_training)


def _one_pass(model: nn.Module, data, layers: Sequence[str], batch_size: int, device,
              channels_last: bool) -> dict[str, Tensor]:
    want_logits = LOGITS in layers
    named = [name for name in layers if name != LOGITS]
    out: dict[str, list[Tensor]] = {name: [] for name in layers}
    with capture(model, named) as feats:
        for xb, _ in data.batches(batch_size, device=device):
            logits = model(xb.contiguous(memory_format=torch.channels_last) if channels_last and xb.dim() == 4
                           else xb)
            for name in named:
                out[name].append(feats[name].float().cpu())
            if want_logits:
                out[LOGITS].append(logits.float().cpu())
    return {name: torch.cat(v) if v else torch.empty(0) for name, v in out.items()}
