"""Vertical federated learning (VFL) input partition: which columns or features each party holds.

Mirage (seed 000, ``YuZhenyuLindy/Mirage@63b9f9a`` ``mirage_lib.py::VFLDataset``, reference-specs
§5) splits every sample across K passive parties:

* images ``[C, H, W]`` along the **width**: party k gets columns ``[k*floor(W/K), (k+1)*floor(W/K))``,
  the last party also takes the remainder (CIFAR-10 with K=2: two 3x32x16 halves);
* flat feature vectors along the **feature axis**, the same way.

In unlearnkit a flat dataset (``digits_flat``) is held as ``[N, F, 1, 1]`` (one "channel" per
feature, so the per-channel normalisation standardises every feature), so the feature axis is
dimension 1 and the image width dimension 3 of a batch. The split happens inside the VFL model
(:mod:`unlearnkit.models.vfl`), so every method and metric sees whole samples, as the active
party's view of a row id; the parties' slices are what each bottom model reads.
"""
from __future__ import annotations

from torch import Tensor

from ..errors import UserError

COLUMNS = 3    # batch axis of image width
FEATURES = 1   # batch axis of flat features ([N, F, 1, 1])


def is_flat(in_channels: int, image_size: int) -> bool:
    """Flat feature data (``[F, 1, 1]`` samples) rather than images."""
    return image_size == 1


def split_axis(in_channels: int, image_size: int) -> int:
    """The batch axis the parties split: features for flat data, image columns otherwise."""
    return FEATURES if is_flat(in_channels, image_size) else COLUMNS


def party_bounds(size: int, parties: int) -> list[tuple[int, int]]:
    """``[(start, stop)]`` per party over an axis of ``size``: ``floor(size/K)`` each, the last party
    takes the remainder (Mirage's ``VFLDataset``). Raises :class:`UserError` when a party would get
    nothing."""
    if not isinstance(parties, int) or parties < 1:
        raise UserError(f"parties must be an integer >= 1, not {parties!r}")
    chunk = size // parties
    if chunk < 1:
        raise UserError(f"cannot split {size} columns/features across {parties} parties: each party needs "
                        f"at least one (use --parties {max(1, size)} or fewer)")
    return [(k * chunk, (k + 1) * chunk if k < parties - 1 else size) for k in range(parties)]


def split_parties(x: Tensor, bounds: list[tuple[int, int]], axis: int) -> list[Tensor]:
    """The parties' slices of a batch ``x`` (views, no copy)."""
    return [x.narrow(axis, start, stop - start) for start, stop in bounds]


def party_shape(in_channels: int, image_size: int, bounds: tuple[int, int]) -> tuple[int, int, int]:
    """``(C, H, W)`` of one party's slice of a sample."""
    start, stop = bounds
    if is_flat(in_channels, image_size):
        return stop - start, 1, 1
    return in_channels, image_size, stop - start
