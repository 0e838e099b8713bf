"""RL (random labels): relabel the forget data at random, then repair on the retained data.

Reference: SalUn ``Classification/unlearn/RL.py`` (OPTML-Group/Unlearn-Saliency, reference-specs
§3.3), CIFAR-10/SVHN branch. Per epoch: (i) one pass over D_f where every batch gets fresh labels
~ Uniform{0..K-1} -- the true (forgotten) class included (pitfall §6.12) -- and a CE step;
(ii) one pass over D_r with its true labels and a CE step. SGD momentum 0.9, weight decay 5e-4,
batch 256, model in train mode (BatchNorm statistics update, also on the forget batches),
training augmentation. Class-wise CIFAR-10: 10 epochs, lr 0.01 (forks; the reference only tunes).

Deliberate differences: the random labels are drawn with the method's seeded generator, and the
CIFAR-100 branch (relabel D_f once per epoch and shuffle it into D_r) is not implemented.
The same loop with a weight-saliency mask is SalUn (``salun.py``), which reuses
:func:`random_label_epoch`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch.nn.functional as F

from ..progress import bar
from .base import UnlearnResult, UnlearningMethod, register_method
from .common import batches, check_finite, n_batches, random_labels, set_train_mode, sgd


def random_label_epoch(model, opt, data, batch_size, gen, device, aug, name, step, pb,
                       after_step: Callable[[str], None] | None = None) -> tuple[float, float, int]:
    """One RL epoch (forget pass with uniform random labels, then retain pass).

    ``after_step("grad")`` runs before and ``after_step("param")`` after every optimizer step (SalUn's mask). Returns the mean forget
    and retain losses and the updated step counter."""
    k = data.num_classes
    tot_f = tot_r = 0.0
    for x, _ in batches(data.forget, batch_size, gen, device, aug):
        y = random_labels(x.shape[0], k, gen).to(device)
        loss = F.cross_entropy(model(x), y)
        check_finite(loss, name, step)
        _step(opt, loss, after_step)
        tot_f += loss.item()
        step += 1
        pb.update(1, forget_ce=loss.item())
    for x, y in batches(data.retain, batch_size, gen, device, aug):
        loss = F.cross_entropy(model(x), y)
        check_finite(loss, name, step)
        _step(opt, loss, after_step)
        tot_r += loss.item()
        step += 1
        pb.update(1, retain_ce=loss.item())
    return (tot_f / max(1, n_batches(data.forget, batch_size)),
            tot_r / max(1, n_batches(data.retain, batch_size)), step)


def _step(opt, loss, after_step) -> None:
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if after_step is not None:
        after_step("grad")
    opt.step()
    if after_step is not None:
        after_step("param")


@register_method("random_label", "RL")
@dataclass
class RandomLabel(UnlearningMethod):
    paper = "Golatkar et al. 2020 / SalUn RL baseline (Fan et al., ICLR'24), Unlearn-Saliency unlearn/RL.py"
    needs = frozenset({"forget", "retain"})
    # Small preset chosen on the digits val split (class 3, small_cnn, seed 0): see tests and the
    # docstring of PRESETS_NOTE below.
    PRESETS = {"reference": {}, "small": {"lr": 0.01, "epochs": 3, "batch_size": 64}}

    lr: float = 0.01
    epochs: int = 10
    batch_size: int = 256
    momentum: float = 0.9
    weight_decay: float = 5e-4
    augment: bool = True
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        opt = sgd(model.parameters(), self.lr, self.momentum, self.weight_decay)
        aug = data.augment if self.augment else None
        total = self.epochs * (n_batches(data.forget, self.batch_size) + n_batches(data.retain, self.batch_size))
        history, step = [], 0
        with bar(total, self.name, progress) as pb:
            for epoch in range(self.epochs):
                set_train_mode(model, self.bn_mode)
                f, r, step = random_label_epoch(model, opt, data, self.batch_size, gen, device, aug,
                                                self.name, step, pb)
                history.append({"epoch": epoch + 1, "forget_random_ce": f, "retain_loss": r})
        return UnlearnResult(model, 0.0, "completed", history)
