"""Training throughput of unlearnkit's loop vs a bare PyTorch loop, same model, tensors and process.

    .venv/bin/python benchmarks/train_throughput.py [--dataset mnist5k] [--model small_cnn] [--epochs 3]
    .venv/bin/python benchmarks/train_throughput.py --dataset synthetic --n 50000 --model resnet18 \\
        --batch-size 256 --device cuda --amp bf16 --channels-last [--compile] [--inference]

The bare loop indexes pre-normalised tensors (on the device) with a random permutation and runs
forward / cross-entropy / backward / SGD step, with the same fast-path options (bf16 autocast,
channels_last, torch.compile). unlearnkit's ``fit`` does the same plus per-batch normalisation,
the learning-rate schedule, loss/accuracy bookkeeping and the progress bar, under a
``Runtime`` with those options. Both skip augmentation for the headline ratio (augmentation is
extra work, reported separately). ``--dataset synthetic`` is CIFAR-shaped random uint8 images
(3x32x32, 10 classes: throughput only, nothing to learn); no download. ``--inference`` also
times forward passes: bare, and unlearnkit's evaluation pass (``extract``: float32, logits to the
CPU). Goal: ratio >= 0.9.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")

from unlearnkit import create_model, load_dataset  # noqa: E402
from unlearnkit.data.arrays import ArrayData, Augment  # noqa: E402
from unlearnkit.loop import Recipe, fit  # noqa: E402
from unlearnkit.models.features import LOGITS, extract  # noqa: E402
from unlearnkit.runtime import (
    Runtime,  # noqa: E402
    resolve_device,  # noqa: E402
)

CIFAR_STATS = ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616))


def synthetic(n: int) -> tuple[ArrayData, Augment, int]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
    return ArrayData(x, torch.randint(0, 10, (n,), generator=g), *CIFAR_STATS), Augment(4, True), 10


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare_loop(model, x, y, epochs, batch_size, lr, rt: Runtime, device):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    fwd = torch.compile(model) if rt.compile else model
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=g).to(device)
        for s in range(0, len(y), batch_size):
            idx = perm[s : s + batch_size]
            with rt.autocast(device):
                loss = F.cross_entropy(fwd(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    sync(device)


@torch.no_grad()
def bare_inference(model, x, batch_size, rt: Runtime, device):
    model.eval()
    for s in range(0, len(x), batch_size):
        with rt.autocast(device):
            model(x[s : s + batch_size])
    sync(device)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mnist5k", help="a registered dataset, or synthetic (CIFAR-shaped)")
    ap.add_argument("--n", type=int, default=50000, help="images of --dataset synthetic")
    ap.add_argument("--model", default="small_cnn")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    ap.add_argument("--amp", default="off", help="off | bf16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--inference", action="store_true", help="also time forward passes")
    args = ap.parse_args()
    device = resolve_device(args.device)
    rt = Runtime(amp=args.amp, channels_last=args.channels_last, compile=args.compile)
    if args.dataset == "synthetic":
        data, augment, k = synthetic(args.n)
    else:
        b = load_dataset(args.dataset)
        data, augment, k = b.train, b.augment, b.num_classes
    c, h, _ = data.shape
    x = rt.input(data.normalize(data.x).to(device))
    y = data.y.to(device)
    n_img = len(y) * args.epochs

    def make():
        torch.manual_seed(0)
        m = create_model(args.model, k, c, h).to(device)
        return m.to(memory_format=torch.channels_last) if rt.channels_last else m

    def timed(fn) -> float:
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - t

    recipe = Recipe(lr=0.01, epochs=args.epochs, batch_size=args.batch_size, augment=False, schedule="constant")
    with rt.backend(device):
        warm = make()
        bare_loop(warm, x, y, 1, args.batch_size, 0.01, rt, device)  # warm-up (allocator, kernels, compile)
        fit(make(), data, Recipe(**{**recipe.to_dict(), "epochs": 1}), augment, seed=0, device=device,
            progress=False, runtime=rt)
        results = {"bare": [], "unlearnkit": [], "unlearnkit+aug": []}
        for _ in range(args.repeats):  # interleaved, best of N, so drift on a shared machine hits both
            m = make()
            results["bare"].append(n_img / timed(lambda m=m: bare_loop(m, x, y, args.epochs, args.batch_size, 0.01,
                                                                       rt, device)))
            m = make()
            results["unlearnkit"].append(n_img / timed(lambda m=m: fit(m, data, recipe, augment, seed=0,
                                                                       device=device, progress=False, runtime=rt)))
            m = make()
            aug_recipe = Recipe(**{**recipe.to_dict(), "augment": True})
            results["unlearnkit+aug"].append(n_img / timed(lambda m=m, r=aug_recipe: fit(
                m, data, r, augment, seed=0, device=device, progress=False, runtime=rt)))
        if args.inference:
            bs = 4 * args.batch_size
            bare_inference(warm, x, bs, rt, device)
            results["inference bare"] = [len(y) / timed(lambda: bare_inference(warm, x, bs, rt, device))
                                         for _ in range(args.repeats)]
            results["inference extract"] = [len(y) / timed(lambda: extract(warm, data, [LOGITS], bs, device))
                                            for _ in range(args.repeats)]
    best = {k: max(v) for k, v in results.items()}
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(f"{args.dataset} / {args.model}, batch {args.batch_size}, {args.epochs} epochs x {len(y)} images, "
          f"device {device}{gpu}, amp {rt.amp}, channels_last {rt.channels_last}, compile {rt.compile}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for k, v in best.items():
        print(f"  {k:<18} {v:9.1f} images/s")
    print(f"ratio unlearnkit / bare = {best['unlearnkit'] / best['bare']:.3f}   (goal >= 0.9)")
    print(f"ratio unlearnkit+augmentation / bare = {best['unlearnkit+aug'] / best['bare']:.3f}")
    if args.inference:
        print(f"ratio inference extract / bare = {best['inference extract'] / best['inference bare']:.3f}")


if __name__ == "__main__":
    main()
