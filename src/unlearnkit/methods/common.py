"""Plain functions shared by the methods (no trainer hierarchy): modes, optimizers, losses, batches."""
from __future__ import annotations

from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.arrays import ArrayData, Augment
from ..errors import NonFiniteLossError

BN_MODES = ("train", "frozen")


def set_train_mode(model: nn.Module, bn_mode: str = "train") -> None:
    """``model.train()``; with ``bn_mode="frozen"`` BatchNorm layers stay in eval (running statistics
    unchanged, affine parameters still trained), as PURGE does (reference-specs §6.1)."""
    if bn_mode not in BN_MODES:
        raise ValueError(f"bn_mode must be one of {BN_MODES}, not {bn_mode!r}")
    model.train()
    if bn_mode == "frozen":
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()


def sgd(params, lr: float, momentum: float = 0.9, weight_decay: float = 5e-4) -> torch.optim.SGD:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


def check_finite(loss: Tensor, method: str, step: int) -> None:
    """Stop with a clear error instead of returning a silently broken model."""
    if not torch.isfinite(loss).all():
        raise NonFiniteLossError(f"{method}: loss became {loss.item()} at step {step}; "
                                 f"lower its learning rate")


def kl_with_temperature(student_logits: Tensor, teacher_logits: Tensor, T: float = 1.0) -> Tensor:
    """KL(softmax(t/T) || softmax(s/T)) * T^2, batch mean (SCRUB's DistillKL, sum / batch)."""
    p_t = F.softmax(teacher_logits / T, dim=1)
    log_s = F.log_softmax(student_logits / T, dim=1)
    return F.kl_div(log_s, p_t, reduction="sum") * (T * T) / student_logits.shape[0]


def batches(data: ArrayData, batch_size: int, gen: torch.Generator, device, augment: Augment | None = None,
            shuffle: bool = True) -> Iterator[tuple[Tensor, Tensor]]:
    """One shuffled pass over ``data`` (training transform when ``augment`` is given)."""
    return data.batches(batch_size, shuffle=shuffle, generator=gen, augment=augment, device=device)


def cycle(data: ArrayData, batch_size: int, gen: torch.Generator, device, augment: Augment | None = None
          ) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless shuffled batches (a new permutation each pass), for pairing forget with retain batches."""
    while True:
        yield from data.batches(batch_size, shuffle=True, generator=gen, augment=augment, device=device)


def n_batches(data: ArrayData, batch_size: int) -> int:
    return -(-len(data) // batch_size)


def reinit(model: nn.Module) -> None:
    """Fresh initialisation of every module that has ``reset_parameters`` (BN statistics too)."""
    for m in model.modules():
        if hasattr(m, "reset_running_stats"):
            m.reset_running_stats()
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()
