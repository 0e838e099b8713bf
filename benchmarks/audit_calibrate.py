"""Reproduce the measurements behind AuditConfig's defaults: ``python benchmarks/audit_calibrate.py``.

Trains (through the model cache) the original and ``--seeds`` retrained references of
``small_cnn`` on a dataset with one class forgotten, then audits two constructed models whose
truth is known (:mod:`unlearnkit.audit.constructed`):

* **suppressed**: the original with the forgotten class masked at the output (head row zeroed,
  bias -1e4): it predicts the class never, its representation is exactly the original's;
* **erased**: a retrained model of another seed (it never saw the forget set);

against retrain seed 0 alone and, for the multi-reference margins, against seeds 0 and 1. It
prints, per layer and audit data, ΔLPR and the separability ratio with their intervals, and the
verdicts. It trains models: an experiment, kept out of the audit package.
"""
from __future__ import annotations

import argparse
import time

import torch

from unlearnkit.audit import AuditConfig, audit
from unlearnkit.audit.constructed import masked_head
from unlearnkit.data.datasets import load_dataset
from unlearnkit.data.splits import ForgetSpec, make_split
from unlearnkit.training import default_recipe, reference_model


def _row(tag: str, rep) -> list[str]:
    lines = []
    for data, rs in rep.layers.items():
        for r in rs:
            if not r.probed:
                continue
            d, s = r.delta_auroc, r.separability_ratio
            lines.append(f"{tag:22s} {data:5s} {r.layer:12s} "
                         f"ΔAUROC {d.value:+6.2f} [{d.low:+6.2f},{d.high:+6.2f}]  "
                         f"sep {s.value:5.2f} [{s.low:5.2f},{s.high:5.2f}]  ΔLPR {r.delta_lpr.value:+6.2f}  "
                         f"CKA_o {r.cka_original:.3f} CKA_r {r.cka_retrain:.3f}  "
                         f"tol {r.auroc_margin:.1f}/{r.separability_margin:.2f}")
    for name, res in rep.resurfacing.items():
        if res.applicable:
            lines.append(f"{tag:22s} {name}: after {res.forget_acc_after:.1f} "
                         f"vs retrain {res.retrain_forget_acc_after:.1f}"
                         f"{'' if res.in_verdict else ' (reported only)'}")
    return lines


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="digits")
    p.add_argument("--forget-class", type=int, default=3)
    p.add_argument("--seeds", type=int, default=4, help="retrained references (seeds 0..N-1)")
    p.add_argument("--multi", action="store_true", help="also audit against references 0 and 1")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    bundle = load_dataset(a.dataset)
    split = make_split(bundle, ForgetSpec(classes=(a.forget_class,)))
    recipe = default_recipe(bundle.name, "small_cnn")

    def ref(kind: str, seed: int):
        return reference_model(kind, split, "small_cnn", recipe, seed=seed, progress=False).model

    original = ref("original", 0)
    refs = [ref("retrain", i) for i in range(a.seeds)]
    cfg = AuditConfig()
    cases = [("suppressed masked-head", masked_head(original, (a.forget_class,)), [refs[0]])]
    cases += [(f"erased retrain s{i}", refs[i], [refs[0]]) for i in range(1, a.seeds)]
    if a.multi and a.seeds > 2:
        cases += [("suppressed vs s0+s1", masked_head(original, (a.forget_class,)), refs[:2])]
        cases += [(f"erased s{i} vs s0+s1", refs[i], refs[:2]) for i in range(2, a.seeds)]
    for tag, model, rs in cases:
        t0 = time.perf_counter()
        rep = audit(original, model, rs, split, config=cfg)
        dt = time.perf_counter() - t0
        print(f"== {tag}: {rep.verdict} (rests on {rep.rests_on}; {dt:.0f}s)", flush=True)
        for e in rep.evidence:
            print("   ", e)
        print("\n".join(_row(tag, rep)), flush=True)


if __name__ == "__main__":
    main()
