"""Forget specifications and the unlearning split they produce.

A :class:`ForgetSpec` says *what* to forget: whole ``classes``, a ``random`` fraction (0 < f < 1) or
count (an int >= 1) of training samples, the training ``indices`` listed in a file, or ``flipped``
mislabeled data (a fraction 0 < f < 0.5, below). A concept task (label-domain mismatch, seed 002) is
built by :mod:`unlearnkit.data.concepts`.

Flipped labels ("delete mislabeled data"): the forget set is drawn exactly as ``random`` draws it (a
uniform, not class-stratified, draw of ``round(f * n)`` training rows with the data seed), and each of
its labels y becomes ``(y + 1 + r) mod C`` with r uniform in 0..C-2 from the same seeded stream, so
never the true class. The split's ``dataset.train`` (what the original trains on) holds the flipped
labels; ``train_forget`` holds the forget rows with their flipped labels (what the original learned)
and ``train_retain`` the rest, clean (what the retrain learns). Every part of the training split keeps
the true label in ``aux["true_label"]``.

:func:`make_split` turns it into an :class:`UnlearningSplit`. Indices always refer to positions in
the bundle's ``train`` split (after the validation holdout). The split hash is a sha256 over the
dataset fingerprint and the sorted forget indices, so the same request always hashes the same.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..errors import UserError
from .arrays import ArrayData
from .datasets import DatasetBundle


@dataclass(frozen=True)
class ForgetSpec:
    classes: tuple[int, ...] = ()
    random: float | None = None
    indices_file: str | None = None
    task: str | None = None            # a TARF concept task (data/concepts.py); classes = (forgotten class,)
    concept: tuple[int, ...] = ()
    samples: int | None = None         # a sample set the user handed over (unlearnkit.data.user): its size
    flipped: float | None = None       # mislabeled data: this fraction (0, 0.5) of train, labels flipped

    def __post_init__(self) -> None:
        given = sum([bool(self.classes), self.random is not None, self.indices_file is not None,
                     self.samples is not None, self.flipped is not None])
        if given != 1:
            raise UserError("give exactly one forget specification: --forget-classes, --forget-random, "
                            "--forget-indices or --forget-flipped")
        from .. import validate

        if self.flipped is not None:
            object.__setattr__(self, "flipped", validate.forget_flipped("flipped", self.flipped))
        if self.random is not None:
            validate.number("random", self.random)  # a finite number (its domain: make_split says what it selects)
        if self.indices_file is not None:
            object.__setattr__(self, "indices_file", validate.text("indices_file", str(self.indices_file)
                                                                   if isinstance(self.indices_file, Path)
                                                                   else self.indices_file))
        if self.samples is not None:
            object.__setattr__(self, "samples", validate.whole("samples", self.samples, low=1))
        for key in ("classes", "concept"):  # whole numbers >= 0 ("3,8", [3, 8] or (3,)); 3,3 is class 3 once
            object.__setattr__(self, key, tuple(validate.int_list(key, getattr(self, key))))
        if self.task is not None and len(self.classes) != 1:
            raise UserError(f"task {self.task} forgets exactly one fine class: give one --forget-classes")

    @classmethod
    def from_options(cls, classes=None, random=None, indices_file=None, flipped=None) -> "ForgetSpec":
        """The forget set a user gave as options (``--forget-classes "3,8"``, ``--forget-random 0.1``,
        ``--forget-indices file``, ``--forget-flipped 0.05``), each checked (:mod:`unlearnkit.validate`, the
        checks ``run`` applies), exactly one given. Returns the ForgetSpec."""
        from .. import validate

        if sum(v is not None for v in (classes, random, indices_file, flipped)) != 1:
            raise UserError("say what to forget with exactly one of --forget-classes, --forget-random, "
                            "--forget-indices, --forget-flipped")
        if flipped is not None:
            return cls(flipped=validate.forget_flipped("--forget-flipped", flipped))
        if classes is not None:
            parsed = validate.int_list("--forget-classes", classes)
            if not parsed:
                raise UserError(f"--forget-classes is empty; give classes such as 3 or 3,8, not {classes!r}")
            return cls(classes=tuple(parsed))
        if random is not None:
            return cls(random=validate.forget_random("--forget-random", random))
        path = validate.input_file("--forget-indices", indices_file)
        read_indices(path)  # its content (whole numbers or a boolean mask) now; the range once the data is known
        return cls(indices_file=str(path))

    @property
    def kind(self) -> str:
        if self.task is not None:
            return "concept"
        if self.samples is not None:
            return "samples"
        if self.flipped is not None:
            return "flipped"
        return "classes" if self.classes else "random" if self.random is not None else "indices"

    def describe(self) -> str:
        if self.kind == "concept":
            return f"{self.task}: class {self.classes[0]} of concept {list(self.concept)}"
        if self.kind == "classes":
            return f"classes {','.join(map(str, self.classes))}"
        if self.kind == "random":
            r = self.random
            return f"random {r:g} of train" if r < 1 else f"random {int(r)} train samples"
        if self.kind == "samples":
            return f"{self.samples} given samples"
        if self.kind == "flipped":
            return f"flipped labels on {self.flipped:g} of train"
        return f"indices from {self.indices_file}"

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "classes": list(self.classes), "random": self.random,
               "indices_file": self.indices_file, "task": self.task, "concept": list(self.concept)}
        if self.flipped is not None:
            out["flipped"] = self.flipped
        return {**out, "samples": self.samples} if self.samples is not None else out


@dataclass
class UnlearningSplit:
    """The data an unlearning task works on; every part is an in-memory :class:`ArrayData`.

    ``test_forget``/``test_retain``: test samples of the forgotten / other classes (empty / the whole
    test set for sample-level forgetting). ``test``: the full test set (PURGE's TA convention).
    """

    dataset: DatasetBundle
    spec: ForgetSpec
    forget_indices: np.ndarray
    train_forget: ArrayData
    train_retain: ArrayData
    test_forget: ArrayData
    test_retain: ArrayData
    test: ArrayData
    val: ArrayData
    split_hash: str
    extra: dict = field(default_factory=dict)

    @property
    def forgotten_classes(self) -> tuple[int, ...]:
        """Model-space classes forgotten whole (empty for sample forgetting and superclass-model tasks)."""
        if self.spec.kind == "concept":
            return tuple(self.extra.get("forgotten_model_classes", ()))
        return self.spec.classes if self.spec.kind == "classes" else ()

    @property
    def true_forget_labels(self) -> "torch.Tensor":
        """The forget set's true labels: ``train_forget.y`` except where labels were flipped (``flipped``)."""
        return self.train_forget.aux.get("true_label", self.train_forget.y)

    @property
    def retrain_data(self) -> ArrayData:
        """What the retrained reference trains on: D_r (= train_retain except in concept tasks)."""
        return self.extra.get("true_retain", self.train_retain)

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def train(self) -> ArrayData:
        return self.dataset.train

    def summary(self) -> dict:
        return {"spec": self.spec.to_dict(), "split_hash": self.split_hash, "n_train_forget": len(self.train_forget),
                "n_train_retain": len(self.train_retain), "n_test_forget": len(self.test_forget),
                "n_test_retain": len(self.test_retain), "n_val": len(self.val)}


def read_indices(path: str | Path) -> np.ndarray:
    """The forget set a file lists: whole-number indices (int64) from a ``.npy`` file (no pickles) or a
    text file (whitespace/comma separated), or a boolean mask (a ``.npy`` of dtype bool, returned as
    bool: one entry per training sample, :func:`make_split` checks its length). Floats, complex
    numbers, text, structured records and values beyond int64 are a :class:`UserError` naming the file."""
    from .. import validate

    p = validate.not_special("forget indices file", path)
    if not p.is_file():
        raise UserError(f"forget indices file {p} {'is a folder, not a file' if p.is_dir() else 'does not exist'}")
    try:
        arr = np.load(p, allow_pickle=False) if p.suffix == ".npy" else _text_indices(p)
    except UserError:
        raise
    except (ValueError, OSError, EOFError) as e:  # not a .npy file, truncated, a pickle: numpy's words, no content
        detail = " ".join(str(e).split())[:120] or type(e).__name__
        raise UserError(f"cannot read forget indices from {p}: {detail} (give whole numbers)") from None
    arr = np.asarray(arr)
    if arr.ndim != 1 and arr.dtype.names is None:  # a 2-D array was flattened silently; a 0-d one is no list
        raise UserError(f"forget indices file {p} holds a {arr.ndim}-D array of shape {tuple(arr.shape)}; give a "
                        f"1-D list of whole-number indices (or a 1-D boolean mask, one entry per training sample)")
    arr = arr.ravel()
    if arr.dtype == bool:
        return arr
    if arr.dtype.names is not None or arr.dtype.kind not in "iuO":
        raise UserError(f"forget indices file {p} holds {arr.dtype} values; give whole-number indices "
                        f"(or a boolean mask, one entry per training sample)")
    huge = [int(v) for v in (arr.max(), arr.min()) if abs(int(v)) > np.iinfo(np.int64).max] if arr.size else []
    if huge:
        raise UserError(f"forget indices file {p} holds the index {huge[0]}, far beyond any dataset")
    return arr.astype(np.int64)


def _text_indices(p: Path) -> np.ndarray:
    """The whole numbers of a text file (whitespace or comma separated), as an object array (any size). A
    file that is not UTF-8 text or holds anything else is a :class:`UserError` that says where (line and
    item number), never what: the file may be anything (a system file named by mistake), so its contents
    are not quoted."""
    from .. import validate

    _, text = validate.text_file("forget indices file", p)  # UTF-8 (only the bad byte is named), not huge
    out: list[int] = []
    for line_no, line in enumerate(text.splitlines(), 1):
        for item_no, token in enumerate(line.replace(",", " ").split(), 1):
            try:
                out.append(int(token))
            except ValueError:
                raise UserError(f"forget indices file {p}: item {item_no} of line {line_no} is not a whole number; "
                                f"give whole numbers, one per line or comma separated (its text is not shown)") \
                    from None
    return np.asarray(out, dtype=object)


def _forget_from_file(path: str, n: int) -> np.ndarray:
    """The sorted unique forget indices a file gives (:func:`read_indices`); a boolean mask must have
    one entry per training sample (``n``)."""
    got = read_indices(path)
    if got.dtype == bool:
        if len(got) != n:
            raise UserError(f"forget indices file {path} holds a boolean mask of {len(got)} entries, but the "
                            f"training split has {n} samples (a mask needs one entry per sample)")
        return np.flatnonzero(got)
    return np.unique(got)


def split_hash(bundle: DatasetBundle, forget_indices: np.ndarray, extra: dict | None = None) -> str:
    payload = {"dataset": bundle.fingerprint(), "extra": extra or {}}
    h = hashlib.sha256(json.dumps(payload, sort_keys=True).encode())
    h.update(np.sort(np.asarray(forget_indices, dtype=np.int64)).tobytes())
    return h.hexdigest()[:16]


def make_split(bundle: DatasetBundle, spec: ForgetSpec, seed: int = 0) -> UnlearningSplit:
    """Build the unlearning split. ``seed`` draws the random forget set (class forgetting ignores it)."""
    from .. import validate

    if not isinstance(bundle, DatasetBundle):
        raise UserError(f"bundle must be a dataset (unlearnkit.load_dataset(...)), not {type(bundle).__name__}")
    if not isinstance(spec, ForgetSpec):
        raise UserError(f"spec must be a ForgetSpec (e.g. ForgetSpec(classes=[3])), not {type(spec).__name__}")
    seed = validate.whole("seed", seed, low=0, high=validate.MAX_SEED)
    y = bundle.train.y.numpy()
    n = len(y)
    k = bundle.num_classes
    if spec.kind == "classes":
        bad = [c for c in spec.classes if not 0 <= c < k]
        if bad:
            raise UserError(f"forget class {bad[0]} is out of range for {bundle.name} (classes 0..{k - 1})")
        if len(set(spec.classes)) >= k:
            raise UserError(f"cannot forget every class of {bundle.name}: nothing would remain to retain")
        forget = np.flatnonzero(np.isin(y, spec.classes))
    elif spec.kind in ("random", "flipped"):
        r = spec.random if spec.kind == "random" else spec.flipped
        count = int(round(r * n)) if 0 < r < 1 else int(r)
        if r <= 0 or count < 1:
            hint = "a fraction in (0,1) or a count >= 1" if spec.kind == "random" else f"a larger fraction of {n}"
            raise UserError(f"--forget-{spec.kind} {r:g} selects no sample (give {hint})")
        if count >= n:
            raise UserError(f"--forget-random {r:g} selects all {n} training samples: nothing would remain")
        rng = np.random.RandomState(seed)
        forget = np.sort(rng.choice(n, count, replace=False))
        if spec.kind == "flipped":
            return _flipped_split(bundle, spec, forget, rng)
    else:
        forget = _forget_from_file(spec.indices_file, n)
        if len(forget) == 0:
            raise UserError(f"forget indices file {spec.indices_file} holds no index: the forget set is empty")
        if forget.min() < 0 or forget.max() >= n:
            raise UserError(f"forget index {int(forget.max() if forget.max() >= n else forget.min())} in "
                            f"{spec.indices_file} is out of range: {bundle.name} has {n} training samples "
                            f"(0..{n - 1})")
        if len(forget) >= n:
            raise UserError("the forget indices cover every training sample: nothing would remain")
    if len(forget) == 0:
        raise UserError(f"the forget set is empty ({spec.describe()} on {bundle.name})")
    mask = np.zeros(n, dtype=bool)
    mask[forget] = True
    test_y = bundle.test.y.numpy()
    tmask = np.isin(test_y, spec.classes) if spec.kind == "classes" else np.zeros(len(test_y), dtype=bool)
    return UnlearningSplit(
        dataset=bundle, spec=spec, forget_indices=forget,
        train_forget=bundle.train.subset(torch.from_numpy(np.flatnonzero(mask))),
        train_retain=bundle.train.subset(torch.from_numpy(np.flatnonzero(~mask))),
        test_forget=bundle.test.subset(torch.from_numpy(np.flatnonzero(tmask))),
        test_retain=bundle.test.subset(torch.from_numpy(np.flatnonzero(~tmask))),
        test=bundle.test, val=bundle.val,
        split_hash=split_hash(bundle, forget),
    )


def flip_labels(y: np.ndarray, num_classes: int, rng: np.random.RandomState) -> np.ndarray:
    """``(y + 1 + r) mod num_classes`` with r drawn uniform in 0..num_classes-2 from ``rng``: every label
    moved to another class, each other class equally likely. Returns a new int64 array."""
    if num_classes < 2:
        raise UserError("flipping labels needs at least 2 classes")
    r = rng.randint(0, num_classes - 1, size=len(y))
    return ((np.asarray(y, dtype=np.int64) + 1 + r) % num_classes).astype(np.int64)


def _flipped_split(bundle: DatasetBundle, spec: ForgetSpec, forget: np.ndarray,
                   rng: np.random.RandomState) -> UnlearningSplit:
    """The mislabeled-data split (module docstring): the forget rows' labels flipped with ``rng``."""
    true = bundle.train.y.numpy()
    y = true.copy()
    y[forget] = flip_labels(true[forget], bundle.num_classes, rng)
    train = bundle.train.with_labels(torch.from_numpy(y))
    train.aux = {**train.aux, "true_label": bundle.train.y.clone()}
    noisy = DatasetBundle(bundle.name, train, bundle.val, bundle.test, bundle.num_classes, bundle.classes,
                          bundle.augment, bundle.data_seed)
    mask = np.zeros(len(y), dtype=bool)
    mask[forget] = True
    # what the flip is, for split_hash and the reference models' cache key (training.reference_key)
    noise = {"flipped": spec.flipped, "labels": hashlib.sha256(y[forget].tobytes()).hexdigest()[:16]}
    empty = bundle.test.subset(torch.zeros(0, dtype=torch.long))
    return UnlearningSplit(
        dataset=noisy, spec=spec, forget_indices=forget,
        train_forget=train.subset(torch.from_numpy(forget)),
        train_retain=train.subset(torch.from_numpy(np.flatnonzero(~mask))),
        test_forget=empty, test_retain=bundle.test, test=bundle.test, val=bundle.val,
        split_hash=split_hash(bundle, forget, {"label_noise": noise}),
        extra={"label_noise": noise},
    )
