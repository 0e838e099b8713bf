"""Training throughput of unlearnkit's loop vs a bare PyTorch loop, same model, tensors and process.

    .venv/bin/python benchmarks/train_throughput.py [--dataset mnist5k] [--model small_cnn] [--epochs 3]

The bare loop indexes pre-normalised tensors with a random permutation and runs forward /
cross-entropy / backward / SGD step. unlearnkit's ``fit`` does the same plus per-batch
normalisation, the learning-rate schedule, loss/accuracy bookkeeping and the progress bar.
Both skip augmentation for the headline ratio (augmentation is extra work, reported separately).
Goal: ratio >= 0.9.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")

from unlearnkit import create_model, load_dataset  # noqa: E402
from unlearnkit.loop import Recipe, fit  # noqa: E402


def bare_loop(model, x, y, epochs, batch_size, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(0)
    model.train()
    for _ in range(epochs):
        perm = torch.randperm(len(y), generator=g)
        for s in range(0, len(y), batch_size):
            idx = perm[s : s + batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="mnist5k")
    ap.add_argument("--model", default="small_cnn")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    b = load_dataset(args.dataset)
    data = b.train
    x = data.normalize(data.x)
    y = data.y
    n_img = len(y) * args.epochs

    def make():
        torch.manual_seed(0)
        return create_model(args.model, b.num_classes, b.in_channels, b.image_size)

    recipe = Recipe(lr=0.01, epochs=args.epochs, batch_size=args.batch_size, augment=False, schedule="constant")
    bare_loop(make(), x, y, 1, args.batch_size, 0.01)  # warm-up
    results = {"bare": [], "unlearnkit": [], "unlearnkit+aug": []}
    for _ in range(args.repeats):  # interleaved, best of N, so drift on a shared machine hits both
        m = make()
        t = time.perf_counter()
        bare_loop(m, x, y, args.epochs, args.batch_size, 0.01)
        results["bare"].append(n_img / (time.perf_counter() - t))
        m = make()
        t = time.perf_counter()
        fit(m, data, recipe, b.augment, seed=0, progress=False)
        results["unlearnkit"].append(n_img / (time.perf_counter() - t))
        m = make()
        t = time.perf_counter()
        fit(m, data, Recipe(**{**recipe.to_dict(), "augment": True}), b.augment, seed=0, progress=False)
        results["unlearnkit+aug"].append(n_img / (time.perf_counter() - t))
    best = {k: max(v) for k, v in results.items()}
    print(f"{args.dataset} / {args.model}, batch {args.batch_size}, {args.epochs} epochs x {len(y)} images, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for k, v in best.items():
        print(f"  {k:<15} {v:9.1f} images/s")
    print(f"ratio unlearnkit / bare = {best['unlearnkit'] / best['bare']:.3f}   (goal >= 0.9)")
    print(f"ratio unlearnkit+augmentation / bare = {best['unlearnkit+aug'] / best['bare']:.3f}")


if __name__ == "__main__":
    main()
