"""Retrain: the gold standard, training from a fresh initialisation on the retained data only.

Reference: SalUn ``main_forget.py --unlearn retrain`` (reference-specs §1.1): same optimizer and
schedule as the original, trained on D_r. In ``unlearnkit run`` the ``retrain`` row is the cached
reference model (trained once with the dataset's recipe); this class lets it run as a method too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..loop import Recipe, fit
from .base import UnlearningMethod, UnlearnResult, register_method
from .common import reinit


@register_method("retrain", "RT")
@dataclass
class Retrain(UnlearningMethod):
    paper = "retrain from scratch on D_r (exact unlearning; the reference every audit compares with)"
    needs = frozenset({"retain"})
    starts_from_scratch = True
    distributed = True  # fit() is data-parallel
    is_reference = True  # run / bench take this row from the cached retrained model
    PRESETS = {"reference": {}, "small": {"recipe": {"lr": 0.05, "epochs": 15, "batch_size": 128}},
               "test": {"recipe": {"lr": 0.05, "epochs": 1, "batch_size": 64}}}

    recipe: dict = field(default_factory=lambda: {"lr": 0.1, "epochs": 182, "batch_size": 256,
                                                   "schedule": "multistep", "milestones": [91, 136]})

    def _unlearn(self, model, data, original, device, gen, progress):
        reinit(model)
        seed = int(gen.initial_seed())
        state = fit(model, data.retain, Recipe(**self.recipe), data.augment, seed=seed, device=device,
                    description="retrain", progress=progress)
        return UnlearnResult(model, "completed", state.history)
