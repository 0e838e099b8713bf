"""SalUn: global top-r saliency mask; masked-out weights stay at theta0, their momentum at zero."""
import copy

import torch
from torch import nn

from unlearnkit.methods import METHODS
from unlearnkit.methods.salun import _MaskedUpdate, saliency_mask


def test_mask_ratio_is_exact_and_global(digits_split, digits_original):
    model = copy.deepcopy(digits_original)
    n = sum(p.numel() for p in model.parameters())
    for r in (0.1, 0.5, 1.0):
        mask = saliency_mask(model, digits_split.train_forget, 64, "cpu", r)
        assert set(mask) == {k for k, _ in model.named_parameters()}
        assert sum(int(m.sum()) for m in mask.values()) == int(n * r)
    # a global ranking: some tensors are far above / below the 50 % average
    mask = saliency_mask(model, digits_split.train_forget, 64, "cpu", 0.5)
    fractions = [float(m.mean()) for m in mask.values()]
    assert max(fractions) > 0.6 and min(fractions) < 0.4


def test_mask_selects_the_largest_gradient_magnitudes():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    from unlearnkit.data.arrays import ArrayData

    data = ArrayData(torch.rand(10, 1, 2, 2), torch.randint(0, 3, (10,)), (0.5,), (0.25,))
    mask = saliency_mask(model, data, 4, "cpu", 0.4)
    model.zero_grad()
    for x, y in data.batches(4):  # the same sum of per-batch gradients
        (-nn.functional.cross_entropy(model(x), y)).backward()
    g = torch.cat([p.grad.abs().flatten() for p in model.parameters()])
    m = torch.cat([t.flatten() for t in mask.values()]).bool()
    assert g[m].min() >= g[~m].max() - 1e-6


def test_masked_update_resets_weights_and_zeroes_momentum():
    lin = nn.Linear(3, 2)
    mask = {"weight": torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]), "bias": torch.tensor([1.0, 0.0])}
    theta0 = {k: v.detach().clone() for k, v in lin.named_parameters()}
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9, weight_decay=0.5)
    masked = _MaskedUpdate(lin, mask, opt)
    for _ in range(3):
        loss = lin(torch.randn(4, 3)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        masked("grad")
        opt.step()
        masked("param")
    for name, p in lin.named_parameters():
        off = mask[name] == 0
        assert torch.equal(p.detach()[off], theta0[name][off])
        assert (opt.state[p]["momentum_buffer"][off] == 0).all()
        assert not torch.equal(p.detach()[~off], theta0[name][~off])


def test_unlearned_model_keeps_masked_out_weights_at_theta0(digits_split, digits_original):
    m = METHODS.get("SalUn").from_preset("small", epochs=1)
    res = m.unlearn(digits_original, digits_split, seed=0)
    mask = saliency_mask(copy.deepcopy(digits_original), digits_split.train_forget, m.batch_size, "cpu",
                         m.mask_ratio)
    orig = dict(digits_original.named_parameters())
    changed = 0
    for name, p in res.model.named_parameters():
        off = mask[name] == 0
        assert torch.equal(p.detach()[off], orig[name].detach()[off]), name
        changed += int((p.detach()[~off] != orig[name].detach()[~off]).sum())
    assert changed > 0
    assert abs(res.history[0]["mask_fraction"] - 0.5) < 1e-3
