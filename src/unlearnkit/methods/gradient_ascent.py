"""GA (gradient ascent): maximise cross-entropy on the forget data only.

Reference: SalUn ``unlearn/GA.py`` (reference-specs §3.2): loss = -CE(f(x_f), y_f), SGD momentum 0.9,
weight decay 5e-4, batch 256, train mode, defaults lr 1e-4 and 5 epochs. Unbounded: with a large
learning rate it destroys retained accuracy too (PURGE's table: GA TA 38 %).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F

from ..progress import bar
from .base import UnlearnResult, UnlearningMethod, register_method
from .common import batches, check_finite, n_batches, set_train_mode, sgd


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
    PRESETS = {"reference": {}, "small": {"lr": 1e-3, "epochs": 5, "batch_size": 128}}

    lr: float = 1e-4
    epochs: int = 5
    batch_size: int = 256
    momentum: float = 0.9
    weight_decay: float = 5e-4
    augment: bool = True
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        opt = sgd(model.parameters(), self.lr, self.momentum, self.weight_decay)
        aug = data.augment if self.augment else None
        history, step = [], 0
        with bar(self.epochs * n_batches(data.forget, self.batch_size), "gradient_ascent", progress) as pb:
            for epoch in range(self.epochs):
                set_train_mode(model, self.bn_mode)
                total = 0.0
                for x, y in batches(data.forget, self.batch_size, gen, device, aug):
                    loss = -F.cross_entropy(model(x), y)
                    value = check_finite(loss, self.name, step)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    total += value
                    step += 1
                    pb.update(1, forget_ce=-value)
                history.append({"epoch": epoch + 1, "forget_ce": -total / max(1, n_batches(data.forget, self.batch_size))})
        return UnlearnResult(model, 0.0, "completed", history)
