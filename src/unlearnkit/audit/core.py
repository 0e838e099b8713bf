"""``audit(original, unlearned, retrained, split)``: Mirage's representation audit, extended.

One forward pass per model over the split's three parts (train forget, train retain, test) gives
every layer's features and the logits (:func:`unlearnkit.evaluation.model_outputs`); everything
else is computed from those tensors, plus two cheap resurfacing attacks on copies of the models.
The audit never changes the models it is given and never imports ``unlearnkit.methods``: it does
not know how a model was made.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..evaluation import model_outputs, output_metrics
from ..metrics import fid_feat, knn_accuracy, mean_cosine_similarity
from ..models.features import LOGITS
from ..models.zoo import audit_layers, taps_of
from .config import AuditConfig
from .data import choose, is_sample_level, test_data, train_data
from .idi import idi_check
from .layers import assign_margins, measure_data
from .memo import AuditCache
from .report import AuditReport
from .resurface import bn_recalibration_check, head_refit_check, head_relearn_check, relearn_check
from .tolerance import calibrated_for
from .verdict import decide, measurements
from .vfl import transmitted_diagnostics

ROLES = ("original", "unlearned", "retrained")
OUTPUT_KEYS = ("forget_acc", "retain_acc", "test_acc", "test_forget_acc", "test_retain_acc", "test_acc_full",
               "mia_efficacy", "mia_auc")


def _as_list(retrained) -> list[nn.Module]:
    if isinstance(retrained, nn.Module):
        return [retrained]
    refs = list(retrained)
    if not refs or not all(isinstance(m, nn.Module) for m in refs):
        raise ValueError("retrained must be a model or a non-empty list of models")
    return refs


def _complete(out: dict | None, layers: Sequence[str]) -> bool:
    if not isinstance(out, dict):
        return False
    for part in ("train_forget", "train_retain", "test"):
        if part not in out or any(k not in out[part] for k in (*layers, LOGITS)):
            return False
    return True


def _outputs_for(model: nn.Module, given, layers, split, config: AuditConfig,
                 device) -> dict[str, dict[str, Tensor]]:
    if _complete(given, layers):
        return given
    return model_outputs(model, split, list(layers), device, config.batch_size)


def _mean_metrics(ms: list[dict]) -> dict:
    out = {}
    for k in ms[0]:
        vals = [m[k] for m in ms if m.get(k) is not None and math.isfinite(m[k])]
        out[k] = float(np.mean(vals)) if vals else math.nan
    return out


def _knn(out: dict, split, layer: str, k: int) -> dict:
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


def _reference_distances(f_refs: list[Tensor], f_o: Tensor) -> dict:
    """PURGE's feature distances of the references (to each other and to the original)."""
    k = len(f_refs)
    return {"fid_feat_to_retrain": (float(np.mean([fid_feat(f_refs[i], f_refs[j]) for i in range(k)
                                                   for j in range(k) if i != j])) if k > 1 else None),
            "fid_feat_to_original": float(np.mean([fid_feat(f, f_o) for f in f_refs])),
            "cosine_to_original": float(np.mean([mean_cosine_similarity(f, f_o) for f in f_refs]))}


def _pca2(x: np.ndarray) -> np.ndarray:
    x = x - x.mean(0, keepdims=True)
    if x.shape[0] < 2:
        return np.zeros((x.shape[0], 2))
    _, _, vt = np.linalg.svd(x, full_matrices=False)
    comp = x @ vt[:2].T
    if comp.shape[1] < 2:
        comp = np.pad(comp, ((0, 0), (0, 2 - comp.shape[1])))
    return comp


def same_vector_layers(layers: Sequence[str], outs: list[dict]) -> dict[str, str]:
    """Audit layers that read the same vector as a deeper one in every model (a ResNet's pooled last
    stage and its ``penultimate``, the average-pooled input of the head): ``{shallower: deeper}``.
    They are measured once, under the deeper name, so no layer counts twice in the verdict's family."""
    same: dict[str, str] = {}
    for i, a in enumerate(layers):
        for b in layers[i + 1:]:
            if all(o[part][a].shape == o[part][b].shape and torch.allclose(o[part][a], o[part][b], rtol=1e-5,
                                                                            atol=1e-6)
                   for o in outs for part in ("train_forget", "train_retain", "test")):
                same[a] = b
                break
    return same


def _non_finite(bad_weights: list[str], out_u: dict | None, layers: Sequence[str]) -> str | None:
    """One line saying how the model is broken (non-finite weights or outputs), or None."""
    if bad_weights:
        more = f" and {len(bad_weights) - 3} more" if len(bad_weights) > 3 else ""
        return (f"the model has non-finite weights (NaN or inf in {', '.join(bad_weights[:3])}{more}): it "
                f"computes nothing, the forget set and everything else included")
    bad = [f"{part} {key}" for part, d in out_u.items() for key in (*layers, LOGITS)
           if key in d and not bool(torch.isfinite(d[key]).all())]
    if bad:
        return (f"the model's outputs are non-finite (NaN or inf at {', '.join(bad[:3])}"
                f"{' and more' if len(bad) > 3 else ''}): it computes nothing usable")
    return None


def _collapsed_report(line: str, split, layers: Sequence[str], config: AuditConfig, elapsed: float) -> AuditReport:
    """The audit of a broken model: ``collapsed``, one line of evidence, nothing measured."""
    return AuditReport(
        verdict="collapsed", evidence=[line], rests_on="train",
        rests_on_reason="nothing was measured: the model is broken", layers={"train": []}, audit_data={"train": {}},
        models={"unlearned": {"non_finite": True}}, resurfacing={}, idi={"idi": None, "note": "not computed"},
        config=config, sample_level=is_sample_level(split), penultimate=list(layers)[-1],
        timing={"total_s": elapsed},
        task={"forget": split.spec.to_dict(), "split_hash": split.split_hash, "dataset": split.dataset.name,
              "n_train_forget": len(split.train_forget), "n_test_forget": len(split.test_forget)})


def audit(original: nn.Module, unlearned: nn.Module, retrained, split, layers: Sequence[str] | None = None,
          config: AuditConfig = AuditConfig(), device=None, outputs: dict | None = None,
          cache: AuditCache | None = None) -> AuditReport:
    """Audit ``unlearned`` against ``original`` and the retrained reference(s) on ``split``.

    ``retrained`` is one model or a list (retrained with different seeds: with two or more, each
    layer's tolerance is derived from their spread, :mod:`unlearnkit.audit.tolerance`; one is enough
    to certify ``erased`` only on a calibrated architecture). ``layers`` defaults to the model's audit layers (stage outputs and
    ``penultimate``). ``outputs`` may pass precomputed
    ``{"original": ..., "unlearned": ..., "retrained": [...]}`` from
    :func:`unlearnkit.evaluation.model_outputs` (with every audit layer and the logits) to reuse a
    forward pass; anything missing is computed. ``cache`` (an :class:`AuditCache` shared by the
    audits of one run, with the same ``outputs`` objects for original and references) reuses
    everything that does not depend on the unlearned model. Returns an :class:`AuditReport`.
    """
    cache = cache if cache is not None else AuditCache()
    t0 = time.perf_counter()
    refs = _as_list(retrained)
    layers = list(layers) if layers else audit_layers(unlearned)
    for m in (original, unlearned, *refs):
        missing = [name for name in layers if name not in taps_of(m)]
        if missing:
            raise ValueError(f"layer(s) {missing} not found in a model; it has {list(taps_of(m))}")
    given = outputs or {}
    given_refs = given.get("retrained") or [None] * len(refs)
    if len(given_refs) != len(refs):
        raise ValueError(f"outputs['retrained'] has {len(given_refs)} entries for {len(refs)} retrained "
                         f"models")
    bad_weights = [n for n, t in (*unlearned.named_parameters(), *unlearned.named_buffers())
                   if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    out_u = None if bad_weights else _outputs_for(unlearned, given.get("unlearned"), layers, split, config, device)
    broken = _non_finite(bad_weights, out_u, layers)
    if broken:
        return _collapsed_report(broken, split, layers, config, time.perf_counter() - t0)
    out_o = _outputs_for(original, given.get("original"), layers, split, config, device)
    out_r = [_outputs_for(m, g, layers, split, config, device) for m, g in zip(refs, given_refs)]
    same_as = same_vector_layers(layers, [out_o, out_u, *out_r])
    layers = [name for name in layers if name not in same_as]
    t_forward = time.perf_counter() - t0

    t1 = time.perf_counter()
    metrics_u = output_metrics(out_u, split)
    metrics_o = output_metrics(out_o, split)
    metrics_refs = [output_metrics(o, split) for o in out_r]
    metrics_r = _mean_metrics(metrics_refs)

    sample_level = is_sample_level(split)
    datas = {}
    td = test_data(split, config)
    if td is not None:
        datas["test"] = td
    datas["train"] = train_data(split, config)
    rests_on, reason = choose(datas, split, config)

    t2 = time.perf_counter()
    context = (*cache.key(split), AuditCache.config_key(config))
    results = {}
    for name, data in datas.items():
        results[name] = measure_data(data, layers, out_u, out_o, out_r, config, cache, context, device)
    calibrated_on = calibrated_for(original, unlearned, *refs)
    assign_margins(results, len(refs), config, calibrated_on, sample_level)

    t3 = time.perf_counter()
    # per-model representation numbers at the penultimate layer (or the deepest audited one)
    pen = "penultimate" if "penultimate" in layers else layers[-1]
    knn_u = _knn(out_u, split, pen, config.knn_k)
    def knn_of(out: dict) -> dict:  # original / references: the same in every audit of a run
        return cache.get_or(cache.key(out, "knn", pen, *context), lambda: _knn(out, split, pen, config.knn_k))

    knn_o = knn_of(out_o)
    knn_r = _mean_metrics([knn_of(o) for o in out_r])
    cap = torch.arange(min(len(split.train_forget), 5000))
    f_u, f_o = out_u["train_forget"][pen][cap], out_o["train_forget"][pen][cap]
    f_refs = [o["train_forget"][pen][cap] for o in out_r]
    representation = {
        "unlearned": {"fid_feat_to_retrain": float(np.mean([fid_feat(f_u, f) for f in f_refs])),
                      "fid_feat_to_original": fid_feat(f_u, f_o),
                      "cosine_to_original": mean_cosine_similarity(f_u, f_o)},
        "original": {"fid_feat_to_retrain": float(np.mean([fid_feat(f_o, f) for f in f_refs])),
                     "fid_feat_to_original": 0.0, "cosine_to_original": 1.0},
        "retrained": cache.get_or(cache.key(out_o, "fid_refs", *[id(o) for o in out_r], *context),
                                  lambda: _reference_distances(f_refs, f_o)),
    }

    t4 = time.perf_counter()
    resurfacing = {}
    if config.bn_recalibration:
        resurfacing["bn_recalibration"] = bn_recalibration_check(unlearned, refs, split,
                                                                 metrics_u["forget_acc"], config, device,
                                                                 cache, context)
    if config.head_refit:
        resurfacing["head_refit"] = head_refit_check(out_u, out_r, split, pen, metrics_u["forget_acc"],
                                                     sample_level, config, cache, context)
    if config.head_relearn:
        resurfacing["head_relearn"] = head_relearn_check(unlearned, refs, out_u, out_r, split, pen,
                                                         metrics_u["forget_acc"], sample_level, config, cache,
                                                         context)
    if config.relearn:
        resurfacing["relearn"] = relearn_check(unlearned, refs, split, metrics_u["forget_acc"], sample_level,
                                               config, device, cache, context)

    t5 = time.perf_counter()
    if config.idi:
        idi = idi_check(original, unlearned, refs, split, layers, config, device, cache, context)
    else:
        idi = {"idi": None, "note": "not computed (AuditConfig.idi=False: it trains InfoNCE critics; "
                                    "`unlearnkit audit --idi` and `unlearnkit run --idi` compute it)"}
    t6 = time.perf_counter()
    measured = measurements(outputs_unlearned=metrics_u, outputs_retrained=metrics_r, knn_unlearned=knn_u,
                            knn_retrained=knn_r, layers=results, rests_on=rests_on,
                            n_forget={k: d.n_forget for k, d in datas.items()}, sample_level=sample_level,
                            resurfacing=resurfacing, n_train_forget=len(split.train_forget), config=config)
    decision = decide(measured)

    # a small 2-D PCA view of the penultimate features for the report's plot
    data = datas[rests_on]
    rng = np.random.RandomState(config.cka_seed)
    n = data.is_forget.size
    show = np.sort(rng.choice(n, min(n, 2000), replace=False))
    embedding = {"is_forget": data.is_forget[show]}
    for role, out in (("original", out_o), ("unlearned", out_u), ("retrained", out_r[0])):
        embedding[role] = _pca2(data.features(out, pen)[show])

    return AuditReport(
        verdict=decision.verdict, evidence=decision.evidence, rests_on=rests_on, rests_on_reason=reason,
        n_forget_needed=decision.n_forget_needed, layers=results,
        audit_data={k: d.summary() for k, d in datas.items()},
        models={"unlearned": {"outputs": metrics_u, "knn": knn_u, **representation["unlearned"]},
                "original": {"outputs": metrics_o, "knn": knn_o, **representation["original"]},
                "retrained": {"outputs": metrics_r, "knn": knn_r, "n": len(refs),
                              "per_reference": metrics_refs, **representation["retrained"]}},
        resurfacing=resurfacing, idi=idi, config=config, sample_level=sample_level, penultimate=pen,
        embedding=embedding, transmitted=transmitted_diagnostics(unlearned, results, measured),
        family=measured.comparisons,
        timing={"forward_s": t_forward, "output_metrics_s": t2 - t1, "layers_s": t3 - t2,
                "knn_fid_s": t4 - t3, "resurfacing_s": t5 - t4, "idi_s": t6 - t5, "total_s": time.perf_counter() - t0},
        task={"forget": split.spec.to_dict(), "split_hash": split.split_hash, "dataset": split.dataset.name,
              "n_train_forget": len(split.train_forget), "n_test_forget": len(split.test_forget),
              "same_vector_layers": same_as,
              "tolerance": {"references": len(refs), "calibrated_on": calibrated_on,
                            "source": results[rests_on][-1].tolerance.source
                            if results[rests_on] and results[rests_on][-1].tolerance else None}},
    )
