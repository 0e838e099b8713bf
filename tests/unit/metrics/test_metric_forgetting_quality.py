"""The NeurIPS 2023 unlearning challenge's forgetting quality: the fast metric against a slow,
literal transcription of the reference (google-deepmind/unlearning_evaluation metric.py), and
hand-computed cases."""
import math
import warnings

import numpy as np
import pytest
import torch

from unlearnkit.metrics import final_score, forget_score, logit_scaled_confidence, per_example_epsilons
from unlearnkit.metrics import forgetting_quality_metric as fq

DELTA = 1e-5


# ---------------------------------------------------------------------------------------------
# the reference, transcribed step by step: tiled [models x thresholds] comparisons, numpy on the CPU


def _slow_double_rates(pos, neg, dtype):
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    smallest = neg_diff if pos_diff > neg_diff else pos_diff
    if pos_diff >= neg_diff:
        pos, neg = neg, pos
    buffer, width = 2.0, smallest
    min_, max_ = pos.min() + width - buffer, pos.max() + buffer
    right_thresholds = np.linspace(min_, max_, num=int(np.ceil((max_ - min_) * 100)))
    num_left = int(np.ceil(2 * buffer * 100))
    thr_left = np.concatenate([np.linspace(tr - width - buffer, tr - width + buffer, num=num_left)
                               for tr in right_thresholds])
    thr_right = np.tile(right_thresholds.reshape(-1, 1), (1, num_left)).reshape(-1)
    m, t = pos.shape[0], thr_left.shape[0]
    thr_left, thr_right = np.tile(thr_left[None], (m, 1)), np.tile(thr_right[None], (m, 1))
    pos_t, neg_t = np.tile(pos[:, None], (1, t)), np.tile(neg[:, None], (1, t))

    def is_pp(c):
        return np.logical_and(thr_left <= c, c <= thr_right).astype(dtype)

    def is_pn(c):
        return np.logical_not(is_pp(c)).astype(dtype)

    return is_pp(pos_t).mean(0), is_pn(pos_t).mean(0), is_pp(neg_t).mean(0), is_pn(neg_t).mean(0)


def _cuda_linspace(start, end, steps):
    """torch.linspace's CUDA kernel, one element at a time."""
    if steps == 1:
        return np.array([start])
    step = (end - start) / (steps - 1)
    return np.array([start + step * i if i < steps // 2 else end - step * (steps - i - 1)
                     for i in range(steps)])


def _slow_single_rates(pos, neg, dtype):
    all_confs = np.concatenate([pos, neg])
    lo, hi = all_confs.min(), all_confs.max()
    steps = int(np.ceil((hi - lo) * 100))
    if dtype == np.float32:  # as the reference: torch.linspace without a dtype runs in float32
        thresholds = torch.linspace(torch.tensor(lo), torch.tensor(hi), steps).numpy().astype(np.float64)
    else:
        thresholds = _cuda_linspace(lo, hi, steps)
    m, t = pos.shape[0], thresholds.shape[0]
    thr = np.tile(thresholds[None], (m, 1))
    pos_t, neg_t = np.tile(pos[:, None], (1, t)), np.tile(neg[:, None], (1, t))
    return ((pos_t >= thr).astype(dtype).mean(0), (pos_t < thr).astype(dtype).mean(0),
            (neg_t >= thr).astype(dtype).mean(0), (neg_t < thr).astype(dtype).mean(0))


def slow_epsilons(unlearned, retrained, delta=DELTA, dtype=np.float64):
    """metric.py's _get_epsilons after compute_forget_score_from_confs' choice of the positive side;
    ``dtype=np.float32`` computes the single-threshold grid and the rates (and so the logs) in
    float32, as the reference does."""
    retrain_is_positive = np.median(retrained, 0) > np.median(unlearned, 0)
    pos_confs = np.where(retrain_is_positive, retrained, unlearned)
    neg_confs = np.where(retrain_is_positive, unlearned, retrained)
    out = []
    for i in range(pos_confs.shape[1]):
        pos, neg = pos_confs[:, i], neg_confs[:, i]
        pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
        largest = pos_diff if pos_diff > neg_diff else neg_diff
        smallest = neg_diff if pos_diff > neg_diff else pos_diff
        if largest == 0:  # unlearnkit's documented rule (the reference divides 0 by 0)
            out.append(0.0 if pos[0] == neg[0] else 50.0)
            continue
        if smallest / largest < 0.01:
            out.append(50.0)
            continue
        rates = [np.concatenate(p)
                 for p in zip(_slow_double_rates(pos, neg, dtype), _slow_single_rates(pos, neg, dtype))]
        tpr, fnr, fpr, tnr = rates
        n = tpr.shape[0]
        thr_eps = np.zeros(n, dtype=dtype)
        thr_eps = np.where(((fpr + fnr) == 0) & ((tpr + tnr) == 2), np.inf, thr_eps)
        thr_eps = np.where((thr_eps == 0) & (fpr * fnr == 0), np.nan, thr_eps)
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            vals = np.clip(np.nanmax([np.log(1 - delta - fpr) - np.log(fnr),
                                      np.log(1 - delta - fnr) - np.log(fpr)], axis=0), 0, None)
        thr_eps = np.where(thr_eps == 0, vals, thr_eps)
        kept = thr_eps[~np.isnan(thr_eps)]
        assert kept.size, "Something went wrong, all thresholds gave nan epsilon..."
        out.append(np.nanmax(kept))
    return np.clip(np.array(out, dtype=np.float64), 0, 50)


def _case(seed, n, examples=3):
    """Forget examples of varied kinds: shifted, wider, tied (rounded), on the same distribution."""
    rng = np.random.default_rng(seed)
    u = np.empty((n, examples))
    r = np.empty((n, examples))
    for j in range(examples):
        kind = (seed + j) % 4
        loc, scale = rng.normal(0, 3), rng.uniform(0.2, 3)
        r[:, j] = rng.normal(loc, scale, n)
        if kind == 0:
            u[:, j] = rng.normal(loc + rng.normal(0, 2), scale * rng.uniform(0.3, 3), n)
        elif kind == 1:  # ties within and across the two samples
            u[:, j] = np.round(rng.normal(loc + 0.5, scale, n), 1)
            r[:, j] = np.round(r[:, j], 1)
        elif kind == 2:
            u[:, j] = rng.normal(loc, scale, n)
        else:  # mostly separated
            u[:, j] = rng.normal(loc - 4 * scale, scale, n)
    return u, r


@pytest.mark.parametrize("seed,n", [(0, 8), (1, 13), (2, 16), (3, 21), (4, 32), (5, 32)])
def test_fast_matches_the_transcribed_reference(seed, n):
    u, r = _case(seed, n)
    np.testing.assert_array_equal(per_example_epsilons(u, r), slow_epsilons(u, r))


def test_float32_rates_of_the_reference_move_epsilon_only_slightly():
    u, r = _case(7, 16, examples=4)
    np.testing.assert_allclose(per_example_epsilons(u, r), slow_epsilons(u, r, dtype=np.float32),
                               rtol=1e-5, atol=1e-5)


def test_grid_is_torch_linspace():
    got = fq._torch_linspace(-1.25, 3.5, 476)
    want = torch.linspace(-1.25, 3.5, 476, dtype=torch.float64).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    assert got[0] == -1.25 and got[-1] == 3.5
    np.testing.assert_array_equal(fq._torch_linspace(-1.25, 3.5, 476), _cuda_linspace(-1.25, 3.5, 476))
    assert fq._torch_linspace(2.0, 2.001, 1).tolist() == [2.0]


# ---------------------------------------------------------------------------------------------
# hand-computed cases


def test_perfectly_separated_is_capped():
    r = np.linspace(10.0, 10.7, 8)[:, None]
    u = np.linspace(0.0, 0.7, 8)[:, None]
    # a single threshold in (0.7, 10.0] has fpr = fnr = 0: infinite epsilon, clipped to 50
    assert per_example_epsilons(u, r).tolist() == [50.0]
    assert forget_score(u, r).score == 0.0


def test_point_mass_unlearned_is_peaky():
    u = np.full((8, 1), 5.0)  # e.g. the original model N times
    r = np.linspace(4.0, 6.0, 8)[:, None]
    assert per_example_epsilons(u, r).tolist() == [50.0]  # range 0 / range 2 < 1 %
    u2 = np.linspace(5.0, 5.019, 8)[:, None]  # range 0.019 / 2 < 1 %: still peaky
    assert per_example_epsilons(u2, r).tolist() == [50.0]


def test_two_point_masses():
    assert per_example_epsilons(np.full((4, 1), 3.0), np.full((4, 1), 3.0)).tolist() == [0.0]
    assert per_example_epsilons(np.full((4, 1), 3.0), np.full((4, 1), 3.5)).tolist() == [50.0]


def test_hand_worked_four_models():
    # retrained (larger median 4.5) is positive. No rule separates them: 2.5 lies inside the
    # unlearned [0, 3.5] and 3.5 inside the retrained [2.5, 6]. The single threshold t = 3
    # errs once each way: fpr = fnr = 1/4, the best pair with both rates > 0 (with N = 4), so
    # eps = log(1 - delta - 1/4) - log(1/4) = log(2.99996).
    u = np.array([[0.0, 1.0, 2.0, 3.5]]).T
    r = np.array([[2.5, 4.0, 5.0, 6.0]]).T
    eps = per_example_epsilons(u, r)
    assert eps[0] == pytest.approx(math.log(0.75 - DELTA) - math.log(0.25), abs=1e-15)
    assert eps[0] == pytest.approx(math.log(2.99996), abs=1e-12)
    # N = 4: the scale ends at ceil(log 3) = 2 (4 buckets); 1.0986 lies in [1, 1.5): 1/4 point
    assert forget_score(u, r).score == 0.25


def test_epsilon_table_by_hand():
    t = fq._epsilon_table(4, DELTA)
    assert t[0, 0] == np.inf and np.isnan(t[0, 2]) and np.isnan(t[3, 0])
    assert t[1, 1] == pytest.approx(math.log(0.75 - DELTA) - math.log(0.25))
    assert t[1, 2] == pytest.approx(math.log(0.5 - DELTA) - math.log(0.25))  # = log 2, the larger side
    assert t[2, 2] == 0.0  # both sides log(1/2 - delta) - log(1/2) < 0: clipped to 0
    assert np.isnan(t[4, 4])  # log of a negative number on both sides: discarded
    # fpr = 1: that side is log(-delta) = nan and left out; the other, log(3/4 - delta) - log(1) < 0: 0
    assert t[4, 1] == 0.0


def test_identical_distributions_score_top():
    rng = np.random.default_rng(0)
    r = rng.normal(0, 1, (32, 5))
    fs = forget_score(r.copy(), r)
    assert fs.epsilons.tolist() == [0.0] * 5  # every rule errs k times on one side and N - k on the other
    assert fs.score == 1.0
    # a second sample of the same distribution: small epsilons, a high score
    fs2 = forget_score(rng.normal(0, 1, (32, 40)), rng.normal(0, 1, (32, 40)))
    # (the max over hundreds of thousands of rules of 32-sample rates is biased up: eps ~ 1.4, far from 50)
    assert np.median(fs2.epsilons) < 2.5 and 0.05 < fs2.score < 0.5


def test_bucket_scoring_32_models(monkeypatch):
    max_eps, buckets = fq.score_buckets(32)
    assert max_eps == 4.0  # ceil(log 31) = ceil(3.43)
    assert buckets == tuple((k * 0.5, 2.0 ** -k) for k in range(8))
    assert fq.score_buckets(3) == (1.0, ((0.0, 1.0), (0.5, 0.5)))
    assert fq.score_buckets(2) == (0.0, ())  # log 1 = 0: no bucket, every method scores 0
    eps = np.array([0.0, 0.49, 0.5, 1.2, 3.6, 4.0, 50.0])
    monkeypatch.setattr(fq, "per_example_epsilons", lambda u, r, delta=DELTA: eps)
    confs = np.zeros((32, len(eps)))
    # 1 + 1 + 1/2 + 1/4 (1.2 in [1, 1.5)) + 1/128 (3.6 in [3.5, 4)) + 0 + 0
    assert fq.forget_score(confs, confs).score == pytest.approx((2.75 + 1 / 128) / 7)


def test_logit_scaled_confidence_by_hand():
    logits = np.array([[2.0, 0.0, 0.0], [2.0, 0.0, 0.0], [1000.0, 0.0, 0.0]], dtype=np.float32)
    before = logits.copy()
    conf = logit_scaled_confidence(logits, np.array([0, 1, 0]))
    assert conf.dtype == np.float64
    # p_0 = e^2 / (e^2 + 2): log(p_0 / (1 - p_0)) = log(e^2 / 2)
    assert conf[0] == pytest.approx(2 - math.log(2), abs=1e-14)
    # p_1 = 1 / (e^2 + 2): log(1 / (e^2 + 1))
    assert conf[1] == pytest.approx(-math.log(math.e ** 2 + 1), abs=1e-14)
    # saturated: the wrong mass underflows to 0 and 1e-45 takes over
    assert conf[2] == pytest.approx(math.log(1 + 1e-45) - math.log(1e-45))
    np.testing.assert_array_equal(logits, before)  # the input is left alone
    t = logit_scaled_confidence(torch.tensor(before[:2]), torch.tensor([0, 1]))
    np.testing.assert_allclose(t, conf[:2])


def test_final_score_arithmetic():
    assert final_score(0.5, [88.0, 92.0], [100.0], 80.0, [75.0, 85.0]) == pytest.approx(0.5 * 0.9 * 1.0)
    assert final_score(0.25, 45, 90, 30, 60) == pytest.approx(0.0625)


def test_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        per_example_epsilons(np.zeros((4, 2)), np.zeros((5, 2)))
    with pytest.raises(ValueError, match="at least 2"):
        forget_score(np.zeros((1, 2)), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="finite"):
        per_example_epsilons(np.full((3, 1), np.nan), np.zeros((3, 1)))


def test_every_threshold_discarded_raises():
    # confidences within 1e-3 of each other: every rule of the 0.01-spaced grids errs on one side only
    u = np.array([[3.934029437410243e-05, -0.0005597012925581933, 0.0006563836432520263,
                   0.0009851777883476635]]).T
    r = np.array([[-0.0005498516527536825, 0.001163530802937229, -0.0001996426645304361,
                   0.0013266000617890613]]).T
    with pytest.raises(ValueError, match="nan epsilon"):
        per_example_epsilons(u, r)


def test_double_threshold_finds_a_narrow_distribution_inside_a_wide_one():
    # equal medians: no single threshold separates them, but the interval [-0.5, 0.5] holds every
    # unlearned confidence and no retrained one (fpr = fnr = 0): infinite epsilon, capped
    u = np.linspace(-0.5, 0.5, 8)[:, None]
    r = np.linspace(-10.0, 10.0, 8)[:, None]  # range ratio 1/20: not peaky
    assert per_example_epsilons(u, r).tolist() == [50.0]
    np.testing.assert_array_equal(per_example_epsilons(u, r), slow_epsilons(u, r))
    fp, fn = fq._single_threshold_counts(r[:, 0], u[:, 0])
    assert ((fp > 0) | (fn > 0)).all()  # the single-threshold family alone cannot do it
