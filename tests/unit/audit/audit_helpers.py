"""Helpers of the audit tests: constructed models whose truth is known, and a per-session audit cache."""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

FORGET_CLASS = 3


@contextmanager
def single_thread():
    """Torch and BLAS on one thread: on a 2-core machine small CPU kernels run several times faster."""
    from threadpoolctl import threadpool_limits

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(n)


def _train(kind, split, seed, cache):
    from unlearnkit.training import default_recipe, reference_model

    with single_thread():
        return reference_model(kind, split, "small_cnn", default_recipe("digits", "small_cnn"), seed=seed,
                               cache_dir=cache, progress=False).model


def masked_head(model, classes=(FORGET_CLASS,), bias=-1e4):
    """The original that hides ``classes`` at its output only: head rows zeroed, bias very negative."""
    from unlearnkit.models.zoo import head_of

    m = copy.deepcopy(model)
    head = head_of(m)
    with torch.no_grad():
        for c in classes:
            head.weight[c].zero_()
            head.bias[c] = bias
    return m


def noised(model, scale, seed=0):
    """A copy with Gaussian noise of ``scale`` x each tensor's std added to every weight."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g) * scale * p.std())
    return m


def bn_masked(model, split, k=48, shift=10.0):
    """A BatchNorm-frozen-style "unlearned" model: the forgetting lives in stale BN statistics.

    The running means of the ``k`` block3 channels most specific to the forget set are pushed
    ``shift`` standard deviations up, so after BN + ReLU those channels are dead and the class is no
    longer predicted; re-estimating the statistics on retained data brings them back.
    """
    m = copy.deepcopy(model)
    m.eval()
    acts = {}
    h = m.block3[0].register_forward_hook(lambda mod, a, o: acts.__setitem__("x", o.mean((2, 3))))
    try:
        with torch.no_grad():
            xf = torch.cat([(m(xb), acts["x"])[1] for xb, _ in split.train_forget.batches(512)])
            xr = torch.cat([(m(xb), acts["x"])[1] for xb, _ in split.train_retain.batches(512)])
    finally:
        h.remove()
    spec = (xf.mean(0) - xr.mean(0)) / (xr.std(0) + 1e-6)
    idx = torch.argsort(spec, descending=True)[:k]
    bn = m.block3[1]
    with torch.no_grad():
        bn.running_mean[idx] += shift * bn.running_var[idx].sqrt()
    return m


FAST = dict(n_splits=5, bn_recalibration=False, relearn=False)


def cached_audit(cache, key, *args, **kwargs):
    from unlearnkit.audit import audit

    if key not in cache:
        with single_thread():
            cache[key] = audit(*args, **kwargs)
    return cache[key]
