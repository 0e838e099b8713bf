"""K references trained together (batched across the models) against K trained one after another.

    .venv/bin/python benchmarks/batched_references.py [--datasets digits,mnist5k] [--model small_cnn] [--k 8]
        [--epochs 3] [--threads N] [--device cpu] [--out results.json]

Per dataset: the retrains of the audit (class 3 forgotten, the dataset's default recipe for the model, cut
to ``--epochs`` epochs: the time per epoch does not change with the number of epochs), seeds 1..K,
trained one after another with ``unlearnkit.loop.fit`` and then together with
``unlearnkit.batched.fit_batched``, in this one process, after a short warm-up of both (the first
convolution of a process pays for its kernels' set-up). Prints the wall times and the ratio
(sequential / batched), and as a check that the same models were trained, the largest weight difference
between the two trainings of seed 1 (float rounding, amplified by training; see unlearnkit/batched.py) and
both groups' mean test accuracy. ``--engine`` picks the batched engine (``wide``: grouped layers;
``vmap``: stacked weights; default: the one ``fit_batched`` picks). Targets on an idle machine: >= 3x on
digits, >= 1.5x on mnist5k (small_cnn, K = 8). Timings on a loaded machine mean nothing: run it alone.
Each row also carries the **ceiling**: one model's training step at the recipe's batch size B against the same
model's step at K x B rows, K t(B) / t(K B): what batching K models into one call could reach at best on this
device (it removes per-call overhead; the arithmetic per row stays). ``--ceiling-only`` measures only that.
Like ``unlearnkit`` (whose ``run --references K`` trains them), it first lets malloc reuse freed memory
(``tune_cpu_allocator``); ``--default-malloc`` leaves glibc's malloc as it is, where every activation above
32 MiB (a small CNN's at K x 128 mnist5k rows) is a fresh ``mmap`` faulted in page by page at every step.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace

import torch

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")

from unlearnkit import ForgetSpec, create_model, load_dataset, make_split  # noqa: E402
from unlearnkit.batched import Stack, Wide, batch_support, engine_for, fit_batched  # noqa: E402
from unlearnkit.loop import fit  # noqa: E402
from unlearnkit.runtime import resolve_device  # noqa: E402
from unlearnkit.training import default_recipe  # noqa: E402

TARGETS = {"digits": 3.0, "mnist5k": 1.5}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(model: str, bundle, seed: int) -> torch.nn.Module:
    """The model a training of ``seed`` starts from (as ``training.reference_model`` builds it)."""
    torch.manual_seed(seed)
    return create_model(model, num_classes=bundle.num_classes, in_channels=bundle.in_channels,
                        image_size=bundle.image_size)


def test_accuracy(model: torch.nn.Module, part, device: torch.device) -> float:
    model.eval()
    correct = 0
    with torch.no_grad():
        for xb, yb in part.batches(512, device=device):
            correct += int((model(xb).argmax(1).cpu() == yb.cpu()).sum())
    return 100.0 * correct / len(part)


def timed(train, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    train()
    sync(device)
    return time.perf_counter() - t0


def step_time(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device, steps: int) -> float:
    """Seconds per training step (forward, backward, SGD with momentum) of ``model`` on the batch (x, y)."""
    import torch.nn.functional as F

    model.to(device).train()
    x, y = x.to(device), y.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    return timed(lambda: [step() for _ in range(steps)], device) / steps


def ceiling(args, bundle, data, recipe, device: torch.device) -> dict:
    """What any batching across K models could at best reach here: one model's step at the recipe's batch size B
    against its step at K x B rows (the same kernels, K times the work per call): K t(B) / t(K B). Batching K
    models removes per-call overhead at best; it does not make the arithmetic of each row cheaper."""
    b, k = recipe.batch_size, args.k
    rows = torch.arange(min(len(data), k * b))
    x, y = data.normalize(data.x[rows]), data.y[rows]
    steps = max(3, 200 // k)
    t_one = step_time(build(args.model, bundle, 0), x[:b], y[:b], device, steps * k)
    t_k = step_time(build(args.model, bundle, 0), x, y, device, steps)
    per_row_one, per_row_k = t_one / b, t_k / len(x)  # len(x) = K B unless the data hold fewer rows
    return {"step_ms_batch": 1e3 * t_one, "step_ms_k_batch": 1e3 * t_k, "rows_k_batch": len(x),
            "ceiling": per_row_one / per_row_k}


def one_dataset(name: str, args, device: torch.device) -> dict:
    bundle = load_dataset(name)
    split = make_split(bundle, ForgetSpec(classes=(3,)))
    data, aug = split.retrain_data, bundle.augment
    recipe = replace(default_recipe(name, args.model), epochs=args.epochs)
    seeds = list(range(1, args.k + 1))
    why = batch_support(build(args.model, bundle, 0), data.normalize(data.x[:2]))
    if why is not None:
        raise SystemExit(f"{args.model} cannot be batched: {why}")
    bound = ceiling(args, bundle, data, recipe, device)
    if args.ceiling_only:
        return {"dataset": name, "model": args.model, "k": args.k, "batch_size": recipe.batch_size, **bound}
    engine = {"wide": Wide, "vmap": Stack}.get(args.engine) or \
        engine_for([build(args.model, bundle, s) for s in (0, 1)], data.normalize(data.x[:2]))[0]
    warm = data.subset(torch.arange(min(len(data), 2 * recipe.batch_size)))
    fit(build(args.model, bundle, 0), warm, replace(recipe, epochs=1), aug, device=device, progress=False)
    fit_batched([build(args.model, bundle, s) for s in seeds], warm, replace(recipe, epochs=1), aug, seeds=seeds,
                device=device, progress=False, engine=engine)
    sequential = [build(args.model, bundle, s) for s in seeds]
    t_seq = timed(lambda: [fit(m, data, recipe, aug, seed=s, device=device, progress=False)
                           for m, s in zip(sequential, seeds)], device)
    batched = [build(args.model, bundle, s) for s in seeds]
    t_bat = timed(lambda: fit_batched(batched, data, recipe, aug, seeds=seeds, device=device, progress=False,
                                      engine=engine), device)
    diff = max(float((a - b).abs().max()) for a, b in zip(sequential[0].state_dict().values(),
                                                         batched[0].state_dict().values()) if a.is_floating_point())
    return {"dataset": name, "model": args.model, "engine": engine.name, "k": args.k, "epochs": args.epochs,
            "n_train": len(data),
            "batch_size": recipe.batch_size, "sequential_s": t_seq, "batched_s": t_bat, "ratio": t_seq / t_bat,
            "target": TARGETS.get(name), "seed1_max_weight_diff": diff,
            "test_acc_sequential": statistics.mean(test_accuracy(m, split.test, device) for m in sequential),
            "test_acc_batched": statistics.mean(test_accuracy(m, split.test, device) for m in batched), **bound}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default="digits,mnist5k")
    ap.add_argument("--model", default="small_cnn")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--engine", choices=("auto", "wide", "vmap"), default="auto",
                    help="the batched engine (auto: the one fit_batched picks)")
    ap.add_argument("--ceiling-only", action="store_true", help="only the ceiling: one model's step at the batch "
                                                                   "size against K times it (seconds)")
    ap.add_argument("--default-malloc", action="store_true",
                    help="leave glibc's malloc as it is (the CLI calls tune_cpu_allocator; see docs/performance.md)")
    ap.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = ap.parse_args()
    if args.k < 2 or args.epochs < 1:
        raise SystemExit("error: --k must be >= 2 and --epochs >= 1")
    from unlearnkit.runtime import tune_cpu_allocator

    tuned = False if args.default_malloc else tune_cpu_allocator()  # as `unlearnkit` does, before any tensor
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    rows = [one_dataset(name.strip(), args, device) for name in args.datasets.split(",") if name.strip()]
    for r in rows:
        r["malloc_tuned"] = tuned
    print(f"K references trained together vs one after another ({device}, {torch.get_num_threads()} threads, "
          f"malloc {'tuned' if tuned else 'as glibc has it'})")
    for r in rows:
        print(f"{r['dataset']:10} K={r['k']}: one model's step {r['step_ms_batch']:.1f} ms at batch {r['batch_size']}, "
              f"{r['step_ms_k_batch']:.1f} ms at {r['rows_k_batch']} rows: batching can reach at most "
              f"{r['ceiling']:.2f}x here")
    if not args.ceiling_only:
        print(f"{'dataset':10} {'engine':6} {'K':>3} {'epochs':>6} {'sequential s':>13} {'batched s':>10} "
              f"{'ratio':>6} {'target':>7} {'test acc seq/bat':>17} {'seed-1 diff':>11}")
    for r in [] if args.ceiling_only else rows:
        target = f">={r['target']:g}x" if r["target"] else ""
        print(f"{r['dataset']:10} {r['engine']:6} {r['k']:>3} {r['epochs']:>6} {r['sequential_s']:>13.2f} "
              f"{r['batched_s']:>10.2f} {r['ratio']:>5.2f}x {target:>7} "
              f"{r['test_acc_sequential']:>8.2f}/{r['test_acc_batched']:<8.2f} {r['seed1_max_weight_diff']:>11.2e}")
    if args.out:
        from pathlib import Path

        from unlearnkit.checkpoints import atomic_write_text

        atomic_write_text(Path(args.out), json.dumps({"device": str(device), "threads": torch.get_num_threads(),
                                                      "torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
