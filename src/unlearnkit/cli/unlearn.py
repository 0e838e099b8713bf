"""``unlearnkit unlearn``: unlearn a checkpoint the user brings and write an unlearned checkpoint.

A plain function with typer defaults, registered in cli/__init__.py. Every value is checked before any work
(:mod:`unlearnkit.validate`): a bad one raises :class:`unlearnkit.errors.UserError` (one line, exit
code 2 through ``handles_errors``) before the dataset or the model is loaded, and nothing is written
to ``--out`` unless the method finished (the checkpoint is written atomically). No reference model
is trained: the output is what ``unlearnkit audit --unlearned`` reads.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import List, Optional

import typer

from .. import validate
from ..errors import UserError

PRESETS = ("auto", "small", "reference")


def parse_params(items: List[str] | None) -> dict:
    """``["epochs=1", "lr=1e-3"]`` -> ``{"epochs": 1, "lr": "1e-3"}``: each value read with
    ``yaml.safe_load`` (YAML 1.1 leaves ``1e-3`` a string; the method's own checks accept a numeric
    string for a float). A missing ``=``, an empty key or a key given twice is a UserError."""
    import yaml

    out: dict = {}
    for item in items or ():
        if "=" not in item:
            raise UserError(f"--param takes key=value (e.g. --param epochs=1), not {item!r}")
        key, _, text = item.partition("=")
        key = key.strip()
        if not key:
            raise UserError(f"--param {item!r} has no hyperparameter name before '='")
        if key in out:
            raise UserError(f"--param gives {key!r} twice")
        try:
            out[key] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"--param {item!r}: the value is not valid YAML ({first})") from None
    return out


def _method_name(method: str) -> str:
    """The canonical name of one method the runner accepts (aliases and plug-in combos included)."""
    from ..methods import METHODS
    from ..methods.names import method_names

    text = method.strip()
    if "," in text or text.lower() == "all":
        raise UserError(f"--method takes one method per call, not {method!r}")
    if not text:
        raise UserError("--method is empty; see unlearnkit list methods")
    # unknown names: did-you-mean; a VFL-only method is checked against the checkpoint once it is loaded
    (name,) = method_names([text], setting="vfl")
    cls = METHODS.get(name)
    if cls.is_reference or cls.starts_from_scratch:
        raise UserError(f"{name} trains a new model from scratch and needs no checkpoint: use "
                        f"unlearnkit train --retrain (with the forget set) instead")
    cls.check_distributed()
    return name


def _construct(name: str, preset: str, dataset: str, params: dict):
    from ..methods import METHODS

    try:
        return METHODS.get(name).from_preset(preset, dataset, **params)
    except UserError:  # already one line naming the method and the value (a UserError is a ValueError too)
        raise
    except (TypeError, ValueError) as e:  # a method's own checks; unknown keys are already a UserError
        raise UserError(f"{name}: {str(e).strip() or type(e).__name__}") from None


def _model_name(model: Optional[str]) -> Optional[str]:
    """``--model`` checked by name (canonical); ``torchvision:``/``timm:`` names are left to the loader."""
    if model is None:
        return None
    from ..models.zoo import MODELS

    text = model.strip()
    if not text:
        raise UserError("--model is empty; see unlearnkit list models")
    if text.startswith(("torchvision:", "timm:")):
        return text
    return MODELS.canonical(text)


def _check_files(checkpoint: Path, out: Path) -> tuple[Path, Path]:
    """The checkpoint can be read, ``--out`` written, and they are not the same file."""
    checkpoint = validate.input_file("--checkpoint", checkpoint)
    out = validate.output_file("--out", out)
    if _same_file(checkpoint, out) or checkpoint.resolve() == out.resolve():
        raise UserError(f"--out {out} is the --checkpoint itself; write the unlearned model to another file")
    return checkpoint, out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def unlearn_command(
    *,
    checkpoint: Path = typer.Option(..., help="checkpoint to unlearn: an unlearnkit checkpoint, or a plain "
                                              "state_dict with --model naming its architecture"),
    dataset: str = typer.Option(..., help="dataset the model was trained on (unlearnkit list datasets)"),
    forget_classes: Optional[str] = typer.Option(None, help="classes to forget, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count "
                                                             "(drawn with --data-seed)"),
    forget_indices: Optional[Path] = typer.Option(None, help="file of training indices to forget"),
    forget_flipped: Optional[float] = typer.Option(None, help="mislabeled data: the fraction in (0, 0.5) of "
                                                   "train run --forget-flipped flipped (with --data-seed)"),
    method: str = typer.Option(..., help="one unlearning method, e.g. finetune, GA, ec+cola "
                                         "(unlearnkit list methods)"),
    param: Optional[List[str]] = typer.Option(None, "--param", help="hyperparameter override key=value "
                                                                    "(repeatable), e.g. --param epochs=2"),
    preset: str = typer.Option("auto", help="method defaults: auto | small | reference"),
    model: Optional[str] = typer.Option(None, help="architecture of a plain state_dict checkpoint, e.g. "
                                                   "torchvision:resnet18 (unlearnkit checkpoints know it)"),
    seed: int = typer.Option(0, **validate.SEED_RANGE, help="unlearning seed"),
    data_seed: int = typer.Option(0, **validate.SEED_RANGE, help="seed of the train/val/test split and of a "
                                                                 "random forget set"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    out: Path = typer.Option(..., help="unlearned checkpoint to write (.pt), read by unlearnkit audit "
                                       "--unlearned"),
    progress: bool = typer.Option(True, help="show progress bars"),
):
    """Unlearn a checkpoint you bring (no references are trained) and write the unlearned checkpoint.

    The result is what unlearnkit audit --unlearned reads; its meta records the method, its
    hyperparameters, the source checkpoint's sha256 and the split.
    """
    from ..checkpoints import save_checkpoint
    from ..data.datasets import DATASETS
    from ..data.splits import ForgetSpec
    from ..methods import preset_for
    from ..runtime import resolve_device

    # every value, before any work
    spec = ForgetSpec.from_options(forget_classes, forget_random, forget_indices, forget_flipped)
    validate.choice("--preset", preset, PRESETS)
    checkpoint, out = _check_files(checkpoint, out)
    # an unknown name: did-you-mean, before any data is read
    ds_name = DATASETS.canonical(dataset) if not dataset.startswith("imagefolder:") else dataset
    if download:
        validate.output_dir("--data-dir", data_dir)
    model_name = _model_name(model)
    name = _method_name(method)
    params = parse_params(param)
    _construct(name, preset_for(ds_name, model_name or "") if preset == "auto" else preset, ds_name, params)
    req = _Request(checkpoint=checkpoint, out=out, dataset=dataset, spec=spec, method=name, params=params,
                   preset=preset, model=model_name, seed=seed, data_seed=data_seed, data_dir=data_dir,
                   download=download, device=resolve_device(device), progress=progress)
    res, meta = _unlearn(req)
    save_checkpoint(res.model, out, meta)
    stopped = "" if res.stop_reason == "completed" else f", {res.stop_reason}"
    typer.echo(f"wrote {out} (method {name}, {res.runtime_s:.1f} s{stopped}; forget acc "
               f"{meta['metrics']['forget_acc']:.1f} %, retain acc {meta['metrics']['retain_acc']:.1f} %)")
    return meta


@dataclass(frozen=True)
class _Request:
    """The checked values of one ``unlearnkit unlearn`` call."""

    checkpoint: Path
    out: Path
    dataset: str
    spec: object
    method: str
    params: dict
    preset: str
    model: Optional[str]
    seed: int
    data_seed: int
    data_dir: Path
    download: bool
    device: object
    progress: bool


def _unlearn(req: _Request):
    """Load data and checkpoint, run the method, measure; returns the result and the checkpoint's meta."""
    from ..api import unlearn_split
    from ..checkpoints import file_sha256, load_checkpoint, require_finite
    from ..data.datasets import load_dataset
    from ..data.splits import make_split
    from ..errors import NonFiniteLossError
    from ..methods import METHODS, preset_for
    from ..models.vfl import is_vfl
    from ..runner import task_params

    t_start = time.perf_counter()
    bundle = load_dataset(req.dataset, req.data_dir, req.download, req.data_seed)
    split = make_split(bundle, req.spec, seed=req.data_seed)
    source_sha = file_sha256(req.checkpoint)
    net, src_meta = load_checkpoint(req.checkpoint, model_name=req.model, num_classes=bundle.num_classes,
                                    in_channels=bundle.in_channels, image_size=bundle.image_size)
    require_finite(net, f"--checkpoint {req.checkpoint}")
    arch = src_meta["model"]["name"]
    cls = METHODS.get(req.method)
    if cls.requires_vfl and not is_vfl(net):
        raise UserError(f"{req.method} unlearns vertical federated models only, and {req.checkpoint} holds a "
                        f"{arch} (train one with unlearnkit train --setting vfl)")
    arch_for_preset = src_meta["model"]["kwargs"].get("bottom", arch) if arch == "vfl" else arch
    chosen = preset_for(bundle.name, arch_for_preset) if req.preset == "auto" else req.preset
    unlearner = _construct(req.method, chosen, bundle.name, task_params(req.method, split, req.params))
    try:  # the Python API's unlearn (uk.unlearn) on this split
        res = unlearn_split(net, unlearner, split, device=req.device, seed=req.seed, progress=req.progress)
    except NonFiniteLossError as e:
        raise UserError(f"{e} (nothing was written)") from None
    if _unchanged(net, res.model):
        raise UserError(f"{req.method} left the model bit-identical to {req.checkpoint} with these hyperparameters "
                        f"(too few epochs or steps, or too small a step?); nothing was written")
    meta = {"kind": "unlearned", "method": req.method, "params": unlearner.params(), "preset": chosen,
            "paper": cls.paper, "source_checkpoint": str(req.checkpoint), "source_sha256": source_sha,
            "source_state_sha256": src_meta.get("sha256"), "source_kind": src_meta.get("kind"),
            "dataset": bundle.name, "data_seed": req.data_seed, "split_hash": split.split_hash,
            "forget": req.spec.to_dict(), "n_train_forget": len(split.train_forget), "seed": req.seed,
            "runtime_s": res.runtime_s, "stop_reason": res.stop_reason, "history": res.history,
            "metrics": _accuracies(res.model, split, req.device), "device": str(req.device),
            "wall_s": time.perf_counter() - t_start, **_provenance()}
    return res, meta


def _unchanged(before, after) -> bool:
    """True when ``after`` holds exactly ``before``'s weights (the method did nothing)."""
    import torch

    a, b = before.state_dict(), after.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[k].cpu(), b[k].cpu()) for k in a)


def _accuracies(model, split, device) -> dict:
    """Forget, retain and full-test accuracy (%) of the unlearned model."""
    from ..evaluation import model_outputs
    from ..metrics.accuracy import accuracy
    from ..models.features import LOGITS

    outputs = model_outputs(model, split, (), device)
    return {"forget_acc": accuracy(outputs["train_forget"][LOGITS], split.train_forget.y),
            "retain_acc": accuracy(outputs["train_retain"][LOGITS], split.train_retain.y),
            "test_acc_full": accuracy(outputs["test"][LOGITS], split.test.y)}


def _provenance() -> dict:
    from ..runner import git_commit
    from ..training import numerics, versions

    return {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "versions": versions(),
            "numerics": numerics(), "git_commit": git_commit()}
