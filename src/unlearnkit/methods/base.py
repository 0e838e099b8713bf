"""The method interface: hyperparameters in ``__init__`` (a dataclass, no logic), ``unlearn`` does the work.

A method declares what it needs (``needs``: ``forget``, ``retain``, ``original``, ``test``, ``val``)
and only ever sees that: :meth:`UnlearningMethod.unlearn` hands ``_unlearn`` a :class:`MethodData`
whose undeclared parts are ``None``. It works on a deep copy, so the caller's model is never
mutated, and it must not grade itself with the auditor (methods never import ``audit``).

Hyperparameters are checked when the method is built (scikit-learn's ``_parameter_constraints``
habit): every field against its annotation, ``CHOICES`` for text, the :data:`SHARED_CONSTRAINTS`
every method obeys by field name (``lr`` > 0, ...), the method's own ``CONSTRAINTS``
(:class:`Interval` per field), then its :meth:`~UnlearningMethod.check`. A bad value is one
:class:`~unlearnkit.errors.UserError` line before any model is copied.

What a method knows about tasks and other methods stays in the method: :meth:`task_defaults` fills
in hyperparameters a task implies (TARF's identification rule), ``is_reference`` marks the exact
reference (retrain), and a plug-in (EC) adds its loss to a loop-based base method through
:attr:`~UnlearningMethod.extra_loss` (:meth:`~UnlearningMethod.with_extra_loss`); the combinations
(``ec+duck``, ...) are declared with :func:`register_plugin` and registered by
:func:`register_combinations` once every method is (``methods/__init__.py``).

Data-parallel (``torchrun``): a method that sets ``distributed = True`` runs on every rank with
its batches cut across the ranks (``common.py``, ``distributed.py``); any other raises a
:class:`~unlearnkit.errors.UserError` saying why (``not_distributed``) instead of silently running
on one rank.

Presets: the dataclass defaults are the reference's (ResNet-18 / CIFAR-10, reference-specs §3);
``PRESETS["small"]`` holds defaults for the bundled datasets with the small CNN, chosen with
:func:`preset_for`. A key ``"small@<dataset>"`` overrides some of them for one dataset, where a
value tuned on one bundled dataset does not transfer to the other. ``PRESETS["test"]`` is the
cheapest setting that still runs every part of the method (timm's tiny test models), used by the
conformance suite.
"""
from __future__ import annotations

import copy
import math
import numbers
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor, nn

from .. import distributed, validate
from ..data.arrays import ArrayData, Augment
from ..errors import NonFiniteLossError, UserError
from ..registry import Registry
from ..runtime import Runtime

NEEDS = ("forget", "retain", "original", "test", "val")
BUNDLED = ("digits", "mnist5k")
BN_MODES = ("train", "frozen")
CLOSED = ("both", "left", "right", "neither")


@dataclass(frozen=True)
class Interval:
    """A hyperparameter's allowed numbers: ``low``..``high`` (``None``: unbounded), ``closed`` says which
    ends belong (``"both"``, ``"left"``, ``"right"``, ``"neither"``), as scikit-learn's ``Interval``.

    ``None`` passes (whether a field may be ``None`` is its annotation's business); a list or tuple
    (e.g. SCRUB's ``lr_decay_epochs``) is checked element by element. A whole number with closed ends
    gets :func:`unlearnkit.validate.whole`'s message, anything else :func:`unlearnkit.validate.number`'s.
    """

    low: float | None = None
    high: float | None = None
    closed: str = "both"

    def __post_init__(self) -> None:
        if self.closed not in CLOSED:
            raise ValueError(f"Interval: closed must be one of {CLOSED}, not {self.closed!r}")

    @property
    def low_open(self) -> bool:
        return self.closed in ("right", "neither")

    @property
    def high_open(self) -> bool:
        return self.closed in ("left", "neither")

    def __str__(self) -> str:
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        left = "(" if self.low_open or self.low is None else "["
        right = ")" if self.high_open or self.high is None else "]"
        return f"{left}{lo}, {hi}{right}"

    def check(self, where: str, value: Any) -> None:
        """Raise :class:`UserError` (naming ``where``) unless ``value`` lies in the interval."""
        if value is None:
            return
        if isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                self._check_one(f"{where}[{i}]", v)
            return
        self._check_one(where, value)

    def _check_one(self, where: str, value: Any) -> None:
        ends_whole = all(e is None or float(e).is_integer() for e in (self.low, self.high))
        if (isinstance(value, numbers.Integral) and not isinstance(value, bool) and ends_whole
                and not self.low_open and not self.high_open):
            validate.whole(where, value, low=None if self.low is None else int(self.low),
                           high=None if self.high is None else int(self.high))
        else:
            validate.number(where, value, low=self.low, high=self.high, low_open=self.low_open,
                            high_open=self.high_open)


#: a number > 0 (learning rates, temperatures, step sizes)
POSITIVE = Interval(0, None, "right")
#: a number >= 0 (weights of loss terms, weight decay, counts that may be zero)
NON_NEGATIVE = Interval(0, None)
#: a whole count >= 1
AT_LEAST_ONE = Interval(1, None)
#: a learning rate: > 0, and small enough for a float32 weight update not to overflow
LEARNING_RATE = Interval(0, validate.MAX_LR, "right")
#: a number in [0, 1] (momentum, a fraction that may be empty or whole)
UNIT = Interval(0, 1)
#: a fraction in (0, 1), both ends excluded
OPEN_UNIT = Interval(0, 1, "neither")

@dataclass(frozen=True)
class Search:
    """One hyperparameter's search range for ``unlearnkit tune`` (:attr:`UnlearningMethod.SEARCH_SPACE`):
    ``kind`` ``"log"`` (log-uniform float), ``"float"`` (uniform), ``"int"`` (whole numbers) or
    ``"choice"`` (one of ``values``)."""

    kind: str
    low: float | None = None
    high: float | None = None
    values: tuple = ()

    def __post_init__(self) -> None:
        if self.kind not in ("log", "float", "int", "choice"):
            raise TypeError(f"Search kind must be log, float, int or choice, not {self.kind!r}")
        if self.kind == "choice" and not self.values:
            raise TypeError("Search('choice') needs values")
        if self.kind != "choice" and not (self.low is not None and self.high is not None and self.low < self.high):
            raise TypeError(f"Search({self.kind!r}) needs low < high, got {self.low}, {self.high}")
        if self.kind == "log" and self.low <= 0:
            raise TypeError("Search('log') needs low > 0")


def log_range(low: float, high: float) -> Search:
    return Search("log", low, high)


def int_range(low: int, high: int) -> Search:
    return Search("int", low, high)


def float_range(low: float, high: float) -> Search:
    return Search("float", low, high)


#: The rules every method obeys, by field name: the name itself or any ``*_<name>`` (``collapse_lr``,
#: ``mirage_batch_size``, ``low_epochs``, ``luv_weight_decay``); a method's own ``CONSTRAINTS`` entry
#: for a field replaces the shared one.
SHARED_CONSTRAINTS: dict[str, Interval] = {
    "lr": LEARNING_RATE, "batch_size": AT_LEAST_ONE, "epochs": NON_NEGATIVE,
    "momentum": UNIT, "weight_decay": NON_NEGATIVE,
}
#: Rules for a field of exactly this name, before the shared ones: a method whose whole work is its
#: ``epochs`` loop would return the model unchanged at 0 (a method that changes the model before its
#: loop, e.g. by re-initialising weights, declares ``CONSTRAINTS = {"epochs": NON_NEGATIVE}``)
EXACT_CONSTRAINTS: dict[str, Interval] = {"epochs": AT_LEAST_ONE}


def constraint_of(cls: type, name: str) -> Interval | None:
    """The :class:`Interval` a method's field ``name`` must lie in: its own ``CONSTRAINTS`` entry, else the
    rule for exactly that name (:data:`EXACT_CONSTRAINTS`), else the shared rule for that name or its
    ``*_<name>`` suffix (:data:`SHARED_CONSTRAINTS`), else ``None``."""
    own = getattr(cls, "CONSTRAINTS", {})
    if name in own:
        return own[name]
    if name in EXACT_CONSTRAINTS:
        return EXACT_CONSTRAINTS[name]
    for key, rule in SHARED_CONSTRAINTS.items():
        if name == key or name.endswith(f"_{key}"):
            return rule
    return None


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
    """What ``_unlearn`` knows: the model, why it stopped, its per-epoch history. ``runtime_s`` is
    measured and set by :meth:`UnlearningMethod.unlearn` around the whole method (NaN before)."""

    model: nn.Module
    stop_reason: str = "completed"
    history: list[dict] = field(default_factory=list)
    runtime_s: float = field(default=math.nan, init=False)


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
    #: True for the exact-unlearning reference every other method is compared with (retrain): ``run``
    #: and ``bench`` take its row from the cached retrained model instead of running it
    is_reference: ClassVar[bool] = False
    #: True for a plain loop over batches of one data part per step, made data-parallel by common.py
    distributed: ClassVar[bool] = False
    #: why a method cannot run data-parallel (shown when it is started under torchrun)
    not_distributed: ClassVar[str] = "it has not been made data-parallel"
    #: True when the method only works on a vertical federated model (``--setting vfl``), e.g. target
    requires_vfl: ClassVar[bool] = False
    #: allowed values of text hyperparameters, checked at construction (``bn_mode`` always)
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: allowed numbers of hyperparameters (:class:`Interval` per field), checked at construction after
    #: the shared rules by name (:data:`SHARED_CONSTRAINTS`), which an entry here replaces
    CONSTRAINTS: ClassVar[dict[str, Interval]] = {}
    #: True for loop-based methods that add :attr:`extra_loss` to every step's loss (plug-in bases)
    accepts_extra_loss: ClassVar[bool] = False
    #: what ``unlearnkit tune`` searches (:class:`Search` per field); empty: the method cannot be tuned
    SEARCH_SPACE: ClassVar[dict[str, Search]] = {}

    #: A loss added to every step of a method that ``accepts_extra_loss``: ``extra_loss(model) -> Tensor``
    #: (a plug-in's term, e.g. EC's), or None. Not a hyperparameter (not a dataclass field: not compared,
    #: not in :meth:`params`); attach it with :meth:`with_extra_loss`.
    extra_loss = None

    def __post_init__(self) -> None:
        """Hyperparameters are checked when the method is built, before any model is copied.

        Every field against its annotation (a string where a number belongs, NaN or inf, 1.5 for an
        integer: one :class:`UserError` line naming the method and field), then ``CHOICES``, then each
        field's :class:`Interval` (:func:`constraint_of`: the method's ``CONSTRAINTS``, else the rule
        every method shares by name: ``lr``/``*_lr`` > 0 (and at most :data:`unlearnkit.validate.MAX_LR`),
        ``batch_size``/``*_batch_size`` >= 1, ``epochs`` >= 1, ``*_epochs`` >= 0 but not all 0 in a method
        of phases without ``epochs`` (COLA, UNSIR: it would change nothing), ``momentum`` in [0, 1],
        ``weight_decay``/``*_weight_decay`` >= 0), then the method's own :meth:`check`."""
        validate.dataclass_fields(self, f"{self.name}: ")
        for key, allowed in {"bn_mode": BN_MODES, **self.CHOICES}.items():
            if hasattr(self, key):
                validate.choice(f"{self.name}: {key}", getattr(self, key), allowed)
        for f in fields(self):
            rule = constraint_of(type(self), f.name)
            if rule is not None:
                rule.check(f"{self.name}: {f.name}", getattr(self, f.name))
        self._check_some_epochs()
        self.check()

    def _check_some_epochs(self) -> None:
        """A method of phases (``*_epochs``, no ``epochs``) with every phase at 0 epochs would return the
        model unchanged: a :class:`UserError` naming them."""
        names = {f.name for f in fields(self)}
        phases = sorted(n for n in names if n.endswith("_epochs") and isinstance(getattr(self, n), int)
                        and constraint_of(type(self), n) is SHARED_CONSTRAINTS["epochs"])
        if phases and "epochs" not in names and all(getattr(self, n) == 0 for n in phases):
            raise UserError(f"{self.name}: {' and '.join(f'{n}' for n in phases)} are all 0, so the method would "
                            f"leave the model unchanged; give at least one of them >= 1")

    def check(self) -> None:
        """A method's own constraints that involve several hyperparameters; raise :class:`UserError`."""

    def params(self) -> dict:
        """Hyperparameters as plain values; ``type(m)(**m.params())`` rebuilds an equal method."""
        return asdict(self)

    @classmethod
    def task_defaults(cls, split, given: dict) -> dict:
        """The hyperparameters to build the method with for ``split``'s task, from those the user
        ``given``: ``given`` itself unless the method knows better (TARF picks its identification rule
        from the task, :meth:`unlearnkit.methods.tarf.Tarf.task_defaults`). Never overrides a given key."""
        return given

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

    def with_extra_loss(self, extra_loss: Callable[[nn.Module], Tensor] | None) -> "UnlearningMethod":
        """A copy of this method that adds ``extra_loss(model)`` to the loss of every step (how a plug-in
        such as EC composes with its base method); ``self`` is left as it is."""
        if extra_loss is not None and not self.accepts_extra_loss:
            raise TypeError(f"{self.name} takes no extra loss (accepts_extra_loss is False): it is not a "
                            f"step loop a plug-in can add to")
        out = copy.copy(self)
        out.extra_loss = extra_loss
        return out

    def step_loss(self, loss: Tensor, model: nn.Module) -> Tensor:
        """``loss`` plus :attr:`extra_loss` ``(model)`` when one is attached, else ``loss`` itself.
        Methods that ``accepts_extra_loss`` pass every step's loss through it."""
        return loss if self.extra_loss is None else loss + self.extra_loss(model)

    def data_for(self, split) -> MethodData:
        """Restrict an UnlearningSplit to what this method declared it needs (checked at registration)."""
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

    def unlearn(self, model: nn.Module, split, *, original: nn.Module | None = None,
                device: torch.device | str = "cpu", seed: int = 0, progress: bool = False,
                runtime: Runtime | None = None) -> UnlearnResult:
        """Return an unlearned copy of ``model``; ``model`` and ``original`` are left untouched.

        ``runtime`` (GPU fast path): its backend flags, channels_last, bf16 autocast around the
        whole method, and the data parts kept on the GPU when they fit (``torch.compile`` is not
        applied to methods). The result's ``runtime_s`` is the wall time of ``_unlearn``, measured here."""
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

    def _unlearn(self, model: nn.Module, data: MethodData, original: nn.Module | None, device: torch.device,
                 gen: torch.Generator, progress: bool) -> UnlearnResult:
        """Unlearn ``model`` in place and return it with the stop reason and history (not the runtime)."""
        raise NotImplementedError


METHODS: Registry[type[UnlearningMethod]] = Registry("method")


def _check_declarations(name: str, cls: type[UnlearningMethod]) -> None:
    """A method's class-level declarations name real things: a programming error (``TypeError``) at
    import otherwise, never a surprise in the middle of a run (an ``assert`` would vanish under
    ``python -O``)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(cls.needs) - set(NEEDS))
    if unknown:
        raise TypeError(f"method {name}: unknown needs {unknown}; a method may need {', '.join(NEEDS)}")
    for what, keys in (("CHOICES", cls.CHOICES), ("CONSTRAINTS", cls.CONSTRAINTS),
                       ("SEARCH_SPACE", cls.SEARCH_SPACE),
                       *((f"PRESETS[{p!r}]", v) for p, v in cls.PRESETS.items())):
        stray = sorted(set(keys) - known)
        if stray:
            raise TypeError(f"method {name}: {what} names {stray}, which are not hyperparameters of "
                            f"{cls.__name__}")
    bad = [k for k, v in cls.CONSTRAINTS.items() if not isinstance(v, Interval)]
    if bad:
        raise TypeError(f"method {name}: CONSTRAINTS of {bad} must be Interval objects")
    bad = [k for k, v in cls.SEARCH_SPACE.items() if not isinstance(v, Search)]
    if bad:
        raise TypeError(f"method {name}: SEARCH_SPACE of {bad} must be Search objects")


def register_method(name: str, *aliases: str):
    """Class decorator: register a method (after ``@dataclass``) under ``name`` and its ``aliases``;
    its ``needs``, ``CHOICES``, ``CONSTRAINTS`` and ``PRESETS`` are checked here."""
    def deco(cls: type[UnlearningMethod]) -> type[UnlearningMethod]:
        _check_declarations(name, cls)
        cls.name = name
        METHODS.add(name, cls, *aliases)
        return cls

    return deco


#: plug-ins: name -> (make(base method class) -> combined method class, names of the base methods)
PLUGINS: dict[str, tuple[Callable[[type[UnlearningMethod]], type[UnlearningMethod]], tuple[str, ...]]] = {}


def register_plugin(name: str, bases: tuple[str, ...]):
    """Declare a plug-in (a function ``make(base_cls) -> method class``) combined with each of ``bases``
    as ``"<name>+<base>"``; :func:`register_combinations` registers the combinations once every
    method is registered, so they do not depend on the order the method modules are imported in."""
    def deco(make: Callable[[type[UnlearningMethod]], type[UnlearningMethod]]):
        PLUGINS[name] = (make, tuple(bases))
        return make

    return deco


def register_combinations() -> None:
    """Register ``"<plugin>+<base>"`` for every declared plug-in and base (once; a base must accept an
    extra loss)."""
    for plugin, (make, bases) in PLUGINS.items():
        for base in bases:
            combined = f"{plugin}+{base}"
            if combined in METHODS:
                continue
            base_cls = METHODS.get(base)
            if not base_cls.accepts_extra_loss:
                raise TypeError(f"plug-in {plugin} cannot combine with {base}: {base} does not accept an "
                                f"extra loss")
            register_method(combined)(make(base_cls))


def preset_for(dataset: str, model: str) -> str:
    """``small`` for the bundled datasets / the small CNN, ``reference`` otherwise."""
    return "small" if dataset in BUNDLED or model == "small_cnn" else "reference"
