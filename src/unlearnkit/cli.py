"""The command line: a thin layer over the Python API (``unlearnkit --help``).

Bad input ends in one line on stderr and exit code 2; Ctrl-C keeps finished checkpoints (the
next run resumes from the cache) and exits 130. Under ``torchrun`` (``torchrun --nproc_per_node N
-m unlearnkit train ...``) ``train`` and ``run`` train data-parallel; an error line comes from the
first process of each node only (the others fail alike).
"""
from __future__ import annotations

import functools
import inspect
import math
import os
import sys
from pathlib import Path
from typing import Optional

import click
import typer
import typer.core
from typer.core import TyperGroup

from . import validate
from .errors import NonFiniteLossError, UserError


def _err(msg: str) -> None:
    if os.environ.get("RANK", "0") == "0" or os.environ.get("LOCAL_RANK", "0") == "0":
        typer.echo(f"error: {' '.join(str(msg).split())}", err=True)


class OneLineErrors(TyperGroup):
    """click's usage errors (a missing option, ``--epochs abc``, ``--jobs 0``) as one ``error:`` line,
    exit code 2, like every other bad input (click would print a usage box of several lines)."""

    def make_context(self, *args, **kwargs):
        return _one_line(super().make_context, *args, **kwargs)

    def invoke(self, ctx):
        return _one_line(super().invoke, ctx)


# recent typer vendors its own copy of click (typer._click); older ones use click itself
_CLICK = tuple({click, getattr(typer.core, "_click", click)})
_CLICK_ERRORS = tuple(m.exceptions.ClickException for m in _CLICK)
_USAGE_ERRORS = tuple(m.exceptions.UsageError for m in _CLICK)


def _one_line(call, *args, **kwargs):
    try:
        return call(*args, **kwargs)
    except _CLICK_ERRORS as e:
        msg = e.format_message()
        if isinstance(e, _USAGE_ERRORS) and e.ctx is not None and e.ctx.command_path:
            msg += f" (see {e.ctx.command_path} --help)"
        _err(msg)
        raise typer.Exit(e.exit_code) from None


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Make an image classifier forget, then certify whether it really forgot.")


def _check_finite(fn, args, kwargs) -> None:
    """Every float option must be a finite number (click reads ``nan`` and ``inf`` as floats)."""
    bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    for name, value in bound.arguments.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--{name.rstrip('_').replace('_', '-')} must be a finite number, not {value}")


def handles_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            _check_finite(fn, args, kwargs)
            return fn(*args, **kwargs)
        except UserError as e:
            _err(str(e))
            raise typer.Exit(2) from None
        except NonFiniteLossError as e:  # a hyperparameter too large for this model: also the user's to fix
            _err(str(e))
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            _err("interrupted: finished checkpoints are kept; run the same command again to resume")
            raise typer.Exit(130) from None

    return wrapper


@app.command("list")
@handles_errors
def list_(what: str = typer.Argument("all", help="datasets | models | methods | metrics | all")):
    """List what is registered."""
    from rich.console import Console
    from rich.table import Table

    what = what.lower()
    kinds = ("datasets", "models", "methods", "metrics")
    if what != "all" and what not in kinds:
        raise UserError(f"unknown list {what!r}; choose one of {', '.join(kinds)} or all")
    console = Console()
    for kind in kinds if what == "all" else (what,):
        table = Table(title=kind, show_lines=False)
        table.add_column("name")
        table.add_column("aliases" if kind == "methods" else "", style="dim")
        table.add_column("what / reference")
        for name, aliases, info in _listing(kind):
            table.add_row(name, aliases, info)
        console.print(table)


def _listing(kind: str):
    if kind == "datasets":
        from .data.datasets import DATASET_INFO

        return [(n, "", i) for n, i in DATASET_INFO.items()] + [
            ("imagefolder:<path>", "", "your own images: <path>/train/<class>/*, <path>/test/<class>/*")]
    if kind == "models":
        from .models.zoo import MODEL_INFO

        return [(n, "", i) for n, i in MODEL_INFO.items()] + [
            ("torchvision:<name>", "", "any torchvision classification model (random init)"),
            ("timm:<name>", "", "any timm model, e.g. timm:swin_tiny_patch4_window7_224 (random init)")]
    if kind == "methods":
        from .methods import METHODS

        return [(n, ", ".join(METHODS.aliases_of(n)), METHODS.get(n).paper) for n in METHODS.names()]
    from .metrics import METRIC_INFO

    return [(n, "", i) for n, i in METRIC_INFO.items()]


# the GPU fast-path options (runtime.Runtime), shared by train and run; None = not given
AMP = typer.Option(None, help="bf16: bfloat16 autocast (GPU fast path; changes the numbers, so cached apart) | off")
CHANNELS_LAST = typer.Option(None, "--channels-last/--no-channels-last", help="NHWC memory format (GPU fast path)")
COMPILE = typer.Option(None, "--compile/--no-compile", help="torch.compile the training forward")
DETERMINISTIC = typer.Option(None, "--deterministic/--no-deterministic",
                             help="deterministic GPU algorithms (reproducible, slower)")
DATA_ON_DEVICE = typer.Option(None, help="keep the images on the GPU: auto (when they fit) | always | never")


def _runtime_options(amp, channels_last, compile_, deterministic, data_on_device) -> dict:
    """The runtime.Runtime fields the user set (None: not given)."""
    given = {"amp": amp, "channels_last": channels_last, "compile": compile_, "deterministic": deterministic,
             "data_on_device": data_on_device}
    return {k: v for k, v in given.items() if v is not None}


def _spec_options(forget_classes, forget_random, forget_indices) -> dict:
    return {"forget_classes": validate.int_list("--forget-classes", forget_classes) if forget_classes else None,
            "forget_random": validate.forget_random("--forget-random", forget_random)
            if forget_random is not None else None, "forget_indices": forget_indices}


@app.command()
@handles_errors
def train(
    dataset: str = typer.Option(..., help="dataset name (unlearnkit list datasets)"),
    model: Optional[str] = typer.Option(None, help="model name (unlearnkit list models) [small_cnn]; "
                                        "with --setting vfl the bottom [mirage_bottom, mlp for flat data]"),
    setting: str = typer.Option("standard", help="standard | vfl (Mirage's vertical federated setting)"),
    parties: int = typer.Option(2, min=1, help="VFL passive parties (with --setting vfl)"),
    out: Path = typer.Option(..., help="checkpoint file to write (.pt)"),
    seed: int = typer.Option(0, **validate.SEED_RANGE, help="training seed"),
    data_seed: int = typer.Option(0, **validate.SEED_RANGE, help="seed of the train/val/test split and of a random "
                                                        "forget set"),
    retrain: bool = typer.Option(False, "--retrain", help="train the reference without the forget set"),
    forget_classes: Optional[str] = typer.Option(None, help="classes to forget, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count"),
    forget_indices: Optional[Path] = typer.Option(None, help="file of training indices to forget"),
    epochs: Optional[int] = typer.Option(None, help="override the recipe's epochs"),
    lr: Optional[float] = typer.Option(None, help="override the recipe's learning rate"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    cache_dir: Optional[Path] = typer.Option(None, help="model cache (default ~/.cache/unlearnkit/models)"),
    batch_size: Optional[int] = typer.Option(None, help="override the recipe's (global) batch size"),
    amp: Optional[str] = AMP,
    channels_last: Optional[bool] = CHANNELS_LAST,
    compile_: Optional[bool] = COMPILE,
    deterministic: Optional[bool] = DETERMINISTIC,
    data_on_device: Optional[str] = DATA_ON_DEVICE,
):
    """Train an original model (or, with --retrain, the reference without the forget set).

    Data-parallel on several processes with torchrun: torchrun --nproc_per_node 2 -m unlearnkit train ...
    """
    import shutil

    from . import distributed
    from .config import RunConfig
    from .data.datasets import load_dataset
    from .data.splits import ForgetSpec, make_split
    from .runner import resolve_model
    from .runtime import Runtime
    from .training import check_model, default_recipe, reference_model, resolve_device, with_overrides

    spec_opts = _spec_options(forget_classes, forget_random, forget_indices)
    if retrain and not any(v is not None for v in spec_opts.values()):
        raise UserError("--retrain needs the forget set: --forget-classes, --forget-random or --forget-indices")
    validate.output_file("--out", out)  # before training: a model that cannot be saved is lost time
    validate.cache_dir("--cache-dir", cache_dir)
    if forget_indices is not None:
        validate.input_file("--forget-indices", forget_indices)
    cfg = RunConfig(dataset=dataset, model=model, setting=setting, parties=parties, data_seed=data_seed, seed=seed,
                    device=device, **{k: v for k, v in spec_opts.items() if v is not None and k != "forget_indices"})
    rt = Runtime.from_dict(_runtime_options(amp, channels_last, compile_, deterministic, data_on_device))
    dev = resolve_device(device)
    bundle = load_dataset(dataset, data_dir, download, data_seed)
    if any(v is not None for v in spec_opts.values()):
        spec = ForgetSpec(classes=tuple(spec_opts["forget_classes"] or ()), random=spec_opts["forget_random"],
                          indices_file=str(forget_indices) if forget_indices else None)
    else:
        spec = ForgetSpec(classes=(0,))  # the original ignores the forget set
    split = make_split(bundle, spec, seed=data_seed)
    _, name, kwargs = resolve_model(cfg, bundle)
    check_model(name, bundle, kwargs)
    recipe = with_overrides(default_recipe(bundle.name, name), epochs=epochs, lr=lr, batch_size=batch_size)
    with distributed.process_group(dev) as world:
        ref = reference_model("retrain" if retrain else "original", split, name, recipe, seed, kwargs, cache_dir, dev,
                              runtime=rt)
        if not world.is_main:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        shutil.copyfile(ref.path, tmp)
        tmp.replace(out)
        procs = f", {world.size} processes" if world.size > 1 else ""
        typer.echo(f"wrote {out} ({'cached' if ref.cached else 'trained'}{procs}; sha256 {ref.meta['sha256'][:12]})")


@app.command()
@handles_errors
def run(
    config: Optional[Path] = typer.Option(None, help="YAML file with the same keys as these options"),
    dataset: Optional[str] = typer.Option(None, help="dataset name [mnist5k]"),
    model: Optional[str] = typer.Option(None, help="model name [small_cnn]; with --setting vfl the bottom "
                                        "[mirage_bottom, mlp for flat data]"),
    setting: Optional[str] = typer.Option(None, help="standard | vfl (Mirage's vertical federated setting) "
                                          "[standard]"),
    parties: Optional[int] = typer.Option(None, help="VFL passive parties, with --setting vfl [2]"),
    forget_classes: Optional[str] = typer.Option(None, help="classes to forget, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count"),
    forget_indices: Optional[Path] = typer.Option(None, help="file of training indices to forget"),
    task: Optional[str] = typer.Option(None, help="TARF concept task: all_matched | target_mismatch | "
                                       "model_mismatch | data_mismatch (one --forget-classes)"),
    concept: Optional[str] = typer.Option(None, help="fine classes of the target concept, e.g. 3,8 "
                                          "(default: the forgotten class's superclass)"),
    methods: Optional[str] = typer.Option(None, help="comma-separated method names, or all"),
    seed: Optional[int] = typer.Option(None, help="training / unlearning seed [0]"),
    data_seed: Optional[int] = typer.Option(None, help="data split seed [0]"),
    epochs: Optional[int] = typer.Option(None, help="override the training recipe's epochs"),
    preset: Optional[str] = typer.Option(None, help="method defaults: auto | small | reference"),
    test_convention: Optional[str] = typer.Option(None, help="salun (TA without forgotten classes) | purge"),
    out: Optional[Path] = typer.Option(None, help="output folder [runs/run]"),
    data_dir: Optional[Path] = typer.Option(None, help="where torchvision datasets live [data]"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: Optional[str] = typer.Option(None, help="auto | cpu | cuda | cuda:N"),
    cache_dir: Optional[Path] = typer.Option(None, help="model cache (default ~/.cache/unlearnkit/models)"),
    audit: bool = typer.Option(True, help="run the representation audit of every model"),
    idi: bool = typer.Option(False, "--idi/--no-idi", help="also estimate IDI in every audit (slower: trains "
                                                           "InfoNCE critics)"),
    references: Optional[int] = typer.Option(None, help="retrained references of seeds seed..seed+K-1 for the "
                                             "audit; K >= 2 derives each layer's tolerance from their spread "
                                             "[1 on small_cnn (calibrated), 5 elsewhere]"),
    progress: bool = typer.Option(True, help="show progress bars"),
    amp: Optional[str] = AMP,
    channels_last: Optional[bool] = CHANNELS_LAST,
    compile_: Optional[bool] = COMPILE,
    deterministic: Optional[bool] = DETERMINISTIC,
    data_on_device: Optional[str] = DATA_ON_DEVICE,
):
    """Train or reuse original and retrain, run the methods, evaluate, write results.json/.md.

    Under torchrun the references and the data-parallel methods train on all processes; rank 0 writes.
    """
    from . import distributed
    from .config import load_config
    from .runner import print_table, run_experiment
    from .training import resolve_device

    overrides = {"dataset": dataset, "model": model, "setting": setting, "parties": parties, "methods": methods, "task": task, "concept": concept, "seed": seed, "data_seed": data_seed,
                 "preset": preset, "test_convention": test_convention, "out": str(out) if out else None,
                 "data_dir": str(data_dir) if data_dir else None, "download": download or None,
                 "device": device, "cache_dir": str(cache_dir) if cache_dir else None,
                 **_spec_options(forget_classes, forget_random, str(forget_indices) if forget_indices else None)}
    if epochs is not None:
        overrides["recipe"] = {"epochs": epochs}
    if not audit:
        overrides["audit"] = False
    if idi:
        overrides["idi"] = True
    if references is not None:
        overrides["references"] = references
    runtime = _runtime_options(amp, channels_last, compile_, deterministic, data_on_device)
    cfg = load_config(config, overrides)
    if runtime:
        cfg.runtime = {**cfg.runtime, **runtime}
    if not (cfg.forget_classes or cfg.forget_random is not None or cfg.forget_indices):
        raise UserError("say what to forget: --forget-classes, --forget-random or --forget-indices")
    with distributed.process_group(resolve_device(cfg.device)) as world:
        results = run_experiment(cfg, progress=progress)
    if world.is_main:
        print_table(results)
        typer.echo(f"wrote {Path(cfg.out) / 'results.json'} and results.md")


def _register_audit() -> None:
    from .audit.command import audit_command

    app.command("audit", help=audit_command.__doc__)(handles_errors(audit_command))


_register_audit()


def _register_bench_report() -> None:
    from .bench.command import bench_command
    from .report.command import report_command

    app.command("bench", help=bench_command.__doc__)(handles_errors(bench_command))
    app.command("report", help=report_command.__doc__)(handles_errors(report_command))


_register_bench_report()


def _register_forgetting_quality() -> None:
    from .fq_command import forgetting_quality_command

    app.command("forgetting-quality", help=forgetting_quality_command.__doc__)(
        handles_errors(forgetting_quality_command))


_register_forgetting_quality()


def _register_unlearn() -> None:
    from .unlearn_command import unlearn_command

    app.command("unlearn", help=unlearn_command.__doc__)(handles_errors(unlearn_command))


_register_unlearn()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        _err("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
