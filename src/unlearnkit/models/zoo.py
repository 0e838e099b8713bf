"""The model zoo: ``create_model(name, num_classes, in_channels, image_size, **kwargs)``.

Every model carries ``unlearnkit_taps`` (the named layers the audit reads: stage outputs and the
``penultimate`` vector, the input of the classifier) and ``unlearnkit_head`` (the path of the
classifier module). Names: ``small_cnn``, ``resnet18`` (CIFAR stem, as SalUn's models/ResNet.py:
3x3 conv1 stride 1, no max-pool), ``resnet50`` (CIFAR stem for images <= 64 px), any
``torchvision:<name>`` and ``timm:<name>`` (randomly initialised; nothing is downloaded).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..errors import UserError
from ..registry import Registry


@dataclass(frozen=True)
class Tap:
    """Where a named audit layer lives: a module's ``output`` (or ``input``), and its channel count
    (used to find the channel axis of 4-D outputs, e.g. Swin's NHWC stages).

    ``parts`` (VFL models, :mod:`unlearnkit.models.vfl`): the layer is read at every module named
    there (one per party, ``module`` unused) and joined: pooled, the per-part vectors concatenated
    (Mirage's ``run_layerwise``: pooled per party, concatenated across parties); unpooled, the
    parts' maps side by side along the last axis (the input's own column layout)."""

    module: str
    at: str = "output"
    channels: int | None = None
    parts: tuple[str, ...] = ()


ModelFactory = Callable[..., nn.Module]
MODELS: Registry[ModelFactory] = Registry("model")
MODEL_INFO: dict[str, str] = {}


def register_model(name: str, info: str, *aliases: str):
    def deco(fn: ModelFactory) -> ModelFactory:
        MODELS.add(name, fn, *aliases)
        MODEL_INFO[name] = info
        return fn

    return deco


def create_model(name: str, num_classes: int, in_channels: int = 3, image_size: int = 32, **kwargs) -> nn.Module:
    """Build a model by name; ``torchvision:<arch>`` and ``timm:<arch>`` reach those libraries. The name and the
    sizes are checked first (a :class:`UserError` naming them): at least 1 class and 1 channel, an image side of
    at least 1 pixel, each at most 2**31 - 1."""
    from .. import validate

    validate.text("model", name)
    num_classes = validate.whole("num_classes", num_classes, low=1, high=2**31 - 1)
    in_channels = validate.whole("in_channels", in_channels, low=1, high=2**31 - 1)
    image_size = validate.whole("image_size", image_size, low=1, high=2**31 - 1)
    if name.startswith("torchvision:"):
        model = _torchvision_model(name.split(":", 1)[1], num_classes, in_channels, image_size, **kwargs)
    elif name.startswith("timm:"):
        model = _timm_model(name.split(":", 1)[1], num_classes, in_channels, image_size, **kwargs)
    else:
        model = MODELS.get(name)(num_classes=num_classes, in_channels=in_channels, image_size=image_size, **kwargs)
    model.unlearnkit_spec = {"name": name, "num_classes": num_classes, "in_channels": in_channels,
                             "image_size": image_size, **kwargs}
    return model


def model_names() -> list[str]:
    return MODELS.names() + ["torchvision:<name>", "timm:<name>"]


def audit_layers(model: nn.Module) -> list[str]:
    """The model's named audit layers, shallow to deep, ending with ``penultimate``."""
    return list(taps_of(model))


def taps_of(model: nn.Module) -> dict[str, Tap]:
    taps = getattr(model, "unlearnkit_taps", None)
    if not taps:
        raise UserError("this model has no named audit layers: build it with unlearnkit.create_model, or go through "
                        "unlearnkit.audit / unlearnkit.unlearn, which find them (unlearnkit.models.discover)")
    return taps


def head_of(model: nn.Module) -> nn.Module:
    return model.get_submodule(model.unlearnkit_head)


# ---------------------------------------------------------------------------------------------


class SmallCNN(nn.Module):
    """Three conv stages + a hidden layer; fast on CPU; works for 8x8, 28x28 and 32x32 inputs.

    block1: 2x(conv3x3-BN-ReLU) + maxpool; block2: conv-BN-ReLU + maxpool; block3: conv-BN-ReLU +
    global average pool; fc1: Linear-ReLU (the penultimate vector); fc: the classifier.
    """

    def __init__(self, num_classes: int, in_channels: int = 1, width: int = 32, hidden: int = 128):
        super().__init__()
        w = width

        def conv(i, o):
            return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True)]

        self.block1 = nn.Sequential(*conv(in_channels, w), *conv(w, w), nn.MaxPool2d(2))
        self.block2 = nn.Sequential(*conv(w, 2 * w), nn.MaxPool2d(2))
        self.block3 = nn.Sequential(*conv(2 * w, 4 * w))
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.fc1 = nn.Sequential(nn.Linear(4 * w, hidden), nn.ReLU(inplace=True))
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc1(self.pool(self.block3(self.block2(self.block1(x))))))


@register_model("small_cnn", "3-stage CNN with BatchNorm (~100k params), for CPU runs on digits/mnist5k")
def small_cnn(num_classes: int, in_channels: int = 1, image_size: int = 28, width: int = 32,
              hidden: int = 128) -> nn.Module:
    m = SmallCNN(num_classes, in_channels, width, hidden)
    m.unlearnkit_taps = {"block1": Tap("block1", channels=width), "block2": Tap("block2", channels=2 * width),
                         "block3": Tap("block3", channels=4 * width), "penultimate": Tap("fc", "input")}
    m.unlearnkit_head = "fc"
    return m


def _resnet(arch: str, num_classes: int, in_channels: int, image_size: int, cifar_stem: bool | None,
            width: int = 64) -> nn.Module:
    import torchvision.models as tvm

    m = getattr(tvm, arch)(weights=None, num_classes=num_classes)
    mult = 1 if arch in ("resnet18", "resnet34") else 4
    if width != 64:  # a narrower ResNet (CPU runs): the same blocks with width, 2w, 4w, 8w channels
        if width < 1:
            raise UserError(f"width must be >= 1, got {width}")
        block = type(m.layer1[0])
        m.inplanes = width
        m.bn1 = nn.BatchNorm2d(width)
        for i, n_blocks in enumerate(len(getattr(m, f"layer{j}")) for j in range(1, 5)):
            setattr(m, f"layer{i + 1}", m._make_layer(block, width * 2 ** i, n_blocks, stride=1 if i == 0 else 2))
        m.fc = nn.Linear(8 * width * mult, num_classes)
        for mod in m.modules():  # torchvision's initialisation of the rebuilt modules
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(mod, nn.BatchNorm2d):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)
    if cifar_stem is None:
        cifar_stem = image_size <= 64
    if cifar_stem:
        m.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
    elif in_channels != 3 or width != 64:
        m.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
    m.unlearnkit_taps = {f"layer{i}": Tap(f"layer{i}", channels=width * 2 ** (i - 1) * mult) for i in range(1, 5)}
    m.unlearnkit_taps["penultimate"] = Tap("fc", "input")
    m.unlearnkit_head = "fc"
    return m


def architecture_hint(name: str, state: dict) -> str:
    """A sentence pointing to the zoo's CIFAR-stem ResNet when ``state`` (a state dict that did not fit the
    architecture ``name``) has a 3x3 ``conv1`` and ``name`` is torchvision's ResNet of the same depth; else ''."""
    conv1 = state.get("conv1.weight") if isinstance(state, dict) else None
    arch = name.split(":", 1)[1] if name.startswith("torchvision:") else ""
    if arch in ("resnet18", "resnet50") and isinstance(conv1, torch.Tensor) and tuple(conv1.shape[2:]) == (3, 3):
        return (f" (its conv1 is 3x3: the CIFAR stem of unlearnkit's own {arch}, not torchvision's 7x7 stem; give "
                f"--model {arch})")
    return ""


@register_model("resnet18", "ResNet-18 with the CIFAR stem (3x3 conv1, no max-pool), as SalUn's models/ResNet.py; "
                            "width=16 gives a narrow one for CPU runs")
def resnet18(num_classes: int, in_channels: int = 3, image_size: int = 32, cifar_stem: bool | None = True,
             width: int = 64):
    return _resnet("resnet18", num_classes, in_channels, image_size, cifar_stem, width)


@register_model("resnet50", "ResNet-50 (CIFAR stem for images <= 64 px, ImageNet stem above)")
def resnet50(num_classes: int, in_channels: int = 3, image_size: int = 32, cifar_stem: bool | None = None):
    return _resnet("resnet50", num_classes, in_channels, image_size, cifar_stem)


def _last_linear(model: nn.Module) -> str:
    name = None
    for n, mod in model.named_modules():
        if isinstance(mod, nn.Linear):
            name = n
    if name is None:
        raise UserError("cannot find the classifier (no nn.Linear) in this model")
    return name


def _torchvision_model(arch: str, num_classes: int, in_channels: int, image_size: int, **kw) -> nn.Module:
    import torchvision.models as tvm

    if arch in ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152"):
        return _resnet(arch, num_classes, in_channels, image_size, kw.get("cifar_stem", False))
    try:
        m = tvm.get_model(arch, weights=None, num_classes=num_classes, **kw)
    except (ValueError, KeyError) as e:
        raise UserError(f"unknown torchvision model {arch!r}: {e}") from None
    head = _last_linear(m)
    top = [n for n, _ in m.named_children() if not head.startswith(n)]
    m.unlearnkit_taps = {n: Tap(n) for n in top}
    m.unlearnkit_taps["penultimate"] = Tap(head, "input")
    m.unlearnkit_head = head
    return m


def _timm_model(arch: str, num_classes: int, in_channels: int, image_size: int, **kw) -> nn.Module:
    try:
        import timm
    except ImportError:
        raise UserError("timm models need the 'timm' package: pip install 'unlearnkit[timm]'") from None
    if not timm.list_models(arch):
        raise UserError(f"unknown timm model {arch!r}")
    args = dict(pretrained=False, num_classes=num_classes, in_chans=in_channels, **kw)
    try:
        m = timm.create_model(arch, img_size=image_size, **args)
    except TypeError:
        m = timm.create_model(arch, **args)
    taps = {}
    for info in getattr(m, "feature_info", []) or []:
        mod = info["module"]
        taps[mod.replace(".", "_")] = Tap(mod, channels=info.get("num_chs"))
    classifier = m.get_classifier()
    head = next(n for n, mod in m.named_modules() if mod is classifier)
    taps["penultimate"] = Tap(head, "input")
    m.unlearnkit_taps = taps
    m.unlearnkit_head = head
    return m

