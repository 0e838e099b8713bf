"""Target: few-shot label unlearning in vertical federated learning (Gu et al.), Mirage's "Target".

The active party (which holds the labels) unlearns a label from a few public samples by gradient
ascent on manifold-mixup'ed passive embeddings, then repairs on a few retained samples. It works on
a VFL model (:mod:`unlearnkit.models.vfl`): ``--setting vfl``; any other model is a
:class:`~unlearnkit.errors.UserError`.

``variant="mirage"`` (default): Mirage's re-implementation, which produced its "Target" numbers
(``YuZhenyuLindy/Mirage@63b9f9a`` ``mirage_lib.py::manifold_mixup_vfl_unlearn`` with
``prepare_unlearning_data``; reference-specs §3.18)::

    D_p^u = 40 random training samples of each forgotten label; D_p^r = 40 of each of the first 5
    retained labels; model in train mode; SGD(lr 0.01, momentum 0.9, no weight decay), one optimizer
    for epoch in 1..5:
        for batch of D_p^u (batch min(128, |D_p^u|)):    h_k = bottom_k(x_k); lam ~ Beta(1, 1); perm
            h_k' = lam h_k + (1-lam) h_k[perm];  soft = lam onehot(y) + (1-lam) onehot(y[perm])
            loss = soft-CE(top(cat h_k'), soft); backward; NEGATE every gradient; step   (ascent)
        for batch of D_p^r (batch min(128, |D_p^r|)):   CE(model(x), y); step             (descent)

``variant="luv"``: the original LUV (Gu et al., ICLR'26, arXiv 2410.10922;
``bryanhx/Towards-Privacy-Guaranteed-Label-Unlearning-in-Vertical-Federated-Learning``
``unlearn/LUV.py`` and ``unlearn.py``, read via the index)::

    few-shot set = the first 40 forget samples (dataset order); descent set = the first 3 training
    samples of every retained class; SGD(lr 2e-7, momentum 0.9, wd 5e-4), one optimizer per bottom
    and one for the top; 16 epochs; batch 32; train mode
    for each few-shot batch: h_k = bottom_k(x_k); every pair i < j of the batch (within a class) mixed
        with lam in (0.25, 0.5, 0.75) -> 3 n(n-1)/2 rows labelled with that class; the top takes them
        as detached leaves in chunks of 32: loss = -CE, backward, top step after EVERY chunk (the
        top's gradients are zeroed once per batch, so they accumulate over the chunks); the leaves'
        gradients, averaged over consecutive groups of ceil(rows / n), are sent back as sample i's
        gradient; bottom_k steps on sum(g_k * h_k)
    for each descent batch: per-class manifold mixup of the embeddings (lam_i ~ Beta(1, 1) per
        sample, a permutation within the class); top: CE descent on the mixed leaves; bottoms: the
        leaves' gradients applied to the unmixed embeddings (sum(g_k * h_k)), descent

Deliberate differences: samples, permutations and lambdas come from the method's seeded generator
(Mirage: NumPy/torch global RNG); sample-level forget sets (no forgotten class) draw 40 random
forget and 40 random retained samples (Mirage's sample-level runner takes ``forget_idx[:40]`` and
``retain_idx[:40]``, which its class-ordered lists make all one class); LUV with several forgotten
classes pairs within each class and groups gradients per class (``LUV_2.py`` does the same, with a
shuffle whose double indexing we do not reproduce); the bottoms are whatever the VFL model holds
(LUV used real ResNet-18 bottoms, Mirage its 6-conv "ResNet18Bottom").

Measured on digits (2-party VFL, ``mirage_bottom`` width 16, class 3, seed 0; forget / retain train
accuracy, original 100 / 100): mirage 0.0 / 12.9 (Mirage's own lr 0.01 collapses this small model, as
its CIFAR-10 Acc_r of 24.1 shows there); luv at its lr 2e-7: 0.0 / 97.6 (largest weight change 0.05);
luv at lr 1e-3: the ascent diverges (non-finite loss), so the reference's tiny lr is kept.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.arrays import ArrayData
from ..errors import UserError
from ..models.vfl import is_vfl
from ..progress import bar
from .base import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, UnlearningMethod, UnlearnResult, register_method
from .common import check_finite, n_batches, set_train_mode, sgd
from .unsir import first_per_class

VARIANTS = ("mirage", "luv")
LUV_MIX = (0.25, 0.5, 0.75)


def random_per_class(data: ArrayData, classes, per_class: int, gen: torch.Generator) -> ArrayData:
    """Up to ``per_class`` random samples of each class in ``classes`` (Mirage's public sets)."""
    idx = []
    for c in classes:
        rows = torch.nonzero(data.y == c).flatten()
        idx.append(rows[torch.randperm(len(rows), generator=gen)[:per_class]])
    return data.subset(torch.cat(idx) if idx else torch.zeros(0, dtype=torch.long))


def _beta(alpha: float, size: int, gen: torch.Generator) -> np.ndarray:
    rng = np.random.RandomState(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
    return rng.beta(alpha, alpha, size=size)


def mixup_ascent_loss(model, x: Tensor, y: Tensor, lam: float, perm: Tensor, num_classes: int) -> Tensor:
    """Mirage's ascent objective: soft-CE of the top on manifold-mixed passive embeddings."""
    mixed = [lam * h + (1 - lam) * h[perm] for h in model.embed(x)]
    onehot = F.one_hot(y, num_classes).float()
    soft = lam * onehot + (1 - lam) * onehot[perm]
    return -(soft * F.log_softmax(model.top(torch.cat(mixed, 1)), 1)).sum(1).mean()


def luv_pairs(y: Tensor, mix=LUV_MIX) -> tuple[Tensor, Tensor, Tensor, list[tuple[int, int]]]:
    """LUV's mixed rows of a few-shot batch: ``(i, j, lam)`` for every pair i < j of the same class,
    each lam in ``mix``, in LUV's order (class by class, i, then j, then lam), and per class the
    ``(first row, number of rows)``; samples are indexed in batch order."""
    rows_i, rows_j, lams, spans = [], [], [], []
    for c in torch.unique(y).tolist():
        members = torch.nonzero(y == c).flatten().tolist()
        start = len(rows_i)
        for a, i in enumerate(members):
            for j in members[a + 1:]:
                for lam in mix:
                    rows_i.append(i)
                    rows_j.append(j)
                    lams.append(lam)
        spans.append((start, len(rows_i) - start))
    return (torch.tensor(rows_i, dtype=torch.long), torch.tensor(rows_j, dtype=torch.long),
            torch.tensor(lams, dtype=torch.float32), spans)


def luv_group_means(grads: Tensor, n_samples: int) -> Tensor:
    """LUV's gradient averaging: consecutive groups of ``ceil(rows / n_samples)`` rows, one mean each."""
    g = math.ceil(grads.shape[0] / n_samples)
    return torch.stack([grads[m * g:(m + 1) * g].mean(0) for m in range(n_samples)])


def within_class_mixup(hs: list[Tensor], y: Tensor, gen: torch.Generator) -> list[Tensor]:
    """LUV's ``mixup_embeddings``: per class with >= 2 samples, mix each with a permuted classmate
    (lam_i ~ Beta(1, 1) per sample; the same lam and permutation for every party)."""
    out = [h.clone() for h in hs]
    for c in torch.unique(y).tolist():
        idx = torch.nonzero(y == c).flatten()
        if len(idx) < 2:
            continue
        perm = idx[torch.randperm(len(idx), generator=gen).to(idx.device)]
        lam = torch.as_tensor(_beta(1.0, len(idx), gen), dtype=hs[0].dtype, device=hs[0].device).view(-1, 1)
        for k, h in enumerate(hs):
            out[k][idx] = lam * h[idx] + (1 - lam) * h[perm]
    return out


@register_method("target", "Target")
@dataclass
class Target(UnlearningMethod):
    paper = ("Gu et al., few-shot label unlearning in vertical federated learning (LUV, ICLR'26, arXiv "
             "2410.10922); default: Mirage's re-implementation (mirage_lib.py::manifold_mixup_vfl_unlearn)")
    needs = frozenset({"forget", "retain"})
    requires_vfl = True
    # Mirage's own values; few-shot, so they run in seconds on CPU and need no small variant, except
    # that the bundled data has no augmentation in Mirage's MNIST recipe.
    CHOICES = {"variant": VARIANTS}
    PRESETS = {"reference": {}, "small": {"augment": False}, "test": {"augment": False, "epochs": 1}}
    # Beta(alpha, alpha) needs alpha > 0; 0 retained classes / descent samples = no repair step
    CONSTRAINTS = {"public_per_class": AT_LEAST_ONE, "public_retain_classes": NON_NEGATIVE,
                   "mixup_alpha": POSITIVE, "luv_samples": AT_LEAST_ONE,
                   "luv_descent_per_class": NON_NEGATIVE}

    variant: str = "mirage"
    lr: float = 0.01
    epochs: int = 5
    public_per_class: int = 40
    public_retain_classes: int = 5
    mixup_alpha: float = 1.0
    batch_size: int = 128
    momentum: float = 0.9
    augment: bool = True
    bn_mode: str = "train"
    luv_lr: float = 2e-7
    luv_epochs: int = 16
    luv_samples: int = 40
    luv_descent_per_class: int = 3
    luv_batch_size: int = 32
    luv_weight_decay: float = 5e-4

    def _unlearn(self, model, data, original, device, gen, progress):
        if not is_vfl(model):
            raise UserError(f"target is few-shot label unlearning for vertical federated models; this is a "
                            f"{getattr(model, 'unlearnkit_spec', {}).get('name', type(model).__name__)}: "
                            f"run it with --setting vfl")
        return (self._mirage if self.variant == "mirage" else self._luv)(model, data, device, gen, progress)

    def _public_sets(self, data, gen) -> tuple[ArrayData, ArrayData]:
        if data.forgotten_classes:
            kept = [c for c in range(data.num_classes) if c not in data.forgotten_classes]
            return (random_per_class(data.forget, data.forgotten_classes, self.public_per_class, gen),
                    random_per_class(data.retain, kept[: self.public_retain_classes], self.public_per_class, gen))
        n = self.public_per_class
        pick = lambda d: d.subset(torch.randperm(len(d), generator=gen)[:n])  # noqa: E731
        return pick(data.forget), pick(data.retain)

    def _mirage(self, model, data, device, gen, progress):
        pub_u, pub_r = self._public_sets(data, gen)
        bs_u, bs_r = min(self.batch_size, len(pub_u)), min(self.batch_size, max(len(pub_r), 1))
        aug = data.augment if self.augment else None
        opt = sgd(model.parameters(), self.lr, self.momentum, weight_decay=0.0)
        history, step = [], 0
        per_epoch = n_batches(pub_u, bs_u) + (n_batches(pub_r, bs_r) if len(pub_r) else 0)
        with bar(self.epochs * per_epoch, "target (mirage)", progress) as pb:
            for epoch in range(self.epochs):
                set_train_mode(model, self.bn_mode)
                for x, y in pub_u.batches(bs_u, shuffle=True, generator=gen, augment=aug, device=device):
                    lam = float(_beta(self.mixup_alpha, 1, gen)[0])
                    perm = torch.randperm(len(y), generator=gen).to(device)
                    loss = mixup_ascent_loss(model, x, y, lam, perm, data.num_classes)
                    check_finite(loss, self.name, step)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    for p in model.parameters():
                        if p.grad is not None:
                            p.grad.neg_()
                    opt.step()
                    step += 1
                    pb.update(1, ascent_ce=loss.item())
                retain_loss = math.nan
                for x, y in (pub_r.batches(bs_r, shuffle=True, generator=gen, augment=aug, device=device)
                             if len(pub_r) else []):
                    loss = F.cross_entropy(model(x), y)
                    check_finite(loss, self.name, step)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    step += 1
                    retain_loss = loss.item()
                    pb.update(1, retain_ce=retain_loss)
                history.append({"epoch": epoch + 1, "public_forget": len(pub_u), "public_retain": len(pub_r),
                                "retain_ce": retain_loss})
        return UnlearnResult(model, "completed", history)

    def _luv(self, model, data, device, gen, progress):
        few = data.forget.subset(torch.arange(min(self.luv_samples, len(data.forget))))
        kept = [c for c in range(data.num_classes) if c not in data.forgotten_classes]
        descent = first_per_class(data.retain, kept, self.luv_descent_per_class)
        bs = self.luv_batch_size
        opt_top = sgd(model.top.parameters(), self.luv_lr, self.momentum, self.luv_weight_decay)
        opt_bottoms = [sgd(b.parameters(), self.luv_lr, self.momentum, self.luv_weight_decay) for b in model.bottoms]
        history, step = [], 0
        with bar(self.luv_epochs * (n_batches(few, bs) + n_batches(descent, bs)), "target (luv)", progress) as pb:
            for epoch in range(self.luv_epochs):
                set_train_mode(model, self.bn_mode)
                for x, y in few.batches(bs, shuffle=True, generator=gen, device=device):
                    step = self._luv_ascent(model, x, y, opt_top, opt_bottoms, step)
                    pb.update(1)
                for x, y in descent.batches(bs, shuffle=True, generator=gen, device=device):
                    hs = model.embed(x)
                    leaves = [h.detach().requires_grad_(True) for h in within_class_mixup(hs, y, gen)]
                    loss = F.cross_entropy(model.top(torch.cat(leaves, 1)), y)
                    check_finite(loss, self.name, step)
                    opt_top.zero_grad(set_to_none=True)
                    loss.backward()
                    opt_top.step()
                    self._bottom_step(hs, [v.grad for v in leaves], opt_bottoms)
                    step += 1
                    pb.update(1)
                history.append({"epoch": epoch + 1, "few_shot": len(few), "descent": len(descent)})
        return UnlearnResult(model, "completed", history)

    def _luv_ascent(self, model, x, y, opt_top, opt_bottoms, step: int) -> int:
        """One LUV few-shot batch: GA on the top over mixed pairs (chunked), averaged gradients back."""
        rows_i, rows_j, lams, spans = luv_pairs(y.cpu())
        if len(rows_i) == 0:  # a lone sample: no pair to mix
            return step
        rows_i, rows_j, lam = rows_i.to(x.device), rows_j.to(x.device), lams.to(x.device).view(-1, 1)
        hs = model.embed(x)
        mixed = [(lam * h[rows_i] + (1 - lam) * h[rows_j]).detach() for h in hs]
        labels = y[rows_i]
        opt_top.zero_grad(set_to_none=True)
        grads: list[list[Tensor]] = [[] for _ in hs]
        for s in range(0, len(labels), self.luv_batch_size):
            leaves = [m[s:s + self.luv_batch_size].clone().requires_grad_(True) for m in mixed]
            loss = -F.cross_entropy(model.top(torch.cat(leaves, 1)), labels[s:s + self.luv_batch_size])
            check_finite(loss, self.name, step)
            loss.backward()
            opt_top.step()
            step += 1
            for k, v in enumerate(leaves):
                grads[k].append(v.grad)
        per_sample = []
        for k, h in enumerate(hs):
            g_rows = torch.cat(grads[k])
            g = torch.zeros_like(h)
            for (start, count), c in zip(spans, torch.unique(y.cpu()).tolist()):
                members = torch.nonzero(y == c).flatten()
                if count:  # a class with one sample in the batch has no pair and gets no gradient
                    g[members] = luv_group_means(g_rows[start:start + count], len(members))
            per_sample.append(g)
        self._bottom_step(hs, per_sample, opt_bottoms)
        return step

    @staticmethod
    def _bottom_step(hs: list[Tensor], grads: list[Tensor], opt_bottoms) -> None:
        """Each passive party applies the gradient the active party sends back: step on sum(g * h)."""
        for opt in opt_bottoms:
            opt.zero_grad(set_to_none=True)
        torch.stack([(g.detach() * h).sum() for g, h in zip(grads, hs)]).sum().backward()
        for opt in opt_bottoms:
            opt.step()
