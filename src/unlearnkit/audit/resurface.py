"""Resurfacing checks on frozen features and on normalisation statistics: BatchNorm recalibration and the two
head checks, each a set of :class:`~unlearnkit.audit.checks.Measure` judged like every other deciding number.

Every check runs with the same settings on the unlearned model, the original and each reference, from
draws chosen by the audit seed (fresh per audit, recorded in audit.json), and reads forget examples that were
not shots: the training forget rows left out of the draw and, for class forgetting, test images of the class.
The number certified is the recovery, the mean probability of the true class on those rows (a soft accuracy:
its kept fraction is the share of the original's recovery the model gives back, judged against
``recovery_margin``); the flag reads its mean log-odds (continuous and close to Gaussian across retrains, where
probabilities near 0 are skewed); the verdict compares the unlearned model with the references and the original
(:mod:`unlearnkit.metrics.equivalence`).

* **BatchNorm recalibration** (PURGE, reference-specs §6 pitfall 1: +88 points of forget accuracy on
  frozen-BN methods): every BatchNorm's running statistics re-estimated on ``bn_samples`` retained rows
  (drawn with the audit seed; train-mode passes, ``momentum=None``, no gradient), then the mean logit-scaled
  confidence φ of the forget rows. Forgetting that lives in stale normalisation statistics comes back.
* **head re-fit** (body frozen): with ``head_refit_shots`` example(s) of each forgotten class and the retained
  training rows, an LDA head on the penultimate features (nearest class mean in the retained within-class
  Mahalanobis metric, :class:`unlearnkit.metrics.lda.FewShotHead`), its mean log-odds of the forgotten class on
  the held-out forget rows, averaged over ``head_refit_draws`` draws. A body that still holds the class lets
  one example recover it (digits: 98 % from the original's body, 13-40 % from retrained bodies); an output
  mask or a reset head row changes nothing here.
* **head relearning** (body frozen): full-batch SGD (momentum 0.9, lr ``head_relearn_lr``) on the model's
  *own* head, written in coordinates whitened by the retained and shot features
  (:func:`unlearnkit.metrics.lda.head_relearn`), from the relearning draws' shots, read after each of
  ``head_relearn_steps``. A head that still points at the forgotten class behind a suppressed bias gives it
  back in a few steps; a retrained head never learnt it.

Both head checks read the features of the audit's forward passes (no forward pass of their own) through the
one feature preparation (:mod:`unlearnkit.metrics.prepare`), so no function-preserving reparametrisation
moves them. Class forgetting only (a forgotten class to recognise).

[INFERRED] No reference code for the seeded draws, the held-out reading or the log-odds score.
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np
import torch
from torch import nn

from ..metrics.forgetting_quality import logit_scaled_confidence
from ..metrics.lda import FewShotHead, head_relearn
from ..models.features import LOGITS, extract
from ..models.zoo import head_of, taps_of
from .checks import Measure
from .config import AuditConfig
from .context import AuditContext, ForwardPasses, Pending
from .relearning import RECOVERY_UNIT, RelearnPlan, working_copy

#: a head check's job time in SGD steps of the relearning (scheduling only: they read frozen features)
HEAD_COST = 2.0


def batchnorm_layers(model: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in model.modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]


@torch.no_grad()
def recalibrate_batchnorm(model: nn.Module, data, n_samples: int = 2048, batch_size: int = 512,
                          device=None, seed: int = 0) -> nn.Module:
    """A copy of ``model`` whose BatchNorm running statistics are re-estimated on ``data``.

    Statistics are reset, ``momentum=None`` (cumulative average over all batches), and only the
    BatchNorm layers run in train mode (dropout stays off); ``n_samples`` rows drawn with ``seed``.
    """
    m = working_copy(model)
    device = device or next(m.parameters()).device
    m.to(device)
    bns = batchnorm_layers(m)
    rows = np.sort(np.random.RandomState(seed).choice(len(data), min(n_samples, len(data)), replace=False))
    sub = data.subset(torch.from_numpy(rows))
    m.eval()
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
        bn.train()
    for xb, _ in sub.batches(batch_size, device=device):
        if xb.shape[0] > 1:  # a single row has no batch variance
            m(xb)
    m.eval()
    return m


def _capped(data, n: int, seed: int):
    """At most ``n`` rows of ``data`` (a seeded draw), to keep the checks' forward passes cheap."""
    if len(data) <= n:
        return data
    rows = np.sort(np.random.RandomState(seed).choice(len(data), n, replace=False))
    return data.subset(torch.from_numpy(rows))


def _recovery(model: nn.Module, data, config: AuditConfig, device) -> tuple[float, float]:
    """(mean probability of the true class, mean log-odds φ) of ``model`` on ``data``; nan when not finite."""
    logits = extract(model, data, [LOGITS], config.batch_size, device)[LOGITS]
    if not bool(torch.isfinite(logits).all()):
        return math.nan, math.nan
    phi = logit_scaled_confidence(logits, data.y)
    return float(np.mean(1.0 / (1.0 + np.exp(-phi)))), float(np.mean(phi))


def _measures(family: str, name: str, u: dict, o: dict, refs: list[dict], note: str = "") -> list[Measure]:
    """One recovery measure per audit data: values (probability, log-odds) per role."""
    return [Measure(family, name, data, None, "two", RECOVERY_UNIT, u[data][0], o[data][0],
                    tuple(r[data][0] for r in refs), True, note, recovery=True,
                    flag_values=(u[data][1], o[data][1], tuple(r[data][1] for r in refs))) for data in u]


def batchnorm_jobs(passes: ForwardPasses, ctx: AuditContext) -> Pending | str:
    """The BatchNorm recalibration check (module docstring), one job per model (the original's and the
    references' values from the run's cache when an earlier audit computed them), finished as measures on the
    training forget rows and, for class forgetting, the test images of the class; why not, when it does not
    apply."""
    split, config, device = ctx.split, ctx.config, ctx.device
    models = [passes.unlearned, passes.original, *passes.refs]
    if not batchnorm_layers(passes.unlearned) or not all(batchnorm_layers(m) for m in models):
        return "a model has no BatchNorm layer"
    seed = ctx.audit_seed
    sets = {"train": _capped(split.train_forget, config.resurface_max_forget, seed)}
    if len(split.test_forget) and not ctx.sample_level:
        sets["test"] = _capped(split.test_forget, config.resurface_max_forget, seed)

    def attacked(model: nn.Module) -> dict:
        m = recalibrate_batchnorm(model, split.train_retain, config.bn_samples, config.batch_size, device, seed)
        return {name: _recovery(m, data, config, device) for name, data in sets.items()}

    note = (f"BatchNorm statistics re-estimated on {min(config.bn_samples, len(split.train_retain))} retained rows; "
            f"mean probability of the true class on " + ", ".join(f"{len(d)} {k}" for k, d in sets.items())
            + " forget rows")
    items = [(None if i == 0 else m, ("bn_recalibration",), partial(attacked, m)) for i, m in enumerate(models)]
    # in SGD steps of the relearning (scheduling only): about one step's time per 50 rows passed
    cost = min(config.bn_samples, len(split.train_retain)) / 50.0
    return Pending(items, lambda v: _measures("batchnorm", "BatchNorm re-estimated", v[0], v[1], v[2:], note), cost)


def _forget_features(out: dict, layer: str, test_rows: np.ndarray) -> dict[str, torch.Tensor]:
    feats = {"train": out["train_forget"][layer]}
    if test_rows.size:
        feats["test"] = out["test"][layer][torch.from_numpy(test_rows)]
    return feats


def _test_forget_rows(split) -> np.ndarray:
    """Positions of the test images of the forgotten class in ``split.test``."""
    return split.test_forget.index.numpy() if len(split.test_forget) else np.zeros(0, dtype=np.int64)


def head_refit_jobs(passes: ForwardPasses, ctx: AuditContext) -> Pending | str:
    """The head re-fit check (module docstring) at the penultimate layer, from the forward passes' features:
    one job per model, finished as measures; why not, when it does not apply."""
    split, config, layer = ctx.split, ctx.config, passes.penultimate
    if ctx.sample_level:
        return "sample-level forgetting: no forgotten class to re-fit"
    yf = split.train_forget.y.numpy()
    k = config.head_refit_shots
    if any((yf == c).sum() <= k for c in np.unique(yf)):
        return f"a forgotten class has no sample left after {k} shot(s)"
    rng = np.random.RandomState(ctx.audit_seed + 1)
    draws = []
    for _ in range(config.head_refit_draws):
        shots = np.sort(np.concatenate([rng.choice(np.flatnonzero(yf == c), k, replace=False) for c in np.unique(yf)]))
        draws.append((shots, np.setdiff1d(np.arange(yf.size), shots)))
    yr_all = split.train_retain.y.numpy()
    retain_rows = np.sort(rng.choice(yr_all.size, min(yr_all.size, config.head_refit_max_retain), replace=False))
    test_rows = _test_forget_rows(split)
    yt = split.test.y[torch.from_numpy(test_rows)] if test_rows.size else None
    yf_t = torch.from_numpy(yf)

    def score(out: dict) -> dict:
        head = FewShotHead(out["train_retain"][layer][torch.from_numpy(retain_rows)],
                           torch.from_numpy(yr_all[retain_rows]))
        feats = _forget_features(out, layer, test_rows)
        sums = {name: [] for name in feats}
        for shots, held in draws:
            s, h = torch.from_numpy(shots), torch.from_numpy(held)
            got = head.score(feats["train"][s], yf_t[s], feats["train"][h], yf_t[h])
            sums["train"].append((got.probability, got.log_odds))
            if "test" in feats:
                got = head.score(feats["train"][s], yf_t[s], feats["test"], yt)
                sums["test"].append((got.probability, got.log_odds))
        return {name: tuple(np.mean(v, axis=0).tolist()) for name, v in sums.items()}

    outs = [passes.out_u, passes.out_o, *passes.out_refs]
    note = (f"an LDA head re-fitted on {layer} (body frozen) from {k} shot(s) of each forgotten class and "
            f"{retain_rows.size} retained rows; mean probability of the class on the other forget rows, over "
            f"{len(draws)} draws")
    return Pending([(None if i == 0 else out, ("head_refit", layer), partial(score, out))
                    for i, out in enumerate(outs)],
                   lambda v: _measures("heads", "head re-fit", v[0], v[1], v[2:], note), HEAD_COST)


def _head_input(model: nn.Module, layer: str):
    """The model's linear head when ``layer`` is the tap at its input, else None."""
    name = getattr(model, "unlearnkit_head", None)
    tap = taps_of(model).get(layer)
    if name is None or tap is None or tap.module != name or tap.at != "input":
        return None
    head = head_of(model)
    return head if isinstance(head, nn.Linear) and head.bias is not None else None


def head_relearn_jobs(passes: ForwardPasses, ctx: AuditContext, plan: RelearnPlan | None) -> Pending | str:
    """The head relearning check (module docstring) at the penultimate layer, from the forward passes'
    features, with the relearning draws' shots: one job per model, finished as measures; why not, when it does
    not apply."""
    layer, split, config = passes.penultimate, ctx.split, ctx.config
    if plan is None:
        return "no relearning draws (sample-level forgetting)"
    heads = [_head_input(m, layer) for m in (passes.unlearned, passes.original, *passes.refs)]
    if any(h is None for h in heads):
        return f"{layer} is not the input of a linear head with a bias"
    yf, yr = split.train_forget.y, split.train_retain.y
    test_rows = _test_forget_rows(split)
    yt = split.test.y[torch.from_numpy(test_rows)] if test_rows.size else None
    budgets = tuple(sorted(config.head_relearn_steps))
    cap = np.sort(np.random.RandomState(ctx.audit_seed + 2).choice(
        len(yr), min(len(yr), config.head_refit_max_retain), replace=False))

    def attacked(out: dict, head: nn.Linear) -> dict:
        feats = _forget_features(out, layer, test_rows)
        xr = out["train_retain"][layer]
        sums: dict = {}
        for draw in plan.draws:
            f, r = torch.from_numpy(draw.forget), torch.from_numpy(draw.retain)
            shots = torch.cat([feats["train"][f], xr[r]])
            y_shots = torch.cat([yf[f], yr[r]])
            h = torch.from_numpy(draw.held_out)
            queries = {"train": (feats["train"][h], yf[h])}
            if "test" in feats:
                queries["test"] = (feats["test"], yt)
            for name, (q, qy) in queries.items():
                scores = head_relearn(xr[torch.from_numpy(cap)], shots, y_shots, q, qy, weight=head.weight,
                                      bias=head.bias, steps=budgets, lr=config.head_relearn_lr)
                for b, s in zip(budgets, scores):
                    sums.setdefault((name, b), []).append((s.probability, s.log_odds))
        return {key: tuple(np.mean(v, axis=0).tolist()) for key, v in sums.items()}

    outs = [passes.out_u, passes.out_o, *passes.out_refs]
    note = (f"SGD (lr {config.head_relearn_lr:g}) on the model's own head over {layer}, body frozen, in whitened "
            f"coordinates, from the relearning draws' shots; mean probability of the class on the held-out forget rows")

    def finish(vals: list) -> list[Measure]:
        measures = []
        for b in budgets:
            pick = [{name: v[(name, b)] for name in ("train", "test") if (name, b) in v} for v in vals]
            measures += _measures("heads", f"head relearning, {b} steps", pick[0], pick[1], pick[2:], note)
        return measures

    return Pending([(None if i == 0 else out, ("head_relearn", layer), partial(attacked, out, h))
                    for i, (out, h) in enumerate(zip(outs, heads))], finish, HEAD_COST)
