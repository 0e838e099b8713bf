"""Method names as users write them: aliases, ``all``, plug-in combinations, resolved to canonical names."""
from __future__ import annotations

from ..errors import UserError
from .base import METHODS


def method_names(names: list[str], setting: str = "standard") -> list[str]:
    """Canonical method names; ``all`` leaves out VFL-only methods (target) outside ``--setting vfl``."""
    if [n.lower() for n in names] == ["all"]:
        return [n for n in METHODS.names() if setting == "vfl" or not METHODS.get(n).requires_vfl]
    out = []
    for n in names:
        c = METHODS.canonical(n)
        if METHODS.get(c).requires_vfl and setting != "vfl":
            raise UserError(f"{c} unlearns vertical federated models only: add --setting vfl")
        if c not in out:
            out.append(c)
    return out
