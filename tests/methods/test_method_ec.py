"""EC-specific behaviour (seed 001): depth weights, auxiliary modules on every stage and their removal,
the plug-in adding the EC loss to the base method's steps, and a staged timm Swin."""
from __future__ import annotations

import pytest
import torch

from unlearnkit import ForgetSpec, make_split
from unlearnkit.data.arrays import ArrayData, Augment
from unlearnkit.data.datasets import DatasetBundle
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods.ec import AUX, ECLoss, depth_weights
from unlearnkit.models.zoo import audit_layers, create_model


def _shapes(model):
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def test_depth_weights_linear_from_0_2_to_1():
    assert depth_weights(4) == pytest.approx([0.2, 0.2 + 0.8 / 3, 0.2 + 1.6 / 3, 1.0])
    assert depth_weights(1) == [1.0]


def test_aux_modules_on_every_stage_but_the_last(digits_original, digits_split):
    gen = torch.Generator().manual_seed(0)
    sample = next(digits_split.train_retain.batches(2))[0]
    ec = ECLoss(digits_original, sample, 10, proj_dim=16, weights=None, gen=gen, device="cpu")
    try:
        aux = getattr(digits_original, AUX)
        assert list(aux) == ["block1", "block2", "penultimate"]  # block3 is the last stage: the main path
        assert ec.weights == pytest.approx(depth_weights(3))
        xf, yf = next(digits_split.train_forget.batches(8))
        xr, yr = next(digits_split.train_retain.batches(8))
        loss = ec(digits_original, xf, yf, xr, yr, tau=0.7, ct_ratio=3.0, ce_ratio=1.0, single_class=True)
        loss.backward()
        assert torch.isfinite(loss)
        assert all(p.grad is not None for p in aux.parameters())  # every auxiliary head is trained
    finally:
        ECLoss.detach(digits_original)
        digits_original.zero_grad(set_to_none=True)
    assert not hasattr(digits_original, AUX)
    with pytest.raises(UserError, match="depth weights"):
        ECLoss(digits_original, sample, 10, proj_dim=16, weights=[1.0, 1.0], gen=gen, device="cpu")
    ECLoss.detach(digits_original)


def test_ec_returns_the_original_architecture(digits_original, digits_split):
    res = METHODS.get("ec")(epochs=1, lr=1e-2).unlearn(digits_original, digits_split, seed=0)
    assert _shapes(res.model) == _shapes(digits_original)
    assert not hasattr(res.model, AUX)
    changed = [k for k, v in res.model.state_dict().items()
               if v.is_floating_point() and not torch.equal(v, digits_original.state_dict()[k])]
    assert changed


def test_plugin_adds_the_ec_loss_to_every_base_step(digits_original, digits_split, monkeypatch):
    calls = []
    real = ECLoss.__call__

    def counting(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(ECLoss, "__call__", counting)
    cls = METHODS.get("ec+contrastive")
    m = cls(base={"epochs": 1, "lr": 1e-2}, batch_size=32)
    res = m.unlearn(digits_original, digits_split, seed=0)
    assert calls, "the EC loss was never added"
    steps = -(-len(digits_split.train_forget) // METHODS.get("contrastive")().batch_size)
    assert len(calls) >= steps  # at least once per step of the base method's first epoch
    assert res.history[-1] == {"plugin": "ec", "ec_weight": 1.0}
    assert _shapes(res.model) == _shapes(digits_original)


def _synthetic_rgb(n_per_class=24, k=4, size=32, seed=0):
    """A tiny 3-channel 32x32 dataset: class k has a brighter patch in quadrant k (learnable, no download)."""
    g = torch.Generator().manual_seed(seed)

    def make(n):
        y = torch.arange(k).repeat_interleave(n)
        x = torch.randint(0, 90, (len(y), 3, size, size), generator=g, dtype=torch.uint8)
        h = size // 2
        for c in range(k):
            r, q = divmod(c, 2)
            x[y == c, :, r * h:(r + 1) * h, q * h:(q + 1) * h] += 120
        return ArrayData(x, y, (0.5, 0.5, 0.5), (0.25, 0.25, 0.25))

    return DatasetBundle("synthetic_rgb", make(n_per_class), make(6), make(8), k, [str(c) for c in range(k)],
                         Augment())


def test_ec_on_a_timm_swin():
    """EC attaches to the stages of any staged model: here a tiny Swin-T layout (NHWC stage outputs)."""
    pytest.importorskip("timm")
    bundle = _synthetic_rgb()
    split = make_split(bundle, ForgetSpec(classes=(1,)))
    torch.manual_seed(0)
    swin = create_model("timm:swin_tiny_patch4_window7_224", num_classes=4, image_size=32, window_size=2,
                        embed_dim=24, depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1)).eval()
    stages = [n for n in audit_layers(swin) if n != "penultimate"]
    assert len(stages) == 4
    gen = torch.Generator().manual_seed(0)
    ECLoss(swin, next(split.train_retain.batches(2))[0], 4, proj_dim=16, weights=None, gen=gen, device="cpu")
    try:
        assert list(getattr(swin, AUX)) == stages[:-1] + ["penultimate"]
    finally:
        ECLoss.detach(swin)
    res = METHODS.get("ec")(epochs=1, lr=1e-3, batch_size=16).unlearn(swin, split, seed=0)
    assert _shapes(res.model) == _shapes(swin) and not hasattr(res.model, AUX)
    assert all(torch.isfinite(p).all() for p in res.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(res.model.parameters(), swin.parameters()))
