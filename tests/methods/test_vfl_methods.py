"""Methods that only need a model and data run unchanged on a VFL model (conformance properties on a
representative subset: losses on logits, head surgery, stage taps, per-sample gradients, Mirage's
variants), and the result still saves and reloads as a K-party model."""
from __future__ import annotations

import pytest
import torch

from unlearnkit import load_checkpoint, save_checkpoint
from unlearnkit.methods import METHODS
from unlearnkit.models.vfl import VFLModel

SUBSET = ["finetune", "gradient_ascent", "random_label", "salun", "scrub", "ssd", "fisher_forgetting",
          "influence", "boundary_shrink", "boundary_expand", "unsir", "purge", "ec", "finetune_mirage",
          "boundary_mirage", "ssd_mirage", "fisher_mirage", "amnesiac_mirage", "unsir_mirage", "target"]


def fast(name):
    """The method's test preset: loops shortened, fewer samples where its cost is per sample."""
    return METHODS.get(name).from_preset("test")


def test_subset_covers_every_kind_of_model_access():
    """head_of (BE, FF), stage taps (EC, PURGE), per-sample gradients (IU), the VFL-only target."""
    assert all(n in METHODS.names() for n in SUBSET)


@pytest.mark.parametrize("name", SUBSET)
def test_method_runs_on_a_vfl_model(name, digits_split, digits_vfl_original, tmp_path):
    before = {k: v.clone() for k, v in digits_vfl_original.state_dict().items()}
    a = fast(name).unlearn(digits_vfl_original, digits_split, original=digits_vfl_original, seed=1).model
    b = fast(name).unlearn(digits_vfl_original, digits_split, original=digits_vfl_original, seed=1).model
    assert all(torch.equal(before[k], v) for k, v in digits_vfl_original.state_dict().items()), "input mutated"
    sa, sb = a.state_dict(), b.state_dict()
    assert {k: v.shape for k, v in sa.items()} == {k: v.shape for k, v in before.items()}
    assert all(torch.equal(sa[k], sb[k]) for k in sa), "same seed, different weights"
    assert all(torch.isfinite(p).all() for p in a.parameters())
    assert all(not (m._forward_hooks or m._forward_pre_hooks) for m in a.modules())
    save_checkpoint(a, tmp_path / "m.pt", {})
    loaded, _ = load_checkpoint(tmp_path / "m.pt")
    assert isinstance(loaded, VFLModel) and loaded.bounds == digits_vfl_original.bounds
    x = next(digits_split.test.batches(16))[0]
    assert torch.equal(loaded.eval()(x), a.eval()(x))
