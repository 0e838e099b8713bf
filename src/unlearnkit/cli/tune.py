"""``unlearnkit tune``: option parsing and printing only, registered in cli/__init__.py.

The work is :mod:`unlearnkit.tune` (an Optuna search on the validation split, resumable).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .. import validate
from ..errors import UserError


def tune_command(
    *,
    dataset: str = typer.Option(..., help="dataset name (unlearnkit list datasets)"),
    model: str = typer.Option("small_cnn", help="model name (unlearnkit list models)"),
    forget_classes: Optional[str] = typer.Option(None, help="classes to forget, e.g. 3 or 3,8"),
    forget_random: Optional[float] = typer.Option(None, help="random forget set: fraction (0,1) or count"),
    forget_flipped: Optional[float] = typer.Option(None, help="mislabeled data: a random fraction in (0, 0.5) of "
                                                   "train gets another class's label (as run draws it), then "
                                                   "is forgotten"),
    method: str = typer.Option(..., help="the method to tune (one that declares a SEARCH_SPACE, e.g. ssd)"),
    trials: int = typer.Option(30, min=1, help="trials in all (a rerun continues the same study up to this)"),
    preset: str = typer.Option("reference", help="the preset the searched values apply over: reference | small"),
    seed: int = typer.Option(0, **validate.SEED_RANGE, help="seed of the references, the method and the sampler"),
    data_seed: int = typer.Option(0, **validate.SEED_RANGE, help="seed of the train/val/test split"),
    db: Path = typer.Option(Path("results/unlearnkit.db"), help="SQLite store holding the study (resumable)"),
    out: Path = typer.Option(..., help="preset file to write (YAML), for run --preset / a suite's preset:"),
    cache_dir: Optional[Path] = typer.Option(None, help="model cache (default ~/.cache/unlearnkit/models)"),
    data_dir: Path = typer.Option(Path("data"), help="where torchvision datasets live"),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
    progress: bool = typer.Option(True, help="show progress"),
):
    """Search a method's hyperparameters on the validation split (never the test set), against retrain."""
    from ..config import RunConfig
    from ..data.splits import ForgetSpec
    from ..runner import check_config
    from ..runtime import resolve_device
    from ..tune import check_method, check_store, require_optuna

    require_optuna()  # the tune extra: one line saying how to install it, before anything else
    spec = ForgetSpec.from_options(forget_classes, forget_random, None, forget_flipped)
    name = check_method(method)
    validate.choice("--preset", preset, ("reference", "small"))
    out = validate.output_file("--out", out)
    if out.suffix.lower() not in (".yaml", ".yml"):
        raise UserError(f"--out must name a .yaml file (run and bench read preset files by that suffix), not {out}")
    db = check_store(validate.output_file("--db", db))  # a file that is not a SQLite database: refused now
    cfg = RunConfig(dataset=dataset, model=model, forget_classes=list(spec.classes), forget_random=spec.random,
                    forget_flipped=spec.flipped, methods=[name], preset=preset, seed=seed, data_seed=data_seed,
                    out=str(out.parent),
                    data_dir=str(data_dir), device=device, cache_dir=str(cache_dir) if cache_dir else None,
                    audit=False)
    resolve_device(device)
    check_config(cfg)  # the cache folder, the method's hyperparameters: before the study is created
    return _tune(cfg, name, preset, trials=trials, db=db, out=out, progress=progress)


def _tune(cfg, name: str, preset: str, *, trials: int, db: Path, out: Path, progress: bool):
    """Load or create the study, run the trials still missing, write the best as a preset file."""
    import optuna

    from ..checkpoints import atomic_write_text
    from ..methods.tuned import preset_file_text
    from ..tune import create_study, finished, objective_for, prepare_task, study_name, tuned_on

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = create_study(db, study_name(cfg, name, preset), cfg.seed)  # a killed run's trials: marked failed
    before = finished(study)
    typer.echo(f"study {study.study_name!r} in {db}: {before} of {trials} trials finished before")
    if before < trials:
        task = prepare_task(cfg, progress)
        ref = task.reference
        typer.echo(f"retrain on the validation split: forget {ref['forget_acc']:.1f} %, retain "
                   f"{ref['retain_acc']:.1f} %, val {ref['test_acc']:.1f} %, MIA-eff. {ref['mia_efficacy']:.1f}")
        study.optimize(objective_for(task, name, preset), n_trials=trials - before, callbacks=[_say])
    if not any(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials):
        raise UserError(f"no trial of {name} finished (all pruned or failed): widen its SEARCH_SPACE or add trials")
    best = study.best_trial
    atomic_write_text(out, preset_file_text(preset, name, dict(best.params), tuned_on(cfg, study, trials)))
    typer.echo(f"best: trial {best.number}, objective {best.value:.3f} (Gap {best.user_attrs.get('gap', 0):.2f}, "
               f"separability ratio {best.user_attrs.get('separability_ratio') or float('nan'):.2f}, verdict on "
               f"val {best.user_attrs.get('verdict')}): {_params(best.params)}")
    typer.echo(f"wrote {out}")
    return study


def _params(params: dict) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def _say(study, trial) -> None:
    import optuna

    a = trial.user_attrs
    if trial.state == optuna.trial.TrialState.PRUNED and "duplicate_of" in a:
        value = f"skipped (the same point as trial {a['duplicate_of']})"
    elif trial.state == optuna.trial.TrialState.PRUNED:
        value = f"pruned (Gap {a['gap']:.2f}, worse than the median)" if "gap" in a else "pruned"
    elif trial.value is not None:
        value = f"objective {trial.value:.3f}"
    else:
        value = str(trial.state.name).lower()
    acc = (f"forget {a['forget_acc']:.1f} %, retain {a['retain_acc']:.1f} %, val {a['test_acc']:.1f} %"
           if "forget_acc" in a else a.get("error", ""))
    typer.echo(f"trial {trial.number}: {value}; {acc}; {_params(trial.params)}")
