"""The plain training loop and its recipe, shared by reference training and loop-based methods.

``fit`` trains with cross-entropy under a :class:`Recipe` (optimizer, per-epoch schedule, epochs,
batch size, weight decay, augmentation), shows a progress bar, stops on a non-finite loss, and can
resume exactly from a state written after any epoch. Under ``torchrun`` it trains data-parallel
(``distributed.py``: the recipe's batch size is the global batch, cut across the ranks; loss and
accuracy reduced over them); a :class:`~unlearnkit.runtime.Runtime` selects the GPU fast path.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from . import distributed
from .data.arrays import ArrayData, Augment
from .errors import NonFiniteLossError, UserError
from .progress import bar
from .runtime import Runtime


@dataclass(frozen=True)
class Recipe:
    optimizer: str = "sgd"          # sgd | adam
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    epochs: int = 20
    batch_size: int = 128
    schedule: str = "cosine"        # cosine | multistep | constant
    milestones: tuple[int, ...] = ()
    gamma: float = 0.1
    augment: bool = True
    warmup_epochs: int = 0

    def __post_init__(self) -> None:
        from .validate import dataclass_fields, learning_rate, number, whole

        dataclass_fields(self, "recipe ")
        if self.optimizer not in ("sgd", "adam"):
            raise UserError(f"recipe optimizer must be 'sgd' or 'adam', not {self.optimizer!r}")
        if self.schedule not in ("cosine", "multistep", "constant"):
            raise UserError(f"recipe schedule must be cosine|multistep|constant, not {self.schedule!r}")
        whole("recipe epochs", self.epochs, low=1)
        whole("recipe batch_size", self.batch_size, low=1)
        whole("recipe warmup_epochs", self.warmup_epochs, low=0)
        learning_rate("recipe lr", self.lr)
        number("recipe momentum", self.momentum, low=0, high=1)
        number("recipe weight_decay", self.weight_decay, low=0)
        number("recipe gamma", self.gamma, low=0, low_open=True)
        object.__setattr__(self, "milestones", tuple(whole("recipe milestones", m, low=0) for m in self.milestones))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["milestones"] = list(self.milestones)
        return d


def make_optimizer(params, recipe: Recipe) -> torch.optim.Optimizer:
    if recipe.optimizer == "adam":
        return torch.optim.Adam(params, lr=recipe.lr, weight_decay=recipe.weight_decay)
    return torch.optim.SGD(params, lr=recipe.lr, momentum=recipe.momentum, weight_decay=recipe.weight_decay)


def lr_at(recipe: Recipe, epoch: int) -> float:
    """Learning rate for a 0-based epoch (per-epoch schedule, linear warm-up first)."""
    if epoch < recipe.warmup_epochs:
        return recipe.lr * (epoch + 1) / recipe.warmup_epochs
    if recipe.schedule == "cosine":
        return 0.5 * recipe.lr * (1 + math.cos(math.pi * epoch / recipe.epochs))
    if recipe.schedule == "multistep":
        return recipe.lr * recipe.gamma ** sum(epoch >= m for m in recipe.milestones)
    return recipe.lr


@dataclass
class FitState:
    """Everything needed to resume a training exactly where it stopped."""

    epoch: int = 0
    history: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0


def fit(model: nn.Module, data: ArrayData, recipe: Recipe, augment: Augment | None = None, *, seed: int = 0,
        device: torch.device | str = "cpu", description: str = "train", progress: bool = True,
        resume: dict | None = None, on_epoch=None, runtime: Runtime | None = None) -> FitState:
    """Train ``model`` in place with cross-entropy; returns the history (loss, accuracy per epoch).

    ``resume`` is a state written by ``on_epoch`` (model, optimizer, generator, epoch): the result
    is then identical to an uninterrupted run. ``on_epoch`` is called on rank 0 only (the one that
    writes). Raises :class:`NonFiniteLossError` on NaN/inf loss.
    """
    device = torch.device(device)
    rt = runtime or Runtime()
    rank = distributed.world()
    model.to(device)
    opt = distributed.synced(make_optimizer(model.parameters(), recipe))
    gen = torch.Generator().manual_seed(seed)
    state = _resumed(model, opt, gen, resume)
    aug = augment if recipe.augment else None
    (data,) = rt.place([data], device)
    steps = -(-len(data) // recipe.batch_size)
    with (bar(recipe.epochs * steps, description, progress and rank.is_main) as pbar, rt.backend(device),
          rt.model(model) as forward, distributed.synced_batchnorm(model)):
        pbar.update(state.epoch * steps)
        for epoch in range(state.epoch, recipe.epochs):
            t0 = time.perf_counter()
            for g in opt.param_groups:
                g["lr"] = lr_at(recipe, epoch)
            batches = distributed.sharded_batches(data, recipe.batch_size, generator=gen, augment=aug, device=device)
            loss_epoch, acc = _epoch(model, forward, opt, batches, rt, device, pbar=pbar)
            if not torch.isfinite(torch.tensor(loss_epoch)):
                raise NonFiniteLossError(f"{description}: loss became {loss_epoch} in epoch {epoch + 1}; "
                                         f"lower the learning rate ({recipe.lr:g})")
            state.history.append({"epoch": epoch + 1, "loss": loss_epoch, "acc": acc, "lr": lr_at(recipe, epoch)})
            state.elapsed_s += time.perf_counter() - t0
            state.epoch = epoch + 1
            pbar.update(0, loss=loss_epoch, acc=acc)
            if on_epoch is not None and rank.is_main:
                on_epoch(copy.deepcopy({"model": model.state_dict(), "optimizer": opt.state_dict(),
                                        "generator": gen.get_state(), "epoch": state.epoch,
                                        "history": state.history, "elapsed_s": state.elapsed_s}))
    return state


def _resumed(model: nn.Module, opt, gen: torch.Generator, resume: dict | None) -> FitState:
    """A fresh state, or the one ``resume`` holds (model, optimizer and generator restored in place)."""
    if resume is None:
        return FitState()
    model.load_state_dict(resume["model"])
    opt.load_state_dict(resume["optimizer"])
    gen.set_state(resume["generator"])
    return FitState(int(resume["epoch"]), list(resume["history"]), float(resume["elapsed_s"]))


def _epoch(model: nn.Module, forward, opt, batches, rt: Runtime, device: torch.device, *, pbar) -> tuple[float, float]:
    """One pass of cross-entropy steps; the epoch's mean loss and accuracy (%), summed over the ranks."""
    model.train()
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    seen = 0
    for xb, yb in batches:
        with rt.autocast(device):
            logits = forward(rt.input(xb))
            loss = F.cross_entropy(logits, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if len(yb):  # a rank's share of a short last batch can be empty (its loss is nan)
            loss_sum += loss.detach() * len(yb)
            correct += (logits.detach().argmax(1) == yb).sum()
        seen += len(yb)
        pbar.update(1)
    if distributed.world().size > 1:
        loss_sum, correct, seen = _reduced(loss_sum, correct, seen)
    return float(loss_sum) / seen, 100.0 * float(correct) / seen


def _reduced(loss_sum: torch.Tensor, correct: torch.Tensor, seen: int) -> tuple[float, int, int]:
    """Epoch loss sum, correct count and samples summed over the ranks (one all-reduce)."""
    seen_t = torch.tensor(float(seen), dtype=torch.float64, device=loss_sum.device)
    t = distributed.sum_over_ranks(torch.stack([loss_sum.double(), correct.double(), seen_t]))
    return float(t[0]), int(round(float(t[1]))), int(round(float(t[2])))
