"""Unlearning methods. Importing this package registers every method module in this folder.

One file per method; shared pieces live in ``common.py`` as plain functions.
"""
import importlib
import pkgutil

from .base import METHODS, MethodData, UnlearningMethod, UnlearnResult, preset_for, register_method

_NOT_METHODS = {"base", "common"}
for _info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
    if _info.name not in _NOT_METHODS and not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["METHODS", "MethodData", "UnlearningMethod", "UnlearnResult", "preset_for", "register_method"]
