"""Target (few-shot VFL label unlearning): Mirage's public sets and mixup ascent, LUV's pairs and
gradient averaging, and the VFL-only contract."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from unlearnkit import create_model
from unlearnkit.data.arrays import ArrayData
from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.target import luv_group_means, luv_pairs, mixup_ascent_loss, within_class_mixup


def labelled(counts: dict[int, int], features: int = 8, seed: int = 0) -> ArrayData:
    g = torch.Generator().manual_seed(seed)
    y = torch.cat([torch.full((n,), c) for c, n in counts.items()])
    return ArrayData(torch.rand(len(y), features, 1, 1, generator=g), y, (0.0,) * features, (1.0,) * features)


def test_mirage_public_sets_are_40_per_forgotten_and_per_first_five_retained_labels():
    forget = labelled({0: 60})
    retain = labelled({c: 50 for c in range(1, 10)}, seed=1)
    data = MethodData(num_classes=10, forget=forget, retain=retain, forgotten_classes=(0,))
    pub_u, pub_r = METHODS.get("target")()._public_sets(data, torch.Generator().manual_seed(0))
    assert len(pub_u) == 40 and set(pub_u.y.tolist()) == {0}
    assert len(pub_r) == 200 and torch.bincount(pub_r.y, minlength=10).tolist() == [0] + [40] * 5 + [0] * 4
    assert len(set(pub_u.index.tolist())) == 40  # distinct samples, drawn at random
    again, _ = METHODS.get("target")()._public_sets(data, torch.Generator().manual_seed(1))
    assert set(again.index.tolist()) != set(pub_u.index.tolist())


def test_mixup_ascent_loss_is_soft_ce_on_mixed_party_embeddings():
    torch.manual_seed(0)
    model = create_model("vfl", num_classes=3, in_channels=8, image_size=1, parties=2, bottom="mlp").eval()
    x, y = torch.randn(6, 8, 1, 1), torch.tensor([0, 0, 1, 2, 1, 0])
    perm, lam = torch.tensor([3, 0, 5, 1, 2, 4]), 0.3
    got = mixup_ascent_loss(model, x, y, lam, perm, 3)
    h0, h1 = model.bottoms[0](x[:, :4]), model.bottoms[1](x[:, 4:])  # party k holds its features only
    mixed = torch.cat([lam * h0 + (1 - lam) * h0[perm], lam * h1 + (1 - lam) * h1[perm]], 1)
    soft = lam * F.one_hot(y, 3) + (1 - lam) * F.one_hot(y[perm], 3)
    assert torch.allclose(got, -(soft * F.log_softmax(model.top(mixed), 1)).sum(1).mean())


def test_mirage_ascent_alone_raises_the_forget_loss(digits_split, digits_vfl_original):
    """Ascent only (no retained public labels): the forget CE must go up, descent would lower it."""
    def forget_ce(m):
        m.eval()
        with torch.no_grad():
            return F.cross_entropy(m(next(digits_split.train_forget.batches(1000))[0]),
                                   digits_split.train_forget.y).item()

    m = METHODS.get("target").from_preset("small", epochs=1, public_retain_classes=0)  # Mirage's lr 0.01
    res = m.unlearn(digits_vfl_original, digits_split, seed=0)
    # measured: 0.009 -> 0.28 (one ascent step on the 40 public samples); a descent step would lower it
    assert forget_ce(res.model) > 10 * forget_ce(copy.deepcopy(digits_vfl_original))
    assert res.history[0]["public_forget"] == 40 and res.history[0]["public_retain"] == 0


def test_luv_pairs_every_same_class_pair_with_three_lambdas_in_luv_order():
    i, j, lam, spans = luv_pairs(torch.tensor([3, 3, 3, 3]))
    assert len(i) == 3 * 4 * 3 // 2
    assert list(zip(i[:6].tolist(), j[:6].tolist(), lam[:6].tolist())) == [
        (0, 1, 0.25), (0, 1, 0.5), (0, 1, 0.75), (0, 2, 0.25), (0, 2, 0.5), (0, 2, 0.75)]
    assert spans == [(0, 18)]
    i, j, _, spans = luv_pairs(torch.tensor([5, 2, 5, 2, 2]))
    y = torch.tensor([5, 2, 5, 2, 2])
    assert torch.equal(y[i], y[j])  # pairs never cross classes
    assert spans == [(0, 9), (9, 3)]  # class 2 (3 samples -> 3 pairs), then class 5 (1 pair)


def test_luv_group_means_average_consecutive_row_groups():
    grads = torch.arange(18, dtype=torch.float32).view(18, 1)
    out = luv_group_means(grads, 4)  # groups of ceil(18 / 4) = 5 rows
    assert out.flatten().tolist() == [2.0, 7.0, 12.0, 16.0]


def test_within_class_mixup_mixes_only_classmates_alike_for_every_party():
    h0, h1 = torch.eye(4), 2 * torch.eye(4)
    y = torch.tensor([0, 1, 0, 2])
    m0, m1 = within_class_mixup([h0, h1], y, torch.Generator().manual_seed(0))
    assert torch.equal(m0[[1, 3]], h0[[1, 3]])          # lone samples untouched
    assert torch.allclose(m1, 2 * m0)                    # same lambda and permutation per party
    assert torch.count_nonzero(m0[[0, 2]][:, [1, 3]]) == 0  # only samples 0 and 2 were mixed


def test_luv_variant_runs_and_keeps_shapes(digits_split, digits_vfl_original):
    m = METHODS.get("target")(variant="luv", luv_epochs=1)
    res = m.unlearn(digits_vfl_original, digits_split, seed=0)
    assert res.history == [{"epoch": 1, "few_shot": 40, "descent": 27}]
    before, after = digits_vfl_original.state_dict(), res.model.state_dict()
    assert {k: v.shape for k, v in before.items()} == {k: v.shape for k, v in after.items()}
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_target_refuses_a_model_that_is_not_vfl(digits_split, digits_original):
    with pytest.raises(UserError, match="vertical federated"):
        METHODS.get("target")(epochs=1).unlearn(digits_original, digits_split, seed=0)
    with pytest.raises(UserError, match="variant"):
        METHODS.get("target")(variant="nope")._unlearn(create_model("vfl", 10, 1, 8), None, None, "cpu", None, False)
