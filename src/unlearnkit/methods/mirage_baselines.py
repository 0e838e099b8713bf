"""Mirage's simplified baselines, registered apart from the original algorithms (pitfall §6.11).

Mirage (seed 000) compares against its own short re-implementations in
``YuZhenyuLindy/Mirage@63b9f9a`` ``mirage_lib.py`` (reference-specs §3.17): every one starts from a
copy of the trained VFL model, runs in ``train()`` mode (BatchNorm and dropout active) except SSD and
Fisher (``eval()``), uses SGD momentum 0.9 without weight decay, batch 128, and Mirage calls them with
lr 1e-3 and 5 epochs. They are different methods from the papers they are named after, so each is
its own registered name here, next to the original (``finetune``, ``boundary_shrink``, ``ssd``, ...):

* ``finetune_mirage``: ``fine_tuning_unlearn``, CE on D_r (differs from SalUn's FT in lr 1e-3 vs 0.01,
  5 vs 10 epochs, no weight decay vs 5e-4, batch 128 vs 256);
* ``boundary_mirage``: ``boundary_unlearn`` ("BU"), neither Boundary Shrink nor Expanding;
* ``ssd_mirage``, ``fisher_mirage``, ``amnesiac_mirage``, ``unsir_mirage``: Mirage's short versions of
  :mod:`.ssd`, :mod:`.fisher_forgetting`, :mod:`.amnesiac`, :mod:`.unsir` (each documented on its class),
  sharing the originals' plain helper functions (``grad_importance``), not their classes.

Mirage switches to Adam (lr 1e-4, wd 1e-4) for tabular data; these keep SGD everywhere (deliberate).
``PRESETS["small"]`` only turns augmentation off: Mirage's MNIST transform has none (``"test"``: also
one epoch).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..progress import bar
from .base import NON_NEGATIVE, POSITIVE, UNIT, UnlearningMethod, UnlearnResult, register_method
from .common import (
    batches,
    check_finite,
    descend,
    global_batch_len,
    local_rows,
    n_batches,
    randn_like,
    random_labels,
    set_train_mode,
    sgd,
)
from .finetune import Finetune
from .ssd import grad_importance

NO_AUGMENT = {"reference": {}, "small": {"augment": False}, "test": {"augment": False, "epochs": 1}}
PLAIN = {"reference": {}, "small": {}, "test": {}}


@register_method("finetune_mirage", "FT_mirage")
@dataclass
class FinetuneMirage(Finetune):
    paper = "Mirage's FT baseline (YuZhenyuLindy/Mirage mirage_lib.py::fine_tuning_unlearn): CE on D_r"
    PRESETS = NO_AUGMENT

    lr: float = 1e-3
    epochs: int = 5
    batch_size: int = 128
    weight_decay: float = 0.0


@register_method("boundary_mirage", "BU")
@dataclass
class BoundaryMirage(UnlearningMethod):
    """Mirage's "BU" (``mirage_lib.py::boundary_unlearn``, reference-specs §3.8): on D_f batches, the
    target is the argmax of the *current* model's softmax with the true class zeroed, computed from
    the same forward pass (no adversarial example, no frozen original: Chen et al.'s Boundary Shrink
    uses an FGSM step on the frozen original, see ``boundary_shrink``); CE to it; SGD lr 1e-3,
    momentum 0.9, no weight decay, 5 epochs, train mode. Mirage's D_r loader argument is unused."""

    paper = ("Mirage's BU baseline (YuZhenyuLindy/Mirage mirage_lib.py::boundary_unlearn), after Chen et al., "
             "CVPR'23 'Boundary Unlearning'")
    needs = frozenset({"forget"})
    PRESETS = NO_AUGMENT

    lr: float = 1e-3
    epochs: int = 5
    batch_size: int = 128
    momentum: float = 0.9
    augment: bool = True
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        opt = sgd(model.parameters(), self.lr, self.momentum, weight_decay=0.0)

        def loss_fn(x, y):
            out = model(x)
            return F.cross_entropy(out, nearest_other_label(out, y))

        history = descend(model, opt, data.forget, loss_fn, epochs=self.epochs, batch_size=self.batch_size,
                          gen=gen, device=device, augment=data.augment if self.augment else None,
                          bn_mode=self.bn_mode, method=self.name, label="loss", progress=progress)
        return UnlearnResult(model, "completed", history)


@torch.no_grad()
def nearest_other_label(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mirage BU's target: the most probable class other than the true one."""
    p = F.softmax(logits, 1)
    p.scatter_(1, y.unsqueeze(1), 0)
    return p.argmax(1)


@register_method("ssd_mirage")
@dataclass
class SSDMirage(UnlearningMethod):
    """Mirage's SSD (``mirage_lib.py::ssd_unlearn``), a different method from Foster et al.'s ``ssd``
    (reference-specs §6.11): importances are *sums* of ``|grad CE|`` over shuffled batches (128) of D_f
    and of D_r (not D), and every parameter entry with ``imp_f / (imp_r + 1e-8) > 1`` is multiplied by
    ``1 - damping`` (0.9), in eval mode. Mirage reports it leaves forget accuracy near 88 %."""

    paper = ("Mirage's SSD baseline (YuZhenyuLindy/Mirage mirage_lib.py::ssd_unlearn): sum of abs(grad) over D_f "
             "and D_r, imp_f/imp_r > 1 scaled by 0.9 (not Foster et al.'s rule)")
    needs = frozenset({"forget", "retain"})
    not_distributed = "it is closed-form: full-pass gradient importances, then one dampening of the weights"
    reduces_forget_acc = False  # Mirage reports it keeps the forgotten class (y_u 88 % on CIFAR-10)
    PRESETS = PLAIN
    CONSTRAINTS = {"damping": UNIT}  # the fraction of a selected weight removed

    damping: float = 0.1
    batch_size: int = 128

    def _unlearn(self, model, data, original, device, gen, progress):
        model.eval()
        bs = self.batch_size
        with bar(n_batches(data.forget, bs) + n_batches(data.retain, bs), "ssd_mirage", progress) as pb:
            imp_f = grad_importance(model, data.forget, bs, device, self.name, power=1, reduce="sum", pb=pb, gen=gen)
            imp_r = grad_importance(model, data.retain, bs, device, self.name, power=1, reduce="sum", pb=pb, gen=gen)
        n_sel = 0
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in imp_f:
                    mask = (imp_f[n] / (imp_r[n] + 1e-8) > 1.0).float()
                    p.mul_(1.0 - mask * self.damping)
                    n_sel += int(mask.sum())
        return UnlearnResult(model, "completed", [{"selected": n_sel}])


@register_method("fisher_mirage")
@dataclass
class FisherMirage(UnlearningMethod):
    """Mirage's Fisher forgetting (``mirage_lib.py::fisher_forgetting``), a different method from
    Golatkar et al.'s ``fisher_forgetting`` (reference-specs §6.11): the Fisher of D_f (squared gradients
    of the batch-mean CE over shuffled batches of 128, summed, / N_f), then
    ``theta += N(0, 1) * alpha * clamp(1 / (F + 1e-6), max=10)`` and every weight clamped to [-10, 10],
    in eval mode. With alpha = 1 it destroys the model (Mirage reports CIFAR-10 retain accuracy ~9 %).
    The noise is drawn with the method's generator."""

    paper = ("Mirage's Fisher baseline (YuZhenyuLindy/Mirage mirage_lib.py::fisher_forgetting): Fisher of D_f, "
             "noise alpha*clamp(1/F, 10), weights clamped to [-10, 10] (not Golatkar et al.'s)")
    needs = frozenset({"forget"})
    not_distributed = "it is closed-form: one Fisher pass over D_f, then one noise step"
    PRESETS = PLAIN
    CONSTRAINTS = {"alpha": NON_NEGATIVE}  # alpha scales the noise

    alpha: float = 1.0
    batch_size: int = 128

    def _unlearn(self, model, data, original, device, gen, progress):
        model.eval()
        with bar(n_batches(data.forget, self.batch_size), "fisher_mirage", progress) as pb:
            fisher = grad_importance(model, data.forget, self.batch_size, device, self.name, power=2, reduce="sum",
                                     pb=pb, gen=gen)  # summed squared gradients over shuffled batches
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n not in fisher:
                    continue
                w = (1.0 / (fisher[n] / max(len(data.forget), 1) + 1e-6)).clamp(max=10.0)
                p.add_(randn_like(p, gen) * self.alpha * w)
                p.clamp_(-10.0, 10.0)
        return UnlearnResult(model, "completed", [])


@register_method("amnesiac_mirage")
@dataclass
class AmnesiacMirage(UnlearningMethod):
    """Mirage's Amnesiac (``mirage_lib.py::amnesiac_unlearn``, reference-specs §3.17), not Graves et al.'s
    nor the benchmarks' relabelling ``amnesiac``: CE on D_f ONLY, with labels ~ Uniform{0..K-1} drawn
    afresh for every row of every batch (the true class included), SGD momentum 0.9 without weight
    decay, 5 epochs at lr 1e-3, batch 128, train mode. Labels are drawn with the method's generator."""

    paper = ("Mirage's Amnesiac baseline (YuZhenyuLindy/Mirage mirage_lib.py::amnesiac_unlearn): CE on D_f "
             "with uniform random labels, no stored-update removal (not Graves et al.'s)")
    needs = frozenset({"forget"})
    distributed = True  # one data part per step: runs data-parallel under torchrun
    PRESETS = {**PLAIN, "test": {"epochs": 1}}

    lr: float = 1e-3
    epochs: int = 5
    batch_size: int = 128
    momentum: float = 0.9
    augment: bool = False
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        opt = sgd(model.parameters(), self.lr, self.momentum, weight_decay=0.0)

        def loss_fn(x, y):  # a fresh uniform label for every forget row, every step
            y = local_rows(random_labels(global_batch_len(x), data.num_classes, gen)).to(device)
            return F.cross_entropy(model(x), y)

        history = descend(model, opt, data.forget, loss_fn, epochs=self.epochs, batch_size=self.batch_size,
                          gen=gen, device=device, augment=data.augment if self.augment else None,
                          bn_mode=self.bn_mode, method=self.name, label="loss", progress=progress,
                          epoch_info=lambda _: {"samples": len(data.forget)})
        return UnlearnResult(model, "completed", history)


@register_method("unsir_mirage")
@dataclass
class UNSIRMirage(UnlearningMethod):
    """Mirage's UNSIR (``mirage_lib.py::unsir_unlearn``, reference-specs §3.17), not Tarun et al.'s
    error-maximising noise (``unsir``): train mode, SGD momentum 0.9 without weight decay, batch 128:
    gradient ascent on D_f for ``epochs`` (grad-norm clip 1.0) -> add N(0, weight_noise^2) to every
    weight -> CE on D_r at ``lr * 0.1`` for ``epochs`` (clip 1.0). Mirage zeroes NaN weights and skips
    NaN losses; here a non-finite loss stops with :class:`NonFiniteLossError` like every method."""

    paper = ("Mirage's UNSIR baseline (YuZhenyuLindy/Mirage mirage_lib.py::unsir_unlearn): ascent on D_f, "
             "N(0, 0.1^2) weight noise, repair on D_r (no error-maximising noise, unlike Tarun et al.)")
    needs = frozenset({"forget", "retain"})
    not_distributed = "its ascent, weight-noise and repair phases run their own clipped loops"
    PRESETS = {**PLAIN, "test": {"epochs": 1}}
    # a noise std, a gradient-norm bound; 0 epochs still adds the weight noise
    CONSTRAINTS = {"weight_noise": NON_NEGATIVE, "clip": POSITIVE, "epochs": NON_NEGATIVE}

    lr: float = 1e-3
    epochs: int = 5
    weight_noise: float = 0.1
    clip: float = 1.0
    batch_size: int = 128
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        total = self.epochs * (n_batches(data.forget, self.batch_size) + n_batches(data.retain, self.batch_size))
        history, step = [], 0
        with bar(total, "unsir_mirage", progress) as pb:
            set_train_mode(model, self.bn_mode)
            run = dict(gen=gen, device=device, pb=pb, history=history)
            step = self._phase(model, data.forget, "ascent", self.lr, step=step, **run)
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(randn_like(p, gen) * self.weight_noise)
            self._phase(model, data.retain, "repair", self.lr * 0.1, step=step, **run)
        return UnlearnResult(model, "completed", history)

    def _phase(self, model, part, phase: str, lr: float, *, step: int, gen, device, pb, history) -> int:
        """One phase (ascent on D_f or repair on D_r) of SGD with gradient-norm clipping; returns the step count."""
        sign, key = (-1.0, "forget_ce") if phase == "ascent" else (1.0, "retain_ce")
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        for epoch in range(self.epochs):
            for x, y in batches(part, self.batch_size, gen, device):
                loss = sign * F.cross_entropy(model(x), y)
                check_finite(loss, self.name, step)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), self.clip)
                opt.step()
                step += 1
                pb.update(1, **{key: sign * loss.item()})
            history.append({"phase": phase, "epoch": epoch + 1, key: sign * loss.item()})
        return step
