"""Per-layer representation measurements on one audit data choice.

Per layer, every model (the unlearned one, the original, each reference) is measured on the same rows:

* **what the verdict reads** (:attr:`LayerResult.deciding`, judged by :mod:`unlearnkit.audit.checks`), from
  one feature preparation per model and layer (:func:`unlearnkit.metrics.prepare.prepare`: dead units by their
  own scale, standardised, whitened), so no function-preserving reparametrisation of the network (per-unit
  rescaling, permutation, invertible mixing of units compensated by the next linear layer) moves it:
  log U, the Gaussian-unbiased Mahalanobis distance of forget vs retained rows
  (:func:`~unlearnkit.metrics.lda.unbiased_separability`; floored at its own noise level, +inf when the
  groups are separated without overlap), and two held-out kernel probes (kernel Fisher discriminants,
  RBF and degree-2 polynomial on the standardised units: :mod:`unlearnkit.metrics.kernel_probe`, on splits and
  landmarks drawn from the audit seed; invariant to rescaling and permuting units, not to mixing them): a
  non-linear read-out measured on rows it was not fitted on;
* **reported beside it**: the separability ratio U_unlearned / mean U_references with an interval for the
  audit data's sampling noise (:func:`~unlearnkit.metrics.lda.ratio_interval`), ΔAUROC (unlearned − retrain,
  points) of the held-out LDA discriminant, paired over J resplits with a corrected-t interval, and, when
  asked for (``AuditConfig.mmd``), the MMD² ratio (:mod:`unlearnkit.metrics.two_sample`);
* **Mirage's numbers, reported as the paper defines them** (reference-specs §2.5) and read by no
  rule of the verdict: LPR (balanced accuracy of the StandardScaler + logistic probe) and ΔLPR, the
  trace-form Fisher separability F on raw features, and CKA (on standardised units, see
  :func:`_cka_numbers`). LPR is invariant to per-unit rescaling and permutation (the probe standardises),
  not to mixing; the trace-form F is invariant to neither.

**Adaptive resplitting** (:func:`resplit`): the resplit-based intervals (ΔAUROC, ΔLPR) are computed
in batches, up to ``n_splits`` resplits, and a layer's statistic stops at the first look where its
intervals are clear of its reference line on either side. Every model of the layer (unlearned, original,
each reference) gets the same resplits, so the differences stay paired; each look's interval is at
confidence 1 − (1 − ``confidence``) / L over the L looks, which keeps the reported interval's
coverage at ``confidence`` (Bonferroni over the looks; :class:`~unlearnkit.audit.config.AuditConfig`
says why). These numbers are reported only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from ..metrics import cka_subsample_indices, fisher_separability
from ..metrics.cka import pairwise_linear_cka
from ..metrics.kernel_probe import KERNELS, ProbeSplits, kernel_probe, probe_splits
from ..metrics.lda import Separability, heldout_auroc, noise_floor, ratio_interval, unbiased_separability
from ..metrics.prepare import prepare
from ..metrics.two_sample import RatioMoments, TwoSampleStat, centred_memo, mmd_two_sample, ratio_moments
from ..metrics.two_sample import ratio_interval as mmd_ratio_interval
from .config import AuditConfig
from .context import AuditContext, ForwardPasses
from .data import AuditData
from .probing import (
    ProbeScores,
    clear_of,
    finite,
    joined,
    look_confidence,
    looks,
    make_splits,
    masks,
    on_gpu,
    one_thread,
    paired_interval,
    probe_jobs,
    probe_processes,
    run_parallel,
    solver_for,
)

MIN_PROBE_PER_SIDE = 3  # a stratified 70/30 split needs >= 1 held-out row of each side


@dataclass
class Interval:
    """A point estimate with its ``confidence`` interval; ``se`` and ``df`` (where the interval is a
    t-interval: the corrected standard error and degrees of freedom) let the verdict form p-values.
    Ratios are stored on their own scale, their ``se`` on the log scale."""

    value: float
    low: float
    high: float
    se: float = math.nan
    df: int = 0
    draws: np.ndarray | None = field(default=None, repr=False, compare=False)  # bootstrap, log scale
    status: str = "ok"        # separability ratio: "ok", "separated", or why no ratio is defined
    moments: RatioMoments | None = field(default=None, repr=False, compare=False)  # MMD: Fieller's pivot

    def as_list(self) -> list:
        return [self.low, self.high]


@dataclass
class LayerResult:
    """Everything the audit measured at one layer on one audit data choice."""

    layer: str
    probed: bool                              # False when too few rows to fit a probe
    # --- the verdict's statistics (invariant) -------------------------------------------------
    auroc: float = math.nan                   # held-out discriminant AUROC (%) of the unlearned model
    auroc_retrained: float = math.nan         # mean over references
    auroc_original: float = math.nan
    delta_auroc: Interval | None = None       # unlearned − retrain, points
    delta_auroc_original: Interval | None = None  # original − retrain (positive control)
    mahalanobis: float = math.nan             # D², Mahalanobis separability of the unlearned model
    mahalanobis_retrained: float = math.nan   # mean over references
    mahalanobis_original: float = math.nan
    separability_ratio: Interval | None = None           # D²_u / D²_r, bootstrap interval
    separability_ratio_original: Interval | None = None  # D²_o / D²_r (positive control)
    # --- Mirage's numbers (reported, not read by the verdict) ---------------------------------
    lpr: float = math.nan                     # unlearned, balanced accuracy %, mean over splits
    lpr_auroc: float = math.nan               # the logistic probe's AUROC
    lpr_retrained: float = math.nan
    lpr_original: float = math.nan
    delta_lpr: Interval | None = None         # unlearned − retrain, percentage points
    delta_lpr_original: Interval | None = None
    separability: float = math.nan            # Mirage's trace-form Fisher F of the unlearned model
    separability_retrained: float = math.nan
    separability_original: float = math.nan
    cka_original: float = math.nan            # CKA(unlearned, original)
    cka_retrain: float = math.nan             # mean CKA(unlearned, reference)
    cka_retrain_original: float = math.nan    # mean CKA(reference, original), for scale
    cka_between_retrained: float | None = None  # mean CKA between references (k >= 2)
    # --- tolerances ---------------------------------------------------------------------------
    ref_spread_auroc: float | None = None     # max |ΔAUROC| of a reference vs the others (k >= 2)
    ref_spread_separability: float | None = None  # max |log F ratio| of a reference vs the others
    auroc_margin: float = math.nan            # the reported ΔAUROC's reference line (read by no rule)
    # --- the distribution-level comparison (K >= 2 references): MMD² on whitened features ---------
    mmd: float = math.nan                     # MMD²_u of forget vs retained rows, unlearned model
    mmd_original: float = math.nan
    mmd_refs: list = field(default_factory=list)
    mmd_ratio: Interval | None = None         # MMD²_u / mean over references, Fieller interval
    mmd_ratio_original: Interval | None = None
    mahalanobis_refs: list = field(default_factory=list)  # D² of each reference
    per_split: dict = field(default_factory=dict, repr=False)
    # --- what the verdict reads (per model role): log U and the kernel probes (audit.checks) -------------
    deciding: dict = field(default_factory=dict)
    # --- adaptive resplitting: the resplits behind ΔAUROC and ΔLPR, their intervals' confidence -----
    auroc_splits: int = 0
    lpr_splits: int = 0
    resplit_confidence: float = math.nan


STATS = ("auroc", "lpr")  # the resplit-based statistics: held-out LDA AUROC, Mirage's probe


@dataclass
class _Model:
    """One model's rows of the audit data at one layer, and its per-model numbers (cacheable: a cached
    model's resplit numbers grow when a later audit of the run needs more resplits than an earlier one)."""

    x: np.ndarray
    separability: float = math.nan
    scores: ProbeScores | None = None  # the probe on the first len(scores.bacc) resplits
    auroc: np.ndarray | None = None    # held-out LDA AUROC on the first len(auroc) resplits, percent
    sep: Separability | None = None    # the verdict's separability (U, its variance, leave-one-out values)
    mmd: TwoSampleStat | None = None   # MMD² of forget vs retained rows (computed with K >= 2 references)
    kfd: dict | None = None            # the kernel probes' held-out log d'² (metrics.kernel_probe), by kernel

    @property
    def d2(self) -> float:
        return math.nan if self.sep is None else self.sep.value

    def computed(self, stat: str) -> int:
        """How many resplits of ``stat`` ("auroc" or "lpr") are computed."""
        arr = self.auroc if stat == "auroc" else (None if self.scores is None else self.scores.bacc)
        return 0 if arr is None else arr.size

    def values(self, stat: str, j: int) -> np.ndarray:
        """``stat`` on the first ``j`` resplits (AUROC of the LDA discriminant, or the probe's balanced
        accuracy), percent."""
        return (self.auroc if stat == "auroc" else self.scores.bacc)[:j]

    def extend(self, stat: str, more) -> None:
        if stat == "auroc":
            self.auroc = more if self.auroc is None else np.concatenate([self.auroc, more])
        else:
            self.scores = more if self.scores is None else joined([self.scores, more])


def _per_model(m: _Model, y: np.ndarray, splits: ProbeSplits | None) -> None:
    """Mirage's F, and, from one feature preparation (:func:`unlearnkit.metrics.prepare.prepare`), the
    separability U on the whitened features with its variance and leave-one-out values
    (:func:`unlearnkit.metrics.lda.unbiased_separability`) and the kernel probes on the standardised ones
    (:func:`unlearnkit.metrics.kernel_probe.kernel_probe`, on ``splits``), of one model (a job of
    :func:`~unlearnkit.audit.probing.run_parallel`). The probes read standardised units: whitening amplifies the
    low-variance directions, and on digits (class 3, penultimate) the original's excess over retrains fell from
    28 to 13 of their standard deviations (RBF) and an adversary's kept share from 0.21 to 0.02."""
    m.separability = fisher_separability(m.x, y)
    prep = prepare(m.x)
    m.sep = unbiased_separability(prep.whitened(m.x), y, prepared=True)
    if splits is not None:  # in standardised units: the features' own geometry (whitening loses the probes power)
        z = prep.standardised(m.x)
        m.kfd = {k: kernel_probe(z, y, splits, kernel=k) for k in KERNELS}


def _mmd(m: _Model, y: np.ndarray) -> None:
    """The whitened-feature MMD² of one model (:func:`unlearnkit.metrics.two_sample.mmd_two_sample`; every
    model on the same rows: they depend only on the mask)."""
    m.mmd = mmd_two_sample(m.x, y)


def _models(data: AuditData, passes: ForwardPasses, ctx: AuditContext) -> tuple[dict[str, list[_Model]], list]:
    """Per layer, the :class:`_Model` of the unlearned model, the original and each reference (from the
    run's cache when an earlier audit made them), and the new ones, whose per-model numbers are missing."""
    roles = [("u", passes.out_u), ("o", passes.out_o)] + [("r", o) for o in passes.out_refs]
    models: dict[str, list[_Model]] = {}
    fresh: list[_Model] = []
    for layer in passes.layers:
        row = []
        for role, out in roles:
            key = ctx.cache_key(out, data.name, layer) if role != "u" else None
            if key is not None and ctx.cache.has(key):
                row.append(ctx.cache.get(key))
                continue
            m = _Model(data.features(out, layer))
            fresh.append(m)
            if key is not None:
                ctx.cache.put(key, m)
            row.append(m)
        models[layer] = row
    return models, fresh


def measure_data(data: AuditData, passes: ForwardPasses, ctx: AuditContext) -> list[LayerResult]:
    """Every audited layer's :class:`LayerResult` on one audit data choice.

    Per model and layer, the separability U with its leave-one-out values and Mirage's F are
    computed once, and the probe scores and the LDA discriminant's held-out AUROC on as many of the
    shared resplits as :func:`resplit` asks for; for the original and the references they come from the
    run's cache when an earlier audit computed them (:class:`AuditContext`). The work runs as parallel
    jobs (:func:`~unlearnkit.audit.probing.run_parallel`).
    """
    config = ctx.config
    y = data.is_forget
    probed = data.n_forget >= MIN_PROBE_PER_SIDE and data.n_retain >= MIN_PROBE_PER_SIDE
    models, fresh = _models(data, passes, ctx)
    # the kernel probes' splits and landmarks: rows drawn from the audit seed, the same for every model
    kfd_splits = (probe_splits(y, seed=ctx.audit_seed + (0 if data.name == "train" else 7919),
                               splits=config.kernel_probe_splits, landmarks=config.kernel_probe_landmarks)
                  if probed and min(data.n_forget, data.n_retain) >= 2 * MIN_PROBE_PER_SIDE else None)
    with one_thread():
        splits = make_splits(y, config) if probed else []
        stops = resplit(models, y, splits, config, ctx.device) if probed else {}
        run_parallel([partial(_per_model, m, y, kfd_splits) for m in fresh], config)
        if config.mmd and len(passes.out_refs) >= 2 and probed:  # reported, when asked for (AuditConfig.mmd)
            todo = {id(m): m for ms in models.values() for m in ms if m.mmd is None}
            run_parallel([partial(_mmd, m, y) for m in todo.values()], config)
        return run_parallel([partial(_layer_result, layer, data, models[layer], splits, stops.get(layer), config)
                             for layer in passes.layers], config)


def resplit(models: dict[str, list[_Model]], y: np.ndarray, splits, config: AuditConfig,
            device=None) -> dict[str, dict[str, int]]:
    """Adaptive resplitting: per layer, the number of resplits each statistic of :data:`STATS` stopped at.

    At each look of :func:`~unlearnkit.audit.probing.looks` (5 and 10 resplits by default; 5, 10, 20 with
    ``n_splits=20``), the statistics still open get the missing resplits of every model of their layer
    (``models[layer]``: unlearned, original, references, all on the same resplits ``splits``: the pairing holds); a
    statistic stops when :func:`_clear` (both of its paired intervals clear of the tolerance at the
    look's confidence) or at the last look. Why the reported interval keeps its coverage:
    :class:`~unlearnkit.audit.config.AuditConfig`, "Adaptive resplitting"."""
    rows = _Rows(y, splits, *masks(splits, y.size))
    todo = {(layer, stat) for layer in models for stat in STATS}
    stops: dict[str, dict[str, int]] = {layer: {} for layer in models}
    due = {id(m): m for ms in models.values() for m in ms if m.computed("lpr") < config.n_splits}
    xs = {k: finite(m.x) for k, m in due.items()}  # the probes' input, once per model and layer
    left = max((len(splits) - m.computed("lpr") for m in due.values()), default=0)
    with probe_processes(xs, left, config, device) as pool:
        for look in looks(config):
            need = {(id(m), stat): (m, stat) for layer, stat in todo for m in models[layer]
                    if m.computed(stat) < look}
            _extend(list(need.values()), look, rows, xs, config, device=device, pool=pool)
            for layer, stat in sorted(todo):
                if look == config.n_splits or _clear(models[layer], stat, look, splits, config):
                    stops[layer][stat] = look
            todo = {(layer, stat) for layer, stat in todo if stat not in stops[layer]}
            if not todo:
                break
    return stops


@dataclass
class _Rows:
    """The audit rows' labels (``y``: is forget), the resplits and their n x J train / test masks."""

    y: np.ndarray
    splits: list
    train: torch.Tensor
    test: torch.Tensor


def _extend(need: list[tuple[_Model, str]], look: int, rows: _Rows, xs: dict, config: AuditConfig, *, device,
            pool=None) -> None:
    """Compute resplits ``computed .. look`` of each (model, statistic) of ``need`` and append them: the
    held-out LDA AUROC as parallel jobs on threads and the CPU probes beside them in ``pool``'s
    processes (:func:`~unlearnkit.audit.probing.probe_processes`; without one, as thread jobs too),
    the batched probe on a GPU in turn. ``xs``: each model's probe input (:func:`~unlearnkit.audit.probing.finite`
    of its features), by ``id``."""
    y, splits, train, test = rows.y, rows.splits, rows.train, rows.test
    yt = torch.from_numpy(y)
    gpu = on_gpu(device) and solver_for(config, device) == "batched"
    jobs, owners, gpu_owners, futures = [], [], [], []
    for m, stat in need:
        lo = m.computed(stat)
        if stat == "auroc":
            jobs.append(partial(_heldout_auroc, m.x, yt, train[:, lo:look], test[:, lo:look]))
            owners.append((m, stat, 1))
            continue
        if pool is not None:  # one task per model and layer, its features already in the workers
            futures.append((m, pool.submit(id(m), y, splits[lo:look], lo, config)))
            continue
        more = probe_jobs(xs[id(m)], y, splits[lo:look], lo, config, device)
        if gpu:
            gpu_owners.append((m, joined([job() for job in more])))
        else:
            jobs.extend(more)
            owners.append((m, stat, len(more)))
    for m, scores in gpu_owners:
        m.extend("lpr", scores)
    res = iter(run_parallel(jobs, config))
    for m, stat, k in owners:
        m.extend(stat, next(res) if stat == "auroc" else joined([next(res) for _ in range(k)]))
    for m, fut in futures:
        m.extend("lpr", fut.result())


def _heldout_auroc(x: np.ndarray, y: torch.Tensor, train: torch.Tensor, test: torch.Tensor) -> np.ndarray:
    return 100.0 * heldout_auroc(torch.from_numpy(x), y, train, test).numpy()


def _ref_spread(arrs: list[np.ndarray]) -> float | None:
    """The largest |mean difference| of one reference's per-split numbers from the mean of the others'
    (None with one reference)."""
    k = len(arrs)
    if k < 2:
        return None
    return float(max(abs(np.mean(arrs[i] - np.mean([arrs[j] for j in range(k) if j != i], axis=0)))
                     for i in range(k)))


def _auroc_margin(config: AuditConfig, ref_spread: float | None) -> float:
    """The reported ΔAUROC's tolerance: ``auroc_margin``, widened to ``spread_factor`` x the references'
    spread with K >= 2."""
    return config.auroc_margin if ref_spread is None else max(config.auroc_margin,
                                                              config.spread_factor * ref_spread)


def _clear(ms: list[_Model], stat: str, look: int, splits, config: AuditConfig) -> bool:
    """Whether both paired intervals of ``stat`` at this layer (unlearned − retrain, original − retrain,
    on the first ``look`` resplits, at the look's confidence) are clear of the tolerance on either side
    (:func:`~unlearnkit.audit.probing.clear_of`): ``lpr_margin`` for ΔLPR, :func:`_auroc_margin` for
    ΔAUROC."""
    m_u, m_o, *m_refs = ms
    refs = [m.values(stat, look) for m in m_refs]
    margin = config.lpr_margin if stat == "lpr" else _auroc_margin(config, _ref_spread(refs))
    ref = np.mean(refs, axis=0)
    level = look_confidence(config)
    n = splits[0][0].size + splits[0][1].size
    for m in (m_u, m_o):
        _, lo, hi, _ = paired_interval(m.values(stat, look) - ref, splits, n, config, level)
        if not clear_of(lo, hi, margin):
            return False
    return True


def _interval(d: np.ndarray, splits, n: int, config: AuditConfig) -> Interval:
    mean, lo, hi, se = paired_interval(d, splits, n, config, look_confidence(config))
    return Interval(mean, lo, hi, se, d.size - 1)


def _ratio_interval(s_u: Separability, s_refs: list[Separability], y: np.ndarray,
                    config: AuditConfig) -> Interval:
    """U_u / mean U_refs with its ``confidence`` interval (:func:`unlearnkit.metrics.lda.ratio_interval`:
    the sampling noise of the audit data, every model measured on the same rows; seed-to-seed variation
    is the tolerance's job). ``se`` is on the log scale (normal, ``df`` = rows − 2); ``status`` says
    when no ratio is defined."""
    r = ratio_interval(s_u, s_refs, y, config.confidence)
    return Interval(r.value, r.low, r.high, r.se, max(y.size - 2, 1), None, r.status)


def _standardised(x: np.ndarray) -> np.ndarray:
    """The live units of ``x`` standardised by the one feature preparation (:mod:`unlearnkit.metrics.prepare`)."""
    return prepare(x, whiten=False).standardised(x).numpy()


def _cka_numbers(res: LayerResult, x_u, x_o, x_refs, n: int, config: AuditConfig) -> None:
    """CKA(unlearned, original), mean CKA(unlearned, reference), mean CKA(reference, original) and, with K >= 2,
    the mean CKA between references, on one subsample shared by every pair (Mirage: <= 5000 rows, the same
    for all pairs). ``center=True``: linear CKA on standardised units (each unit: mean 0, variance 1; a
    constant unit contributes nothing), so rescaling or permuting units leaves it unchanged;
    ``center=False``: Mirage's uncentered CKA on the raw features (reference-specs §2.5), which rescaling
    does move. Each model's matrix is standardised and its Gram norm computed once
    (:func:`~unlearnkit.metrics.cka.pairwise_linear_cka`)."""
    rows = cka_subsample_indices(n, config.cka_max_samples, config.cka_seed)
    xs = [x[rows] for x in (x_u, x_o, *x_refs)]
    if config.center:
        xs = [_standardised(x) for x in xs]
    k = len(x_refs)
    refs = range(2, 2 + k)
    between = [(i, j) for i in refs for j in refs if i < j]
    pairs = [(0, 1)] + [(0, r) for r in refs] + [(r, 1) for r in refs] + between
    vals = pairwise_linear_cka(xs, pairs, center=config.center)
    res.cka_original = vals[0]
    res.cka_retrain = float(np.mean(vals[1:1 + k]))
    res.cka_retrain_original = float(np.mean(vals[1 + k:1 + 2 * k]))
    if k > 1:
        res.cka_between_retrained = float(np.mean(vals[1 + 2 * k:]))


def _layer_result(layer: str, data: AuditData, ms: list[_Model], splits, stops: dict[str, int] | None,
                  config: AuditConfig) -> LayerResult:
    """One layer's numbers; ``stops`` (None: not probed) the resplits each statistic of :data:`STATS`
    stopped at (:func:`resplit`)."""
    m_u, m_o, *m_refs = ms
    y = data.is_forget
    n = y.size
    res = LayerResult(layer, probed=False)
    _cka_numbers(res, m_u.x, m_o.x, [m.x for m in m_refs], n, config)
    res.separability, res.separability_original = m_u.separability, m_o.separability
    res.separability_retrained = float(np.mean([m.separability for m in m_refs]))
    if stops is None:
        return res
    res.probed = True
    # the verdict's statistic: the ratio of U with its interval
    d_refs, s_refs = [m.d2 for m in m_refs], [m.sep for m in m_refs]
    res.mahalanobis, res.mahalanobis_original = m_u.d2, m_o.d2
    res.mahalanobis_retrained = float(np.mean(d_refs))
    res.mahalanobis_refs = [float(d) for d in d_refs]
    res.separability_ratio = _ratio_interval(m_u.sep, s_refs, y, config)
    res.separability_ratio_original = _ratio_interval(m_o.sep, s_refs, y, config)
    if len(m_refs) > 1 and all(d > 0 and math.isfinite(d) for d in d_refs):  # each reference vs the others
        k = len(m_refs)
        res.ref_spread_separability = float(max(abs(math.log(d_refs[i] / float(np.mean(
            [d_refs[j] for j in range(k) if j != i])))) for i in range(k)))
    if all(m.mmd is not None for m in ms):
        _mmd_numbers(res, m_u, m_o, m_refs, config)
    _resplit_numbers(res, ms, splits, stops, config)
    res.deciding = _deciding(m_u, m_o, m_refs)
    return res


def _log_u(s: Separability) -> tuple[float, bool]:
    """(log U at its noise floor or above, separated): U below the level it cannot be told from 0 at
    (:func:`unlearnkit.metrics.lda.noise_floor`) reads as that level; groups separated without overlap read
    +inf (and ``separated``); too few rows for the dimension, nan."""
    if s.status == "separated":
        return math.inf, True
    if s.status != "ok" or not math.isfinite(s.value):
        return math.nan, False
    floor = noise_floor(s)
    return math.log(max(s.value, floor)) if floor > 0 else math.nan, False


def _deciding(m_u: _Model, m_o: _Model, m_refs: list[_Model]) -> dict[str, dict]:
    """The representation's deciding values of one layer (:data:`DECIDING`), per model role."""
    out = {}
    logs = [_log_u(m.sep) for m in (m_u, m_o, *m_refs)]
    roles = ["unlearned", "original"] + ["reference"] * len(m_refs)
    out["separability"] = {"unlearned": logs[0][0], "original": logs[1][0], "references": [v for v, _ in logs[2:]],
                           "separated": sorted({r for r, (_, sep) in zip(roles, logs) if sep})}
    if all(m.kfd is not None for m in (m_u, m_o, *m_refs)):
        for k in KERNELS:
            out[f"kernel probe ({k})"] = {"unlearned": m_u.kfd[k], "original": m_o.kfd[k],
                                          "references": [m.kfd[k] for m in m_refs], "separated": []}
    return out


#: the representation's deciding statistics per layer, and the unit of their values
DECIDING = {"separability": "log U (Mahalanobis, unbiased)",
            **{f"kernel probe ({k})": "log held-out d'² (kernel Fisher discriminant)" for k in KERNELS}}


def representation_measures(results: dict[str, list[LayerResult]]):
    """Every probed layer's deciding values on every audit data as :class:`~unlearnkit.audit.checks.Measure` s
    (two-sided: a layer that separates the forget rows far less than retrains do is a deviation too)."""
    from .checks import Measure

    out = []
    for data, rs in results.items():
        for r in rs:
            for name, v in (r.deciding or {}).items():
                out.append(Measure("representation", name, data, r.layer, "two", DECIDING[name], v["unlearned"],
                                   v["original"], tuple(v["references"]), separated=tuple(v["separated"])))
    return out


def _mmd_interval(s: TwoSampleStat, refs: list[TwoSampleStat], config: AuditConfig, centred) -> Interval:
    """MMD²_s / mean MMD²_refs with Fieller's interval; ``moments`` carries what Fieller's pivot needs for
    p-values at any tolerance; ``status`` says when no ratio is defined (a saturated statistic, or
    references whose MMD² is not clearly above 0)."""
    r = mmd_ratio_interval(s, refs, config.confidence, centred)
    saturated = next((x.reason for x in (s, *refs) if x.saturated or not math.isfinite(x.value)), "")
    if saturated:
        return Interval(r.ratio, r.low, r.high, status=f"saturated ({saturated})")
    if math.isinf(r.low) and math.isinf(r.high):
        return Interval(r.ratio, r.low, r.high, status="reference_not_separated")
    return Interval(r.ratio, r.low, r.high, r.se_log, 0, None, "ok", ratio_moments(s, refs, centred))


def _mmd_numbers(res: LayerResult, m_u: _Model, m_o: _Model, m_refs: list[_Model], config: AuditConfig) -> None:
    refs = [m.mmd for m in m_refs]
    res.mmd, res.mmd_original = m_u.mmd.value, m_o.mmd.value
    res.mmd_refs = [float(s.value) for s in refs]
    centred = centred_memo()  # each statistic's centred kernel once for both intervals (freed on return)
    res.mmd_ratio = _mmd_interval(m_u.mmd, refs, config, centred)
    res.mmd_ratio_original = _mmd_interval(m_o.mmd, refs, config, centred)


def _resplit_numbers(res: LayerResult, ms: list[_Model], splits, stops: dict[str, int],
                     config: AuditConfig) -> None:
    """The reported resplit-based numbers of ``res``: the held-out LDA AUROC and ΔAUROC on the first
    ``stops["auroc"]`` resplits, Mirage's LPR and ΔLPR on the first ``stops["lpr"]``; the intervals at
    the looks' confidence (adaptive resplitting, module docstring)."""
    m_u, m_o, *m_refs = ms
    n = splits[0][0].size + splits[0][1].size
    j_a, j_l = stops["auroc"], stops["lpr"]
    res.auroc_splits, res.lpr_splits, res.resplit_confidence = j_a, j_l, look_confidence(config)
    a_u, a_o, a_refs = m_u.values("auroc", j_a), m_o.values("auroc", j_a), [m.values("auroc", j_a) for m in m_refs]
    a_r = np.mean(a_refs, axis=0)
    res.auroc, res.auroc_retrained, res.auroc_original = (float(a.mean()) for a in (a_u, a_r, a_o))
    res.delta_auroc = _interval(a_u - a_r, splits, n, config)
    res.delta_auroc_original = _interval(a_o - a_r, splits, n, config)
    res.ref_spread_auroc = _ref_spread(a_refs)
    # Mirage's probe, reported
    b_u, b_o = m_u.values("lpr", j_l), m_o.values("lpr", j_l)
    b_r = np.mean([m.values("lpr", j_l) for m in m_refs], axis=0)
    res.lpr, res.lpr_auroc = float(b_u.mean()), float(m_u.scores.auroc[:j_l].mean())
    res.lpr_retrained, res.lpr_original = float(b_r.mean()), float(b_o.mean())
    res.delta_lpr = _interval(b_u - b_r, splits, n, config)
    res.delta_lpr_original = _interval(b_o - b_r, splits, n, config)
    res.per_split = {"auroc_unlearned": a_u, "auroc_original": a_o, "auroc_retrained": a_r,
                     "lpr_unlearned": b_u, "lpr_original": b_o, "lpr_retrained": b_r}


def assign_margins(results: dict[str, list[LayerResult]], n_refs: int, config: AuditConfig) -> None:
    """Set each layer's reported ΔAUROC reference line: ``auroc_margin`` widened to ``spread_factor`` x the
    references' largest deviation with K >= 2 (reported, read by no rule)."""
    for rs in results.values():
        for r in rs:
            r.auroc_margin = _auroc_margin(config, r.ref_spread_auroc if n_refs > 1 else None)
