"""The GPU fast path: how a training runs, not what it computes (CLI flags ``--amp``, ``--channels-last``,
``--compile``, ``--deterministic``, ``--data-on-device``).

``Runtime()`` (every default) is today's path, bit for bit: float32, contiguous tensors, no
compilation; on a GPU it additionally turns on ``cudnn.benchmark`` and keeps a dataset that fits
in GPU memory there (images gathered by indexing, no DataLoader workers), otherwise batches go
through pinned memory (``ArrayData.batches``). Options:

- ``amp="bf16"``: forward and loss under ``torch.autocast(dtype=bfloat16)`` (CPU and GPU; no
  loss scaling is needed for bf16). It changes the numbers, so it is part of the cache key of
  reference models (``cache_key``); the other options only reorder floating-point work, like
  another GPU would, and are not.
- ``channels_last``: model and 4-D inputs in NHWC memory format (tensor cores); the model is
  returned to the contiguous format afterwards.
- ``compile``: ``torch.compile`` of the training forward pass (``fit`` only).
- ``deterministic``: ``torch.use_deterministic_algorithms(True)``, cuDNN deterministic and not
  benchmarking, ``CUBLAS_WORKSPACE_CONFIG=:4096:8``: reproducible GPU runs, slower.
- ``data_on_device``: ``auto`` (if the images take under half of the free GPU memory), ``always``
  or ``never``.

Global backend flags are restored when the block ends.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import sys
from dataclasses import asdict, dataclass
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

from . import distributed, validate
from .data.arrays import ArrayData
from .errors import UserError

AMP = ("off", "bf16")
DATA_ON_DEVICE = ("auto", "always", "never")


@dataclass(frozen=True)
class Runtime:
    amp: str = "off"
    channels_last: bool = False
    compile: bool = False
    deterministic: bool = False
    data_on_device: str = "auto"

    def __post_init__(self) -> None:
        from .validate import dataclass_fields

        dataclass_fields(self, "runtime ")
        if self.amp not in AMP:
            raise UserError(f"amp must be one of {', '.join(AMP)}, not {self.amp!r}")
        if self.data_on_device not in DATA_ON_DEVICE:
            raise UserError(f"data_on_device must be one of {', '.join(DATA_ON_DEVICE)}, not {self.data_on_device!r}")

    @classmethod
    def from_dict(cls, d: dict | None) -> "Runtime":
        known = set(asdict(cls()))
        bad = sorted(set(d or {}) - known)
        if bad:
            raise UserError(f"unknown runtime option(s) {bad}; known: {sorted(known)}")
        return cls(**(d or {}))

    def to_dict(self) -> dict:
        return asdict(self)

    def cache_key(self) -> dict:
        """What of this runtime changes the trained numbers (empty for the default)."""
        return {"amp": self.amp} if self.amp != "off" else {}

    def autocast(self, device: torch.device):
        if self.amp == "off":
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    def input(self, x: Tensor) -> Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.channels_last and x.dim() == 4 else x

    @contextlib.contextmanager
    def backend(self, device: torch.device) -> Iterator[None]:
        """cuDNN benchmark (GPU, unless deterministic) and the deterministic switch, restored afterwards."""
        saved = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark,
                 torch.backends.cudnn.deterministic)
        try:
            if self.deterministic:
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
                torch.use_deterministic_algorithms(True)
                torch.backends.cudnn.deterministic = True
                torch.backends.cudnn.benchmark = False
            elif device.type == "cuda":
                torch.backends.cudnn.benchmark = True
            yield
        finally:
            torch.use_deterministic_algorithms(saved[0])
            torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved[1], saved[2]

    @contextlib.contextmanager
    def model(self, model: nn.Module) -> Iterator[Callable[[Tensor], Tensor]]:
        """The forward function to train with (``torch.compile``-d when asked: lazily, on its first
        call); the model is channels_last for the block."""
        if self.channels_last:
            model.to(memory_format=torch.channels_last)
        try:
            yield torch.compile(model) if self.compile else model
        finally:
            if self.channels_last:
                model.to(memory_format=torch.contiguous_format)

    def place(self, parts: list[ArrayData | None], device: torch.device) -> list[ArrayData | None]:
        """The images of ``parts`` moved to the GPU once when they fit (labels stay on the CPU)."""
        if device.type != "cuda" or self.data_on_device == "never":
            return parts
        todo = [p for p in parts if p is not None and p.x.device.type == "cpu"]
        need = sum(p.x.numel() * p.x.element_size() for p in todo)
        if self.data_on_device == "auto":
            free, _ = torch.cuda.mem_get_info(device)
            if need > free // 2:
                return parts
        moved = {id(p): _with_x(p, p.x.to(device, non_blocking=True)) for p in todo}
        return [None if p is None else moved.get(id(p), p) for p in parts]


def _with_x(data: ArrayData, x: Tensor) -> ArrayData:
    return ArrayData(x, data.y, data.mean, data.std, data.index, dict(data.aux))


def resolve_device(device: str | torch.device | None = "auto") -> torch.device:
    """``auto`` = a GPU when there is one; under ``torchrun`` an unnumbered ``cuda`` is the
    process's own GPU (``cuda:$LOCAL_RANK``). Anything else :func:`unlearnkit.validate.device` refuses
    (``meta``, ``mps`` or a GPU this machine lacks) is a :class:`UserError`."""
    dev = validate.device("--device", device)  # only a device this build can use (not meta, no absent GPU)
    if dev.type == "cuda" and dev.index is None and distributed.launched_by_torchrun():
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return dev


# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_ALLOCATOR_TUNED: bool | None = None


def tune_cpu_allocator(mmap_threshold: int = 256 << 20, trim_threshold: int = 512 << 20) -> bool:
    """Let glibc's malloc keep freed CPU memory for reuse, as PyTorch's own CPU launcher does with
    jemalloc/tcmalloc (``torch.backends.xeon.run_cpu``). Once per process; True if it took effect.

    By default glibc serves every allocation above its mmap threshold (at most 32 MiB, adapted as
    blocks are freed) with a fresh ``mmap`` and returns it to the kernel when freed, so each batch
    of an evaluation pass faults its activations in page by page again: a small CNN's 512-image
    batch on 28x28 images (51 MB per convolution output) spends more time in the kernel than in
    the convolutions (mnist5k, three models: 5.4 s of forward passes, 5 s of them system time,
    against 2.4 s once freed memory is reused; ``docs/performance.md``). Blocks below
    ``mmap_threshold`` now come from the heap, and the heap's top is returned to the kernel only
    beyond ``trim_threshold`` of free memory: the process keeps up to that much more resident.
    The numbers computed are the same. The CLI calls this when it starts; a Python user calls it
    once, before the work. ``UNLEARNKIT_MALLOC_TUNING=0`` turns it off; other C libraries (musl,
    macOS) are left as they are.
    """
    global _ALLOCATOR_TUNED
    if _ALLOCATOR_TUNED is not None:
        return _ALLOCATOR_TUNED
    _ALLOCATOR_TUNED = False
    if (os.environ.get("UNLEARNKIT_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux")
            or platform.libc_ver()[0] != "glibc"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    _ALLOCATOR_TUNED = bool(libc.mallopt(_M_MMAP_THRESHOLD, int(mmap_threshold))
                            and libc.mallopt(_M_TRIM_THRESHOLD, int(trim_threshold)))
    return _ALLOCATOR_TUNED


def die_with_parent() -> None:
    """Linux: SIGKILL this (worker) process when the process that started it dies (prctl PR_SET_PDEATHSIG)."""
    try:
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def gpu_device_nodes() -> list[str]:
    """The NVIDIA (``/dev/nvidia<N>``) and AMD ROCm (``/dev/kfd``) device files of this machine."""
    import glob

    return sorted(glob.glob("/dev/nvidia[0-9]*")) + (["/dev/kfd"] if os.path.exists("/dev/kfd") else [])


def start_method() -> str:
    """``fork`` on a Linux machine without a GPU, else ``spawn``: how worker processes start.

    A forked child cannot use CUDA once the parent has touched it, and torch's own device checks
    (``torch.cuda.is_available()``) touch it without ``torch.cuda.is_initialized()`` saying so; so
    a machine with GPU device files spawns its workers (their torch import is small beside GPU work)."""
    if not sys.platform.startswith("linux") or torch.cuda.is_initialized() or gpu_device_nodes():
        return "spawn"
    return "fork"


def fork_is_safe() -> bool:
    """Whether this process may fork workers (:func:`start_method` is ``fork``)."""
    return start_method() == "fork"
