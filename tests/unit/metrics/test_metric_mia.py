import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize
from scipy.stats import entropy as scipy_entropy
from sklearn.svm import SVC

from unlearnkit.metrics import entropy_mia, mia_auroc, mia_auroc_components, mia_features, svc_mia_efficacy


def _probs(rng, n, k=4, sharp=1.0):
    return torch.softmax(torch.from_numpy(rng.normal(size=(n, k)) * sharp), dim=1).numpy()


# ---------------------------------------------------------------- features


def test_confidence_entropy_correctness_match_independent_implementations():
    rng = np.random.default_rng(0)
    p = _probs(rng, 50, k=5, sharp=2.0)
    y = rng.integers(0, 5, size=50)
    conf = torch.gather(torch.from_numpy(p), 1, torch.from_numpy(y)[:, None]).numpy()
    np.testing.assert_allclose(mia_features(p, y, "confidence"), conf)
    np.testing.assert_allclose(mia_features(p, y, "entropy")[:, 0], scipy_entropy(p, axis=1))
    np.testing.assert_array_equal(mia_features(p, y, "correctness")[:, 0], (p.argmax(1) == y).astype(float))
    assert mia_features(p, y, "prob").shape == (50, 5)


def test_m_entropy_hand_case_and_per_row_loop():
    p = np.array([[0.7, 0.2, 0.1], [0.7, 0.2, 0.1]])
    y = np.array([0, 1])
    row0 = -0.3 * np.log(0.7) - 0.2 * np.log(0.8) - 0.1 * np.log(0.9)
    row1 = -0.8 * np.log(0.2) - 0.7 * np.log(0.3) - 0.1 * np.log(0.9)
    np.testing.assert_allclose(mia_features(p, y, "m_entropy")[:, 0], [row0, row1])

    rng = np.random.default_rng(1)
    q = _probs(rng, 30, k=6, sharp=3.0)
    lab = rng.integers(0, 6, size=30)
    loop = []
    for i in range(30):
        total = 0.0
        for k in range(6):
            if k == lab[i]:
                total -= (1 - q[i, k]) * math.log(q[i, k])
            else:
                total -= q[i, k] * math.log(1 - q[i, k])
        loop.append(total)
    np.testing.assert_allclose(mia_features(q, lab, "m_entropy")[:, 0], loop, rtol=1e-10)


def test_m_entropy_clamps_zero_and_one():
    out = mia_features(np.array([[1.0, 0.0]]), np.array([1]), "m_entropy")[0, 0]
    # true class p=0: −1·log(1e-30); other class p=1: −1·log(max(0, 1e-30))
    assert out == pytest.approx(-2 * math.log(1e-30))


def test_unknown_feature_and_bad_labels_raise():
    p = np.full((2, 3), 1 / 3)
    with pytest.raises(ValueError, match="unknown MIA feature"):
        mia_features(p, np.array([0, 1]), "loss")
    with pytest.raises(ValueError, match="labels must lie"):
        mia_features(p, np.array([0, 3]), "confidence")


# ---------------------------------------------------------------- SVC MIA


def _confident(rng, n, k, conf):
    """Rows whose true-class probability is ``conf`` (rest spread uniformly)."""
    y = rng.integers(0, k, size=n)
    p = np.full((n, k), (1 - conf) / (k - 1))
    p[np.arange(n), y] = conf
    return p, y


def test_svc_mia_direction_and_percent():
    rng = np.random.default_rng(0)
    m_p, m_y = _confident(rng, 60, 5, 0.99)
    n_p, n_y = _confident(rng, 60, 5, 0.40)
    forgotten_p, forgotten_y = _confident(rng, 30, 5, 0.40)
    remembered_p, remembered_y = _confident(rng, 30, 5, 0.99)
    assert svc_mia_efficacy(m_p, m_y, n_p, n_y, forgotten_p, forgotten_y) == 100.0
    assert svc_mia_efficacy(m_p, m_y, n_p, n_y, remembered_p, remembered_y) == 0.0
    half_p = np.concatenate([forgotten_p[:10], remembered_p[:30]])
    half_y = np.concatenate([forgotten_y[:10], remembered_y[:30]])
    assert svc_mia_efficacy(m_p, m_y, n_p, n_y, half_p, half_y) == pytest.approx(25.0)


@pytest.mark.parametrize("feature", ["confidence", "entropy", "prob"])
def test_svc_mia_matches_direct_salun_computation(feature):
    rng = np.random.default_rng(3)
    m_p, n_p, t_p = _probs(rng, 80, sharp=3.0), _probs(rng, 80, sharp=1.0), _probs(rng, 40, sharp=2.0)
    m_y, n_y, t_y = (p.argmax(1) for p in (m_p, n_p, t_p))
    feat = {
        "confidence": lambda p, y: p[np.arange(len(y)), y][:, None],
        "entropy": lambda p, y: scipy_entropy(p, axis=1)[:, None],
        "prob": lambda p, y: p,
    }[feature]
    clf = SVC(C=3, gamma="auto", kernel="rbf").fit(
        np.concatenate([feat(m_p, m_y), feat(n_p, n_y)]), np.r_[np.ones(80), np.zeros(80)]
    )
    expected = 100 * (1 - clf.predict(feat(t_p, t_y)).mean())
    got = svc_mia_efficacy(torch.from_numpy(m_p), m_y, n_p, n_y, t_p, torch.from_numpy(t_y), feature=feature)
    assert got == pytest.approx(expected)


def test_svc_mia_empty_target_nan_and_empty_shadow_raises():
    rng = np.random.default_rng(0)
    p, y = _confident(rng, 10, 3, 0.9)
    assert math.isnan(svc_mia_efficacy(p, y, p, y, np.zeros((0, 3)), np.zeros(0, dtype=int)))
    with pytest.raises(ValueError, match="shadow"):
        svc_mia_efficacy(np.zeros((0, 3)), np.zeros(0, dtype=int), p, y, p, y)


# ---------------------------------------------------------------- PURGE AUROC


def _auroc_pairs(pos, neg):
    """Mann-Whitney AUROC: P(pos > neg) + 0.5 P(tie), by brute force."""
    diff = pos[:, None] - neg[None, :]
    return float(np.mean((diff > 0) + 0.5 * (diff == 0)))


def test_mia_auroc_matches_mann_whitney_with_torch_losses():
    rng = np.random.default_rng(0)
    z_in, z_out = rng.normal(size=(40, 5)) * 2, rng.normal(size=(40, 5))
    y_in, y_out = rng.integers(0, 5, 40), rng.integers(0, 5, 40)
    t_in, t_out = torch.from_numpy(z_in), torch.from_numpy(z_out)
    loss_in = F.cross_entropy(t_in, torch.from_numpy(y_in), reduction="none").numpy()
    loss_out = F.cross_entropy(t_out, torch.from_numpy(y_out), reduction="none").numpy()
    conf_in = F.softmax(t_in, 1).max(1).values.numpy()
    conf_out = F.softmax(t_out, 1).max(1).values.numpy()
    comps = mia_auroc_components(t_in, y_in, z_out, y_out)
    assert comps["loss"] == pytest.approx(_auroc_pairs(-loss_in, -loss_out))
    assert comps["confidence"] == pytest.approx(_auroc_pairs(conf_in, conf_out))
    assert mia_auroc(z_in, y_in, z_out, y_out) == pytest.approx((comps["loss"] + comps["confidence"]) / 2)


def test_mia_auroc_extremes():
    z = np.array([[5.0, 0.0], [0.0, 5.0], [4.0, 0.0]])
    y = np.array([0, 1, 0])
    assert mia_auroc(z, y, z, y) == pytest.approx(0.5)
    confident = np.array([[9.0, 0.0], [9.0, 0.0]])
    unsure = np.array([[0.1, 0.0], [0.2, 0.0]])
    assert mia_auroc(confident, [0, 0], unsure, [0, 0]) == 1.0
    assert mia_auroc(unsure, [0, 0], confident, [0, 0]) == 0.0


def test_mia_auroc_truncation_uses_first_rows():
    rng = np.random.default_rng(1)
    z_in, y_in = rng.normal(size=(10, 3)), rng.integers(0, 3, 10)
    z_out, y_out = rng.normal(size=(25, 3)), rng.integers(0, 3, 25)
    base = mia_auroc(z_in, y_in, z_out, y_out)
    assert base == pytest.approx(mia_auroc(z_in, y_in, z_out[:10], y_out[:10]))
    z_out2 = z_out.copy()
    z_out2[10:] = 100.0  # rows past n_member never count
    assert mia_auroc(z_in, y_in, z_out2, y_out) == pytest.approx(base)
    # "both" also cuts members; "nonmember" (PURGE code, the default) keeps all members
    both = mia_auroc(z_out, y_out, z_in, y_in, truncate="both")
    assert both == pytest.approx(mia_auroc(z_out[:10], y_out[:10], z_in, y_in))
    assert mia_auroc(z_out, y_out, z_in, y_in) != pytest.approx(both)
    # PURGE's compute_mia by hand: 25 members all scored, against the 10 non-members
    from scipy.special import log_softmax
    from sklearn.metrics import roc_auc_score

    def hand(z, y):
        lp = log_softmax(z, axis=1)
        return lp[np.arange(len(y)), y], np.exp(lp.max(1))

    (l_in, c_in), (l_out, c_out) = hand(z_out, y_out), hand(z_in, y_in)
    member = np.r_[np.ones(25), np.zeros(10)]
    expected = (roc_auc_score(member, np.r_[l_in, l_out]) + roc_auc_score(member, np.r_[c_in, c_out])) / 2
    assert mia_auroc(z_out, y_out, z_in, y_in) == pytest.approx(expected)


def test_mia_auroc_empty_is_nan():
    assert math.isnan(mia_auroc(np.zeros((0, 3)), np.zeros(0, int), np.ones((4, 3)), np.zeros(4, int)))


# ---------------------------------------------------------------- SCRUB entropy MIA


def _multinomial_two_class_fit(x, y, C=1.0):
    """SCRUB's LogisticRegression(multi_class='multinomial', class_weight='balanced', C=1), by hand:
    minimise Σ_i w_i CE(softmax(W x_i + b), y_i) + ||W||² / (2C) over a 2×1 W and 2 intercepts."""
    w_cls = {c: len(y) / (2 * np.sum(y == c)) for c in (0, 1)}
    sw = np.array([w_cls[c] for c in y])

    def obj(theta):
        W, b = theta[:2], theta[2:]
        logits = x[:, None] * W[None, :] + b[None, :]
        logits = logits - logits.max(1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
        return -np.sum(sw * logp[np.arange(len(y)), y.astype(int)]) + W @ W / (2 * C)

    theta = minimize(obj, np.zeros(4), method="BFGS", options={"gtol": 1e-10}).x
    return theta[1] - theta[0], theta[3] - theta[2]  # decision: beta * x + b > 0 -> member


def test_entropy_mia_reproduces_multinomial_reference_decision():
    rng = np.random.default_rng(0)
    retain = _probs(rng, 120, k=4, sharp=3.0)  # members: low entropy
    test = _probs(rng, 80, k=4, sharp=0.7)
    h = np.concatenate([scipy_entropy(retain, axis=1), scipy_entropy(test, axis=1)])
    beta, b = _multinomial_two_class_fit(h, np.r_[np.ones(120), np.zeros(80)])
    threshold = -b / beta
    assert beta < 0  # higher entropy -> less likely a member
    target = _probs(rng, 200, k=4, sharp=1.5)
    h_t = scipy_entropy(target, axis=1)
    keep = np.abs(h_t - threshold) > 1e-3  # away from the boundary, solver tolerance is irrelevant
    target = target[keep]
    expected = 100 * np.mean(beta * scipy_entropy(target, axis=1) + b > 0)
    assert 0 < expected < 100
    assert entropy_mia(retain, test, target) == pytest.approx(expected)


def test_entropy_mia_empty_target_nan():
    p = np.full((3, 2), 0.5)
    assert math.isnan(entropy_mia(p, p, np.zeros((0, 2))))
