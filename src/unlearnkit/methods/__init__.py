"""Unlearning methods. Importing this package registers every method in ``METHODS``."""
from .base import METHODS, MethodData, UnlearningMethod, UnlearnResult, preset_for, register_method  # noqa: F401
from . import finetune, gradient_ascent, retrain  # noqa: F401,E402

__all__ = ["METHODS", "MethodData", "UnlearningMethod", "UnlearnResult", "preset_for", "register_method"]
