"""deep_reset (unlearnkit's own method): where the model is cut, what is kept and what is reset, the
kept BatchNorm statistics re-estimated on D_r, the cached path equal to running the prefix on every
batch, and the fall-back when the later layers read the input."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from unlearnkit.errors import UserError
from unlearnkit.methods import METHODS
from unlearnkit.methods.base import MethodData
from unlearnkit.methods.deep_reset import DeepReset, cached_activations, first_stage, split_at
from unlearnkit.models import zoo


def small_cnn():
    torch.manual_seed(0)
    return zoo.create_model("small_cnn", num_classes=4, in_channels=1, image_size=8, width=4, hidden=8)


def parts(retain):
    return MethodData(num_classes=4, retain=retain, forgotten_classes=(3,))


def retain_data(n=40, seed=0):
    from unlearnkit.data.arrays import ArrayData

    g = torch.Generator().manual_seed(seed)
    return ArrayData(torch.rand(n, 1, 8, 8, generator=g), torch.arange(n) % 3, (0.5,), (0.25,))


def run(method, model, retain, seed=0):
    return method._unlearn(copy.deepcopy(model), parts(retain), None, torch.device("cpu"),
                           torch.Generator().manual_seed(seed), False)


def test_cut_at_the_first_stage_keeps_it_and_resets_every_later_layer():
    model = small_cnn()
    x = torch.rand(2, 1, 8, 8)
    assert first_stage(model, x) == "block1"
    kept, reset = split_at(model, "block1", x)
    assert [n for n, _ in reset] == ["block2.0", "block2.1", "block3.0", "block3.1", "fc1.0", "fc"]
    assert model not in kept and model.block2 not in kept  # containers of reset layers keep their mode free
    assert {id(m) for m in model.block1.modules()} <= {id(m) for m in kept}


def test_kept_weights_stay_bn_statistics_come_from_retain_and_later_layers_are_fresh():
    model, retain = small_cnn(), retain_data()
    out = run(DeepReset(epochs=1, batch_size=16), model, retain).model
    assert torch.equal(out.block1[0].weight, model.block1[0].weight)
    assert torch.equal(out.block1[3].weight, model.block1[3].weight)
    # the first BatchNorm's running mean is the mean of the first convolution's output over D_r
    with torch.no_grad():
        conv = model.block1[0](retain.normalize(retain.x))
    assert torch.allclose(out.block1[1].running_mean, conv.mean((0, 2, 3)), atol=1e-5)
    assert torch.allclose(out.block1[1].running_var, conv.permute(1, 0, 2, 3).flatten(1).var(1), atol=1e-4)
    assert not torch.allclose(out.block3[0].weight, model.block3[0].weight)
    assert all(p.requires_grad for p in out.parameters())
    assert "forward" not in vars(out.block1)  # the cut's forward is restored


def test_cached_activations_give_the_weights_of_running_the_prefix_every_step():
    model, retain = small_cnn(), retain_data()
    cached = run(DeepReset(epochs=2, batch_size=16), model, retain)
    # augment=True with D_r's inactive augmentation: the same batches, the prefix run on each of them
    rerun = run(DeepReset(epochs=2, batch_size=16, augment=True), model, retain)
    assert cached.history[0]["cached"] and not rerun.history[0]["cached"]
    for (name, a), b in zip(cached.model.state_dict().items(), rerun.model.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-5), name


class InputSkip(nn.Module):
    """The classifier reads the input directly as well as the first stage: its output depends on more
    than the cut's output, so nothing may be cached."""

    def __init__(self):
        super().__init__()
        self.stage = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU())
        self.fc = nn.Linear(2 * 64 + 64, 4)

    def forward(self, x):
        return self.fc(torch.cat([self.stage(x).flatten(1), x.flatten(1)], 1))


def test_no_cache_when_the_later_layers_read_the_input():
    model, retain = InputSkip(), retain_data()
    x = retain.normalize(retain.x[:4])
    assert cached_activations(model, model.stage, retain, x, "cpu") is None
    res = run(DeepReset(keep="stage", epochs=1, batch_size=16), model, retain)
    assert not res.history[0]["cached"]
    assert torch.equal(res.model.stage[0].weight, model.stage[0].weight)


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage = nn.Conv2d(1, 1, 3, padding=1)
        self.fc = nn.Linear(64, 4)

    def forward(self, x):
        return self.fc(self.stage(self.stage(x)).flatten(1))


@pytest.mark.parametrize("model,keep,message", [
    (small_cnn(), "block9", "not a module"),
    (small_cnn(), "fc", "nothing with parameters runs after"),
    (Twice(), "stage", "runs 2 times"),
])
def test_bad_cuts_are_one_clear_error(model, keep, message):
    with pytest.raises(UserError, match=message):
        split_at(model, keep, torch.rand(2, 1, 8, 8))


def test_registered_with_its_alias_and_ours_in_its_paper_line():
    assert METHODS.get("DR") is DeepReset
    assert "own method" in DeepReset.paper
    m = DeepReset()
    assert (m.keep, m.epochs, m.batch_size, m.recalibrate_bn) == ("auto", 5, 64, True)


def test_distillation_from_cached_teacher_logits_equals_the_teacher_run_every_step():
    """With distill > 0 the original's logits ride along with the cached rows; running the frozen teacher on
    every batch instead (augment=True, D_r's augmentation inactive) must give the same weights."""
    model, retain = small_cnn(), retain_data()
    cached = run(DeepReset(epochs=2, batch_size=16, distill=1.0, temperature=2.0), model, retain)
    rerun = run(DeepReset(epochs=2, batch_size=16, distill=1.0, temperature=2.0, augment=True), model, retain)
    plain = run(DeepReset(epochs=2, batch_size=16), model, retain)
    for (name, a), b in zip(cached.model.state_dict().items(), rerun.model.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-5), name
    assert not torch.allclose(cached.model.fc.weight, plain.model.fc.weight)  # the term does act


def test_a_users_plain_sequential_model_through_the_python_api():
    """Any nn.Module: the first stage is found on a probe batch (here the first convolution), kept, and
    the rest is reset and refit."""
    import unlearnkit as uk

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(),
                        nn.Flatten(), nn.Linear(4 * 64, 3))
    x = torch.rand(60, 1, 8, 8)
    y = torch.arange(60) % 3
    f = y == 2
    out = uk.unlearn(net, "deep_reset", forget=(x[f], y[f]), retain=(x[~f], y[~f]), epochs=1, batch_size=16).model
    assert torch.equal(out[0].weight, net[0].weight)
    assert not torch.equal(out[2].weight, net[2].weight) and not torch.equal(out[5].weight, net[5].weight)
