"""DUCK (Distance-based Unlearning via Centroid Kinematics): pull forget embeddings onto the nearest
*other* class centroid while keeping the retain classification.

Reference: Cotogni et al., "DUCK: Distance-based Unlearning via Centroid Kinematics",
``OcraM17/DUCK@0961e3a`` ``src/Unlearning_methods.py::DUCK.run``, defaults ``src/opts.py``
(reference-specs §3.11)::

    z = penultimate vector (input of the classifier fc)
    centroids: model.eval(), z of the first 50 retain batches, per class mean (forgotten classes excluded)
    model.train(); Adam(lr 4e-4, wd 0), MultiStepLR([25, 40], 0.5) stepped per epoch; <= 200 epochs
    for each forget batch n (shuffled, bs 256):
        for each of the first batch_fgt_ret_ratio + 1 retain batches (a fresh shuffled pass, bs 256):
            d = 1 - cos(z(x_f), centroids)
            target: nearest centroid, or the 2nd nearest if the nearest is the sample's own class;
                    recomputed every step in the first epoch, then the first-epoch target of batch n
            L = lambda1 * mean_i d[i, target_i] + lambda2 * CE(fc(z(x_r)) / T, y_r);  step
    after each epoch: stop when the forget accuracy (eval mode) < target_accuracy
        (class removal "CR": 0.01; sample removal "HR": the original model's test accuracy)
    "low regime" post-phase (lambda1, lambda2 > 0): Adam(lr 1e-4), 2 epochs, cosine (T_max = 2*20*#forget
        batches, stepped per step); retain batches of 512 with train augmentation, drop_last;
        CR: only the first forget batch per epoch, all retain batches;
        HR: every forget batch, 20 retain batches;
        joint forward of [x_f; x_r]; L = CE(fc(z_r)/T, y_r) + lambda1/10 * mean d(z_f, target)
    batch_fgt_ret_ratio = 40 (CIFAR-10) / 5 (CIFAR-100, TinyImageNet); lambda1 = 1, lambda2 = 1.4, T = 2

Deliberate differences (all documented reference quirks, reference-specs §6.14):
- the reference appends a target to one flat list at *every* step of the first epoch and reads
  ``list[n_batch]`` afterwards, so later epochs (and the low regime, ``list[0]``) actually reuse the
  targets of the first forget batch's steps, although the loader reshuffles; here the target of
  forget batch *index* n is cached from its first step in epoch 1 (the documented intent; the
  loader still reshuffles, so the cached targets belong to other samples), and the low regime
  recomputes the target at its first retain batch as its code does before the lookup;
- the reference compares the *index* of the nearest centroid with the label ("own class"), which
  only coincides with the class when no class is removed; here the centroid's class label is compared;
- a class absent from the centroid batches gets no centroid (the reference would produce NaN);
- the reference runs one extra forward (no step) per forget batch before leaving the retain loop;
- the HR stop target uses the original model's accuracy on the *validation* split (the reference's
  test accuracy), so no test data are read during unlearning.

Plug-ins (``ec+duck``): ``accepts_extra_loss``; a plug-in's ``extra_loss`` is added to the loss of
every step of both phases. (:meth:`~unlearnkit.methods.base.UnlearningMethod.step_loss`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ..models.features import capture
from ..progress import bar
from .base import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, UNIT, Interval, UnlearningMethod, UnlearnResult, register_method
from .common import accuracy_fraction, batches, check_finite, set_train_mode


def pairwise_cos_dist(x: Tensor, y: Tensor) -> Tensor:
    """``1 - cos(x_i, y_j)`` for every pair, ``[len(x), len(y)]`` (DUCK's ``pairwise_cos_dist``)."""
    return 1 - F.normalize(x, dim=1) @ F.normalize(y, dim=1).T


def duck_targets(dists: Tensor, centroid_labels: Tensor, labels: Tensor) -> Tensor:
    """Index of the target centroid per row: the nearest, or the 2nd nearest when the nearest
    centroid is of the sample's own class."""
    order = torch.argsort(dists, dim=1)
    nearest = order[:, 0]
    if order.shape[1] < 2:
        return nearest
    own = centroid_labels[nearest] == labels
    return torch.where(own, order[:, 1], nearest)


@register_method("duck", "DUCK")
@dataclass
class DUCK(UnlearningMethod):
    paper = "Cotogni et al., DUCK: Distance-based Unlearning via Centroid Kinematics, 2023 (OcraM17/DUCK)"
    needs = frozenset({"forget", "retain", "val"})
    accepts_extra_loss = True  # a plug-in's loss (ec+duck) is added to every step
    not_distributed = ("its centroid distances and nested forget x retain batch loops are whole-batch statistics")
    # small: tuned on the VAL split, class 3, small_cnn, seed 0 (val forget / val retain accuracy;
    # original 100 / 100 on digits, 100 / 96.4 on mnist5k). DUCK reaches its target on digits with
    # everything tried; the preset is the cheap one that keeps the reference's phases:
    #   reference values (bs 256, ratio 40, low regime: 2 retain batches of 512): 0.0 / 99.2 (8 s);
    #   the same without the low regime: 0.0 / 99.2 (stops after 10 epochs)
    #   bs 64, ratio 5, low regime bs 128: 0.0 / 99.2 (4.5 s);  bs 64, ratio 2, no low regime: 0.0 / 100
    #   bs 64, ratio 5, lr 1e-3, no low regime: 6.7 / 99.2 (stops after 1 epoch)
    # mnist5k with the preset: 0.0 / 97.2 (train forget 2.5 % after the low regime; 64 s on a loaded
    # 2-core machine).
    PRESETS = {"reference": {}, "small": {"batch_size": 64, "batch_fgt_ret_ratio": 5, "low_batch_size": 128},
               "test": {"batch_size": 64, "batch_fgt_ret_ratio": 5, "low_batch_size": 128, "epochs": 1}}
    # MultiStepLR's factor in (0, 1]; accuracies as fractions; torch's label smoothing in [0, 1]
    CONSTRAINTS = {"milestones": NON_NEGATIVE, "gamma": Interval(0, 1, "right"),
                   "batch_fgt_ret_ratio": NON_NEGATIVE, "lambda_fgt": NON_NEGATIVE,
                   "lambda_ret": NON_NEGATIVE, "temperature": POSITIVE, "centroid_batches": AT_LEAST_ONE,
                   "target_accuracy": UNIT, "label_smoothing": UNIT, "low_hr_retain_batches": AT_LEAST_ONE,
                   "epochs": NON_NEGATIVE}  # 0 epochs still changes the model (its edit before the loop)

    lr: float = 4e-4
    weight_decay: float = 0.0
    milestones: tuple = (25, 40)
    gamma: float = 0.5
    epochs: int = 200                    # maximum; stops at target_accuracy
    batch_size: int = 256
    batch_fgt_ret_ratio: int = 40
    lambda_fgt: float = 1.0
    lambda_ret: float = 1.4
    temperature: float = 2.0
    centroid_batches: int = 50
    target_accuracy: float | None = None  # None: 0.01 for class removal, original val accuracy otherwise
    label_smoothing: float = 0.0
    low_regime: bool = True
    low_lr: float = 1e-4
    low_epochs: int = 2
    low_batch_size: int = 512
    low_hr_retain_batches: int = 20
    bn_mode: str = "train"

    def _unlearn(self, model, data, original, device, gen, progress):
        class_removal = bool(data.forgotten_classes)
        target_acc = self.target_accuracy
        if target_acc is None:
            target_acc = 0.01 if class_removal else accuracy_fraction(model, data.val, device)
        centroids, cent_labels = self._centroids(model, data, device, gen)
        history, step, stop = [], 0, "max_epochs"
        opt = torch.optim.Adam(model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        sched = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(self.milestones), gamma=self.gamma)
        cached: dict[int, Tensor] = {}
        with bar(self.epochs, "duck", progress) as pb, capture(model, ["penultimate"], detach=False) as feats:
            for epoch in range(self.epochs):
                set_train_mode(model, self.bn_mode)
                for n_fgt, (xf, yf) in enumerate(batches(data.forget, self.batch_size, gen, device)):
                    for n_ret, (xr, yr) in enumerate(batches(data.retain, self.batch_size, gen, device)):
                        if n_ret > self.batch_fgt_ret_ratio:
                            break
                        model(xf)
                        dists = pairwise_cos_dist(feats["penultimate"], centroids)
                        if epoch == 0:
                            tgt = duck_targets(dists.detach(), cent_labels, yf)
                            cached.setdefault(n_fgt, tgt)
                        else:
                            tgt = cached[n_fgt][: dists.shape[0]]
                        rows = torch.arange(dists.shape[0], device=dists.device)
                        loss_fgt = dists[rows, tgt].mean() * self.lambda_fgt
                        out_r = model(xr)
                        loss_ret = F.cross_entropy(out_r / self.temperature, yr,
                                                   label_smoothing=self.label_smoothing) * self.lambda_ret
                        loss = loss_fgt + loss_ret
                        loss = self.step_loss(loss, model)  # + a plug-in's extra loss (e.g. EC), if attached
                        check_finite(loss, self.name, step)
                        opt.zero_grad(set_to_none=True)
                        loss.backward()
                        opt.step()
                        step += 1
                acc = accuracy_fraction(model, data.forget, device)
                history.append({"epoch": epoch + 1, "forget_acc": acc, "lr": opt.param_groups[0]["lr"]})
                pb.update(1, forget_acc=acc)
                if acc < target_acc:
                    stop = "target_accuracy"
                    break
                sched.step()
            if self.low_regime and self.lambda_fgt > 0 and self.lambda_ret > 0:
                step = self._low_regime(model, data, centroids, cent_labels, class_removal=class_removal,
                                        feats=feats, gen=gen, device=device, step=step, history=history)
        return UnlearnResult(model, stop, history)

    @torch.no_grad()
    def _centroids(self, model, data, device, gen) -> tuple[Tensor, Tensor]:
        """Per-class mean penultimate vector over the first ``centroid_batches`` retain batches."""
        model.eval()
        embs, labs = [], []
        with capture(model, ["penultimate"]) as feats:
            for i, (x, y) in enumerate(batches(data.retain, self.batch_size, gen, device)):
                if i >= self.centroid_batches:
                    break
                model(x)
                embs.append(feats["penultimate"])
                labs.append(y)
        embs, labs = torch.cat(embs), torch.cat(labs)
        classes = [c for c in range(data.num_classes)
                   if c not in data.forgotten_classes and bool((labs == c).any())]
        cents = torch.stack([embs[labs == c].mean(0) for c in classes])
        return cents, torch.tensor(classes, device=cents.device)

    def _low_regime(self, model, data, centroids, cent_labels, *, class_removal, feats, gen, device, step,
                    history):
        n_fgt_batches = -(-len(data.forget) // self.batch_size)
        opt = torch.optim.Adam(model.parameters(), lr=self.low_lr, weight_decay=self.weight_decay)
        t_max = max(1, self.low_epochs * 20 * n_fgt_batches)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max)
        for epoch in range(self.low_epochs):
            set_train_mode(model, self.bn_mode)
            for n_fgt, (xf, yf) in enumerate(batches(data.forget, self.batch_size, gen, device)):
                if n_fgt >= 1 and class_removal:
                    break
                retain = data.retain.batches(self.low_batch_size, shuffle=True, generator=gen,
                                             augment=data.augment, device=device, drop_last=True)
                for n_ret, (xr, yr) in enumerate(retain):
                    if n_ret >= self.low_hr_retain_batches and not class_removal:
                        break
                    n = xf.shape[0]
                    out = model(torch.cat([xf, xr]))
                    z = feats["penultimate"]
                    dists = pairwise_cos_dist(z[:n], centroids)
                    if n_ret == 0:
                        tgt = duck_targets(dists.detach(), cent_labels, yf)
                    loss_fgt = dists[torch.arange(n, device=dists.device), tgt].mean() * self.lambda_fgt / 10
                    loss = F.cross_entropy(out[n:] / self.temperature, yr,
                                           label_smoothing=self.label_smoothing) + loss_fgt
                    loss = self.step_loss(loss, model)  # + a plug-in's extra loss (e.g. EC), if attached
                    check_finite(loss, self.name, step)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    sched.step()
                    step += 1
            history.append({"low_regime_epoch": epoch + 1,
                            "forget_acc": accuracy_fraction(model, data.forget, device)})
            set_train_mode(model, self.bn_mode)
        return step

