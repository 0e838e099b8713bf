"""Unlearning methods. Importing this package registers every method module in this folder, then the
plug-in combinations (``ec+duck``, ...) once every base method exists.

One file per method; shared pieces live in ``common.py`` as plain functions.
"""
import importlib
import pkgutil

from .base import (
    METHODS,
    Interval,
    MethodData,
    UnlearningMethod,
    UnlearnResult,
    preset_for,
    register_combinations,
    register_method,
    register_plugin,
)

_NOT_METHODS = {"base", "common", "names", "catalog", "tuned"}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    if _info.name not in _NOT_METHODS and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
register_combinations()

__all__ = ["METHODS", "Interval", "MethodData", "UnlearningMethod", "UnlearnResult", "preset_for",
           "register_method", "register_plugin"]
