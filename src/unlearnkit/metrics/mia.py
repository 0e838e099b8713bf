"""Membership-inference metrics on model outputs (reference-specs.md §2.2–§2.4).

Three attacks, as the reference papers report them:

* ``svc_mia_efficacy``: SalUn's "MIA-efficacy" (percent of D_f predicted NON-member, ↑ = more
  forgotten; retrain ≈ 100 for class-wise forgetting).
* ``entropy_mia``: SCRUB / SSD / bad-teacher logistic attack on the entropy (percent of D_f
  predicted member, ↓ = more forgotten).
* ``mia_auroc``: PURGE's threshold-free AUROC, forget-class train vs forget-class test
  (0.5 = indistinguishable, < 0.5 = over-erasure).

All functions take already computed softmax probabilities or logits (numpy or torch); the
caller picks the shadow / target sets and evaluates the model in ``eval()`` mode with the test
transform (§6 pitfall 3).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import log_softmax

from ._arrays import as_float64, as_labels

MIA_FEATURES = ("confidence", "entropy", "m_entropy", "correctness", "prob")
_LOG_FLOOR = 1e-30  # the clamp used by Song & Mittal and SalUn before taking a log


def _probs_and_labels(probs: Any, labels: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    p = as_float64(probs, f"{name}_probs", ndim=2)
    y = as_labels(labels, f"{name}_labels")
    if p.shape[0] != y.shape[0]:
        raise ValueError(f"{name}: {p.shape[0]} probability rows but {y.shape[0]} labels")
    if y.size and (y.min() < 0 or y.max() >= p.shape[1]):
        raise ValueError(f"{name}: labels must lie in [0, {p.shape[1]})")
    return p, y


def entropy(probs: np.ndarray) -> np.ndarray:
    """Shannon entropy −Σ p log p of each row (nats), with 0·log 0 = 0; shape (n,)."""
    return -np.sum(np.where(probs > 0, probs * np.log(np.where(probs > 0, probs, 1.0)), 0.0), axis=1)


def m_entropy(probs: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Song & Mittal (2021) modified entropy of each row, shape (n,).

    Mentr(p, y) = −(1 − p_y) log p_y − Σ_{k≠y} p_k log(1 − p_k), logs clamped at 1e-30 as in
    Song & Mittal's ``_m_entr_comp``. Deliberately differs from SalUn's
    ``evaluation/SVC_MIA.py::m_entropy``, which (a) indexes ``modified_probs[:, labels]`` with
    the whole label vector, so every row gets the "true-label" treatment in the columns of *all*
    labels present in the batch/dataset (per-row correct only when all labels are equal), and
    (b) computes ``log_reverse_prob`` as log p instead of log(1 − p).
    """
    rows = np.arange(probs.shape[0])
    log_p = np.log(np.maximum(probs, _LOG_FLOOR))
    log_1mp = np.log(np.maximum(1.0 - probs, _LOG_FLOOR))
    terms = -probs * log_1mp  # k ≠ y terms
    terms[rows, labels] = -(1.0 - probs[rows, labels]) * log_p[rows, labels]
    return terms.sum(axis=1)


def mia_features(probs: Any, labels: Any, feature: str = "confidence") -> np.ndarray:
    """Attack features of SalUn's SVC-MIA, shape (n, 1) or (n, K) for ``"prob"``.

    ``feature``: ``"confidence"`` p_y, ``"entropy"`` H(p), ``"m_entropy"`` (see ``m_entropy``),
    ``"correctness"`` 1[argmax p = y], ``"prob"`` the full probability vector.
    """
    if feature not in MIA_FEATURES:
        raise ValueError(f"unknown MIA feature {feature!r}; choose one of {MIA_FEATURES}")
    p, y = _probs_and_labels(probs, labels, "mia_features")
    rows = np.arange(p.shape[0])
    if feature == "confidence":
        out = p[rows, y]
    elif feature == "entropy":
        out = entropy(p)
    elif feature == "m_entropy":
        out = m_entropy(p, y)
    elif feature == "correctness":
        out = (p.argmax(axis=1) == y).astype(np.float64) if p.shape[0] else np.zeros(0)
    else:
        return p
    return out[:, None]


def svc_mia_efficacy(
    member_probs: Any,
    member_labels: Any,
    nonmember_probs: Any,
    nonmember_labels: Any,
    target_probs: Any,
    target_labels: Any,
    *,
    feature: str = "confidence",
) -> float:
    """SalUn SVC-MIA "MIA-efficacy": percent (0–100) of the target set predicted NON-member.

    Follows ``OPTML-Group/Unlearn-Saliency: Classification/evaluation/SVC_MIA.py``: an
    ``SVC(C=3, gamma='auto', kernel='rbf')`` is fit on the shadow members (label 1) and shadow
    non-members (label 0), then returns 100 · (1 − mean(predict(target))). SalUn reports the
    ``"confidence"`` feature. All inputs are softmax probabilities (n, K) and integer labels.

    The caller chooses the shadow sets. SalUn (``main_forget.py``) uses the FIRST len(test)
    samples of the retain set (not a random draw) as members, the test set (class-wise: without
    the forgotten class) as non-members, and the forget set as target, all in the test transform.

    Difference: ``"m_entropy"`` is the per-row Song & Mittal definition, not SalUn's buggy one
    (see ``m_entropy``). Returns ``nan`` when the target set is empty; raises ValueError when a
    shadow set is empty (the SVC needs both classes).
    """
    from sklearn.svm import SVC  # lazy: keep `import unlearnkit.metrics` light

    x_in = mia_features(member_probs, member_labels, feature)
    x_out = mia_features(nonmember_probs, nonmember_labels, feature)
    x_target = mia_features(target_probs, target_labels, feature)
    if x_target.shape[0] == 0:
        return float("nan")
    if x_in.shape[0] == 0 or x_out.shape[0] == 0:
        raise ValueError("svc_mia_efficacy needs non-empty member and non-member shadow sets")
    x_shadow = np.concatenate([x_in, x_out])
    y_shadow = np.concatenate([np.ones(x_in.shape[0]), np.zeros(x_out.shape[0])])
    clf = SVC(C=3, gamma="auto", kernel="rbf").fit(x_shadow, y_shadow)
    return float(100.0 * (1.0 - np.mean(clf.predict(x_target) == 1)))


def entropy_mia(retain_probs: Any, test_probs: Any, target_probs: Any) -> float:
    """SCRUB / SSD logistic entropy attack: percent (0–100) of the target set predicted MEMBER.

    Follows ``get_membership_attack_prob`` (meghdadk/SCRUB, selective-synaptic-dampening
    ``src/metrics.py``): feature = entropy of the softmax; members = retain set (1), non-members
    = test set (0); ``LogisticRegression(class_weight='balanced', solver='lbfgs',
    multi_class='multinomial')``; returns the mean predicted-member rate on D_f (×100 here; the
    references return a fraction). Lower = better forgetting.

    Difference: recent scikit-learn removed ``multi_class``. For two classes the multinomial
    fit uses a symmetric softmax (w₁ = −w₀) whose L2 penalty is ‖β‖²/4 instead of ‖β‖²/2 on
    β = w₁ − w₀, i.e. it equals the binary fit with C doubled — so we fit the binary model with
    ``C=2.0``, which reproduces the reference's decision rule. Returns ``nan`` on an empty target.
    """
    from sklearn.linear_model import LogisticRegression

    x_r = entropy(as_float64(retain_probs, "retain_probs", ndim=2))
    x_t = entropy(as_float64(test_probs, "test_probs", ndim=2))
    x_f = entropy(as_float64(target_probs, "target_probs", ndim=2))
    if x_f.size == 0:
        return float("nan")
    if x_r.size == 0 or x_t.size == 0:
        raise ValueError("entropy_mia needs non-empty retain (member) and test (non-member) sets")
    x = np.concatenate([x_r, x_t])[:, None]
    y = np.concatenate([np.ones(x_r.size), np.zeros(x_t.size)])
    clf = LogisticRegression(C=2.0, class_weight="balanced", solver="lbfgs").fit(x, y)
    return float(100.0 * np.mean(clf.predict(x_f[:, None]) == 1))


def mia_auroc_components(
    member_logits: Any,
    member_labels: Any,
    nonmember_logits: Any,
    nonmember_labels: Any,
    truncate: str = "nonmember",
) -> dict[str, float]:
    """PURGE's MIA AUROCs as ``{"loss": …, "confidence": …, "mean": …}`` (each in [0, 1]).

    Follows ``vedjaw/la_purge: run.py::compute_mia``: scores are −CE(logits, y) and the max
    softmax probability; AUROC (``roc_auc_score``) of each with members as the positive class;
    "mean" is their average (PURGE's "MIA (average)", ideal 0.5).

    ``truncate="nonmember"`` (default) reproduces the reference code exactly: only the non-members
    are cut to the first n_member rows (with PURGE's 5000 members vs 1000 non-members this cuts
    nothing; every member is scored). ``truncate="both"`` keeps the first min(n_member, n_nonmember)
    rows of each side (a balanced variant; AUROC does not depend on the class ratio in
    expectation, so the two agree closely, but "both" discards members).
    All values are ``nan`` when either side is empty (the reference returns 0.5 there).
    """
    from sklearn.metrics import roc_auc_score

    if truncate not in ("both", "nonmember"):
        raise ValueError(f"truncate must be 'both' or 'nonmember', got {truncate!r}")
    z_in, y_in = _probs_and_labels(member_logits, member_labels, "member")
    z_out, y_out = _probs_and_labels(nonmember_logits, nonmember_labels, "nonmember")
    n_in, n_out = z_in.shape[0], z_out.shape[0]
    if n_in == 0 or n_out == 0:
        return {"loss": float("nan"), "confidence": float("nan"), "mean": float("nan")}
    if truncate == "both":
        n_in = n_out = min(n_in, n_out)
    else:
        n_out = min(n_in, n_out)
    z_in, y_in, z_out, y_out = z_in[:n_in], y_in[:n_in], z_out[:n_out], y_out[:n_out]

    def scores(z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logp = log_softmax(z, axis=1)
        return logp[np.arange(z.shape[0]), y], np.exp(logp.max(axis=1))  # −CE, max softmax

    neg_loss_in, conf_in = scores(z_in, y_in)
    neg_loss_out, conf_out = scores(z_out, y_out)
    is_member = np.concatenate([np.ones(n_in), np.zeros(n_out)])
    auc_loss = float(roc_auc_score(is_member, np.concatenate([neg_loss_in, neg_loss_out])))
    auc_conf = float(roc_auc_score(is_member, np.concatenate([conf_in, conf_out])))
    return {"loss": auc_loss, "confidence": auc_conf, "mean": (auc_loss + auc_conf) / 2.0}


def mia_auroc(
    member_logits: Any,
    member_labels: Any,
    nonmember_logits: Any,
    nonmember_labels: Any,
    truncate: str = "nonmember",
) -> float:
    """PURGE MIA: mean of the loss-AUROC and confidence-AUROC, in [0, 1] (0.5 ideal).

    Members = forget-set TRAIN samples, non-members = forget-class TEST samples (chosen by the
    caller). See ``mia_auroc_components`` for the definition, truncation and the empty case.
    """
    return mia_auroc_components(member_logits, member_labels, nonmember_logits, nonmember_labels, truncate)[
        "mean"
    ]
