"""What the steps of one audit share: :class:`AuditContext` (the split, the settings, the device and the
run's cache) and :class:`ForwardPasses` (the audited models and one forward pass of each).

:func:`unlearnkit.audit.audit` builds both once and hands them to every step (per-layer measures,
resurfacing checks, IDI), so no step takes more than a handful of arguments.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from torch import nn

from .config import AuditConfig
from .data import is_sample_level
from .memo import AuditCache


@dataclass(frozen=True)
class AuditContext:
    """The split, the audit settings, where to compute, and the run's :class:`AuditCache` (None: nothing
    is reused). ``key`` identifies this split and configuration: a result cached under it with the
    identity of the object it was computed from (the original, a reference, or their outputs) is valid
    for every audit of the run."""

    split: Any
    config: AuditConfig
    device: Any = None
    cache: AuditCache | None = None
    key: tuple = ()

    @classmethod
    def for_run(cls, split, config: AuditConfig, device=None,
                cache: AuditCache | None = None) -> AuditContext:
        """The context of one audit: a fresh cache when none is shared, ``key`` from the split's identity
        and the configuration."""
        cache = cache if cache is not None else AuditCache()
        return cls(split, config, device, cache, (*cache.key(split), AuditCache.config_key(config)))

    @property
    def audit_seed(self) -> int:
        """The audit seed every draw of the audit comes from (``config.audit_seed``, set by
        :func:`unlearnkit.audit.core.audit` when it was None)."""
        return int(self.config.audit_seed or 0)

    @property
    def sample_level(self) -> bool:
        """Random / indices forgetting (:func:`unlearnkit.audit.data.is_sample_level`)."""
        return is_sample_level(self.split)

    def cache_key(self, obj: Any, *parts) -> tuple | None:
        """The key of a result computed from ``obj`` (with ``parts`` naming what), None without a cache."""
        return None if self.cache is None else self.cache.key(obj, *parts, *self.key)

    def cached(self, obj: Any, parts: tuple, compute: Callable[[], Any]) -> Any:
        """``compute()``, or its value from the cache when an earlier audit of the run computed it from the
        same ``obj`` (see :meth:`cache_key`)."""
        key = self.cache_key(obj, *parts)
        return compute() if key is None else self.cache.get_or(key, compute)

    def cached_many(self, items: list[tuple[Any, tuple, Callable[[], Any]]],
                    costs: list[float] | None = None) -> list:
        """``[self.cached(obj, parts, compute) for obj, parts, compute in items]`` (``obj`` None: never
        cached), with the values not in the cache computed as parallel jobs
        (:func:`~unlearnkit.audit.probing.run_parallel`: ``n_workers`` threads, torch and BLAS on one thread
        each, so a value does not depend on how many run beside it); one after the other on a GPU. Used for
        the per-model work after the layer stage (k-NN, feature distances, resurfacing attacks): on two
        cores, one model per thread beats two threads per model for these small forward passes, fits and
        eigendecompositions. ``costs`` (one per item, any unit): the jobs start longest first, so the
        threads finish together (scheduling only: no value depends on it)."""
        from .probing import on_gpu, one_thread, run_parallel

        keys = [None if obj is None else self.cache_key(obj, *parts) for obj, parts, _ in items]
        todo = [i for i, key in enumerate(keys) if key is None or not self.cache.has(key)]
        if costs is not None:
            todo.sort(key=lambda i: -costs[i])  # stable: equal costs keep their order
        jobs = [items[i][2] for i in todo]
        if on_gpu(self.device):
            with one_thread():  # the CPU side of GPU jobs (small linear algebra) stays on one thread too
                values = [job() for job in jobs]
        else:
            values = run_parallel(jobs, self.config)
        out: list = [None] * len(items)
        for i, value in zip(todo, values):
            out[i] = value if keys[i] is None else self.cache.put(keys[i], value)
        for i, key in enumerate(keys):
            if i not in todo:
                out[i] = self.cache.get(key)
        return out

    def run_pending(self, pending: dict[str, Pending]) -> dict[str, Any]:
        """``{name: p.finish(values of p.items)}``: the jobs of every :class:`Pending` computed in one call of
        :meth:`cached_many`, longest first (the resurfacing checks: one pool, no thread waiting at the end of
        one check while the other runs the last job of it)."""
        items, costs, spans = [], [], {}
        for name, p in pending.items():
            spans[name] = slice(len(items), len(items) + len(p.items))
            items += p.items
            costs += [p.cost] * len(p.items) if isinstance(p.cost, (int, float)) else list(p.cost)
        values = self.cached_many(items, costs)
        return {name: p.finish(values[spans[name]]) for name, p in pending.items()}


@dataclass
class Pending:
    """A check's per-model jobs, as :meth:`AuditContext.cached_many` takes them (``items``), the time each
    takes relative to the others' (``cost``: one number for all, or one per item; scheduling only) and what
    makes the check's result of their values (``finish``)."""

    items: list
    finish: Callable[[list], Any]
    cost: float | list[float] = 1.0


@dataclass
class ForwardPasses:
    """The audited models and their outputs (:func:`unlearnkit.evaluation.model_outputs`: every audit
    layer and the logits, per part of the split), made by :func:`unlearnkit.audit.passes.forward_passes`.

    ``layers`` are the layers measured: the audit layers less those that read the same vector as a
    deeper one (``same_as``, ``{shallower: deeper}``). ``broken`` is one line when the unlearned model's
    weights or outputs are non-finite; the other passes are then not run."""

    original: nn.Module
    unlearned: nn.Module
    refs: list[nn.Module]
    layers: list[str]
    out_u: dict | None = None
    out_o: dict | None = None
    out_refs: list[dict] = field(default_factory=list)
    same_as: dict[str, str] = field(default_factory=dict)
    broken: str | None = None

    @property
    def penultimate(self) -> str:
        """The layer of the per-model representation numbers and the head checks: ``penultimate`` when
        audited, else the deepest audited layer."""
        return "penultimate" if "penultimate" in self.layers else self.layers[-1]
