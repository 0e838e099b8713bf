"""K references trained together (``unlearnkit.batched``) against the same trained one after another.

Two claims, two kinds of test: (1) model k of a batched training is the model ``loop.fit`` trains with
seed k, up to float rounding: checked weight by weight after a few steps (before training's chaos
amplifies rounding); (2) longer trainings are distributed like sequential ones: accuracies of batched
references against the spread of sequential ones of other seeds, and every batched model differs from
the others. Plus the cache wiring (``training.reference_models``), resuming, and the fallback.
"""
from __future__ import annotations

import copy
import statistics

import pytest
import torch
from torch import nn

from unlearnkit.batched import Stack, Wide, batch_support, engine_for, fit_batched
from unlearnkit.data.arrays import ArrayData, Augment
from unlearnkit.loop import Recipe, fit
from unlearnkit.models.zoo import create_model
from unlearnkit.training import reference_key, reference_model, reference_models


def _toy(n: int = 200) -> ArrayData:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 1, 8, 8), dtype=torch.uint8, generator=g)
    return ArrayData(x, torch.randint(0, 10, (n,), generator=g), (0.5,), (0.25,))


def _cnn(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return create_model("small_cnn", num_classes=10, in_channels=1, image_size=8)


def accuracy_of(model: nn.Module, part: ArrayData) -> float:
    model.eval()
    with torch.no_grad():
        return 100.0 * float((model(part.normalize(part.x)).argmax(1) == part.y).float().mean())


def _max_diff(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(sa[k].shape == sb[k].shape for k in sa)
    assert all(torch.equal(sa[k], sb[k]) for k in sa if not sa[k].is_floating_point())  # num_batches_tracked
    return max(float((sa[k] - sb[k]).abs().max()) for k in sa if sa[k].is_floating_point())


@pytest.fixture
def default_dtype(request):
    old = torch.get_default_dtype()
    torch.set_default_dtype(request.param)
    yield request.param
    torch.set_default_dtype(old)


@pytest.mark.parametrize(("engine", "optimizer", "default_dtype", "tol"),
                         [(Wide, "sgd", torch.float32, 1e-4), (Stack, "sgd", torch.float32, 1e-4),
                          (Wide, "adam", torch.float64, 1e-9)], indirect=["default_dtype"])
def test_each_batched_model_is_its_sequential_training_up_to_rounding(engine, optimizer, default_dtype, tol):
    """8 steps with crop and flip augmentation: model k of the batch equals ``fit(seed=k)`` up to rounding
    (measured here: about 1e-7 or less with SGD in float32, 1e-15 or less with Adam in float64), with either
    engine: the wide model (grouped layers) and the stacked one (vmap). Adam is compared in float64:
    in float32 it divides gradients of about its eps (1e-8) by their own size, which turns float32 rounding
    into differences of 1e-4 after 8 steps (measured); in float64 the same steps agree to 1e-15, which a wrong
    data order, initialisation, gradient or BatchNorm statistic could not (checked below: a swapped seed)."""
    data, aug = _toy(), Augment(crop_padding=1, hflip=True)
    recipe = Recipe(optimizer=optimizer, lr=0.05 if optimizer == "sgd" else 1e-3, epochs=2, batch_size=64)
    seeds = [3, 7]
    batched = [_cnn(s) for s in seeds]
    states = fit_batched(batched, data, recipe, aug, seeds=seeds, progress=False, engine=engine)
    for k, seed in enumerate(seeds):
        alone = _cnn(seed)
        state = fit(alone, data, recipe, aug, seed=seed, progress=False)
        assert _max_diff(alone, batched[k]) < tol
        assert [h["acc"] for h in state.history] == [h["acc"] for h in states[k].history]
        assert [h["loss"] for h in state.history] == pytest.approx([h["loss"] for h in states[k].history], rel=1e-5)
    swapped = _cnn(seeds[0])
    fit(swapped, data, recipe, aug, seed=seeds[1], progress=False)  # same init, the other model's data order
    assert _max_diff(swapped, batched[0]) > 1e-3


def test_resumed_batched_training_equals_an_uninterrupted_one_and_fit_resumes_its_states():
    data, aug = _toy(), Augment(crop_padding=1)
    recipe = Recipe(lr=0.05, epochs=2, batch_size=64)
    seeds = [1, 2]
    whole = [_cnn(s) for s in seeds]
    fit_batched(whole, data, recipe, aug, seeds=seeds, progress=False)
    saved: dict[int, dict] = {}
    fit_batched([_cnn(s) for s in seeds], data, Recipe(lr=0.05, epochs=2, batch_size=64), aug, seeds=seeds,
                progress=False, on_epoch=lambda k, st: saved.setdefault(k, copy.deepcopy(st)))
    assert [saved[k]["epoch"] for k in (0, 1)] == [1, 1]
    resumed = [_cnn(s) for s in seeds]
    fit_batched(resumed, data, recipe, aug, seeds=seeds, progress=False, resumes=[saved[0], saved[1]])
    alone = _cnn(seeds[1])
    fit(alone, data, recipe, aug, seed=seeds[1], progress=False, resume=saved[1])  # the loop reads its format
    for k in (0, 1):
        assert _max_diff(whole[k], resumed[k]) == 0.0
    assert _max_diff(whole[1], alone) < 1e-4


def test_batched_references_are_distributed_like_sequential_ones(digits_split):
    """4 retrains on digits without class 3, trained together (seeds 10..13), against 4 trained one after
    another (seeds 0..3), 4 epochs each. Bound: the batched mean accuracy within 4 standard errors of the
    difference of means (the two groups' seed spreads) plus 1.5 points (a few of the 360 test images: seeds
    that happen to agree must not make the bound vanish); a batched path that trained on the wrong rows,
    mixed the models' gradients or did not train falls far outside it (forget accuracy near 90 %, or test
    accuracy near chance)."""
    recipe = Recipe(lr=0.05, epochs=4, batch_size=64)
    data, aug, split = digits_split.retrain_data, digits_split.dataset.augment, digits_split
    sequential = []
    for seed in range(4):
        m = _cnn(seed)
        fit(m, data, recipe, aug, seed=seed, progress=False)
        sequential.append(m)
    batched = [_cnn(s) for s in range(10, 14)]
    fit_batched(batched, data, recipe, aug, seeds=list(range(10, 14)), progress=False)

    def accs(models, part):
        return [accuracy_of(m, part) for m in models]

    for part in (split.test_retain, split.test_forget, split.train_forget):
        seq, bat = accs(sequential, part), accs(batched, part)
        se = (statistics.variance(seq) / 4 + statistics.variance(bat) / 4) ** 0.5
        assert abs(statistics.mean(bat) - statistics.mean(seq)) <= 4 * se + 1.5, (part, seq, bat)
    assert min(accs(batched, split.test_retain)) > 50  # they learned (10 classes: chance is 10 %)
    for i in range(4):
        for j in range(i + 1, 4):
            assert _max_diff(batched[i], batched[j]) > 1e-2  # distinct seeds: distinct models


def test_reference_models_caches_each_seed_under_its_own_key(digits_split, tmp_path):
    recipe = Recipe(lr=0.05, epochs=1, batch_size=64)
    refs = reference_models("retrain", digits_split, "small_cnn", recipe, seeds=[5, 6, 7], cache_dir=tmp_path,
                            progress=False, batched=True)
    assert [r.cached for r in refs] == [False] * 3
    for seed, ref in zip([5, 6, 7], refs):
        assert ref.meta["key"] == reference_key("retrain", digits_split, "small_cnn", {}, recipe, seed)
        assert ref.meta["batched"]["seeds"] == [5, 6, 7] and ref.meta["n_train"] == len(digits_split.retrain_data)
    assert not list(tmp_path.glob("*.partial.pt")) and not list(tmp_path.glob("*.lock"))
    one = reference_model("retrain", digits_split, "small_cnn", recipe, seed=6, cache_dir=tmp_path, progress=False)
    assert one.cached and one.path == refs[1].path  # a run asking for seed 6 alone finds it
    again = reference_models("retrain", digits_split, "small_cnn", recipe, seeds=[6, 8], cache_dir=tmp_path,
                             progress=False, batched=True)
    assert [r.cached for r in again] == [True, False] and "batched" not in again[1].meta  # one left: alone
    with pytest.raises(Exception, match="distinct"):
        reference_models("retrain", digits_split, "small_cnn", recipe, seeds=[1, 1], cache_dir=tmp_path)


class _Dropped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Dropout(0.2), nn.Linear(16, 10))

    def forward(self, x):
        return self.net(x)


class _Mixing(nn.Module):
    """Mixes channels (a transpose inside): the wide model would mix the models; vmap runs it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 64, 10)

    def forward(self, x):
        h = self.conv(x)
        return self.fc(h.transpose(1, 3).flatten(1))


def test_batch_support_names_what_it_cannot_batch():
    x = torch.randn(2, 1, 8, 8)
    assert batch_support(_cnn(0), x) is None
    assert engine_for([_cnn(0), _cnn(1)], x) == (Wide, None)
    assert engine_for([create_model("resnet18", 10, 1, 8, width=4)] * 2, x) == (Wide, None)
    assert engine_for([_Mixing()] * 2, x) == (Stack, None)  # the wide model's trial catches the mixing
    assert "Dropout" in batch_support(_Dropped(), x)
    assert "vmap cannot run" in batch_support(_cnn(0), torch.randn(2, 3, 8, 8))  # a forward that fails


def test_wide_resnet18_is_exact_on_a_forward_and_backward_pass():
    models = [create_model("resnet18", 10, 1, 8, width=4) for _ in range(2)]
    xs = torch.randn(2, 4, 1, 8, 8)
    wide = Wide.of(models)
    out = wide.forward(xs)
    out.sum().backward()
    for k, m in enumerate(models):
        own = m(xs[k])
        assert torch.allclose(out[k], own, rtol=1e-4, atol=1e-5)
        own.sum().backward()
        grads = dict(zip(dict(m.named_parameters()), wide.parameters()))
        for name, p in m.named_parameters():  # float rounding relative to the gradient's scale
            got = grads[name].grad.reshape(2, *p.shape)[k]
            assert float((got - p.grad).abs().max()) <= 1e-4 * float(p.grad.abs().max()) + 1e-6, name
        assert all(torch.equal(v, wide.state_dict(k)[key]) for key, v in m.state_dict().items()
                   if "running" not in key and "num_batches" not in key)


def test_stack_state_dicts_have_the_models_keys_and_shapes():
    models = [_cnn(0), _cnn(1)]
    stack = Stack.of(models)
    for k, m in enumerate(models):
        sd = stack.state_dict(k)
        assert list(sd) == list(m.state_dict())
        assert all(torch.equal(sd[key], v) for key, v in m.state_dict().items())
