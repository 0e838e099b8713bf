"""The one feature preparation (metrics/prepare.py) and the kernel probe (metrics/kernel_probe.py): dead units by
their own scale, and invariance of every number to rescaling (powers of two up to 2^±100), permutation and mixing
of units."""
import math

import numpy as np
import pytest
import torch

from unlearnkit.metrics.kernel_probe import KERNELS, kernel_probe, probe_splits
from unlearnkit.metrics.lda import FewShotHead, head_relearn, unbiased_separability
from unlearnkit.metrics.prepare import DEAD, live_units, prepare


def _data(seed=0, n_f=60, n_r=300, d=12):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_f + n_r, d, generator=g, dtype=torch.float64)
    x[:n_f, :3] += 1.5                                   # the forget rows differ in mean
    x[:n_f, 3:5] *= 2.5                                   # and in scale (second moments only)
    x = torch.relu(x @ torch.randn(d, d, generator=g, dtype=torch.float64))
    y = np.r_[np.ones(n_f, bool), np.zeros(n_r, bool)]
    return x, y


def _rescaled(x, bound, seed=1):
    g = torch.Generator().manual_seed(seed)
    e = torch.randint(-bound, bound + 1, (x.shape[1],), generator=g).double()
    return x * torch.pow(2.0, e)


def test_a_unit_is_dead_on_its_own_scale():
    std = torch.tensor([1e-9, 1e-8, 1.0, 0.0])
    absmax = torch.tensor([1.0, 1e-3, 1e8, 0.0])
    assert live_units(std, absmax).tolist() == [False, True, False, False]
    assert DEAD == 1e-6


def test_rescaling_by_powers_of_two_changes_nothing():
    x, _ = _data()
    x[:, 5] = 3.0  # a dead unit
    for bound in (24, 100):
        xs = _rescaled(x, bound)
        p, q = prepare(x), prepare(xs)
        assert torch.equal(p.live, q.live) and int(p.live.sum()) == x.shape[1] - 1
        assert torch.allclose(p.whitened(x), q.whitened(xs), atol=1e-9)


def test_one_huge_unit_does_not_push_the_others_under_the_cut():
    """The head checks' bug (issue 42): a cut relative to the largest unit dropped every informative unit when
    one unit was scaled by 2^24; the own-scale cut keeps them, and the heads read the same."""
    x, y = _data()
    xs = x.clone()
    xs[:, 0] *= 2.0 ** 24
    xs[:, 1:] *= 2.0 ** -24
    yy = torch.from_numpy(np.where(y, 3, np.arange(y.size) % 3)).long()
    head, head_s = FewShotHead(x[~y], yy[~y]), FewShotHead(xs[~y], yy[~y])
    shots, queries = torch.arange(2), torch.arange(2, 60)
    a = head.score(x[shots], yy[shots], x[queries], yy[queries])
    b = head_s.score(xs[shots], yy[shots], xs[queries], yy[queries])
    assert a.accuracy == pytest.approx(b.accuracy) and a.log_odds == pytest.approx(b.log_odds, rel=1e-6)


def test_head_relearning_is_invariant_to_rescaling_the_features_with_the_head():
    x, y = _data()
    yy = torch.from_numpy(np.where(y, 3, np.arange(y.size) % 3)).long()
    g = torch.Generator().manual_seed(5)
    w, b = torch.randn(4, x.shape[1], generator=g, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    s = torch.pow(2.0, torch.randint(-100, 101, (x.shape[1],), generator=g).double())
    shots = torch.cat([torch.arange(5), torch.arange(60, 75)])
    got = [head_relearn(xx[60:], xx[shots], yy[shots], xx[5:60], yy[5:60], weight=ww, bias=b, steps=(10, 40))
           for xx, ww in ((x, w), (x * s, w / s))]
    for a, c in zip(*got):
        assert a.log_odds == pytest.approx(c.log_odds, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_kernel_probe_is_invariant_to_rescaling_permuting_and_mixing_units(kernel):
    x, y = _data()
    splits = probe_splits(y, seed=3, splits=3, landmarks=100)
    base = kernel_probe(prepare(x).whitened(x), y, splits, kernel=kernel)
    xs = _rescaled(x, 100)
    assert kernel_probe(prepare(xs).whitened(xs), y, splits, kernel=kernel) == pytest.approx(base, abs=1e-9)
    perm = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(2))
    xp = x[:, perm]
    assert kernel_probe(prepare(xp).whitened(xp), y, splits, kernel=kernel) == pytest.approx(base, abs=1e-7)
    q = torch.linalg.qr(torch.randn(x.shape[1], x.shape[1], generator=torch.Generator().manual_seed(4),
                                    dtype=torch.float64))[0]
    mix = q @ torch.diag(torch.linspace(0.5, 2, x.shape[1], dtype=torch.float64))
    xm = x @ mix
    assert kernel_probe(prepare(xm).whitened(xm), y, splits, kernel=kernel) == pytest.approx(base, abs=1e-6)


def test_the_kernel_probe_sees_more_separation_and_second_moments():
    x, y = _data()
    same = torch.randn_like(x)
    splits = probe_splits(y, seed=3, splits=3, landmarks=100)
    sep = kernel_probe(prepare(x).whitened(x), y, splits, kernel="rbf")
    none = kernel_probe(prepare(same).whitened(same), y, splits, kernel="rbf")
    assert sep > none + 2.0
    # the groups differ only in scale: the degree-2 kernel finds it where the linear separability sees ~nothing
    g = torch.Generator().manual_seed(9)
    z = torch.randn(360, 6, generator=g, dtype=torch.float64)
    flat = z.clone()
    z[:60] *= 2.5
    lin = unbiased_separability(z.numpy(), y, leave_one_out=False).value
    quad = kernel_probe(prepare(z).whitened(z), y, splits, kernel="poly2")
    base = kernel_probe(prepare(flat).whitened(flat), y, splits, kernel="poly2")
    assert lin < 0.5 and quad > base + 2.0 and math.exp(quad) > 1.0


def test_probe_splits_depend_on_the_seed_only():
    y = np.r_[np.ones(30, bool), np.zeros(200, bool)]
    a, b, c = (probe_splits(y, seed=s, splits=2, landmarks=50) for s in (1, 1, 2))
    assert all(np.array_equal(u, v) for u, v in zip(a.held_out, b.held_out))
    assert not all(np.array_equal(u, v) for u, v in zip(a.held_out, c.held_out))
    assert all(h[y].sum() == 9 and h[~y].sum() == 60 for h in a.held_out)
