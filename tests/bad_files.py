"""Files that load safely but are wrong inside, shared by the unit tests and the bad-input sweep
(tests/integration/test_bad_input.py): checkpoints of the wrong structure, forget-indices arrays that
are not whole numbers, broken CIFAR batches. Each maps a name to the file's content and a piece of
the one-line error expected for it."""
from __future__ import annotations

import copy
import pickle
from pathlib import Path

import numpy as np
import torch


def checkpoint_variants(good: dict, state: dict) -> dict[str, tuple[object, str]]:
    """name -> (payload for ``torch.save``, words of the error); ``good`` is a saved checkpoint's payload,
    ``state`` the model's state dict."""

    def edit(change):
        g = copy.deepcopy(good)
        change(g)
        return g

    return {
        "no-model": (edit(lambda g: g.pop("model")), "no 'model' entry"),
        "no-state-dict": (edit(lambda g: g.pop("state_dict")), "no 'state_dict' entry"),
        "string-model": (edit(lambda g: g.__setitem__("model", "small_cnn")), "'model' must be"),
        "list-kwargs": (edit(lambda g: g["model"].__setitem__("kwargs", [1])), "kwargs must be a mapping"),
        "unknown-kwarg": (edit(lambda g: g["model"]["kwargs"].__setitem__("bogus", 3)),
                          "unexpected keyword argument 'bogus'"),
        "list-state": (edit(lambda g: g.__setitem__("state_dict", [1, 2])), "holds a list where the state dict"),
        "int-weights": (edit(lambda g: g.__setitem__("state_dict", {k: 1 for k in state})), "holds an int at"),
        "list-meta": (edit(lambda g: g.__setitem__("meta", [1])), "'meta' must be a mapping"),
        "string-meta-key": (edit(lambda g: g.__setitem__("meta", {"key": "x"})), "meta 'key' must be a mapping"),
        "int-sha256": (edit(lambda g: g.__setitem__("sha256", 3)), "'sha256' must be text"),
        "future-format": (edit(lambda g: g.__setitem__("format", "unlearnkit.checkpoint/9")), "is in format"),
        "plain-int-keys": (dict(enumerate(state.values())), "state dict key 0"),
        "plain-mixed-keys": ({**state, 3: torch.zeros(1)}, "state dict key 3"),
        "plain-list": (list(state.values()), "holds a list, not a state dict"),
        "plain-sparse": ({**state, "fc.bias": state["fc.bias"].to_sparse()}, "sparse coo tensor"),
        "plain-empty": ({}, "holds an empty state dict"),
        "plain-complex": ({**state, "fc.bias": state["fc.bias"].to(torch.complex64)}, "complex64 tensor"),
        "plain-string-state": ({"state_dict": "x"}, "holds a str where the state dict"),
    }


def checkpoint_names() -> list[str]:
    """The names :func:`checkpoint_variants` gives (for test ids, without a model at hand)."""
    good = {"format": "f", "model": {"name": "m", "kwargs": {}}, "state_dict": {"fc.bias": torch.zeros(1)},
            "sha256": "", "meta": {}}
    return sorted(checkpoint_variants(good, good["state_dict"]))


def index_arrays(n: int) -> dict[str, tuple[np.ndarray | bytes, str]]:
    """name -> (array for ``np.save``, or raw bytes; words of the error) for a training split of ``n``."""
    ok = np.array([1, 2, 3])
    return {
        "floats": (np.array([1.0, 2.0]), "float64 values"), "complex": (np.array([1 + 0j]), "complex128 values"),
        "strings": (np.array(["1", "2"]), "<U1 values"),
        "structured": (np.array([(1, 2)], dtype=[("a", int), ("b", int)]), "('a'"),
        "uint64-huge": (np.array([2**63 + 5], dtype=np.uint64), "far beyond"),
        "out-of-range": (np.array([n]), "out of range"), "negative": (np.array([-1]), "out of range"),
        "short-mask": (np.zeros(5, dtype=bool), "boolean mask of 5 entries"),
        "empty-mask": (np.zeros(n, dtype=bool), "holds no index"),
        "truncated": (_npy_bytes(ok)[:100], "cannot read forget indices"),
    }


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def write_index_file(path: Path, content) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        np.save(path, content)
    return path


def cifar_batches() -> dict[str, tuple[bytes, str]]:
    """name -> (a broken first CIFAR-10 batch file, words of the error)."""
    ok = pickle.dumps({"data": np.zeros((20, 3072), np.uint8), "labels": [0] * 20})
    return {
        "truncated": (ok[: len(ok) // 2], "corrupt or truncated"),
        "empty-file": (b"", "corrupt or truncated"),
        "not-a-pickle": (b"hello world\n", "corrupt or truncated"),
        "empty-batch": (pickle.dumps({}), "'data' must be uint8"),
        "no-images": (pickle.dumps({"data": np.zeros((0, 3072), np.uint8), "labels": []}), "N >= 1 images"),
        "wrong-shape": (pickle.dumps({"data": np.zeros((20, 100), np.uint8), "labels": [0] * 20}), "3x32x32"),
        "float-pixels": (pickle.dumps({"data": np.zeros((20, 3072)), "labels": [0] * 20}), "float64"),
        "few-labels": (pickle.dumps({"data": np.zeros((20, 3072), np.uint8), "labels": [0] * 3}), "20 whole-number"),
        "label-99": (pickle.dumps({"data": np.zeros((2, 3072), np.uint8), "labels": [0, 99]}), "label 99"),
        "a-list": (pickle.dumps([1, 2]), "holds a list"),
        "code": (pickle.dumps({"data": _Evil(), "labels": [0]}), "refusing to unpickle"),
    }


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def fake_cifar(root: Path, first: bytes | None = None) -> Path:
    """A CIFAR-10 folder under ``root`` (6 batches of 20 images), its first batch replaced by ``first``;
    returns the first batch's path."""
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(0)
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        d = {"data": rng.randint(0, 255, (20, 3072)).astype(np.uint8), "labels": [i % 10 for i in range(20)]}
        (base / f).write_bytes(pickle.dumps(d))
    if first is not None:
        (base / "data_batch_1").write_bytes(first)
    return base / "data_batch_1"
