"""``audit(original, unlearned, retrained, split)``: Mirage's representation audit, extended.

:func:`audit` is a pipeline of named steps, each a function of this package:

1. **forward passes** (:func:`unlearnkit.audit.passes.forward_passes`): one pass per model over the
   split's three parts gives every layer's features and the logits; a model with non-finite weights
   or outputs stops the audit here (``collapsed``);
2. **output numbers** (:func:`output_numbers`) and the **audit data** the probes read
   (:mod:`unlearnkit.audit.data`);
3. **per-layer measures** (:func:`layer_measures`): the verdict's statistics and Mirage's numbers
   at every layer of both audit data, with each layer's tolerance;
4. **penultimate numbers** (:func:`knn_numbers`, :func:`feature_distances`): EC's k-NN accuracy and
   PURGE's feature distances;
5. **resurfacing** (:func:`resurfacing_checks`): cheap attacks on copies of the models;
6. **IDI** (:func:`idi_entry`), when asked for;
7. **verdict** (:func:`unlearnkit.audit.verdict.decide`) over everything above.

The audit never changes the models it is given and never imports ``unlearnkit.methods``: it does
not know how a model was made. The report's PCA view is projected when it is drawn
(:mod:`unlearnkit.audit.render`); the audit keeps only the rows it shows (:func:`plot_sample`).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from typing import Sequence

import numpy as np
import torch
from scipy import stats
from torch import nn

from ..evaluation import output_metrics
from ..metrics import fid_feat, knn_accuracy, mean_cosine_similarity
from ..metrics.output_test import OutputTest, output_test_from_logits
from .config import BUDGET, AuditConfig
from .context import AuditContext, ForwardPasses
from .data import AuditData, audit_data, choose
from .idi import idi_check
from .layers import LayerResult, assign_margins, measure_data
from .memo import AuditCache
from .passes import as_model_list, forward_passes
from .probing import run_parallel
from .report import AuditReport
from .resurface import ResurfaceResult, bn_recalibration_check, head_refit_check, head_relearn_check, relearn_check
from .verdict import decide, measurements
from .vfl import transmitted_diagnostics

#: The resurfacing checks in the order they run and are reported; each runs when the
#: :class:`AuditConfig` field of the same name is true.
RESURFACING_CHECKS = (("bn_recalibration", bn_recalibration_check), ("head_refit", head_refit_check),
                      ("head_relearn", head_relearn_check), ("relearn", relearn_check))
IDI_OFF = ("not computed (AuditConfig.idi=False: it trains InfoNCE critics; `unlearnkit audit --idi` and "
           "`unlearnkit run --idi` compute it)")
PLOT_ROWS = 2000  # rows of the PCA plot


class _Stopwatch:
    """The report's ``timing``: the seconds of each named stage since the previous one, and ``total_s``."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name], self.last = now - self.last, now

    def total(self) -> float:
        return time.perf_counter() - self.start

    def timing(self) -> dict[str, float]:
        return {**self.laps, "total_s": self.total()}


def audit(original: nn.Module, unlearned: nn.Module, retrained, split, layers: Sequence[str] | None = None, *,
          config: AuditConfig = AuditConfig(), device=None, outputs: dict | None = None,
          cache: AuditCache | None = None) -> AuditReport:
    """Audit ``unlearned`` against ``original`` and the retrained reference(s) on ``split``.

    ``retrained`` is one model or a list (retrained with different seeds: with two or more, each
    layer's tolerance is derived from their spread, :mod:`unlearnkit.audit.tolerance`, and the MMD²
    comparison and the output membership test run; one reference can flag a model but never certify
    ``erased``). ``layers`` defaults to the model's audit
    layers (stage outputs and ``penultimate``). ``outputs`` may pass precomputed
    ``{"original": ..., "unlearned": ..., "retrained": [...]}`` from
    :func:`unlearnkit.evaluation.model_outputs` (with every audit layer and the logits) to reuse a
    forward pass; anything missing is computed. ``cache`` (an :class:`AuditCache` shared by the
    audits of one run, with the same ``outputs`` objects for original and references) reuses
    everything that does not depend on the unlearned model. Returns an :class:`AuditReport`; the
    steps are listed in the module docstring.
    """
    clock = _Stopwatch()
    ctx = AuditContext.for_run(split, config, device, cache)
    passes = forward_passes(original, unlearned, as_model_list(retrained), layers, ctx, outputs)
    if passes.broken:
        return _collapsed_report(passes, ctx, clock.total())
    clock.lap("forward_s")
    outs = output_numbers(passes, split, config)
    datas = audit_data(split, config)
    rests_on, reason = choose(datas, split, config)
    clock.lap("output_metrics_s")
    results = layer_measures(datas, passes, ctx)
    clock.lap("layers_s")
    knn, distances = knn_numbers(passes, ctx), feature_distances(passes, ctx)
    clock.lap("knn_fid_s")
    resurfacing = resurfacing_checks(passes, outs.unlearned["forget_acc"], ctx)
    clock.lap("resurfacing_s")
    idi = idi_entry(passes, ctx)
    clock.lap("idi_s")
    membership = output_membership(passes, split, config)
    utility = utility_loss(outs, config)
    clock.lap("output_test_s")
    measured = measurements(outputs_unlearned=outs.unlearned, outputs_retrained=outs.retrained,
                            knn_unlearned=knn["unlearned"], knn_retrained=knn["retrained"], layers=results,
                            rests_on=rests_on, n_forget={k: d.n_forget for k, d in datas.items()},
                            sample_level=ctx.sample_level, resurfacing=resurfacing,
                            n_train_forget=len(split.train_forget), config=config, output=membership,
                            utility=utility)
    decision = decide(measured)
    return AuditReport(
        verdict=decision.verdict, evidence=decision.evidence, rests_on=rests_on, rests_on_reason=reason,
        output_test=membership, utility=utility,
        n_forget_needed=decision.n_forget_needed, layers=results,
        audit_data={k: d.summary() for k, d in datas.items()},
        models=_models_entry(outs, knn, distances, len(passes.refs)), resurfacing=resurfacing, idi=idi,
        config=config, sample_level=ctx.sample_level, penultimate=passes.penultimate,
        embedding=plot_sample(datas[rests_on], passes, config),
        transmitted=transmitted_diagnostics(unlearned, results, measured), family=measured.comparisons,
        timing=clock.timing(), task=_task(passes, results, rests_on, ctx))


# ------------------------------------------------------------------------------------------ the steps


@dataclass
class OutputNumbers:
    """Each model's output metrics (:func:`unlearnkit.evaluation.output_metrics`); ``retrained`` is the
    mean over the references (``per_reference``)."""

    unlearned: dict
    original: dict
    per_reference: list[dict]
    retrained: dict


def output_numbers(passes: ForwardPasses, split, config: AuditConfig) -> OutputNumbers:
    """Accuracies and MIA of every model, from the logits of the forward passes (a parallel job per model)."""
    unlearned, original, *per_reference = run_parallel(
        [partial(output_metrics, o, split) for o in (passes.out_u, passes.out_o, *passes.out_refs)], config)
    return OutputNumbers(unlearned, original, per_reference, _mean_metrics(per_reference))


def output_membership(passes: ForwardPasses, split, config: AuditConfig) -> OutputTest | None:
    """The output membership test (:mod:`unlearnkit.metrics.output_test`) of the unlearned model's
    logit-scaled confidence on the training forget set against the references', with the original as its
    positive control, at the output test's share of the false-flag budget (``config.BUDGET``); None
    without forget rows."""
    if not len(split.train_forget):
        return None
    logits = [o["train_forget"]["logits"] for o in (passes.out_u, passes.out_o, *passes.out_refs)]
    return output_test_from_logits(logits[0], logits[2:], logits[1], split.train_forget.y,
                                   level=(1.0 - config.confidence) * BUDGET["output"])


def utility_loss(outs: OutputNumbers, config: AuditConfig) -> dict:
    """The utility axis: how many points of retained accuracy (training retain set and test-retain, the
    larger loss) the unlearned model gives up against the references' mean, and whether that is beyond
    both ``config.utility_budget`` and, with K >= 2 references, the references' own spread (a two-sided
    95 % Gaussian prediction bound for one more retrain: t_{K-1, 0.975} · sd · sqrt(1 + 1/K)). Not a
    false-flag test of the budget: it qualifies the verdict (``erased · utility −17.7 pts``)."""
    losses, bounds = {}, {}
    k = len(outs.per_reference)
    for key in ("retain_acc", "test_retain_acc"):
        refs = [m[key] for m in outs.per_reference if m.get(key) is not None]
        u = outs.unlearned.get(key)
        if u is None or not refs or not all(math.isfinite(v) for v in [u, *refs]):
            continue
        losses[key] = float(np.mean(refs) - u)
        bounds[key] = (float(stats.t.ppf(0.975, k - 1) * np.std(refs, ddof=1) * math.sqrt(1 + 1 / k))
                       if k >= 2 else 0.0)
    if not losses:
        return {"loss": None, "flagged": False, "budget": config.utility_budget, "by": None, "spread_bound": None}
    by = max(losses, key=losses.get)
    loss, bound = losses[by], bounds[by]
    return {"loss": loss, "by": by, "budget": config.utility_budget, "spread_bound": bound if k >= 2 else None,
            "flagged": bool(loss > max(config.utility_budget, bound)), "losses": losses}


def layer_measures(datas: dict[str, AuditData], passes: ForwardPasses,
                   ctx: AuditContext) -> dict[str, list[LayerResult]]:
    """Every audited layer's statistics on each audit data (:func:`unlearnkit.audit.layers.measure_data`),
    with each layer's tolerances (:func:`unlearnkit.audit.layers.assign_margins`)."""
    results = {name: measure_data(data, passes, ctx) for name, data in datas.items()}
    assign_margins(results, len(passes.refs), ctx.config, passes.calibrated_on, ctx.sample_level)
    return results


def knn_numbers(passes: ForwardPasses, ctx: AuditContext) -> dict[str, dict]:
    """EC's cosine k-NN accuracy of the penultimate features, per model (``retrained``: the mean over the
    references); the original's and the references' come from the run's cache when an earlier audit
    computed them. One model per parallel job (:meth:`AuditContext.cached_many`)."""
    pen, split, k = passes.penultimate, ctx.split, ctx.config.knn_k
    outs = [passes.out_u, passes.out_o, *passes.out_refs]
    vals = ctx.cached_many([(None if i == 0 else out, ("knn", pen), partial(_knn, out, split, pen, k))
                            for i, out in enumerate(outs)])
    return {"unlearned": vals[0], "original": vals[1], "retrained": _mean_metrics(vals[2:])}


def feature_distances(passes: ForwardPasses, ctx: AuditContext) -> dict[str, dict]:
    """PURGE's distances of the penultimate forget-set features (at most 5000 rows), per model: Fréchet
    distance to the references' (mean) and to the original's, mean cosine similarity to the original's.
    Every Fréchet distance is a parallel job (:func:`~unlearnkit.audit.probing.run_parallel`)."""
    pen = passes.penultimate
    cap = torch.arange(min(len(ctx.split.train_forget), 5000))
    f_u, f_o = passes.out_u["train_forget"][pen][cap], passes.out_o["train_forget"][pen][cap]
    f_refs = [o["train_forget"][pen][cap] for o in passes.out_refs]
    retrained = ctx.cached(passes.out_o, ("fid_refs", *[id(o) for o in passes.out_refs]),
                           lambda: _reference_distances(f_refs, f_o, ctx.config))
    fids = run_parallel([partial(fid_feat, a, b) for a, b in [(f_u, f) for f in f_refs] + [(f_u, f_o)]
                         + [(f_o, f) for f in f_refs]], ctx.config)
    k = len(f_refs)
    return {
        "unlearned": {"fid_feat_to_retrain": float(np.mean(fids[:k])), "fid_feat_to_original": fids[k],
                      "cosine_to_original": mean_cosine_similarity(f_u, f_o)},
        "original": {"fid_feat_to_retrain": float(np.mean(fids[k + 1:])),
                     "fid_feat_to_original": 0.0, "cosine_to_original": 1.0},
        "retrained": retrained,
    }


def resurfacing_checks(passes: ForwardPasses, forget_acc: float,
                       ctx: AuditContext) -> dict[str, ResurfaceResult]:
    """The resurfacing checks of :data:`RESURFACING_CHECKS` the configuration turns on, each on copies of
    the unlearned model and the references (:mod:`unlearnkit.audit.resurface`); ``forget_acc`` is the
    unlearned model's forget accuracy before any attack."""
    return {name: check(passes, forget_acc, ctx) for name, check in RESURFACING_CHECKS
            if getattr(ctx.config, name)}


def idi_entry(passes: ForwardPasses, ctx: AuditContext) -> dict:
    """The report's ``idi`` entry (:func:`unlearnkit.audit.idi.idi_check` over the audited layers), or a
    note when ``AuditConfig.idi`` is off."""
    if not ctx.config.idi:
        return {"idi": None, "note": IDI_OFF}
    return idi_check(passes.original, passes.unlearned, passes.refs, passes.layers, ctx)


def plot_sample(data: AuditData, passes: ForwardPasses, config: AuditConfig) -> dict:
    """The rows of the report's PCA plot, projected when it is drawn (:mod:`unlearnkit.audit.render`): up
    to :data:`PLOT_ROWS` rows of ``data`` (the audit data the verdict rests on; seed ``cka_seed``), their
    ``is_forget``, and the penultimate features of the original, the unlearned model and the first
    reference (float32: they are only plotted)."""
    rng = np.random.RandomState(config.cka_seed)
    n = data.is_forget.size
    show = np.sort(rng.choice(n, min(n, PLOT_ROWS), replace=False))
    sample = {"is_forget": data.is_forget[show]}
    roles = (("original", passes.out_o), ("unlearned", passes.out_u), ("retrained", passes.out_refs[0]))
    for role, out in roles:
        sample[role] = data.features(out, passes.penultimate)[show].astype(np.float32)
    return sample


# ----------------------------------------------------------------------------------------- helpers


def _mean_metrics(ms: list[dict]) -> dict:
    """Key by key, the mean of the finite values of ``ms`` (nan when none is)."""
    out = {}
    for k in ms[0]:
        vals = [m[k] for m in ms if m.get(k) is not None and math.isfinite(m[k])]
        out[k] = float(np.mean(vals)) if vals else math.nan
    return out


def _knn(out: dict, split, layer: str, k: int) -> dict:
    """k-NN accuracy of the test-retain and test-forget rows against the training features at ``layer``."""
    bank = torch.cat([out["train_forget"][layer], out["train_retain"][layer]])
    labels = torch.cat([split.train_forget.y, split.train_retain.y])
    k = min(k, bank.shape[0])
    test = out["test"][layer]
    res = {"test_retain": knn_accuracy(bank, labels, test[split.test_retain.index], split.test_retain.y, k=k)}
    if len(split.test_forget):
        res["test_forget"] = knn_accuracy(bank, labels, test[split.test_forget.index], split.test_forget.y,
                                          k=k)
    else:
        res["test_forget"] = math.nan
    return res


def _reference_distances(f_refs: list[torch.Tensor], f_o: torch.Tensor, config: AuditConfig) -> dict:
    """PURGE's feature distances of the references (to each other and to the original); the Fréchet
    distances as parallel jobs."""
    k = len(f_refs)
    pairs = [(f_refs[i], f_refs[j]) for i in range(k) for j in range(k) if i != j]
    fids = run_parallel([partial(fid_feat, a, b) for a, b in pairs + [(f, f_o) for f in f_refs]], config)
    return {"fid_feat_to_retrain": float(np.mean(fids[:len(pairs)])) if k > 1 else None,
            "fid_feat_to_original": float(np.mean(fids[len(pairs):])),
            "cosine_to_original": float(np.mean([mean_cosine_similarity(f, f_o) for f in f_refs]))}


def _models_entry(outs: OutputNumbers, knn: dict, distances: dict, n_refs: int) -> dict:
    """The report's ``models`` entry: each model's output metrics, k-NN and feature distances."""
    return {"unlearned": {"outputs": outs.unlearned, "knn": knn["unlearned"], **distances["unlearned"]},
            "original": {"outputs": outs.original, "knn": knn["original"], **distances["original"]},
            "retrained": {"outputs": outs.retrained, "knn": knn["retrained"], "n": n_refs,
                          "per_reference": outs.per_reference, **distances["retrained"]}}


def _task_basics(split) -> dict:
    """What was forgotten, from which data and split."""
    return {"forget": split.spec.to_dict(), "split_hash": split.split_hash, "dataset": split.dataset.name,
            "n_train_forget": len(split.train_forget), "n_test_forget": len(split.test_forget)}


def _task(passes: ForwardPasses, results: dict[str, list[LayerResult]], rests_on: str,
          ctx: AuditContext) -> dict:
    """The report's ``task`` entry: the task, the layers measured once under a deeper name, and where the
    tolerances come from."""
    last = results[rests_on][-1] if results[rests_on] else None
    return {**_task_basics(ctx.split), "same_vector_layers": passes.same_as,
            "tolerance": {"references": len(passes.refs), "calibrated_on": passes.calibrated_on,
                          "source": last.tolerance.source if last and last.tolerance else None}}


def _collapsed_report(passes: ForwardPasses, ctx: AuditContext, elapsed: float) -> AuditReport:
    """The audit of a broken model: ``collapsed``, one line of evidence, nothing measured."""
    return AuditReport(
        verdict="collapsed", evidence=[passes.broken], rests_on="train",
        rests_on_reason="nothing was measured: the model is broken", layers={"train": []},
        audit_data={"train": {}},
        models={"unlearned": {"non_finite": True}}, resurfacing={}, idi={"idi": None, "note": "not computed"},
        config=ctx.config, sample_level=ctx.sample_level, penultimate=passes.layers[-1],
        timing={"total_s": elapsed}, task=_task_basics(ctx.split))
