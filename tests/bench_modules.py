"""``benchmarks/<name>.py`` imported in tests (benchmarks is not a package)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def benchmark_module(name: str, *, register: bool = False):
    """``benchmarks/<name>.py`` as a module; ``register``: also as ``sys.modules[name]`` (a module that its
    siblings import by name)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
