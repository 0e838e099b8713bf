"""``audit(original, unlearned, retrained, split)``: Mirage's representation audit, extended.

:func:`audit` is a pipeline of named steps, each a function of this package:

1. **forward passes** (:func:`unlearnkit.audit.passes.forward_passes`): one pass per model over the
   split's three parts gives every layer's features and the logits; a model with non-finite weights
   or outputs stops the audit here (``collapsed``);
2. **references' integrity** (:mod:`unlearnkit.audit.integrity`): duplicates, the original or the audited
   model given as a reference, or a reference that predicts the forget set, are refused;
3. **output numbers** (:func:`output_numbers`) and the **audit data** the probes read
   (:mod:`unlearnkit.audit.data`);
4. **per-layer measures** (:func:`layer_measures`): the deciding statistics and Mirage's numbers at every
   layer of both audit data;
5. **penultimate numbers** (:func:`knn_numbers`, :func:`feature_distances`): EC's k-NN accuracy and
   PURGE's feature distances (reported);
6. **relearning** (:mod:`unlearnkit.audit.relearning`) and the **resurfacing checks**
   (:mod:`unlearnkit.audit.resurface`): attacks on copies of every model, from draws of the audit seed;
7. **IDI** (:func:`idi_entry`), when asked for;
8. **checks and verdict**: every deciding statistic judged by one rule (:mod:`unlearnkit.audit.checks`), then
   :func:`unlearnkit.audit.verdict.decide`; where that reads ``erased``, the MLP probe test
   (:mod:`unlearnkit.audit.probe_test`), which can only withhold it, and the verdict again.

Every draw (relearning shots, head re-fit shots, probe splits and landmarks, BatchNorm rows) comes from the
**audit seed** ``config.audit_seed``: drawn fresh from the operating system when None, recorded in the report
(``audit_seed``), so an audit can be repeated afterwards but not anticipated by the party audited.

The audit never changes the models it is given and never imports ``unlearnkit.methods``: it does
not know how a model was made. The report's PCA view is projected when it is drawn
(:mod:`unlearnkit.audit.render`); the audit keeps only the rows it shows (:func:`plot_sample`).
"""
from __future__ import annotations

import dataclasses
import math
import secrets
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable, Sequence

import numpy as np
import torch
from scipy import stats
from torch import nn

from ..evaluation import output_metrics
from ..metrics import fid_feat, knn_accuracy, mean_cosine_similarity
from ..metrics.output_test import OutputTest, output_test_from_logits
from .checks import judge_all
from .config import BUDGET, AuditConfig
from .context import AuditContext, ForwardPasses
from .data import AuditData, audit_data, choose
from .idi import idi_check
from .integrity import check_identities, check_predictions, provenance, scope_evidence
from .integrity import scope as reference_scope
from .joint import joint_deviation
from .layers import LayerResult, assign_margins, measure_data, representation_measures
from .memo import AuditCache
from .outputs import output_measures
from .passes import as_model_list, forward_passes
from .probe_test import probe_jobs
from .probing import run_parallel
from .relearning import relearn_plan, relearning_jobs
from .report import AuditReport
from .resurface import batchnorm_jobs, head_refit_jobs, head_relearn_jobs
from .verdict import KEPT_CKA, Decision, Measurements, decide, measurements
from .vfl import transmitted_diagnostics

IDI_OFF = ("not computed (AuditConfig.idi=False: it trains InfoNCE critics; `unlearnkit audit --idi` and "
           "`unlearnkit run --idi` compute it)")
PLOT_ROWS = 2000  # rows of the PCA plot


class _Stopwatch:
    """The report's ``timing``: the seconds of each named stage since the previous one, and ``total_s``;
    each lap is said to ``say`` (progress per stage) when given."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}
        self.say = say

    def lap(self, name: str, what: str = "") -> None:
        now = time.perf_counter()
        self.laps[name], self.last = now - self.last, now
        if self.say is not None and what:
            self.say(f"audit: {what} ({self.laps[name]:.1f} s)")

    def total(self) -> float:
        return time.perf_counter() - self.start

    def timing(self) -> dict[str, float]:
        return {**self.laps, "total_s": self.total()}


def with_audit_seed(config: AuditConfig) -> AuditConfig:
    """``config`` with its audit seed set: unchanged when given, else a fresh one from the operating system
    (``secrets``: unknown before the audit, recorded after)."""
    if config.audit_seed is not None:
        return config
    return dataclasses.replace(config, audit_seed=secrets.randbits(31))


def audit(original: nn.Module, unlearned: nn.Module, retrained, split, layers: Sequence[str] | None = None, *,
          config: AuditConfig = AuditConfig(), device=None, outputs: dict | None = None,
          cache: AuditCache | None = None, references: list[dict] | None = None,
          say: Callable[[str], None] | None = None) -> AuditReport:
    """Audit ``unlearned`` against ``original`` and the retrained reference(s) on ``split``.

    ``retrained`` is one model or a list (retrained with different seeds, without the forget set: the verdict
    compares the unlearned model with their spread; ``erased`` needs 2 or more, 5 to 8 recommended, 16 on
    digits-sized data where the party audited may attack the audit: docs/audit.md).
    ``layers`` defaults to the model's audit layers (stage outputs and ``penultimate``). ``outputs`` may pass
    precomputed ``{"original": ..., "unlearned": ..., "retrained": [...]}`` from
    :func:`unlearnkit.evaluation.model_outputs` (with every audit layer and the logits) to reuse a forward pass;
    anything missing is computed. ``cache`` (an :class:`AuditCache` shared by the audits of one run, with the
    same ``outputs`` objects for original and references, and one audit seed in ``config``) reuses everything
    that does not depend on the unlearned model. ``references``: what the caller knows of each reference
    (seed, recipe, source), recorded with its sha256. ``say``: called with one line per finished stage.
    Returns an :class:`AuditReport`; the steps are listed in the module docstring. A :class:`UserError` when
    the references cannot be ones (:mod:`unlearnkit.audit.integrity`).

    Why it is long: it is the audit's table of contents, one line per stage in the order they run, and the
    report is assembled from the stages' results in one place; ``layers`` stays positional (its place in every
    release's signature)."""
    clock = _Stopwatch(say)
    config = with_audit_seed(config)
    refs = as_model_list(retrained)
    shas = check_identities(original, unlearned, refs)
    ctx = AuditContext.for_run(split, config, device, cache)
    passes = forward_passes(original, unlearned, refs, layers, ctx, outputs)
    if passes.broken:
        return _collapsed_report(passes, ctx, clock.total())
    clock.lap("forward_s", "forward passes")
    outs = output_numbers(passes, split, config)
    check_predictions([m["forget_acc"] for m in outs.per_reference], len(split.train_forget),
                      config.not_forgotten_margin, config.confidence)
    datas = audit_data(split, config)
    rests_on, reason = choose(datas, split, config)
    clock.lap("output_metrics_s")
    results = layer_measures(datas, passes, ctx)
    clock.lap("layers_s", "layer statistics")
    knn, distances = knn_numbers(passes, ctx), feature_distances(passes, ctx)
    clock.lap("knn_fid_s")
    measures, not_applicable, relearning = inside_measures(passes, ctx)
    clock.lap("resurfacing_s", "relearning and resurfacing checks")
    idi = idi_entry(passes, ctx)
    clock.lap("idi_s", "IDI" if config.idi else "")
    membership = output_membership(passes, split, config)
    utility = utility_loss(outs, config)
    measures = output_measures(passes, split, ctx.sample_level) + representation_measures(results) + measures
    checks = judge_all(measures, config)
    clock.lap("output_test_s")
    kept = _kept_layers(results)
    measured = measurements(outputs_unlearned=outs.unlearned, outputs_retrained=outs.retrained, checks=checks,
                            n_forget={k: d.n_forget for k, d in datas.items()}, sample_level=ctx.sample_level,
                            n_train_forget=len(split.train_forget), n_refs=len(passes.refs), config=config,
                            utility=utility, kept_layers=kept, not_applicable=not_applicable,
                            reference_forget_acc=[o["forget_acc"] for o in outs.per_reference],
                            joint=joint_deviation(checks, config.joint_level))
    measured, decision = with_probe_test(passes, ctx, measured, decide(measured), not_applicable)
    clock.lap("mlp_probe_s", "MLP probe test" if measured.probe is not None else "")
    prov = provenance(shas, references)
    chosen = reference_scope(prov)
    evidence = decision.evidence + scope_evidence(decision.verdict, chosen)
    return AuditReport(
        verdict=decision.verdict, evidence=evidence, rests_on=rests_on, rests_on_reason=reason,
        output_test=membership, utility=utility,
        n_forget_needed=decision.n_forget_needed, layers=results,
        audit_data={k: d.summary() for k, d in datas.items()},
        models=_models_entry(outs, knn, distances, len(passes.refs)),
        resurfacing={"relearning": relearning, "not_applicable": not_applicable}, idi=idi,
        config=config, sample_level=ctx.sample_level, penultimate=passes.penultimate,
        embedding=plot_sample(datas[rests_on], passes, config),
        transmitted=transmitted_diagnostics(unlearned, results, measured, rests_on), checks=tuple(checks),
        timing=clock.timing(), task=_task(passes, ctx), references=prov, references_scope=chosen,
        references_needed=decision.references_needed, joint=measured.joint, mlp_probe=measured.probe)


def inside_measures(passes: ForwardPasses, ctx: AuditContext) -> tuple[list, dict, dict]:
    """The measures that attack copies of the models (relearning, head re-fit, head relearning, BatchNorm
    recalibration; each when ``config`` turns it on), what did not apply and why, and the relearning's report
    entry. The per-model jobs of every check run in one pool, longest first (:meth:`AuditContext.run_pending`)."""
    config = ctx.config
    plan, why = relearn_plan(ctx.split, config, ctx.audit_seed)
    pending, not_applicable = {}, {}
    if config.relearn and plan is None:
        not_applicable["relearning"] = why
    elif config.relearn:
        pending["relearning"] = relearning_jobs(passes, ctx, plan)
    for name, on, fn, why_key in (
            ("head_refit", config.head_refit, partial(head_refit_jobs, passes, ctx), "heads"),
            ("head_relearn", config.head_relearn, partial(head_relearn_jobs, passes, ctx, plan), "heads"),
            ("batchnorm", config.bn_recalibration, partial(batchnorm_jobs, passes, ctx), "batchnorm")):
        got = fn() if on else None
        if isinstance(got, str):
            not_applicable.setdefault(why_key, got)
        elif got is not None:
            pending[name] = got
    done = ctx.run_pending(pending)
    measures, report = done.pop("relearning", ([], {}))
    for name in ("head_refit", "head_relearn", "batchnorm"):
        measures = measures + done.get(name, [])
    return measures, not_applicable, report


def with_probe_test(passes: ForwardPasses, ctx: AuditContext, measured: Measurements, decision: Decision,
                    not_applicable: dict) -> tuple[Measurements, Decision]:
    """(measurements, decision) with the MLP probe test (:mod:`unlearnkit.audit.probe_test`) read: where ``decision``
    is ``erased`` and the test applies, its jobs run (the references' from the run's cache) and the verdict is
    decided again with it; otherwise both unchanged, with why it did not run in ``not_applicable["mlp_probe"]``."""
    pending = probe_jobs(passes, ctx)
    if isinstance(pending, str) or decision.verdict != "erased":
        not_applicable["mlp_probe"] = (pending if isinstance(pending, str) else
                                       f"not needed: the other tests read {decision.verdict}, which it cannot change")
        return measured, decision
    measured = dataclasses.replace(measured, probe=ctx.run_pending({"mlp_probe": pending})["mlp_probe"])
    return measured, decide(measured)


def _kept_layers(results: dict[str, list[LayerResult]]) -> list[str]:
    """Layers whose representation is the original's: CKA to the original >= :data:`KEPT_CKA` where the
    references' is below it (on any audit data)."""
    out = []
    for rs in results.values():
        for r in rs:
            cu, cr = r.cka_original, r.cka_retrain_original
            if math.isfinite(cu) and cu >= KEPT_CKA and (not math.isfinite(cr) or cr < KEPT_CKA):
                out.append(r.layer)
    return list(dict.fromkeys(out))


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
    with each layer's reported ΔAUROC reference line (:func:`unlearnkit.audit.layers.assign_margins`)."""
    results = {name: measure_data(data, passes, ctx) for name, data in datas.items()}
    assign_margins(results, len(passes.refs), ctx.config)
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


def _task(passes: ForwardPasses, ctx: AuditContext) -> dict:
    """The report's ``task`` entry: the task, the layers measured once under a deeper name, the references and
    the audit seed."""
    return {**_task_basics(ctx.split), "same_vector_layers": passes.same_as, "references": len(passes.refs),
            "audit_seed": ctx.audit_seed, "kept_margin": ctx.config.kept_margin}


def _collapsed_report(passes: ForwardPasses, ctx: AuditContext, elapsed: float) -> AuditReport:
    """The audit of a broken model: ``collapsed``, one line of evidence, nothing measured."""
    return AuditReport(
        verdict="collapsed", evidence=[passes.broken], rests_on="train",
        rests_on_reason="nothing was measured: the model is broken", layers={"train": []},
        audit_data={"train": {}},
        models={"unlearned": {"non_finite": True}}, resurfacing={}, idi={"idi": None, "note": "not computed"},
        config=ctx.config, sample_level=ctx.sample_level, penultimate=passes.layers[-1],
        timing={"total_s": elapsed}, task=_task_basics(ctx.split))
