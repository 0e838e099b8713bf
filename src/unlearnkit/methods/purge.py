"""PURGE: projected unlearning via retain-guided erasure (A-GEM projection of a forget gradient).

Reference: Jawandhia et al. 2026, code ``vedjaw/la_purge@8c68e41 run.py::purge_unlearn`` with
``configs/cifar10_kl_retain.yaml`` (reference-specs §3.16). Per step, one forget batch is paired
with the next (cycled) retain batch::

    p_r   = mean_{x in D_r} softmax(original(x))                          # once, "retain confusion"
    g_r   = grad[ CE(out_r, y_r) + kd_weight * KL(softmax(orig(x_r)/T) || softmax(out_r/T)) * T^2 ]
    L_dir = KL(p_r || softmax(out_f))  (batchmean)         # target="uniform": KL(1/K || .)
    L_rep = mean_l MSE( GAP(act_f[l]), mean_batch GAP(act_r[l]).detach() )   # current model's acts
    g_f   = grad[ L_dir + rep_weight * L_rep ]
    if <g_f, g_r> < 0:  g_f <- g_f - <g_f, g_r> / ||g_r||^2 * g_r        # A-GEM, all params flat
    step with g_f ONLY (clip_grad_norm max_grad_norm)      # pitfall §6.15: g_r is never added

Stopping: forget accuracy (FA) on the whole D_f every ``fa_check_freq`` steps of an epoch (the
step counter restarts each epoch, as in the code) and at epoch end, stop when FA <= ``fa_target``;
retain CE on the whole D_r at epoch end, stop when it exceeds ``retain_budget_factor`` x the
initial retain CE. When both fire in the same epoch the reference reports the budget (it checks
that flag first), and so does ``stop_reason`` here. BatchNorm is frozen (``bn_mode="frozen"``:
train mode, BN modules in eval) because class-homogeneous forget batches otherwise rewrite the
running statistics (pitfall §6.1). Options kept from the code: the entropy gate (``forget_gate``,
0 = off as in the YAML; a gated batch takes a retain-only step) and the GA objective
(``forget_objective="ga"``: L_dir = -CE, with a retain-only step once CE >= log K).

Defaults are the YAML's (not argparse's: GA, rep 0.1, kd 1.0, clip 5.0, gate 0.9, check every 10).
Deliberate differences from the code:

- the FA / retain-CE checks and p_r use the evaluation transform; the code reuses its training
  loaders (random crop + flip) for them;
- representation layers are named audit taps: by default the last two stage outputs and
  ``penultimate`` (ResNet-18: layer3, layer4, penultimate = torchvision's layer3, layer4, avgpool);
- the reference names ``kl_retain`` / ``kl_uniform`` / ``ga`` are ``forget_objective="kl"`` with
  ``target="retain_confusion"`` / ``"uniform"``, and ``forget_objective="ga"``;
- ``fa_target=None`` means chance level 100/K (the code's fallback when no target is given).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..data.arrays import Augment
from ..models.features import capture
from ..models.zoo import audit_layers
from ..progress import bar
from .base import NON_NEGATIVE, POSITIVE, UNIT, Interval, MethodData, UnlearningMethod, UnlearnResult, register_method
from .common import batches, check_finite, cycle, kl_with_temperature, n_batches, per_sample_eval, set_train_mode, sgd

OBJECTIVES = ("kl", "ga")
TARGETS = ("retain_confusion", "uniform")


def agem_project(g_f: list[Tensor], g_r: list[Tensor]) -> tuple[list[Tensor], bool]:
    """A-GEM projection of ``g_f`` onto the half-space ``<g, g_r> >= 0`` (run.py::project_gradient).

    The dot product is taken over all parameters flattened together. Returns ``(g, projected)``:
    ``g_f`` unchanged when ``<g_f, g_r> >= 0`` (or ``g_r`` is ~0), otherwise
    ``g_f - <g_f, g_r> / ||g_r||^2 * g_r``, whose dot with ``g_r`` is 0.
    """
    dot = sum((a * b).sum() for a, b in zip(g_f, g_r))
    if dot >= 0:
        return g_f, False
    sq = sum((b * b).sum() for b in g_r)
    if sq < 1e-12:
        return g_f, False
    c = dot / sq
    return [a - c * b for a, b in zip(g_f, g_r)], True


def representation_erasure(acts_f: dict[str, Tensor], acts_r: dict[str, Tensor]) -> Tensor:
    """Mean over layers of MSE(pooled forget activations, detached retain-batch mean of the layer)."""
    terms = [F.mse_loss(acts_f[k], acts_r[k].detach().mean(0, keepdim=True).expand_as(acts_f[k]))
             for k in acts_f]
    return torch.stack(terms).mean()


def default_rep_layers(model: nn.Module) -> list[str]:
    """The last two stage taps and ``penultimate`` (PURGE's layer3, layer4, avgpool on ResNet-18)."""
    stages = [name for name in audit_layers(model) if name != "penultimate"]
    return stages[-2:] + ["penultimate"]


@torch.no_grad()
def mean_softmax(model: nn.Module, data, device, batch_size: int = 512) -> Tensor:
    """``mean_x softmax(model(x))`` over ``data`` (evaluation transform): PURGE's retain-confusion p_r."""
    total, n = None, 0
    for x, _ in data.batches(batch_size, device=device):
        p = F.softmax(model(x), dim=1).sum(0)
        total = p if total is None else total + p
        n += x.shape[0]
    return total / max(n, 1)


def forget_target(target: str, original: nn.Module, retain, num_classes: int, device) -> Tensor:
    """The ``[1, K]`` distribution the forget outputs are pulled to: p_r (``"retain_confusion"``,
    the original's mean softmax over D_r) or ``1/K`` (``"uniform"``, the code's ``kl_uniform``)."""
    if target == "uniform":
        return torch.full((1, num_classes), 1.0 / num_classes, device=device)
    return mean_softmax(original, retain, device).unsqueeze(0)


@dataclass
class PurgeRun:
    """The fixed pieces of one PURGE run, built once by :meth:`Purge._prepare`."""

    model: nn.Module
    original: nn.Module
    data: MethodData
    device: torch.device
    aug: Augment | None
    layers: list[str]
    params: list[Tensor]
    opt: torch.optim.Optimizer
    p_r: Tensor             # the [1, K] distribution the forget outputs are pulled to
    log_k: float
    fa_target: float        # forget accuracy in percent
    budget: float           # the retain CE that stops the run

    def forget_acc(self) -> float:
        """Forget accuracy (percent) on the whole D_f, evaluation transform."""
        _, pred = per_sample_eval(self.model, self.data.forget, self.device)
        return float((pred == self.data.forget.y).float().mean() * 100)


class StepStats(NamedTuple):
    """What one :meth:`Purge._step` reports: the forget CE and retain loss before the step, the
    representation loss (0 on a retain-only step), and whether the step was retain-only / projected."""

    forget_ce: float
    retain_loss: float
    rep_loss: float
    gated: bool
    projected: bool


@dataclass
class EpochStats:
    """Sums and counts over the steps of one epoch; ``fa_reached``: the in-epoch FA check fired."""

    sums: dict[str, float] = field(default_factory=lambda: {"forget_ce": 0.0, "retain_loss": 0.0, "rep_loss": 0.0})
    n_steps: int = 0
    n_proj: int = 0
    n_gated: int = 0
    fa_reached: bool = False

    def add(self, step: StepStats) -> None:
        self.sums["forget_ce"] += step.forget_ce
        self.sums["retain_loss"] += step.retain_loss
        self.sums["rep_loss"] += step.rep_loss
        self.n_proj += int(step.projected)
        self.n_gated += int(step.gated)
        self.n_steps += 1


@register_method("purge", "PURGE")
@dataclass
class Purge(UnlearningMethod):
    paper = ("Jawandhia et al. 2026, 'PURGE: Projected Unlearning via Retain-Guided Erasure' "
             "(vedjaw/la_purge run.py::purge_unlearn, configs/cifar10_kl_retain.yaml)")
    needs = frozenset({"forget", "retain", "original"})
    not_distributed = ("A-GEM projects the forget gradient against the retain gradient, which needs each global "
                       "gradient separately, and it stops on full passes")
    # small (small_cnn, class 3, validation split; val forget / val retain accuracy; original 100 / 99.2
    # on digits, 100 / 96.4 on mnist5k; retrain's val forget accuracy is 0). PURGE stops itself once the
    # train forget accuracy is <= fa_target (10 %), so it lands near, not at, 0:
    #   lr 3e-3 (chosen): digits 0.0 / 99.2 (seeds 0, 1; fa_target at epoch 4), mnist5k 5.0 / 94.2 and
    #     2.5 / 94.7 (seeds 0, 1; fa_target at epoch 2)
    #   lr 5e-4, batch 128 (the YAML): digits 100 / 99.2 -- 2 steps an epoch, max_epochs reached
    #   lr 1e-3: mnist5k 10.0 / 96.4 (epoch 4); lr 5e-3: digits 0.0 / 99.2, mnist5k 0.0 / 92.8;
    #   lr 1e-2: mnist5k 0.0 / 64.4 (retain_budget); kd_weight 0 at lr 3e-3: mnist5k 5.0 / 67.8
    PRESETS = {"reference": {}, "small": {"lr": 3e-3, "batch_size": 32, "fa_check_freq": 5},
               "test": {"lr": 3e-3, "batch_size": 256, "fa_check_freq": 5, "epochs": 1}}
    CHOICES = {"forget_objective": OBJECTIVES, "target": TARGETS}
    # weights of loss terms >= 0, a KD temperature and a clip norm > 0, the entropy gate a fraction of
    # log K, fa_target a forget accuracy in percent (< 0: never reached), fa_check_freq 0 = only at epoch ends
    CONSTRAINTS = {"max_grad_norm": POSITIVE, "rep_weight": NON_NEGATIVE, "kd_weight": NON_NEGATIVE,
                   "temperature": POSITIVE, "forget_gate": UNIT, "fa_target": Interval(None, 100),
                   "fa_check_freq": NON_NEGATIVE, "retain_budget_factor": POSITIVE}

    lr: float = 5e-4
    epochs: int = 15
    batch_size: int = 128
    momentum: float = 0.9
    weight_decay: float = 5e-4
    max_grad_norm: float = 1.0
    forget_objective: str = "kl"
    target: str = "retain_confusion"
    rep_weight: float = 0.05
    rep_layers: list[str] | None = None
    kd_weight: float = 2.0
    temperature: float = 4.0
    project: bool = True
    forget_gate: float = 0.0
    fa_target: float | None = 10.0
    fa_check_freq: int = 50
    retain_budget_factor: float = 5.0
    augment: bool = True
    bn_mode: str = "frozen"

    def _unlearn(self, model, data, original, device, gen, progress):
        """PURGE's loop (run.py::purge_unlearn): :meth:`_prepare` once, then per epoch :meth:`_epoch`
        (one pass over D_f, each forget batch paired with the next retain batch, :meth:`_step`) and
        :meth:`_epoch_end` (FA and retain CE on the whole parts, the history row, the stop rule)."""
        run = self._prepare(model, data, original, device)
        retain_iter = cycle(data.retain, self.batch_size, gen, device, run.aug)
        history, stop_reason, step = [], "max_epochs", 0
        nf = n_batches(data.forget, self.batch_size)
        with bar(self.epochs * nf, self.name, progress) as pb:
            for epoch in range(self.epochs):
                stats = self._epoch(run, retain_iter, gen, pb, step)
                step += stats.n_steps
                row, stop = self._epoch_end(run, epoch, stats)
                history.append(row)
                if stop is not None:
                    stop_reason = stop
                    break
        return UnlearnResult(model, stop_reason, history)

    def _prepare(self, model, data, original, device) -> PurgeRun:
        """The fixed pieces of a run: representation layers, optimiser, the forget target (p_r or 1/K)
        and the retain-CE budget (``retain_budget_factor`` x the retain CE before the first step)."""
        k = data.num_classes
        fa_target = 100.0 / k if self.fa_target is None else self.fa_target
        layers = list(self.rep_layers) if self.rep_layers is not None else default_rep_layers(model)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = sgd(params, self.lr, self.momentum, self.weight_decay)
        aug = data.augment if self.augment else None
        p_r = forget_target(self.target, original, data.retain, k, device)
        retain_ce0 = per_sample_eval(model, data.retain, device)[0].mean()
        check_finite(retain_ce0, self.name, 0)
        budget = self.retain_budget_factor * float(retain_ce0)
        return PurgeRun(model=model, original=original, data=data, device=device, aug=aug, layers=layers,
                        params=params, opt=opt, p_r=p_r, log_k=math.log(k), fa_target=fa_target, budget=budget)

    def _epoch(self, run: PurgeRun, retain_iter, gen, pb, step: int) -> EpochStats:
        """One pass over D_f of :meth:`_step` (``step``: the run's step count so far); it ends early
        (``fa_reached``) when the forget accuracy, checked every ``fa_check_freq`` steps of the epoch
        (the count restarts each epoch, as in the code), is <= ``fa_target``."""
        set_train_mode(run.model, self.bn_mode)
        stats = EpochStats()
        for x_f, y_f in batches(run.data.forget, self.batch_size, gen, run.device, run.aug):
            x_r, y_r = next(retain_iter)
            out = self._step(run, (x_f, y_f), (x_r, y_r), step + stats.n_steps)
            stats.add(out)
            pb.update(1, forget_ce=out.forget_ce, retain_loss=out.retain_loss)
            check_now = self.fa_check_freq > 0 and stats.n_steps % self.fa_check_freq == 0
            if check_now and run.forget_acc() <= run.fa_target:
                stats.fa_reached = True
                break
        return stats

    def _step(self, run: PurgeRun, forget_batch, retain_batch, step: int) -> StepStats:
        """One PURGE step: g_r from the retain batch; then a retain-only step when the entropy gate or
        the GA cap fires, otherwise a step with g_f alone, A-GEM projected against g_r (``project``)."""
        (x_f, y_f), (x_r, y_r) = forget_batch, retain_batch
        with capture(run.model, run.layers, pooled=True, detach=False) as acts:
            out_r = run.model(x_r)
            acts_r = {name: v.detach() for name, v in acts.items()}
            out_f = run.model(x_f)
            acts_f = dict(acts)
        loss_r = self._retain_loss(run, out_r, x_r, y_r)
        check_finite(loss_r, self.name, step)
        g_r = _grads(loss_r, run.params)
        with torch.no_grad():
            probs = F.softmax(out_f, dim=1)
            entropy = float(-(probs * probs.clamp(min=1e-8).log()).sum(1).mean())
            ce_f = float(F.cross_entropy(out_f, y_f))
        gated = self.forget_gate > 0 and entropy > self.forget_gate * run.log_k
        capped = self.forget_objective == "ga" and ce_f >= run.log_k
        if gated or capped:  # retain-only step
            self._apply(run, g_r)
            return StepStats(ce_f, loss_r.item(), 0.0, gated=True, projected=False)
        loss_dir, loss_rep = self._forget_losses(run, out_f, y_f, acts_f, acts_r)
        loss_f = loss_dir + self.rep_weight * loss_rep
        check_finite(loss_f, self.name, step)
        g_f, projected = _grads(loss_f, run.params), False
        if self.project:
            g_f, projected = agem_project(g_f, g_r)
        self._apply(run, g_f)
        return StepStats(ce_f, loss_r.item(), loss_rep.item(), gated=False, projected=projected)

    def _retain_loss(self, run: PurgeRun, out_r: Tensor, x_r: Tensor, y_r: Tensor) -> Tensor:
        """``CE(out_r, y_r) + kd_weight * KL(original || model, temperature T) * T^2`` on the retain batch."""
        with torch.no_grad():
            orig_r = run.original(x_r)
        return F.cross_entropy(out_r, y_r) + self.kd_weight * kl_with_temperature(out_r, orig_r, self.temperature)

    def _forget_losses(self, run: PurgeRun, out_f: Tensor, y_f: Tensor, acts_f: dict[str, Tensor],
                       acts_r: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``(L_dir, L_rep)``: ``-CE`` (``"ga"``) or ``KL(target || softmax(out_f))`` (``"kl"``), and the
        representation erasure over ``rep_layers`` (0 when there are none)."""
        if self.forget_objective == "ga":
            loss_dir = -F.cross_entropy(out_f, y_f)
        else:
            loss_dir = F.kl_div(F.log_softmax(out_f, dim=1), run.p_r.expand_as(out_f), reduction="batchmean")
        loss_rep = representation_erasure(acts_f, acts_r) if run.layers else out_f.new_zeros(())
        return loss_dir, loss_rep

    def _apply(self, run: PurgeRun, grads: list[Tensor]) -> None:
        """An optimiser step with ``grads`` as the gradients, clipped to ``max_grad_norm``."""
        for p, g in zip(run.params, grads):
            p.grad = g
        torch.nn.utils.clip_grad_norm_(run.params, self.max_grad_norm)
        run.opt.step()

    def _epoch_end(self, run: PurgeRun, epoch: int, stats: EpochStats) -> tuple[dict, str | None]:
        """The epoch's history row and stop reason (None: go on): ``"retain_budget"`` when the retain CE
        on D_r exceeds the budget (checked first, as the code does), ``"fa_target"`` when the FA on D_f
        (here or within the epoch) is <= the target."""
        fa = run.forget_acc()
        retain_ce = float(per_sample_eval(run.model, run.data.retain, run.device)[0].mean())
        n_steps = stats.n_steps
        row = {
            "epoch": epoch + 1, "steps": n_steps,
            **{key: v / max(n_steps, 1) for key, v in stats.sums.items()},
            "proj_rate": stats.n_proj / max(n_steps - stats.n_gated, 1), "gate_rate": stats.n_gated / max(n_steps, 1),
            "forget_acc": fa, "retain_ce": retain_ce, "retain_budget": run.budget,
        }
        if retain_ce > run.budget:
            return row, "retain_budget"
        if stats.fa_reached or fa <= run.fa_target:
            return row, "fa_target"
        return row, None


def _grads(loss: Tensor, params: list[Tensor]) -> list[Tensor]:
    """d loss / d params, zeros for parameters the loss does not reach."""
    gs = torch.autograd.grad(loss, params, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g for p, g in zip(params, gs)]
