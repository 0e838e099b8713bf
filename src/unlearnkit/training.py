"""Training recipes, the training loop, and the content-addressed cache of original/retrain models.

``default_recipe(dataset, model)`` gives SalUn's recipe (reference-specs §1.1: SGD lr 0.1, momentum
0.9, wd 5e-4, batch 256, 182 epochs, steps at 91/136) for ResNets on CIFAR-like data, and short
recipes tuned for the bundled data on CPU. ``reference_model`` trains the ``original`` (full
training split) or the ``retrain`` reference (``train_retain`` only, same recipe, same seed)
through a cache keyed by (dataset, split hash, model, recipe, seed, code version, and bf16 autocast
when used): a second run reuses them; an interrupted training resumes from its last finished epoch.
``reference_models`` gives several seeds' references, each under its own key, trained together
(batched across the models, :mod:`unlearnkit.batched`) where the architecture allows. Under
``torchrun`` all ranks train together; rank 0 alone holds the cache lock, reads and writes the cache
and the partial state, and sends the others what they need (``distributed.py``).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import distributed, validate
from ._version import __version__
from .checkpoints import atomic_write_bytes, file_lock, load_checkpoint, save_checkpoint
from .errors import CheckpointError, UserError, WriteFailed
from .loop import Recipe, fit
from .models.zoo import create_model
from .runtime import Runtime

log = logging.getLogger(__name__)

TRAINING_CODE_VERSION = 1  # bump when the loop changes numerics, to invalidate cached models


SALUN_RECIPE = Recipe(lr=0.1, momentum=0.9, weight_decay=5e-4, epochs=182, batch_size=256,
                      schedule="multistep", milestones=(91, 136), gamma=0.1)


# Mirage's VFL recipe (mirage_lib.py::train_vfl, CONFIG): SGD lr 0.01, momentum 0.9, wd 5e-4, batch 128,
# cosine over 50 epochs; Adam lr 1e-3, wd 1e-4 for flat (tabular) data. On the bundled data this CPU
# runs far fewer epochs (VFL_BUNDLED), without augmentation like Mirage's MNIST; on mnist5k Mirage's
# lr 0.01 gave 81 % test accuracy after 4 epochs (28 steps each), so it uses lr 0.05 there.
MIRAGE_VFL_RECIPE = Recipe(lr=0.01, momentum=0.9, weight_decay=5e-4, epochs=50, batch_size=128, schedule="cosine")
MIRAGE_FLAT_RECIPE = Recipe(optimizer="adam", lr=1e-3, weight_decay=1e-4, epochs=50, batch_size=128,
                            schedule="cosine", augment=False)
VFL_BUNDLED = {"mnist5k": {"epochs": 8, "lr": 0.05}, "digits": {"epochs": 20}, "digits_flat": {"epochs": 30}}


def default_recipe(dataset: str, model: str) -> Recipe:
    """Good defaults per dataset/model (SalUn's for ResNets on 32x32 colour data, Mirage's for VFL)."""
    if model == "vfl" or dataset == "digits_flat":
        base = MIRAGE_FLAT_RECIPE if dataset == "digits_flat" else MIRAGE_VFL_RECIPE
        return replace(base, augment=False, **VFL_BUNDLED[dataset]) if dataset in VFL_BUNDLED else base
    if model in ("resnet18", "resnet50") and dataset in ("cifar10", "cifar100", "cifar100_coarse", "svhn"):
        return SALUN_RECIPE
    if dataset == "digits":
        return Recipe(lr=0.05, epochs=20, batch_size=64)
    if dataset == "mnist5k":
        return Recipe(lr=0.05, epochs=15, batch_size=128)
    if dataset in ("mnist", "fashion_mnist"):
        return Recipe(lr=0.05, epochs=20, batch_size=128)
    return Recipe(lr=0.05, epochs=30, batch_size=128)


# ---------------------------------------------------------------------------------------------
# content-addressed cache of reference models


def default_cache_dir() -> Path:
    env = os.environ.get("UNLEARNKIT_CACHE")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "unlearnkit" / "models"


def check_cache_dir(name: str, path: str | Path | None) -> Path:
    """The model cache (``path``, else the default) must be writable: models are stored there.
    Checked before any training (:func:`unlearnkit.validate.output_dir`)."""
    return validate.output_dir(name, Path(path).expanduser() if path else default_cache_dir())


def reference_key(kind: str, split, model_name: str, model_kwargs: dict, recipe: Recipe, seed: int, *,
                  runtime: Runtime | None = None) -> dict:
    """What a cached original/retrain model depends on (the original ignores the forget set).

    Not the device, the number of processes, nor runtime options that only reorder floating-point
    work: a model trained data-parallel on GPUs is the same model as one trained on a CPU. A split with
    flipped labels (``split.extra["label_noise"]``) adds the flip, so its original never shares a clean one's
    cache entry (the key of every other split is unchanged)."""
    noise = split.extra.get("label_noise")
    return {**(runtime or Runtime()).cache_key(), **({"label_noise": noise} if noise else {}),
        "kind": kind, "dataset": split.dataset.fingerprint(),
        "split_hash": split.split_hash if kind == "retrain" else None,
        "label_space": split.extra.get("label_space", "fine"),
        "model": model_name, "model_kwargs": model_kwargs, "recipe": recipe.to_dict(), "seed": seed,
        "training_code": TRAINING_CODE_VERSION,
    }


@dataclass
class Reference:
    model: nn.Module
    meta: dict
    path: Path
    cached: bool


def reference_model(kind: str, split, model_name: str, recipe: Recipe, *, seed: int = 0,
                    model_kwargs: dict | None = None, cache_dir: str | Path | None = None,
                    device: torch.device | str = "cpu", progress: bool = True,
                    runtime: Runtime | None = None) -> Reference:
    """The ``original`` (trained on all of ``split.train``) or ``retrain`` (on ``split.train_retain``)."""
    if kind not in ("original", "retrain"):
        raise ValueError(kind)
    model_kwargs = dict(model_kwargs or {})
    key, path = reference_path(kind, split, model_name, model_kwargs, recipe, seed, cache_dir=cache_dir,
                               runtime=runtime)
    main = distributed.world().is_main
    if main:
        _make_cache(path.parent)
    # no two processes (jobs) train the same model; the lock file goes with the lock (none is left stale)
    with file_lock(path.with_suffix(".lock")) if main else contextlib.nullcontext():
        cached = _cached(path, kind) if main else None
        if distributed.world().size > 1:  # the other ranks get rank 0's cached model, or train with it
            got = distributed.broadcast_torch(None if cached is None else {"state": cached[0].state_dict(),
                                                                            "meta": cached[1]})
            if got is not None and not main:
                cached = (_build(model_name, split.dataset, model_kwargs, got["state"]), got["meta"])
        if cached is not None:
            return Reference(cached[0].to(device), cached[1], path, cached=True)
        data = split.train if kind == "original" else split.retrain_data
        torch.manual_seed(seed)
        model = _build(model_name, split.dataset, model_kwargs)
        partial = path.with_suffix(".partial.pt")
        resume = _partial(partial, kind) if main else None
        resume = distributed.broadcast_torch(resume)

        def save_partial(st: dict) -> None:
            if st["epoch"] < recipe.epochs:
                atomic_write_bytes(partial, lambda f: torch.save(st, f))

        state = fit(model, data, recipe, split.dataset.augment, seed=seed, device=device,
                    description=f"{kind} {model_name}", progress=progress, resume=resume, on_epoch=save_partial,
                    runtime=runtime)
        meta = _meta(kind, key, state, len(data))
        if main:
            save_checkpoint(model, path, meta)
            partial.unlink(missing_ok=True)
            model, meta = load_checkpoint(path)
        got = distributed.broadcast_torch({"state": model.state_dict(), "meta": meta} if main else None)
        if not main:  # exactly what rank 0 wrote
            model.load_state_dict(got["state"])
            meta = got["meta"]
        return Reference(model.to(device), meta, path, cached=False)


def reference_path(kind: str, split, model_name: str, model_kwargs: dict, recipe: Recipe, seed: int, *,
                   cache_dir: str | Path | None = None, runtime: Runtime | None = None) -> tuple[dict, Path]:
    """``(key, path)`` of a reference's cache entry (:func:`reference_key`; the path names its digest)."""
    key = reference_key(kind, split, model_name, model_kwargs, recipe, seed, runtime=runtime)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    ds = split.dataset.name.replace("/", "_").replace(":", "_")[:40]
    return key, cache / f"{ds}-{model_name.replace(':', '_').replace('/', '_')}-{kind}-s{seed}-{digest}.pt"


def _make_cache(cache: Path) -> None:
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WriteFailed(e.errno, e.strerror, str(cache)) from None


def _meta(kind: str, key: dict, state, n_train: int, batched: dict | None = None) -> dict:
    """A reference checkpoint's metadata; ``batched``: how it was trained together with others (its
    ``train_time_s`` is then its share of their wall time)."""
    meta = {"kind": kind, "key": key, "train_time_s": state.elapsed_s, "history": state.history,
            "n_train": n_train, "versions": versions(), "numerics": numerics()}
    return {**meta, "batched": batched} if batched else meta


def reference_models(kind: str, split, model_name: str, recipe: Recipe, *, seeds: list[int],
                     model_kwargs: dict | None = None, cache_dir: str | Path | None = None,
                     device: torch.device | str = "cpu", progress: bool = True, runtime: Runtime | None = None,
                     batched: bool | None = None) -> list[Reference]:
    """:func:`reference_model` for several seeds, each cached under its own key (the same key, path and
    checkpoint format as one trained alone, so the cache and the results' provenance read them alike).
    Those not in the cache are trained together (:func:`unlearnkit.batched.fit_batched`: equal to
    sequential training up to float rounding) when there are two or more, the architecture allows it and
    ``batched`` says so (None, the default: on a CUDA device only, :func:`unlearnkit.batched.batching_pays`;
    True: on any device); otherwise, or under ``torchrun``, one after another (the reason logged).
    Their metadata says so: ``batched`` holds the seeds trained together and the wall time, and
    ``train_time_s`` is each one's share of it. Interrupted, each resumes from its last finished epoch
    (those resuming from one epoch are trained together)."""
    from .batched import batch_support, batching_pays

    if kind not in ("original", "retrain"):
        raise ValueError(kind)
    seeds = [int(s) for s in seeds]
    if len(set(seeds)) != len(seeds):
        raise UserError(f"seeds must be distinct (references of one seed are one model): {seeds}")
    model_kwargs = dict(model_kwargs or {})
    common = dict(model_kwargs=model_kwargs, cache_dir=cache_dir, device=device, progress=progress, runtime=runtime)
    data = split.train if kind == "original" else split.retrain_data
    why = ("batched training is off" if batched is False else "one model" if len(seeds) < 2 else
           (batching_pays(device) if batched is None else None)
           or batch_support(_build(model_name, split.dataset, model_kwargs), data.normalize(data.x[:2]),
                            runtime=runtime))
    if why is not None:
        paths = [reference_path(kind, split, model_name, model_kwargs, recipe, s, cache_dir=cache_dir,
                                runtime=runtime)[1] for s in seeds]
        if len(seeds) > 1 and not all(p.exists() for p in paths):  # said only when something is to be trained
            log.info("references of seeds %s trained one after another: %s", seeds, why)
        return [reference_model(kind, split, model_name, recipe, seed=s, **common) for s in seeds]
    entries = {s: reference_path(kind, split, model_name, model_kwargs, recipe, s, cache_dir=cache_dir,
                                 runtime=runtime) for s in seeds}
    _make_cache(entries[seeds[0]][1].parent)
    with contextlib.ExitStack() as locks:  # one lock per model, taken in one order (no two processes deadlock)
        for _, path in sorted(entries.values(), key=lambda e: str(e[1])):
            locks.enter_context(file_lock(path.with_suffix(".lock")))
        found = {s: _cached(entries[s][1], kind) for s in seeds}
        todo = {s: entries[s] for s in seeds if found[s] is None}
        job = Batch(kind, split, model_name, recipe, todo, runtime)
        trained = _train_together(job, model_kwargs=model_kwargs, device=device, progress=progress) if todo else {}
    return [Reference(found[s][0].to(device), found[s][1], entries[s][1], cached=True) if found[s] is not None
            else trained[s] for s in seeds]


@dataclass
class Batch:
    """What :func:`reference_models` trains: references of one kind, split, architecture and recipe, and
    each one's cache entry (seed -> (key, path))."""

    kind: str
    split: object
    model_name: str
    recipe: Recipe
    entries: dict[int, tuple[dict, Path]]
    runtime: Runtime | None

    @property
    def data(self):
        return self.split.train if self.kind == "original" else self.split.retrain_data


def _train_together(job: Batch, *, model_kwargs: dict, device, progress: bool) -> dict[int, Reference]:
    """Train ``job``'s references, grouped by the epoch their partial states resume from (a group of
    several batched, one alone by :func:`unlearnkit.loop.fit`); each checkpoint written, then read back."""
    resumes = {s: _partial(path.with_suffix(".partial.pt"), job.kind) for s, (_, path) in job.entries.items()}
    groups: dict[int, list[int]] = {}
    for s in job.entries:
        groups.setdefault(int(resumes[s]["epoch"]) if resumes[s] else 0, []).append(s)
    out = {}
    for seeds in groups.values():
        models = [_seeded(job.model_name, job.split.dataset, model_kwargs, s) for s in seeds]
        states, together = _fit_group(job, seeds, models, [resumes[s] for s in seeds], device=device,
                                      progress=progress)
        for s, model, state in zip(seeds, models, states):
            key, path = job.entries[s]
            save_checkpoint(model, path, _meta(job.kind, key, state, len(job.data), together))
            path.with_suffix(".partial.pt").unlink(missing_ok=True)
            model, meta = load_checkpoint(path)
            out[s] = Reference(model.to(device), meta, path, cached=False)
    return out


def _fit_group(job: Batch, seeds: list[int], models: list[nn.Module], resumes: list[dict | None], *, device,
               progress: bool) -> tuple[list, dict | None]:
    """Train ``models`` (of ``seeds``, resuming from one epoch): together when there are several, else with
    :func:`unlearnkit.loop.fit`; their histories and the ``batched`` metadata (None when alone)."""
    from .batched import fit_batched

    paths = [job.entries[s][1].with_suffix(".partial.pt") for s in seeds]

    def save_partial(k: int, st: dict) -> None:
        if st["epoch"] < job.recipe.epochs:
            atomic_write_bytes(paths[k], lambda f: torch.save(st, f))

    description = f"{job.kind} {job.model_name}"
    if len(models) == 1:
        state = fit(models[0], job.data, job.recipe, job.split.dataset.augment, seed=seeds[0], device=device,
                    description=description, progress=progress, resume=resumes[0],
                    on_epoch=lambda st: save_partial(0, st), runtime=job.runtime)
        return [state], None
    states = fit_batched(models, job.data, job.recipe, job.split.dataset.augment, seeds=seeds, device=device,
                         description=description, progress=progress,
                         resumes=resumes if resumes[0] is not None else None, on_epoch=save_partial,
                         runtime=job.runtime)
    return states, {"seeds": list(seeds), "wall_s": sum(st.elapsed_s for st in states)}


def _seeded(model_name: str, bundle, model_kwargs: dict, seed: int) -> nn.Module:
    """The model a training of ``seed`` starts from (built right after ``torch.manual_seed(seed)``)."""
    torch.manual_seed(seed)
    return _build(model_name, bundle, model_kwargs)


def check_model(model_name: str, bundle, model_kwargs: dict) -> None:
    """Build the model once, before any training: an unknown architecture or a bad ``model_kwargs``
    value is one :class:`UserError` line, not a traceback minutes later."""
    try:
        _build(model_name, bundle, model_kwargs)
    except UserError:  # an unknown name already says what to do (a UserError is a ValueError too)
        raise
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"cannot build model {model_name} with model_kwargs {model_kwargs}: "
                        f"{' '.join(str(e).split())}") from None


def _build(model_name: str, bundle, model_kwargs: dict, state: dict | None = None) -> nn.Module:
    model = create_model(model_name, num_classes=bundle.num_classes, in_channels=bundle.in_channels,
                         image_size=bundle.image_size, **model_kwargs)
    if state is not None:
        model.load_state_dict(state)
    return model


def _cached(path: Path, kind: str) -> tuple[nn.Module, dict] | None:
    if not path.exists():
        return None
    try:
        return load_checkpoint(path)
    except CheckpointError as e:
        log.warning("cached %s model unusable (%s); training it again", kind, e)
        return None


def _partial(partial: Path, kind: str) -> dict | None:
    if not partial.is_file() or validate.special_kind(partial) is not None:  # a FIFO would block torch.load
        return None
    try:
        resume = torch.load(partial, map_location="cpu", weights_only=True)
        log.info("resuming %s training from epoch %s", kind, resume["epoch"])
        return resume
    except Exception:
        return None


def versions() -> dict[str, Any]:
    import platform

    import torchvision

    return {"unlearnkit": __version__, "torch": torch.__version__, "torchvision": torchvision.__version__,
            "python": platform.python_version()}


def numerics() -> dict[str, Any]:
    """What, besides the versions, decides a run's bits on the CPU: the torch threads of this process
    (the intra-op reductions of convolutions and sums split their work by thread, so 1 and 2 threads add
    in a different order; ``--jobs N`` gives each worker ``cores // N``) and ATen's CPU kernels
    (``ATEN_CPU_CAPABILITY``). Measured here (docs/performance.md, "Reproducibility"): the same command
    with the same threads gives bit-identical models; with 1 thread against 2 the weights differ."""
    return {"torch_threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def with_overrides(recipe: Recipe, **overrides) -> Recipe:
    return replace(recipe, **{k: v for k, v in overrides.items() if v is not None})
