"""BE: widen to K+1, train D_f to the shadow class, prune (original) or keep it (SalUn variant)."""
import copy

import torch

from unlearnkit.evaluation import evaluate
from unlearnkit.methods import METHODS
from unlearnkit.methods.boundary_expand import widen_head


def test_widen_copies_rows(digits_original):
    m = copy.deepcopy(digits_original)
    k = widen_head(m, "fc", torch.Generator().manual_seed(0))
    assert k == 10 and m.fc.out_features == 11
    assert torch.equal(m.fc.weight[:10], digits_original.fc.weight)
    assert torch.equal(m.fc.bias[:10], digits_original.fc.bias)


def test_pruned_keeps_k_outputs(digits_split, digits_original):
    res = METHODS.get("BE").from_preset("small", epochs=1).unlearn(digits_original, digits_split, seed=0)
    assert res.model.fc.out_features == 10
    assert res.model(digits_split.train_forget.normalize(digits_split.train_forget.x[:2])).shape == (2, 10)


def test_unpruned_has_k_plus_one_outputs_and_evaluates(digits_split, digits_original):
    res = METHODS.get("BE").from_preset("small", prune=False).unlearn(digits_original, digits_split, seed=0)
    assert res.model.fc.out_features == 11
    assert res.model.unlearnkit_spec["num_classes"] == 11
    assert digits_original.unlearnkit_spec["num_classes"] == 10
    with torch.no_grad():
        pred = res.model(digits_split.train_forget.normalize(digits_split.train_forget.x)).argmax(1)
    assert (pred == 10).float().mean() > 0.5  # forget samples go to the shadow class
    metrics = evaluate(res.model, digits_split)  # argmax over all K+1 logits
    assert metrics["forget_acc"] < 50 and 0 <= metrics["retain_acc"] <= 100
