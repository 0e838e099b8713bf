"""The audit's numbers for one layer on one audit data choice, each model's probe fitted once.

``metrics.paired_delta_lpr`` fits both models on the same resplits; with several models (the
unlearned one, the original, k retrained references) fitting each pair would repeat work, so here
every model is probed once per split and the paired differences are formed afterwards. Split i
uses seed ``probe_seed + i`` for both the split and the probe, exactly as ``paired_delta_lpr``
does (a unit test checks the two agree), so split 0 is Mirage's single seed-42 split.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..metrics import fisher_separability, linear_cka
from ..metrics.probes import _interval, _split
from .config import AuditConfig


@dataclass
class ProbeScores:
    """Balanced accuracy (percent) and AUROC of one model's probe on each of the J splits."""

    bacc: np.ndarray
    auroc: np.ndarray


def make_splits(is_forget: np.ndarray, config: AuditConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    y = is_forget.astype(np.int64)
    return [_split(y, config.test_size, config.probe_seed + i) for i in range(config.n_splits)]


def _fit_probe(x: np.ndarray, y: np.ndarray, train: np.ndarray, test: np.ndarray, seed: int, C: float,
               max_iter: int) -> tuple[float, float]:
    """``metrics.probes._fit_probe`` (linear) with the scaling and the two scores in numpy.

    Same StandardScaler (ddof 0, zero variance -> scale 1), the same LogisticRegression, balanced
    accuracy = mean per-class recall of ``decision > 0`` (= ``predict``), AUROC = Mann-Whitney U
    of the decision values with average ranks for ties (= ``roc_auc_score`` of ``predict_proba``,
    a monotone transform). sklearn's input validation in the two metric calls cost as much as the
    fit itself on audit-sized data; a unit test checks the results against ``paired_delta_lpr``.
    """
    from scipy.stats import rankdata
    from sklearn.linear_model import LogisticRegression

    x_tr, x_te = x[train], x[test]
    mean = x_tr.mean(axis=0)
    scale = x_tr.std(axis=0)
    scale[scale < 10 * np.finfo(np.float64).eps] = 1.0
    x_tr, x_te = (x_tr - mean) / scale, (x_te - mean) / scale
    clf = LogisticRegression(C=C, max_iter=max_iter, solver="lbfgs", random_state=seed).fit(x_tr, y[train])
    score = x_te @ clf.coef_[0] + clf.intercept_[0]
    y_te = y[test].astype(bool)
    pred = score > 0
    bacc = 100.0 * 0.5 * (np.mean(pred[y_te]) + np.mean(~pred[~y_te]))
    ranks = rankdata(score)
    n_p, n_n = int(y_te.sum()), int((~y_te).sum())
    auroc = (ranks[y_te].sum() - n_p * (n_p + 1) / 2.0) / (n_p * n_n)
    return float(bacc), float(auroc)


def probe_scores(xs: list[np.ndarray], is_forget: np.ndarray, splits, config: AuditConfig) -> list[ProbeScores]:
    """Fit the Mirage probe (StandardScaler + LogisticRegression) on every split, for each of ``xs``.

    All fits of a layer go to one joblib call when ``config.n_jobs`` asks for parallel workers.
    """
    from threadpoolctl import threadpool_limits

    y = is_forget.astype(np.int64)
    xs = [np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) for x in xs]
    args = [(x, y, tr, te, config.probe_seed + i, config.probe_C, config.probe_max_iter)
            for x in xs for i, (tr, te) in enumerate(splits)]
    # one BLAS thread per fit: small lbfgs fits are ~10x slower when BLAS threads fight for cores
    with threadpool_limits(1):
        if config.n_jobs in (None, 1):
            res = [_fit_probe(*a) for a in args]
        else:
            from joblib import Parallel, delayed

            res = Parallel(n_jobs=config.n_jobs)(delayed(_fit_probe)(*a) for a in args)
    j = len(splits)
    return [ProbeScores(np.array([r[0] for r in res[k * j:(k + 1) * j]]),
                        np.array([r[1] for r in res[k * j:(k + 1) * j]])) for k in range(len(xs))]


def paired_interval(d: np.ndarray, splits, n: int, config: AuditConfig) -> tuple[float, float, float]:
    """(mean, low, high) of per-split paired differences, by ``config.ci_method``."""
    test_frac = splits[0][1].size / n
    lo, hi = _interval(np.asarray(d, dtype=np.float64), config.confidence, config.ci_method, test_frac)
    return float(np.mean(d)), lo, hi


def separability_ratio(x_u: np.ndarray, x_refs: list[np.ndarray], is_forget: np.ndarray,
                       config: AuditConfig) -> tuple[float, float, float]:
    """F(unlearned) / mean F(retrained), with a paired stratified bootstrap percentile interval.

    The same resampled rows are used for every model, so the interval reflects the sampling noise
    of the audit data, not the seed-to-seed variation of retraining (that is the margin's job).
    The bootstrap is vectorised: resampling counts W (B x n) give every draw's means and
    variances as W @ X and W @ X^2.
    """
    f_u = fisher_separability(x_u, is_forget)
    f_r = float(np.mean([fisher_separability(x, is_forget) for x in x_refs]))
    ratio = f_u / f_r if f_r > 0 else float("inf")
    fi, ri = np.flatnonzero(is_forget), np.flatnonzero(~is_forget)
    if fi.size < 2 or ri.size < 2:
        return ratio, float("nan"), float("nan")
    rng = np.random.RandomState(config.probe_seed)
    b = config.n_bootstrap
    w_f = rng.multinomial(fi.size, np.full(fi.size, 1.0 / fi.size), size=b).astype(np.float64)
    w_r = rng.multinomial(ri.size, np.full(ri.size, 1.0 / ri.size), size=b).astype(np.float64)
    f_boot_u = _boot_f(x_u, fi, ri, w_f, w_r)
    f_boot_r = np.mean([_boot_f(x, fi, ri, w_f, w_r) for x in x_refs], axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = np.where(f_boot_r > 0, f_boot_u / f_boot_r, np.inf)
    alpha = 100.0 * (1.0 - config.confidence) / 2.0
    lo, hi = np.percentile(draws, [alpha, 100.0 - alpha])
    return float(ratio), float(lo), float(hi)


def _weighted_moments(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-draw means (B x d) and summed ddof=1 variances (B,) of rows x weighted by counts w."""
    n = x.shape[0]
    mean = w @ x / n
    sq = w @ (x * x) / n
    var_sum = np.maximum(sq - mean * mean, 0.0).sum(axis=1) * n / (n - 1)
    return mean, var_sum


def _boot_f(x: np.ndarray, fi: np.ndarray, ri: np.ndarray, w_f: np.ndarray, w_r: np.ndarray) -> np.ndarray:
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)
    m_f, v_f = _weighted_moments(x[fi], w_f)
    m_r, v_r = _weighted_moments(x[ri], w_r)
    diff = m_f - m_r
    return np.einsum("bd,bd->b", diff, diff) / (v_f + v_r + 1e-10)


def cka_pair(x: np.ndarray, y: np.ndarray, rows: np.ndarray, center: bool) -> float:
    return linear_cka(x[rows], y[rows], center=center)
