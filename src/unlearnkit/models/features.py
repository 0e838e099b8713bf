"""Layer taps: read named layers with forward hooks that are always removed (as captum does).

``capture(model, layers)`` is a context manager yielding a dict filled on every forward pass;
``extract(model, data, layers)`` runs ONE pass over the data and returns pooled ``[N, D]``
features of every requested layer, plus ``"logits"`` when asked for, so accuracy, MIA and the
representation audit all come from the same forward pass.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import torch
from torch import Tensor, nn

from .zoo import Tap, taps_of

LOGITS = "logits"


def pool(t: Tensor, tap: Tap | None = None) -> Tensor:
    """Pool a layer output to one vector per sample: global average over space or tokens."""
    if t.dim() == 2:
        return t
    if t.dim() == 3:  # (B, tokens, C)
        return t.mean(1)
    if t.dim() == 4:
        channels_last = tap is not None and tap.channels and t.shape[-1] == tap.channels and t.shape[1] != tap.channels
        return t.mean((1, 2)) if channels_last else t.mean((2, 3))
    return t.flatten(2).mean(2)


@contextmanager
def capture(model: nn.Module, layers: Sequence[str], pooled: bool = True, detach: bool = True
            ) -> Iterator[dict[str, Tensor]]:
    """Record the named layers' outputs (or inputs) on each forward; hooks removed even on error.

    ``detach=False`` keeps the graph (for losses on representations, e.g. PURGE's erasure term).
    """
    taps = taps_of(model)
    missing = [name for name in layers if name not in taps]
    if missing:
        raise KeyError(f"unknown layer(s) {missing}; this model has {list(taps)}")
    store: dict[str, Tensor] = {}
    handles = []

    def record(name: str, tap: Tap, value: Tensor) -> None:
        v = value.detach() if detach else value
        store[name] = pool(v, tap) if pooled else v

    try:
        for name in layers:
            tap = taps[name]
            mod = model.get_submodule(tap.module)
            if tap.at == "input":
                handles.append(mod.register_forward_pre_hook(
                    lambda m, args, name=name, tap=tap: record(name, tap, args[0])))
            else:
                handles.append(mod.register_forward_hook(
                    lambda m, args, out, name=name, tap=tap: record(name, tap, out)))
        yield store
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def extract(model: nn.Module, data, layers: Sequence[str], batch_size: int = 512,
            device: torch.device | str | None = None) -> dict[str, Tensor]:
    """Pooled features ``{layer: Tensor[N, D]}`` of all ``layers`` (and ``"logits"``) in one pass.

    ``data`` is an :class:`~unlearnkit.data.arrays.ArrayData` (test transform, no augmentation).
    The model is put in ``eval()`` and restored to its previous mode afterwards. Results on CPU.
    """
    device = device or next(model.parameters()).device
    want_logits = LOGITS in layers
    named = [name for name in layers if name != LOGITS]
    was_training = model.training
    model.eval()
    out: dict[str, list[Tensor]] = {name: [] for name in layers}
    try:
        with capture(model, named) as feats:
            for xb, _ in data.batches(batch_size, device=device):
                logits = model(xb)
                for name in named:
                    out[name].append(feats[name].float().cpu())
                if want_logits:
                    out[LOGITS].append(logits.float().cpu())
    finally:
        model.train(was_training)
    return {name: torch.cat(v) if v else torch.empty(0) for name, v in out.items()}
