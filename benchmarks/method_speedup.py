"""Each method's speedup over retraining from scratch, on the same task, measured in one process.

    .venv/bin/python benchmarks/method_speedup.py [--dataset digits] [--model small_cnn] [--methods all]
        [--forget-class 3] [--device cpu] [--amp off|bf16] [--channels-last]

The original comes from the model cache (trained once, not timed). Retraining is the ``retrain``
method with the dataset's default recipe (the same training the cached reference got), timed
before the methods and again after them; its mean is the denominator. Every method runs with its
preset (``small`` on the bundled data) and is timed by its own ``runtime_s`` (the model copy and
its training, no evaluation). Speedup = retrain time / method time; the audit is not part of it.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("UNLEARNKIT_PROGRESS", "0")

import torch  # noqa: E402

from unlearnkit import ForgetSpec, load_dataset, make_split  # noqa: E402
from unlearnkit.methods import METHODS, preset_for  # noqa: E402
from unlearnkit.methods.names import method_names  # noqa: E402
from unlearnkit.runtime import (
    Runtime,  # noqa: E402
    resolve_device,  # noqa: E402
)
from unlearnkit.training import default_recipe, reference_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description="method time vs retraining, same task, same process")
    ap.add_argument("--dataset", default="digits")
    ap.add_argument("--model", default="small_cnn")
    ap.add_argument("--forget-class", type=int, default=3)
    ap.add_argument("--methods", default="all")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", default="off")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    device = resolve_device(a.device)
    rt = Runtime(amp=a.amp, channels_last=a.channels_last)
    bundle = load_dataset(a.dataset)
    split = make_split(bundle, ForgetSpec(classes=(a.forget_class,)))
    recipe = default_recipe(bundle.name, a.model)
    original = reference_model("original", split, a.model, recipe, seed=0, device=device, progress=False).model
    preset = preset_for(bundle.name, a.model)
    names = [n for n in method_names(a.methods.split(",")) if n != "retrain"]
    retrain = METHODS.get("retrain")(recipe=recipe.to_dict())

    def run(method) -> float:
        res = method.unlearn(original, split, original=original, device=device, seed=0, runtime=rt)
        return res.runtime_s

    t_retrain = [run(retrain)]
    times = {n: run(METHODS.get(n).from_preset(preset, bundle.name)) for n in names}
    t_retrain.append(run(retrain))
    t_ref = sum(t_retrain) / 2
    print(f"{bundle.name} / {a.model}, forget class {a.forget_class}, device {device}, amp {rt.amp}, "
          f"torch threads {torch.get_num_threads()}; retrain ({recipe.epochs} epochs on {len(split.train_retain)} "
          f"images) {t_retrain[0]:.2f}s before, {t_retrain[1]:.2f}s after the methods")
    print(f"{'method':18s} {'time s':>8s} {'speedup':>8s}")
    for n, t in sorted(times.items(), key=lambda kv: kv[1]):
        print(f"{n:18s} {t:8.2f} {t_ref / t:7.1f}x")


if __name__ == "__main__":
    main()
