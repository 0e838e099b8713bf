"""The audit's probes for one layer, each model measured once.

``metrics.paired_delta_lpr`` fits both models on the same resplits; with several models (the
unlearned one, the original, k retrained references) fitting each pair would repeat work, so here
every model is probed once per split and the paired differences are formed afterwards. Split i
uses seed ``probe_seed + i`` for the split (and the sklearn probe), exactly as ``paired_delta_lpr``
does, so split 0 is Mirage's single seed-42 split.

Solvers (``AuditConfig.probe_solver``): ``"batched"`` (default) fits all J resplits of one model
and layer together (:func:`unlearnkit.metrics.logistic.fit_logistic_resplits`: the same
StandardScaler + L2 logistic objective as sklearn, the same stopping tolerance 1e-4, unique
optimum), on the features' device; ``"sklearn"`` fits them one by one with
``LogisticRegression(lbfgs)`` (the reference code path). A unit test checks the two agree.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

from ..metrics.lda import within_whitening
from ..metrics.logistic import balanced_accuracy_auroc, fit_logistic_resplits
from ..metrics.probes import paired_interval as _paired_interval
from ..metrics.probes import paired_se, stratified_split
from .config import AuditConfig


@dataclass
class ProbeScores:
    """Balanced accuracy (percent) and AUROC of one model's probe on each of the J splits."""

    bacc: np.ndarray
    auroc: np.ndarray


def make_splits(is_forget: np.ndarray, config: AuditConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    y = is_forget.astype(np.int64)
    return [stratified_split(y, config.test_size, config.probe_seed + i) for i in range(config.n_splits)]


def masks(splits, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    train = torch.zeros(n, len(splits), dtype=torch.bool)
    for j, (tr, _) in enumerate(splits):
        train[torch.from_numpy(tr), j] = True
    test = torch.zeros_like(train)
    for j, (_, te) in enumerate(splits):
        test[torch.from_numpy(te), j] = True
    return train, test


def _fit_probe(x: np.ndarray, y: np.ndarray, split: tuple[np.ndarray, np.ndarray], seed: int,
               config: AuditConfig) -> tuple[float, float]:
    """One sklearn probe on one ``(train, test)`` split: StandardScaler (ddof 0, zero variance -> 1) +
    LogisticRegression(lbfgs, ``probe_C``, ``probe_max_iter``, ``random_state=seed``); balanced accuracy
    of ``predict`` and the Mann-Whitney AUROC of the decision values."""
    from sklearn.linear_model import LogisticRegression  # lazy: only the sklearn solver needs it (heavy)

    train, test = split
    C, max_iter = config.probe_C, config.probe_max_iter
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


def _batched(x: np.ndarray | torch.Tensor, y: torch.Tensor, train: torch.Tensor, test: torch.Tensor,
             config: AuditConfig) -> ProbeScores:
    xt = torch.as_tensor(x)
    fits = fit_logistic_resplits(xt, y, train, C=config.probe_C, tol=config.probe_tol,
                                 max_iter=config.probe_max_iter)
    bacc, auroc = balanced_accuracy_auroc(fits.decision, y, test)
    return ProbeScores(bacc.cpu().numpy(), auroc.cpu().numpy())


def n_workers(config: AuditConfig) -> int:
    """Parallel probe workers: ``n_jobs``, or (None) the CPU count capped at 4."""
    if config.n_jobs is not None:
        return max(1, config.n_jobs if config.n_jobs > 0 else os.cpu_count() or 1)
    return max(1, min(4, os.cpu_count() or 1))


def solver_for(config: AuditConfig, device=None) -> str:
    if config.probe_solver != "auto":
        return config.probe_solver
    return "batched" if device is not None and torch.device(device).type == "cuda" else "sklearn"


def probe_scores(xs: list[np.ndarray], is_forget: np.ndarray, splits, config: AuditConfig,
                 device=None) -> list[ProbeScores]:
    """The Mirage probe on every split, for each feature matrix of ``xs`` (NaN/inf -> 0, as Mirage).

    Independent fits run on ``n_workers(config)`` threads (torch and BLAS single-threaded inside:
    small fits are several times slower when their threads fight for cores). The numbers do not
    depend on the number of workers.
    """
    xs = [np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0) for x in xs]
    solver = solver_for(config, device)
    if solver == "batched" and device is not None and torch.device(device).type == "cuda":
        y = torch.from_numpy(is_forget.astype(np.int64)).to(device)
        train, test = (m.to(device) for m in masks(splits, is_forget.size))
        return [_batched(torch.from_numpy(x).to(device), y, train, test, config) for x in xs]
    workers = min(n_workers(config), max(1, len(xs) * (len(splits) if solver == "sklearn" else 1)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1), ThreadPoolExecutor(workers) as pool:
            if solver == "sklearn":
                y = is_forget.astype(np.int64)
                args = [(x, y, split, config.probe_seed + i, config)
                        for x in xs for i, split in enumerate(splits)]
                res = list(pool.map(lambda a: _fit_probe(*a), args))
                j = len(splits)
                return [ProbeScores(np.array([r[0] for r in res[k * j:(k + 1) * j]]),
                                    np.array([r[1] for r in res[k * j:(k + 1) * j]])) for k in range(len(xs))]
            y = torch.from_numpy(is_forget.astype(np.int64))
            train, test = masks(splits, is_forget.size)
            return list(pool.map(lambda x: _batched(x, y, train, test, config), xs))
    finally:
        torch.set_num_threads(threads)


def paired_interval(d: np.ndarray, splits, n: int, config: AuditConfig) -> tuple[float, float, float, float]:
    """(mean, low, high, se) of per-split paired differences, by ``config.ci_method``; ``se`` is the
    (corrected) standard error of the mean that the t-interval uses (nan for ``"percentile"``)."""
    test_frac = splits[0][1].size / n
    d = np.asarray(d, dtype=np.float64)
    lo, hi = _paired_interval(d, config.confidence, config.ci_method, test_frac)
    return float(np.mean(d)), lo, hi, paired_se(d, config.ci_method, test_frac)


@dataclass
class Bootstrap:
    """Stratified resampling counts shared by every model: W_f (B x n_f) over the forget rows,
    W_r (B x n_r) over the retained rows (the same draws for every model: paired)."""

    forget_rows: np.ndarray
    retain_rows: np.ndarray
    w_f: np.ndarray
    w_r: np.ndarray


def bootstrap_weights(is_forget: np.ndarray, config: AuditConfig) -> Bootstrap | None:
    """``config.n_bootstrap`` paired stratified draws (seed ``probe_seed``); None with < 2 rows a side."""
    fi, ri = np.flatnonzero(is_forget), np.flatnonzero(~is_forget)
    if fi.size < 2 or ri.size < 2:
        return None
    rng = np.random.RandomState(config.probe_seed)
    b = config.n_bootstrap
    w_f = rng.multinomial(fi.size, np.full(fi.size, 1.0 / fi.size), size=b).astype(np.float64)
    w_r = rng.multinomial(ri.size, np.full(ri.size, 1.0 / ri.size), size=b).astype(np.float64)
    return Bootstrap(fi, ri, w_f, w_r)


def mahalanobis_draws(x: np.ndarray, is_forget: np.ndarray, boot: Bootstrap | None,
                      config: AuditConfig) -> tuple[float, np.ndarray | None]:
    """(D², draws): :func:`unlearnkit.metrics.lda.mahalanobis_separability` of the audit rows and of
    every bootstrap draw (B,). The whitening is estimated once from all rows and held fixed across
    draws (a conditional bootstrap: the group means are resampled, the metric is not); per draw the
    means come from one matrix product W @ Z."""
    xt = torch.nan_to_num(torch.from_numpy(np.ascontiguousarray(x)).to(torch.float64), nan=0.0, posinf=0.0,
                          neginf=0.0)
    y = torch.from_numpy(is_forget)
    if int(y.sum()) < 2 or int((~y).sum()) < 2:
        return float("nan"), None
    z = (xt @ within_whitening(xt, y, config.separability_ridge)).numpy()
    d = z[is_forget].mean(0) - z[~is_forget].mean(0)
    full = float(d @ d)
    if boot is None:
        return full, None
    m_f = boot.w_f @ z[boot.forget_rows] / boot.forget_rows.size
    m_r = boot.w_r @ z[boot.retain_rows] / boot.retain_rows.size
    diff = m_f - m_r
    return full, np.einsum("bd,bd->b", diff, diff)
