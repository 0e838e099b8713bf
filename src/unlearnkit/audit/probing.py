"""The audit's probes for one layer, each model measured once.

``metrics.paired_delta_lpr`` fits both models on the same resplits; with several models (the
unlearned one, the original, k retrained references) fitting each pair would repeat work, so here
every model is probed once per split and the paired differences are formed afterwards. Split i
uses seed ``probe_seed + i`` for the split (and the sklearn probe), exactly as ``paired_delta_lpr``
does, so split 0 is Mirage's single seed-42 split.

Solvers (``AuditConfig.probe_solver``; ``"auto"``: scipy on the CPU, batched on a GPU):
``"sklearn"`` fits the resplits one by one with ``LogisticRegression(lbfgs)`` (the reference code
path); ``"scipy"`` makes the very scipy L-BFGS-B call that ``LogisticRegression`` makes, on the same
objective from the same start with the same options (:func:`_lbfgs`), without scikit-learn's per-call
checks and conversions, which cost more than the optimisation on these small problems;
``"batched"`` fits all J resplits of one model and layer together
(:func:`unlearnkit.metrics.logistic.fit_logistic_resplits`: the same StandardScaler + L2 logistic
objective, the same stopping tolerance 1e-4, unique optimum), on the features' device. A unit test
checks that batched and sklearn agree.

On the CPU every piece of work (one probe fit, one model's held-out AUROC or bootstrap) is a job of
:func:`run_parallel`: ``n_workers`` threads, torch and BLAS on one thread each.
"""
from __future__ import annotations

import math
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

import numpy as np
import torch
from scipy import optimize
from scipy.special import expit
from scipy.stats import rankdata
from threadpoolctl import threadpool_limits

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


def _logistic_loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray, l2: float) -> tuple[float, np.ndarray]:
    """scikit-learn's binary logistic objective and its gradient, as ``LogisticRegression(lbfgs)`` hands
    them to scipy (``LinearModelLoss`` with ``HalfBinomialLoss``): the mean over the rows of
    log(1 + exp(z)) − y z, z = x · w + b, plus ``l2`` / 2 ||w||² (``l2`` = 1 / (C n); b not penalised)."""
    w, b = theta[:-1], theta[-1]
    z = x @ w + b
    n = x.shape[0]
    residual = (expit(z) - y) / n
    grad = np.empty_like(theta)
    grad[:-1] = x.T @ residual + l2 * w
    grad[-1] = residual.sum()
    return float(np.logaddexp(0.0, z).sum() / n - (y @ z) / n + 0.5 * l2 * (w @ w)), grad


def _lbfgs(x: np.ndarray, y: np.ndarray, C: float, tol: float, max_iter: int) -> tuple[np.ndarray, float]:
    """(coef, intercept) of the L2 logistic regression of ``y`` on ``x``: the very scipy L-BFGS-B call of
    ``LogisticRegression(solver="lbfgs", C, tol, max_iter)`` (zero start, ``maxls`` 50, ``gtol`` = ``tol``,
    ``ftol`` = 64 eps) on the same objective, without scikit-learn's per-call checks."""
    theta = optimize.minimize(
        _logistic_loss, np.zeros(x.shape[1] + 1), method="L-BFGS-B", jac=True,
        args=(x, y.astype(np.float64), 1.0 / (C * x.shape[0])),
        options={"maxiter": max_iter, "maxls": 50, "gtol": tol, "ftol": 64 * np.finfo(float).eps}).x
    return theta[:-1], float(theta[-1])


def _fit_probe(x: np.ndarray, y: np.ndarray, split: tuple[np.ndarray, np.ndarray], seed: int,
               config: AuditConfig, solver: str = "sklearn") -> tuple[float, float]:
    """One probe on one ``(train, test)`` split: StandardScaler (ddof 0, zero variance -> 1) +
    LogisticRegression(lbfgs, ``probe_C``, ``probe_max_iter``, ``random_state=seed``) (``solver``
    "sklearn"; "scipy": the same L-BFGS-B call, :func:`_lbfgs`); balanced accuracy of ``predict`` and
    the Mann-Whitney AUROC of the decision values."""
    train, test = split
    C, max_iter = config.probe_C, config.probe_max_iter
    x_tr, x_te = x[train], x[test]
    mean = x_tr.mean(axis=0)
    scale = x_tr.std(axis=0)
    scale[scale < 10 * np.finfo(np.float64).eps] = 1.0
    x_tr, x_te = (x_tr - mean) / scale, (x_te - mean) / scale
    if solver == "scipy":
        coef, intercept = _lbfgs(x_tr, y[train], C, config.probe_tol, max_iter)
    else:
        from sklearn.linear_model import LogisticRegression  # lazy: only the sklearn solver needs it (heavy)

        clf = LogisticRegression(C=C, max_iter=max_iter, solver="lbfgs", random_state=seed).fit(x_tr, y[train])
        coef, intercept = clf.coef_[0], clf.intercept_[0]
    score = x_te @ coef + intercept
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
    return "batched" if on_gpu(device) else "scipy"


def on_gpu(device) -> bool:
    return device is not None and torch.device(device).type == "cuda"


@contextmanager
def one_thread():
    """Torch and BLAS on one thread inside (restored after): the audit's small matrix work runs as parallel
    jobs instead (:func:`run_parallel`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(threads)


def run_parallel(jobs: list[Callable[[], Any]], config: AuditConfig) -> list:
    """``[job() for job in jobs]`` on ``n_workers(config)`` threads, torch and BLAS single-threaded
    inside each (:func:`one_thread`: small fits and eigendecompositions are several times slower when
    their threads fight for cores, and dozens of times slower when another process holds one of
    them). The results do not depend on the number of workers."""
    if not jobs:
        return []
    workers = min(n_workers(config), len(jobs))
    with one_thread():
        if workers == 1:
            return [job() for job in jobs]
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda job: job(), jobs))


#: the feature matrices of the running :func:`probe_processes` pool, by key: set before its workers
#: fork, so they read their own copy instead of receiving each matrix through a pipe
_FORKED_X: dict = {}


def _probe_worker() -> None:
    """A probe process: torch and BLAS on one thread (as :func:`one_thread`), killed with its parent."""
    from ..runtime import die_with_parent

    die_with_parent()
    torch.set_num_threads(1)
    threadpool_limits(1)


def _probe_forked(key, is_forget: np.ndarray, splits, first: int, config: AuditConfig) -> ProbeScores:
    return probe_range(_FORKED_X[key], is_forget, splits, first, config)


class ProbeProcesses:
    """Forked workers that fit the CPU probes of the feature matrices they were forked with."""

    def __init__(self, pool: ProcessPoolExecutor) -> None:
        self._pool = pool

    def submit(self, key, is_forget: np.ndarray, splits, first: int, config: AuditConfig):
        """A future of :func:`probe_range` on the matrix ``xs[key]`` of :func:`probe_processes`."""
        return self._pool.submit(_probe_forked, key, is_forget, splits, first, config)


#: the least probe work (feature values x resplits still to fit) worth forking workers for: about
#: 0.4 s of fits on this 2-core machine (~20 ns per value and resplit) against ~0.1 s to fork and
#: start two workers from a process holding a gigabyte
PROCESS_MIN_WORK = 20_000_000


@contextmanager
def probe_processes(xs: dict, splits_left: int, config: AuditConfig, device=None):
    """:class:`ProbeProcesses` of ``n_workers(config)`` processes forked with the feature matrices ``xs``
    (finite), or None (then the probes run on threads): with ``probe_processes`` off or one worker,
    when the fits left (each matrix's values x ``splits_left``) are under :data:`PROCESS_MIN_WORK`,
    on a GPU's batched solver, or where a process cannot be forked safely
    (:func:`unlearnkit.runtime.fork_is_safe`).

    Why processes: a probe fit is scipy's L-BFGS-B driving a numpy objective on a few thousand rows,
    mostly Python that holds the GIL, so two threads fitted the audit's probes no faster than one
    (the layer stage of the mnist5k audit: 3.08 s on one worker, 3.09 s on two); two forked processes
    fit its 435 probes in 1.2 s instead of 1.9 s. The workers fork here, with ``xs`` in their memory
    (nothing large crosses a pipe), and are shut down when the block ends. A fit is the same function
    on the same numbers, on one BLAS thread either way: the scores are identical to the threads'.
    """
    from ..runtime import fork_is_safe

    workers = n_workers(config)
    work = splits_left * sum(x.size for x in xs.values())
    if (not config.probe_processes or work < PROCESS_MIN_WORK or workers < 2
            or solver_for(config, device) not in ("sklearn", "scipy") or not fork_is_safe()):
        yield None
        return
    global _FORKED_X
    before, _FORKED_X = _FORKED_X, xs
    pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_probe_worker)
    try:
        pool.submit(os.getpid).result()  # every worker forks now, with these matrices
    finally:
        _FORKED_X = before  # the workers have their copy; a pool forked later gets its own
    try:
        yield ProbeProcesses(pool)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def probe_range(x: np.ndarray, is_forget: np.ndarray, splits, first: int, config: AuditConfig,
                device=None) -> ProbeScores:
    """The Mirage probe of one feature matrix (finite: see :func:`probe_scores`) on ``splits``, which are
    resplits ``first``, ``first + 1``, ... of the audit (split i's sklearn probe is seeded
    ``probe_seed + i``), with the solver of :func:`solver_for`, on one thread unless on a GPU."""
    solver = solver_for(config, device)
    if solver in ("sklearn", "scipy"):
        y = is_forget.astype(np.int64)
        res = [_fit_probe(x, y, split, config.probe_seed + first + i, config, solver)
               for i, split in enumerate(splits)]
        return ProbeScores(np.array([r[0] for r in res]), np.array([r[1] for r in res]))
    dev = device if on_gpu(device) else None
    y = torch.from_numpy(is_forget.astype(np.int64)).to(dev)
    train, test = (m.to(dev) for m in masks(splits, is_forget.size))
    return _batched(torch.from_numpy(x).to(dev), y, train, test, config)


def probe_jobs(x: np.ndarray, is_forget: np.ndarray, splits, first: int, config: AuditConfig,
               device=None) -> list[Callable[[], ProbeScores]]:
    """:func:`probe_range` of ``splits`` as jobs for :func:`run_parallel`, whose results concatenate to
    it: one per split with sklearn (so that a few models still keep every worker busy), one for all of
    them with the batched solver."""
    if solver_for(config, device) in ("sklearn", "scipy"):
        return [partial(probe_range, x, is_forget, [split], first + i, config) for i, split in enumerate(splits)]
    return [partial(probe_range, x, is_forget, splits, first, config, device)]


def joined(scores: list[ProbeScores]) -> ProbeScores:
    """The scores of consecutive runs of resplits, as one."""
    return ProbeScores(np.concatenate([s.bacc for s in scores]), np.concatenate([s.auroc for s in scores]))


def finite(x: np.ndarray) -> np.ndarray:
    """``x`` with NaN and +-inf set to 0, as Mirage's probe input; ``x`` itself when it is finite (no copy)."""
    return x if np.isfinite(x).all() else np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def probe_scores(xs: list[np.ndarray], is_forget: np.ndarray, splits, config: AuditConfig,
                 device=None) -> list[ProbeScores]:
    """The Mirage probe on every split, for each feature matrix of ``xs`` (NaN/inf -> 0, as Mirage).

    Independent fits run on ``n_workers(config)`` threads (:func:`run_parallel`); on a GPU the batched
    solver runs them one model after the other. The numbers do not depend on the number of workers.
    """
    xs = [finite(x) for x in xs]
    per_model = [probe_jobs(x, is_forget, splits, 0, config, device) for x in xs]
    if on_gpu(device) and solver_for(config, device) == "batched":
        return [joined([job() for job in jobs]) for jobs in per_model]
    res = iter(run_parallel([job for jobs in per_model for job in jobs], config))
    return [joined([next(res) for _ in jobs]) for jobs in per_model]


def looks(config: AuditConfig) -> tuple[int, ...]:
    """The numbers of resplits at which a layer's reported intervals may stop (adaptive resplitting,
    :class:`AuditConfig`): the ``resplit_looks`` below ``n_splits``, then ``n_splits`` (the maximum)."""
    return tuple(k for k in config.resplit_looks if k < config.n_splits) + (config.n_splits,)


def look_confidence(config: AuditConfig) -> float:
    """The confidence of every look's interval, 1 − (1 − ``confidence``) / L over the L :func:`looks`
    (Bonferroni: all L intervals cover together with probability >= ``confidence``, so the one of the
    look a statistic stops at does, however the stopping look was chosen)."""
    return 1.0 - (1.0 - config.confidence) / len(looks(config))


def clear_of(low: float, high: float, margin: float) -> bool:
    """The interval [low, high] is clear of the tolerance ±``margin`` on either side: wholly inside
    (−margin, margin), or wholly beyond +margin or −margin. False when an end is not finite."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return False
    return high < -margin or low > margin or (low > -margin and high < margin)


def paired_interval(d: np.ndarray, splits, n: int, config: AuditConfig,
                    confidence: float | None = None) -> tuple[float, float, float, float]:
    """(mean, low, high, se) of per-split paired differences, by ``config.ci_method`` at ``confidence``
    (default ``config.confidence``); ``se`` is the (corrected) standard error of the mean that the
    t-interval uses (nan for ``"percentile"``)."""
    test_frac = splits[0][1].size / n
    d = np.asarray(d, dtype=np.float64)
    level = config.confidence if confidence is None else confidence
    lo, hi = _paired_interval(d, level, config.ci_method, test_frac)
    return float(np.mean(d)), lo, hi, paired_se(d, config.ci_method, test_frac)
