"""GA (gradient ascent): maximise cross-entropy on the forget data only.

Reference: SalUn ``unlearn/GA.py`` (reference-specs §3.2): loss = -CE(f(x_f), y_f), SGD momentum 0.9,
weight decay 5e-4, batch 256, train mode, defaults lr 1e-4 and 5 epochs. Unbounded: with a large
learning rate it destroys retained accuracy too (PURGE's table: GA TA 38 %).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from .base import UnlearningMethod, UnlearnResult, int_range, log_range, register_method
from .common import descend, sgd


@register_method("gradient_ascent", "GA")
@dataclass
class GradientAscent(UnlearningMethod):
    paper = "Thudi et al. 2022 / Graves et al. 2021; SalUn GA baseline"
    needs = frozenset({"forget"})
    distributed = True  # one data part per step: runs data-parallel under torchrun
    # small: on digits (val split, class 3) lr 1e-3 x 5 epochs: val forget 7.6 -> retain 99.4; 2e-4: 53 / 100.
    # On mnist5k GA has no good operating point (val forget / val retain): lr 1e-4 x 5: 0 / 55.6;
    # 1e-4 x 1: 92.5 / 95.8; 5e-4 x 2: 27.5 / 82.2; 1e-3 x 5: 0 / 23.3 -- forgetting comes with collapse,
    # as PURGE's table reports for GA on CIFAR-10 (TA 38 %). The preset keeps the digits choice.
    PRESETS = {"reference": {}, "small": {"lr": 1e-3, "epochs": 5, "batch_size": 128},
               "test": {"lr": 1e-3, "epochs": 1, "batch_size": 128}}
    # what `unlearnkit tune` searches (on the validation split; see unlearnkit/tune.py)
    SEARCH_SPACE = {"lr": log_range(1e-5, 1e-2), "epochs": int_range(1, 10)}

    lr: float = 1e-4
    epochs: int = 5
    batch_size: int = 256
    momentum: float = 0.9
    weight_decay: float = 5e-4
    augment: bool = True
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        opt = sgd(model.parameters(), self.lr, self.momentum, self.weight_decay)
        history = descend(model, opt, data.forget, lambda x, y: -F.cross_entropy(model(x), y),
                          epochs=self.epochs, batch_size=self.batch_size, gen=gen, device=device,
                          augment=data.augment if self.augment else None, bn_mode=self.bn_mode,
                          method=self.name, label="forget_ce", sign=-1.0, progress=progress)
        return UnlearnResult(model, "completed", history)
