"""Label domains and TARF's label-domain mismatch tasks (seed 002, reference-specs §4).

A *concept* S is a set of fine classes (a superclass). Superclass maps:
- ``cifar100``: the official 20 coarse labels (5 fine classes each), read from the dataset.
- ``cifar10``: five semantic pairs {airplane, ship}, {automobile, truck}, {cat, dog}, {deer, horse},
  {bird, frog} (INFERRED: the paper's grouping, Dhakad et al. 2024, App. D.4, was not recovered).
- ``digits`` / ``mnist5k`` / ``mnist``: five visually confusable digit pairs {3,8}, {4,9}, {1,7},
  {0,6}, {2,5} (our choice for the bundled data; documented, not from the paper).

Tasks, with D_f the forgotten fine class c ∈ S (table of §4):

=================  =============  ==========  ============  ============  ==========
task               model labels   D_t         D_fr          D_ar          retrain on
=================  =============  ==========  ============  ============  ==========
all_matched        fine           D_f         ∅             ∅             D \\ D_f
target_mismatch    fine           S           S \\ c        ∅             D \\ S
model_mismatch     superclass     D_f         ∅             S \\ c        D \\ D_f
data_mismatch      superclass     S           S \\ c        ∅             D \\ S
=================  =============  ==========  ============  ============  ==========

Methods see D_f as ``train_forget`` and D_un = D \\ D_f as ``train_retain`` (they do not know D_fr);
the retrained reference trains on D_r = D \\ D_t (``split.retrain_data``). The test set is split the
same way: ``test_forget`` = test samples of D_t's classes, ``test_retain`` = the rest.
"""
from __future__ import annotations

import numpy as np
import torch

from ..errors import UserError
from .arrays import ArrayData
from .datasets import DatasetBundle
from .splits import ForgetSpec, UnlearningSplit, split_hash

TASKS = ("all_matched", "target_mismatch", "model_mismatch", "data_mismatch")
DIGIT_PAIRS = [(3, 8), (4, 9), (1, 7), (0, 6), (2, 5)]
CIFAR10_PAIRS = [(0, 8), (1, 9), (3, 5), (4, 7), (2, 6)]


def superclass_map(bundle: DatasetBundle) -> np.ndarray:
    """fine class -> superclass id, for the bundle's fine label space."""
    name = bundle.name
    if name in ("digits", "mnist5k", "mnist") or name == "cifar10":
        pairs = CIFAR10_PAIRS if name == "cifar10" else DIGIT_PAIRS
        m = np.empty(10, dtype=np.int64)
        for sid, pair in enumerate(pairs):
            m[list(pair)] = sid
        return m
    if name == "cifar100":
        fine, coarse = bundle.train.aux["fine"].numpy(), bundle.train.aux["coarse"].numpy()
        m = np.zeros(100, dtype=np.int64)
        m[fine] = coarse
        return m
    raise UserError(f"no superclass map for {name!r}; concept tasks support digits, mnist5k, mnist, cifar10, cifar100")


def _relabel(data: ArrayData, fine_to_model: np.ndarray) -> ArrayData:
    fine = data.y.numpy()
    out = data.with_labels(torch.from_numpy(fine_to_model[fine]))
    out.aux = {**data.aux, "fine": data.y.clone()}
    return out


def make_concept_split(bundle: DatasetBundle, task: str, forget_class: int, concept: list[int] | None = None
                       ) -> UnlearningSplit:
    """Build a TARF task. ``concept``: the fine classes of S (default: the superclass of ``forget_class``)."""
    if task not in TASKS:
        raise UserError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    smap = superclass_map(bundle)
    k_fine = len(smap)
    if not 0 <= forget_class < k_fine:
        raise UserError(f"forget class {forget_class} is out of range (0..{k_fine - 1})")
    S = sorted(set(concept)) if concept else sorted(np.flatnonzero(smap == smap[forget_class]).tolist())
    if forget_class not in S:
        raise UserError(f"the forgotten class {forget_class} must belong to the concept {S}")
    if any(not 0 <= c < k_fine for c in S) or len(S) >= k_fine:
        raise UserError(f"concept {S} must be a proper subset of the classes 0..{k_fine - 1}")
    superclass_model = task in ("model_mismatch", "data_mismatch")
    if superclass_model and concept and sorted(np.flatnonzero(smap == smap[forget_class]).tolist()) != S:
        raise UserError(f"in {task} the concept must be the superclass of {forget_class}: "
                        f"{np.flatnonzero(smap == smap[forget_class]).tolist()}")
    target = [forget_class] if task in ("all_matched", "model_mismatch") else S
    fine_to_model = smap if superclass_model else np.arange(k_fine)
    n_model = int(fine_to_model.max()) + 1

    train = _relabel(bundle.train, fine_to_model)
    test = _relabel(bundle.test, fine_to_model)
    val = _relabel(bundle.val, fine_to_model)
    fine_tr, fine_te = bundle.train.y.numpy(), bundle.test.y.numpy()
    is_f = fine_tr == forget_class
    is_t = np.isin(fine_tr, target)
    is_ar = np.isin(fine_tr, S) & ~is_f if task == "model_mismatch" else np.zeros_like(is_f)
    t_test = np.isin(fine_te, target)
    pick = lambda d, m: d.subset(torch.from_numpy(np.flatnonzero(m)))  # noqa: E731
    model_bundle = DatasetBundle(bundle.name, train, val, test, n_model,
                                 [f"super{i}" for i in range(n_model)] if superclass_model else bundle.classes,
                                 bundle.augment, bundle.data_seed)
    forget = np.flatnonzero(is_f)
    info = {"task": task, "concept": S, "forget_class": forget_class, "label_space":
            "superclass" if superclass_model else "fine"}
    return UnlearningSplit(
        dataset=model_bundle, spec=ForgetSpec(classes=(forget_class,), task=task, concept=tuple(S)),
        forget_indices=forget,
        train_forget=pick(train, is_f), train_retain=pick(train, ~is_f),
        test_forget=pick(test, t_test), test_retain=pick(test, ~t_test), test=test, val=val,
        split_hash=split_hash(bundle, forget, info),
        extra={**info, "forgotten_model_classes": () if superclass_model else (forget_class,),
               "target": pick(train, is_t), "false_retain": pick(train, is_t & ~is_f),
               "affected_retain": pick(train, is_ar), "true_retain": pick(train, ~is_t)},
    )
