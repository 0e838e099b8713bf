"""Vertical federated (VFL) models: K passive bottom models and an active top model (Mirage, seed 000).

Reference: ``YuZhenyuLindy/Mirage@63b9f9a`` ``mirage_lib.py`` (``ResNet18Bottom``, ``MLPBottom``,
``ActiveModel``, ``VFLModel``, ``create_vfl_model``; reference-specs §5). Each passive party k holds
its slice of every sample (image columns or flat features, :mod:`unlearnkit.data.vfl`) and a bottom
model that turns it into an embedding; the parties *transmit* their embeddings, the active party
(which holds the labels) concatenates them (the cut layer) and classifies with its top model.

``create_model("vfl", num_classes, in_channels, image_size, parties=2, bottom=None)`` builds one;
``bottom`` is any registered backbone (its classifier is replaced by ``nn.Identity``, so its
embedding is its penultimate vector), by default ``mirage_bottom`` for images and ``mlp`` for flat
features. The model takes whole samples and splits them itself, so every method, metric and
checkpoint works unchanged; its ``unlearnkit_spec`` keeps the party structure.

Audit taps (``unlearnkit_taps``), shallow to deep:

* the bottoms' own layer-wise taps (``mirage_bottom``: ``block_a``/``block_b``/``block_c``, after the
  2nd ReLU of each conv block, Mirage's ``run_layerwise`` indices 5/12/19), pooled per party and
  concatenated across parties; for ``mirage_bottom`` ``block_c`` pooled equals ``embedding``, as in
  Mirage;
* ``party0`` ... ``party{K-1}``: each party's transmitted embedding;
* ``embedding``: the concatenated cut-layer embedding (the top's input; Mirage's audit features);
* ``penultimate``: the input of the top's classifier.

``unlearnkit_transmitted`` lists the taps a passive party sends (the party embeddings and their
concatenation): what an observer of the VFL traffic can probe without the classifier.

Deliberate differences: Mirage's bottoms take their slice as a list element, ours slice the batch
in ``forward`` (same numbers); the flat data is ``[N, F, 1, 1]`` and ``mlp`` flattens it first;
``width`` (default 64, Mirage's) lets CPU runs shrink ``mirage_bottom``.
"""
from __future__ import annotations

import inspect

import torch
from torch import Tensor, nn

from ..data.vfl import is_flat, party_bounds, party_shape, split_axis, split_parties
from ..errors import UserError
from .zoo import MODELS, Tap, create_model, register_model, taps_of


class MirageBottom(nn.Module):
    """Mirage's passive bottom ``ResNet18Bottom`` -- NOT a ResNet-18: three blocks of
    2 x (Conv3x3-BN-ReLU), max-pool after the first two, global average pool -> ``4*width`` (256-d);
    plus a linear classifier ``fc`` so it also runs as a standalone model."""

    def __init__(self, num_classes: int, in_channels: int = 3, width: int = 64):
        super().__init__()
        w = width

        def conv(i, o):
            return [nn.Conv2d(i, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *conv(in_channels, w), *conv(w, w), nn.MaxPool2d(2, 2),
            *conv(w, 2 * w), *conv(2 * w, 2 * w), nn.MaxPool2d(2, 2),
            *conv(2 * w, 4 * w), *conv(4 * w, 4 * w), nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten())
        self.fc = nn.Linear(4 * w, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.features(x))


@register_model("mirage_bottom", "Mirage's VFL passive bottom 'ResNet18Bottom' (6 conv layers, not a ResNet-18) "
                "+ linear head; the default VFL bottom for images")
def mirage_bottom(num_classes: int, in_channels: int = 3, image_size: int = 32, width: int = 64) -> nn.Module:
    m = MirageBottom(num_classes, in_channels, width)
    m.unlearnkit_taps = {"block_a": Tap("features.5", channels=width),
                         "block_b": Tap("features.12", channels=2 * width),
                         "block_c": Tap("features.19", channels=4 * width),
                         "penultimate": Tap("fc", "input")}
    m.unlearnkit_head = "fc"
    return m


class MLP(nn.Module):
    """Mirage's ``MLPBottom`` (Linear-BN-ReLU-Dropout(0.3)-Linear-BN-ReLU, 512 -> 256) on the
    flattened input, plus a linear classifier ``fc``."""

    def __init__(self, num_classes: int, in_features: int, hidden: int = 512, embedding: int = 256,
                 dropout: float = 0.3):
        super().__init__()
        self.features = nn.Sequential(
            nn.Flatten(), nn.Linear(in_features, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True),
            nn.Dropout(dropout), nn.Linear(hidden, embedding), nn.BatchNorm1d(embedding), nn.ReLU(inplace=True))
        self.fc = nn.Linear(embedding, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.features(x))


@register_model("mlp", "Mirage's MLP bottom (512-256, BatchNorm, dropout 0.3) + linear head, for flat "
                "features (digits_flat); the default VFL bottom for flat data")
def mlp(num_classes: int, in_channels: int = 1, image_size: int = 1, *, in_features: int | None = None,
        hidden: int = 512, embedding: int = 256, dropout: float = 0.3) -> nn.Module:
    m = MLP(num_classes, in_features or in_channels * image_size * image_size, hidden, embedding, dropout)
    m.unlearnkit_taps = {"hidden1": Tap("features.3", channels=hidden), "penultimate": Tap("fc", "input")}
    m.unlearnkit_head = "fc"
    return m


class MirageTop(nn.Module):
    """Mirage's active model: Linear(in->512)-ReLU-Dropout(0.5)-Linear(512->256)-ReLU-Linear(256->K)."""

    def __init__(self, in_features: int, num_classes: int, hidden: int = 512, penultimate: int = 256,
                 dropout: float = 0.5):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act1 = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, penultimate)
        self.act2 = nn.ReLU(inplace=True)
        self.fc = nn.Linear(penultimate, num_classes)

    def forward(self, h: Tensor) -> Tensor:
        return self.fc(self.act2(self.fc2(self.drop(self.act1(self.fc1(h))))))


class VFLModel(nn.Module):
    """K passive bottoms (``bottoms[k]`` reads party k's slice) and the active ``top``.

    ``embed(x)`` returns the parties' embeddings (what they transmit); ``forward(x)`` =
    ``top(cat(embed(x)))``. ``bounds``/``axis`` say which slice of a sample each party holds.
    """

    def __init__(self, bottoms: list[nn.Module], top: nn.Module, bounds: list[tuple[int, int]], axis: int):
        super().__init__()
        self.bottoms = nn.ModuleList(bottoms)
        self.top = top
        self.bounds = [tuple(b) for b in bounds]
        self.axis = axis

    @property
    def parties(self) -> int:
        return len(self.bottoms)

    def embed(self, x: Tensor) -> list[Tensor]:
        return [b(p) for b, p in zip(self.bottoms, split_parties(x, self.bounds, self.axis))]

    def forward(self, x: Tensor) -> Tensor:
        return self.top(torch.cat(self.embed(x), 1))


def default_bottom(in_channels: int, image_size: int) -> str:
    """``mlp`` for flat features, ``mirage_bottom`` for images (Mirage's defaults)."""
    return "mlp" if is_flat(in_channels, image_size) else "mirage_bottom"


def _bottom(name: str, num_classes: int, shape: tuple[int, int, int], kwargs: dict, k: int) -> tuple[nn.Module, int]:
    """One party's bottom: the backbone with its classifier replaced by ``nn.Identity``; its embedding size."""
    if name == "vfl":
        raise UserError("a VFL bottom cannot itself be a VFL model; pick a backbone (unlearnkit list models)")
    c, h, w = shape
    kw = dict(kwargs)
    factory = MODELS.get(name) if ":" not in name else None
    if factory is not None and "in_features" in inspect.signature(factory).parameters:
        kw.setdefault("in_features", c * h * w)
    m = create_model(name, num_classes=num_classes, in_channels=c, image_size=h, **kw)
    m.set_submodule(m.unlearnkit_head, nn.Identity())
    m.eval()
    try:
        with torch.no_grad():
            out = m(torch.zeros(2, c, h, w))
    except (RuntimeError, ValueError, AssertionError) as e:
        detail = str(e).strip().splitlines()[0][:120]
        raise UserError(f"bottom {name!r} cannot read party {k}'s slice of shape {c}x{h}x{w} ({detail}); "
                        f"use fewer parties or another bottom") from None
    m.train()
    if out.dim() != 2:
        raise UserError(f"bottom {name!r} gives a {out.dim()}-D embedding; it needs a vector per sample")
    return m, int(out.shape[1])


@register_model("vfl", "vertical federated model: K passive bottoms (default mirage_bottom / mlp) + Mirage's "
                "active MLP top (--setting vfl --parties K --model <bottom>)")
def vfl(num_classes: int, in_channels: int = 3, image_size: int = 32, parties: int = 2, bottom: str | None = None,
        bottom_kwargs: dict | None = None) -> VFLModel:
    bottom = bottom or default_bottom(in_channels, image_size)
    size = in_channels if is_flat(in_channels, image_size) else image_size
    bounds = party_bounds(size, parties)
    built = [_bottom(bottom, num_classes, party_shape(in_channels, image_size, b), bottom_kwargs or {}, k)
             for k, b in enumerate(bounds)]
    model = VFLModel([m for m, _ in built], MirageTop(sum(d for _, d in built), num_classes), bounds,
                     split_axis(in_channels, image_size))
    taps: dict[str, Tap] = {}
    for name, tap in taps_of(built[0][0]).items():
        if name == "penultimate":
            continue
        key = f"bottom_{name}" if name == "embedding" or name.startswith("party") else name
        taps[key] = Tap("", tap.at, tap.channels, tuple(f"bottoms.{k}.{tap.module}" for k in range(parties)))
    for k in range(parties):
        taps[f"party{k}"] = Tap(f"bottoms.{k}")
    taps["embedding"] = Tap("top", "input")
    taps["penultimate"] = Tap("top.fc", "input")
    model.unlearnkit_taps = taps
    model.unlearnkit_head = "top.fc"
    model.unlearnkit_transmitted = [f"party{k}" for k in range(parties)] + ["embedding"]
    return model


def is_vfl(model: nn.Module) -> bool:
    return isinstance(model, VFLModel)


def transmitted_layers(model: nn.Module) -> list[str]:
    """The taps a VFL model's passive parties transmit (empty for other models)."""
    return list(getattr(model, "unlearnkit_transmitted", []) or [])
