"""AuditCache: what does not depend on the unlearned model, computed once per run.

``unlearnkit run`` audits every method against the same original and retrained reference(s) on the
same split. Their probe scores, separability bootstraps, k-NN accuracies and resurfacing results
are the same for every method, so :func:`unlearnkit.audit.audit` takes an optional cache and
looks them up by the identity of the object they were computed from (a model, or its
``model_outputs`` dict), the split and the audit configuration. The cache keeps a reference to
every object it has keyed, so an identity is never reused for another object while it lives.
"""
from __future__ import annotations

import json
from typing import Any, Callable


class AuditCache:
    def __init__(self) -> None:
        self._store: dict[tuple, Any] = {}
        self._keep: dict[int, Any] = {}

    @staticmethod
    def config_key(config) -> str:
        return json.dumps(config.to_dict(), sort_keys=True, default=str)

    def key(self, obj: Any, *parts) -> tuple:
        self._keep[id(obj)] = obj
        return (id(obj), *parts)

    def has(self, key: tuple) -> bool:
        return key in self._store

    def get(self, key: tuple) -> Any:
        return self._store[key]

    def put(self, key: tuple, value: Any) -> Any:
        self._store[key] = value
        return value

    def get_or(self, key: tuple, compute: Callable[[], Any]) -> Any:
        if key not in self._store:
            self._store[key] = compute()
        return self._store[key]

    def __len__(self) -> int:
        return len(self._store)
