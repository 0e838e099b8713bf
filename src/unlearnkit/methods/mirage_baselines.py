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
* ``ssd_mirage``, ``fisher_mirage``, ``amnesiac_mirage``, ``unsir_mirage``: the ``variant="mirage"`` code
  of :mod:`.ssd`, :mod:`.fisher_forgetting`, :mod:`.amnesiac`, :mod:`.unsir` (documented there),
  registered with that variant as their default and only value.

Mirage switches to Adam (lr 1e-4, wd 1e-4) for tabular data; these keep SGD everywhere (deliberate).
``PRESETS["small"]`` only turns augmentation off: Mirage's MNIST transform has none (``"test"``: also
one epoch).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ..errors import UserError
from .amnesiac import Amnesiac
from .base import UnlearningMethod, UnlearnResult, register_method
from .common import descend, sgd
from .finetune import Finetune
from .fisher_forgetting import FisherForgetting
from .ssd import SelectiveSynapticDampening
from .unsir import UNSIR

NO_AUGMENT = {"reference": {}, "small": {"augment": False}, "test": {"augment": False, "epochs": 1}}
PLAIN = {"reference": {}, "small": {}, "test": {}}


class _MirageVariant:
    """Mixin for the thin subclasses: the parent's ``variant="mirage"`` code and nothing else."""

    original: ClassVar[str] = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.variant != "mirage":
            raise UserError(f"{self.name} is Mirage's variant only (variant='mirage'); for the original "
                            f"algorithm use {self.original}")


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
class SSDMirage(_MirageVariant, SelectiveSynapticDampening):
    original = "ssd"
    paper = ("Mirage's SSD baseline (YuZhenyuLindy/Mirage mirage_lib.py::ssd_unlearn): sum of abs(grad) over D_f "
             "and D_r, imp_f/imp_r > 1 scaled by 0.9 (not Foster et al.'s rule)")
    reduces_forget_acc = False  # Mirage reports it keeps the forgotten class (y_u 88 % on CIFAR-10)
    PRESETS = PLAIN

    variant: str = "mirage"


@register_method("fisher_mirage")
@dataclass
class FisherMirage(_MirageVariant, FisherForgetting):
    original = "fisher_forgetting"
    paper = ("Mirage's Fisher baseline (YuZhenyuLindy/Mirage mirage_lib.py::fisher_forgetting): Fisher of D_f, "
             "noise alpha*clamp(1/F, 10), weights clamped to [-10, 10] (not Golatkar et al.'s)")
    PRESETS = PLAIN

    variant: str = "mirage"


@register_method("amnesiac_mirage")
@dataclass
class AmnesiacMirage(_MirageVariant, Amnesiac):
    original = "amnesiac"
    paper = ("Mirage's Amnesiac baseline (YuZhenyuLindy/Mirage mirage_lib.py::amnesiac_unlearn): CE on D_f "
             "with uniform random labels, no stored-update removal (not Graves et al.'s)")
    PRESETS = {**PLAIN, "test": {"epochs": 1}}

    variant: str = "mirage"
    lr: float = 1e-3
    epochs: int = 5
    batch_size: int = 128


@register_method("unsir_mirage")
@dataclass
class UNSIRMirage(_MirageVariant, UNSIR):
    original = "unsir"
    paper = ("Mirage's UNSIR baseline (YuZhenyuLindy/Mirage mirage_lib.py::unsir_unlearn): ascent on D_f, "
             "N(0, 0.1^2) weight noise, repair on D_r (no error-maximising noise, unlike Tarun et al.)")
    PRESETS = {**PLAIN, "test": {"mirage_epochs": 1}}

    variant: str = "mirage"
