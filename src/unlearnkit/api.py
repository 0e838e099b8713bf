"""The Python API: unlearn and audit the model and data a user already has.

.. code-block:: python

    import unlearnkit as uk
    result = uk.unlearn(model, method="scrub", forget=forget_ds, retain=retain_ds, epochs=3)
    result.model, result.runtime_s, result.stop_reason, result.history
    report = uk.audit(original, result.model, retrained, forget=forget_ds, retain=retain_ds, test=test_ds)
    print(report.verdict)
    report.save("audit/")          # audit.json, audit.md, audit.html

``forget`` / ``retain`` / ``test`` / ``val`` are each a ``torch.utils.data.Dataset`` (items ``(input,
label)`` or dicts, as a Hugging Face dataset's), a ``DataLoader`` or an ``(x, y)`` pair of tensors,
with inputs exactly as the model takes them (already transformed and normalised;
:mod:`unlearnkit.data.user`). Any ``nn.Module`` that returns ``[batch, classes]`` logits works, or an
object with ``.logits``: its audit layers are found from one probe batch
(:mod:`unlearnkit.models.discover`) or named with ``layers=[...]`` by module path. ``uk.audit`` and
``uk.Auditor`` live in :mod:`unlearnkit.audit.user`; this module holds ``uk.unlearn`` and
``uk.train_references`` (K references for the audit, of the user's own architecture and loop).

A thin layer over the code the CLI runs: ``unlearnkit unlearn`` calls :func:`unlearn_split` with the
split it builds from a dataset name (and ``unlearnkit audit`` calls
:func:`unlearnkit.audit.user.audit_split`).
"""
from __future__ import annotations

import logging

import torch
from torch import nn

from . import validate
from .audit.user import check_model, device_for, probe, read_parts
from .batched import batch_support, batching_pays, fit_batched
from .checkpoints import require_finite
from .data.splits import UnlearningSplit
from .data.user import shared_rows, user_split
from .errors import NonFiniteLossError, UserError
from .loop import Recipe
from .loop import fit as loop_fit
from .methods import METHODS, UnlearningMethod
from .methods.base import UnlearnResult
from .methods.names import method_names
from .models.discover import has_taps, prepare_taps, users_class

__all__ = ["unlearn", "unlearn_split", "UnlearnResult", "train_references"]

log = logging.getLogger(__name__)


def _method(method: str | UnlearningMethod, split: UnlearningSplit, preset: str | None,
            hyperparameters: dict) -> UnlearningMethod:
    """The method object: given, or built by name from ``preset`` and ``hyperparameters`` (checked once)."""
    if isinstance(method, UnlearningMethod):
        if hyperparameters or preset:
            raise UserError("give hyperparameters either in the method object or as keywords, not both")
        return method
    if not isinstance(method, str) or not method.strip():
        raise UserError(f"method must be a method name (unlearnkit list methods), not {method!r}")
    (name,) = method_names([method], setting="vfl")
    cls = METHODS.get(name)
    if preset is not None:
        validate.choice("preset", preset, ("reference", *(p for p in cls.PRESETS if "@" not in p and p != "reference")))
    return cls.from_preset(preset, None, **cls.task_defaults(split, dict(hyperparameters)))


def unlearn_split(model: nn.Module, method: UnlearningMethod, split: UnlearningSplit, *, device,
                  seed: int = 0, progress: bool = False) -> UnlearnResult:
    """Run ``method`` on a copy of ``model`` for ``split``; the :class:`~unlearnkit.methods.UnlearnResult`.
    A model without audit layers gets them first (:func:`~unlearnkit.models.discover.prepare_taps`),
    for the methods that read layers (PURGE)."""
    for part in ("retain", "val", "test"):
        if part in method.needs and not len(getattr(split, {"retain": "train_retain"}.get(part, part))):
            raise UserError(f"{method.name} needs {part} data: pass {part}=...")
    if not has_taps(model) and len(split.train_retain):
        try:
            prepare_taps(model, split.train_retain.x[:4].to(next(model.parameters()).device))
        except UserError:
            pass  # only a method that reads layers needs them, and it says so
    method.check_distributed()
    return method.unlearn(model, split, device=device, seed=seed, progress=progress)


def unlearn(model: nn.Module, method: str | UnlearningMethod, *, forget, retain=None, val=None, test=None,
            preset: str | None = None, seed: int = 0, device: str | None = None, progress: bool = True,
            input_key: str | None = None, label_key: str | None = None, **hyperparameters) -> UnlearnResult:
    """Unlearn ``forget`` from a copy of ``model`` (``model`` itself is not changed).

    Returns an :class:`~unlearnkit.UnlearnResult`: ``.model`` (the unlearned copy, of the model's own
    class), ``.runtime_s`` (the method's wall time), ``.stop_reason`` (``"completed"``, or why it
    stopped early) and ``.history`` (the method's per-epoch records). ``uk.audit`` takes the result
    itself as a model too.

    ``method``: a name (``unlearnkit list methods``; aliases and plug-ins such as ``ec+duck`` too) or a
    method object. ``forget`` (required) / ``retain`` / ``val`` / ``test``: Datasets (of pairs or of
    dicts, read with ``input_key`` / ``label_key`` as :func:`unlearnkit.audit` reads them), DataLoaders or
    ``(x, y)`` tensors (only what the method needs is required). ``preset``: ``None`` or ``"reference"`` =
    the reference's defaults (the method's dataclass defaults), or ``"small"``; ``hyperparameters``
    override them and are checked before anything runs. ``retrain`` is a method too: it re-initialises a
    copy and trains it on ``retain`` (a reference for :func:`audit`). ``seed``: 0..2**32-1. ``device``:
    ``None`` = where ``model`` is. ``progress``: the method's progress bars on stderr (off with ``False``
    or ``UNLEARNKIT_PROGRESS=0``).

    Every argument is checked before any work (a :class:`~unlearnkit.UserError` naming it): the model
    must be float32 (float64 and half models are refused, not converted: ``model.float()``) with
    trainable parameters and finite weights (a NaN or an infinity is refused, naming the tensor); forget rows
    may not also appear in ``retain``; no part may be on the ``meta`` device. Hyperparameters under which
    the loss becomes NaN or infinite end in a :class:`~unlearnkit.UserError` too (naming the method and the
    step; ``model`` is unchanged)."""
    model = require_finite(check_model(model, "model", trainable=True), "model")
    seed = validate.whole("seed", seed, low=0, high=validate.MAX_SEED)
    dev = device_for(device, model)
    if forget is None:
        raise UserError("forget is required: the rows to unlearn (a Dataset, a DataLoader or (x, y) tensors)")
    parts = read_parts(forget=forget, retain=retain, test=test, val=val, input_key=input_key, label_key=label_key)
    model, num_classes = probe(model, parts["forget"].x[:4], "model")
    split = user_split(**parts, num_classes=num_classes)
    chosen = _method(method, split, preset, hyperparameters)
    try:
        result = unlearn_split(model, chosen, split, device=dev, seed=seed, progress=bool(progress))
    except NonFiniteLossError as e:  # the hyperparameters diverge on this model: the caller's to change
        raise UserError(f"{e}; the model passed in is unchanged") from None
    result.model = users_class(result.model)
    return result


#: the recipe :func:`train_references` trains with when given neither ``fit`` nor ``recipe``: short, and stated
#: here because a reference must be trained as the original was (give that recipe, or that ``fit``, instead);
#: no augmentation (the user's inputs come already transformed)
QUICK_RECIPE = Recipe(optimizer="sgd", lr=0.05, momentum=0.9, weight_decay=5e-4, epochs=10, batch_size=64,
                      schedule="cosine", augment=False)


def train_references(make_model, fit=None, *, forget, retain, k: int | None = None, recipe=None, seeds=None,
                     device: str | None = None, progress: bool = True, input_key: str | None = None,
                     label_key: str | None = None) -> list[nn.Module]:
    """K references for :func:`unlearnkit.audit`: models of the user's architecture trained from scratch on
    ``retain`` without ``forget``, one per seed; returned as a list of ``nn.Module`` in eval mode.

    A reference must be trained exactly as the original was (same architecture, recipe and data minus the
    forget set) with another seed; trained otherwise (shorter, another optimizer, with the forget set),
    the references' spread and level are not a retrain's, and the audit's verdicts measure the difference
    of recipes instead of what the original remembers.

    ``make_model()``: builds a new model, as the original's training started; it is called right after
    ``torch.manual_seed(seed)`` and should draw its initial weights from torch's generator (two seeds giving the
    same weights are logged as a warning: right only for an original fine-tuned from those weights).
    ``fit(model, retain, seed)``: the user's own training function (the original's), called one model after
    another with ``retain`` exactly as given; it trains ``model`` in place or returns the trained model.
    Without ``fit``, unlearnkit's loop trains them with ``recipe`` (a :class:`~unlearnkit.loop.Recipe` or a
    dict of its fields; default :data:`QUICK_RECIPE`: SGD lr 0.05, momentum 0.9, weight decay 5e-4, batch 64,
    10 epochs, cosine, no augmentation); on a CUDA device all K together, batched across the models
    (:mod:`unlearnkit.batched`, equal to one after another up to float rounding) when the architecture
    allows, else (and on the CPU, where batching measured no faster: :func:`unlearnkit.batched.batching_pays`)
    one after another (the reason logged). ``k`` (default 8) references of seeds ``0..k-1``,
    or ``seeds`` (distinct, 0..2**32-1; where the party audited may attack the audit, seeds it cannot guess,
    e.g. ``[secrets.randbits(31) for _ in range(16)]``: references of guessable seeds it can train itself).
    ``forget`` / ``retain``: as :func:`unlearn` takes them; a forget row
    inside ``retain`` is refused. Every argument is checked before any training (a
    :class:`~unlearnkit.UserError` naming it)."""
    seeds = _reference_seeds(k, seeds)
    if not callable(make_model) or isinstance(make_model, nn.Module):
        raise UserError(f"make_model must be a function that builds a new model (e.g. lambda: MyNet()), not "
                        f"{type(make_model).__name__}")
    if fit is not None and not callable(fit):
        raise UserError(f"fit must be a function fit(model, retain, seed), not {type(fit).__name__}")
    if fit is not None and recipe is not None:
        raise UserError("give fit or recipe, not both: recipe sets unlearnkit's loop, fit trains with your own")
    recipe = _recipe(recipe)
    if forget is None or retain is None:
        raise UserError(f"{'forget' if forget is None else 'retain'} is required: references are trained on retain, "
                        f"without forget")
    parts = read_parts(forget=forget, retain=retain, input_key=input_key, label_key=label_key)
    models = _initial_models(make_model, seeds, parts["retain"])
    shared = shared_rows(parts["forget"], parts["retain"])
    if shared:
        raise UserError(f"{shared} of the {len(parts['forget'])} forget rows also appear in retain: a reference "
                        f"must be trained without the forget set")
    dev = device_for(device, models[0])
    try:
        if fit is not None:
            trained = [_users_fit(fit, m, retain, s) for m, s in zip(models, seeds)]
        else:
            trained = _fit_references(models, parts["retain"], recipe, seeds, device=dev, progress=bool(progress))
    except NonFiniteLossError as e:
        raise UserError(f"{e}; pass another recipe") from None
    return [users_class(m).eval() for m in trained]


def _reference_seeds(k, seeds) -> list[int]:
    """The references' seeds: ``seeds`` (distinct), else ``0..k-1``; ``k`` and ``seeds`` must agree."""
    if seeds is None:
        return list(range(validate.whole("k", 8 if k is None else k, low=1, high=10_000)))
    if isinstance(seeds, (str, bytes)) or not hasattr(seeds, "__iter__"):
        raise UserError(f"seeds must be a list of whole numbers, not {type(seeds).__name__}")
    seeds = [validate.whole("seeds", s, low=0, high=validate.MAX_SEED) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"seeds must be distinct (two references of one seed are one model), and at least one: {seeds}")
    if k is not None and validate.whole("k", k, low=1) != len(seeds):
        raise UserError(f"k ({k}) and seeds ({len(seeds)} of them) disagree: give one of them")
    return seeds


def _recipe(recipe) -> Recipe:
    if recipe is None:
        return QUICK_RECIPE
    if isinstance(recipe, Recipe):
        return recipe
    if isinstance(recipe, dict):
        known = set(Recipe.__dataclass_fields__)
        bad = sorted(set(recipe) - known)
        if bad:
            raise UserError(f"recipe has unknown field(s) {bad}; known: {sorted(known)}")
        return Recipe(**recipe)
    raise UserError(f"recipe must be an unlearnkit Recipe or a dict of its fields, not {type(recipe).__name__}")


def _initial_models(make_model, seeds: list[int], retain) -> list[nn.Module]:
    """One untrained model per seed (``make_model()`` right after ``torch.manual_seed(seed)``), checked: new
    objects, float32 and trainable, taking ``retain``'s inputs, initialised differently by different seeds."""
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        model = check_model(make_model(), "make_model()", trainable=True)
        if any(model is m for m in models):
            raise UserError("make_model() returned the same model twice: it must build a new one on each call")
        model, num_classes = probe(model, retain.x[:4], "make_model()", "retain")
        if int(retain.y.max()) >= num_classes or int(retain.y.min()) < 0:
            raise UserError(f"retain has labels outside 0..{num_classes - 1} (the model has {num_classes} outputs)")
        models.append(model)
    if len(models) > 1 and all(torch.equal(a, b) for a, b in zip(models[0].state_dict().values(),
                                                                  models[1].state_dict().values())):
        log.warning("make_model() built identical models for seeds %s and %s: the references differ only in their "
                    "data order. Right when the original was fine-tuned from these very weights; otherwise "
                    "make_model must draw its initial weights from torch's generator (no fixed seed inside)",
                    seeds[0], seeds[1])
    return models


def _users_fit(fit, model: nn.Module, retain, seed: int) -> nn.Module:
    """``fit(model, retain, seed)``: the model it returns, else ``model`` (trained in place); finite weights."""
    out = fit(model, retain, seed)
    trained = out if isinstance(out, nn.Module) else model
    return require_finite(trained, f"the model fit returned for seed {seed}")


def _fit_references(models: list[nn.Module], retain, recipe: Recipe, seeds: list[int], *, device,
                    progress: bool) -> list[nn.Module]:
    """Train ``models`` with unlearnkit's loop: together (batched) when the architecture allows, else one by one."""
    why = "one model" if len(models) < 2 else batching_pays(device) or batch_support(models[0], retain.x[:2])
    if why is None:
        fit_batched(models, retain, recipe, None, seeds=seeds, device=device, description="reference",
                    progress=progress)
        return models
    if len(models) > 1:
        log.info("references trained one after another: %s", why)
    for model, seed in zip(models, seeds):
        loop_fit(model, retain, recipe, None, seed=seed, device=device, description=f"reference {seed}",
                 progress=progress)
    return models
