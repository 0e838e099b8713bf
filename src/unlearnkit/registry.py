"""One generic registry used for datasets, models and methods (after lm-eval-harness / timm).

``register(name, *aliases)`` is a decorator; duplicate names raise; ``get`` suggests close names.
"""
from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

from .errors import UnknownNameError
from .validate import suggestion

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    def register(self, name: str, *aliases: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            self.add(name, obj, *aliases)
            return obj

        return deco

    def add(self, name: str, obj: T, *aliases: str) -> None:
        for key in (name, *aliases):
            k = key.lower()
            if k in self._items or k in self._aliases:
                raise ValueError(f"{self.kind} {key!r} is already registered")
        self._items[name.lower()] = obj
        for a in aliases:
            self._aliases[a.lower()] = name.lower()

    def canonical(self, name: str) -> str:
        k = name.strip().lower()
        if k in self._items:
            return k
        if k in self._aliases:
            return self._aliases[k]
        hint = suggestion(k, [*self._items, *self._aliases], cutoff=0.5)
        raise UnknownNameError(
            f"unknown {self.kind} {name!r}{hint} (available: {', '.join(sorted(self._items))})"
        )

    def get(self, name: str) -> T:
        return self._items[self.canonical(name)]

    def aliases_of(self, name: str) -> list[str]:
        c = self.canonical(name)
        return sorted(a for a, n in self._aliases.items() if n == c)

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        k = name.strip().lower()
        return k in self._items or k in self._aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)
