"""``uk.train_references``: K references of a user's own architecture, by unlearnkit's loop (batched) or the
user's own ``fit``, on toy data with a tiny MLP (seconds). Its bad inputs are swept in tests/sweep."""
from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import unlearnkit as uk
from unlearnkit.data.arrays import ArrayData
from unlearnkit.loop import Recipe, fit

D, K = 16, 4


class MLP(nn.Module):
    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, 32), nn.ReLU(), nn.Dropout(dropout), nn.Linear(32, K))

    def forward(self, x):
        return self.net(x)


def parts(n: int = 240) -> dict:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(n) % K
    x = torch.randn(n, D, generator=g) * 0.5 + nn.functional.one_hot(y, D).float() * 3
    f = y == 1
    return {"forget": (x[f], y[f]), "retain": (x[~f], y[~f])}


def acc(model: nn.Module, data: tuple) -> float:
    with torch.no_grad():
        return 100.0 * float((model(data[0]).argmax(1) == data[1]).float().mean())


@pytest.fixture
def as_on_a_gpu(monkeypatch):
    """Batching as on a CUDA device (on the CPU unlearnkit trains references one after another:
    :func:`unlearnkit.batched.batching_pays`)."""
    import unlearnkit.api

    monkeypatch.setattr(unlearnkit.api, "batching_pays", lambda device: None)


def test_cpu_references_are_trained_one_after_another_by_default(caplog):
    p = parts()
    with caplog.at_level(logging.INFO, logger="unlearnkit"):
        uk.train_references(MLP, forget=p["forget"], retain=p["retain"], k=2, recipe={"epochs": 1}, progress=False)
    assert "one after another: on the cpu batched training measured little or no faster" in caplog.text


def test_references_by_unlearnkits_loop_are_trained_batched_as_fit_would_train_them(caplog, as_on_a_gpu):
    p = parts()
    recipe = {"epochs": 4, "batch_size": 32, "lr": 0.05}
    with caplog.at_level(logging.INFO, logger="unlearnkit"):
        refs = uk.train_references(MLP, forget=p["forget"], retain=p["retain"], k=3, recipe=recipe, progress=False)
    assert "one after another" not in caplog.text  # batched
    assert len(refs) == 3 and all(type(m) is MLP and not m.training for m in refs)
    for m in refs:
        assert acc(m, p["retain"]) > 90 and acc(m, p["forget"]) < 10  # learned retain; class 1 never seen
    w = [m.net[0].weight for m in refs]
    assert all(not torch.allclose(w[i], w[j]) for i in range(3) for j in range(i + 1, 3))
    torch.manual_seed(2)
    alone = MLP()
    x, y = p["retain"]
    fit(alone, ArrayData(x, y, (0.0,), (1.0,)), Recipe(**recipe, augment=False), seed=2, progress=False)
    assert max(float((a - b).abs().max()) for a, b in zip(alone.state_dict().values(),
                                                         refs[2].state_dict().values())) < 1e-4


def test_references_by_the_users_fit_get_each_seed_and_retain_as_given():
    p = parts()
    calls = []

    def users_fit(model, retain, seed):
        calls.append((seed, retain is p["retain"]))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(30):
            opt.zero_grad()
            nn.functional.cross_entropy(model(retain[0]), retain[1]).backward()
            opt.step()

    refs = uk.train_references(MLP, users_fit, forget=p["forget"], retain=p["retain"], seeds=[5, 9], progress=False)
    assert calls == [(5, True), (9, True)]
    assert all(acc(m, p["retain"]) > 90 for m in refs)


def test_an_architecture_vmap_cannot_batch_is_trained_one_after_another(caplog, as_on_a_gpu):
    p = parts()
    with caplog.at_level(logging.INFO, logger="unlearnkit"):
        refs = uk.train_references(lambda: MLP(dropout=0.1), forget=p["forget"], retain=p["retain"], k=2,
                                   recipe={"epochs": 2, "batch_size": 64}, progress=False)
    assert len(refs) == 2 and "one after another" in caplog.text and "Dropout" in caplog.text


def test_identical_initial_weights_are_warned_about(caplog):
    p = parts()
    base = MLP()

    def same():
        m = MLP()
        m.load_state_dict(base.state_dict())
        return m

    with caplog.at_level(logging.WARNING, logger="unlearnkit"):
        uk.train_references(same, forget=p["forget"], retain=p["retain"], k=2, recipe={"epochs": 1}, progress=False)
    assert "identical models" in caplog.text
