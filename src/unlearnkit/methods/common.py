"""Plain functions shared by the methods (no trainer hierarchy): modes, optimizers, losses, batches.

Under ``torchrun`` (``distributed.py``) the batch iterators give each rank its rows of every global
batch, the optimizers from :func:`sgd` / :func:`adam` / :func:`synced` average the gradients of the
global batch before each step, and :func:`check_finite` returns (and checks) the loss of the global
batch; in one process they are what they always were.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import distributed
from ..data.arrays import ArrayData, Augment
from ..distributed import global_batch_len, local_rows, sum_over_ranks, synced  # noqa: F401  (re-exported)
from ..errors import NonFiniteLossError, UserError
from ..progress import bar
from .base import BN_MODES


def set_train_mode(model: nn.Module, bn_mode: str = "train") -> None:
    """``model.train()``; with ``bn_mode="frozen"`` BatchNorm layers stay in eval (running statistics
    unchanged, affine parameters still trained), as PURGE does (reference-specs §6.1)."""
    if bn_mode not in BN_MODES:
        raise UserError(f"bn_mode must be one of {', '.join(BN_MODES)}, not {bn_mode!r}")
    model.train()
    if bn_mode == "frozen":
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()


def sgd(params, lr: float, momentum: float = 0.9, weight_decay: float = 5e-4) -> torch.optim.SGD:
    return synced(torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay))


def adam(params, lr: float, weight_decay: float = 0.0) -> torch.optim.Adam:
    return synced(torch.optim.Adam(params, lr=lr, weight_decay=weight_decay))


def set_lr(opt: torch.optim.Optimizer, lr: float) -> dict:
    """Every parameter group of ``opt`` at ``lr``; ``{"lr": lr}`` for a history row (a schedule kept by
    the method itself, e.g. as :func:`descend`'s ``epoch_info``)."""
    for group in opt.param_groups:
        group["lr"] = lr
    return {"lr": lr}


def check_finite(loss: Tensor, method: str, step: int) -> float:
    """Stop with a clear error instead of returning a silently broken model; returns a scalar loss
    as a float (in a data-parallel run: over the whole global batch, the same on every rank)."""
    if loss.numel() != 1:
        if not torch.isfinite(loss).all():
            raise NonFiniteLossError(f"{method}: non-finite values at step {step}; lower its learning rate")
        return math.nan
    value = distributed.batch_mean(loss)
    if not math.isfinite(value):
        raise NonFiniteLossError(f"{method}: loss became {value} at step {step}; lower its learning rate")
    return value


def kl_with_temperature(student_logits: Tensor, teacher_logits: Tensor, T: float = 1.0) -> Tensor:
    """KL(softmax(t/T) || softmax(s/T)) * T^2, batch mean (SCRUB's DistillKL, sum / batch)."""
    p_t = F.softmax(teacher_logits / T, dim=1)
    log_s = F.log_softmax(student_logits / T, dim=1)
    return F.kl_div(log_s, p_t, reduction="sum") * (T * T) / student_logits.shape[0]


def batches(data: ArrayData, batch_size: int, gen: torch.Generator, device, augment: Augment | None = None,
            shuffle: bool = True) -> Iterator[tuple[Tensor, Tensor]]:
    """One shuffled pass over ``data`` (training transform when ``augment`` is given); this rank's
    rows of each global batch under ``torchrun``."""
    return distributed.sharded_batches(data, batch_size, shuffle=shuffle, generator=gen, augment=augment,
                                       device=device)


def cycle(data: ArrayData, batch_size: int, gen: torch.Generator, device, augment: Augment | None = None
          ) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless shuffled batches (a new permutation each pass), for pairing forget with retain batches."""
    while True:
        yield from batches(data, batch_size, gen, device, augment)


def n_batches(data: ArrayData, batch_size: int) -> int:
    return -(-len(data) // batch_size)


def descend(model: nn.Module, opt: torch.optim.Optimizer, data: ArrayData,
            loss_fn: Callable[[Tensor, Tensor], Tensor], *, epochs: int, batch_size: int, gen: torch.Generator,
            device, augment: Augment | None, bn_mode: str, method: str, label: str, progress: bool,
            sign: float = 1.0, epoch_info: Callable[[int], dict] | None = None) -> list[dict]:
    """The step loop of the methods that train on one data part: ``epochs`` shuffled passes over
    ``data``; per batch ``loss = loss_fn(x, y)``, :func:`check_finite`, ``zero_grad``,
    ``backward``, ``step``. Returns one history row per epoch,
    ``{"epoch": e, **epoch_info(e - 1), label: sign x mean loss}`` (``sign=-1``: gradient ascent
    records the cross-entropy it raises); the bar shows ``label`` too. ``epoch_info`` is called at
    the start of every epoch, after the train mode is set (L1-sparse sets its alpha there)."""
    per_epoch = n_batches(data, batch_size)
    history, step = [], 0
    with bar(epochs * per_epoch, method, progress) as pb:
        for epoch in range(epochs):
            set_train_mode(model, bn_mode)
            info = epoch_info(epoch) if epoch_info is not None else {}
            total = 0.0
            for x, y in batches(data, batch_size, gen, device, augment):
                loss = loss_fn(x, y)
                value = check_finite(loss, method, step)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += value
                step += 1
                pb.update(1, **{label: sign * value})
            history.append({"epoch": epoch + 1, **info, label: sign * total / max(1, per_epoch)})
    return history


def reinit(model: nn.Module) -> None:
    """Fresh initialisation of every module that has ``reset_parameters`` (BN statistics too)."""
    for m in model.modules():
        if hasattr(m, "reset_running_stats"):
            m.reset_running_stats()
        if hasattr(m, "reset_parameters"):
            m.reset_parameters()


def randn_like(p: Tensor, gen: torch.Generator) -> Tensor:
    """Standard normal noise shaped like ``p``, drawn on the CPU with ``gen`` (the same draws on any device)."""
    return torch.randn(p.shape, generator=gen, dtype=p.dtype).to(p.device)


def random_labels(n: int, num_classes: int, gen: torch.Generator, exclude: Tensor | None = None) -> Tensor:
    """``n`` labels ~ Uniform{0..K-1} drawn with ``gen`` (on the CPU); with ``exclude`` (e.g. the true
    labels) each label is uniform over the K-1 *other* classes instead. For a batch, draw for the
    global batch and keep this rank's rows: ``local_rows(random_labels(global_batch_len(x), ...))``."""
    if exclude is None:
        return torch.randint(0, num_classes, (n,), generator=gen)
    r = torch.randint(0, num_classes - 1, (n,), generator=gen)
    return r + (r >= exclude.cpu()).long()


def reinit_seeded(model: nn.Module, gen: torch.Generator) -> None:
    """:func:`reinit` with a seed drawn from ``gen``; the global RNG state is left as it was."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
    cuda = sorted({p.device.index or 0 for p in model.parameters() if p.is_cuda})
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        reinit(model)


def per_sample_grads(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, Tensor]:
    """Gradients of ``CE(model(x_i), y_i)`` for every sample, ``{name: Tensor[B, *param.shape]}``.

    Vectorised with ``torch.func`` (``functional_call`` + ``vmap`` + ``grad``) over the parameters
    that require grad. Exact, and equal to a loop with batch size 1, when the model is in ``eval()``
    (BatchNorm then uses its running statistics, so samples do not interact), which is how the
    references that need per-sample gradients run (FF, IU). Buffers are read, never written.
    """
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}

    def loss(p, xi, yi):
        out = functional_call(model, (p, buffers), (xi.unsqueeze(0),))
        return F.cross_entropy(out, yi.unsqueeze(0))

    return vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)


def projection_head(in_dim: int, hidden: int, out_dim: int, gen: torch.Generator, device) -> nn.Module:
    """A temporary MLP projection head ``Linear-ReLU-Linear`` (SupCon's ``head='mlp'``), initialised
    from a seed drawn from ``gen`` without touching the global RNG. Callers L2-normalise its output."""
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
    return head.to(device)


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """Every module of ``model`` in ``eval()`` inside the block; each module's own train/eval flag is
    restored afterwards (so a frozen-BatchNorm training mode from ``set_train_mode`` survives)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


@torch.no_grad()
def accuracy_fraction(model: nn.Module, data: ArrayData, device, batch_size: int = 512) -> float:
    """Fraction of ``data`` that ``model`` classifies correctly (evaluation transform, :func:`evaluating`;
    0.0 for empty data). For the methods' own stopping rules (CU, DUCK, EC), never to grade them."""
    with evaluating(model):
        correct = sum(int((model(x).argmax(1) == y).sum())
                      for x, y in data.batches(batch_size, device=device))
    return correct / max(len(data), 1)


@torch.no_grad()
def per_sample_eval(model: nn.Module, data: ArrayData, device, batch_size: int = 512
                    ) -> tuple[Tensor, Tensor]:
    """Per-sample cross-entropy ``[N]`` and predicted class ``[N]`` of ``model`` on ``data`` (CPU tensors).

    Evaluation transform, data order kept, every module in ``eval()``; each module's train/eval flag
    is restored afterwards, so a frozen-BatchNorm training mode (``set_train_mode``) survives the check.
    Methods use it for their own stopping rules and selections (PURGE's FA / retain-CE checks, TARF's
    I_con), never to grade themselves.
    """
    losses, preds = [], []
    with evaluating(model):
        for x, y in data.batches(batch_size, device=device):
            out = model(x)
            losses.append(F.cross_entropy(out, y, reduction="none").float().cpu())
            preds.append(out.argmax(1).cpu())
    if not losses:
        return torch.empty(0), torch.empty(0, dtype=torch.long)
    return torch.cat(losses), torch.cat(preds)
