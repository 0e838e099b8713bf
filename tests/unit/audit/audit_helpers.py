"""Helpers of the audit tests: constructed models whose truth is known, and a per-session audit cache."""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch

FORGET_CLASS = 3
#: the audit seed of the tests' audits (fixed: a test must repeat; an audit of a user's model draws a fresh one)
AUDIT_SEED = 11


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
    from unlearnkit.audit.constructed import noised as _noised

    return _noised(model, scale, seed)


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


FAST = dict(n_splits=2, bn_recalibration=False, head_refit=False, head_relearn=False, relearn=False,
            audit_seed=AUDIT_SEED)


def cached_audit(reports, key, *args, **kwargs):
    """``reports[key]``: the audit of ``args`` / ``kwargs``, computed once per session."""
    from unlearnkit.audit import audit

    if key not in reports:
        with single_thread():
            reports[key] = audit(*args, **kwargs)
    return reports[key]


# --- function-preserving reparametrisations of small_cnn (issue: "The verdict can be fooled") ---------
# Each returns a copy whose logits equal the model's (up to float rounding) but whose weights, and the
# features at the audit layers, differ: what a method author who wants a good score could hand in.

def _log_uniform(n, gen, lo=-2.0, hi=2.0):
    return 10.0 ** (lo + (hi - lo) * torch.rand(n, generator=gen, dtype=torch.float64))


def _bn_stages(m):
    """(BatchNorm, the layer that reads its ReLU output) pairs of small_cnn, and the fc1 -> fc pair."""
    return [(m.block1[1], m.block1[3]), (m.block1[4], m.block2[0]), (m.block2[1], m.block3[0]),
            (m.block3[1], m.fc1[0])]


def rescaled(model, seed=0):
    """Every BatchNorm channel's output multiplied by c > 0 (weight and bias), the next layer's input
    channel divided by c (ReLU and max/avg pooling commute with positive scaling); the same for the
    hidden units of fc1 and the head. Scales 10^U(-2, 2)."""
    m = copy.deepcopy(model).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for bn, nxt in _bn_stages(m):
            c = _log_uniform(bn.num_features, g)
            bn.weight.mul_(c)
            bn.bias.mul_(c)
            shape = (1, -1) + (1,) * (nxt.weight.dim() - 2)
            nxt.weight.div_(c.view(shape))
        lin, head = m.fc1[0], m.fc
        c = _log_uniform(lin.out_features, g)
        lin.weight.mul_(c[:, None])
        lin.bias.mul_(c)
        head.weight.div_(c[None, :])
    return m.float()


def permuted(model, seed=0):
    """Every conv's output channels (with their BatchNorm) and fc1's hidden units permuted, the next
    layer's inputs permuted to match."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    convs = [(m.block1[0], m.block1[1], m.block1[3]), (m.block1[3], m.block1[4], m.block2[0]),
             (m.block2[0], m.block2[1], m.block3[0]), (m.block3[0], m.block3[1], m.fc1[0])]
    with torch.no_grad():
        for conv, bn, nxt in convs:
            p = torch.randperm(conv.out_channels, generator=g)
            conv.weight.copy_(conv.weight[p])
            for t in (bn.weight, bn.bias, bn.running_mean, bn.running_var):
                t.copy_(t[p])
            nxt.weight.copy_(nxt.weight[:, p])
        lin, head = m.fc1[0], m.fc
        p = torch.randperm(lin.out_features, generator=g)
        lin.weight.copy_(lin.weight[p])
        lin.bias.copy_(lin.bias[p])
        head.weight.copy_(head.weight[:, p])
    return m


def _invertible(n, gen):
    """A random orthogonal matrix times a diagonal in [0.5, 2]: condition number <= 4."""
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=torch.float64))
    d = 0.5 + 1.5 * torch.rand(n, generator=gen, dtype=torch.float64)
    return q * d[None, :]


def mixed(model, seed=0):
    """Every audit layer's output mixed by an invertible matrix A (a 1x1 conv / linear layer appended
    to the stage), the layer that reads it multiplied by A^-1: channels become linear mixtures."""
    from torch import nn

    m = copy.deepcopy(model).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for stage, nxt in ((m.block1, m.block2[0]), (m.block2, m.block3[0]), (m.block3, m.fc1[0]),
                           (m.fc1, m.fc)):
            n = nxt.weight.shape[1]
            a = _invertible(n, g)
            flat = stage is m.fc1  # the other stages output feature maps: mix channels with a 1x1 conv
            layer = nn.Linear(n, n, bias=False) if flat else nn.Conv2d(n, n, 1, bias=False)
            layer = layer.double()
            layer.weight.copy_(a.view(n, n, *([1, 1] if isinstance(layer, nn.Conv2d) else [])))
            stage.append(layer)
            inv = torch.linalg.inv(a)
            if isinstance(nxt, nn.Linear):
                nxt.weight.copy_(nxt.weight @ inv)
            else:
                nxt.weight.copy_(torch.einsum("oihw,ij->ojhw", nxt.weight, inv))
    return m.float()


def pow2_rescaled(model, seed=0, bound=100):
    """The channels of block1's first and block2's BatchNorm (weight and bias) and every fc1 unit multiplied by
    2^e, e uniform in -bound..bound, the next layer's input divided by it: exact in float32, so the logits are
    bit-identical (no weight carries two such factors: 2^±200 would leave float32's range)."""
    m = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)

    def factors(n):
        return torch.pow(torch.tensor(2.0, dtype=torch.float64),
                         torch.randint(-bound, bound + 1, (n,), generator=g).double()).float()

    with torch.no_grad():
        for bn, nxt in _bn_stages(m)[0::2]:  # block1's first and block2's: their next layers are not scaled
            c = factors(bn.num_features)
            bn.weight.mul_(c)
            bn.bias.mul_(c)
            nxt.weight.div_(c.view((1, -1) + (1,) * (nxt.weight.dim() - 2)))
        c = factors(m.fc1[0].out_features)
        m.fc1[0].weight.mul_(c[:, None])
        m.fc1[0].bias.mul_(c)
        m.fc.weight.div_(c[None, :])
    return m


REPARAMETRISATIONS = {"rescaled": rescaled, "permuted": permuted, "mixed": mixed, "pow2": pow2_rescaled}
