"""FT (fine-tuning): cross-entropy on the retained data only.

Reference: SalUn / Unlearn-Sparse ``unlearn/FT.py`` (reference-specs §3.1): SGD momentum 0.9,
weight decay 5e-4, batch 256, model in train mode (BatchNorm statistics update), training
augmentation; class-wise CIFAR-10 defaults lr 0.01, 10 epochs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from .base import UnlearningMethod, UnlearnResult, int_range, log_range, register_method
from .common import descend, sgd


@register_method("finetune", "FT")
@dataclass
class Finetune(UnlearningMethod):
    paper = "Warnecke et al. 2023 / SalUn FT baseline (catastrophic forgetting by fine-tuning on D_r)"
    needs = frozenset({"retain"})
    # FT forgets only through catastrophic forgetting. Measured on digits/small_cnn class 3 (val split):
    # val forget acc 100 -> 100 at lr 0.01-0.05 x 5 epochs, 93.3 at lr 0.1 x 10 epochs; SalUn reports
    # CIFAR-10 class-wise UA 22.5 (forget acc ~77). The suite therefore does not require a drop.
    reduces_forget_acc = False
    distributed = True  # one data part per step: runs data-parallel under torchrun
    PRESETS = {"reference": {}, "small": {"lr": 0.01, "epochs": 5, "batch_size": 128},
               "test": {"lr": 0.01, "epochs": 1, "batch_size": 128}}
    # what `unlearnkit tune` searches (on the validation split; see unlearnkit/tune.py)
    SEARCH_SPACE = {"lr": log_range(1e-3, 1e-1), "epochs": int_range(1, 10)}

    lr: float = 0.01
    epochs: int = 10
    batch_size: int = 256
    momentum: float = 0.9
    weight_decay: float = 5e-4
    augment: bool = True
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        opt = sgd(model.parameters(), self.lr, self.momentum, self.weight_decay)
        history = descend(model, opt, data.retain, lambda x, y: F.cross_entropy(model(x), y),
                          epochs=self.epochs, batch_size=self.batch_size, gen=gen, device=device,
                          augment=data.augment if self.augment else None, bn_mode=self.bn_mode,
                          method=self.name, label="retain_loss", progress=progress)
        return UnlearnResult(model, "completed", history)
