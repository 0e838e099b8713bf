"""Typed run configuration, loaded from YAML or CLI flags, validated with clear errors.

Keys (YAML and ``unlearnkit run`` flags take the same names, dashes or underscores)::

    dataset: mnist5k            model: small_cnn         model_kwargs: {width: 32}
    setting: standard           # standard | vfl (Mirage's vertical federated setting: --parties K
    parties: 2                  #   passive parties; model = the bottom, default mirage_bottom / mlp)
    forget_classes: [3]         # or forget_random: 0.1 | 100, or forget_indices: file.txt, or
                                #   forget_flipped: 0.05 (mislabeled data: data/splits.py)
    task: data_mismatch         # optional TARF concept task (one forget class), concept: [3, 8]
    methods: [finetune, gradient_ascent]                 # or "all"
    method_params: {gradient_ascent: {lr: 0.001}}        # overrides of a method's preset
    preset: auto                # auto | small | reference (method defaults) | a file from unlearnkit tune
    seed: 0                     # training / unlearning seed
    data_seed: 0                # train/val/test split and random forget set
    recipe: {epochs: 10}        # overrides of the default training recipe
    test_convention: salun      # salun | purge (see evaluation.py)
    audit: true   idi: false    # representation audit of every model; IDI too (slower)
    audit_config: {n_splits: 5} # overrides of unlearnkit.audit.AuditConfig (e.g. fewer probe resplits)
    out: runs/demo   data_dir: data   download: false   device: auto   cache_dir: null
    runtime: {amp: bf16, channels_last: true, compile: false, deterministic: false, data_on_device: auto}
                                # GPU fast path (runtime.py); the defaults are the plain float32 path
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from . import validate
from .errors import UserError

SETTINGS = ("standard", "vfl")


@dataclass
class RunConfig:
    dataset: str = "mnist5k"
    model: str | None = None    # standard: small_cnn; vfl: the bottom (None = mirage_bottom, mlp for flat data)
    model_kwargs: dict = field(default_factory=dict)
    setting: str = "standard"   # standard | vfl
    parties: int = 2            # VFL passive parties
    forget_classes: list[int] = field(default_factory=list)
    forget_random: float | None = None
    forget_indices: str | None = None
    forget_flipped: float | None = None  # a fraction (0, 0.5) of train trained with flipped labels, then forgotten
    task: str | None = None     # all_matched | target_mismatch | model_mismatch | data_mismatch (TARF)
    concept: list[int] = field(default_factory=list)   # fine classes of the target concept (default: superclass)
    methods: list[str] = field(default_factory=lambda: ["finetune", "gradient_ascent"])
    method_params: dict = field(default_factory=dict)
    preset: str = "auto"
    seed: int = 0
    data_seed: int = 0
    recipe: dict = field(default_factory=dict)
    test_convention: str = "salun"
    audit: bool = True
    idi: bool = False           # also estimate IDI in every audit (trains InfoNCE critics; slower)
    audit_config: dict = field(default_factory=dict)   # overrides of AuditConfig's fields
    references: int | None = None  # retrained references for the audit (None: runner.DEFAULT_REFERENCES, 5)
    out: str = "runs/run"
    data_dir: str = "data"
    download: bool = False
    device: str = "auto"
    cache_dir: str | None = None
    runtime: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Every key checked where it enters (YAML, ``run`` options, a bench suite), before any work:
        types (a string where a number belongs, a mapping where a list is...), finite numbers, the
        domains, method names and their hyperparameters, the recipe, audit and runtime overrides."""
        if isinstance(self.methods, str):
            self.methods = [m.strip() for m in self.methods.split(",") if m.strip()]
        for key in ("forget_classes", "concept"):
            if getattr(self, key) is not None and not isinstance(getattr(self, key), (list, tuple, dict)):
                setattr(self, key, validate.int_list(key, getattr(self, key)))
        validate.dataclass_fields(self)
        validate.choice("setting", self.setting, SETTINGS)
        validate.whole("parties", self.parties, low=1)
        if self.parties != 2 and self.setting != "vfl":
            raise UserError("--parties needs --setting vfl")
        if self.model is None and self.setting == "standard":
            self.model = "small_cnn"
        self.forget_classes = validate.int_list("forget_classes", self.forget_classes)  # 3,3 is class 3 once
        self.concept = validate.int_list("concept", self.concept)
        if self.forget_random is not None:
            self.forget_random = validate.forget_random("forget_random", self.forget_random)
        if self.forget_flipped is not None:
            self.forget_flipped = validate.forget_flipped("forget_flipped", self.forget_flipped)
        given = sum([bool(self.forget_classes), self.forget_random is not None, bool(self.forget_indices),
                     self.forget_flipped is not None])
        if given > 1:
            raise UserError("give one forget set: forget_classes, forget_random, forget_indices or forget_flipped, "
                            "not several")
        if self.concept and not self.task:
            raise UserError("--concept needs --task (all_matched, target_mismatch, model_mismatch, data_mismatch)")
        if self.task is not None:
            from .data.concepts import TASKS

            validate.choice("task", self.task, TASKS)
        self._preset_file()
        validate.choice("preset", self.preset, ("auto", "small", "reference"))
        validate.choice("test_convention", self.test_convention, ("salun", "purge"))
        for key in ("seed", "data_seed"):
            validate.whole(key, getattr(self, key), low=0, high=validate.MAX_SEED)
        if self.references is not None:
            validate.whole("references", self.references, low=1)
        if not self.methods:
            raise UserError("no method given: pass --methods (e.g. finetune,gradient_ascent or all)")
        for key in ("dataset", "out", "data_dir", "device"):
            if not getattr(self, key).strip():
                raise UserError(f"{key} is empty")
        self._check_parts()

    def _preset_file(self) -> None:
        """``preset: tuned.yaml`` (``unlearnkit tune``'s output): its base preset, and its hyperparameters
        for the methods run under the explicit ``method_params`` (:mod:`unlearnkit.methods.tuned`)."""
        from .methods.names import method_names
        from .methods.tuned import apply_preset_file, is_preset_file

        if not is_preset_file(self.preset):
            return
        validate.mapping("method_params", self.method_params)
        names = method_names(self.methods, self.setting)
        self.preset, self.method_params = apply_preset_file(
            self.preset, names, self.method_params, lambda n: method_names([n], "vfl")[0])

    def _check_parts(self) -> None:
        """The nested mappings, each against the object it configures (lazy imports: torch)."""
        from .audit.config import AuditConfig
        from .data.datasets import DATASETS
        from .loop import Recipe
        from .methods.names import method_names
        from .models.zoo import MODELS
        from .runtime import Runtime

        if not self.dataset.startswith("imagefolder:"):
            DATASETS.get(self.dataset)  # unknown: did-you-mean UserError
        if self.model is not None and not self.model.startswith(("torchvision:", "timm:")):
            MODELS.get(self.model)

        names = method_names(self.methods, self.setting)  # unknown names: did-you-mean UserError
        for name, params in self.method_params.items():
            validate.mapping(f"method_params.{name}", params)
            canonical = method_names([str(name)], self.setting)[0]
            if canonical not in names:
                raise UserError(f"method_params names {name!r}, which is not among the methods run "
                                f"({', '.join(names)})")
        _construct("recipe", Recipe, self.recipe)
        _construct("audit_config", AuditConfig, {"idi": True, **self.audit_config} if self.idi
                   else self.audit_config)
        Runtime.from_dict(self.runtime)

    def to_dict(self) -> dict:
        return asdict(self)


def parse_int_list(text: str, what: str) -> list[int]:
    return validate.int_list(what, str(text))


def _construct(key: str, cls, overrides: dict):
    """``cls(**overrides)`` with an unknown key as one UserError line (its own checks do the rest)."""
    known = [f.name for f in fields(cls)]
    bad = sorted(set(overrides) - set(known))
    if bad:
        hint = validate.suggestion(bad[0], known) or f"; known: {', '.join(known)}"
        raise UserError(f"unknown {key} key {bad[0]!r}{hint}")
    return cls(**overrides)


def config_keys() -> set[str]:
    """The keys a run configuration (YAML, a bench suite's defaults and grids) may hold."""
    return {f.name for f in fields(RunConfig)}


def check_keys(data: dict, where: str) -> dict:
    known = config_keys()
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in known:
            raise UserError(f"unknown config key {key!r} in {where}{validate.suggestion(k, known)}")
        out[k] = value
    return out


def load_config(path: str | Path | None, overrides: dict | None = None) -> RunConfig:
    """The RunConfig of a YAML file (:func:`unlearnkit.validate.yaml_file`: plain data only, UTF-8, no key
    twice) + CLI overrides (``None`` values ignored)."""
    data: dict = {}
    if path is not None:
        p, loaded = validate.yaml_file("config file", path)
        if loaded is None:  # an empty file (or only comments): a truncated one would pass silently
            raise UserError(f"config file {p} is empty: give its keys (dataset: digits, ...), or leave --config out")
        if not isinstance(loaded, dict):
            raise UserError(f"config file {p} must hold a mapping of keys")
        data = check_keys(loaded, str(p))
    for k, v in (overrides or {}).items():
        if v is not None:
            data[k] = v
    try:
        return RunConfig(**data)
    except TypeError as e:
        raise UserError(f"bad configuration: {e}") from None
