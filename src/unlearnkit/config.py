"""Typed run configuration, loaded from YAML or CLI flags, validated with clear errors.

Keys (YAML and ``unlearnkit run`` flags take the same names, dashes or underscores)::

    dataset: mnist5k            model: small_cnn         model_kwargs: {width: 32}
    setting: standard           # standard | vfl (Mirage's vertical federated setting: --parties K
    parties: 2                  #   passive parties; model = the bottom, default mirage_bottom / mlp)
    forget_classes: [3]         # or forget_random: 0.1 | 100, or forget_indices: file.txt
    task: data_mismatch         # optional TARF concept task (one forget class), concept: [3, 8]
    methods: [finetune, gradient_ascent]                 # or "all"
    method_params: {gradient_ascent: {lr: 0.001}}        # overrides of a method's preset
    preset: auto                # auto | small | reference (method defaults)
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

import difflib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

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
    references: int | None = None  # retrained references for the audit (None: 1 on a calibrated architecture, else 5)
    out: str = "runs/run"
    data_dir: str = "data"
    download: bool = False
    device: str = "auto"
    cache_dir: str | None = None
    runtime: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.setting not in SETTINGS:
            raise UserError(f"setting must be standard or vfl, not {self.setting!r}")
        if isinstance(self.parties, bool) or not isinstance(self.parties, int) or self.parties < 1:
            raise UserError(f"parties must be an integer >= 1, not {self.parties!r}")
        if self.parties != 2 and self.setting != "vfl":
            raise UserError("--parties needs --setting vfl")
        if self.model is None and self.setting == "standard":
            self.model = "small_cnn"
        if isinstance(self.methods, str):
            self.methods = [m.strip() for m in self.methods.split(",") if m.strip()]
        if isinstance(self.forget_classes, (int, str)):
            self.forget_classes = parse_int_list(str(self.forget_classes), "forget_classes")
        self.forget_classes = [int(c) for c in self.forget_classes]
        if isinstance(self.concept, (int, str)):
            self.concept = parse_int_list(str(self.concept), "concept")
        self.concept = [int(c) for c in self.concept]
        if self.concept and not self.task:
            raise UserError("--concept needs --task (all_matched, target_mismatch, model_mismatch, data_mismatch)")
        if self.preset not in ("auto", "small", "reference"):
            raise UserError(f"preset must be auto, small or reference, not {self.preset!r}")
        if self.test_convention not in ("salun", "purge"):
            raise UserError(f"test_convention must be salun or purge, not {self.test_convention!r}")
        if not self.methods:
            raise UserError("no method given: pass --methods (e.g. finetune,gradient_ascent or all)")
        if self.references is not None and (isinstance(self.references, bool) or not isinstance(self.references, int)
                                            or self.references < 1):
            raise UserError(f"references must be an integer >= 1, not {self.references!r}")
        for key in ("model_kwargs", "method_params", "recipe", "audit_config", "runtime"):
            if not isinstance(getattr(self, key), dict):
                raise UserError(f"config key {key!r} must be a mapping")

    def to_dict(self) -> dict:
        return asdict(self)


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        return [int(t) for t in str(text).replace(" ", "").split(",") if t != ""]
    except ValueError:
        raise UserError(f"{what} must be comma-separated integers, not {text!r}") from None


def _known() -> dict[str, Any]:
    return {f.name: f for f in fields(RunConfig)}


def check_keys(data: dict, where: str) -> dict:
    known = _known()
    out = {}
    for key, value in data.items():
        k = str(key).replace("-", "_")
        if k not in known:
            close = difflib.get_close_matches(k, list(known), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UserError(f"unknown config key {key!r} in {where}{hint}")
        out[k] = value
    return out


def load_config(path: str | Path | None, overrides: dict | None = None) -> RunConfig:
    """YAML file (safe_load: plain data only) + CLI overrides (``None`` values ignored)."""
    data: dict = {}
    if path is not None:
        p = Path(path).expanduser()
        if not p.is_file():
            raise UserError(f"config file {p} does not exist")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise UserError(f"config file {p} is not valid YAML: {str(e).splitlines()[0]}") from None
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
