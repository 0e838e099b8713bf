"""``unlearnkit run``: references, methods, evaluation and audits for one configuration."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UserError
from .options import AMP, CHANNELS_LAST, COMPILE, DATA_ON_DEVICE, DETERMINISTIC, runtime_options


def run_command(
    *,
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
    forget_flipped: Optional[float] = typer.Option(None, help="mislabeled data: a random fraction in (0, 0.5) of "
                                                   "train gets another class's label, the original trains on "
                                                   "it, and that subset is forgotten"),
    task: Optional[str] = typer.Option(None, help="TARF concept task: all_matched | target_mismatch | "
                                       "model_mismatch | data_mismatch (one --forget-classes)"),
    concept: Optional[str] = typer.Option(None, help="fine classes of the target concept, e.g. 3,8 "
                                          "(default: the forgotten class's superclass)"),
    methods: Optional[str] = typer.Option(None, help="comma-separated method names, or all"),
    seed: Optional[int] = typer.Option(None, help="training / unlearning seed [0]"),
    data_seed: Optional[int] = typer.Option(None, help="data split seed [0]"),
    epochs: Optional[int] = typer.Option(None, help="override the training recipe's epochs"),
    preset: Optional[str] = typer.Option(None, help="method defaults: auto | small | reference | a preset file "
                                                    "written by unlearnkit tune (.yaml)"),
    test_convention: Optional[str] = typer.Option(None, help="salun (TA without forgotten classes) | purge"),
    out: Optional[Path] = typer.Option(None, help="output folder [runs/run]"),
    data_dir: Optional[Path] = typer.Option(None, help="where torchvision datasets live [data]"),
    download: bool = typer.Option(False, "--download", help="download a missing torchvision dataset"),
    device: Optional[str] = typer.Option(None, help="auto | cpu | cuda | cuda:N"),
    cache_dir: Optional[Path] = typer.Option(None, help="model cache (default ~/.cache/unlearnkit/models)"),
    audit: bool = typer.Option(True, help="run the representation audit of every model"),
    idi: bool = typer.Option(False, "--idi/--no-idi", help="also estimate IDI in every audit (slower: trains "
                                                           "InfoNCE critics)"),
    references: Optional[int] = typer.Option(None, help="retrained references (seeds seed..seed+K-1) the audit judges "
                                             "against; erased needs K >= 2; 5 on digits, 8 on mnist5k, 16 on digits "
                                             "where the party audited may attack the audit (docs/audit.md) [5]"),
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
    given = {k: v for k, v in locals().items() if k not in RUNTIME_KEYS and k not in ("config", "progress")}
    from ..config import load_config

    cfg = load_config(config, _overrides(given))
    runtime = runtime_options(amp, channels_last, compile_, deterministic, data_on_device)
    if runtime:
        cfg.runtime = {**cfg.runtime, **runtime}
    if not (cfg.forget_classes or cfg.forget_random is not None or cfg.forget_indices or
            cfg.forget_flipped is not None):
        raise UserError("say what to forget: --forget-classes, --forget-random, --forget-indices or "
                        "--forget-flipped")
    _run(cfg, progress)


RUNTIME_KEYS = ("amp", "channels_last", "compile_", "deterministic", "data_on_device")


def _overrides(given: dict) -> dict:
    """``run``'s options as RunConfig keys over the YAML file's (None: not given, the file's value stays)."""
    out = {k: str(v) if isinstance(v, Path) else v for k, v in given.items()
           if k not in ("epochs", "audit", "idi", "download")}
    out["recipe"] = {"epochs": given["epochs"]} if given["epochs"] is not None else None
    out["audit"] = False if not given["audit"] else None
    out["idi"] = True if given["idi"] else None
    out["download"] = given["download"] or None
    return out


def _run(cfg, progress: bool) -> None:
    from .. import distributed
    from ..runner import print_table, run_experiment
    from ..runtime import resolve_device

    with distributed.process_group(resolve_device(cfg.device)) as world:
        results = run_experiment(cfg, progress=progress)
    if world.is_main:
        print_table(results)
        typer.echo(f"wrote {Path(cfg.out) / 'results.json'} and results.md")
