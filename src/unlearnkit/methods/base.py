"""The method interface: hyperparameters in ``__init__`` (a dataclass, no logic), ``unlearn`` does the work.

A method declares what it needs (``needs``: ``forget``, ``retain``, ``original``, ``test``, ``val``)
and only ever sees that: :meth:`UnlearningMethod.unlearn` hands ``_unlearn`` a :class:`MethodData`
whose undeclared parts are ``None``. It works on a deep copy, so the caller's model is never
mutated, and it must not grade itself with the auditor (methods never import ``audit``).

Data-parallel (``torchrun``): a method that sets ``distributed = True`` runs on every rank with
its batches cut across the ranks (``common.py``, ``distributed.py``); any other raises a
:class:`~unlearnkit.errors.UserError` saying why (``not_distributed``) instead of silently running
on one rank.

Presets: the dataclass defaults are the reference's (ResNet-18 / CIFAR-10, reference-specs §3);
``PRESETS["small"]`` holds defaults for the bundled datasets with the small CNN, chosen with
:func:`preset_for`. A key ``"small@<dataset>"`` overrides some of them for one dataset, where a
value tuned on one bundled dataset does not transfer to the other.
"""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

import torch
from torch import nn

from .. import distributed, validate
from ..data.arrays import ArrayData, Augment
from ..errors import NonFiniteLossError, UserError
from ..registry import Registry
from ..runtime import Runtime

NEEDS = ("forget", "retain", "original", "test", "val")
BUNDLED = ("digits", "mnist5k")
BN_MODES = ("train", "frozen")


@dataclass
class MethodData:
    """What a method may read. Undeclared parts are ``None``."""

    num_classes: int
    forget: ArrayData | None = None
    retain: ArrayData | None = None
    test: ArrayData | None = None
    val: ArrayData | None = None
    forgotten_classes: tuple[int, ...] = ()
    augment: Augment = field(default_factory=Augment)


@dataclass
class UnlearnResult:
    model: nn.Module
    runtime_s: float
    stop_reason: str = "completed"
    history: list[dict] = field(default_factory=list)


@dataclass
class UnlearningMethod:
    """Base class. Subclasses are dataclasses of hyperparameters and implement ``_unlearn``."""

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    needs: ClassVar[frozenset[str]] = frozenset({"forget"})
    PRESETS: ClassVar[dict[str, dict]] = {}
    #: False for methods that do not claim to lower forget accuracy on their own (checked by the suite)
    reduces_forget_acc: ClassVar[bool] = True
    #: True when the returned model may have another head shape (documented, e.g. SalUn's BE variant)
    changes_head: ClassVar[bool] = False
    #: True when the method re-initialises the model (retrain): a broken input model is no error then
    starts_from_scratch: ClassVar[bool] = False
    #: True for a plain loop over batches of one data part per step, made data-parallel by common.py
    distributed: ClassVar[bool] = False
    #: why a method cannot run data-parallel (shown when it is started under torchrun)
    not_distributed: ClassVar[str] = "it has not been made data-parallel"
    #: True when the method only works on a vertical federated model (``--setting vfl``), e.g. target
    requires_vfl: ClassVar[bool] = False
    #: allowed values of text hyperparameters, checked at construction (``bn_mode`` always)
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __post_init__(self) -> None:
        """Hyperparameters are checked when the method is built, before any model is copied.

        Every field against its annotation (a string where a number belongs, NaN or inf, 1.5 for an
        integer: one :class:`UserError` line naming the method and field), then ``CHOICES``, then the
        rules every method shares by name: ``lr``/``*_lr`` > 0, ``batch_size``/``*_batch_size`` >= 1,
        ``epochs``/``*_epochs`` >= 0, then the method's own :meth:`check`."""
        validate.dataclass_fields(self, f"{self.name}: ")
        for key, allowed in {"bn_mode": BN_MODES, **self.CHOICES}.items():
            if hasattr(self, key):
                validate.choice(f"{self.name}: {key}", getattr(self, key), allowed)
        for f in fields(self):
            value, where = getattr(self, f.name), f"{self.name}: {f.name}"
            if not validate.is_number(value):  # None, or a list (e.g. SCRUB's lr_decay_epochs)
                continue
            if f.name == "lr" or f.name.endswith("_lr"):
                validate.number(where, value, low=0, low_open=True)
            elif f.name == "batch_size" or f.name.endswith("_batch_size"):
                validate.whole(where, value, low=1)
            elif f.name == "epochs" or f.name.endswith("_epochs"):
                validate.whole(where, value, low=0)
        self.check()

    def check(self) -> None:
        """A method's own constraints on its hyperparameters; raise :class:`UserError`."""

    def params(self) -> dict:
        """Hyperparameters as plain values; ``type(m)(**m.params())`` rebuilds an equal method."""
        return asdict(self)

    @classmethod
    def from_preset(cls, preset: str | None = None, dataset: str | None = None,
                    **overrides) -> "UnlearningMethod":
        """The method with ``PRESETS[preset]`` (then ``PRESETS[f"{preset}@{dataset}"]``), then ``overrides``."""
        known = {f.name for f in fields(cls)}
        bad = sorted(set(overrides) - known)
        if bad:
            raise UserError(f"{cls.name}: unknown hyperparameter(s) {bad}; known: {sorted(known)}")
        base = dict(cls.PRESETS.get(preset or "", {}))
        if dataset:
            base.update(cls.PRESETS.get(f"{preset}@{dataset}", {}))
        base.update(overrides)
        return cls(**base)

    def data_for(self, split) -> MethodData:
        """Restrict an UnlearningSplit to what this method declared it needs."""
        unknown = set(self.needs) - set(NEEDS)
        assert not unknown, f"{self.name}: unknown needs {unknown}"
        return MethodData(
            num_classes=split.num_classes,
            forget=split.train_forget if "forget" in self.needs else None,
            retain=split.train_retain if "retain" in self.needs else None,
            test=split.test if "test" in self.needs else None,
            val=split.val if "val" in self.needs else None,
            forgotten_classes=tuple(split.forgotten_classes),
            augment=split.dataset.augment,
        )

    @classmethod
    def check_distributed(cls) -> None:
        """Raise a :class:`UserError` when running under ``torchrun`` and the method cannot."""
        w = distributed.world().size
        if w > 1 and not cls.distributed:
            raise UserError(f"{cls.name} cannot run data-parallel ({w} processes): {cls.not_distributed}; "
                            f"run it in one process (without torchrun)")

    def unlearn(self, model: nn.Module, split, original: nn.Module | None = None,
                device: torch.device | str = "cpu", seed: int = 0, progress: bool = False,
                runtime: Runtime | None = None) -> UnlearnResult:
        """Return an unlearned copy of ``model``; ``model`` and ``original`` are left untouched.

        ``runtime`` (GPU fast path): its backend flags, channels_last, bf16 autocast around the
        whole method, and the data parts kept on the GPU when they fit (``torch.compile`` is not
        applied to methods)."""
        self.check_distributed()
        rt = runtime or Runtime()
        device = torch.device(device)
        work = copy.deepcopy(model).to(device)
        frozen = None
        if "original" in self.needs:
            frozen = copy.deepcopy(original if original is not None else model).to(device).eval()
            for p in frozen.parameters():
                p.requires_grad_(False)
        data = self.data_for(split)
        data.forget, data.retain, data.test, data.val = rt.place([data.forget, data.retain, data.test, data.val],
                                                                 device)
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        t0 = time.perf_counter()
        with (rt.backend(device), rt.model(work), rt.autocast(device), distributed.synced_batchnorm(work),
              distributed.stream_scope()):
            if frozen is not None and rt.channels_last:
                frozen.to(memory_format=torch.channels_last)
            result = self._unlearn(work, data, frozen, device, gen, progress and distributed.world().is_main)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        result.runtime_s = time.perf_counter() - t0
        result.model.eval()
        bad = [n for n, p in result.model.state_dict().items() if p.is_floating_point() and not torch.isfinite(p).all()]
        if bad:
            raise NonFiniteLossError(f"{self.name} produced non-finite weights ({bad[0]}...); "
                                     f"lower its learning rate / step size")
        return result

    def plugin_loss(self, model: nn.Module):
        """The extra loss a plug-in (e.g. EC) adds at each step of this method; 0 when none is attached.

        Loop-based methods that accept plug-ins add ``self.plugin_loss(model)`` to their step loss.
        """
        fn = getattr(self, "_plugin", None)
        return fn(model) if fn is not None else 0.0

    def _unlearn(self, model: nn.Module, data: MethodData, original: nn.Module | None, device: torch.device,
                 gen: torch.Generator, progress: bool) -> UnlearnResult:
        raise NotImplementedError


METHODS: Registry[type[UnlearningMethod]] = Registry("method")


def register_method(name: str, *aliases: str):
    def deco(cls: type[UnlearningMethod]) -> type[UnlearningMethod]:
        cls.name = name
        METHODS.add(name, cls, *aliases)
        return cls

    return deco


def preset_for(dataset: str, model: str) -> str:
    """``small`` for the bundled datasets / the small CNN, ``reference`` otherwise."""
    return "small" if dataset in BUNDLED or model == "small_cnn" else "reference"
