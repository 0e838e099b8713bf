"""``unlearnkit train``: an original model, or the reference retrained without the forget set."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import validate
from ..errors import UserError
from .options import AMP, CHANNELS_LAST, COMPILE, DATA_ON_DEVICE, DETERMINISTIC, runtime_options


def train_command(
    *,
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
    forget_flipped: Optional[float] = typer.Option(None, help="mislabeled data: a random fraction in (0, 0.5) of "
                                                   "train gets another class's label (as run draws it); the "
                                                   "original trains on those labels, --retrain without them"),
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
    from ..config import RunConfig
    from ..data.splits import ForgetSpec
    from ..runtime import Runtime
    from ..training import check_cache_dir

    given = (forget_classes, forget_random, forget_indices, forget_flipped)
    if retrain and all(v is None for v in given):
        raise UserError("--retrain needs the forget set: --forget-classes, --forget-random, --forget-indices or "
                        "--forget-flipped")
    # the original ignores the forget set (except --forget-flipped: it trains on the flipped labels); without
    # one, class 0 stands in
    spec = ForgetSpec.from_options(*given) if any(v is not None for v in given) else ForgetSpec(classes=(0,))
    if lr is not None:
        validate.learning_rate("--lr", lr)
    validate.output_file("--out", out)  # before training: a model that cannot be saved is lost time
    check_cache_dir("--cache-dir", cache_dir)
    cfg = RunConfig(dataset=dataset, model=model, setting=setting, parties=parties, data_seed=data_seed, seed=seed,
                    device=device, data_dir=str(data_dir), download=download,
                    cache_dir=str(cache_dir) if cache_dir else None)
    runtime = Runtime.from_dict(runtime_options(amp, channels_last, compile_, deterministic, data_on_device))
    _train(cfg, spec, retrain, out, {"epochs": epochs, "lr": lr, "batch_size": batch_size}, runtime)


def _train(cfg, spec, retrain: bool, out: Path, recipe_overrides: dict, runtime) -> None:
    """Build data, split, model and recipe as ``run`` does, train (or reuse from the cache), copy to ``out``."""
    from .. import distributed
    from ..checkpoints import atomic_write_bytes
    from ..data.datasets import load_dataset
    from ..data.splits import make_split
    from ..runner import resolve_model
    from ..runtime import resolve_device
    from ..training import check_model, default_recipe, reference_model, with_overrides

    dev = resolve_device(cfg.device)
    bundle = load_dataset(cfg.dataset, cfg.data_dir, cfg.download, cfg.data_seed)
    split = make_split(bundle, spec, seed=cfg.data_seed)
    _, name, kwargs = resolve_model(cfg, bundle)
    check_model(name, bundle, kwargs)
    recipe = with_overrides(default_recipe(bundle.name, name), **recipe_overrides)
    with distributed.process_group(dev) as world:
        ref = reference_model("retrain" if retrain else "original", split, name, recipe, seed=cfg.seed,
                              model_kwargs=kwargs, cache_dir=cfg.cache_dir, device=dev, runtime=runtime)
        if not world.is_main:
            return
        atomic_write_bytes(out, lambda f: f.write(Path(ref.path).read_bytes()))
        procs = f", {world.size} processes" if world.size > 1 else ""
        typer.echo(f"wrote {out} ({'cached' if ref.cached else 'trained'}{procs}; sha256 {ref.meta['sha256'][:12]})")
