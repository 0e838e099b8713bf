"""Per-layer representation measurements on one audit data choice.

For every layer: LPR of the unlearned model, of the original and of each retrained reference on
the same resplits; ΔLPR (unlearned − mean retrain) and the original's ΔLPR (the *positive
control*: what the audit sees for a model that kept the original representation) with their
paired intervals; the same for the probe AUROC; Fisher separability and its ratio to retrain with
a bootstrap interval; CKA to the original and to the retrained references on one shared
subsample; and, with several references, their spread (each reference against the others).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..metrics import cka_subsample_indices, fisher_separability, linear_cka
from .config import AuditConfig
from .data import AuditData
from .memo import AuditCache
from .probing import (ProbeScores, boot_separability, bootstrap_weights, make_splits, paired_interval,
                      probe_scores, separability_ratio)

MIN_PROBE_PER_SIDE = 3  # a stratified 70/30 split needs >= 1 held-out row of each side


@dataclass
class Interval:
    value: float
    low: float
    high: float

    def as_list(self) -> list:
        return [self.low, self.high]


@dataclass
class LayerResult:
    """Everything the audit measured at one layer on one audit data choice."""

    layer: str
    probed: bool                              # False when too few rows to fit a probe
    lpr: float = math.nan                     # unlearned, balanced accuracy %, mean over splits
    lpr_auroc: float = math.nan
    lpr_retrained: float = math.nan           # mean over references
    lpr_original: float = math.nan
    delta_lpr: Interval | None = None         # unlearned − retrain, percentage points
    delta_lpr_original: Interval | None = None  # original − retrain (positive control)
    delta_auroc: Interval | None = None
    separability: float = math.nan            # Fisher F of the unlearned model
    separability_retrained: float = math.nan  # mean over references
    separability_original: float = math.nan
    separability_ratio: Interval | None = None           # F_u / F_r
    separability_ratio_original: Interval | None = None  # F_o / F_r (positive control)
    cka_original: float = math.nan            # CKA(unlearned, original)
    cka_retrain: float = math.nan             # mean CKA(unlearned, reference)
    cka_retrain_original: float = math.nan    # mean CKA(reference, original), for scale
    cka_between_retrained: float | None = None  # mean CKA between references (k >= 2)
    ref_spread_lpr: float | None = None       # max |ΔLPR| of a reference vs the others (k >= 2)
    ref_spread_separability: float | None = None  # max |log F ratio| of a reference vs the others
    lpr_margin: float = math.nan              # the tolerances applied at this layer
    separability_margin: float = math.nan
    margin_source: str = ""
    per_split: dict = field(default_factory=dict, repr=False)


def _interval(d: np.ndarray, splits, n: int, config: AuditConfig) -> Interval:
    mean, lo, hi = paired_interval(d, splits, n, config)
    return Interval(mean, lo, hi)


@dataclass
class _Model:
    """One model's rows of the audit data at one layer, and its per-model numbers (cacheable)."""

    x: np.ndarray
    separability: float = math.nan
    boot: np.ndarray | None = None
    scores: ProbeScores | None = None


def measure_data(data: AuditData, layers: list[str], out_u: dict, out_o: dict, out_refs: list[dict],
                 config: AuditConfig, cache: AuditCache, context: tuple, device=None) -> list[LayerResult]:
    """Every layer's :class:`LayerResult` on one audit data choice.

    Per model and layer, the probe scores on the shared resplits, the Fisher separability and its
    bootstrap draws are computed once; for the original and the references they come from
    ``cache`` when an earlier audit of the same run computed them (``context`` = split and config
    identity). All missing probe fits of all layers run in one parallel batch.
    """
    y = data.is_forget
    probed = data.n_forget >= MIN_PROBE_PER_SIDE and data.n_retain >= MIN_PROBE_PER_SIDE
    splits = make_splits(y, config) if probed else []
    boot = bootstrap_weights(y, config)
    models: dict[str, list[_Model]] = {}
    todo: list[_Model] = []
    for layer in layers:
        row = []
        for role, out in [("u", out_u), ("o", out_o)] + [("r", o) for o in out_refs]:
            key = cache.key(out, data.name, layer, *context) if role != "u" else None
            if key is not None and cache.has(key):
                row.append(cache.get(key))
                continue
            x = data.features(out, layer)
            m = _Model(x, fisher_separability(x, y), boot_separability(x, boot) if boot is not None else None)
            if probed:
                todo.append(m)
            if key is not None:
                cache.put(key, m)
            row.append(m)
        models[layer] = row
    if todo:
        for m, sc in zip(todo, probe_scores([m.x for m in todo], y, splits, config, device)):
            m.scores = sc
    return [_layer_result(layer, data, models[layer], splits, probed, config) for layer in layers]


def _layer_result(layer: str, data: AuditData, ms: list[_Model], splits, probed: bool,
                  config: AuditConfig) -> LayerResult:
    m_u, m_o, *m_refs = ms
    x_u, x_o, x_refs = m_u.x, m_o.x, [m.x for m in m_refs]
    y = data.is_forget
    n = y.size
    res = LayerResult(layer, probed=False)
    # CKA on one subsample shared by every pair (Mirage: <= 5000 rows, the same for all pairs)
    rows = cka_subsample_indices(n, config.cka_max_samples, config.cka_seed)
    c = config.center
    res.cka_original = linear_cka(x_u[rows], x_o[rows], center=c)
    res.cka_retrain = float(np.mean([linear_cka(x_u[rows], x[rows], center=c) for x in x_refs]))
    res.cka_retrain_original = float(np.mean([linear_cka(x[rows], x_o[rows], center=c) for x in x_refs]))
    if len(x_refs) > 1:
        pairs = [(i, j) for i in range(len(x_refs)) for j in range(i + 1, len(x_refs))]
        res.cka_between_retrained = float(np.mean(
            [linear_cka(x_refs[i][rows], x_refs[j][rows], center=c) for i, j in pairs]))
    res.separability, res.separability_original = m_u.separability, m_o.separability
    f_refs = [m.separability for m in m_refs]
    res.separability_retrained = float(np.mean(f_refs))
    if not probed:
        return res
    res.probed = True
    s_u, s_o, s_refs = m_u.scores, m_o.scores, [m.scores for m in m_refs]
    r_bacc = np.mean([s.bacc for s in s_refs], axis=0)
    r_auroc = np.mean([s.auroc for s in s_refs], axis=0)
    res.lpr, res.lpr_auroc = float(s_u.bacc.mean()), float(s_u.auroc.mean())
    res.lpr_retrained, res.lpr_original = float(r_bacc.mean()), float(s_o.bacc.mean())
    res.delta_lpr = _interval(s_u.bacc - r_bacc, splits, n, config)
    res.delta_lpr_original = _interval(s_o.bacc - r_bacc, splits, n, config)
    res.delta_auroc = _interval(s_u.auroc - r_auroc, splits, n, config)
    boots = None if m_u.boot is None else [m.boot for m in m_refs]
    res.separability_ratio = Interval(*separability_ratio(m_u.separability, m_u.boot, f_refs, boots, config))
    res.separability_ratio_original = Interval(*separability_ratio(m_o.separability, m_o.boot, f_refs, boots,
                                                                   config))
    res.per_split = {"lpr_unlearned": s_u.bacc, "lpr_original": s_o.bacc, "lpr_retrained": r_bacc}
    if len(x_refs) > 1:  # each reference against the mean of the others: what a retrain looks like
        k = len(x_refs)
        res.ref_spread_lpr = float(max(
            abs(np.mean(s_refs[i].bacc - np.mean([s_refs[j].bacc for j in range(k) if j != i], axis=0)))
            for i in range(k)))
        others = [max(float(np.mean([f_refs[j] for j in range(k) if j != i])), 1e-12) for i in range(k)]
        res.ref_spread_separability = float(max(abs(math.log(max(f_refs[i], 1e-12) / others[i]))
                                                for i in range(k)))
    return res


def assign_margins(results: list[LayerResult], n_refs: int, config: AuditConfig) -> None:
    """Set each layer's tolerances: the shallow / deep default, widened by the references' spread.

    With k >= 2 references, each layer's margin is max(default, ``spread_factor`` x the largest
    deviation of one reference from the mean of the others). The spread only ever widens the
    tolerance: with few references a small spread is weak evidence that seeds agree (k = 2 gives
    a single draw; on digits two seeds agreed within 1.15x at block1 while a third differed 1.6x).
    """
    n_layers = len(results)
    n_shallow = config.shallow_layers if config.shallow_layers is not None else n_layers // 2
    for i, r in enumerate(results):
        shallow = i < n_shallow
        r.lpr_margin = config.shallow_lpr_margin if shallow else config.lpr_margin
        r.separability_margin = config.shallow_separability_margin if shallow else config.separability_margin
        r.margin_source = "default (shallow layer)" if shallow else "default (deep layer)"
        if n_refs > 1 and r.ref_spread_lpr is not None and r.ref_spread_separability is not None:
            f = config.spread_factor
            lpr = f * r.ref_spread_lpr
            sep = math.exp(f * r.ref_spread_separability)
            widened = lpr > r.lpr_margin or sep > r.separability_margin
            r.lpr_margin = max(r.lpr_margin, lpr)
            r.separability_margin = max(r.separability_margin, sep)
            if widened:
                r.margin_source += f", widened to {f:g}x the spread of the {n_refs} retrained references"
            else:
                r.margin_source += (f"; the {n_refs} retrained references agree more closely ({f:g}x spread "
                                    f"{lpr:.1f} pts / {sep:.2f}x)")
