"""Models per minute of a forgetting-quality run with ``--jobs 1`` against ``--jobs N``, same process.

    .venv/bin/python benchmarks/fq_jobs.py [--dataset digits] [--methods finetune,gradient_ascent]
        [--runs 5] [--jobs 2] [--repeats 1]

The original is trained once into a scratch cache and copied into a fresh cache for every timed
call, so each call trains its own retrained models (the bulk of the work) and runs every method
job; nothing is reused between calls. A call is timed from ``forgetting_quality(...)`` to its
return (workers' start-up included) and its rate is the jobs it ran (each makes one model) per
minute. ``--jobs 1`` runs in this process with torch's default threads (both cores); ``--jobs N``
in N worker processes with ``cores // N`` threads each. Calls alternate (1, N, 1, N, ...) so a
slow spell of the machine falls on both. Run it on an idle machine.

The last line bounds the ratio: one retrained model (most of the work) timed in this process on all
cores' torch threads and on ``cores // N``; N workers can make at most N x t_all / t_one times the
models of one process, because ``--jobs 1`` already keeps every core busy inside torch's ops.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")

import torch  # noqa: E402

from unlearnkit.forgetting_quality import _reference, _task, forgetting_quality  # noqa: E402
from unlearnkit.runner import RunConfig  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description="forgetting-quality models per minute, --jobs 1 vs --jobs N")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--model", default="small_cnn")
    ap.add_argument("--forget-class", type=int, default=3)
    ap.add_argument("--methods", default="finetune,gradient_ascent")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    a = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="fq_jobs-"))
    try:
        base = root / "cache0"
        cfg = RunConfig(dataset=a.dataset, model=a.model, forget_classes=[a.forget_class], methods=["finetune"],
                        device="cpu")
        t0 = time.perf_counter()
        _reference("original", _task(cfg), cfg.seed, base, "cpu")
        print(f"original trained in {time.perf_counter() - t0:.1f} s (not timed below); "
              f"{os.cpu_count()} cores, torch threads {torch.get_num_threads()}")
        rates: dict[int, list[float]] = {1: [], a.jobs: []}
        for r in range(a.repeats):
            for jobs in (1, a.jobs):
                cache, out = root / f"cache-{r}-{jobs}", root / f"out-{r}-{jobs}"
                shutil.copytree(base, cache)
                t0 = time.perf_counter()
                res = forgetting_quality(dataset=a.dataset, model=a.model, forget_classes=[a.forget_class],
                                         methods=a.methods, runs=a.runs, out=out, cache_dir=cache, device="cpu",
                                         jobs=jobs, progress=False)
                wall = time.perf_counter() - t0
                n = res["provenance"]["jobs"]["run"]
                rates[jobs].append(60 * n / wall)
                print(f"--jobs {jobs}: {n} models in {wall:.1f} s = {rates[jobs][-1]:.1f} models/min")
        m1 = sum(rates[1]) / len(rates[1])
        mn = sum(rates[a.jobs]) / len(rates[a.jobs])
        print(f"models/min: --jobs 1 {m1:.1f}, --jobs {a.jobs} {mn:.1f}: ratio {mn / m1:.2f}x")
        task, threads, per_worker = _task(cfg), torch.get_num_threads(), max(1, (os.cpu_count() or 1) // a.jobs)
        times = {}
        for i, n in enumerate((threads, per_worker, threads, per_worker)):
            torch.set_num_threads(n)
            t0 = time.perf_counter()
            _reference("retrain", task, 1000 + i, base, "cpu")
            times.setdefault(n, []).append(time.perf_counter() - t0)
        torch.set_num_threads(threads)
        t_all, t_one = min(times[threads]), min(times[per_worker])
        print(f"one retrain: {t_all:.2f} s on {threads} torch threads, {t_one:.2f} s on {per_worker}: "
              f"{a.jobs} workers can make at most {a.jobs * t_all / t_one:.2f}x the models of one process")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
