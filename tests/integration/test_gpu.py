"""The GPU path: models on a CUDA device, the audit's features on the CPU. Skipped without a GPU (CI has
none); run on a GPU machine with ``pytest -m gpu tests/integration/test_gpu.py``.

The bench of benchmarks/configs/cpu.yaml with ``--device cuda`` failed every cell (2026-12-04, H200): the
head relearning check multiplied the model's head (on the GPU) by the features' whitening (on the CPU).
These tests hold that path and a whole run with a method of each family."""
from __future__ import annotations

import json

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_head_relearn_reads_a_head_on_the_gpu():
    from unlearnkit.metrics.lda import head_relearn

    g = torch.Generator().manual_seed(0)
    retain, shots, queries = (torch.randn(n, 6, generator=g) for n in (80, 12, 20))
    shots_y, queries_y = torch.arange(12) % 3, torch.arange(20) % 3
    head = torch.nn.Linear(6, 3)
    on_cpu = head_relearn(retain, shots, shots_y, queries, queries_y, weight=head.weight, bias=head.bias)
    cuda = head.to("cuda")
    on_gpu = head_relearn(retain, shots, shots_y, queries, queries_y, weight=cuda.weight, bias=cuda.bias)
    assert on_gpu == pytest.approx(on_cpu)


def test_run_on_the_gpu_audits_every_model(tmp_path):
    from unlearnkit.config import RunConfig
    from unlearnkit.runner import run_experiment

    methods = ["finetune", "salun", "scrub", "ssd", "ssd_mirage", "boundary_shrink", "deep_reset"]
    cfg = RunConfig(dataset="digits", forget_classes=[3], methods=methods, references=2, device="cuda",
                    recipe={"epochs": 3}, audit_config={"n_splits": 2}, out=str(tmp_path / "run"),
                    cache_dir=str(tmp_path / "cache"))
    results = run_experiment(cfg, progress=False).to_dict()
    assert results["provenance"]["device"].startswith("cuda")
    for name in ["original", *methods]:
        audit = results["models"][name]["audit"]
        assert audit and audit["verdict"], name
    json.dumps(results)  # every number came back to the CPU as plain JSON
