"""In-memory image data as tensors, and a batch iterator with vectorised augmentation.

Small datasets (all the ones this toolkit ships with, CIFAR, SVHN, MNIST, STL-10) fit in memory, so
they are held as one ``uint8``/``float32`` tensor and batched by indexing: no per-item Python,
no DataLoader workers. Normalisation happens per batch, *after* augmentation, as in torchvision's
``ToTensor -> RandomCrop/Flip -> Normalize`` pipeline (padding is black in pixel space, like the
references' ``RandomCrop(32, padding=4)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class Augment:
    """Training augmentation: random crop after zero padding, and horizontal flip."""

    crop_padding: int = 0
    hflip: bool = False

    @property
    def active(self) -> bool:
        return self.crop_padding > 0 or self.hflip


@dataclass
class ArrayData(torch.utils.data.Dataset):
    """Images ``x`` ([N, C, H, W], uint8 0..255 or float 0..1), labels ``y`` ([N] int64).

    ``mean``/``std`` are the per-channel normalisation; ``aux`` holds extra per-sample label
    vectors (e.g. ``fine``/``coarse``) that follow every ``subset``. ``index`` maps each row back
    to its position in the dataset split it came from (train or test).
    """

    x: Tensor
    y: Tensor
    mean: tuple[float, ...]
    std: tuple[float, ...]
    index: Tensor | None = None
    aux: dict[str, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.index is None:
            self.index = torch.arange(len(self.y))

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        """One normalised sample in the test transform (for users who want a DataLoader)."""
        return self.normalize(self.x[i : i + 1])[0], self.y[i]

    def subset(self, idx: Tensor) -> "ArrayData":
        idx = torch.as_tensor(idx, dtype=torch.long)
        return ArrayData(
            self.x[idx], self.y[idx], self.mean, self.std, self.index[idx],
            {k: v[idx] for k, v in self.aux.items()},
        )

    def with_labels(self, y: Tensor) -> "ArrayData":
        """The same images under another label vector (e.g. superclass labels)."""
        return ArrayData(self.x, torch.as_tensor(y, dtype=torch.long), self.mean, self.std, self.index,
                         dict(self.aux))

    @staticmethod
    def concat(parts: list["ArrayData"]) -> "ArrayData":
        keys = set(parts[0].aux)
        return ArrayData(
            torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]), parts[0].mean, parts[0].std,
            torch.cat([p.index for p in parts]), {k: torch.cat([p.aux[k] for p in parts]) for k in keys},
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        c, h, w = self.x.shape[1:]
        return int(c), int(h), int(w)

    def normalize(self, xb: Tensor) -> Tensor:
        """uint8/float pixels -> normalised floats of the default dtype (float32; on xb's device)."""
        xb = xb.to(torch.get_default_dtype())
        if self.x.dtype == torch.uint8:
            xb = xb.div_(255.0)
        return self.normalize_float(xb)

    def batches(
        self,
        batch_size: int,
        *,
        shuffle: bool = False,
        generator: torch.Generator | None = None,
        augment: Augment | None = None,
        device: torch.device | str = "cpu",
        drop_last: bool = False,
        shard: tuple[int, int] | None = None,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Yield ``(x, y)`` normalised batches. Evaluation: ``augment=None`` (the test transform).

        ``shard=(rank, world)`` yields only this rank's rows of every global batch
        (:func:`shard_bounds`; possibly none): the permutation and the augmentation's random draws
        are made for the whole global batch, so the ranks' rows together are exactly the batch one
        process would see, and every rank's generator stays in step. Nothing here waits for a GPU:
        images already on it are gathered there (the permutation is copied once per pass), rows from
        the CPU go through pinned memory, both with asynchronous copies.
        """
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        x_order = to_device_async(order, self.x.device)
        stop = n - (n % batch_size) if drop_last else n
        device = torch.device(device)
        for s in range(0, stop, batch_size):
            idx, x_idx = order[s : s + batch_size], x_order[s : s + batch_size]
            params = augment_params(len(idx), augment, generator) if augment is not None and augment.active else None
            if shard is not None:
                lo, hi = shard_bounds(len(idx), *shard)
                idx, x_idx = idx[lo:hi], x_idx[lo:hi]
                params = None if params is None else tuple(None if p is None else p[lo:hi] for p in params)
            xb = _gather(self.x, x_idx, device).to(torch.get_default_dtype())
            if self.x.dtype == torch.uint8:
                xb = xb.div_(255.0)
            if params is not None:
                xb = apply_augment(xb, augment, params)
            yield self.normalize_float(xb), _gather(self.y, idx, device)

    def normalize_float(self, xb: Tensor) -> Tensor:
        """Float pixels in [0, 1] -> (x - mean) / std, per channel (dim 1) of images or flat rows."""
        shape = (1, -1, *([1] * (xb.dim() - 2)))
        mean = torch.tensor(self.mean, device=xb.device, dtype=xb.dtype).view(shape)
        std = torch.tensor(self.std, device=xb.device, dtype=xb.dtype).view(shape)
        return (xb - mean).div_(std)


def shard_bounds(n: int, rank: int, world: int) -> tuple[int, int]:
    """Rows ``[lo, hi)`` of a batch of ``n`` that rank ``rank`` of ``world`` holds: contiguous,
    sizes differing by at most one, the first ``n % world`` ranks one longer (``torch.tensor_split``);
    a rank holds none when ``n < world``."""
    base, extra = divmod(n, world)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def to_device_async(t: Tensor, device: torch.device) -> Tensor:
    """``t`` on ``device``; from the CPU to a GPU through pinned memory without waiting for the GPU."""
    if t.device == device:
        return t
    if device.type == "cuda" and t.device.type == "cpu":
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _gather(t: Tensor, idx: Tensor, device: torch.device) -> Tensor:
    """``t[idx]`` on ``device``; CPU rows bound for a GPU go through pinned memory (async copy)."""
    if t.device == device or device.type != "cuda" or t.device.type != "cpu":
        return t[to_device_async(idx, t.device)].to(device, non_blocking=True)
    out = torch.empty((len(idx), *t.shape[1:]), dtype=t.dtype, pin_memory=True)
    torch.index_select(t, 0, idx, out=out)
    return out.to(device, non_blocking=True)


def augment_params(b: int, aug: Augment, generator: torch.Generator | None = None
                   ) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The random draws of :func:`augment_batch` for ``b`` samples: crop offsets (rows, columns)
    and flip decisions, on the CPU, in the generator order ``augment_batch`` has always used."""
    oy = ox = flip = None
    if aug.crop_padding > 0:
        p = aug.crop_padding
        oy = torch.randint(0, 2 * p + 1, (b,), generator=generator)
        ox = torch.randint(0, 2 * p + 1, (b,), generator=generator)
    if aug.hflip:
        flip = torch.rand(b, generator=generator) < 0.5
    return oy, ox, flip


def apply_augment(x: Tensor, aug: Augment, params) -> Tensor:
    """Per-sample random crop (zero padding ``p``) and horizontal flip, vectorised with gather."""
    b, c, h, w = x.shape
    oy, ox, flip = params
    if oy is not None:
        p = aug.crop_padding
        xp = F.pad(x, (p, p, p, p))
        oy, ox = to_device_async(oy, x.device), to_device_async(ox, x.device)
        rows = (oy[:, None] + torch.arange(h, device=x.device)).view(b, 1, h, 1).expand(b, c, h, w + 2 * p)
        x = xp.gather(2, rows)
        cols = (ox[:, None] + torch.arange(w, device=x.device)).view(b, 1, 1, w).expand(b, c, h, w)
        x = x.gather(3, cols)
    if flip is not None:
        x = torch.where(to_device_async(flip, x.device).view(b, 1, 1, 1), x.flip(3), x)
    return x


def augment_batch(x: Tensor, aug: Augment, generator: torch.Generator | None = None) -> Tensor:
    """Per-sample random crop (zero padding ``p``) and horizontal flip, drawn with ``generator``."""
    return apply_augment(x, aug, augment_params(x.shape[0], aug, generator))
