"""Mirage linear-probe recovery (LPR) and the paired ΔLPR with a confidence interval.

Reference: Mirage, ``YuZhenyuLindy/Mirage: mirage_lib.py::linear_probe_recovery`` and
``::sample_level_lpr`` (reference-specs.md §2.5). The probe asks: can a linear classifier on a
model's frozen features still tell forget-set samples from retained ones? ΔLPR = LPR(θ_u) −
LPR(θ_r) compares the unlearned model with the retrained-from-scratch one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._arrays import as_mask, features_2d

PROBES = ("linear", "mlp")
CI_METHODS = ("corrected_t", "t", "percentile")


@dataclass(frozen=True)
class ProbeResult:
    """One probe fit: balanced accuracy in percent (0–100), AUROC in [0, 1], class counts of the input."""

    balanced_accuracy: float
    auroc: float
    n_forget: int
    n_retain: int


@dataclass(frozen=True, eq=False)  # holds arrays: element-wise == would make equality ambiguous
class DeltaLPR:
    """Paired ΔLPR over repeated stratified splits (percentage points).

    ``delta`` = mean over splits of LPR_u − LPR_r; [``ci_low``, ``ci_high``] its ``confidence``
    interval by ``ci_method``; ``lpr_unlearned`` / ``lpr_retrained`` the per-model means;
    ``per_split_*`` the balanced accuracies (percent) of every split.
    """

    delta: float
    ci_low: float
    ci_high: float
    lpr_unlearned: float
    lpr_retrained: float
    per_split_unlearned: np.ndarray = field(repr=False)
    per_split_retrained: np.ndarray = field(repr=False)
    confidence: float = 0.95
    ci_method: str = "corrected_t"

    @property
    def per_split_delta(self) -> np.ndarray:
        return self.per_split_unlearned - self.per_split_retrained


def _prepare(features: Any, is_forget: Any, name: str = "features") -> tuple[np.ndarray, np.ndarray]:
    x = features_2d(features, name)
    y = as_mask(is_forget, x.shape[0], "is_forget").astype(np.int64)
    x = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)  # Mirage: NaN/Inf features → 0
    n_f = int(y.sum())
    if n_f < 2 or x.shape[0] - n_f < 2:
        raise ValueError(
            f"the probe needs at least 2 forget and 2 retained samples for a stratified split; "
            f"got {n_f} forget and {x.shape[0] - n_f} retained"
        )
    return x, y


def stratified_split(y: np.ndarray, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) row indices of a stratified split; the same permutation as Mirage's
    ``train_test_split(F, b, test_size, random_state=seed, stratify=b)`` (the index vector is split)."""
    from sklearn.model_selection import train_test_split  # lazy: keep `import unlearnkit.metrics` light

    return train_test_split(np.arange(y.shape[0]), test_size=test_size, random_state=seed, stratify=y)


def _fit_probe(x, y, train, test, *, probe, seed, C, max_iter) -> tuple[float, float]:
    """(balanced accuracy %, AUROC) of one probe fitted on the ``train`` rows, on the ``test`` rows
    (the protocol of :func:`linear_probe_recovery`)."""
    from sklearn.linear_model import LogisticRegression  # lazy: keep `import unlearnkit.metrics` light
    from sklearn.metrics import balanced_accuracy_score, roc_auc_score
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x[train])
    x_tr, x_te = scaler.transform(x[train]), scaler.transform(x[test])
    if probe == "linear":
        clf = LogisticRegression(C=C, max_iter=max_iter, solver="lbfgs", random_state=seed)
    else:
        clf = MLPClassifier(
            hidden_layer_sizes=(128,), max_iter=max_iter, early_stopping=True, random_state=seed
        )
    clf.fit(x_tr, y[train])
    bacc = 100.0 * balanced_accuracy_score(y[test], clf.predict(x_te))
    auroc = roc_auc_score(y[test], clf.predict_proba(x_te)[:, 1])
    return float(bacc), float(auroc)


def linear_probe_recovery(
    features: Any,
    is_forget: Any,
    *,
    seed: int = 42,
    test_size: float = 0.3,
    probe: str = "linear",
    C: float = 1.0,
    max_iter: int = 1000,
) -> ProbeResult:
    """Mirage LPR: a forget-vs-retain probe on frozen features; returns a ``ProbeResult``.

    Protocol of ``mirage_lib.py::linear_probe_recovery``: stratified ``train_test_split``
    (``test_size``, ``random_state=seed``), ``StandardScaler`` fit on the train part,
    ``LogisticRegression(C, max_iter, solver='lbfgs', random_state=seed)`` (``probe="linear"``)
    or ``MLPClassifier((128,), max_iter, early_stopping=True, random_state=seed)``
    (``probe="mlp"``); balanced accuracy × 100 on the held-out part (on the imbalanced split, as
    Mirage does: no subsampling) and AUROC of ``predict_proba``. NaN/Inf features become 0.
    Mirage always uses seed 42. Raises ValueError if either class has fewer than 2 samples.
    """
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    x, y = _prepare(features, is_forget)
    train, test = stratified_split(y, test_size, seed)
    bacc, auroc = _fit_probe(x, y, train, test, probe=probe, seed=seed, C=C, max_iter=max_iter)
    n_f = int(y.sum())
    return ProbeResult(balanced_accuracy=bacc, auroc=auroc, n_forget=n_f, n_retain=int(y.size - n_f))


def sample_level_subsample(is_forget: Any, max_per_side: int = 2500, seed: int = 42) -> np.ndarray:
    """Indices of Mirage's 1:1 sample-level probe set: n_per forget rows, then n_per retained.

    ``mirage_lib.py::sample_level_lpr``: n_per = min(max_per_side, n_forget, n_retain) (Mirage:
    ``max_samples // 2`` = 2500), drawn without replacement with ``np.random.RandomState(seed)``,
    forget first, so the same seed gives the same indices as the reference. Feed
    ``features[idx]`` and ``is_forget[idx]`` to ``linear_probe_recovery``.
    """
    mask = as_mask(is_forget, len(is_forget), "is_forget")
    forget_idx, retain_idx = np.flatnonzero(mask), np.flatnonzero(~mask)
    n_per = min(int(max_per_side), forget_idx.size, retain_idx.size)
    rng = np.random.RandomState(seed)
    f_sub = rng.choice(forget_idx, n_per, replace=False)
    r_sub = rng.choice(retain_idx, n_per, replace=False)
    return np.concatenate([f_sub, r_sub]).astype(np.int64)


def paired_se(d: np.ndarray, method: str, test_frac: float) -> float:
    """Standard error of the mean of per-split paired differences ``d``: Nadeau & Bengio's
    corrected sd(d) * sqrt(1/J + n_test/n_train) (``"corrected_t"``), the plain sd(d)/sqrt(J)
    (``"t"``); nan for ``"percentile"`` or fewer than 2 splits."""
    j = d.size
    if method == "percentile" or j < 2:
        return float("nan")
    var = np.var(d, ddof=1)
    if method == "corrected_t":  # Nadeau & Bengio (2003): overlapping resplits are correlated
        var *= 1.0 / j + test_frac / (1.0 - test_frac)
    else:
        var /= j
    return float(np.sqrt(var))


def paired_interval(d: np.ndarray, confidence: float, method: str, test_frac: float) -> tuple[float, float]:
    """(low, high) of the mean of per-split paired differences ``d`` (see ``paired_delta_lpr``)."""
    from scipy import stats  # lazy: keep `import unlearnkit.metrics` light

    if method == "percentile":
        alpha = 100.0 * (1.0 - confidence) / 2.0
        lo, hi = np.percentile(d, [alpha, 100.0 - alpha])
        return float(lo), float(hi)
    if d.size < 2:
        return float("nan"), float("nan")
    half = stats.t.ppf(0.5 + confidence / 2.0, df=d.size - 1) * paired_se(d, method, test_frac)
    return float(d.mean() - half), float(d.mean() + half)


def _check_paired_options(probe: str, ci_method: str, n_splits: int, confidence: float) -> None:
    """ValueError naming the first option of :func:`paired_delta_lpr` out of its range."""
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    if ci_method not in CI_METHODS:
        raise ValueError(f"ci_method must be one of {CI_METHODS}, got {ci_method!r}")
    if n_splits < 1 or not 0.0 < confidence < 1.0:
        raise ValueError("need n_splits >= 1 and 0 < confidence < 1")


def _split_accuracies(xs: tuple[np.ndarray, ...], y: np.ndarray, splits: list, seeds: list[int], *,
                      probe: str, C: float, max_iter: int, n_jobs: int | None) -> np.ndarray:
    """Balanced accuracy (percent) of the probe of every feature matrix of ``xs`` on every split,
    (n_splits x len(xs)); split i's probe is seeded with ``seeds[i]``. ``n_jobs`` joblib workers."""
    from joblib import Parallel, delayed  # lazy: keep `import unlearnkit.metrics` light

    jobs = [
        delayed(_fit_probe)(x, y, tr, te, probe=probe, seed=s, C=C, max_iter=max_iter)
        for (tr, te), s in zip(splits, seeds, strict=True)
        for x in xs
    ]
    results = Parallel(n_jobs=n_jobs)(jobs)
    return np.array([r[0] for r in results]).reshape(len(splits), len(xs))


def paired_delta_lpr(
    features_unlearned: Any,
    features_retrained: Any,
    is_forget: Any,
    *,
    n_splits: int = 20,
    seed: int = 42,
    confidence: float = 0.95,
    probe: str = "linear",
    test_size: float = 0.3,
    ci_method: str = "corrected_t",
    C: float = 1.0,
    max_iter: int = 1000,
    n_jobs: int | None = None,
) -> DeltaLPR:
    """ΔLPR = LPR(θ_u) − LPR(θ_r) with a CI of the DIFFERENCE; returns a ``DeltaLPR``.

    Mirage reports one split (seed 42). Here both models are probed on the SAME stratified
    70/30 splits with seeds ``seed … seed + n_splits − 1`` (split i also seeds probe i), so split 0
    equals ``linear_probe_recovery(…, seed=seed)`` and the split-to-split noise cancels in the
    paired differences d_i. ``ci_method``:

    * ``"corrected_t"`` (default): Nadeau & Bengio's corrected resampled t-interval, mean(d) ±
      t_{J−1} · sd(d) · sqrt(1/J + n_test/n_train). Resplits share data, so the plain t-interval
      is too narrow; this correction accounts for that.
    * ``"t"``: the plain t-interval mean(d) ± t_{J−1} · sd(d)/sqrt(J) (optimistic).
    * ``"percentile"``: the central ``confidence`` range of the d_i themselves — the spread of a
      single-split ΔLPR, not an interval for the mean.

    ``probe``, ``test_size``, ``C`` and ``max_iter`` are as in ``linear_probe_recovery``.
    Probe fits dominate the cost (2 · n_splits fits); ``n_jobs`` runs them in parallel (joblib).
    """
    _check_paired_options(probe, ci_method, n_splits, confidence)
    x_u, y = _prepare(features_unlearned, is_forget, "features_unlearned")
    x_r, _ = _prepare(features_retrained, is_forget, "features_retrained")
    seeds = [seed + i for i in range(n_splits)]
    splits = [stratified_split(y, test_size, s) for s in seeds]
    bacc = _split_accuracies((x_u, x_r), y, splits, seeds, probe=probe, C=C, max_iter=max_iter, n_jobs=n_jobs)
    lpr_u, lpr_r = bacc[:, 0], bacc[:, 1]
    d = lpr_u - lpr_r
    test_frac = splits[0][1].size / y.size
    lo, hi = paired_interval(d, confidence, ci_method, test_frac)
    return DeltaLPR(
        delta=float(d.mean()),
        ci_low=lo,
        ci_high=hi,
        lpr_unlearned=float(lpr_u.mean()),
        lpr_retrained=float(lpr_r.mean()),
        per_split_unlearned=lpr_u,
        per_split_retrained=lpr_r,
        confidence=confidence,
        ci_method=ci_method,
    )
