"""canonicalize (issue 28, Deliver 3): the canonical copy computes the model's function, and every
function-preserving positive per-unit rescaling (up to 2**+-60) and permutation of hidden units gives the same
canonical copy, so few-shot SGD relearning on it is reparametrisation-invariant (and on raw weights it is not)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import unlearnkit
from unlearnkit.audit.canonical import canonicalize
from unlearnkit.audit.relearning import relearn_copy


def _randomise_bn(model: nn.Module, seed: int) -> nn.Module:
    """Non-trivial BatchNorm parameters and running statistics (an untrained model has gamma 1, beta 0, mean 0,
    var 1, which would hide mistakes); eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.modules.batchnorm._BatchNorm):
                n = mod.num_features
                mod.weight.copy_(torch.randn(n, generator=g))
                mod.bias.copy_(torch.randn(n, generator=g))
                mod.running_mean.copy_(0.3 * torch.randn(n, generator=g))
                mod.running_var.copy_(0.2 + torch.rand(n, generator=g))
    return model.eval()


def _mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 12), nn.LeakyReLU(0.1), nn.Dropout(0.2),
                      nn.Linear(12, 4)).eval()
    return m, [(m[0], None, m[2]), (m[2], None, m[5])], torch.randn(32, 6)


def _zoo_mlp():
    torch.manual_seed(0)
    m = _randomise_bn(unlearnkit.create_model("mlp", num_classes=4, in_features=6, hidden=16, embedding=8), 1)
    f = m.features
    return m, [(f[1], f[2], f[5]), (f[5], f[6], m.fc)], torch.randn(32, 6, 1, 1)


def _small_cnn():
    torch.manual_seed(0)
    m = _randomise_bn(unlearnkit.create_model("small_cnn", num_classes=10, in_channels=1, image_size=8), 1)
    pairs = [(m.block1[0], m.block1[1], m.block1[3]), (m.block1[3], m.block1[4], m.block2[0]),
             (m.block2[0], m.block2[1], m.block3[0]), (m.block3[0], m.block3[1], m.fc1[0]), (m.fc1[0], None, m.fc)]
    return m, pairs, torch.randn(16, 1, 8, 8)


def _flat_cnn():
    """Conv (with bias, no BatchNorm) -> ReLU -> max-pool -> flatten -> Linear: each channel feeds 16 columns."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 8),
                      nn.ReLU(), nn.Linear(8, 3)).eval()
    return m, [(m[0], None, m[4]), (m[4], None, m[6])], torch.randn(16, 1, 8, 8)


MODELS = {"mlp": _mlp, "zoo_mlp": _zoo_mlp, "small_cnn": _small_cnn, "flat_cnn": _flat_cnn}


def transformed(model: nn.Module, pairs, seed: int, extreme: bool = True) -> nn.Module:
    """A copy computing the same function: per hidden unit a random power-of-two scale (2**60 and 2**-60 on two
    units when ``extreme``) on its output (BatchNorm's gamma and beta where there is one; there the conv/linear
    row is also scaled by 2**k, k in [-3, 3], its running mean by 2**k and (var + eps) by 4**k), undone in the next
    layer's input columns; then the units permuted, the next layer's inputs to match."""
    m = copy.deepcopy(model).double()
    names = {mod: name for name, mod in model.named_modules()}
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w, bn, nxt in pairs:
            w, nxt = m.get_submodule(names[w]), m.get_submodule(names[nxt])
            n = w.weight.shape[0]
            s = 2.0 ** torch.randint(-8, 9, (n,), generator=g).double()
            if extreme:
                s[:2] = torch.tensor([2.0 ** 60, 2.0 ** -60])
            cols = nxt.weight.view(nxt.weight.shape[0], n, -1)
            cols.div_(s[None, :, None])
            if bn is None:
                w.weight.mul_(s.view(-1, *[1] * (w.weight.dim() - 1)))
                w.bias.mul_(s)
            else:
                bn = m.get_submodule(names[bn])
                t = 2.0 ** torch.randint(-3, 4, (n,), generator=g).double()
                w.weight.mul_(t.view(-1, *[1] * (w.weight.dim() - 1)))
                if w.bias is not None:
                    w.bias.mul_(t)
                bn.running_mean.mul_(t)
                bn.running_var.copy_(t ** 2 * (bn.running_var + bn.eps) - bn.eps)
                bn.weight.mul_(s)
                bn.bias.mul_(s)
            p = torch.randperm(n, generator=g)
            for tensor in (w.weight, w.bias) + ((bn.weight, bn.bias, bn.running_mean, bn.running_var) if bn else ()):
                if tensor is not None:
                    tensor.copy_(tensor[p])
            cols.copy_(cols[:, p])
    return m.float().eval()


def _logits(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(x)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_canonical_copy_computes_the_same_logits_and_leaves_the_model_alone(name):
    model, _, x = MODELS[name]()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    canon, reason = canonicalize(model)
    assert reason is None
    assert canon is not model and not canon.training
    assert all(p.dtype == torch.float32 for p in canon.parameters())
    assert _close(_logits(canon, x), _logits(model, x))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    changed = [k for k, v in canon.state_dict().items() if not torch.equal(v, before[k])]
    assert changed  # it did rewrite the parameters


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_rescaled_and_permuted_copies_have_the_same_canonical_copy(name, seed):
    model, pairs, x = MODELS[name]()
    other = transformed(model, pairs, seed)
    assert _close(_logits(other, x), _logits(model, x))  # the transformation preserves the function ...
    assert not _close(other.state_dict()[next(iter(other.state_dict()))],
                      model.state_dict()[next(iter(model.state_dict()))])  # ... and changes the weights
    a, b = canonicalize(model)[0].state_dict(), canonicalize(other)[0].state_dict()
    for key in a:
        if a[key].is_floating_point():
            assert torch.allclose(b[key], a[key], rtol=1e-4, atol=1e-5 * max(1.0, float(a[key].abs().max()))), key
    assert _close(_logits(canonicalize(other)[0], x), _logits(model, x))


def _batch(x: torch.Tensor, classes: int) -> torch.Tensor:
    return torch.arange(len(x)) % classes


@pytest.mark.parametrize("name", ["small_cnn", "mlp"])
def test_sgd_relearning_on_canonical_copies_is_invariant_and_on_raw_weights_is_not(name):
    model, pairs, x = MODELS[name]()
    y = _batch(x, _logits(model, x).shape[1])
    other = transformed(model, pairs, 0)
    canon = [relearn_copy(canonicalize(m)[0], x, y, 10, 0.01) for m in (model, other)]
    la, lb = _logits(canon[0], x), _logits(canon[1], x)
    assert not _close(la, _logits(model, x))  # the 10 steps did move the model
    assert _close(lb, la)
    assert torch.equal(lb.argmax(1), la.argmax(1))
    raw = [_logits(relearn_copy(m, x, y, 10, 0.01), x) for m in (model, other)]
    assert not (torch.isfinite(raw[1]).all() and _close(raw[1], raw[0]))


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(4, 8)
        self.body = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.stem(x))
        return self.fc(h + self.body(h))


@pytest.mark.parametrize("build,where", [
    (lambda: unlearnkit.create_model("resnet18", num_classes=3, in_channels=1, image_size=8, width=4),
     "residual connection at layer1.0"),
    (_Residual, "residual connection at body"),
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)), "GELU"),
    (lambda: nn.Sequential(nn.Conv2d(2, 4, 3, groups=2), nn.ReLU(), nn.Conv2d(4, 2, 1)), "grouped convolution"),
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.BatchNorm1d(8), nn.Linear(8, 2)), "BatchNorm not"),
])
def test_unsupported_architectures_return_a_reason_and_an_unchanged_copy(build, where):
    torch.manual_seed(0)
    model = build()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    copy_, reason = canonicalize(model)
    assert reason is not None and where in reason and "not decided" in reason
    assert copy_ is not model
    assert before.keys() == copy_.state_dict().keys()
    assert all(torch.equal(before[k], v) for k, v in copy_.state_dict().items())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_dead_units_are_kept_last_with_zero_outgoing_columns():
    model, pairs, x = _mlp()
    with torch.no_grad():
        model[0].weight[3].zero_()
        model[0].bias[3].zero_()
        model[2].weight[:, 3] = 5.0  # never reaches the output: unit 3 is always 0
    canon, _ = canonicalize(model)
    assert torch.equal(canon[0].weight[-1], torch.zeros(6)) and float(canon[0].bias.detach()[-1]) == 0.0
    assert torch.equal(canon[2].weight[:, -1], torch.zeros(12))
    assert torch.allclose(canon[0].weight[:-1].norm(dim=1) ** 2 + canon[0].bias[:-1] ** 2, torch.ones(15))
    assert _close(_logits(canon, x), _logits(model, x))


def test_channels_last_weights_are_canonicalised_too():
    model, pairs, x = _small_cnn()
    last = copy.deepcopy(model).to(memory_format=torch.channels_last)
    a, b = canonicalize(model)[0].state_dict(), canonicalize(last)[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
