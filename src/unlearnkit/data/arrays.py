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
        """uint8/float pixels -> normalised float32 (on xb's device)."""
        xb = xb.float()
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
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Yield ``(x, y)`` normalised batches. Evaluation: ``augment=None`` (the test transform)."""
        n = len(self)
        order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
        stop = n - (n % batch_size) if drop_last else n
        for s in range(0, stop, batch_size):
            idx = order[s : s + batch_size]
            xb = self.x[idx].to(device, non_blocking=True).float()
            if self.x.dtype == torch.uint8:
                xb = xb.div_(255.0)
            if augment is not None and augment.active:
                xb = augment_batch(xb, augment, generator)
            yield self.normalize_float(xb), self.y[idx].to(device, non_blocking=True)

    def normalize_float(self, xb: Tensor) -> Tensor:
        """Float pixels in [0, 1] -> (x - mean) / std."""
        mean = torch.tensor(self.mean, device=xb.device, dtype=xb.dtype).view(1, -1, 1, 1)
        std = torch.tensor(self.std, device=xb.device, dtype=xb.dtype).view(1, -1, 1, 1)
        return (xb - mean).div_(std)


def augment_batch(x: Tensor, aug: Augment, generator: torch.Generator | None = None) -> Tensor:
    """Per-sample random crop (zero padding ``p``) and horizontal flip, vectorised with gather."""
    b, c, h, w = x.shape
    if aug.crop_padding > 0:
        p = aug.crop_padding
        xp = F.pad(x, (p, p, p, p))
        oy = torch.randint(0, 2 * p + 1, (b,), generator=generator).to(x.device)
        ox = torch.randint(0, 2 * p + 1, (b,), generator=generator).to(x.device)
        rows = (oy[:, None] + torch.arange(h, device=x.device)).view(b, 1, h, 1).expand(b, c, h, w + 2 * p)
        x = xp.gather(2, rows)
        cols = (ox[:, None] + torch.arange(w, device=x.device)).view(b, 1, 1, w).expand(b, c, h, w)
        x = x.gather(3, cols)
    if aug.hflip:
        flip = (torch.rand(b, generator=generator) < 0.5).to(x.device).view(b, 1, 1, 1)
        x = torch.where(flip, x.flip(3), x)
    return x
