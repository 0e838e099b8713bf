"""Run one cell: a plain function of plain data, the same in this process, a worker process or a Ray task.

:func:`execute_cell` builds the cell's :class:`~unlearnkit.config.RunConfig`, runs it with
:func:`unlearnkit.runner.run_experiment` (so a cell's numbers are those ``unlearnkit run`` gives for
that configuration), logs to ``<cell folder>/log.txt`` and returns what the store keeps: the rows,
their metrics and audits, and the provenance. It never raises for a failing cell (the error is
returned), only for Ctrl-C. Original and retrain come from the content-addressed cache, whose file
lock makes processes that need the same model wait for one training instead of training it twice.
"""
from __future__ import annotations

import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .grid import Cell


@dataclass(frozen=True)
class Machine:
    """Where a cell's files go and what it runs on (not part of the cell's identity)."""

    out: str = "results/cells"
    cache_dir: str | None = None
    device: str = "auto"
    data_dir: str = "data"
    download: bool = False


@contextmanager
def logging_to(path: Path):
    """Send the shared console (the runner's messages) to ``path`` while a cell runs."""
    from ..progress import console

    path.parent.mkdir(parents=True, exist_ok=True)
    # rich resolves an unset file to the current sys.stderr at each write; keep it unset afterwards
    old = getattr(console, "_file", None), console.soft_wrap
    with open(path, "a") as f:
        console.file, console.soft_wrap = f, True
        try:
            yield
        finally:
            console.file, console.soft_wrap = old


def _sha256(path: str | None) -> str | None:
    if not path:
        return None
    from ..checkpoints import read_checkpoint

    return read_checkpoint(path).get("sha256")


def _entry(name: str, e: dict) -> dict:
    audit = e.get("audit")
    return {"entry": name, "metrics": e["metrics"], "audit": audit, "verdict": (audit or {}).get("verdict"),
            "runtime_s": e["metrics"].get("runtime_s"), "stop_reason": e.get("stop_reason"),
            "preset": e.get("preset"), "checkpoint": e.get("checkpoint")}


def summarize(cell: Cell, results: dict, folder: Path, started: str, wall_s: float) -> dict:
    """What the store keeps of a run_experiment result."""
    from .store import now

    models = results["models"]
    names = ["original", "retrain"] if cell.kind == "reference" else [cell.method]
    prov = results["provenance"]
    method_entry = models.get(cell.method) if cell.method else None
    return {
        "ok": True,
        "entries": [_entry(n, models[n]) for n in names],
        "task_spec": results["task"]["forget"],
        "hyperparameters": method_entry.get("hyperparameters") if method_entry else None,
        "provenance": {
            "split_hash": results["task"]["split_hash"], "original_sha256": prov["original_sha256"],
            "retrain_sha256": prov["retrain_sha256"],
            "unlearned_sha256": _sha256(method_entry.get("checkpoint")) if method_entry else None,
            "unlearnkit_version": prov["versions"]["unlearnkit"], "git_commit": prov["git_commit"],
            "torch_version": prov["versions"]["torch"], "device": prov["device"]},
        "out_dir": str(folder), "started": started, "finished": now(), "wall_s": wall_s,
    }


def execute_cell(cell: Cell, machine: Machine) -> dict:
    """Run ``cell``; returns ``{"ok": True, ...}`` (see :func:`summarize`) or ``{"ok": False, "error"}``."""
    from ..config import RunConfig
    from ..runner import run_experiment
    from .store import now

    folder = cell.folder(Path(machine.out))
    started, t0 = now(), time.perf_counter()
    try:
        with logging_to(folder / "log.txt"):
            cfg = RunConfig(**cell.config, out=str(folder), cache_dir=machine.cache_dir, device=machine.device,
                            data_dir=machine.data_dir, download=machine.download)
            results = run_experiment(cfg, progress=False, audit_original=cell.kind == "reference").to_dict()
        return summarize(cell, results, folder, started, time.perf_counter() - t0)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a failing cell is recorded, the others go on
        detail = traceback.format_exc(limit=8)
        try:
            with open(folder / "log.txt", "a") as f:
                f.write(detail)
        except OSError:
            pass
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": detail}
