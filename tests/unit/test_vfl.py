"""The VFL setting: party splits, the K-party model, its taps, checkpoints, flat data and config."""
from __future__ import annotations

import pytest
import torch

from unlearnkit import audit_layers, capture, create_model, load_checkpoint, load_dataset, save_checkpoint
from unlearnkit.config import RunConfig
from unlearnkit.data.vfl import party_bounds
from unlearnkit.errors import UserError
from unlearnkit.models.vfl import VFLModel, transmitted_layers


def test_party_bounds_give_the_last_party_the_remainder():
    assert party_bounds(32, 2) == [(0, 16), (16, 32)]
    assert party_bounds(28, 3) == [(0, 9), (9, 18), (18, 28)]
    assert party_bounds(64, 8)[-1] == (56, 64)
    with pytest.raises(UserError, match="parties"):
        party_bounds(5, 8)


def test_each_bottom_reads_only_its_own_columns():
    torch.manual_seed(0)
    m = create_model("vfl", num_classes=10, in_channels=1, image_size=28, parties=4, bottom_kwargs={"width": 8}).eval()
    assert m.bounds == [(0, 7), (7, 14), (14, 21), (21, 28)]
    x = torch.randn(3, 1, 28, 28)
    y = x.clone()
    y[..., 14:21] += 1.0  # change party 2's columns only
    with torch.no_grad():
        a, b = m.embed(x), m.embed(y)
    assert [torch.equal(p, q) for p, q in zip(a, b)] == [True, True, False, True]


def test_taps_transmitted_layers_and_layerwise_joins():
    torch.manual_seed(0)
    m = create_model("vfl", num_classes=10, in_channels=1, image_size=28, parties=2, bottom_kwargs={"width": 8}).eval()
    assert audit_layers(m) == ["block_a", "block_b", "block_c", "party0", "party1", "embedding", "penultimate"]
    assert transmitted_layers(m) == ["party0", "party1", "embedding"]
    x = torch.randn(5, 1, 28, 28)
    with torch.no_grad(), capture(m, audit_layers(m)) as f:
        m(x)
    emb = torch.cat(m.embed(x), 1)
    assert torch.allclose(f["embedding"], emb) and torch.allclose(f["party1"], emb[:, 32:])
    assert torch.allclose(f["block_c"], f["embedding"], atol=1e-6)  # Mirage: block C pooled == final
    with torch.no_grad():
        part0 = m.bottoms[0].features[:6](x[..., :14]).mean((2, 3))
        part1 = m.bottoms[1].features[:6](x[..., 14:]).mean((2, 3))
    assert torch.allclose(f["block_a"], torch.cat([part0, part1], 1), atol=1e-6)  # pooled per party, joined
    with torch.no_grad(), capture(m, ["block_a", "party0"], pooled=False) as g:
        m(x)
    assert g["block_a"].shape == (5, 8, 28, 28) and g["party0"].shape == (5, 32)  # maps side by side


def test_checkpoint_keeps_the_party_structure(tmp_path):
    torch.manual_seed(0)
    m = create_model("vfl", num_classes=10, in_channels=1, image_size=28, parties=3, bottom="small_cnn",
                     bottom_kwargs={"width": 4, "hidden": 16}).eval()
    save_checkpoint(m, tmp_path / "m.pt", {"kind": "test"})
    loaded, meta = load_checkpoint(tmp_path / "m.pt")  # torch.load(weights_only=True) inside
    assert isinstance(loaded, VFLModel) and loaded.parties == 3 and loaded.bounds == m.bounds
    assert meta["model"]["kwargs"]["bottom"] == "small_cnn"
    x = torch.randn(2, 1, 28, 28)
    assert torch.equal(loaded.eval()(x), m(x))
    assert audit_layers(loaded) == ["block1", "block2", "block3", "party0", "party1", "party2", "embedding",
                                    "penultimate"]


def test_too_narrow_parties_fail_with_one_clear_line():
    with pytest.raises(UserError, match="party 0's slice of shape 1x28x3"):
        create_model("vfl", num_classes=10, in_channels=1, image_size=28, parties=8)
    with pytest.raises(UserError, match="cannot itself be a VFL"):
        create_model("vfl", num_classes=10, in_channels=1, image_size=28, bottom="vfl")


def test_digits_flat_is_digits_as_standardised_features_split_by_feature():
    flat, digits = load_dataset("digits_flat"), load_dataset("digits")
    assert flat.train.shape == (64, 1, 1) and torch.equal(flat.train.y, digits.train.y)
    assert torch.equal(flat.test.x.flatten(1), digits.test.x.flatten(1))
    xb, _ = next(flat.train.batches(len(flat.train)))
    assert xb.flatten(1).mean(0).abs().max() < 1e-4  # each feature standardised on train
    m = create_model("vfl", num_classes=10, in_channels=64, image_size=1, parties=3)
    assert m.bounds == [(0, 21), (21, 42), (42, 64)] and m.axis == 1
    assert audit_layers(m)[0] == "hidden1" and m(xb[:4]).shape == (4, 10)


@pytest.mark.parametrize("kw, match", [({"setting": "federated"}, "standard, vfl"),
                                       ({"setting": "vfl", "parties": 0}, "parties"),
                                       ({"parties": 4}, "--setting vfl")])
def test_bad_settings_are_one_line_errors(kw, match):
    with pytest.raises(UserError, match=match):
        RunConfig(**kw)


def test_default_models_per_setting():
    assert RunConfig().model == "small_cnn"
    assert RunConfig(setting="vfl").model is None  # resolved from the data: mirage_bottom or mlp
