"""unlearnkit: make an image classifier forget, then certify whether it really forgot.

The public names below load on first use (a module-level ``__getattr__``), so ``import unlearnkit``
and the command line's ``--help`` / ``--version`` do not import torch or scipy.

``unlearnkit.audit`` is the function :func:`unlearnkit.audit.user.audit`; the subpackage of the same
name keeps its import paths (``from unlearnkit.audit import AuditConfig``, ``import
unlearnkit.audit.core``) and its names stay reachable through the function (``uk.audit.AuditConfig``).
"""
from __future__ import annotations

import importlib
import logging
import sys
import types
from typing import TYPE_CHECKING

from ._version import __version__

# the library logs to ``logging.getLogger("unlearnkit")`` and its children; an application (the CLI) shows it
logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:  # what IDEs and type checkers see; at run time each name loads on first use
    from .api import train_references, unlearn  # noqa: F401
    from .audit.config import AuditConfig  # noqa: F401
    from .audit.report import AuditReport  # noqa: F401
    from .audit.user import Auditor, AuditResult, audit  # noqa: F401
    from .checkpoints import load_checkpoint, save_checkpoint  # noqa: F401
    from .data.datasets import DATASETS, load_dataset  # noqa: F401
    from .data.splits import ForgetSpec, UnlearningSplit, make_split  # noqa: F401
    from .errors import UserError  # noqa: F401
    from .methods.base import UnlearnResult  # noqa: F401
    from .models.features import capture, extract  # noqa: F401
    from .models.zoo import MODELS, audit_layers, create_model  # noqa: F401
    from .runtime import tune_cpu_allocator  # noqa: F401
    from .stream import StreamResults, unlearn_sequence  # noqa: F401

#: public name -> the module that defines it (a name equal to the module's own is the module itself)
_LAZY = {"unlearn": ".api", "train_references": ".api", "UnlearnResult": ".methods.base", "Auditor": ".audit.user",
         "AuditResult": ".audit.user", "AuditReport": ".audit.report", "AuditConfig": ".audit.config",
         "UserError": ".errors",
         "load_checkpoint": ".checkpoints", "save_checkpoint": ".checkpoints",
         "DATASETS": ".data.datasets", "load_dataset": ".data.datasets",
         "ForgetSpec": ".data.splits", "UnlearningSplit": ".data.splits", "make_split": ".data.splits",
         "capture": ".models.features", "extract": ".models.features",
         "MODELS": ".models.zoo", "audit_layers": ".models.zoo", "create_model": ".models.zoo",
         "tune_cpu_allocator": ".runtime", "unlearn_sequence": ".stream", "StreamResults": ".stream"}

__all__ = ["__version__", "load_checkpoint", "save_checkpoint", "DATASETS", "load_dataset", "ForgetSpec",
           "UnlearningSplit", "make_split", "capture", "extract", "MODELS", "audit_layers", "create_model",
           "unlearn", "train_references", "UnlearnResult", "audit", "Auditor", "AuditResult", "AuditReport",
           "AuditConfig", "UserError",
           "tune_cpu_allocator", "unlearn_sequence", "StreamResults"]


def __getattr__(name: str):
    """Import the module behind a public name on first access; returns the name's value (cached here)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name], __name__)
    value = module if _LAZY[name] == f".{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """This package's module type, for one name: ``audit``. Python binds a subpackage to its parent's
    attribute when it is first imported (``import unlearnkit.audit.config`` sets ``unlearnkit.audit`` to
    the subpackage), whatever the parent's ``__init__`` bound there; this property takes precedence over
    that binding, so ``unlearnkit.audit`` is the function whichever was imported first (the subpackage
    stays ``sys.modules["unlearnkit.audit"]``)."""

    @property
    def audit(self):
        """:func:`unlearnkit.audit.user.audit` (imported on first use)."""
        return importlib.import_module(".audit.user", __name__).audit

    @audit.setter
    def audit(self, value) -> None:
        """The import system's binding of the subpackage: not kept (see the class)."""


sys.modules[__name__].__class__ = _Package
