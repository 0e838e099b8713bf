"""LocalExecutor's workers: forked on Linux (no second torch import), one torch thread each, results back."""
from __future__ import annotations

import os
import sys

import pytest
import torch

from unlearnkit import runtime
from unlearnkit.bench.cell import Machine
from unlearnkit.bench.executors import LocalExecutor, start_method

MACHINE = Machine(out="unused", cache_dir=None, device="cpu", data_dir="data", download=False)
_LOADED_HERE = {"token": None}  # set in the parent after import: a forked worker sees it, a spawned one not


def _probe(item: int, machine: Machine) -> dict:
    return {"ok": True, "item": item, "pid": os.getpid(), "threads": torch.get_num_threads(),
            "token": _LOADED_HERE["token"], "progress": os.environ.get("UNLEARNKIT_PROGRESS")}


def test_one_job_runs_in_this_process():
    events = list(LocalExecutor(1).run([1, 2], MACHINE, _probe))
    assert [(e, c) for e, c, _ in events] == [("start", 1), ("done", 1), ("start", 2), ("done", 2)]
    assert {r["pid"] for _, _, r in events if r} == {os.getpid()}


def test_a_gpu_machine_spawns_its_workers(monkeypatch):
    """A forked child cannot use CUDA after the parent touched it: any GPU device file means spawn."""
    monkeypatch.setattr(runtime, "gpu_device_nodes", lambda: ["/dev/nvidia0"])
    assert start_method() == "spawn"
    monkeypatch.setattr(runtime, "gpu_device_nodes", lambda: [])
    assert start_method() == ("fork" if sys.platform.startswith("linux") else "spawn")


@pytest.mark.skipif(not sys.platform.startswith("linux") or bool(runtime.gpu_device_nodes()),
                    reason="workers are forked on Linux machines without a GPU only")
def test_workers_are_forked_with_one_thread_and_see_this_process_memory():
    assert start_method() == "fork"
    _LOADED_HERE["token"] = "set-in-parent"
    try:
        ex = LocalExecutor(2)
        ex.start()
        done = [r for e, _, r in ex.run(list(range(6)), MACHINE, _probe) if e == "done"]
    finally:
        _LOADED_HERE["token"] = None
    assert sorted(r["item"] for r in done) == list(range(6))
    assert os.getpid() not in {r["pid"] for r in done} and len({r["pid"] for r in done}) <= 2
    assert {r["threads"] for r in done} == {max(1, (os.cpu_count() or 1) // 2)}
    assert {r["token"] for r in done} == {"set-in-parent"}  # forked: nothing imported or loaded again
    assert {r["progress"] for r in done} == {"0"}
