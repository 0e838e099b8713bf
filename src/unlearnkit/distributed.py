"""Data-parallel training across ``torchrun`` processes (NCCL on GPUs, gloo on CPU).

Every rank builds the identical split and forget set and draws the same shuffled permutation; each
global batch (the recipe's batch size) is cut into contiguous per-rank rows (``shard_bounds``), and
every random draw made per batch (augmentation, random labels) is made for the whole global batch
and then sliced, so the ranks' generators stay in step. Exactness with one process:

- each rank's loss is the mean over its rows; before every optimizer step its gradients are
  weighted by ``n_local / n_global`` and summed over the ranks (one all-reduce), which is exactly
  the gradient of the global batch mean, an uneven or empty share included;
- BatchNorm in training mode normalises with the statistics of the whole global batch
  (:func:`synced_batchnorm`: per-rank counts, means and squared deviations gathered and combined,
  with gradients flowing back through them, as ``nn.SyncBatchNorm`` does, which itself refuses
  CPU tensors);
- metrics are reduced over the ranks (:func:`batch_mean`, :func:`sum_over_ranks`).

Only rank 0 writes (checkpoints, partial states, results, cache entries); the others receive its
result with :func:`broadcast_torch`. Without ``torchrun`` (``WORLD_SIZE`` unset or 1) every
function here is a no-op and the single-process code path is unchanged.

INFERRED (no reference): this is our own design, not taken from a repository; DDP's bucketed
overlap of the all-reduce with the backward pass is not reproduced (the all-reduce runs after it).
"""
from __future__ import annotations

import io
import itertools
import math
import os
import types
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .data.arrays import ArrayData, Augment, shard_bounds


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def world() -> World:
    """This process's place in the process group (``World()`` when there is none)."""
    if not (dist.is_available() and dist.is_initialized()):
        return World()
    return World(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


@contextmanager
def process_group(device: torch.device, timeout_min: float = 180.0) -> Iterator[World]:
    """Join the ``torchrun`` process group for one command (gloo on CPU, NCCL on CUDA); a no-op
    without ``torchrun``. The long timeout lets ranks wait while rank 0 evaluates and audits."""
    if not launched_by_torchrun() or dist.is_initialized():
        yield world()
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timedelta(minutes=timeout_min))
    yield world()
    # Normal end only: every rank waits for the others before tearing down, so that no rank exits while
    # a peer still uses its connections (CI once saw rank 0 abort in gloo's teardown, "terminate called
    # without an active exception", after rank 1 had returned early and exited). After an exception the
    # group is left alone: a collective teardown could hang on ranks still waiting in a collective, and
    # torchrun stops the other workers when one fails (torchtitan does the same).
    dist.barrier()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# the rows of the current global batch this rank holds


@dataclass(frozen=True)
class Step:
    lo: int
    hi: int
    n_global: int

    @property
    def n_local(self) -> int:
        return self.hi - self.lo


class ShardedStreams:
    """The sharded batch streams open in one context (one unlearning run): for each, the share of its
    current global batch this rank holds. Kept in a :class:`~contextvars.ContextVar`, so concurrent
    runs (threads, tasks) never see each other's streams, and :func:`stream_scope` gives each run its
    own and drops it afterwards."""

    def __init__(self) -> None:
        self._steps: dict[int, Step | None] = {}
        self._tokens = itertools.count()

    def open(self) -> int:
        token = next(self._tokens)
        self._steps[token] = None
        return token

    def advance(self, token: int, step: Step) -> None:
        self._steps[token] = step

    def close(self, token: int) -> None:
        self._steps.pop(token, None)

    def current(self) -> Step | None:
        steps = [s for s in self._steps.values() if s is not None]
        if len(steps) > 1:
            raise RuntimeError("two sharded batch streams are active at once: the gradient weight of a step "
                               "is ambiguous (this method is not data-parallel)")
        return steps[0] if steps else None


_STREAMS: ContextVar[ShardedStreams | None] = ContextVar("unlearnkit_sharded_streams", default=None)


def streams() -> ShardedStreams:
    """This context's open sharded streams (created on first use)."""
    current = _STREAMS.get()
    if current is None:
        current = ShardedStreams()
        _STREAMS.set(current)
    return current


def current_step() -> Step | None:
    """The share of the global batch last yielded by :func:`sharded_batches` (None outside one)."""
    current = _STREAMS.get()
    return None if current is None else current.current()


def sharded_batches(data: ArrayData, batch_size: int, *, shuffle: bool = True,
                    generator: torch.Generator | None = None, augment: Augment | None = None,
                    device: torch.device | str = "cpu") -> Iterator[tuple[Tensor, Tensor]]:
    """``data.batches`` where each rank gets its rows of every global batch (all of it alone)."""
    w = world()
    if w.size == 1:
        yield from data.batches(batch_size, shuffle=shuffle, generator=generator, augment=augment, device=device)
        return
    open_streams = streams()  # the context's own object: closed there even if finalised elsewhere
    token = open_streams.open()
    try:
        starts = range(0, len(data), batch_size)
        for s, batch in zip(starts, data.batches(batch_size, shuffle=shuffle, generator=generator,
                                                 augment=augment, device=device, shard=(w.rank, w.size))):
            n_global = min(batch_size, len(data) - s)
            open_streams.advance(token, Step(*shard_bounds(n_global, w.rank, w.size), n_global))
            yield batch
    finally:
        open_streams.close(token)


@contextmanager
def stream_scope() -> Iterator[None]:
    """A fresh :class:`ShardedStreams` for the block, dropped when it ends, with every stream opened
    within it, even one left unfinished (an endless ``cycle``, or one held by an exception's traceback)."""
    token = _STREAMS.set(ShardedStreams())
    try:
        yield
    finally:
        _STREAMS.reset(token)


def local_rows(t: Tensor) -> Tensor:
    """This rank's rows of a tensor drawn for the whole current global batch (``t`` alone otherwise)."""
    step = current_step()
    return t if step is None else t[step.lo : step.hi]


def global_batch_len(x: Tensor) -> int:
    """Rows of the current global batch (``len(x)`` in one process)."""
    step = current_step()
    return len(x) if step is None else step.n_global


# ---------------------------------------------------------------------------------------------
# collectives


def _comm_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def sum_over_ranks(t: Tensor) -> Tensor:
    """The sum of ``t`` over all ranks (``t`` itself in one process)."""
    if world().size == 1:
        return t
    out = t.detach().to(_comm_device(), copy=True)
    dist.all_reduce(out)
    return out.to(t.device)


def batch_mean(loss: Tensor) -> float:
    """This rank's mean loss over its rows -> the mean over the whole current global batch, on every
    rank (non-finite if it is on any rank). In one process, or outside a sharded stream: ``loss``."""
    step = current_step()
    if step is None or world().size == 1:
        return float(loss.detach())
    if step.n_local:
        part = loss.detach().double() * (step.n_local / step.n_global)
    else:
        part = torch.zeros((), dtype=torch.float64, device=loss.device)
    return float(sum_over_ranks(part.reshape(1))[0])


def sync_gradients(params) -> None:
    """Gradients -> the gradient of the global batch mean: weighted by this rank's share of the current
    global batch (``1/world`` outside a sharded stream, where every rank computed the same loss) and
    summed over the ranks in one all-reduce per dtype. A gradient that is ``None`` on every rank stays so."""
    w = world()
    if w.size == 1:
        return
    step = current_step()
    weight = step.n_local / step.n_global if step is not None else 1.0 / w.size
    params = [p for p in params if p.requires_grad]
    for dtype in sorted({p.dtype for p in params}, key=str):
        group = [p for p in params if p.dtype == dtype]
        flat = torch.cat([(p.grad.detach() * weight if weight and p.grad is not None else torch.zeros_like(p)).flatten()
                          for p in group] + [torch.tensor([p.grad is not None for p in group], dtype=dtype,
                                                          device=group[0].device)])
        missing = any(p.grad is None for p in group)
        flat = sum_over_ranks(flat)
        present = flat[-len(group):].tolist() if missing else [1.0] * len(group)  # no device sync otherwise
        offset = 0
        for p, there in zip(group, present):
            g = flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()
            if there > 0:
                p.grad = g.clone() if p.grad is None else p.grad.copy_(g)


def synced(opt: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """``opt`` whose every ``step()`` first runs :func:`sync_gradients` (nothing in one process)."""
    if world().size > 1:
        opt.register_step_pre_hook(lambda o, args, kwargs: sync_gradients(
            [p for g in o.param_groups for p in g["params"]]))
    return opt


def broadcast_bytes(data: bytes | None, src: int = 0) -> bytes:
    """``data`` from rank ``src`` on every rank."""
    if world().size == 1:
        return data or b""
    dev = _comm_device()
    is_src = world().rank == src
    n = torch.tensor([len(data) if is_src else 0], dtype=torch.long, device=dev)
    dist.broadcast(n, src)
    buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8).to(dev) if is_src and len(data)
           else torch.empty(int(n), dtype=torch.uint8, device=dev))
    dist.broadcast(buf, src)
    return data if is_src else buf.cpu().numpy().tobytes()


def broadcast_torch(obj=None, src: int = 0):
    """``obj`` (tensors and plain types) from rank ``src``; the others load it with
    ``torch.load(weights_only=True)``, so nothing received is executed."""
    if world().size == 1:
        return obj
    data = None
    if world().rank == src:
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = buf.getvalue()
    data = broadcast_bytes(data, src)
    return obj if world().rank == src else torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


# ---------------------------------------------------------------------------------------------
# BatchNorm over the global batch


class _GatherOverRanks(torch.autograd.Function):
    """Every rank's ``t`` stacked (``[world, *t.shape]``), and the exact backward.

    Each rank back-propagates its own mean loss and :func:`sync_gradients` weights the result by
    ``w = n_local / n_global`` afterwards. The gradient reaching a rank's ``t`` must instead be the
    weighted sum ``sum_r w_r g_r`` of every rank's gradient for that slot: it is divided by this
    rank's ``w`` here, so the weighting afterwards gives exactly that (a rank with no rows
    contributes and receives nothing)."""

    @staticmethod
    def forward(ctx, t: Tensor, weight: float) -> Tensor:
        ctx.weight, ctx.rank = weight, dist.get_rank()
        parts = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, t.contiguous())
        return torch.stack(parts)

    @staticmethod
    def backward(ctx, g: Tensor):
        g = g * ctx.weight
        dist.all_reduce(g)
        return (g[ctx.rank] / ctx.weight if ctx.weight else torch.zeros_like(g[ctx.rank])), None


def _global_batch_norm(bn: nn.modules.batchnorm._BatchNorm, x: Tensor, step: Step) -> Tensor:
    """Training-mode BatchNorm with the mean/variance of all ranks' rows together; running statistics
    updated as ``F.batch_norm`` does (unbiased variance, momentum or cumulative average).

    Each rank sends its row count, mean and sum of squared deviations (two-pass, like one process),
    and they are combined with the parallel-variance formula (Chan et al. 1979), which has no
    cancellation: ``M2 = sum_r M2_r + n_r (mean_r - mean)^2``."""
    c = x.shape[1]
    shape = (1, c) + (1,) * (x.dim() - 2)
    dims = [0, *range(2, x.dim())]
    xf = x.to(torch.promote_types(x.dtype, torch.float32))  # bf16 -> float32; float64 stays
    n_local = x.numel() // c
    if n_local:
        mean_r = xf.mean(dims)
        m2_r = (xf - mean_r.view(shape)).square().sum(dims)
    else:  # no rows here: zeros, still in the autograd graph so every rank runs the same backward collectives
        mean_r = m2_r = xf.sum(dims)
    count = torch.full((1,), float(n_local), device=x.device, dtype=xf.dtype)
    stats = _GatherOverRanks.apply(torch.cat([mean_r, m2_r, count]),
                                   step.n_local / step.n_global)
    counts = stats[:, -1:]
    n = counts.sum()
    mean = (stats[:, :c] * counts).sum(0) / n
    var = (stats[:, c : 2 * c] + counts * (stats[:, :c] - mean).square()).sum(0) / n
    if bn.track_running_stats and bn.running_mean is not None:
        with torch.no_grad():
            bn.num_batches_tracked.add_(1)
            f = 1.0 / float(bn.num_batches_tracked) if bn.momentum is None else bn.momentum
            bn.running_mean.mul_(1 - f).add_(mean.detach().to(bn.running_mean.dtype), alpha=f)
            n_all = step.n_global * math.prod(x.shape[2:])  # = n from the host: no device sync or graph break
            unbiased = var.detach() * (n_all / (n_all - 1)) if n_all > 1 else var.detach()
            bn.running_var.mul_(1 - f).add_(unbiased.to(bn.running_var.dtype), alpha=f)
    y = (xf - mean.view(shape)) * torch.rsqrt(var.view(shape) + bn.eps)
    if bn.affine:
        y = y * bn.weight.view(shape) + bn.bias.view(shape)
    return y.to(x.dtype)


def _forward(self, x: Tensor) -> Tensor:
    step = current_step()
    if self.training and step is not None:
        return _global_batch_norm(self, x, step)
    return type(self).forward(self, x)  # eval, or the same full data on every rank


@contextmanager
def synced_batchnorm(model: nn.Module) -> Iterator[None]:
    """Within the block, every BatchNorm of ``model`` in training mode, fed a sharded batch, uses
    the global batch's statistics (a no-op in one process); the modules are restored afterwards.

    Each BatchNorm gets an instance-level ``forward`` for the block rather than being swapped for
    another module (as ``nn.SyncBatchNorm.convert_sync_batchnorm`` does): the modules, their parameters,
    buffers and any hooks a method registered on them stay the same objects, and the step it reads
    comes explicitly from this context's :class:`ShardedStreams`."""
    if world().size == 1:
        yield
        return
    bns = [m for m in model.modules()
           if isinstance(m, nn.modules.batchnorm._BatchNorm) and "forward" not in m.__dict__]  # re-entrant
    for m in bns:
        m.forward = types.MethodType(_forward, m)
    try:
        yield
    finally:
        for m in bns:
            m.__dict__.pop("forward", None)
